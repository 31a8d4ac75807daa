//! Termination policies. A finalizer is used only where deletion needs the operator:
//! `DoNotTerminate` (to refuse it) and `WipeOut` (to delete the Cluster's backups). `Delete` is
//! left to garbage collection through owner references and the StatefulSets' PVC retention.
//!
//! Nothing is deleted for carrying the Cluster's name: `app.kubernetes.io/instance` is on every
//! object of a Helm release of the same name. Volumes go by [`claims::verdict`], Backups by
//! [`backup_verdict`]; what looks like the Cluster's but cannot be proven so is named in a Warning
//! event and left in place.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::apps::v1::TerminationPolicy;
use lifeboat_api::{Backup, Cluster, labels};

use super::claims::{self, ClusterIdentity, Verdict};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ownership::{label, labelled};
use crate::{FIELD_MANAGER, kubeapi};

/// The finalizer Lifeboat puts on Clusters that need it.
pub const FINALIZER: &str = "lifeboat.io/termination";

fn needs_finalizer(c: &Cluster) -> bool {
    c.spec.termination_policy != TerminationPolicy::Delete
}

async fn set_finalizers(ctx: &Context, c: &Cluster, finalizers: Vec<String>) -> Result<()> {
    crate::kubeapi::set_finalizers(&ctx.client, c, finalizers).await
}

/// Adds the finalizer when the policy needs it, and removes it when it no longer does.
pub async fn ensure_finalizer(ctx: &Context, c: &Cluster) -> Result<()> {
    let has = c.finalizers().iter().any(|f| f == FINALIZER);
    match (needs_finalizer(c), has) {
        (true, false) => {
            let mut f = c.finalizers().to_vec();
            f.push(FINALIZER.into());
            set_finalizers(ctx, c, f).await
        }
        (false, true) => {
            let f = c
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect();
            set_finalizers(ctx, c, f).await
        }
        _ => Ok(()),
    }
}

/// A delete that goes through only if the object is still the one that was judged: same UID,
/// same version.
fn exactly(meta: &kube::api::ObjectMeta) -> DeleteParams {
    DeleteParams::background().preconditions(Preconditions {
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
    })
}

/// A delete that did not go through: the object was already gone, or changed since it was judged
/// and must be judged again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settled {
    Gone,
    Changed,
}

/// What a delete with [`exactly`] came to, when it did not go through.
fn precondition_outcome(e: &kube::Error) -> Option<Settled> {
    match e {
        kube::Error::Api(s) if s.code == 404 => Some(Settled::Gone),
        kube::Error::Api(s) if s.code == 409 => Some(Settled::Changed),
        _ => None,
    }
}

/// Deletes the Cluster's PVCs: those [`claims::verdict`] proves are this Cluster's. The
/// StatefulSets' retention policy covers a Cluster deleted under `Delete`, but not one whose
/// policy was `DoNotTerminate` (retain) until just before; the finalizer is still on such a
/// Cluster, so this is where its volumes go. A PVC still mounted is removed by Kubernetes once its
/// pod is gone. Claims that look like the Cluster's but are not proven so are named in one
/// Warning event. `Ok(false)` when a claim changed between judging and deleting it: the caller
/// judges again before the finalizer goes.
async fn delete_volumes(c: &Cluster, ctx: &Context) -> Result<bool> {
    let id = ClusterIdentity::of(c);
    let ns = c.namespace().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    // Every claim of the namespace: a restored volume is proven by its owner reference alone,
    // whatever its labels.
    let list = pvcs
        .list(&ListParams::default())
        .await
        .map_err(Error::kube(
            "listing volumes of",
            format!("Cluster {ns}/{}", id.name),
        ))?;
    let selector = format!("{}={}", labels::INSTANCE, id.name);
    let statefulsets: Vec<StatefulSet> = kubeapi::list(&ctx.client, &ns, &selector).await?;
    let pods: Vec<Pod> = kubeapi::list(&ctx.client, &ns, &selector).await?;
    let mounted = claims::mounted_claims(&id.uid, &statefulsets, &pods);
    let mut kept = Vec::new();
    let mut settled = true;
    for p in &list.items {
        let name = p.name_any();
        match claims::verdict(&id, p, &mounted) {
            Verdict::Delete(proof) => {
                if p.meta().deletion_timestamp.is_some() {
                    continue;
                }
                match pvcs.delete(&name, &exactly(p.meta())).await {
                    Ok(_) => {
                        tracing::info!(cluster = %id.name, pvc = %name, ?proof, "deleting volume");
                    }
                    Err(e) => match precondition_outcome(&e) {
                        Some(Settled::Gone) => {}
                        Some(Settled::Changed) => settled = false,
                        None => {
                            return Err(Error::kube(
                                "deleting",
                                format!("PersistentVolumeClaim {ns}/{name}"),
                            )(e));
                        }
                    },
                }
            }
            Verdict::Keep(why) if claims::looks_related(&id, p) => {
                kept.push(format!("{name} ({})", why.reason()));
            }
            Verdict::Keep(_) => {}
        }
    }
    if !kept.is_empty() {
        ctx.event(
            c,
            EventType::Warning,
            "VolumesKept",
            "Delete",
            format!(
                "Cluster {ns}/{} is deleted but these PersistentVolumeClaims were left in place, since nothing proves Lifeboat made them for it: {}",
                id.name,
                kept.join("; ")
            ),
        )
        .await;
    }
    Ok(settled)
}

