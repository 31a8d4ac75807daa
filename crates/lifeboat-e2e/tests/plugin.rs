//! `kubectl lifeboat` against real Clusters on the bed: `backup --wait`, `backups`, `describe
//! backup`, `status` of a replication Cluster, and `restore --to --wait` of a dataset over 200 MB
//! that follows the restore through its stages to a verified `Running`; and a restore that fails
//! makes `restore --wait` exit 1 with the reason.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use lifeboat_api::ClusterPhase;
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::operator::events_on;
use lifeboat_e2e::scenario::*;
use lifeboat_e2e::{TestNamespace, in_namespace, poll};
use serde_json::json;

const REPO: &str = "e2e-plugin-repo";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// The plugin binary, built by cargo beside this test when it is not there yet.
fn plugin() -> Result<std::path::PathBuf> {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "kubectl-lifeboat",
            "--bin",
            "kubectl-lifeboat",
        ])
        .status()
        .context("running cargo build for the plugin")?;
    ensure!(status.success(), "cargo build -p kubectl-lifeboat failed");
    // This test runs from <target>/debug/deps/.
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .context("the test binary's directory")?;
    Ok(dir.join("kubectl-lifeboat"))
}

fn run(ns: &TestNamespace, args: &[&str]) -> Result<Run> {
    // The namespace first: after `connect CLUSTER --` every word goes to redis-cli.
    let out = Command::new(plugin()?)
        .args(["-n", &ns.name])
        .args(args)
        .output()
        .context("running kubectl-lifeboat")?;
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("$ kubectl lifeboat -n {} {}\n{r}", ns.name, args.join(" "));
    Ok(r)
}

