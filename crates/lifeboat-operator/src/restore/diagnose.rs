//! Why a pod is not making progress, in words a user can act on. Pure.
//!
//! Some causes can never resolve on their own (an image that is not there, a volume that is
//! gone); they end a restore at once. Others (a pod waiting for a node) may, so they are reported
//! and end the restore only at its stage deadline.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// A reason a pod is stuck.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stuck {
    /// Whether waiting longer cannot help.
    pub terminal: bool,
    /// What is wrong, naming the pod and quoting the scheduler or kubelet.
    pub message: String,
    /// The claims a judgment that a volume is gone rests on. The scheduler and the kubelet judge
    /// from caches, which may not have seen a claim created a moment before the pod (a repo's
    /// volume made for its first Backup in a namespace): such a judgment is terminal only once
    /// the API server confirms it ([`settle`]).
    pub claims: Vec<String>,
}

/// An event about the pod: its reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub reason: String,
    pub message: String,
}

const IMAGE_REASONS: &[&str] = &[
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
];

fn volume_gone(msg: &str) -> bool {
    msg.contains("not found") && msg.contains("persistentvolumeclaim")
        || msg.contains("could not find v1.PersistentVolumeClaim")
        || msg.contains("is being deleted")
}

/// The claims a judgment rests on: those the message quotes (`persistentvolumeclaim "name"`,
/// `PersistentVolumeClaim "namespace/name"`), else every claim the pod mounts. The quoted ones
/// first, so that a pod whose message blames a claim that exists is not failed for another claim
/// of it under a message that names the wrong one.
fn claims(pod: &Pod, msg: &str) -> Vec<String> {
    let lower = msg.to_ascii_lowercase();
    let quoted: Vec<String> = lower
        .match_indices("persistentvolumeclaim \"")
        .filter_map(|(at, key)| {
            let rest = msg.get(at + key.len()..)?;
            let quoted = &rest[..rest.find('"')?];
            Some(quoted.rsplit('/').next().unwrap_or(quoted).to_owned())
        })
        .collect();
    if !quoted.is_empty() {
        return quoted;
    }
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
        .collect()
}

/// A pod stuck for `msg`: terminal if it says a volume is gone, resting on the pod's claims.
fn stuck_on(pod: &Pod, msg: &str, message: String) -> Stuck {
    let terminal = volume_gone(msg);
    Stuck {
        terminal,
        message,
        claims: if terminal {
            claims(pod, msg)
        } else {
            Vec::new()
        },
    }
}

/// The judgment once the API server has said which of `stuck.claims` are absent or being deleted
/// (`gone`). A volume said to be gone while every claim exists was judged from a cache that has
/// not caught up: the pod is left to the stage's deadline instead.
pub fn settle(stuck: Stuck, gone: &[String]) -> Stuck {
    if !stuck.terminal || stuck.claims.is_empty() || !gone.is_empty() {
        return stuck;
    }
    Stuck {
        terminal: false,
        message: format!(
            "{} (claim {} exists, so this was judged from a cache that had not seen it yet)",
            stuck.message,
            stuck.claims.join(", ")
        ),
        claims: Vec::new(),
    }
}

/// Explains why a Job that has no pod is stuck, from the Job's own events: the Job controller
/// records `FailedCreate` when admission, a ResourceQuota or a LimitRange refuses its pod. Not
/// terminal (the quota may be raised), but the stage's failure at its deadline quotes it instead
/// of saying the Job was still running.
pub fn job_without_pod(job: &str, events: &[PodEvent]) -> Option<Stuck> {
    events
        .iter()
        .rev()
        .find(|e| e.reason == "FailedCreate")
        .map(|e| Stuck {
            terminal: false,
            message: format!("Job {job} cannot create its pod: {}", e.message),
            claims: Vec::new(),
        })
}

