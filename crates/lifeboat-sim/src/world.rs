//! What the rest of Kubernetes does between two reconciles: the StatefulSet and Job controllers,
//! the volume binder, the kubelet and the garbage collector, each one step at a time, in the
//! order the schedule picks. Nothing here decides for Lifeboat; it only makes the world move.

use serde_json::{Value, json};

use crate::store::{Key, Store};

pub fn key(api_version: &str, plural: &str, ns: &str, name: &str) -> Key {
    Key {
        api_version: api_version.into(),
        plural: plural.into(),
        namespace: Some(ns.into()),
        name: name.into(),
    }
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn owner_ref(owner: &Value, kind: &str, api_version: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": str_at(owner, "/metadata/name").unwrap_or_default(),
        "uid": str_at(owner, "/metadata/uid").unwrap_or_default(),
        "controller": true,
    })
}

/// The StatefulSet controller: each StatefulSet's pods `<name>-<i>` (and the claims of its
/// volume templates, unless they exist) up to its replicas, and no more.
pub fn statefulsets(store: &mut Store, ns: &str) {
    let sets: Vec<Value> = store
        .list("apps/v1", "statefulsets", Some(ns))
        .into_iter()
        .cloned()
        .collect();
    for sts in sets {
        let name = str_at(&sts, "/metadata/name")
            .unwrap_or_default()
            .to_owned();
        if sts.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let replicas = sts
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let template = sts.pointer("/spec/template").cloned().unwrap_or(json!({}));
        for i in 0..replicas {
            for t in sts
                .pointer("/spec/volumeClaimTemplates")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
            {
                let claim = format!(
                    "{}-{name}-{i}",
                    str_at(&t, "/metadata/name").unwrap_or("data")
                );
                let k = key("v1", "persistentvolumeclaims", ns, &claim);
                if store.get(&k).is_none() {
                    let mut pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim, "labels": t.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
                        "spec": t.get("spec").cloned().unwrap_or(json!({}))});
                    pvc["status"] = json!({"phase": "Pending"});
                    let _ = store.create(&k, pvc);
                }
            }
            let pod = format!("{name}-{i}");
            let k = key("v1", "pods", ns, &pod);
            if store.get(&k).is_none() {
                let obj = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "name": pod,
                        "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
                        "ownerReferences": [owner_ref(&sts, "StatefulSet", "apps/v1")],
                    },
                    "spec": template.get("spec").cloned().unwrap_or(json!({})),
                    "status": {"phase": "Pending"},
                });
                let _ = store.create(&k, obj);
            }
        }
        let extra: Vec<Key> = store
            .list("v1", "pods", Some(ns))
            .into_iter()
            .filter_map(|p| {
                let pn = str_at(p, "/metadata/name")?;
                let ordinal: i64 = pn.strip_prefix(&format!("{name}-"))?.parse().ok()?;
                (ordinal >= replicas).then(|| key("v1", "pods", ns, pn))
            })
            .collect();
        for k in extra {
            let _ = store.delete(&k);
        }
    }
}

/// The volume binder: every pending claim binds.
pub fn bind_claims(store: &mut Store, ns: &str) {
    let pending: Vec<(Key, Value)> = store
        .list("v1", "persistentvolumeclaims", Some(ns))
        .into_iter()
        .filter(|p| str_at(p, "/status/phase") != Some("Bound"))
        .map(|p| {
            (
                key(
                    "v1",
                    "persistentvolumeclaims",
                    ns,
                    str_at(p, "/metadata/name").unwrap_or_default(),
                ),
                p.clone(),
            )
        })
        .collect();
    for (k, mut p) in pending {
        p["status"] = json!({"phase": "Bound"});
        store.put(&k, p);
    }
}

/// The claims a pod mounts.
fn claims_of(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| str_at(v, "/persistentVolumeClaim/claimName").map(str::to_owned))
        .collect()
}

