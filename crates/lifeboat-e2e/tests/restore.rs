//! The field report's scenario and every restore requirement, on the test bed with real
//! FalkorDB, asserting on data. A watcher runs through every restore and fails the test if a data
//! pod is Ready, or the Cluster `Running`, before the Restore completed.
//!
//! The source Cluster and its Backup are made once per run and shared by the tests.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolumeClaim};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, RestorePhase};
use lifeboat_api::{Backup, ClusterPhase, Restore};
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::scenario::*;
use lifeboat_e2e::{TestNamespace, client, in_namespace, poll};
use serde_json::json;
use tokio::sync::OnceCell;

const REPO: &str = "lifeboat-e2e-repo";
const SOURCE_NS: &str = "e2e-restore-source";
const BACKUP: &str = "fdb-backup-datafile";
const EMPTY_BACKUP: &str = "empty-backup-datafile";
/// How often the operator looks at a restoring Cluster, and at a running Backup: a failure is
/// noticed at most one period after its deadline.
const CLUSTER_REQUEUE: Duration = Duration::from_secs(5);
const BACKUP_REQUEUE: Duration = Duration::from_secs(10);
/// What a deadline may be overrun by beyond one period: the start time is recorded a pass after
/// creation, and the bed is shared by parallel tests.
const DEADLINE_SLACK: Duration = Duration::from_secs(30);

struct Source {
    written: Written,
}

static SOURCE: OnceCell<Source> = OnceCell::const_new();

/// The shared source: a FalkorDB replication Cluster with keys in three databases and a graph,
/// backed up with method `datafile`; and an empty Cluster's backup.
async fn source() -> Result<&'static Source> {
    SOURCE
        .get_or_try_init(|| async {
            let client = client().await?;
            pvc_repo(&client, REPO).await?;
            let nss: Api<Namespace> = Api::all(client.clone());
            if let Some(old) = nss.get_opt(SOURCE_NS).await? {
                if old.metadata.deletion_timestamp.is_none() {
                    nss.delete(SOURCE_NS, &DeleteParams::default()).await?;
                }
                poll("the old source namespace to go", Duration::from_secs(180), || async {
                    Ok(if nss.get_opt(SOURCE_NS).await?.is_none() { Ok(()) } else { Err("still there".to_string()) })
                })
                .await?;
            }
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": SOURCE_NS, "labels": lifeboat_e2e::restricted_namespace_labels("restore-source")}}))?;
            nss.create(&PostParams::default(), &ns).await?;
            let ns = TestNamespace { client: client.clone(), name: SOURCE_NS.into() };
            poll("the default ServiceAccount", Duration::from_secs(60), || async {
                let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = ns.api();
                Ok(sas.get_opt("default").await?.map(|_| ()).ok_or_else(|| "not yet".to_string()))
            })
            .await?;
            create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
            create_cluster(&ns, falkordb_cluster("empty", "Delete", 2)).await?;
            wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
            let written = write_dataset(&ns, "fdb", 2000, 64).await?;
            let b = backup(&ns, "fdb", BACKUP, REPO).await?;
            ensure_backup_holds(&b, &written)?;
            wait_phase(&ns, "empty", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
            backup(&ns, "empty", EMPTY_BACKUP, REPO).await?;
            Ok(Source { written })
        })
        .await
}

/// Runs `body` against the source namespace, where restores happen (a `pvc` repo's volume is
/// per namespace, so restores read it there). Prints the namespace's state when the body fails,
/// and deletes the test's restored Cluster either way.
async fn in_source<F, Fut>(cluster: &str, body: F) -> Result<()>
where
    F: FnOnce(TestNamespace) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let _ = source().await?;
    let client = client().await?;
    let ns = TestNamespace {
        client: client.clone(),
        name: SOURCE_NS.into(),
    };
    let result = body(ns).await;
    if let Err(e) = &result {
        // The failure first: a CI report that keeps only the head of a long output still has it.
        eprintln!("test failed: {e:#}");
        eprintln!(
            "{}",
            lifeboat_e2e::describe_namespace(&client, SOURCE_NS).await
        );
    }
    let clusters: Api<lifeboat_api::Cluster> = Api::namespaced(client, SOURCE_NS);
    let _ = clusters.delete(cluster, &DeleteParams::default()).await;
    result
}

/// Restores Cluster `name` through `entry`, with the lie watcher running, and checks the data.
async fn restore_and_check(
    name: &'static str,
    entry: Entry,
    policy: &str,
    replicas: i32,
) -> Result<()> {
    let policy = policy.to_owned();
    in_source(name, |ns| async move {
        let written = source().await?.written.clone();
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, name);
        create_cluster(
            &ns,
            restored_cluster(name, SOURCE_NS, BACKUP, entry, &policy, replicas),
        )
        .await?;
        let outcome = async {
            wait_phase(&ns, name, ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            let restores: Api<Restore> = ns.api();
            let r = restores.get(&format!("{name}-falkordb-restore")).await?;
            ensure!(
                r.status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Completed),
                "Cluster Running but Restore {:?}",
                r.status
            );
            assert_restored(&ns, name, &written).await?;
            assert_verification(&ns, name).await?;
            assert_restore_jobs(&ns, name, replicas).await?;
            eprintln!("{}", restore_report(&ns, name).await?);
            Ok(())
        }
        .await;
        let lies = watcher.finish().await;
        outcome?;
        lies
    })
    .await
}