/// Whether a Backup goes with a Cluster wiped out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupVerdict {
    /// It carries the Cluster's UID label.
    Delete,
    /// Taken before the UID label existed, by Lifeboat, of this Cluster: Lifeboat's own field
    /// manager set its instance label, and it started after this Cluster was created, so the
    /// Cluster of that name it backed up was this one.
    DeleteLegacy,
    /// Not proven this Cluster's; `Some` when it looks like it, with why it stays.
    Keep(Option<String>),
}

/// Whether `b`'s instance label was set by Lifeboat's own field manager.
fn instance_set_by_lifeboat(b: &Backup) -> bool {
    let key = format!("f:{}", labels::INSTANCE);
    b.meta().managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:metadata")?.get("f:labels")?.get(&key))
                .is_some()
    })
}

/// Decides whether a Backup goes when `c` is wiped out.
pub fn backup_verdict(c: &Cluster, b: &Backup) -> BackupVerdict {
    let uid = c.uid().unwrap_or_default();
    let name = c.name_any();
    let meta = b.meta();
    if labelled(meta, labels::CLUSTER_UID, &uid) {
        return BackupVerdict::Delete;
    }
    let named = label(meta, labels::INSTANCE) == Some(name.as_str());
    if let Some(other) = label(meta, labels::CLUSTER_UID) {
        return BackupVerdict::Keep(named.then(|| {
            format!(
                "it carries {} of another Cluster ({other})",
                labels::CLUSTER_UID
            )
        }));
    }
    if !named {
        return BackupVerdict::Keep(None);
    }
    let started = b.status.as_ref().and_then(|s| s.start_timestamp.as_ref());
    let created = c.meta().creation_timestamp.as_ref();
    let after = |s: &Time, c: &Time| s.0 >= c.0;
    match (started, created) {
        (Some(s), Some(cr)) if after(s, cr) && instance_set_by_lifeboat(b) => {
            BackupVerdict::DeleteLegacy
        }
        _ => BackupVerdict::Keep(Some(format!(
            "it carries {}={name} but not {}, and was not started by Lifeboat while this Cluster existed",
            labels::INSTANCE,
            labels::CLUSTER_UID
        ))),
    }
}

/// Removes Lifeboat's finalizer, letting the deletion finish.
async fn release(ctx: &Context, c: &Cluster) -> Result<()> {
    let f = c
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, c, f).await
}

