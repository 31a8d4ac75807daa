//! Scheduled backups on the bed: a Cluster's `spec.backup` keeps a BackupSchedule whose Backups
//! complete, are proven restorable by drills and expire with their repo objects, and which
//! `enabled: false` suspends; a drill of a Backup damaged in the repo fails naming the object; an invalid
//! expression is refused naming its schedule; two schedules of one Cluster never back it up at
//! once; a run the operator slept through starts on its return within the starting deadline,
//! and is recorded as missed after it.
//!
//! One test stops the operator. The others hold only to outcomes an operator that pauses for a
//! minute still reaches, so the tier may run them side by side.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{
    BackupPhase, BackupRepoPhase, BackupSchedulePhase, SchedulePhase, ScheduleStatus,
};
use lifeboat_api::{Backup, BackupSchedule, Cluster, ClusterPhase, labels};
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::operator::{self, events_on};
use lifeboat_e2e::s3::*;
use lifeboat_e2e::scenario::*;
use lifeboat_e2e::{TestNamespace, client, in_namespace, poll};
use serde_json::{Value, json};

/// How long the BackupRepo controller may take to find the store.
const REPO_CHECK: Duration = Duration::from_secs(90);
/// How long a scheduled run may take to show, past its time, on a bed that runs other tests.
const RUN_SLACK: Duration = Duration::from_secs(90);
/// The outage test stops the operator for up to two minutes while the others run: their
/// deadlines allow for it.
const OUTAGE: Duration = Duration::from_secs(180);

fn schedule_manifest(name: &str, policy: &str, deadline: Option<i64>, schedules: Value) -> Value {
    let mut m = json!({
        "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "BackupSchedule",
        "metadata": {"name": name},
        "spec": {"backupPolicyName": policy, "schedules": schedules}
    });
    if let Some(d) = deadline {
        m["spec"]["startingDeadlineMinutes"] = json!(d);
    }
    m
}

/// The Backups BackupSchedule `schedule` took, oldest run first.
async fn scheduled_backups(ns: &TestNamespace, schedule: &str) -> Result<Vec<Backup>> {
    let api: Api<Backup> = ns.api();
    let mut out = api
        .list(&ListParams::default().labels(&format!("{}={schedule}", labels::BACKUP_SCHEDULE)))
        .await?
        .items;
    out.sort_by_key(|b| b.annotations().get(labels::SCHEDULED_TIME).cloned());
    Ok(out)
}

fn phase(b: &Backup) -> Option<BackupPhase> {
    b.status.as_ref().and_then(|s| s.phase)
}