/// The source namespace grants restores to `ns` (Backups in another namespace need it).
async fn grant(ns: &str) -> Result<()> {
    let c = client().await?;
    let backups: Api<Backup> = Api::namespaced(c, SOURCE_NS);
    for b in [BACKUP, EMPTY_BACKUP] {
        let patch = json!({"metadata": {"annotations": {"lifeboat.io/allow-restore-to-namespaces": format!("{ns}")}}});
        backups
            .patch(
                b,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn field_report_case_2_spec_restore_restores_the_data() -> Result<()> {
    restore_and_check("r-spec", Entry::Spec, "Parallel", 2).await
}

#[tokio::test]
async fn field_report_case_1_annotation_restores_the_data_and_warns() -> Result<()> {
    restore_and_check("r-anno", Entry::Annotation, "Parallel", 2).await?;
    Ok(())
}

#[tokio::test]
async fn serial_policy_with_three_replicas_spec_restore() -> Result<()> {
    restore_and_check("r-serial-spec", Entry::Spec, "Serial", 3).await
}

#[tokio::test]
async fn serial_policy_with_three_replicas_annotation() -> Result<()> {
    restore_and_check("r-serial-anno", Entry::Annotation, "Serial", 3).await
}

#[tokio::test]
async fn deprecated_annotation_publishes_a_warning_event() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-anno-event", |ns| async move {
        grant(&ns.name).await?;
        create_cluster(
            &ns,
            restored_cluster(
                "fdb-restored",
                SOURCE_NS,
                BACKUP,
                Entry::Annotation,
                "Parallel",
                2,
            ),
        )
        .await?;
        let events: Api<Event> = ns.api();
        poll(
            "a DeprecatedRestoreAnnotation Warning event",
            Duration::from_secs(60),
            || async {
                let list = events.list(&ListParams::default()).await?;
                Ok(
                    match list
                        .items
                        .iter()
                        .find(|e| e.reason.as_deref() == Some("DeprecatedRestoreAnnotation"))
                    {
                        Some(e)
                            if e.type_.as_deref() == Some("Warning")
                                && e.message
                                    .as_deref()
                                    .unwrap_or_default()
                                    .contains("spec.restore") =>
                        {
                            Ok(())
                        }
                        Some(e) => Err(format!("event {:?}", e.message)),
                        None => Err("no event yet".into()),
                    },
                )
            },
        )
        .await
    })
    .await
}

/// Checks the restore of `name` ran one prepareData Job per volume and its verify Job, all
/// succeeded.
async fn assert_restore_jobs(ns: &TestNamespace, name: &str, replicas: i32) -> Result<()> {
    let jobs: Api<Job> = ns.api();
    let all = jobs.list(&ListParams::default()).await?.items;
    let succeeded = |j: &Job| j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) > 0;
    let prepare: Vec<(String, bool)> = all
        .iter()
        .filter(|j| {
            j.name_any()
                .starts_with(&format!("{name}-falkordb-prepare-"))
        })
        .map(|j| (j.name_any(), succeeded(j)))
        .collect();
    ensure!(
        prepare.len() == usize::try_from(replicas)? && prepare.iter().all(|(_, ok)| *ok),
        "expected one succeeded prepareData Job per volume, found {prepare:?}"
    );
    let verify = format!("{name}-falkordb-verify");
    ensure!(
        all.iter().any(|j| j.name_any() == verify && succeeded(j)),
        "no succeeded verify Job {verify}"
    );
    Ok(())
}

async fn r_verification(
    restores: &Api<Restore>,
    name: &str,
) -> Result<lifeboat_api::dataprotection::v1alpha1::RestoreVerification> {
    restores
        .get(name)
        .await?
        .status
        .and_then(|s| s.verification)
        .ok_or_else(|| anyhow::anyhow!("Restore {name} records no verification"))
}

#[tokio::test]
async fn empty_cluster_backup_restores_to_an_empty_cluster() -> Result<()> {
    in_source("r-empty", |ns| async move {
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-empty");
        create_cluster(
            &ns,
            restored_cluster(
                "r-empty",
                SOURCE_NS,
                EMPTY_BACKUP,
                Entry::Spec,
                "Parallel",
                2,
            ),
        )
        .await?;
        let outcome = async {
            wait_phase(&ns, "r-empty", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
            let primary = poll("one primary label", Duration::from_secs(60), || {
                primary_pod(&ns, "r-empty")
            })
            .await?;
            let size = redis_cli(&pods, &primary, "DBSIZE").await?;
            ensure!(
                size.trim() == "0",
                "an empty backup restored to DBSIZE {}",
                size.trim()
            );
            let restores: Api<Restore> = ns.api();
            let r = restores.get("r-empty-falkordb-restore").await?;
            ensure!(
                r.status.and_then(|s| s.phase) == Some(RestorePhase::Completed),
                "empty restore not reported Completed"
            );
            // Verified like any other: both fingerprints recorded, and empty.
            assert_verification(&ns, "r-empty").await?;
            let v = r_verification(&restores, "r-empty-falkordb-restore").await?;
            ensure!(
                v.expected.keys.is_empty() && v.expected.graphs.is_empty(),
                "the empty backup's fingerprint is not empty: {:?}",
                v.expected
            );
            assert_restore_jobs(&ns, "r-empty", 2).await?;
            Ok(())
        }
        .await;
        let lies = watcher.finish().await;
        outcome?;
        lies
    })
    .await
}

/// Creates `manifest` and waits until the Cluster is Failed with a message containing every
/// needle; checks that no StatefulSet of it exists.
async fn expect_failed(
    ns: &TestNamespace,
    manifest: serde_json::Value,
    needles: &[&str],
) -> Result<()> {
    let name = manifest["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let watcher = LieWatcher::start(ns.client.clone(), &ns.name, &name);
    create_cluster(ns, manifest).await?;
    let c = wait_phase(ns, &name, ClusterPhase::Failed, Duration::from_secs(120)).await?;
    let msg = c.status.and_then(|s| s.message).unwrap_or_default();
    for n in needles {
        ensure!(
            msg.contains(n),
            "Cluster {name} failed, but its message does not say {n:?}: {msg}"
        );
    }
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = ns.api();
    ensure!(
        sts.get_opt(&format!("{name}-falkordb")).await?.is_none(),
        "a failed restore created the data StatefulSet"
    );
    report_failure_latency(ns, &name).await?;
    watcher.finish().await
}

/// Prints how long after the Restore failed its reason was on the Cluster (what `kubectl describe
/// cluster` shows), from the objects' own timestamps.
async fn report_failure_latency(ns: &TestNamespace, cluster: &str) -> Result<()> {
    let restores: Api<Restore> = ns.api();
    let Some(r) = restores
        .get_opt(&format!("{cluster}-falkordb-restore"))
        .await?
    else {
        // Failed before a Restore existed (an invalid request): the reason is on the Cluster only.
        return Ok(());
    };
    let clusters: Api<lifeboat_api::Cluster> = ns.api();
    let c = clusters.get(cluster).await?;
    let failed_at = r.status.and_then(|s| s.completion_timestamp);
    let shown_at = c
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Restore"))
        .map(|c| c.last_transition_time);
    if let (Some(f), Some(s)) = (failed_at, shown_at) {
        eprintln!(
            "Restore of {cluster} failed at {}; reason on the Cluster at {} ({}s later)",
            f.0,
            s.0,
            s.0.as_second() - f.0.as_second()
        );
    }
    Ok(())
}

#[tokio::test]
async fn missing_backup_fails_naming_it() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-missing", |ns| async move {
        let m = restored_cluster(
            "fdb-restored",
            &ns.name,
            "no-such-backup",
            Entry::Spec,
            "Parallel",
            2,
        );
        expect_failed(&ns, m, &["no-such-backup", "does not exist"]).await
    })
    .await
}

