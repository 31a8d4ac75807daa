//! Retention: a `Completed` Backup with `spec.retentionPeriod` expires at its completion time
//! plus the period, as in KubeBlocks, and is then deleted; under `deletionPolicy: Delete` its
//! repo data goes with it, through the deletion finalizer.
//!
//! Retention never deletes a Cluster's newest `Completed` Backup, nor its newest verified one
//! (condition `Verified=True`), however old: expiring every backup of a Cluster whose schedule
//! stopped would leave nothing to restore. Backups are grouped by `lifeboat.io/cluster-uid`, the
//! label Lifeboat puts on the Backups it runs; one without it was not run by Lifeboat, which
//! cannot tell whose newest it is, so it is kept and the reason given. [`plan`] is pure; [`apply`]
//! reads the group, deletes what expired and records the rest.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, BackupStatus, RestorePhase};
use lifeboat_api::{Backup, Restore, labels};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::{kubeapi, ownership};

/// Annotation recording why an expired Backup is kept, so that the reason is told once.
pub const KEPT: &str = "lifeboat.io/retention-kept";
/// The condition a restore drill sets on a Backup it proved restorable.
pub const VERIFIED: &str = "Verified";
/// How often a kept Backup is looked at again: a newer one completing releases it.
const RECHECK: Duration = Duration::from_secs(300);
/// The longest wait before a Backup's expiry is looked at again, so that a changed clock or a
/// changed period is noticed.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// Parses a retention period as KubeBlocks writes it: days, hours and minutes, such as `7d`,
/// `12h` or `1d12h30m`. The error names the field and the value.
pub fn parse_period(s: &str) -> std::result::Result<Duration, String> {
    match crate::duration::parse_units(s, &[('d', 86_400), ('h', 3_600), ('m', 60)]) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "spec.retentionPeriod {s:?} is not a non-zero period of days, hours and minutes \
             (such as 7d, 12h or 1d12h30m)"
        )),
    }
}

/// When a Backup expires: `None` when it never does (no period, or not `Completed`).
pub fn expiration(b: &Backup) -> Option<std::result::Result<Timestamp, String>> {
    let period = b.spec.retention_period.as_deref()?;
    let st = b.status.as_ref()?;
    if st.phase != Some(BackupPhase::Completed) {
        return None;
    }
    let done = st.completion_timestamp.as_ref()?.0;
    Some(parse_period(period).and_then(|p| {
        let p = SignedDuration::try_from(p).map_err(|e| e.to_string())?;
        done.checked_add(p)
            .map_err(|_| format!("spec.retentionPeriod {period:?} is too long"))
    }))
}

/// When a Backup expires, when it does and its period parses.
fn expires_at(b: &Backup) -> Option<Timestamp> {
    expiration(b).and_then(|e| e.ok())
}

/// What retention does with one Backup.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It has no retention period, or is not `Completed`.
    Forever,
    /// It expires at this time.
    Until(Timestamp),
    /// It has expired and goes.
    Delete,
    /// It has expired but stays; why.
    Kept(String),
}

fn completed(b: &Backup) -> Option<Timestamp> {
    let st = b.status.as_ref()?;
    (st.phase == Some(BackupPhase::Completed) && b.meta().deletion_timestamp.is_none())
        .then_some(())?;
    st.completion_timestamp.as_ref().map(|t| t.0)
}

fn verified(st: &BackupStatus) -> bool {
    st.conditions
        .iter()
        .any(|c| c.type_ == VERIFIED && c.status == "True")
}

/// The newest of `group` that pass `keep`, by completion time and then name, so that every
/// reconcile picks the same one.
fn newest(group: &[Backup], keep: impl Fn(&Backup) -> bool) -> Option<&Backup> {
    group
        .iter()
        .filter(|b| keep(b))
        .filter_map(|b| completed(b).map(|t| (t, b.name_any(), b)))
        .max_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)))
        .map(|(_, _, b)| b)
}