fn describe(bs: &[Backup]) -> String {
    bs.iter()
        .map(|b| format!("{} {:?}", b.name_any(), phase(b)))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn schedule_status(ns: &TestNamespace, name: &str, schedule: &str) -> Result<ScheduleStatus> {
    let api: Api<BackupSchedule> = ns.api();
    Ok(api
        .get(name)
        .await?
        .status
        .unwrap_or_default()
        .schedules
        .get(schedule)
        .cloned()
        .unwrap_or_default())
}

/// Each scheduled Backup is named `<cluster>-<schedule>-<UTC stamp of its time>` as KubeBlocks
/// names them, carries KubeBlocks' labels, and records its time.
fn check_named_as_scheduled(b: &Backup, cluster: &str, schedule: &str, bs: &str) -> Result<()> {
    let time: Timestamp = b
        .annotations()
        .get(labels::SCHEDULED_TIME)
        .with_context(|| format!("Backup {} has no scheduled time", b.name_any()))?
        .parse()?;
    let want = format!("{cluster}-{schedule}-{}", time.strftime("%Y%m%d%H%M%S"));
    ensure!(
        b.name_any() == want,
        "Backup {} of the run at {time} is not named {want}",
        b.name_any()
    );
    let l = b.labels();
    ensure!(
        l.get(labels::AUTOBACKUP).map(String::as_str) == Some("true")
            && l.get(labels::BACKUP_SCHEDULE).map(String::as_str) == Some(bs),
        "Backup {} lacks KubeBlocks' schedule labels: {l:?}",
        b.name_any()
    );
    ensure!(
        time.strftime("%S").to_string() == "00",
        "a run's time {time} is not on a minute"
    );
    Ok(())
}

/// No two of these Backups ran at the same time: each one's start is at or after the other's
/// completion.
fn check_never_concurrent(bs: &[Backup]) -> Result<()> {
    let spans: Vec<(String, Timestamp, Timestamp)> = bs
        .iter()
        .filter_map(|b| {
            let st = b.status.as_ref()?;
            Some((
                b.name_any(),
                st.start_timestamp.as_ref()?.0,
                st.completion_timestamp.as_ref()?.0,
            ))
        })
        .collect();
    for (i, a) in spans.iter().enumerate() {
        for b in spans.iter().skip(i + 1) {
            ensure!(
                a.2 <= b.1 || b.2 <= a.1,
                "Backups {} ({} to {}) and {} ({} to {}) of one Cluster ran at once",
                a.0,
                a.1,
                a.2,
                b.0,
                b.1,
                b.2
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_cluster_backup_schedule_takes_backups_that_expire_and_disabling_it_suspends_it()
-> Result<()> {
    const REPO: &str = "e2e-schedule";
    const SCHEDULE: &str = "fdb-falkordb-backup-schedule";
    let c = client().await?;
    let creds = bed_credentials()?;
    s3_repo(&c, REPO, BED_ENDPOINT, BED_BUCKET, &creds).await?;
    wait_repo(&c, REPO, BackupRepoPhase::Ready, REPO_CHECK).await?;
    let store = store(BED_ENDPOINT, BED_BUCKET, &creds)?;
    let result = in_namespace("schedule-cluster", |ns| async move {
        let mut manifest = falkordb_cluster("fdb", "Delete", 2);
        manifest["spec"]["backup"] = json!({
            "enabled": true, "method": "datafile", "cronExpression": "* * * * *",
            "retentionPeriod": "1m", "repoName": REPO, "drill": {"every": 1}
        });
        create_cluster(&ns, manifest).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        write_dataset(&ns, "fdb", 200, 64).await?;

        // The Cluster's schedule, as KubeBlocks makes it: named after the component, owned by
        // the Cluster, one schedule named after the method.
        let schedules: Api<BackupSchedule> = ns.api();
        let bs = poll(
            "the Cluster's BackupSchedule",
            Duration::from_secs(60),
            || async {
                Ok(schedules
                    .get_opt(SCHEDULE)
                    .await?
                    .ok_or_else(|| "not created yet".to_string()))
            },
        )
        .await?;
        let cluster_uid = ns.api::<Cluster>().get("fdb").await?.uid();
        ensure!(
            bs.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == cluster_uid.as_ref() && o.controller == Some(true)),
            "BackupSchedule {SCHEDULE} is not controlled by its Cluster: {:?}",
            bs.owner_references()
        );
        let s = bs
            .spec
            .schedules
            .first()
            .context("the schedule has no schedules")?;
        ensure!(
            bs.spec.backup_policy_name == "fdb-falkordb-backup-policy"
                && s.schedule_name() == "datafile"
                && s.cron_expression == "* * * * *"
                && s.retention_period.as_deref() == Some("1m")
                && s.enabled == Some(true),
            "BackupSchedule {SCHEDULE} does not carry spec.backup: {:?}",
            bs.spec
        );

        // Backups come every minute and complete; the first ones expire a minute after they
        // complete and go with their objects, while the newest Completed one stays.
        let done = poll(
            "two scheduled Backups to complete",
            Duration::from_secs(180) + RUN_SLACK + OUTAGE,
            || async {
                let all = scheduled_backups(&ns, SCHEDULE).await?;
                if let Some(f) = all.iter().find(|b| phase(b) == Some(BackupPhase::Failed)) {
                    bail!(
                        "scheduled Backup {} failed: {:?}",
                        f.name_any(),
                        f.status.as_ref().and_then(|s| s.failure_reason.clone())
                    );
                }
                let done: Vec<Backup> = all
                    .into_iter()
                    .filter(|b| phase(b) == Some(BackupPhase::Completed))
                    .collect();
                Ok(if done.len() >= 2 {
                    Ok(done)
                } else {
                    Err(describe(&done))
                })
            },
        )
        .await?;
        for b in &done {
            check_named_as_scheduled(b, "fdb", "datafile", SCHEDULE)?;
            ensure!(
                b.status
                    .as_ref()
                    .and_then(|s| s.backup_repo_name.as_deref())
                    == Some(REPO),
                "scheduled Backup {} did not go to spec.backup.repoName {REPO}",
                b.name_any()
            );
        }
        let first = done.first().context("no Backup")?.clone();
        let first_path = first
            .status
            .as_ref()
            .and_then(|s| s.path.clone())
            .unwrap_or_default();
        ensure!(
            !list(store.as_ref(), &first_path).await?.is_empty(),
            "Backup {} wrote nothing under {first_path}",
            first.name_any()
        );
        wait_backup_gone(
            &ns,
            &first.name_any(),
            Duration::from_secs(60) + RUN_SLACK + OUTAGE,
        )
        .await?;
        let left = list(store.as_ref(), &first_path).await?;
        ensure!(
            left.is_empty(),
            "retention deleted scheduled Backup {} but left its objects: {left:?}",
            first.name_any()
        );
        let now = scheduled_backups(&ns, SCHEDULE).await?;
        ensure!(
            now.iter().any(|b| phase(b) == Some(BackupPhase::Completed)),
            "retention left the Cluster no Completed Backup: {}",
            describe(&now)
        );
        check_never_concurrent(&now)?;
        let st = schedule_status(&ns, SCHEDULE, "datafile").await?;
        ensure!(
            st.last_schedule_time.is_some() && st.last_successful_time.is_some(),
            "the schedule's status has no last run or success: {st:?}"
        );
        eprintln!("schedule status while enabled: {st:?}");
        // Each scheduled Backup asked for a drill, and the drills proved them restorable.
        let drilled = poll(
            "a scheduled Backup to be Verified by its drill",
            Duration::from_secs(120) + OUTAGE,
            || async {
                let all = scheduled_backups(&ns, SCHEDULE).await?;
                if let Some((b, c)) = all
                    .iter()
                    .find_map(|b| verified(b).filter(|c| c.status == "False").map(|c| (b, c)))
                {
                    bail!(
                        "the drill of {} failed: {}: {}",
                        b.name_any(),
                        c.reason,
                        c.message
                    );
                }
                Ok(
                    match all
                        .iter()
                        .find(|b| verified(b).is_some_and(|c| c.status == "True"))
                    {
                        Some(b) => Ok(b.clone()),
                        None => Err(describe(&all)),
                    },
                )
            },
        )
        .await?;
        ensure!(
            drilled.annotations().get(labels::DRILL).map(String::as_str) == Some("true"),
            "Backup {} was drilled without asking",
            drilled.name_any()
        );
        eprintln!(
            "drilled: {}: {:?}",
            drilled.name_any(),
            verified_condition(&drilled).map(|c| c.message.clone())
        );

        // enabled: false suspends the schedule: it says so, and across its next time no Backup
        // is taken.
        ns.api::<Cluster>()
            .patch(
                "fdb",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"backup": {"enabled": false}}})),
            )
            .await?;
        poll(
            "the schedule to be Disabled",
            Duration::from_secs(60) + OUTAGE,
            || async {
                let st = schedule_status(&ns, SCHEDULE, "datafile").await?;
                Ok(if st.phase == Some(SchedulePhase::Disabled) {
                    Ok(())
                } else {
                    Err(format!("{st:?}"))
                })
            },
        )
        .await?;
        // Whatever the schedule had started before it was disabled may still run; from here on
        // nothing new may appear.
        let before: Vec<String> = scheduled_backups(&ns, SCHEDULE)
            .await?
            .iter()
            .map(|b| b.name_any())
            .collect();
        let watch_from = Timestamp::now();
        let watch_until = watch_from + Duration::from_secs(60) + Duration::from_secs(20);
        let outcome: Result<()> = poll(
            "the end of a window over the schedule's next time",
            Duration::from_secs(120),
            || async {
                let now: Vec<String> = scheduled_backups(&ns, SCHEDULE)
                    .await?
                    .iter()
                    .map(|b| b.name_any())
                    .collect();
                if let Some(new) = now.iter().find(|n| !before.contains(n)) {
                    bail!("the disabled schedule took Backup {new}");
                }
                Ok(if Timestamp::now() > watch_until {
                    Ok(())
                } else {
                    Err(format!("{} Backups, none new", now.len()))
                })
            },
        )
        .await;
        outcome?;
        eprintln!(
            "disabled: no Backup taken between {} and {watch_until}",
            Timestamp::now()
        );
        // Retention kept a Backup proven restorable.
        let left = scheduled_backups(&ns, SCHEDULE).await?;
        ensure!(
            left.iter()
                .any(|b| verified(b).is_some_and(|c| c.status == "True")),
            "retention left no Verified Backup: {}",
            describe(&left)
        );

        // A Backup damaged in the repo: its drill fails, naming the object.
        let damaged = backup_with(&ns, "damaged", "fdb-falkordb-backup-policy", "Delete").await?;
        let path = damaged
            .status
            .as_ref()
            .and_then(|s| s.path.clone())
            .unwrap_or_default();
        let objects = list(store.as_ref(), &path).await?;
        let (rdb, _) = objects
            .iter()
            .find(|(o, _)| o.ends_with("dump.rdb.zst"))
            .with_context(|| format!("no dump.rdb.zst under {path}: {objects:?}"))?;
        use object_store::ObjectStoreExt;
        let location = object_store::path::Path::from(rdb.as_str());
        let mut bytes = store.get(&location).await?.bytes().await?.to_vec();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        store.put(&location, bytes.into()).await?;
        ns.api::<Backup>()
            .patch(
                "damaged",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {labels::DRILL: "true"}}})),
            )
            .await?;
        let failed = poll(
            "the drill of Backup damaged to end",
            Duration::from_secs(180),
            || async {
                let b = ns.api::<Backup>().get("damaged").await?;
                Ok(match verified_condition(&b) {
                    Some(c) => Ok(c),
                    None => Err("no Verified condition yet".to_string()),
                })
            },
        )
        .await?;
        eprintln!(
            "drill of the damaged Backup: {}: {}",
            failed.reason, failed.message
        );
        ensure!(
            failed.status == "False"
                && failed.message.contains("dump.rdb.zst")
                && failed.message.contains("checksum mismatch"),
            "the drill of a damaged Backup does not fail naming the object: {failed:?}"
        );
        let said = events_on(&ns, "damaged").await?;
        ensure!(
            said.iter().any(|e| e.starts_with("DrillFailed:")),
            "no DrillFailed event on Backup damaged: {said:?}"
        );
        Ok(())
    })
    .await;
    delete_repo(&c, REPO).await?;
    result
}