#[tokio::test]
async fn backup_not_completed_fails_naming_it() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-notcompleted", |ns| async move {
        // A Backup whose policy does not exist ends Failed, so it is never Completed.
        ns.create::<Backup>(json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "broken"},
            "spec": {"backupPolicyName": "no-such-policy", "backupMethod": "datafile"}
        }))
        .await?;
        let m = restored_cluster(
            "fdb-restored",
            &ns.name,
            "broken",
            Entry::Spec,
            "Parallel",
            2,
        );
        expect_failed(&ns, m, &["broken", "not Completed"]).await
    })
    .await
}

#[tokio::test]
async fn restore_env_naming_a_mover_setting_is_refused_naming_it() -> Result<()> {
    in_namespace("restore-env", |ns| async move {
        let mut m = restored_cluster(
            "fdb-restored",
            SOURCE_NS,
            BACKUP,
            Entry::Spec,
            "Parallel",
            2,
        );
        // Appended after Lifeboat's own variables, this would point the mover at another repo.
        m["spec"]["restore"]["parameters"]["dataprotection.kubeblocks.io/restore-env"] =
            json!(r#"[{"name":"LIFEBOAT_REPO","value":"file:///elsewhere"}]"#);
        expect_failed(
            &ns,
            m,
            &["dataprotection.kubeblocks.io/restore-env", "LIFEBOAT_REPO"],
        )
        .await?;
        let jobs: Api<Job> = ns.api();
        ensure!(
            jobs.list(&ListParams::default()).await?.items.is_empty(),
            "a Job was created for a restore whose environment was refused"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn malformed_annotation_fails_before_any_pod() -> Result<()> {
    in_namespace("restore-malformed", |ns| async move {
        let mut m = falkordb_cluster("fdb-restored", "Delete", 2);
        m["metadata"]["annotations"] =
            json!({"kubeblocks.io/restore-from-backup": "{\"falkordb\": {\"nme\": \"x\"}"});
        expect_failed(&ns, m, &["kubeblocks.io/restore-from-backup"]).await?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
        ensure!(
            pods.list(&ListParams::default()).await?.items.is_empty(),
            "pods exist for a Cluster with a malformed restore annotation"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn annotation_and_spec_restore_together_fail() -> Result<()> {
    in_namespace("restore-conflict", |ns| async move {
        let mut m = restored_cluster(
            "fdb-restored",
            SOURCE_NS,
            BACKUP,
            Entry::Spec,
            "Parallel",
            2,
        );
        m["metadata"]["annotations"] =
            json!({"kubeblocks.io/restore-from-backup": "{\"falkordb\":{\"name\":\"x\"}}"});
        expect_failed(&ns, m, &["conflicts with spec.restore"]).await
    })
    .await
}

#[tokio::test]
async fn cross_namespace_source_without_grant_is_refused() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-nogrant", |ns| async move {
        // No grant here.
        let m = restored_cluster(
            "fdb-restored",
            SOURCE_NS,
            BACKUP,
            Entry::Spec,
            "Parallel",
            2,
        );
        expect_failed(
            &ns,
            m,
            &[
                "grants no restore",
                "lifeboat.io/allow-restore-to-namespaces",
            ],
        )
        .await
    })
    .await
}

#[tokio::test]
async fn cross_namespace_restore_from_a_pvc_repo_is_refused() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-pvc-xns", |ns| async move {
        grant(&ns.name).await?;
        let m = restored_cluster(
            "fdb-restored",
            SOURCE_NS,
            BACKUP,
            Entry::Spec,
            "Parallel",
            2,
        );
        expect_failed(&ns, m, &["cannot mount", "S3 repo"]).await
    })
    .await
}

#[tokio::test]
async fn pvc_deleted_while_prepare_data_runs_fails_naming_it() -> Result<()> {
    in_source("r-pvcgone", |ns| async move {
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-pvcgone");
        create_cluster(
            &ns,
            restored_cluster("r-pvcgone", SOURCE_NS, BACKUP, Entry::Spec, "Serial", 2),
        )
        .await?;
        let pvcs: Api<PersistentVolumeClaim> = ns.api();
        let jobs: Api<Job> = ns.api();
        // Serial: volume 1 gets its Job only after volume 0 is written; delete the volume as soon
        // as its Job exists, while the Job needs it.
        poll("the second prepareData Job", RESTORE_TIMEOUT, || async {
            Ok(match jobs.get_opt("r-pvcgone-falkordb-prepare-1").await? {
                Some(_) => Ok(()),
                None => Err("not yet".into()),
            })
        })
        .await?;
        pvcs.delete("data-r-pvcgone-falkordb-1", &DeleteParams::default())
            .await?;
        let c = wait_phase(&ns, "r-pvcgone", ClusterPhase::Failed, RESTORE_TIMEOUT).await?;
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("data-r-pvcgone-falkordb-1"),
            "message does not name the PVC: {msg}"
        );
        watcher.finish().await
    })
    .await
}

#[tokio::test]
async fn restore_job_that_can_never_be_scheduled_fails_by_its_deadline() -> Result<()> {
    in_source("r-unsched", |ns| async move {
        let mut m = restored_cluster("r-unsched", SOURCE_NS, BACKUP, Entry::Spec, "Parallel", 2);
        // A storage class that does not exist: the volume never binds, so the prepareData
        // Job's pod can never be scheduled.
        m["spec"]["componentSpecs"][0]["volumeClaimTemplates"][0]["spec"]["storageClassName"] =
            json!("no-such-class");
        m["spec"]["restore"]["parameters"]["lifeboat.io/prepare-data-deadline"] = json!("60s");
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-unsched");
        create_cluster(&ns, m).await?;
        let started = std::time::Instant::now();
        let c = wait_phase(
            &ns,
            "r-unsched",
            ClusterPhase::Failed,
            Duration::from_secs(180),
        )
        .await?;
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("cannot be scheduled") && msg.contains("deadline of 1m0s"),
            "message does not quote the scheduler and the deadline: {msg}"
        );
        // The deadline plus one reconcile period (5 s while restoring) plus slack for the
        // Restore's start being recorded and a busy bed.
        let took = started.elapsed();
        let bound = Duration::from_secs(60) + CLUSTER_REQUEUE + DEADLINE_SLACK;
        eprintln!(
            "unschedulable restore Failed {:.0}s after creation (deadline 60s, bound {}s): {msg}",
            took.as_secs_f64(),
            bound.as_secs()
        );
        ensure!(
            took <= bound,
            "the restore failed {:.0}s after creation, past its 60s deadline plus {}s",
            took.as_secs_f64(),
            (bound - Duration::from_secs(60)).as_secs()
        );
        // The stuck Jobs are kept, for `kubectl describe`, but suspended: no pod of a failed
        // restore waits for a node for good, or starts later if the storage class appears.
        let jobs: Api<Job> = ns.api();
        let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
        for i in 0..2 {
            let name = format!("r-unsched-falkordb-prepare-{i}");
            let job = jobs
                .get_opt(&name)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the stuck Job {name} was removed"))?;
            ensure!(
                job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
                "the failed restore's Job {name} is not suspended: {:?}",
                job.spec.and_then(|s| s.suspend)
            );
            poll(
                &format!("the pods of suspended Job {name} to go"),
                Duration::from_secs(60),
                || async {
                    let left: Vec<String> = pods
                        .list(&ListParams::default().labels(&format!("job-name={name}")))
                        .await?
                        .items
                        .iter()
                        .map(|p| p.name_any())
                        .collect();
                    Ok(if left.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("pods left: {left:?}"))
                    })
                },
            )
            .await?;
        }
        watcher.finish().await
    })
    .await
}

