//! S3 BackupRepos on the bed, against real MinIO: the repo is Ready only when the store answers;
//! a Backup into S3 restores in another namespace with verified data, and deleting it removes
//! its objects; a store that dies while prepareData runs fails the restore, with the reason;
//! expired Backups go with their objects, and a Cluster's newest Completed one stays.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, BackupRepoPhase};
use lifeboat_api::{Backup, BackupRepo, ClusterPhase};
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::operator::events_on;
use lifeboat_e2e::s3::*;
use lifeboat_e2e::scenario::*;
use lifeboat_e2e::{client, in_namespace, poll};
use serde_json::json;

/// How long the BackupRepo controller may take to notice a store came or went.
const REPO_CHECK: Duration = Duration::from_secs(90);

#[tokio::test]
async fn s3_repo_is_ready_only_when_the_store_answers() -> Result<()> {
    let c = client().await?;
    let creds = bed_credentials()?;
    s3_repo(&c, "e2e-s3-good", BED_ENDPOINT, BED_BUCKET, &creds).await?;
    let ok = wait_repo(&c, "e2e-s3-good", BackupRepoPhase::Ready, REPO_CHECK).await;

    s3_repo(
        &c,
        "e2e-s3-nothing-listens",
        &format!("http://{NODE_IP}:1"),
        BED_BUCKET,
        &creds,
    )
    .await?;
    let down = wait_repo(
        &c,
        "e2e-s3-nothing-listens",
        BackupRepoPhase::Failed,
        REPO_CHECK,
    )
    .await;

    let wrong = Credentials {
        access_key_id: creds.access_key_id.clone(),
        secret_access_key: "not-the-password".into(),
    };
    s3_repo(&c, "e2e-s3-wrong-secret", BED_ENDPOINT, BED_BUCKET, &wrong).await?;
    let denied = wait_repo(
        &c,
        "e2e-s3-wrong-secret",
        BackupRepoPhase::Failed,
        REPO_CHECK,
    )
    .await;

    s3_repo(
        &c,
        "e2e-s3-no-bucket",
        BED_ENDPOINT,
        "no-such-bucket",
        &creds,
    )
    .await?;
    let nobucket = wait_repo(&c, "e2e-s3-no-bucket", BackupRepoPhase::Failed, REPO_CHECK).await;

    for r in [
        "e2e-s3-good",
        "e2e-s3-nothing-listens",
        "e2e-s3-wrong-secret",
        "e2e-s3-no-bucket",
    ] {
        delete_repo(&c, r).await?;
    }
    let message =
        |r: lifeboat_api::BackupRepo| r.status.and_then(|s| s.message).unwrap_or_default();
    ok?;
    let m = message(down?);
    eprintln!("nothing listening: {m}");
    ensure!(
        m.contains("e2e-s3-nothing-listens") && m.contains(&format!("{NODE_IP}:1")),
        "the message names neither the repo nor the endpoint: {m}"
    );
    let m = message(denied?);
    eprintln!("wrong secret: {m}");
    ensure!(
        m.contains("e2e-s3-wrong-secret") && m.contains("SignatureDoesNotMatch"),
        "the message does not say the credentials were refused: {m}"
    );
    let m = message(nobucket?);
    eprintln!("no bucket: {m}");
    ensure!(
        m.contains("no-such-bucket") && m.contains("NoSuchBucket"),
        "the message does not say the bucket is missing: {m}"
    );
    Ok(())
}