/// The kubelet, for the pods of StatefulSets: a pod whose claims are bound runs unless it is
/// crashing, its containers become ready on the pass after, and it is Ready when every
/// readiness gate's condition is True. Job pods are left to [`finish_job`].
pub fn kubelet(store: &mut Store, ns: &str, crashing: &[String]) {
    let now = store.timestamp();
    // Names only: a pod is copied when it changes, which most passes it does not.
    let names: Vec<String> = store
        .list("v1", "pods", Some(ns))
        .into_iter()
        .filter(|p| p.pointer("/metadata/labels/job-name").is_none())
        .filter_map(|p| str_at(p, "/metadata/name").map(str::to_owned))
        .collect();
    for name in names {
        let k = key("v1", "pods", ns, &name);
        let Some(pod) = store.get(&k) else {
            continue;
        };
        let bound = claims_of(pod).iter().all(|c| {
            store
                .get(&key("v1", "persistentvolumeclaims", ns, c))
                .and_then(|p| str_at(p, "/status/phase"))
                == Some("Bound")
        });
        let running = bound && !crashing.contains(&name);
        let gates: Vec<&str> = pod
            .pointer("/spec/readinessGates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|g| str_at(g, "/conditionType"))
            .collect();
        let old: &[Value] = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        // The server loads its dataset and writes its AOF while its container runs: ready one
        // pass after it started running, so that the Cluster controller sees pods that run and
        // are not ready yet, as a restore's verification does.
        let started_at = pod
            .pointer("/status/containerStatuses/0/state/running/startedAt")
            .cloned();
        let containers_ready = running && started_at.is_some();
        let gates_open = gates.iter().all(|g| {
            old.iter()
                .any(|c| str_at(c, "/type") == Some(*g) && str_at(c, "/status") == Some("True"))
        });
        // A condition keeps its transition time while its status holds, as the kubelet's do.
        let condition = |type_: &str, status: bool| {
            let status = if status { "True" } else { "False" };
            let since = old
                .iter()
                .find(|c| str_at(c, "/type") == Some(type_) && str_at(c, "/status") == Some(status))
                .and_then(|c| c.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            json!({"type": type_, "status": status, "lastTransitionTime": since})
        };
        let mut conditions: Vec<Value> = old
            .iter()
            .filter(|c| gates.iter().any(|g| str_at(c, "/type") == Some(*g)))
            .cloned()
            .collect();
        conditions.push(condition("PodScheduled", true));
        conditions.push(condition("ContainersReady", containers_ready));
        conditions.push(condition("Ready", containers_ready && gates_open));
        let phase = if bound { "Running" } else { "Pending" };
        let mut status = json!({"phase": phase, "conditions": conditions});
        if running {
            status["containerStatuses"] = json!([{
                "name": "server",
                "image": "sim",
                "imageID": "",
                "ready": containers_ready,
                "restartCount": 0,
                "started": true,
                "state": {"running": {"startedAt": started_at.unwrap_or_else(|| json!(now))}},
            }]);
        }
        // The role the Cluster controller would read from a serving server: the first pod
        // primary, the others replicas. Only a server that serves has one.
        let role = containers_ready.then(|| {
            if name.ends_with("-0") {
                "primary"
            } else {
                "secondary"
            }
        });
        let role_path = format!(
            "/metadata/labels/{}",
            lifeboat_api::labels::ROLE.replace('/', "~1")
        );
        let role_kept = role.is_none_or(|r| str_at(pod, &role_path) == Some(r));
        if pod.get("status") == Some(&status) && role_kept {
            continue;
        }
        let mut pod = pod.clone();
        pod["status"] = status;
        if let Some(r) = role
            && let Some(labels) = pod
                .pointer_mut("/metadata/labels")
                .and_then(Value::as_object_mut)
        {
            labels.insert(lifeboat_api::labels::ROLE.into(), json!(r));
        }
        store.put(&k, pod);
    }
}

/// Whether a Job has ended: succeeded, or given a condition (failed, or stopped by suspension).
/// An ended Job gets no new pod, and the schedule ends it no other way.
pub fn job_ended(job: &Value) -> bool {
    job.pointer("/status/succeeded").is_some() || job.pointer("/status/conditions").is_some()
}

/// The Job controller's first step: a pod for every Job that has none and has not ended, and none
/// for a suspended one, whose pod it stops.
pub fn job_pods(store: &mut Store, ns: &str) {
    let jobs: Vec<Value> = store
        .list("batch/v1", "jobs", Some(ns))
        .into_iter()
        .cloned()
        .collect();
    for job in jobs {
        let name = str_at(&job, "/metadata/name")
            .unwrap_or_default()
            .to_owned();
        let k = key("v1", "pods", ns, &format!("{name}-0"));
        let ended = job_ended(&job);
        if job.pointer("/spec/suspend") == Some(&Value::Bool(true)) {
            // Suspended: its pod is stopped, and none starts again.
            if !ended {
                let _ = store.delete(&k);
                let mut j = job.clone();
                j["status"] = json!({"startTime": job.pointer("/status/startTime"), "active": 0,
                    "conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended",
                        "message": "Job suspended", "lastTransitionTime": store.timestamp()}]});
                store.put(&key("batch/v1", "jobs", ns, &name), j);
            }
            continue;
        }
        if store.get(&k).is_some() || ended {
            continue;
        }
        let mut spec = job
            .pointer("/spec/template/spec")
            .cloned()
            .unwrap_or(json!({}));
        spec["restartPolicy"] = json!("Never");
        let _ = store.create(
            &k,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-0"), "labels": {"job-name": name},
                    "ownerReferences": [owner_ref(&job, "Job", "batch/v1")]},
                "spec": spec,
                "status": {"phase": "Pending"},
            }),
        );
        let mut j = job.clone();
        j["status"] = json!({"startTime": store.timestamp(), "active": 1});
        store.put(&key("batch/v1", "jobs", ns, &name), j);
    }
}