#[tokio::test]
async fn corrupted_backup_object_fails_the_restore_with_the_checksum() -> Result<()> {
    // A backup of its own: corrupting the shared one would break the other tests.
    let (src, repo_name) = backup_to_fault("to-corrupt").await?;
    // Flip one byte of the stored RDB object through a pod that mounts the repo volume.
    in_repo(
        &src,
        &format!("f=$(ls /repo/{repo_name}/objects/*.zst | head -n1) && printf 'X' | dd of=\"$f\" bs=1 seek=64 conv=notrunc && echo corrupted $f"),
    )
    .await?;
    in_source("r-corrupt", |ns| async move {
        let (msg, watcher) = failed_restore(&ns, "r-corrupt", "to-corrupt").await?;
        ensure!(
            msg.contains("prepareData")
                && (msg.contains("checksum")
                    || msg.contains("corrupt")
                    || msg.contains("integrity")),
            "message does not name the corruption: {msg}"
        );
        let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = ns.api();
        ensure!(
            sts.get_opt("r-corrupt-falkordb").await?.is_none(),
            "a database started on a corrupt restore"
        );
        watcher.finish().await
    })
    .await
}

/// Restores `backup`, a Backup with a fault in the repo, into Cluster `name` with the lie watcher
/// running; returns the Cluster's message once it is `Failed`, and the watcher to finish.
async fn failed_restore(
    ns: &TestNamespace,
    name: &str,
    backup: &str,
) -> Result<(String, LieWatcher)> {
    let m = restored_cluster(name, SOURCE_NS, backup, Entry::Spec, "Parallel", 2);
    let watcher = LieWatcher::start(ns.client.clone(), &ns.name, name);
    create_cluster(ns, m).await?;
    let c = wait_phase(ns, name, ClusterPhase::Failed, RESTORE_TIMEOUT).await?;
    Ok((
        c.status.and_then(|s| s.message).unwrap_or_default(),
        watcher,
    ))
}

/// A backup of the source Cluster of its own, in REPO (whose volume `in_repo` mounts), to inject a
/// fault into; returns the source namespace and the backup's path in the repo.
async fn backup_to_fault(name: &str) -> Result<(TestNamespace, String)> {
    let _ = source().await?;
    let src = TestNamespace {
        client: client().await?,
        name: SOURCE_NS.into(),
    };
    let b = backup(&src, "fdb", name, REPO).await?;
    let path = b
        .status
        .and_then(|s| s.dataset)
        .map(|d| d.manifest_path)
        .unwrap_or_default();
    Ok((src, path))
}