#[tokio::test]
async fn s3_backup_restores_in_another_namespace_and_its_deletion_removes_the_data() -> Result<()> {
    const REPO: &str = "e2e-s3-bed";
    let c = client().await?;
    let creds = bed_credentials()?;
    s3_repo(&c, REPO, BED_ENDPOINT, BED_BUCKET, &creds).await?;
    wait_repo(&c, REPO, BackupRepoPhase::Ready, REPO_CHECK).await?;
    let store = store(BED_ENDPOINT, BED_BUCKET, &creds)?;
    let result = in_namespace("s3-source", |src| async move {
        create_cluster(&src, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&src, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let written = write_dataset(&src, "fdb", 1000, 128).await?;
        policy_for_repo(&src, "fdb", "fdb-to-s3", REPO).await?;
        let b = backup_with(&src, "fdb-s3", "fdb-to-s3", "Delete").await?;
        ensure_backup_holds(&b, &written)?;
        let st = b.status.clone().unwrap_or_default();
        ensure!(
            st.backup_repo_name.as_deref() == Some(REPO),
            "Backup went to repo {:?}",
            st.backup_repo_name
        );
        // The mover's result is also the Job pod's termination message, where the operator
        // reads it first.
        let message = result_message(&src, "lifeboat.io/backup=fdb-s3").await?;
        let line: serde_json::Value = serde_json::from_str(message.trim())
            .map_err(|e| anyhow::anyhow!("backup pod's message is not a result line ({e}): {message:?}"))?;
        ensure!(
            line["objectCount"].as_u64().unwrap_or(0) > 0
                && line["checkedObjects"] == line["objectCount"]
                && line["fingerprint"].is_object(),
            "backup pod's termination message is not its result line: {message}"
        );
        let path = st.path.clone().unwrap_or_default();
        let objects = list(store.as_ref(), &path).await?;
        eprintln!("Backup fdb-s3 at {path}: {objects:?}");
        ensure!(
            objects.iter().any(|(k, _)| k.ends_with("manifest.json"))
                && objects.iter().any(|(_, size)| *size > 0),
            "the bucket holds no manifest and data under {path}: {objects:?}"
        );
        let src_ns = src.name.clone();
        in_namespace("s3-target", |dst| {
            let src_ns = src_ns.clone();
            async move {
                let backups: Api<Backup> = Api::namespaced(dst.client.clone(), &src_ns);
                let grant = json!({"metadata": {"annotations": {"lifeboat.io/allow-restore-to-namespaces": dst.name}}});
                backups
                    .patch("fdb-s3", &PatchParams::default(), &Patch::Merge(&grant))
                    .await?;
                let watcher = LieWatcher::start(dst.client.clone(), &dst.name, "restored");
                create_cluster(
                    &dst,
                    restored_cluster("restored", &src_ns, "fdb-s3", Entry::Spec, "Parallel", 2),
                )
                .await?;
                let outcome: Result<()> = async {
                    wait_phase(&dst, "restored", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
                    assert_restored(&dst, "restored", &written).await?;
                    assert_verification(&dst, "restored").await?;
                    let verified = result_message(
                        &dst,
                        "app.kubernetes.io/instance=restored,job-name=restored-falkordb-verify",
                    )
                    .await?;
                    let lines: Vec<serde_json::Value> = verified
                        .lines()
                        .filter_map(|l| serde_json::from_str(l).ok())
                        .collect();
                    ensure!(
                        lines.len() == 2 && lines.iter().all(|l| l["match"] == true),
                        "the verify pod's termination message is not one matching line a server: {verified:?}"
                    );
                    eprintln!("{}", restore_report(&dst, "restored").await?);
                    Ok(())
                }
                .await;
                let lies = watcher.finish().await;
                outcome?;
                lies
            }
        })
        .await?;
        // deletionPolicy Delete: the Backup goes only after its objects did.
        let backups: Api<Backup> = src.api();
        backups.delete("fdb-s3", &DeleteParams::default()).await?;
        wait_backup_gone(&src, "fdb-s3", Duration::from_secs(180)).await?;
        let left = list(store.as_ref(), &path).await?;
        ensure!(
            left.is_empty(),
            "deleting the Backup left objects behind: {left:?}"
        );
        Ok(())
    })
    .await;
    delete_repo(&c, REPO).await?;
    result
}

/// The termination message of the finished pod of a Job selected by `selector`.
async fn result_message(ns: &lifeboat_e2e::TestNamespace, selector: &str) -> Result<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let list = pods
        .list(&kube::api::ListParams::default().labels(selector))
        .await?;
    let messages: Vec<String> = list
        .items
        .iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        })
        .collect();
    messages
        .into_iter()
        .find(|m| !m.trim().is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no pod with {selector} has a termination message ({} pods)",
                list.items.len()
            )
        })
}

/// Every object below `prefix` with its bytes, read back through the store.
async fn read_all(
    store: &dyn object_store::ObjectStore,
    prefix: &str,
) -> Result<Vec<(String, Vec<u8>)>> {
    use object_store::ObjectStoreExt;
    let mut out = Vec::new();
    for (key, _) in list(store, prefix).await? {
        let bytes = store
            .get(&object_store::path::Path::from(key.as_str()))
            .await?
            .bytes()
            .await?;
        out.push((key, bytes.to_vec()));
    }
    out.sort();
    Ok(out)
}