/// How a Job ends, as the schedule decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobEnd {
    /// Succeeds, printing `output`.
    Succeed(String),
    /// Fails for good (past its backoff limit), printing `output`.
    Fail(String),
    /// Its pod cannot be scheduled.
    Unschedulable,
    /// The scheduler says its pod's claim is not found, from a cache that has not seen the claim
    /// yet; the claim exists. A pod without a claim is unschedulable instead.
    ClaimNotSeen,
    /// Its pod's image is not on the node and may not be pulled: it never starts.
    ImageMissing,
}

/// The termination message of a Job that succeeded printing `out`: its result lines, as the mover
/// writes them. Only Jobs whose name has an even length write one; the others leave it empty, as
/// a mover older than the operator did, so that both of the operator's reads (the pod's status,
/// then its log) are exercised. A Job that printed no result line writes none either.
fn termination_message(job: &str, out: &str) -> Option<String> {
    let results: Vec<&str> = out
        .lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l.trim())
                .is_ok_and(|v| v.is_object() && v.get("progress").is_none())
        })
        .collect();
    (job.len().is_multiple_of(2) && !results.is_empty()).then(|| results.join("\n") + "\n")
}

/// Ends a Job that is still running. False when there is no such Job, or it already ended.
pub fn finish_job(store: &mut Store, ns: &str, job: &str, end: &JobEnd) -> bool {
    let jk = key("batch/v1", "jobs", ns, job);
    let pk = key("v1", "pods", ns, &format!("{job}-0"));
    let (Some(mut j), Some(mut p)) = (store.get(&jk).cloned(), store.get(&pk).cloned()) else {
        return false;
    };
    if job_ended(&j) {
        return false;
    }
    let now = store.timestamp();
    match end {
        JobEnd::Succeed(out) => {
            j["status"] = json!({"startTime": j.pointer("/status/startTime"), "succeeded": 1, "completionTime": now});
            p["status"] = json!({"phase": "Succeeded"});
            if let Some(message) = termination_message(job, out) {
                p["status"]["containerStatuses"] = json!([{"name": "mover", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "message": message}}}]);
            }
            store
                .logs
                .insert((ns.into(), format!("{job}-0")), out.clone());
        }
        JobEnd::Fail(out) => {
            j["status"] = json!({"startTime": j.pointer("/status/startTime"), "failed": 1,
                "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit", "lastTransitionTime": now}]});
            p["status"] = json!({"phase": "Failed", "containerStatuses": [{"name": "mover", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                "state": {"terminated": {"exitCode": 1, "message": out}}}]});
            store
                .logs
                .insert((ns.into(), format!("{job}-0")), out.clone());
        }
        JobEnd::ImageMissing => {
            p["status"] = json!({"phase": "Pending", "containerStatuses": [{"name": "mover", "ready": false, "restartCount": 0,
                "image": "localhost/lifeboat/mover:0.1.0", "imageID": "",
                "state": {"waiting": {"reason": "ErrImageNeverPull",
                    "message": "Container image \"localhost/lifeboat/mover:0.1.0\" is not present with pull policy of Never"}}}]});
            store.put(&pk, p);
            return true;
        }
        JobEnd::Unschedulable | JobEnd::ClaimNotSeen => {
            let claim = p
                .pointer("/spec/volumes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find_map(|v| v.pointer("/persistentVolumeClaim/claimName")?.as_str())
                .filter(|_| *end == JobEnd::ClaimNotSeen)
                .map(str::to_owned);
            let message = match claim {
                Some(c) => format!(
                    "0/1 nodes are available: persistentvolumeclaim \"{c}\" not found. not found"
                ),
                None => "0/1 nodes are available: 1 Insufficient memory.".into(),
            };
            p["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": message, "lastTransitionTime": now}]});
            store.put(&pk, p);
            return true;
        }
    }
    store.put(&jk, j);
    store.put(&pk, p);
    true
}

/// The garbage collector: every object whose owners are all gone is deleted.
pub fn collect_garbage(store: &mut Store) {
    let uids: std::collections::HashSet<String> = store
        .keys()
        .filter_map(|k| store.get(k))
        .filter_map(|o| str_at(o, "/metadata/uid").map(str::to_owned))
        .collect();
    let orphans: Vec<Key> = store
        .keys()
        .filter(|k| {
            store
                .get(k)
                .and_then(|o| o.pointer("/metadata/ownerReferences"))
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    !refs.is_empty()
                        && refs
                            .iter()
                            .all(|r| !str_at(r, "/uid").is_some_and(|u| uids.contains(u)))
                })
        })
        .cloned()
        .collect();
    for k in orphans {
        let _ = store.delete(&k);
    }
}
