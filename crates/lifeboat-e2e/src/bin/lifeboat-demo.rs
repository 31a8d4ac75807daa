//! The main job: the field report's scenario on a running cluster with Lifeboat deployed. A
//! FalkorDB replication Cluster is filled, backed up with method `datafile`, and restored into a
//! new Cluster through `spec.restore`; the restored data is checked and a verification report
//! printed. `cargo xtask demo` boots the bed and deploys Lifeboat first.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use lifeboat_api::{Backup, ClusterPhase, Restore};
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::scenario::*;
use lifeboat_e2e::{client, fresh_namespace, poll};

const NS: &str = "lifeboat-demo";
const REPO: &str = "lifeboat-demo-repo";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<()> {
    let keys = env_u64("LIFEBOAT_DEMO_KEYS_PER_DB", 20_000);
    let value = usize::try_from(env_u64("LIFEBOAT_DEMO_VALUE_BYTES", 512)).unwrap_or(512);
    let client = client().await?;
    // A second run replaces the first one's clusters, so the demo can be run any number of times.
    let ns = fresh_namespace(&client, NS, "demo").await?;
    // Not marked default: the bed stays neutral for anything else that runs on it (the e2e tiers
    // after `cargo xtask demo`), and the Backup names its repo through a BackupPolicy.
    pvc_repo(&client, REPO).await?;

    let t = Instant::now();
    println!("1. creating FalkorDB replication Cluster fdb (2 data pods, 3 sentinels)");
    create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
    wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
    println!("   Running after {:.0}s", t.elapsed().as_secs_f64());

    println!("2. writing {keys} keys of {value} bytes into each of databases 0, 1, 2, and a graph");
    let written = write_dataset(&ns, "fdb", keys, value).await?;

    let t = Instant::now();
    println!(
        "3. backing up with method datafile into BackupRepo {REPO} (BackupPolicy fdb-to-{REPO})"
    );
    let b = backup(&ns, "fdb", "fdb-backup-datafile", REPO).await?;
    ensure_backup_holds(&b, &written)?;
    let st = b.status.clone().unwrap_or_default();
    println!(
        "   Backup Completed in {:.0}s: total size {} bytes stored, duration {}",
        t.elapsed().as_secs_f64(),
        st.total_size.unwrap_or_default(),
        st.duration.unwrap_or_default()
    );

    let t = Instant::now();
    println!("4. restoring into Cluster fdb-restored through spec.restore (watching for lies)");
    let watcher = LieWatcher::start(client.clone(), NS, "fdb-restored");
    create_cluster(
        &ns,
        restored_cluster(
            "fdb-restored",
            NS,
            "fdb-backup-datafile",
            Entry::Spec,
            "Parallel",
            2,
        ),
    )
    .await?;
    let running = wait_phase(&ns, "fdb-restored", ClusterPhase::Running, RESTORE_TIMEOUT).await;
    let lies = watcher.finish().await;
    running?;
    lies?;
    println!(
        "   Running after {:.0}s; no pod was Ready and the Cluster was not Running before verification",
        t.elapsed().as_secs_f64()
    );

    println!("5. checking the restored data");
    assert_restored(&ns, "fdb-restored", &written).await?;
    let pods: Api<Pod> = ns.api();
    let primary = poll("one primary label", Duration::from_secs(60), || {
        primary_pod(&ns, "fdb-restored")
    })
    .await?;
    for db in 0..3 {
        let n = redis_cli(&pods, &primary, &format!("-n {db} DBSIZE")).await?;
        println!(
            "   db{db}: DBSIZE {} (backed up {})",
            n.trim(),
            written.keys.get(&db).copied().unwrap_or(0)
        );
    }

    println!("\nverification report");
    let backups: Api<Backup> = ns.api();
    let b = backups.get("fdb-backup-datafile").await?;
    let fp = b
        .status
        .and_then(|s| s.dataset)
        .map(|d| d.fingerprint)
        .context("Backup has no dataset")?;
    println!("  backup fingerprint: {}", serde_json::to_string(&fp)?);
    let restores: Api<Restore> = ns.api();
    let r = restores.get("fdb-restored-falkordb-restore").await?;
    let live = r
        .status
        .as_ref()
        .and_then(|s| s.verification.as_ref())
        .and_then(|v| v.observed.clone());
    println!("  live fingerprint:   {}", serde_json::to_string(&live)?);
    ensure!(
        live.as_ref() == Some(&fp),
        "the live fingerprint differs from the backup's"
    );
    print!("{}", restore_report(&ns, "fdb-restored").await?);
    println!("\nThe clusters stay up in namespace {NS}. Reach the restored primary with:");
    println!("  kubectl -n {NS} exec -it {primary} -- sh -c 'redis-cli -a \"$REDIS_PASSWORD\"'");
    println!(
        "or through the client Service fdb-restored-falkordb.{NS}.svc:6379 from inside the cluster."
    );
    Ok(())
}