#[tokio::test]
async fn deleting_a_backup_leaves_a_sibling_whose_name_extends_it() -> Result<()> {
    const REPO: &str = "e2e-s3-siblings";
    let c = client().await?;
    let creds = bed_credentials()?;
    s3_repo(&c, REPO, BED_ENDPOINT, BED_BUCKET, &creds).await?;
    let repo_uid = wait_repo(&c, REPO, BackupRepoPhase::Ready, REPO_CHECK)
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let store = store(BED_ENDPOINT, BED_BUCKET, &creds)?;
    let result = in_namespace("s3-siblings", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let written = write_dataset(&ns, "fdb", 500, 64).await?;
        policy_for_repo(&ns, "fdb", "fdb-to-s3", REPO).await?;
        let secrets: Api<Secret> = ns.api();
        let copy_name = format!("lifeboat-repo-{REPO}-credential");
        let repos: Api<BackupRepo> = Api::all(ns.client.clone());
        let record = format!("copies.lifeboat.io/{}", ns.name);

        // A repo that does not serve this namespace: the Backup fails naming why, and its
        // credentials never reach the namespace.
        let limit = |v: serde_json::Value| {
            json!({"metadata": {"annotations": {"lifeboat.io/allowed-namespaces": v}}})
        };
        repos
            .patch(REPO, &PatchParams::default(), &Patch::Merge(&limit(json!("e2e-elsewhere"))))
            .await?;
        create_backup(&ns, "refused", "fdb-to-s3", "Delete").await?;
        let refused = wait_backup(&ns, "refused", BackupPhase::Failed, Duration::from_secs(120)).await?;
        let msg = refused.status.and_then(|s| s.failure_reason).unwrap_or_default();
        ensure!(
            msg.contains("does not serve namespace") && msg.contains(&ns.name) && msg.contains("lifeboat.io/allowed-namespaces"),
            "the refused Backup does not say why: {msg}"
        );
        ensure!(
            secrets.get_opt(&copy_name).await?.is_none(),
            "a repo that does not serve the namespace copied its credentials there"
        );
        repos
            .patch(REPO, &PatchParams::default(), &Patch::Merge(&limit(json!(format!("{}, e2e-elsewhere", ns.name)))))
            .await?;
        let a = backup_with(&ns, "a", "fdb-to-s3", "Delete").await?;
        let ab = backup_with(&ns, "a-b", "fdb-to-s3", "Delete").await?;
        ensure_backup_holds(&ab, &written)?;

        // Using the repo gave the namespace a copy of its credentials, labelled with the repo's
        // UID and owned by the repo, holding only what the mover reads, and recorded on the repo.
        let copy = secrets.get(&copy_name).await?;
        let keys: Vec<&String> = copy.data.iter().flatten().map(|(k, _)| k).collect();
        ensure!(
            keys == ["accessKeyId", "secretAccessKey"],
            "the credential copy holds keys {keys:?}, not only the two the mover reads"
        );
        ensure!(
            repos.get(REPO).await?.annotations().contains_key(&record),
            "the repo does not record its copy in {}: {:?}",
            ns.name,
            repos.get(REPO).await?.annotations()
        );
        ensure!(
            copy.labels().get("lifeboat.io/backup-repo-uid") == Some(&repo_uid)
                && copy.owner_references().iter().any(|o| o.uid == repo_uid),
            "the credential copy is not marked as the repo's: labels {:?}, owners {:?}",
            copy.labels(),
            copy.owner_references()
        );

        let path_of = |b: &Backup| {
            b.status
                .as_ref()
                .and_then(|s| s.path.clone())
                .unwrap_or_default()
        };
        let (a_path, ab_path) = (path_of(&a), path_of(&ab));
        let before = read_all(store.as_ref(), &ab_path).await?;
        eprintln!(
            "Backup a at {a_path}, a-b at {ab_path} with {} objects",
            before.len()
        );
        ensure!(
            before.iter().any(|(k, _)| k.ends_with("manifest.json")) && before.len() >= 2,
            "a-b holds no manifest and data under {ab_path}: {:?}",
            before.iter().map(|(k, _)| k).collect::<Vec<_>>()
        );
        let backups: Api<Backup> = ns.api();
        backups.delete("a", &DeleteParams::default()).await?;
        wait_backup_gone(&ns, "a", Duration::from_secs(180)).await?;
        let left = list(store.as_ref(), &a_path).await?;
        ensure!(
            left.is_empty(),
            "deleting Backup a left objects behind: {left:?}"
        );
        let after = read_all(store.as_ref(), &ab_path).await?;
        ensure!(
            after == before,
            "deleting Backup a changed the objects of a-b: before {:?}, after {:?}",
            before.iter().map(|(k, b)| (k, b.len())).collect::<Vec<_>>(),
            after.iter().map(|(k, b)| (k, b.len())).collect::<Vec<_>>()
        );

        // a-b still restores, with the data it was taken with.
        create_cluster(
            &ns,
            restored_cluster("restored", &ns.name, "a-b", Entry::Spec, "Parallel", 2),
        )
        .await?;
        wait_phase(&ns, "restored", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
        assert_restored(&ns, "restored", &written).await?;

        // Once no Backup or restore there needs the repo, the namespace loses its credentials.
        backups.delete("a-b", &DeleteParams::default()).await?;
        wait_backup_gone(&ns, "a-b", Duration::from_secs(180)).await?;
        poll(
            "the credential copy to go from a namespace that no longer uses the repo",
            REPO_CHECK,
            || async {
                Ok(match secrets.get_opt(&copy_name).await? {
                    None => Ok(()),
                    Some(s) => Err(format!("still there, labels {:?}", s.labels())),
                })
            },
        )
        .await?;
        // And the repo forgets it.
        poll("the repo to forget the copy", REPO_CHECK, || async {
            let annotations = repos.get(REPO).await?.annotations().clone();
            Ok(if annotations.contains_key(&record) {
                Err(format!("still recorded: {annotations:?}"))
            } else {
                Ok(())
            })
        })
        .await
    })
    .await;
    delete_repo(&c, REPO).await?;
    result
}