/// Judges `b`, one of `group` (the Backups carrying the same Cluster UID, `b` included), at
/// `now`. `cluster` names the Cluster in reasons.
pub fn plan(b: &Backup, group: &[Backup], cluster: &str, now: Timestamp) -> Verdict {
    let expires = match expiration(b) {
        None => return Verdict::Forever,
        Some(Err(why)) => return Verdict::Kept(why),
        Some(Ok(t)) => t,
    };
    if now < expires {
        return Verdict::Until(expires);
    }
    if b.meta().deletion_timestamp.is_some() {
        return Verdict::Forever;
    }
    let Some(uid) = ownership::label(b.meta(), labels::CLUSTER_UID) else {
        return Verdict::Kept(format!(
            "it expired at {expires} but carries no {} label, so Lifeboat cannot tell whose \
             newest backup it is",
            labels::CLUSTER_UID
        ));
    };
    let same = |o: &Backup| ownership::labelled(o.meta(), labels::CLUSTER_UID, uid);
    let is_b = |o: Option<&Backup>| o.is_some_and(|o| o.uid().is_some() && o.uid() == b.uid());
    if is_b(newest(group, same)) {
        return Verdict::Kept(format!(
            "it expired at {expires} but is the newest Completed Backup of Cluster {cluster}"
        ));
    }
    if is_b(newest(group, |o| {
        same(o) && o.status.as_ref().is_some_and(verified)
    })) {
        return Verdict::Kept(format!(
            "it expired at {expires} but is the newest verified Backup of Cluster {cluster}"
        ));
    }
    Verdict::Delete
}

/// A Restore still reading Backup `b`, of `restores`: an expired Backup is not deleted from under
/// a restore that needs it.
pub fn reader(b: &Backup, restores: &[Restore]) -> Option<String> {
    let ns = b.namespace().unwrap_or_default();
    let name = b.name_any();
    restores
        .iter()
        .find(|r| {
            r.spec.backup.name == name
                && r.spec.backup.namespace == ns
                && !matches!(
                    r.status.as_ref().and_then(|s| s.phase),
                    Some(RestorePhase::Completed | RestorePhase::Failed)
                )
        })
        .map(|r| format!("{}/{}", r.namespace().unwrap_or_default(), r.name_any()))
}

/// Applies retention to Completed Backup `b`: records its expiration, deletes it once expired
/// unless it is protected, and says once why an expired one is kept. Older Backups of its
/// Cluster that were kept only for being the newest are released here too, so that they go as
/// soon as a newer one completes.
pub async fn apply(b: &Backup, ctx: &Context) -> Result<Action> {
    let ns = b.namespace().unwrap_or_default();
    // Every Completed Backup passes here, after a restart too, so the freshness gauge is whole
    // again as soon as the watch has listed them.
    if let (Some(cluster), Some(done)) = (
        ownership::label(b.meta(), labels::INSTANCE),
        b.status
            .as_ref()
            .and_then(|s| s.completion_timestamp.as_ref()),
    ) {
        ctx.metrics
            .backup_succeeded(&ns, cluster, done.0.as_second());
        if let Some(at) = super::drill::verified_at(b) {
            ctx.metrics.backup_verified(&ns, cluster, at.as_second());
        }
    }
    let expires = expires_at(b);
    let mut st = b.status.clone().unwrap_or_default();
    if st.expiration.as_ref().map(|t| t.0) != expires {
        st.expiration = expires.map(Time);
        super::controller::write_status(ctx, b, &st).await?;
    }
    let group: Vec<Backup> = match ownership::label(b.meta(), labels::CLUSTER_UID) {
        Some(uid) => {
            kubeapi::list(&ctx.client, &ns, &format!("{}={uid}", labels::CLUSTER_UID)).await?
        }
        None => Vec::new(),
    };
    let cluster = ownership::label(b.meta(), labels::INSTANCE)
        .map(|c| format!("{ns}/{c}"))
        .unwrap_or_else(|| "(unnamed)".into());
    let now = Timestamp::now();
    for o in group
        .iter()
        .filter(|o| o.uid() != b.uid() && o.annotations().contains_key(KEPT))
    {
        if plan(o, &group, &cluster, now) == Verdict::Delete {
            expire(ctx, o).await?;
        }
    }
    match plan(b, &group, &cluster, now) {
        Verdict::Forever => Ok(Action::await_change()),
        Verdict::Until(t) => {
            let wait = now.duration_until(t).unsigned_abs() + Duration::from_secs(1);
            Ok(Action::requeue(wait.min(LONGEST_WAIT)))
        }
        Verdict::Kept(why) => {
            keep(ctx, b, why).await?;
            Ok(Action::requeue(RECHECK))
        }
        Verdict::Delete => {
            expire(ctx, b).await?;
            Ok(Action::await_change())
        }
    }
}

