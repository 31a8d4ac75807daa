//! `backups`, `describe backup` and `backup`: what a Cluster's Backups hold, and taking one.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, human_bytes, human_duration};
use lifeboat_api::labels::INSTANCE;
use lifeboat_api::{Backup, BackupPolicy, Cluster};

use crate::Error;
use crate::output::table;

/// The Backups of `cluster` (all of the namespace's when `None`), oldest first.
pub async fn list(client: &Client, ns: &str, cluster: Option<&str>) -> Result<Vec<Backup>, Error> {
    let lp = match cluster {
        Some(c) => ListParams::default().labels(&format!("{INSTANCE}={c}")),
        None => ListParams::default(),
    };
    let mut v = Api::<Backup>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map_err(|e| Error::api(format!("listing the Backups of namespace {ns}"), e))?
        .items;
    v.sort_by_key(|b| b.creation_timestamp().map(|t| t.0));
    Ok(v)
}

fn phase(b: &Backup) -> String {
    b.status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or_else(|| "New".to_owned(), |p| format!("{p:?}"))
}

/// `True`, `False` or empty: the Backup's `Verified` condition, set by restore drills.
pub fn verified(b: &Backup) -> String {
    b.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Verified"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn age(t: Option<Timestamp>, now: Timestamp) -> String {
    t.map(|t| human_duration((now.as_second() - t.as_second()).max(0)))
        .unwrap_or_default()
}