#[tokio::test]
async fn repo_unreachable_during_prepare_data_fails_the_restore() -> Result<()> {
    const REPO: &str = "e2e-s3-doomed";
    let c = client().await?;
    let mut minio = OwnMinio::start("doomed").await?;
    s3_repo(&c, REPO, &minio.endpoint, &minio.bucket, &minio.creds).await?;
    wait_repo(&c, REPO, BackupRepoPhase::Ready, REPO_CHECK).await?;
    let result = in_namespace("s3-doomed", |ns| {
        let minio = &mut minio;
        async move {
            create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
            wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
            let written = write_dataset(&ns, "fdb", 500, 64).await?;
            policy_for_repo(&ns, "fdb", "fdb-to-doomed", REPO).await?;
            // Retain: with the store gone, a Delete policy could never finish deleting the data,
            // and the namespace would not go.
            let b = backup_with(&ns, "fdb-doomed", "fdb-to-doomed", "Retain").await?;
            ensure_backup_holds(&b, &written)?;

            let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "restored");
            create_cluster(
                &ns,
                restored_cluster(
                    "restored",
                    &ns.name,
                    "fdb-doomed",
                    Entry::Spec,
                    "Parallel",
                    2,
                ),
            )
            .await?;
            let jobs: Api<Job> = ns.api();
            poll("the first prepareData Job", RESTORE_TIMEOUT, || async {
                Ok(match jobs.get_opt("restored-falkordb-prepare-0").await? {
                    Some(_) => Ok(()),
                    None => Err("not created yet".to_string()),
                })
            })
            .await?;
            minio.kill()?;
            let killed = Instant::now();
            let cl = wait_phase(&ns, "restored", ClusterPhase::Failed, RESTORE_TIMEOUT).await?;
            let msg = cl.status.and_then(|s| s.message).unwrap_or_default();
            eprintln!(
                "store killed -> Cluster Failed in {:.1}s: {msg}",
                killed.elapsed().as_secs_f64()
            );
            ensure!(
                msg.contains("prepareData") && msg.contains("unreachable"),
                "the message does not say the repo became unreachable during prepareData: {msg}"
            );
            let sts: Api<StatefulSet> = ns.api();
            ensure!(
                sts.get_opt("restored-falkordb").await?.is_none(),
                "a database started although prepareData failed"
            );
            let failed_jobs: Vec<String> = jobs
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter(|j| j.status.as_ref().and_then(|s| s.failed).unwrap_or(0) > 0)
                .map(|j| j.name_any())
                .collect();
            ensure!(
                !failed_jobs.is_empty(),
                "no failed Job was kept for its logs"
            );
            watcher.finish().await
        }
    })
    .await;
    delete_repo(&c, REPO).await?;
    result
}