fn verified_condition(
    b: &Backup,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    verified(b).cloned()
}

fn verified(b: &Backup) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    b.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
}

#[tokio::test]
async fn an_invalid_cron_expression_is_refused_naming_the_schedule() -> Result<()> {
    in_namespace("schedule-invalid", |ns| async move {
        // A policy of its own: the schedule is checked against it, and no Cluster is needed for
        // the expression to be refused.
        ns.create::<lifeboat_api::BackupPolicy>(json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "BackupPolicy",
            "metadata": {"name": "p"},
            "spec": {
                "target": {"podSelector": {"matchLabels": {
                    "app.kubernetes.io/instance": "nothing"}}},
                "backupMethods": [{"name": "datafile"}]
            }
        }))
        .await?;
        ns.create::<BackupSchedule>(schedule_manifest(
            "bad",
            "p",
            None,
            json!([
                {"name": "hourly", "backupMethod": "datafile", "cronExpression": "0 * * * *"},
                {"name": "nightly", "backupMethod": "datafile", "cronExpression": "61 * * * *"}
            ]),
        ))
        .await?;
        let schedules: Api<BackupSchedule> = ns.api();
        let reason = poll(
            "BackupSchedule bad to fail",
            Duration::from_secs(60) + OUTAGE,
            || async {
                let st = schedules.get("bad").await?.status.unwrap_or_default();
                Ok(match (st.phase, st.failure_reason) {
                    (Some(BackupSchedulePhase::Failed), Some(r)) => Ok(r),
                    other => Err(format!("{other:?}")),
                })
            },
        )
        .await?;
        eprintln!("{reason}");
        ensure!(
            reason
                .contains("spec.schedules[1] (nightly): cronExpression \"61 * * * *\" is invalid"),
            "the failure does not name the schedule and its expression: {reason}"
        );
        ensure!(
            !reason.contains("hourly"),
            "the valid schedule is blamed too: {reason}"
        );
        let st = schedules.get("bad").await?.status.unwrap_or_default();
        let nightly = st.schedules.get("nightly").cloned().unwrap_or_default();
        let hourly = st.schedules.get("hourly").cloned().unwrap_or_default();
        ensure!(
            nightly.phase == Some(SchedulePhase::Failed)
                && hourly.phase == Some(SchedulePhase::Running)
                && hourly.next_schedule_time.is_some(),
            "per schedule: nightly {nightly:?}, hourly {hourly:?}"
        );
        let said = events_on(&ns, "bad").await?;
        ensure!(
            said.iter()
                .any(|e| e.starts_with("ScheduleInvalid:") && e.contains("nightly")),
            "no ScheduleInvalid event naming the schedule: {said:?}"
        );

        // The API server refuses what Lifeboat does not serve, naming the field.
        let mut pitr = falkordb_cluster("pitr", "Delete", 2);
        pitr["spec"]["backup"] = json!({"method": "datafile", "pitrEnabled": true});
        let refused = format!(
            "{:#}",
            create_cluster(&ns, pitr)
                .await
                .err()
                .context("a Cluster asking for point-in-time recovery was accepted")?
        );
        ensure!(
            refused.contains("spec.backup.pitrEnabled"),
            "the refusal does not name spec.backup.pitrEnabled: {refused}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn two_schedules_of_one_cluster_never_back_it_up_at_once() -> Result<()> {
    in_namespace("schedule-two", |ns| async move {
        let repo = "e2e-schedule-two";
        pvc_repo(&ns.client, repo).await?;
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        write_dataset(&ns, "fdb", 200, 64).await?;
        policy_for_repo(&ns, "fdb", "fdb-to-pvc", repo).await?;
        // Both every minute: at every minute both are due, and one must wait for the other.
        ns.create::<BackupSchedule>(schedule_manifest(
            "two",
            "fdb-to-pvc",
            None,
            json!([
                {"name": "a", "backupMethod": "datafile", "cronExpression": "* * * * *", "retentionPeriod": "1h"},
                {"name": "b", "backupMethod": "datafile", "cronExpression": "* * * * *", "retentionPeriod": "1h"}
            ]),
        ))
        .await?;
        let seen = poll(
            "both schedules to have completed Backups, one of them for a time the other also ran",
            Duration::from_secs(300) + RUN_SLACK + OUTAGE,
            || async {
                let all = scheduled_backups(&ns, "two").await?;
                check_never_concurrent(&all)?;
                let mut by_time: BTreeMap<String, Vec<&Backup>> = BTreeMap::new();
                for b in all.iter().filter(|b| phase(b) == Some(BackupPhase::Completed)) {
                    let t = b.annotations().get(labels::SCHEDULED_TIME).cloned().unwrap_or_default();
                    by_time.entry(t).or_default().push(b);
                }
                Ok(match by_time.values().find(|v| v.len() == 2) {
                    Some(pair) => Ok(pair.iter().map(|b| b.name_any()).collect::<Vec<_>>()),
                    None => Err(describe(&all)),
                })
            },
        )
        .await?;
        eprintln!("both runs of one time completed, one after the other: {seen:?}");
        let all = scheduled_backups(&ns, "two").await?;
        for b in &all {
            let schedule = b.labels().get(labels::SCHEDULE_NAME).cloned().unwrap_or_default();
            check_named_as_scheduled(b, "fdb", &schedule, "two")?;
        }
        check_never_concurrent(&all)?;
        // Stop taking Backups before the namespace goes.
        ns.api::<BackupSchedule>()
            .patch(
                "two",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"schedules": [
                    {"name": "a", "backupMethod": "datafile", "cronExpression": "* * * * *", "enabled": false},
                    {"name": "b", "backupMethod": "datafile", "cronExpression": "* * * * *", "enabled": false}
                ]}})),
            )
            .await?;
        Ok(())
    })
    .await
}