/// Tells once, in an event and an annotation, why expired Backup `b` stays.
async fn keep(ctx: &Context, b: &Backup, why: String) -> Result<()> {
    if b.annotations().get(KEPT) == Some(&why) {
        return Ok(());
    }
    let name = b.name_any();
    let ns = b.namespace().unwrap_or_default();
    ctx.event(
        b,
        EventType::Normal,
        "RetentionKept",
        "Retention",
        format!("Backup {ns}/{name} is kept: {why}"),
    )
    .await;
    let patch = serde_json::json!({"metadata": {"uid": b.uid(), "annotations": {KEPT: why}}});
    Api::<Backup>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(
            "recording retention on",
            format!("Backup {ns}/{name}"),
        ))?;
    Ok(())
}

/// Deletes expired Backup `b`, unless a restore still reads it; the deletion finalizer removes
/// its data first under `Delete`.
async fn expire(ctx: &Context, b: &Backup) -> Result<()> {
    let name = b.name_any();
    let ns = b.namespace().unwrap_or_default();
    let restores = Api::<Restore>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing", "Restores"))?;
    if let Some(r) = reader(b, &restores.items) {
        return keep(
            ctx,
            b,
            format!("it expired, but Restore {r} is still reading it"),
        )
        .await;
    }
    let at = expires_at(b).map_or_else(|| "?".into(), |t| t.to_string());
    ctx.event(
        b,
        EventType::Normal,
        "RetentionExpired",
        "Retention",
        format!(
            "Backup {ns}/{name} expired at {at} (spec.retentionPeriod {:?} after its completion) \
             and is deleted{}",
            b.spec.retention_period.as_deref().unwrap_or_default(),
            if super::deletion::owns_data(b) {
                ", with its data in the repo"
            } else {
                "; its data stays in the repo (deletionPolicy Retain)"
            }
        ),
    )
    .await;
    // The UID as precondition: a Backup created again under this name meanwhile is not the one
    // that expired.
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: b.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match Api::<Backup>::namespaced(ctx.client.clone(), &ns)
        .delete(&name, &dp)
        .await
    {
        Ok(_) => {}
        // Gone already, or another Backup now holds the name.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return Ok(()),
        Err(e) => {
            return Err(Error::kube(
                "deleting expired",
                format!("Backup {ns}/{name}"),
            )(e));
        }
    }
    Metrics::outcome(&ctx.metrics.backups, "expired");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn backup(
        name: &str,
        uid_label: Option<&str>,
        done: Option<&str>,
        period: Option<&str>,
    ) -> Backup {
        let mut b: Backup = serde_json::from_value(json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"backupPolicyName": "p", "backupMethod": "datafile"}
        }))
        .expect("backup");
        if let Some(u) = uid_label {
            b.metadata.labels = Some([(labels::CLUSTER_UID.to_owned(), u.to_owned())].into());
        }
        b.spec.retention_period = period.map(str::to_owned);
        b.status = Some(BackupStatus {
            phase: Some(if done.is_some() {
                BackupPhase::Completed
            } else {
                BackupPhase::Running
            }),
            completion_timestamp: done.map(|d| Time(at(d))),
            ..Default::default()
        });
        b
    }

    fn verify(mut b: Backup) -> Backup {
        if let Some(st) = b.status.as_mut() {
            st.conditions.push(Condition {
                type_: VERIFIED.into(),
                status: "True".into(),
                reason: "DrillPassed".into(),
                message: String::new(),
                last_transition_time: Time(at("2026-12-01T00:00:00Z")),
                observed_generation: None,
            });
        }
        b
    }

    #[test]
    fn periods_are_days_hours_and_minutes_and_bad_ones_name_the_field() {
        assert_eq!(parse_period("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_period("1d12h30m"), Ok(Duration::from_secs(131_400)));
        assert_eq!(parse_period("1m"), Ok(Duration::from_secs(60)));
        for bad in ["", "0m", "7", "d", "7s", "99999999999999999999d"] {
            let e = parse_period(bad).expect_err(bad);
            assert!(e.starts_with("spec.retentionPeriod"), "{bad}: {e}");
        }
    }

    #[test]
    fn expiry_counts_from_completion_and_only_completed_backups_expire() {
        let b = backup("a", Some("c1"), Some("2026-12-01T10:00:00Z"), Some("1d"));
        assert_eq!(expiration(&b), Some(Ok(at("2026-12-02T10:00:00Z"))));
        assert_eq!(expiration(&backup("r", Some("c1"), None, Some("1d"))), None);
        assert_eq!(
            expiration(&backup("f", Some("c1"), Some("2026-12-01T10:00:00Z"), None)),
            None
        );
    }

    #[test]
    fn an_expired_backup_goes_unless_it_is_the_newest_completed_or_verified() {
        let old = backup("old", Some("c1"), Some("2026-12-01T10:00:00Z"), Some("1h"));
        let mid = verify(backup(
            "mid",
            Some("c1"),
            Some("2026-12-01T11:00:00Z"),
            Some("1h"),
        ));
        let new = backup("new", Some("c1"), Some("2026-12-01T12:00:00Z"), Some("1h"));
        let running = backup("running", Some("c1"), None, Some("1h"));
        let group = vec![old.clone(), mid.clone(), new.clone(), running];
        let now = at("2026-12-01T20:00:00Z");
        assert_eq!(plan(&old, &group, "ns/c", now), Verdict::Delete);
        match plan(&new, &group, "ns/c", now) {
            Verdict::Kept(why) => assert!(
                why.contains("newest Completed Backup of Cluster ns/c"),
                "{why}"
            ),
            v => panic!("the newest Completed went: {v:?}"),
        }
        match plan(&mid, &group, "ns/c", now) {
            Verdict::Kept(why) => assert!(why.contains("newest verified"), "{why}"),
            v => panic!("the newest verified went: {v:?}"),
        }
        assert_eq!(
            plan(&old, &group, "ns/c", at("2026-12-01T10:30:00Z")),
            Verdict::Until(at("2026-12-01T11:00:00Z"))
        );
    }

    #[test]
    fn another_clusters_backups_do_not_count_and_an_unlabelled_one_is_kept() {
        let old = backup("old", Some("c1"), Some("2026-12-01T10:00:00Z"), Some("1h"));
        let others = backup("other", Some("c2"), Some("2026-12-01T12:00:00Z"), None);
        let now = at("2026-12-01T20:00:00Z");
        assert!(matches!(
            plan(&old, &[old.clone(), others], "ns/c", now),
            Verdict::Kept(_)
        ));
        let bare = backup("bare", None, Some("2026-12-01T10:00:00Z"), Some("1h"));
        match plan(&bare, &[], "ns/c", now) {
            Verdict::Kept(why) => assert!(why.contains(labels::CLUSTER_UID), "{why}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn a_newer_backup_without_retention_releases_the_older_ones() {
        let old = backup("old", Some("c1"), Some("2026-12-01T10:00:00Z"), Some("1h"));
        let keep = backup("keep", Some("c1"), Some("2026-12-01T12:00:00Z"), None);
        let now = at("2026-12-01T20:00:00Z");
        assert_eq!(
            plan(&old, &[old.clone(), keep.clone()], "ns/c", now),
            Verdict::Delete
        );
        assert_eq!(
            plan(&keep, &[old, keep.clone()], "ns/c", now),
            Verdict::Forever
        );
    }

    #[test]
    fn a_backup_being_deleted_protects_nothing() {
        let old = backup("old", Some("c1"), Some("2026-12-01T10:00:00Z"), Some("1h"));
        let mut going = backup("going", Some("c1"), Some("2026-12-01T12:00:00Z"), None);
        going.metadata.deletion_timestamp = Some(Time(at("2026-12-01T19:00:00Z")));
        let now = at("2026-12-01T20:00:00Z");
        assert!(matches!(
            plan(&old, &[old.clone(), going], "ns/c", now),
            Verdict::Kept(_)
        ));
    }

    fn restore(name: &str, backup: &str, phase: Option<&str>) -> Restore {
        let mut r = json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Restore",
            "metadata": {"name": name, "namespace": "elsewhere"},
            "spec": {"backup": {"name": backup, "namespace": "ns"}}
        });
        if let Some(p) = phase {
            r["status"] = json!({"phase": p});
        }
        serde_json::from_value(r).expect("restore")
    }

    #[test]
    fn a_restore_still_reading_a_backup_holds_it() {
        let b = backup("old", Some("c1"), Some("2026-12-01T10:00:00Z"), Some("1h"));
        let running = restore("r1", "old", Some("Running"));
        let fresh = restore("r0", "old", None);
        let done = restore("r2", "old", Some("Completed"));
        let other = restore("r3", "other", Some("Running"));
        assert_eq!(
            reader(&b, &[done.clone(), running]),
            Some("elsewhere/r1".into())
        );
        assert_eq!(reader(&b, &[fresh]), Some("elsewhere/r0".into()));
        assert_eq!(reader(&b, &[done, other]), None);
    }
}