/// Explains why `pod` is stuck, if it is.
pub fn diagnose(pod: &Pod, events: &[PodEvent]) -> Option<Stuck> {
    let name = pod.name_any();
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded")) {
        return None;
    }
    for cs in status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
    {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            let msg = w.message.clone().unwrap_or_default();
            if IMAGE_REASONS.contains(&reason.as_str()) {
                return Some(Stuck {
                    terminal: true,
                    message: format!(
                        "pod {name}: container {} cannot start, image {} is not available \
                         ({reason}: {msg})",
                        cs.name, cs.image
                    ),
                    claims: Vec::new(),
                });
            }
            if reason == "CreateContainerConfigError" {
                return Some(Stuck {
                    terminal: true,
                    message: format!(
                        "pod {name}: container {} cannot start ({reason}: {msg})",
                        cs.name
                    ),
                    claims: Vec::new(),
                });
            }
            if reason == "CrashLoopBackOff" {
                return Some(Stuck {
                    terminal: false,
                    message: format!("pod {name}: container {} keeps crashing ({msg})", cs.name),
                    claims: Vec::new(),
                });
            }
        }
    }
    for ev in events {
        if ev.reason == "FailedMount" && volume_gone(&ev.message) {
            return Some(stuck_on(
                pod,
                &ev.message,
                format!(
                    "pod {name}: kubelet cannot mount its volume: {}",
                    ev.message
                ),
            ));
        }
    }
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False");
    if let Some(c) = unscheduled {
        let msg = c.message.clone().unwrap_or_default();
        let msg = if msg.is_empty() {
            events
                .iter()
                .rev()
                .find(|e| e.reason == "FailedScheduling")
                .map(|e| e.message.clone())
                .unwrap_or_else(|| c.reason.clone().unwrap_or_default())
        } else {
            msg
        };
        return Some(stuck_on(
            pod,
            &msg,
            format!("pod {name} cannot be scheduled: {msg}"),
        ));
    }
    if let Some(ev) = events.iter().rev().find(|e| e.reason == "FailedScheduling")
        && status.phase.as_deref() == Some("Pending")
    {
        return Some(stuck_on(
            pod,
            &ev.message,
            format!("pod {name} cannot be scheduled: {}", ev.message),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "demo"},
            "status": status
        }))
        .expect("pod")
    }

    #[test]
    fn absent_image_is_terminal_and_quoted() {
        let p = pod(json!({"phase": "Pending", "containerStatuses": [{
            "name": "mover", "image": "localhost/lifeboat/mover:0.1.0", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "Container image \"localhost/lifeboat/mover:0.1.0\" is not present with pull policy of Never"}}
        }]}));
        let s = diagnose(&p, &[]).expect("stuck");
        assert!(s.terminal);
        assert!(
            s.message.contains("ErrImageNeverPull") && s.message.contains("pod p"),
            "{}",
            s.message
        );
    }

    #[test]
    fn missing_pvc_is_terminal() {
        let p = pod(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: persistentvolumeclaim \"data-x-0\" not found."
        }]}));
        let s = diagnose(&p, &[]).expect("stuck");
        assert!(s.terminal, "{s:?}");
        assert!(
            s.message
                .contains("persistentvolumeclaim \"data-x-0\" not found")
        );
        assert_eq!(s.claims, ["data-x-0"]);
        // Confirmed by the API server: it stays terminal.
        assert_eq!(settle(s.clone(), &["data-x-0".to_owned()]), s);
    }

    #[test]
    fn a_claim_the_scheduler_has_not_seen_yet_is_waited_for() {
        // A repo's volume created in the same second as the first Backup's pod: the scheduler's
        // cache said "not found", and the API server has the claim.
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "bk-backup-x", "namespace": "demo"},
            "spec": {"containers": [{"name": "backup"}], "volumes": [
                {"name": "repo", "persistentVolumeClaim": {"claimName": "lifeboat-repo-r"}},
                {"name": "tmp", "emptyDir": {}}
            ]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: persistentvolumeclaim \"lifeboat-repo-r\" not found. not found"
            }]}
        }))
        .expect("pod");
        let s = diagnose(&p, &[]).expect("stuck");
        assert!(s.terminal && s.claims == ["lifeboat-repo-r"], "{s:?}");
        // A message that names no claim rests on every claim the pod mounts.
        let mut unnamed = p.clone();
        if let Some(c) = unnamed
            .status
            .as_mut()
            .and_then(|st| st.conditions.as_mut())
            .and_then(|cs| cs.first_mut())
        {
            c.message = Some("PVC is being deleted".into());
        }
        let all = diagnose(&unnamed, &[]).expect("stuck");
        assert!(all.terminal && all.claims == ["lifeboat-repo-r"], "{all:?}");
        let waited = settle(s, &[]);
        assert!(!waited.terminal, "{waited:?}");
        assert!(
            waited.message.contains("not found")
                && waited.message.contains("claim lifeboat-repo-r exists"),
            "{}",
            waited.message
        );
    }

    #[test]
    fn the_claims_a_message_names_are_the_ones_confirmed() {
        let p = pod(json!({"phase": "Pending"}));
        let ev = PodEvent {
            reason: "FailedMount".into(),
            message: "Unable to attach or mount volumes: could not find v1.PersistentVolumeClaim \"demo/data-x-1\"".into(),
        };
        let s = diagnose(&p, &[ev]).expect("stuck");
        assert!(s.terminal);
        assert_eq!(s.claims, ["data-x-1"]);
        // A judgment nothing can confirm, and one that is not terminal, are kept as they are.
        let unnamed = Stuck {
            terminal: true,
            message: "gone".into(),
            claims: Vec::new(),
        };
        assert_eq!(settle(unnamed.clone(), &[]), unnamed);
        let waiting = Stuck {
            terminal: false,
            message: "waiting for a node".into(),
            claims: Vec::new(),
        };
        assert_eq!(settle(waiting.clone(), &[]), waiting);
    }

    #[test]
    fn unschedulable_for_other_reasons_waits_for_the_deadline() {
        let p = pod(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        }]}));
        let s = diagnose(&p, &[]).expect("stuck");
        assert!(!s.terminal);
        assert!(s.message.contains("node affinity"), "{}", s.message);
    }

    #[test]
    fn pvc_being_deleted_under_a_mount_is_terminal() {
        let p = pod(json!({"phase": "Pending"}));
        let ev = PodEvent {
            reason: "FailedMount".into(),
            message: "Unable to attach or mount volumes: error processing PVC demo/x: PVC is being deleted".into(),
        };
        let s = diagnose(&p, &[ev]).expect("stuck");
        assert!(s.terminal);
    }

    #[test]
    fn a_running_pod_is_not_stuck() {
        let p = pod(
            json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}),
        );
        assert_eq!(diagnose(&p, &[]), None);
    }

    #[test]
    fn a_job_whose_pod_is_refused_by_a_quota_says_so() {
        let events = vec![PodEvent {
            reason: "FailedCreate".into(),
            message: "Error creating: pods \"r-prepare-0-x\" is forbidden: exceeded quota: tiny, requested: pods=1, used: pods=1, limited: pods=1".into(),
        }];
        let s = job_without_pod("r-prepare-0", &events).expect("stuck");
        assert!(!s.terminal);
        assert!(
            s.message.contains("Job r-prepare-0 cannot create its pod")
                && s.message.contains("exceeded quota"),
            "{}",
            s.message
        );
        assert_eq!(job_without_pod("j", &[]), None);
    }
}