/// The first minute at least `lead` from now.
fn minute_after(lead: Duration) -> Result<Timestamp> {
    let t = Timestamp::now() + lead;
    let s = t.as_second();
    Ok(Timestamp::from_second(s - s.rem_euclid(60) + 60)?)
}

#[tokio::test]
async fn a_run_the_operator_slept_through_starts_within_its_deadline_or_is_recorded_missed()
-> Result<()> {
    in_namespace("schedule-outage", |ns| async move {
        let repo = "e2e-schedule-outage";
        pvc_repo(&ns.client, repo).await?;
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        policy_for_repo(&ns, "fdb", "fdb-to-pvc", repo).await?;
        // Both schedules at one minute of the day, A: one may start two minutes late, the
        // other not at all (a deadline of 0 minutes, plus the operator's 10 s of slack).
        let at = minute_after(Duration::from_secs(75))?;
        let cron = format!("{} {} * * *", at.strftime("%M"), at.strftime("%H"));
        ns.create::<BackupSchedule>(schedule_manifest(
            "patient",
            "fdb-to-pvc",
            Some(2),
            json!([{"name": "ontime", "backupMethod": "datafile", "cronExpression": cron, "retentionPeriod": "1h"}]),
        ))
        .await?;
        ns.create::<BackupSchedule>(schedule_manifest(
            "strict",
            "fdb-to-pvc",
            Some(0),
            json!([{"name": "late", "backupMethod": "datafile", "cronExpression": cron, "retentionPeriod": "1h"}]),
        ))
        .await?;
        for (bs, s) in [("patient", "ontime"), ("strict", "late")] {
            poll(
                &format!("schedule {s} to wait for {at}"),
                Duration::from_secs(60),
                || async {
                    let st = schedule_status(&ns, bs, s).await?;
                    Ok(match &st.next_schedule_time {
                        Some(t) if t.0 == at => Ok(()),
                        _ => Err(format!("{st:?}")),
                    })
                },
            )
            .await?;
        }

        // The outage: from before A until 30 s after it.
        let replicas = operator::stop(&ns.client).await?;
        let stopped = Timestamp::now();
        let outage: Result<()> = async {
            ensure!(
                stopped < at,
                "the operator took until {stopped} to stop, past the scheduled time {at}"
            );
            // The outage is the scenario: the operator must be away across the scheduled time.
            let back_at = at + Duration::from_secs(30);
            let wait = Timestamp::now().duration_until(back_at).unsigned_abs();
            tokio::time::sleep(wait).await;
            Ok(())
        }
        .await;
        // Back whatever happened: the other tests need it.
        operator::start(&ns.client, replicas).await?;
        outage?;
        let started = Timestamp::now();
        eprintln!("operator stopped at {stopped}, started again at {started}; the runs were due at {at}");

        // The patient schedule runs the time it slept through.
        let name = format!("fdb-ontime-{}", at.strftime("%Y%m%d%H%M%S"));
        let b = poll(
            &format!("Backup {name} of the run due at {at}"),
            Duration::from_secs(120) + RUN_SLACK,
            || async {
                let b = ns.api::<Backup>().get_opt(&name).await?;
                Ok(b.ok_or_else(|| "not created".to_string()))
            },
        )
        .await?;
        let created = b.metadata.creation_timestamp.clone().map(|t| t.0);
        ensure!(
            created.is_some_and(|c| c.as_second() >= stopped.as_second() && c > at),
            "Backup {name} was created at {created:?}, not after the operator came back"
        );
        check_named_as_scheduled(&b, "fdb", "ontime", "patient")?;
        wait_backup(&ns, &name, BackupPhase::Completed, BACKUP_TIMEOUT).await?;
        let ontime = schedule_status(&ns, "patient", "ontime").await?;
        ensure!(
            ontime.last_schedule_time.as_ref().map(|t| t.0) == Some(at)
                && ontime.missed_runs.unwrap_or(0) == 0,
            "the patient schedule's status: {ontime:?}"
        );

        // The strict one records its run missed, says why, and takes no Backup for it.
        let late = poll("schedule late to record its missed run", Duration::from_secs(60), || async {
            let st = schedule_status(&ns, "strict", "late").await?;
            Ok(if st.missed_runs == Some(1) {
                Ok(st)
            } else {
                Err(format!("{st:?}"))
            })
        })
        .await?;
        eprintln!("missed: {late:?}");
        ensure!(
            late.last_missed_time.as_ref().map(|t| t.0) == Some(at)
                && late.phase == Some(SchedulePhase::Failed)
                && late
                    .failure_reason
                    .as_deref()
                    .is_some_and(|r| r.contains("was missed") && r.contains("starting deadline")),
            "the strict schedule's status does not say its run was missed: {late:?}"
        );
        let said = events_on(&ns, "strict").await?;
        ensure!(
            said.iter().any(|e| e.starts_with("ScheduleMissed:")),
            "no ScheduleMissed event on BackupSchedule strict: {said:?}"
        );
        let missed_name = format!("fdb-late-{}", at.strftime("%Y%m%d%H%M%S"));
        ensure!(
            ns.api::<Backup>().get_opt(&missed_name).await?.is_none(),
            "the missed run took Backup {missed_name} anyway"
        );
        Ok(())
    })
    .await
}
