//! Why a pod is not making progress, in words a user can act on. Pure.
//!
//! Some causes can never resolve on their own (an image that is not there, a volume that is
//! gone); they end a restore at once. Others (a pod waiting for a node) may, so they are reported
//! and end the restore only at its stage deadline.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// A reason a pod is stuck.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    /// Whether waiting longer cannot help.
    pub terminal: bool,
    /// What is wrong, naming the pod and quoting the scheduler or kubelet.
    pub message: String,
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
                });
            }
            if reason == "CreateContainerConfigError" {
                return Some(Stuck {
                    terminal: true,
                    message: format!(
                        "pod {name}: container {} cannot start ({reason}: {msg})",
                        cs.name
                    ),
                });
            }
            if reason == "CrashLoopBackOff" {
                return Some(Stuck {
                    terminal: false,
                    message: format!("pod {name}: container {} keeps crashing ({msg})", cs.name),
                });
            }
        }
    }
    for ev in events {
        if ev.reason == "FailedMount" && volume_gone(&ev.message) {
            return Some(Stuck {
                terminal: true,
                message: format!(
                    "pod {name}: kubelet cannot mount its volume: {}",
                    ev.message
                ),
            });
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
        return Some(Stuck {
            terminal: volume_gone(&msg),
            message: format!("pod {name} cannot be scheduled: {msg}"),
        });
    }
    if let Some(ev) = events.iter().rev().find(|e| e.reason == "FailedScheduling")
        && status.phase.as_deref() == Some("Pending")
    {
        return Some(Stuck {
            terminal: volume_gone(&ev.message),
            message: format!("pod {name} cannot be scheduled: {}", ev.message),
        });
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