/// Runs `script` in a pod of the source namespace that mounts REPO's volume at /repo, and waits
/// for it to succeed.
async fn in_repo(src: &TestNamespace, script: &str) -> Result<()> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = src.api();
    let _ = pods.delete("corrupter", &DeleteParams::default()).await;
    poll(
        "the old corrupter pod to go",
        Duration::from_secs(60),
        || async {
            Ok(if pods.get_opt("corrupter").await?.is_none() {
                Ok(())
            } else {
                Err("still there".to_string())
            })
        },
    )
    .await?;
    src.create::<k8s_openapi::api::core::v1::Pod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "corrupter"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": lifeboat_e2e::BASE_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "repo", "mountPath": "/repo"}]}],
            "volumes": [{"name": "repo", "persistentVolumeClaim": {"claimName": format!("lifeboat-repo-{REPO}")}}]
        }
    }))
    .await?;
    poll(
        "the corrupter pod to finish",
        Duration::from_secs(120),
        || async {
            let p = pods.get("corrupter").await?;
            Ok(match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded") => Ok(()),
                Some("Failed") => Err(format!(
                    "corrupter failed: {}",
                    lifeboat_e2e::logs(&pods, "corrupter")
                        .await
                        .unwrap_or_default()
                )),
                _ => Err(lifeboat_e2e::pod_summary(&p)),
            })
        },
    )
    .await
}

#[tokio::test]
async fn a_backup_whose_file_loads_but_differs_from_its_manifest_fails_verification() -> Result<()>
{
    let (src, repo_name) = backup_to_fault("to-mismatch").await?;
    // An honest fault: every object stays intact and loads, but the manifest records another
    // content digest (the first one in it has its first hex digit changed). The manifest has no checksum
    // of its own to recompute; the stored objects' checksums are untouched.
    in_repo(
        &src,
        &(r#"m=/repo/REPO_NAME/manifest.json
cp "$m" /tmp/before
c=$(grep -o -E '"digest": *"[0-9a-f]' "$m" | head -n 1 | sed -E 's/.*(.)$/\1/')
[ -n "$c" ] || { echo "no digest in $m"; cat "$m"; exit 1; }
if [ "$c" = a ]; then n=b; else n=a; fi
sed -i -E "0,/(\"digest\": *\")$c/s//\1$n/" "$m"
if cmp -s "$m" /tmp/before; then echo "the digest in $m was not altered"; exit 1; fi
echo "altered the first digest in $m: $c -> $n""#
            .replace("REPO_NAME", &repo_name)),
    )
    .await?;
    in_source("r-mismatch", |ns| async move {
        let (msg, watcher) = failed_restore(&ns, "r-mismatch", "to-mismatch").await?;
        ensure!(
            msg.contains("content digest") && msg.contains("in backup"),
            "the failure does not name the digest that differs: {msg}"
        );
        let restores: Api<Restore> = ns.api();
        let r = restores.get("r-mismatch-falkordb-restore").await?;
        ensure!(
            r.status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Failed),
            "the Restore is not Failed: {:?}",
            r.status
        );
        watcher.finish().await
    })
    .await
}

#[tokio::test]
async fn a_cluster_created_again_under_its_name_never_inherits_the_earlier_restore() -> Result<()> {
    in_source("r-again", |ns| async move {
        let clusters: Api<lifeboat_api::Cluster> = ns.api();
        let restores: Api<Restore> = ns.api();
        let restore_name = "r-again-falkordb-restore";
        let manifest =
            || restored_cluster("r-again", SOURCE_NS, BACKUP, Entry::Spec, "Parallel", 2);
        // First life: restored and verified.
        create_cluster(&ns, manifest()).await?;
        wait_phase(&ns, "r-again", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
        let first = restores.get(restore_name).await?;
        let first_uid = first.metadata.uid.clone().unwrap_or_default();
        // A slow garbage collector, made certain: a finalizer keeps the Completed Restore (and
        // the Jobs it owns) after its Cluster is gone.
        restores
            .patch(
                restore_name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    json!({"metadata": {"finalizers": ["lifeboat.test/hold"]}}),
                ),
            )
            .await?;
        let outcome = async {
            clusters.delete("r-again", &DeleteParams::default()).await?;
            poll(
                "the first Cluster to be gone",
                Duration::from_secs(180),
                || async {
                    Ok(match clusters.get_opt("r-again").await? {
                        None => Ok(()),
                        Some(_) => Err("still there".to_string()),
                    })
                },
            )
            .await?;
            // Second life under the same name, while the first one's Restore is still there.
            let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-again");
            create_cluster(&ns, manifest()).await?;
            let msg = poll(
                "the new Cluster to say it waits for the earlier Restore",
                Duration::from_secs(120),
                || async {
                    let c = clusters.get("r-again").await?;
                    let st = c.status.unwrap_or_default();
                    let msg = st.message.clone().unwrap_or_default();
                    Ok(if st.phase == Some(ClusterPhase::Running) {
                        Ok(Err(format!(
                            "Running on the earlier Cluster's restore: {msg}"
                        )))
                    } else if msg.contains("left over from an earlier Cluster")
                        && msg.contains(restore_name)
                    {
                        Ok(Ok(msg))
                    } else {
                        Err(format!("phase {:?}: {msg}", st.phase))
                    })
                },
            )
            .await?
            .map_err(|e| anyhow::anyhow!(e))?;
            eprintln!("while the earlier Restore stayed, the Cluster said: {msg}");
            // Released, the leftover goes, and the new Cluster restores for itself.
            restores
                .patch(
                    restore_name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await?;
            wait_phase(&ns, "r-again", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            let second = restores.get(restore_name).await?;
            ensure!(
                second.metadata.uid.as_deref() != Some(first_uid.as_str()),
                "the new Cluster reports the earlier Restore {first_uid}"
            );
            assert_verification(&ns, "r-again").await?;
            assert_restored(&ns, "r-again", &source().await?.written).await?;
            watcher.finish().await
        }
        .await;
        // Never leave the hold behind, whatever happened.
        let _ = restores
            .patch(
                restore_name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        outcome
    })
    .await
}

#[tokio::test]
async fn a_restore_pod_refused_by_admission_fails_by_the_deadline_naming_the_refusal() -> Result<()>
{
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let client = client().await?;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let name = "lifeboat-e2e-deny-r-denied";
    // An admission policy that refuses the pods of this one Cluster: the Jobs are created, their
    // pods are not, as with an exhausted ResourceQuota, without touching the other tests.
    let _ = bindings.delete(name, &DeleteParams::default()).await;
    let _ = policies.delete(name, &DeleteParams::default()).await;
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{
                "expression": "!has(object.metadata.labels) || !('app.kubernetes.io/instance' in object.metadata.labels) || object.metadata.labels['app.kubernetes.io/instance'] != 'r-denied'",
                "message": "pods of r-denied are refused by the e2e admission policy"
            }]
        }
    }))?;
    policies.create(&PostParams::default(), &policy).await?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SOURCE_NS}}}}
    }))?;
    bindings.create(&PostParams::default(), &binding).await?;
    let outcome = in_source("r-denied", |ns| async move {
        // The policy is in force once a dry-run pod of the Cluster is refused.
        let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
        let mut probe = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "r-denied-probe", "labels": {"app.kubernetes.io/instance": "r-denied"}},
            "spec": {"containers": [{"name": "c", "image": lifeboat_e2e::BASE_IMAGE}]}
        });
        // Admissible under the namespace's `restricted`, so only the policy can refuse it.
        lifeboat_e2e::restrict_test_pod(&mut probe, "Pod");
        let probe: k8s_openapi::api::core::v1::Pod = serde_json::from_value(probe)?;
        poll("the admission policy to be in force", Duration::from_secs(60), || async {
            Ok(match pods.create(&PostParams { dry_run: true, ..Default::default() }, &probe).await {
                Err(kube::Error::Api(e)) if e.message.contains("refused by the e2e admission policy") => Ok(()),
                other => Err(format!("not refused yet: {:?}", other.map(|p| p.metadata.name))),
            })
        })
        .await?;
        let mut m = restored_cluster("r-denied", SOURCE_NS, BACKUP, Entry::Spec, "Parallel", 2);
        m["spec"]["restore"]["parameters"]["lifeboat.io/prepare-data-deadline"] = json!("60s");
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-denied");
        create_cluster(&ns, m).await?;
        let started = std::time::Instant::now();
        let c = wait_phase(&ns, "r-denied", ClusterPhase::Failed, Duration::from_secs(180)).await?;
        let took = started.elapsed();
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("cannot create its pod") && msg.contains("refused by the e2e admission policy"),
            "the failure does not name the refusal: {msg}"
        );
        let bound = Duration::from_secs(60) + CLUSTER_REQUEUE + DEADLINE_SLACK;
        ensure!(
            took <= bound,
            "the restore failed {:.0}s after creation, past its 60s deadline plus {}s",
            took.as_secs_f64(),
            (bound - Duration::from_secs(60)).as_secs()
        );
        watcher.finish().await
    })
    .await;
    let _ = bindings.delete(name, &DeleteParams::default()).await;
    let _ = policies.delete(name, &DeleteParams::default()).await;
    outcome
}