#[tokio::test]
async fn backup_status_and_restore_wait_follow_real_clusters_to_their_outcome() -> Result<()> {
    in_namespace("plugin", |ns| async move {
        pvc_repo(&ns.client, REPO).await?;
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        // 3 databases x 14,000 keys x 5,000 bytes: 210 MB.
        let written = write_dataset(&ns, "fdb", 14_000, 5_000).await?;
        let policy = "fdb-plugin-policy";
        policy_for_repo(&ns, "fdb", policy, REPO).await?;

        let b = run(&ns, &["backup", "fdb", "--policy", policy, "--wait", "--timeout", "10m"])?;
        ensure!(b.code == 0, "backup --wait did not succeed: {b}");
        let name = b
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("backup.dataprotection.kubeblocks.io/"))
            .and_then(|l| l.split_whitespace().next())
            .context("backup printed no name")?
            .to_owned();
        ensure!(b.stdout.contains("Completed:"), "no completion reading: {b}");

        let list = run(&ns, &["backups", "fdb"])?;
        let row = list
            .stdout
            .lines()
            .find(|l| l.starts_with(&name))
            .with_context(|| format!("backups does not list {name}: {list}"))?;
        ensure!(row.contains("Completed") && row.contains(REPO), "{list}");

        let d = run(&ns, &["describe", "backup", &name, "-o", "json"])?;
        ensure!(d.code == 0, "{d}");
        let v: serde_json::Value = serde_json::from_str(&d.stdout).context("describe -o json")?;
        ensure!(v["status"]["phase"] == "Completed", "{d}");
        let keys_db0 = v["status"]["dataset"]["fingerprint"]["keys"]["0"].as_u64();
        ensure!(
            keys_db0 == written.keys.get(&0).copied(),
            "the fingerprint's db0 keys {keys_db0:?} differ from the {:?} written",
            written.keys.get(&0)
        );
        let human = run(&ns, &["describe", "backup", &name])?;
        ensure!(human.stdout.contains("db0:") && human.stdout.contains("digest"), "{human}");

        let s = run(&ns, &["status", "fdb", "-o", "json"])?;
        let v: serde_json::Value = serde_json::from_str(&s.stdout).context("status -o json")?;
        ensure!(v["phase"] == "Running", "{s}");
        let roles: BTreeSet<String> = v["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["component"] == "falkordb" && p["ready"] == true)
            .filter_map(|p| p["role"].as_str().map(str::to_owned))
            .collect();
        ensure!(
            roles.contains("primary") && roles.len() == 2,
            "status shows data pods with roles {roles:?}, expected a ready primary and a ready replica: {s}"
        );
        ensure!(v["lastBackup"] == json!(name), "{s}");
        let h = run(&ns, &["status", "fdb"])?;
        ensure!(h.stdout.contains("Phase:     Running") && h.stdout.contains("primary"), "{h}");
        let old_primary = v["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["role"] == "primary")
            .and_then(|p| p["name"].as_str())
            .context("no primary in status")?
            .to_owned();

        let dbsize = |r: &Run| -> Result<u64> {
            ensure!(r.code == 0, "connect failed: {r}");
            r.stdout.trim().parse().with_context(|| format!("DBSIZE reply: {r}"))
        };
        // Database 1 holds only the keys written to it: no graph, so no telemetry stream either.
        let keys_before = dbsize(&run(&ns, &["connect", "fdb", "--", "-n", "1", "DBSIZE"])?)?;
        ensure!(
            Some(keys_before) == written.keys.get(&1).copied(),
            "DBSIZE of db1 on the primary is {keys_before}, not the {:?} keys written",
            written.keys.get(&1)
        );
        let l = run(&ns, &["logs", &name])?;
        ensure!(
            l.code == 0 && l.stdout.contains(&format!("==> Job/{name}-backup")) && l.stdout.contains("\"backupName\""),
            "logs of the Backup lack its Job's result line: {l}"
        );

        let r = run(&ns, &["restore", &name, "--to", "fdb-copy", "--wait", "--timeout", "15m"])?;
        ensure!(r.code == 0, "restore --wait did not succeed: {r}");
        let readings: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with('[')).collect();
        let (last, before) = readings.split_last().context("no readings")?;
        ensure!(
            last.contains("Running, restored and verified"),
            "the last reading is not the verified end: {r}"
        );
        let distinct: BTreeSet<&str> = before
            .iter()
            .map(|l| l.split_once("] ").map_or(*l, |(_, t)| t))
            .collect();
        ensure!(
            distinct.len() >= 3,
            "expected at least three distinct progress readings before completion, saw {}: {r}",
            distinct.len()
        );
        assert_restored(&ns, "fdb-copy", &written).await?;
        let rs = run(&ns, &["restore-status", "fdb-copy", "-o", "json"])?;
        let v: serde_json::Value = serde_json::from_str(&rs.stdout).context("restore-status -o json")?;
        ensure!(
            v["restores"][0]["status"]["phase"] == "Completed"
                && v["restores"][0]["status"]["verification"]["matched"] == true,
            "restore-status -o json does not show the verified Restore: {rs}"
        );
        let l = run(&ns, &["logs", "fdb-copy", "--tail", "5"])?;
        ensure!(
            l.stdout.contains("==> Job/fdb-copy-falkordb-prepare-0") && l.stdout.contains("==> Job/fdb-copy-falkordb-verify"),
            "logs of the restored Cluster lack its restore Jobs: {l}"
        );

        let f = run(&ns, &["failover", "fdb", "--timeout", "3m"])?;
        ensure!(f.code == 0, "failover did not succeed: {f}");
        let s = run(&ns, &["status", "fdb", "-o", "json"])?;
        let v: serde_json::Value = serde_json::from_str(&s.stdout).context("status -o json")?;
        let new_primary = v["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["role"] == "primary")
            .and_then(|p| p["name"].as_str())
            .unwrap_or_default()
            .to_owned();
        ensure!(
            !new_primary.is_empty() && new_primary != old_primary,
            "the primary is still {old_primary:?} after failover (now {new_primary:?}): {s}"
        );
        let after = dbsize(&run(&ns, &["connect", "fdb", "--", "-n", "1", "DBSIZE"])?)?;
        ensure!(
            after == keys_before,
            "DBSIZE was {keys_before} before the hand-over, {after} after it"
        );
        // The story is told on the Restore too, for `kubectl describe restore`.
        let restore = "fdb-copy-falkordb-restore";
        poll(
            &format!("a RestoreCompleted event on Restore {restore}"),
            Duration::from_secs(30),
            || async {
                let evs = events_on(&ns, restore).await?;
                Ok(if evs.iter().any(|e| e.starts_with("RestoreCompleted")) {
                    Ok(())
                } else {
                    Err(format!("events on it: {evs:?}"))
                })
            },
        )
        .await
    })
    .await
}

#[tokio::test]
async fn restore_wait_exits_1_with_the_reason_when_the_restore_fails() -> Result<()> {
    in_namespace("plugin-fail", |ns| async move {
        create_cluster(&ns, falkordb_cluster("src", "Delete", 2)).await?;
        // A Backup of `src` that can never complete: its policy does not exist.
        ns.create::<lifeboat_api::Backup>(json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "never", "labels": {lifeboat_api::labels::INSTANCE: "src"}},
            "spec": {"backupPolicyName": "no-such-policy", "backupMethod": "datafile"}
        }))
        .await?;
        let r = run(
            &ns,
            &[
                "restore",
                "never",
                "--to",
                "dst",
                "--wait",
                "--timeout",
                "5m",
            ],
        )?;
        ensure!(r.code == 1, "expected exit 1 for a failed restore: {r}");
        ensure!(
            r.stderr.contains("never") && r.stderr.to_lowercase().contains("fail"),
            "the error does not say why: {r}"
        );
        let missing = run(&ns, &["restore", "no-such-backup", "--to", "dst2"])?;
        ensure!(
            missing.code == 3,
            "expected exit 3 for a missing Backup: {missing}"
        );
        ensure!(missing.stderr.contains("no-such-backup"), "{missing}");
        Ok(())
    })
    .await
}
