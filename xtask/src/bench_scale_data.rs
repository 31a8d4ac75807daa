//! The Backups and Restores of `cargo xtask bench scale`: what stands in for the mover and the
//! volume provisioner's helper, where kwok runs no container.
//!
//! Under kwok a Job's pod never runs the mover, so nothing would write the result line the
//! operator reads. The bench writes it instead: the [`Finisher`] annotates each running Job pod
//! with the lines the mover prints for that command (a backup's, one per verified server), and
//! kwok's `pod-complete` stage moves only annotated pods to `Succeeded`, with the annotation as
//! the container's termination message, where the mover writes its result lines
//! (`docs/mover.md`). The operator then reads them from the pod's status, as it does on a real
//! node. The same thread lets the local-path provisioner's helper pods succeed, so that the data
//! and repo volumes of these Clusters bind on the fake nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

/// The pod annotation kwok's `pod-complete` stage copies into the termination message.
pub const RESULT_ANNOTATION: &str = "lifeboat.io/bench-result";
/// The pvc BackupRepo the bench's Backups go to.
pub const REPO: &str = "bench-scale";
/// The namespace of the local-path provisioner's helper pods (testbed/manifests).
const HELPER_NAMESPACE: &str = "local-path-storage";

/// A dataset the Backups record and the verify lines find: what is in it does not matter here,
/// only that a restore has something to compare.
const FINGERPRINT: &str =
    r#"{"databases":{"0":{"keys":1000,"digest":"0123456789abcdef0123456789abcdef"}}}"#;

/// The BackupRepo, on a volume per namespace from the bed's default class.
pub fn repo_yaml() -> String {
    format!(
        "apiVersion: dataprotection.kubeblocks.io/v1alpha1\nkind: BackupRepo\nmetadata:\n  name: {REPO}\n  \
         labels:\n    lifeboat-bench: scale\nspec:\n  storageProviderRef: pvc\n  volumeCapacity: 1Gi\n  \
         pvReclaimPolicy: Delete\n  config:\n    accessMode: ReadWriteOnce\n"
    )
}

/// The lines the mover prints for the Job pod `pod`, or `None` when `pod` is not a mover's.
/// Every command succeeds here; the subject is the control plane, not the data.
pub fn result_for(pod: &serde_json::Value) -> Option<String> {
    let c = pod["spec"]["containers"].get(0)?;
    let command: Vec<&str> = c["command"]
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    if command.first() != Some(&"lifeboat-mover") {
        return None;
    }
    let env = |name: &str| -> String {
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let backup = env("LIFEBOAT_BACKUP_NAME");
    let fp: serde_json::Value = serde_json::from_str(FINGERPRINT).ok()?;
    let line = |v: serde_json::Value| v.to_string();
    Some(match command.get(1).copied() {
        Some("backup") => line(serde_json::json!({
            "backupName": backup,
            "totalSize": 1_048_576,
            "storedSize": 524_288,
            "snapshotSeconds": 0.1,
            "transferSeconds": 0.1,
            "fingerprint": fp,
            "objectCount": 2,
            "checkedObjects": 2,
        })),
        Some("verify") => env("LIFEBOAT_VERIFY_HOSTS")
            .split_whitespace()
            .map(|h| {
                line(serde_json::json!({
                    "backupName": backup,
                    "server": format!("{h}:6379"),
                    "match": true,
                    "expected": fp,
                    "live": fp,
                    "differences": [],
                    "message": "the live dataset matches the backup's fingerprint",
                }))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some("restore") => line(serde_json::json!({
            "backupName": backup,
            "alreadyRestored": false,
        })),
        _ => String::new(),
    })
}

/// Completes the bench's Job pods and helper pods until stopped.
pub struct Finisher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    done: Arc<std::sync::atomic::AtomicUsize>,
}

impl Finisher {
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s, d) = (stop.clone(), done.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match finish_once() {
                    Ok(n) => {
                        d.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => eprintln!("  finisher: {e:#}"),
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        Finisher {
            stop,
            thread: Some(thread),
            done,
        }
    }

    /// Pods completed so far.
    pub fn completed(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Annotates every running Job pod and helper pod not yet annotated; returns how many.
fn finish_once() -> Result<usize> {
    let mut n = 0;
    for args in [
        vec!["get", "pods", "-A", "-l", "job-name"],
        vec!["get", "pods", "-n", HELPER_NAMESPACE],
    ] {
        let mut a = args.clone();
        a.extend(["--field-selector", "status.phase=Running", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&super::testbed::kubectl_quiet(&a)?)?;
        for p in v["items"].as_array().into_iter().flatten() {
            if p["metadata"]["annotations"][RESULT_ANNOTATION].is_string() {
                continue;
            }
            let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = p["metadata"]["name"].as_str().unwrap_or_default();
            let result = result_for(p).unwrap_or_default();
            super::testbed::kubectl_quiet(&[
                "annotate",
                "pod",
                "-n",
                ns,
                name,
                &format!("{RESULT_ANNOTATION}={result}"),
            ])?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(command: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
        serde_json::json!({"spec": {"containers": [{
            "command": command,
            "env": env.iter().map(|(n, v)| serde_json::json!({"name": n, "value": v})).collect::<Vec<_>>(),
        }]}})
    }

    #[test]
    fn a_backup_pod_gets_a_result_the_operator_accepts_and_a_verify_pod_one_line_a_server() {
        let b = result_for(&pod(
            &["lifeboat-mover", "backup"],
            &[("LIFEBOAT_BACKUP_NAME", "b1-1234abcd")],
        ))
        .expect("a mover pod");
        let v: serde_json::Value = serde_json::from_str(&b).expect("json");
        assert_eq!(v["backupName"], "b1-1234abcd");
        assert_eq!(v["objectCount"], v["checkedObjects"]);

        let out = result_for(&pod(
            &["lifeboat-mover", "verify"],
            &[("LIFEBOAT_VERIFY_HOSTS", "a.svc b.svc")],
        ))
        .expect("a mover pod");
        let servers: Vec<String> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).expect("json")["server"].to_string()
            })
            .collect();
        assert_eq!(servers, ["\"a.svc:6379\"", "\"b.svc:6379\""]);

        assert_eq!(result_for(&pod(&["sh", "-c", "true"], &[])), None);
    }
}
