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
use lifeboat_api::dataprotection::v1alpha1::RestorePhase;
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
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": SOURCE_NS, "labels": {"lifeboat.dev/e2e": "restore-source"}}}))?;
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
            backup(&ns, "fdb", BACKUP).await?;
            wait_phase(&ns, "empty", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
            backup(&ns, "empty", EMPTY_BACKUP).await?;
            Ok(Source { written })
        })
        .await
}

/// Restores `cluster` in a fresh namespace through `entry`, with the lie watcher running, and
/// checks the data.
async fn restore_and_check(test: &str, entry: Entry, policy: &str, replicas: i32) -> Result<()> {
    let src = source().await?;
    in_namespace(test, |ns| async move {
        grant(&ns.name).await?;
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "fdb-restored");
        create_cluster(
            &ns,
            restored_cluster("fdb-restored", SOURCE_NS, BACKUP, entry, policy, replicas),
        )
        .await?;
        let outcome = async {
            wait_phase(&ns, "fdb-restored", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            let restores: Api<Restore> = ns.api();
            let r = restores.get("fdb-restored-falkordb-restore").await?;
            ensure!(
                r.status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Completed),
                "Cluster Running but Restore {:?}",
                r.status
            );
            assert_restored(&ns, "fdb-restored", &src.written).await?;
            let jobs: Api<Job> = ns.api();
            let prepare: Vec<String> = jobs
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|j| j.name_any())
                .filter(|n| n.contains("-prepare-"))
                .collect();
            ensure!(
                prepare.len() == usize::try_from(replicas)?,
                "expected one prepareData Job per volume, found {prepare:?}"
            );
            eprintln!("{}", restore_report(&ns, "fdb-restored").await?);
            Ok(())
        }
        .await;
        let lies = watcher.finish();
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
    restore_and_check("restore-spec", Entry::Spec, "Parallel", 2).await
}

#[tokio::test]
async fn field_report_case_1_annotation_restores_the_data_and_warns() -> Result<()> {
    restore_and_check("restore-annotation", Entry::Annotation, "Parallel", 2).await?;
    Ok(())
}

#[tokio::test]
async fn serial_policy_with_three_replicas_spec_restore() -> Result<()> {
    restore_and_check("restore-serial-spec", Entry::Spec, "Serial", 3).await
}

#[tokio::test]
async fn serial_policy_with_three_replicas_annotation() -> Result<()> {
    restore_and_check("restore-serial-anno", Entry::Annotation, "Serial", 3).await
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

#[tokio::test]
async fn empty_cluster_backup_restores_to_an_empty_cluster() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-empty", |ns| async move {
        grant(&ns.name).await?;
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "fdb-restored");
        create_cluster(
            &ns,
            restored_cluster(
                "fdb-restored",
                SOURCE_NS,
                EMPTY_BACKUP,
                Entry::Spec,
                "Parallel",
                2,
            ),
        )
        .await?;
        let outcome = async {
            wait_phase(&ns, "fdb-restored", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
            let primary = poll("one primary label", Duration::from_secs(60), || {
                primary_pod(&ns, "fdb-restored")
            })
            .await?;
            let size = redis_cli(&pods, &primary, "DBSIZE").await?;
            ensure!(
                size.trim() == "0",
                "an empty backup restored to DBSIZE {}",
                size.trim()
            );
            let restores: Api<Restore> = ns.api();
            let r = restores.get("fdb-restored-falkordb-restore").await?;
            ensure!(
                r.status.and_then(|s| s.phase) == Some(RestorePhase::Completed),
                "empty restore not reported Completed"
            );
            Ok(())
        }
        .await;
        let lies = watcher.finish();
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
    watcher.finish()
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
        // No grant() here.
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
async fn pvc_deleted_while_prepare_data_runs_fails_naming_it() -> Result<()> {
    let _ = source().await?;
    in_namespace("restore-pvcgone", |ns| async move {
        grant(&ns.name).await?;
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "fdb-restored");
        create_cluster(
            &ns,
            restored_cluster("fdb-restored", SOURCE_NS, BACKUP, Entry::Spec, "Serial", 2),
        )
        .await?;
        let pvcs: Api<PersistentVolumeClaim> = ns.api();
        // Serial: volume 1 is created only after volume 0 is written; delete it as soon as it
        // appears, while its Job needs it.
        poll("the second data PVC", RESTORE_TIMEOUT, || async {
            Ok(match pvcs.get_opt("data-fdb-restored-falkordb-1").await? {
                Some(_) => Ok(()),
                None => Err("not yet".into()),
            })
        })
        .await?;
        pvcs.delete("data-fdb-restored-falkordb-1", &DeleteParams::default())
            .await?;
        let c = wait_phase(&ns, "fdb-restored", ClusterPhase::Failed, RESTORE_TIMEOUT).await?;
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("data-fdb-restored-falkordb-1"),
            "message does not name the PVC: {msg}"
        );
        watcher.finish()
    })
    .await
}