/// A store whose certificate an in-house authority signed: without the repo's `caBundle` the
/// repo is Failed, saying the certificate is not trusted; with it the repo is Ready, and a
/// Backup's Job writes through it and a restore's Jobs read and verify through it.
#[tokio::test]
async fn a_store_behind_a_private_authority_is_reached_with_the_repos_ca_bundle() -> Result<()> {
    const UNTRUSTED: &str = "e2e-s3-tls-untrusted";
    const TRUSTED: &str = "e2e-s3-tls";
    let c = client().await?;
    let minio = OwnMinio::start_tls("tls").await?;
    let ca = minio.ca_pem.clone().unwrap_or_default();
    ensure!(minio.endpoint.starts_with("https://"), "{}", minio.endpoint);
    s3_repo(&c, UNTRUSTED, &minio.endpoint, &minio.bucket, &minio.creds).await?;
    let untrusted = wait_repo(&c, UNTRUSTED, BackupRepoPhase::Failed, REPO_CHECK).await;
    delete_repo(&c, UNTRUSTED).await?;
    let m = untrusted?
        .status
        .and_then(|s| s.message)
        .unwrap_or_default();
    eprintln!("without caBundle: {m}");
    ensure!(
        m.contains(UNTRUSTED) && m.to_lowercase().contains("certificate"),
        "the message does not say the store's certificate is not trusted: {m}"
    );

    s3_repo_with(
        &c,
        TRUSTED,
        &minio.endpoint,
        &minio.bucket,
        &minio.creds,
        &[("caBundle", ca.as_str())],
    )
    .await?;
    wait_repo(&c, TRUSTED, BackupRepoPhase::Ready, REPO_CHECK).await?;
    let store = store_trusting(&minio.endpoint, &minio.bucket, &minio.creds, Some(&ca))?;
    let result = in_namespace("s3-tls", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let written = write_dataset(&ns, "fdb", 300, 64).await?;
        policy_for_repo(&ns, "fdb", "fdb-to-tls", TRUSTED).await?;
        let b = backup_with(&ns, "fdb-tls", "fdb-to-tls", "Delete").await?;
        ensure_backup_holds(&b, &written)?;
        let path = b.status.and_then(|s| s.path).unwrap_or_default();
        let objects = list(store.as_ref(), &path).await?;
        ensure!(
            objects.iter().any(|(k, _)| k.ends_with("manifest.json")),
            "the TLS bucket holds no manifest under {path}: {objects:?}"
        );
        let watcher = LieWatcher::start(ns.client.clone(), &ns.name, "restored");
        create_cluster(
            &ns,
            restored_cluster("restored", &ns.name, "fdb-tls", Entry::Spec, "Parallel", 2),
        )
        .await?;
        let outcome: Result<()> = async {
            wait_phase(&ns, "restored", ClusterPhase::Running, RESTORE_TIMEOUT).await?;
            assert_restored(&ns, "restored", &written).await?;
            assert_verification(&ns, "restored").await?;
            Ok(())
        }
        .await;
        let lies = watcher.finish().await;
        outcome?;
        lies
    })
    .await;
    delete_repo(&c, TRUSTED).await?;
    result
}