#[tokio::test]
async fn a_backup_under_continuous_writes_completes_and_its_restore_matches_it() -> Result<()> {
    in_source("busy-restored", |ns| async move {
        // A source Cluster of its own: a writer on the shared one would change what the other
        // tests' Backups of it record.
        create_cluster(&ns, falkordb_cluster("busy", "Delete", 2)).await?;
        let outcome = async {
            wait_phase(&ns, "busy", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
            busy_backup_and_restore(&ns).await
        }
        .await;
        let clusters: Api<lifeboat_api::Cluster> = ns.api();
        let _ = clusters.delete("busy", &DeleteParams::default()).await;
        outcome
    })
    .await
}

/// Backs up Cluster `busy` while a writer keeps writing to it, and restores that Backup.
async fn busy_backup_and_restore(ns: &TestNamespace) -> Result<()> {
    use lifeboat_e2e::writer::{Writer, WriterConfig};
    let writer = Writer::start(
        ns,
        "busy",
        WriterConfig {
            interval: Duration::from_millis(5),
            max_writes: 10_000_000,
            max_duration: Duration::from_secs(900),
        },
    )
    .await?;
    let acked = |w: &Writer| {
        let p = w.progress();
        p.acked_replicated + p.acked_primary_only
    };
    poll(
        "writes to flow before the backup",
        Duration::from_secs(60),
        || async {
            Ok(if acked(&writer) >= 50 {
                Ok(())
            } else {
                Err(writer.progress().to_string())
            })
        },
    )
    .await?;
    let before = acked(&writer);
    let backed_up = backup(ns, "busy", "busy-under-writes", REPO).await;
    let during = acked(&writer) - before;
    let outcome = writer.finish().await?;
    let b = backed_up?;
    eprintln!(
        "backup under writes: {during} writes acknowledged while it ran, {} in all ({} attempted)",
        outcome.acked_replicated.len() + outcome.acked_primary_only.len(),
        outcome.attempted
    );
    ensure!(
        during > 0,
        "no write was acknowledged while the backup ran, so this proves nothing"
    );
    let fp = b
        .status
        .and_then(|s| s.dataset)
        .map(|d| d.fingerprint)
        .unwrap_or_default();
    ensure!(
        !fp.digests.is_empty(),
        "the backup recorded no content digest: {fp:?}"
    );
    // Its restore holds exactly what the saved file held: verified down to the digests.
    create_cluster(
        ns,
        restored_cluster(
            "busy-restored",
            SOURCE_NS,
            "busy-under-writes",
            Entry::Spec,
            "Parallel",
            2,
        ),
    )
    .await?;
    wait_phase(ns, "busy-restored", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
    assert_verification(ns, "busy-restored").await?;
    let restores: Api<Restore> = ns.api();
    let v = r_verification(&restores, "busy-restored-falkordb-restore").await?;
    ensure!(
        v.expected == fp,
        "the Restore checked against {:?}, not the Backup's {fp:?}",
        v.expected
    );
    Ok(())
}

#[tokio::test]
async fn operator_killed_during_prepare_data_resumes_without_duplicating_jobs() -> Result<()> {
    in_source("r-killed", |ns| async move {
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(ns.client.clone(), "lifeboat-system");
        let mut saved = deployments.get("lifeboat-operator").await?;
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-killed");
        // Serial with three volumes keeps prepareData running long enough to be interrupted.
        create_cluster(
            &ns,
            restored_cluster("r-killed", SOURCE_NS, BACKUP, Entry::Spec, "Serial", 3),
        )
        .await?;
        let jobs: Api<Job> = ns.api();
        poll("the first prepareData Job", RESTORE_TIMEOUT, || async {
            Ok(
                if jobs.get_opt("r-killed-falkordb-prepare-0").await?.is_some() {
                    Ok(())
                } else {
                    Err("not yet".into())
                },
            )
        })
        .await?;
        deployments
            .delete("lifeboat-operator", &DeleteParams::foreground())
            .await?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(ns.client.clone(), "lifeboat-system");
        poll(
            "every operator pod to be gone",
            Duration::from_secs(120),
            || async {
                let n = pods
                    .list(&ListParams::default().labels(
                        "app.kubernetes.io/name=lifeboat,app.kubernetes.io/component=operator",
                    ))
                    .await?
                    .items
                    .len();
                let d = deployments.get_opt("lifeboat-operator").await?.is_some();
                Ok(if n == 0 && !d {
                    Ok(())
                } else {
                    Err(format!("{n} pods, deployment exists: {d}"))
                })
            },
        )
        .await?;
        saved.metadata.resource_version = None;
        saved.metadata.uid = None;
        saved.metadata.creation_timestamp = None;
        saved.metadata.managed_fields = None;
        saved.status = None;
        deployments.create(&PostParams::default(), &saved).await?;
        let outcome = async {
            wait_phase(&ns, "r-killed", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            assert_restored(&ns, "r-killed", &source().await?.written).await?;
            let names: Vec<String> = jobs
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|j| j.name_any())
                .filter(|n| n.starts_with("r-killed-falkordb-prepare-"))
                .collect();
            ensure!(
                names.len() == 3,
                "expected exactly one prepareData Job per volume, found {names:?}"
            );
            Ok(())
        }
        .await;
        let lies = watcher.finish().await;
        outcome?;
        lies
    })
    .await
}

#[tokio::test]
async fn backup_of_a_restoring_cluster_waits_then_holds_the_restored_data() -> Result<()> {
    in_source("r-bwait", |ns| async move {
        let source_backup: Backup = ns.api().get(BACKUP).await?;
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "r-bwait");
        create_cluster(
            &ns,
            restored_cluster("r-bwait", SOURCE_NS, BACKUP, Entry::Spec, "Serial", 2),
        )
        .await?;
        let policies: Api<lifeboat_api::BackupPolicy> = ns.api();
        policy_for_repo(&ns, "r-bwait", "r-bwait-to-e2e-repo", REPO).await?;
        create_backup(&ns, "r-bwait-backup", "r-bwait-to-e2e-repo", "Delete").await?;
        let backups: Api<Backup> = ns.api();
        let restores: Api<Restore> = ns.api();
        let waiting = poll("the Backup to say it waits for the restore", Duration::from_secs(60), || async {
            let b = backups.get("r-bwait-backup").await?;
            let st = b.status.unwrap_or_default();
            let cond = st.conditions.iter().find(|c| c.type_ == "Waiting");
            let restore_phase = restores
                .get_opt("r-bwait-falkordb-restore")
                .await?
                .and_then(|r| r.status)
                .and_then(|s| s.phase);
            Ok(match cond {
                Some(c) if c.status == "True" && c.reason == "ClusterRestoring" => {
                    if restore_phase == Some(RestorePhase::Completed) {
                        Err(anyhow::anyhow!("the Backup says it waits, but the restore already completed: the test raced"))?
                    }
                    Ok((st.phase, c.message.clone()))
                }
                _ => Err(format!("phase {:?}, condition {cond:?}, restore {restore_phase:?}", st.phase)),
            })
        })
        .await?;
        eprintln!("while restoring, the Backup said: {waiting:?}");
        ensure!(
            waiting.1.contains("r-bwait") && waiting.1.contains("restore"),
            "the Waiting message does not name the Cluster and its restore: {}",
            waiting.1
        );
        let outcome = async {
            let b = wait_backup(&ns, "r-bwait-backup", BackupPhase::Completed, RESTORE_TIMEOUT).await?;
            let r = restores.get("r-bwait-falkordb-restore").await?;
            ensure!(
                r.status.and_then(|s| s.phase) == Some(RestorePhase::Completed),
                "the Backup completed but the restore did not"
            );
            let got = b.status.and_then(|s| s.dataset).map(|d| d.fingerprint);
            let want = source_backup.status.and_then(|s| s.dataset).map(|d| d.fingerprint);
            ensure!(
                got.is_some() && got == want,
                "the backup of the restored Cluster holds {got:?}, the original backup {want:?}"
            );
            Ok(())
        }
        .await;
        let _ = backups.delete("r-bwait-backup", &DeleteParams::default()).await;
        let _ = policies.delete("r-bwait-to-e2e-repo", &DeleteParams::default()).await;
        let lies = watcher.finish().await;
        outcome?;
        lies
    })
    .await
}

#[tokio::test]
async fn backup_job_that_cannot_be_scheduled_fails_within_its_deadline() -> Result<()> {
    // No Cluster of its own: it backs up the shared source Cluster.
    in_source("none", |ns| async move {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ns.client.clone());
        let node = nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .next()
            .map(|n| n.name_any())
            .ok_or_else(|| anyhow::anyhow!("the cluster has no node"))?;
        let cordon = |on: bool| {
            let nodes = nodes.clone();
            let node = node.clone();
            async move {
                nodes
                    .patch(
                        &node,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&json!({"spec": {"unschedulable": on}})),
                    )
                    .await
            }
        };
        // A cordoned node: the running database keeps running, but the backup Job's pod,
        // pinned to that node to mount the data volume, can never be scheduled.
        cordon(true).await?;
        let backups: Api<Backup> = ns.api();
        let outcome = async {
            ns.create::<Backup>(json!({
                "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
                "kind": "Backup",
                "metadata": {"name": "unsched-backup", "annotations": {"lifeboat.io/backup-deadline": "40s"}},
                "spec": {"backupPolicyName": repo_policy("fdb", REPO), "backupMethod": "datafile"}
            }))
            .await?;
            let started = std::time::Instant::now();
            let b = wait_backup(&ns, "unsched-backup", BackupPhase::Failed, Duration::from_secs(150)).await?;
            let reason = b.status.and_then(|s| s.failure_reason).unwrap_or_default();
            let took = started.elapsed();
            let bound = Duration::from_secs(40) + BACKUP_REQUEUE + DEADLINE_SLACK;
            eprintln!(
                "unschedulable backup Failed {:.0}s after creation (deadline 40s, bound {}s): {reason}",
                took.as_secs_f64(),
                bound.as_secs()
            );
            ensure!(
                took <= bound,
                "the backup failed {:.0}s after creation, past its 40s deadline plus {}s",
                took.as_secs_f64(),
                (bound - Duration::from_secs(40)).as_secs()
            );
            ensure!(
                reason.contains("deadline of 40s")
                    && reason.contains("cannot be scheduled")
                    && reason.contains("unschedulable"),
                "the reason does not quote the deadline and the scheduler: {reason}"
            );
            let jobs: Api<Job> = ns.api();
            let job = jobs
                .list(&ListParams::default().labels("lifeboat.io/backup=unsched-backup"))
                .await?
                .items
                .into_iter()
                .next()
                .ok_or_else(|| anyhow::anyhow!("the backup Job was removed"))?;
            ensure!(
                job.spec.and_then(|s| s.suspend) == Some(true),
                "the failed backup's Job is not suspended, so it could still run later"
            );
            Ok(())
        }
        .await;
        let uncordoned = cordon(false).await;
        let _ = backups.delete("unsched-backup", &DeleteParams::default()).await;
        outcome?;
        uncordoned?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn backup_job_that_keeps_failing_ends_failed_with_the_mover_reason() -> Result<()> {
    // No Cluster of its own: it backs up the shared source Cluster, with the wrong password.
    in_source("none", |ns| async move {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = ns.api();
        let policies: Api<lifeboat_api::BackupPolicy> = ns.api();
        let backups: Api<Backup> = ns.api();
        let outcome = async {
            ns.create::<k8s_openapi::api::core::v1::Secret>(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "fdb-wrong-password"},
                "stringData": {"username": "default", "password": "not-the-password"}
            }))
            .await?;
            policy_from_default(&ns, "fdb", "fdb-wrong-password", |spec| {
                spec["target"]["connectionCredential"]["secretName"] = json!("fdb-wrong-password");
                spec["backupRepoName"] = json!(REPO);
            })
            .await?;
            create_backup(&ns, "wrong-password-backup", "fdb-wrong-password", "Delete").await?;
            let started = std::time::Instant::now();
            let b = wait_backup(
                &ns,
                "wrong-password-backup",
                BackupPhase::Failed,
                Duration::from_secs(240),
            )
            .await?;
            let reason = b.status.and_then(|s| s.failure_reason).unwrap_or_default();
            eprintln!(
                "failing backup Failed {:.0}s after creation: {reason}",
                started.elapsed().as_secs_f64()
            );
            ensure!(
                reason.contains("BackoffLimitExceeded")
                    && (reason.contains("WRONGPASS") || reason.contains("password")),
                "the reason does not say the Job gave up and why: {reason}"
            );
            Ok(())
        }
        .await;
        let _ = backups
            .delete("wrong-password-backup", &DeleteParams::default())
            .await;
        let _ = policies
            .delete("fdb-wrong-password", &DeleteParams::default())
            .await;
        let _ = secrets
            .delete("fdb-wrong-password", &DeleteParams::default())
            .await;
        outcome
    })
    .await
}