/// The table of `backups`.
pub fn backups_table(backups: &[Backup], now: Timestamp) -> String {
    let rows = backups
        .iter()
        .map(|b| {
            let st = b.status.clone().unwrap_or_default();
            vec![
                b.name_any(),
                b.labels().get(INSTANCE).cloned().unwrap_or_default(),
                phase(b),
                st.total_size
                    .as_deref()
                    .and_then(|s| s.parse::<i64>().ok())
                    .map(human_bytes)
                    .unwrap_or_default(),
                st.duration.unwrap_or_default(),
                age(b.creation_timestamp().map(|t| t.0), now),
                verified(b),
                st.backup_repo_name.unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "NAME", "CLUSTER", "PHASE", "SIZE", "DURATION", "AGE", "VERIFIED", "REPO",
        ],
        rows,
    )
}

/// The human form of `describe backup`: where the data is, and what it holds.
pub fn describe(b: &Backup) -> String {
    let st = b.status.clone().unwrap_or_default();
    let mut o = String::new();
    let mut line = |k: &str, v: String| {
        if !v.is_empty() {
            let _ = writeln!(o, "{:<16}{v}", format!("{k}:"));
        }
    };
    line("Name", b.name_any());
    line("Namespace", b.namespace().unwrap_or_default());
    line(
        "Cluster",
        b.labels().get(INSTANCE).cloned().unwrap_or_default(),
    );
    line("Phase", phase(b));
    line("Method", b.spec.backup_method.clone());
    line("Policy", b.spec.backup_policy_name.clone());
    line("Repo", st.backup_repo_name.clone().unwrap_or_default());
    line("Path", st.path.clone().unwrap_or_default());
    line(
        "Stored",
        st.total_size
            .as_deref()
            .and_then(|s| s.parse::<i64>().ok())
            .map(human_bytes)
            .unwrap_or_default(),
    );
    line(
        "Started",
        st.start_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    );
    line(
        "Completed",
        st.completion_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    );
    line("Duration", st.duration.clone().unwrap_or_default());
    line(
        "Expires",
        st.expiration
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    );
    line("Failure", st.failure_reason.clone().unwrap_or_default());
    if let Some(p) = &st.progress {
        line("Progress", p.describe());
    }
    if let Some(c) = st.conditions.iter().find(|c| c.type_ == "Verified") {
        line(
            "Verified",
            format!("{} ({}): {}", c.status, c.reason, c.message),
        );
    }
    if let Some(d) = &st.dataset {
        let _ = writeln!(o, "Dataset:");
        let _ = writeln!(o, "  Engine:       {}", d.engine);
        let _ = writeln!(o, "  Component:    {}", d.component);
        let _ = writeln!(
            o,
            "  Manifest:     {} (format {})",
            d.manifest_path, d.manifest_format_version
        );
        let _ = writeln!(o, "  Data:         {}", human_bytes(d.data_bytes));
        let f = &d.fingerprint;
        let _ = writeln!(o, "Fingerprint:");
        for (db, keys) in &f.keys {
            let digest = f.digests.get(db).map_or("", String::as_str);
            let _ = writeln!(
                o,
                "  db{db}: {keys} keys{}",
                if digest.is_empty() {
                    String::new()
                } else {
                    format!(", digest {digest}")
                }
            );
        }
        for g in &f.graphs {
            let _ = writeln!(
                o,
                "  graph {:?} (db{}): {} nodes, {} edges{}",
                g.name,
                g.db,
                g.nodes,
                g.edges,
                g.digest
                    .as_deref()
                    .map(|d| format!(", digest {d}"))
                    .unwrap_or_default()
            );
        }
        if f.keys.is_empty() && f.graphs.is_empty() {
            let _ = writeln!(o, "  (empty dataset)");
        }
    }
    o
}

/// Creates a Backup of `cluster` under its BackupPolicy and returns its name.
pub async fn create(
    client: &Client,
    ns: &str,
    cluster: &str,
    method: &str,
    policy: Option<&str>,
) -> Result<String, Error> {
    let c = Api::<Cluster>::namespaced(client.clone(), ns)
        .get_opt(cluster)
        .await
        .map_err(|e| Error::api(format!("reading Cluster {ns}/{cluster}"), e))?
        .ok_or_else(|| Error::NotFound(format!("Cluster {ns}/{cluster}")))?;
    let policy = match policy {
        Some(p) => p.to_owned(),
        None => {
            let policies = Api::<BackupPolicy>::namespaced(client.clone(), ns)
                .list(&ListParams::default().labels(&format!("{INSTANCE}={cluster}")))
                .await
                .map_err(|e| {
                    Error::api(
                        format!("listing the BackupPolicies of Cluster {ns}/{cluster}"),
                        e,
                    )
                })?
                .items;
            match policies.as_slice() {
                [one] => one.name_any(),
                [] => {
                    return Err(Error::NotFound(format!(
                        "a BackupPolicy of Cluster {ns}/{cluster} (Lifeboat creates one per data component once the Cluster runs)"
                    )));
                }
                many => {
                    return Err(Error::Usage(format!(
                        "Cluster {ns}/{cluster} has {} BackupPolicies ({}); choose one with --policy",
                        many.len(),
                        many.iter()
                            .map(ResourceExt::name_any)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
        }
    };
    let stamp = Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
    let name = format!("{}-{stamp}", c.name_any());
    let b: Backup = serde_json::from_value(serde_json::json!({
        "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"backupPolicyName": policy, "backupMethod": method}
    }))
    .map_err(|e| Error::Render(e.to_string()))?;
    Api::<Backup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &b)
        .await
        .map_err(|e| Error::api(format!("creating Backup {ns}/{name}"), e))?;
    Ok(name)
}

/// One reading of a running backup, as `--wait` prints it.
pub fn reading(b: &Backup) -> String {
    let st = b.status.clone().unwrap_or_default();
    match (&st.phase, &st.progress) {
        (Some(BackupPhase::Running), Some(p)) => format!("Running: {}", p.describe()),
        (Some(BackupPhase::Failed), _) => {
            format!("Failed: {}", st.failure_reason.unwrap_or_default())
        }
        (Some(BackupPhase::Completed), _) => format!(
            "Completed: {} stored in {}",
            st.total_size
                .as_deref()
                .and_then(|s| s.parse::<i64>().ok())
                .map(human_bytes)
                .unwrap_or_default(),
            st.duration.unwrap_or_default()
        ),
        _ => {
            let why = st
                .conditions
                .iter()
                .find(|c| c.status != "True")
                .map(|c| format!(": {}", c.message))
                .unwrap_or_default();
            format!("{}{why}", phase(b))
        }
    }
}

/// Follows Backup `name` to its end, printing each new reading. `Ok` once it completed.
pub async fn wait(client: &Client, ns: &str, name: &str, timeout: Duration) -> Result<(), Error> {
    let api = Api::<Backup>::namespaced(client.clone(), ns);
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let b = api
            .get_opt(name)
            .await
            .map_err(|e| Error::api(format!("reading Backup {ns}/{name}"), e))?
            .ok_or_else(|| {
                Error::NotFound(format!("Backup {ns}/{name} (deleted while waiting)"))
            })?;
        let r = reading(&b);
        if r != last {
            println!(
                "[{:>5}] {r}",
                human_duration(start.elapsed().as_secs() as i64)
            );
            last = r;
        }
        match b.status.as_ref().and_then(|s| s.phase) {
            Some(BackupPhase::Completed) => return Ok(()),
            Some(BackupPhase::Failed) => {
                return Err(Error::Failed(format!(
                    "Backup {ns}/{name} failed: {}",
                    b.status.and_then(|s| s.failure_reason).unwrap_or_default()
                )));
            }
            _ => {}
        }
        if start.elapsed() > timeout {
            return Err(Error::Failed(format!(
                "Backup {ns}/{name} did not end within {}: {last}",
                human_duration(timeout.as_secs() as i64)
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(v: serde_json::Value) -> Backup {
        serde_json::from_value(v).expect("a Backup")
    }

    fn completed() -> Backup {
        backup(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "fdb-1", "namespace": "demo", "labels": {INSTANCE: "fdb"},
                         "creationTimestamp": "2026-12-05T05:00:00Z"},
            "spec": {"backupPolicyName": "fdb-falkordb-backup-policy", "backupMethod": "datafile"},
            "status": {"phase": "Completed", "totalSize": "1192377825", "duration": "12s",
                       "backupRepoName": "repo",
                       "conditions": [{"type": "Verified", "status": "True", "reason": "DrillPassed",
                                       "message": "60001 keys match", "lastTransitionTime": "2026-12-05T05:01:00Z"}],
                       "dataset": {"engine": "falkordb", "component": "falkordb", "manifestPath": "fdb-1-abc",
                                   "manifestFormatVersion": 1, "dataBytes": 1192377825,
                                   "fingerprint": {"keys": {"0": 17602}, "digests": {"0": "cb7e"},
                                                   "graphs": [{"db": 0, "name": "bench", "nodes": 400000, "edges": 200000, "digest": "65e0"}]}}}
        }))
    }

    #[test]
    fn the_backups_table_shows_size_age_verified_and_repo() {
        let now = "2026-12-05T05:10:00Z".parse().expect("time");
        let t = backups_table(&[completed()], now);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{t}");
        for want in [
            "fdb-1",
            "fdb",
            "Completed",
            "1.1 GiB",
            "12s",
            "10m00s",
            "True",
            "repo",
        ] {
            assert!(lines[1].contains(want), "{want} missing: {t}");
        }
    }

    #[test]
    fn describe_shows_the_fingerprint_and_the_drill() {
        let d = describe(&completed());
        assert!(d.contains("db0: 17602 keys, digest cb7e"), "{d}");
        assert!(
            d.contains("graph \"bench\" (db0): 400000 nodes, 200000 edges, digest 65e0"),
            "{d}"
        );
        assert!(
            d.contains("Verified:       True (DrillPassed): 60001 keys match"),
            "{d}"
        );
    }

    #[test]
    fn a_reading_says_the_progress_or_the_outcome() {
        let mut b = completed();
        assert_eq!(reading(&b), "Completed: 1.1 GiB stored in 12s");
        let st = b.status.as_mut().expect("status");
        st.phase = Some(BackupPhase::Failed);
        st.failure_reason = Some("Job/x failed".into());
        assert_eq!(reading(&b), "Failed: Job/x failed");
    }
}