/// Deletes the Cluster's volumes, then lets the deletion finish.
async fn finish(c: &Cluster, ctx: &Context) -> Result<Action> {
    if !delete_volumes(c, ctx).await? {
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    release(ctx, c).await?;
    Ok(Action::await_change())
}

/// Handles a Cluster being deleted.
pub async fn on_delete(c: &Cluster, ctx: &Context) -> Result<Action> {
    let name = c.name_any();
    let ns = c.namespace().unwrap_or_default();
    if !c.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    match c.spec.termination_policy {
        TerminationPolicy::DoNotTerminate => {
            ctx.event(
                c,
                EventType::Warning,
                "DeletionRefused",
                "Delete",
                format!(
                    "Cluster {ns}/{name} has terminationPolicy DoNotTerminate, so its deletion is refused and nothing was removed; set spec.terminationPolicy to Delete or WipeOut to delete it"
                ),
            )
            .await;
            Ok(Action::requeue(std::time::Duration::from_secs(60)))
        }
        TerminationPolicy::WipeOut => {
            // Backups go first; each Backup's own finalizer removes its repo data.
            let backups: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
            let list = backups
                .list(&ListParams::default())
                .await
                .map_err(Error::kube(
                    "listing backups of",
                    format!("Cluster {ns}/{name}"),
                ))?;
            let mut waiting = false;
            let mut kept = BTreeSet::new();
            for b in &list.items {
                match backup_verdict(c, b) {
                    BackupVerdict::Delete | BackupVerdict::DeleteLegacy => {
                        waiting = true;
                        if b.meta().deletion_timestamp.is_some() {
                            continue;
                        }
                        match backups.delete(&b.name_any(), &exactly(b.meta())).await {
                            Ok(_) => {
                                tracing::info!(cluster = %name, backup = %b.name_any(), "WipeOut: deleting backup");
                            }
                            // Judged again on the requeue below.
                            Err(e) if precondition_outcome(&e).is_some() => {}
                            Err(e) => {
                                return Err(Error::kube(
                                    "deleting",
                                    format!("Backup {ns}/{}", b.name_any()),
                                )(e));
                            }
                        }
                    }
                    BackupVerdict::Keep(Some(why)) => {
                        kept.insert(format!("{} ({why})", b.name_any()));
                    }
                    BackupVerdict::Keep(None) => {}
                }
            }
            if waiting {
                return Ok(Action::requeue(std::time::Duration::from_secs(2)));
            }
            if !kept.is_empty() {
                ctx.event(
                    c,
                    EventType::Warning,
                    "BackupsKept",
                    "Delete",
                    format!(
                        "Cluster {ns}/{name} is wiped out but these Backups were left in place, since nothing proves they are its own: {}",
                        kept.into_iter().collect::<Vec<_>>().join("; ")
                    ),
                )
                .await;
            }
            finish(c, ctx).await
        }
        TerminationPolicy::Delete => finish(c, ctx).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::field_report_cluster;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use k8s_openapi::jiff::Timestamp;
    use lifeboat_api::dataprotection::v1alpha1::BackupStatus;

    const UID: &str = "1b2c3d4e-0000-0000-0000-000000000001";

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("timestamp"))
    }

    fn cluster() -> Cluster {
        let mut c = field_report_cluster();
        c.metadata.creation_timestamp = Some(at(1_000));
        c
    }

    fn backup(
        labels_: &[(&str, &str)],
        instance_manager: Option<&str>,
        started: Option<i64>,
    ) -> Backup {
        let mut b = Backup::new(
            "b",
            serde_json::from_value(serde_json::json!({
                "backupPolicyName": "p", "backupMethod": "datafile"
            }))
            .expect("spec"),
        );
        b.metadata.labels = Some(
            labels_
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        b.metadata.managed_fields = instance_manager.map(|m| {
            vec![ManagedFieldsEntry {
                manager: Some(m.into()),
                operation: Some("Apply".into()),
                fields_v1: Some(FieldsV1(serde_json::json!({
                    "f:metadata": {"f:labels": {format!("f:{}", labels::INSTANCE): {}}}
                }))),
                ..Default::default()
            }]
        });
        b.status = Some(BackupStatus {
            start_timestamp: started.map(at),
            ..Default::default()
        });
        b
    }

    #[test]
    fn wipeout_deletes_only_backups_proven_the_clusters() {
        let c = cluster();
        let instance = (labels::INSTANCE, "fdb");
        let ours = (labels::CLUSTER_UID, UID);
        let theirs = (labels::CLUSTER_UID, "0ther");
        assert_eq!(
            backup_verdict(&c, &backup(&[instance, ours], None, None)),
            BackupVerdict::Delete
        );
        assert_eq!(
            backup_verdict(&c, &backup(&[ours], None, None)),
            BackupVerdict::Delete,
            "the UID label alone is Lifeboat's"
        );
        assert_eq!(
            backup_verdict(
                &c,
                &backup(&[instance], Some(crate::FIELD_MANAGER), Some(2_000))
            ),
            BackupVerdict::DeleteLegacy,
            "labelled by Lifeboat while this Cluster existed"
        );
        for (what, b) in [
            (
                "another Cluster's UID",
                backup(&[instance, theirs], Some(crate::FIELD_MANAGER), Some(2_000)),
            ),
            (
                "labelled by someone else",
                backup(&[instance], Some("kubectl"), Some(2_000)),
            ),
            (
                "started before this Cluster existed",
                backup(&[instance], Some(crate::FIELD_MANAGER), Some(500)),
            ),
            (
                "never started",
                backup(&[instance], Some(crate::FIELD_MANAGER), None),
            ),
        ] {
            assert!(
                matches!(backup_verdict(&c, &b), BackupVerdict::Keep(Some(_))),
                "{what}"
            );
        }
        assert_eq!(
            backup_verdict(&c, &backup(&[(labels::INSTANCE, "other")], None, None)),
            BackupVerdict::Keep(None),
            "another Cluster's Backup is not even named"
        );
    }
}