#[tokio::test]
async fn backup_through_the_default_repo_and_two_defaults_are_refused_naming_both() -> Result<()> {
    // The one test that relies on "the default" repo: it owns the default for its duration, and
    // fails at once, naming it, if another repo is marked default on this bed.
    let _ = source().await?;
    let client = client().await?;
    let repos: Api<lifeboat_api::BackupRepo> = Api::all(client.clone());
    let second = "lifeboat-e2e-second-default";
    // This test's own second default, if a killed run left it behind.
    let _ = repos.delete(second, &DeleteParams::default()).await;
    let owned = OwnedDefault::take(&client, REPO).await?;
    let src = TestNamespace {
        client: client.clone(),
        name: SOURCE_NS.into(),
    };
    let backups: Api<Backup> = src.api();
    let default_policy = "fdb-falkordb-backup-policy";
    let outcome = async {
        // The Cluster's own policy names no repo, so the Backup goes to the default one.
        let b = backup_with(&src, "through-default", default_policy, "Delete").await?;
        let recorded = b.status.as_ref().and_then(|s| s.backup_repo_name.clone());
        ensure!(
            recorded.as_deref() == Some(REPO),
            "a Backup under {default_policy} went to {recorded:?}, not the default {REPO}"
        );
        ensure_backup_holds(&b, &source().await?.written)?;

        pvc_repo(&client, second).await?;
        set_default(&client, second, true).await?;
        create_backup(&src, "two-defaults", default_policy, "Delete").await?;
        let b = wait_backup(
            &src,
            "two-defaults",
            BackupPhase::Failed,
            Duration::from_secs(60),
        )
        .await?;
        let reason = b.status.and_then(|s| s.failure_reason).unwrap_or_default();
        eprintln!("with two default repos, the Backup failed: {reason}");
        ensure!(
            reason.contains(REPO) && reason.contains(second) && reason.contains("default"),
            "the reason does not name both default repos: {reason}"
        );
        Ok(())
    }
    .await;
    for name in ["through-default", "two-defaults"] {
        let _ = backups.delete(name, &DeleteParams::default()).await;
    }
    let released = owned.release().await;
    let removed = repos.delete(second, &DeleteParams::default()).await;
    outcome?;
    released?;
    match removed {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