#[tokio::test]
async fn expired_backups_go_with_their_objects_and_the_newest_completed_stays() -> Result<()> {
    const REPO: &str = "e2e-s3-retention";
    const PERIOD: Duration = Duration::from_secs(60);
    let c = client().await?;
    let creds = bed_credentials()?;
    s3_repo(&c, REPO, BED_ENDPOINT, BED_BUCKET, &creds).await?;
    wait_repo(&c, REPO, BackupRepoPhase::Ready, REPO_CHECK).await?;
    let store = store(BED_ENDPOINT, BED_BUCKET, &creds)?;
    let result = in_namespace("s3-retention", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        write_dataset(&ns, "fdb", 200, 64).await?;
        policy_for_repo(&ns, "fdb", "fdb-to-s3", REPO).await?;
        let backups: Api<Backup> = ns.api();
        let expiring = |name: &str| {
            json!({
                "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
                "metadata": {"name": name},
                "spec": {"backupPolicyName": "fdb-to-s3", "backupMethod": "datafile",
                         "deletionPolicy": "Delete", "retentionPeriod": "1m"}
            })
        };
        // The status says when each one expires: its completion plus the period.
        let expiry_of = |name: &'static str| {
            let backups = backups.clone();
            async move {
                poll(
                    &format!("Backup {name} to record its expiration"),
                    Duration::from_secs(60),
                    || async {
                        let st = backups.get(name).await?.status.unwrap_or_default();
                        let done = st.completion_timestamp.map(|t| t.0);
                        let exp = st.expiration.map(|t| t.0);
                        Ok(match (done, exp) {
                            (Some(d), Some(e)) if e.duration_since(d).unsigned_abs() == PERIOD => {
                                Ok(e)
                            }
                            other => Err(format!("completion and expiration: {other:?}")),
                        })
                    },
                )
                .await
            }
        };
        let until = |t: k8s_openapi::jiff::Timestamp| {
            k8s_openapi::jiff::Timestamp::now()
                .duration_until(t)
                .unsigned_abs()
        };
        ns.create::<Backup>(expiring("older")).await?;
        let older = wait_backup(&ns, "older", BackupPhase::Completed, BACKUP_TIMEOUT).await?;
        ns.create::<Backup>(expiring("newer")).await?;
        wait_backup(&ns, "newer", BackupPhase::Completed, BACKUP_TIMEOUT).await?;
        let (older_exp, newer_exp) = (expiry_of("older").await?, expiry_of("newer").await?);
        let older_path = older.status.and_then(|s| s.path).unwrap_or_default();
        ensure!(
            !list(store.as_ref(), &older_path).await?.is_empty(),
            "Backup older wrote nothing under {older_path}"
        );

        // Past its expiry, the older one goes with its objects: a deadline of the expiry plus
        // the deletion Job's time.
        wait_backup_gone(&ns, "older", until(older_exp) + Duration::from_secs(120)).await?;
        let left = list(store.as_ref(), &older_path).await?;
        ensure!(
            left.is_empty(),
            "retention deleted Backup older but left its objects: {left:?}"
        );
        let said = events_on(&ns, "older").await?;
        ensure!(
            said.iter()
                .any(|e| e.starts_with("RetentionExpired:") && e.contains("with its data")),
            "no RetentionExpired event on Backup older: {said:?}"
        );

        // The newest Completed one stays past its expiry, and says why.
        let kept = poll(
            "a RetentionKept event on Backup newer",
            until(newer_exp) + Duration::from_secs(60),
            || async {
                let said = events_on(&ns, "newer").await?;
                Ok(
                    match said.iter().find(|e| e.starts_with("RetentionKept:")) {
                        Some(e) => Ok(e.clone()),
                        None => Err(format!("events: {said:?}")),
                    },
                )
            },
        )
        .await?;
        eprintln!("{kept}");
        ensure!(
            kept.contains("newest Completed Backup of Cluster"),
            "the kept reason is not the newest-Completed rule: {kept}"
        );
        ensure!(
            backups.get_opt("newer").await?.is_some(),
            "the Cluster's newest Completed Backup was deleted by retention"
        );

        // A newer Backup (kept forever) completing releases it at once.
        backup_with(&ns, "keeper", "fdb-to-s3", "Delete").await?;
        let newer_path = backups
            .get("newer")
            .await?
            .status
            .and_then(|s| s.path)
            .unwrap_or_default();
        wait_backup_gone(&ns, "newer", Duration::from_secs(120)).await?;
        let left = list(store.as_ref(), &newer_path).await?;
        ensure!(
            left.is_empty(),
            "retention deleted Backup newer but left its objects: {left:?}"
        );
        ensure!(
            backups.get_opt("keeper").await?.is_some(),
            "a Backup without retentionPeriod was deleted"
        );
        backups.delete("keeper", &DeleteParams::default()).await?;
        wait_backup_gone(&ns, "keeper", Duration::from_secs(180)).await?;
        Ok(())
    })
    .await;
    delete_repo(&c, REPO).await?;
    result
}
