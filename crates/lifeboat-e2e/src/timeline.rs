//! What a user waits for while a Cluster starts or restores, stage by stage, as watches see it.
//!
//! Kubernetes timestamps have whole seconds, too coarse for stages that take a second or two, so a
//! [`Timeline`] watches the Cluster's objects and records when each milestone was first seen (a
//! PVC bound, a Job's pod scheduled, its container started, the Job done, the Restore validated,
//! the Cluster `Running`). [`stages`] then cuts the wait from the Cluster's creation to `Running`
//! into consecutive stages, each ending when the last of its milestones was seen, so the stages
//! add up to the total. Which milestone an object reports is a pure function of the object.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::RestorePhase;
use lifeboat_api::{Cluster, ClusterPhase, Restore, conditions};

/// The data component of the Clusters timed here (FalkorDB replication).
const COMPONENT: &str = "falkordb";

/// Milestones of a Cluster that ended its wait one way or the other.
pub const RUNNING: &str = "cluster Running";
pub const FAILED: &str = "cluster Failed";
pub const RESTORE_FAILED: &str = "restore Failed";

/// A stage: its name and the milestones whose last one ends it. `{i}` stands for every data
/// ordinal.
pub type Stage = (&'static str, &'static [&'static str]);

/// A restoring Cluster, from `kubectl apply` to `Running` (docs/architecture.md, "How a Cluster
/// restore flows").
pub const RESTORE_STAGES: &[Stage] = &[
    ("validation", &["restore validated"]),
    ("PVC bind", &["pvc-{i} bound"]),
    ("prepareData Job scheduling", &["prepare-{i} scheduled"]),
    ("image start", &["prepare-{i} started"]),
    ("transfer", &["prepare-{i} done"]),
    ("workload start", &["data-{i} started"]),
    // The verify Job starts once the data pods run; it waits in each pod until the server has
    // loaded the restored RDB (and a replica resumed from its primary), then digests it while the
    // servers write their AOF.
    ("verify Job start", &["verify started"]),
    ("data load and verify", &["verify done"]),
    // What is left of the AOF write once verification is done: the pods are ready only after it.
    ("AOF write", &["data-{i} loaded"]),
    ("gate opening", &[RUNNING]),
];

/// An empty Cluster, from `kubectl apply` to `Running`.
pub const EMPTY_STAGES: &[Stage] = &[
    ("PVC bind", &["pvc-{i} bound"]),
    ("workload start", &["data-{i} started"]),
    ("data load", &["data-{i} loaded"]),
    ("roles and Running", &[RUNNING]),
];

/// Where an object of Cluster `cluster` stands, as milestone names. Objects of other Clusters
/// give none.
pub trait Milestones {
    fn milestones(&self, cluster: &str) -> Vec<String>;
}

fn condition_true(conds: Option<&Vec<k8s_openapi::api::core::v1::PodCondition>>, t: &str) -> bool {
    conds.is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
}

/// The part of a name after `prefix`, when it is a data ordinal.
fn ordinal(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix).and_then(|o| o.parse().ok())
}

impl Milestones for Pod {
    fn milestones(&self, cluster: &str) -> Vec<String> {
        let name = self.name_any();
        let job = self.labels().get("job-name").cloned();
        let who = match job {
            Some(job) => match ordinal(&job, &format!("{cluster}-{COMPONENT}-prepare-")) {
                Some(i) => format!("prepare-{i}"),
                None if job == format!("{cluster}-{COMPONENT}-verify") => "verify".into(),
                None => return vec![],
            },
            None => match ordinal(&name, &format!("{cluster}-{COMPONENT}-")) {
                Some(i) => format!("data-{i}"),
                None => return vec![],
            },
        };
        let Some(st) = self.status.as_ref() else {
            return vec![];
        };
        let conds = st.conditions.as_ref();
        let mut out = vec![];
        if condition_true(conds, "PodScheduled") {
            out.push(format!("{who} scheduled"));
        }
        // Started: every container has run (a short Job's may already have ended).
        let started = st.container_statuses.as_ref().is_some_and(|cs| {
            !cs.is_empty()
                && cs.iter().all(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                })
        });
        if started {
            out.push(format!("{who} started"));
        }
        // Containers ready while the pod is not: the server has loaded its data, answers and (a
        // server started from its RDB) has written its AOF; only Lifeboat's readiness gate still
        // holds the pod back.
        if condition_true(conds, "ContainersReady") {
            out.push(format!("{who} loaded"));
        }
        if condition_true(conds, "Ready") {
            out.push(format!("{who} ready"));
        }
        out
    }
}

impl Milestones for PersistentVolumeClaim {
    fn milestones(&self, cluster: &str) -> Vec<String> {
        let Some(i) = ordinal(&self.name_any(), &format!("data-{cluster}-{COMPONENT}-")) else {
            return vec![];
        };
        let bound = self.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        if bound {
            vec![format!("pvc-{i} bound")]
        } else {
            vec![format!("pvc-{i} created")]
        }
    }
}

impl Milestones for Job {
    fn milestones(&self, cluster: &str) -> Vec<String> {
        let name = self.name_any();
        let who = match ordinal(&name, &format!("{cluster}-{COMPONENT}-prepare-")) {
            Some(i) => format!("prepare-{i}"),
            None if name == format!("{cluster}-{COMPONENT}-verify") => "verify".into(),
            None => return vec![],
        };
        let done = self
            .status
            .as_ref()
            .and_then(|s| s.succeeded)
            .is_some_and(|n| n > 0);
        if done {
            vec![format!("{who} created"), format!("{who} done")]
        } else {
            vec![format!("{who} created")]
        }
    }
}

impl Milestones for Restore {
    fn milestones(&self, cluster: &str) -> Vec<String> {
        if self.name_any() != format!("{cluster}-{COMPONENT}-restore") {
            return vec![];
        }
        let Some(st) = self.status.as_ref() else {
            return vec!["restore created".into()];
        };
        let mut out = vec!["restore created".to_owned()];
        let passed = |t: &str| {
            st.conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        if passed(conditions::VALIDATION_PASSED) {
            out.push("restore validated".into());
        }
        if passed(conditions::PREPARE_DATA) {
            out.push("restore prepared".into());
        }
        match st.phase {
            Some(RestorePhase::Completed) => out.push("restore completed".into()),
            Some(RestorePhase::Failed) => out.push(RESTORE_FAILED.into()),
            _ => {}
        }
        out
    }
}

impl Milestones for Cluster {
    fn milestones(&self, cluster: &str) -> Vec<String> {
        if self.name_any() != cluster {
            return vec![];
        }
        match self.status.as_ref().and_then(|s| s.phase) {
            Some(ClusterPhase::Running) => vec![RUNNING.into()],
            Some(ClusterPhase::Failed) => vec![FAILED.into()],
            _ => vec![],
        }
    }
}

/// The stages' durations, in order, from the milestones' first sightings (offsets from the
/// Cluster's creation). A stage ends at the last of its milestones, or when the stage before it
/// ended if that was later (a PVC may bind before the Restore says it validated), so the stages
/// add up to the time of the last one. Fails naming a milestone never seen.
pub fn stages(
    seen: &BTreeMap<String, Duration>,
    plan: &[Stage],
    replicas: u32,
) -> Result<Vec<(&'static str, Duration)>, String> {
    let mut out = Vec::with_capacity(plan.len());
    let mut end = Duration::ZERO;
    for (name, milestones) in plan {
        let mut last = Duration::ZERO;
        for m in *milestones {
            let keys: Vec<String> = if m.contains("{i}") {
                (0..replicas)
                    .map(|i| m.replace("{i}", &i.to_string()))
                    .collect()
            } else {
                vec![(*m).to_owned()]
            };
            for k in keys {
                let at = seen
                    .get(&k)
                    .ok_or_else(|| format!("stage {name}: milestone {k:?} was never seen"))?;
                last = last.max(*at);
            }
        }
        let stage_end = last.max(end);
        out.push((*name, stage_end - end));
        end = stage_end;
    }
    Ok(out)
}

/// Watches one Cluster's objects in a namespace and records when each milestone was first seen.
pub struct Timeline {
    start: Instant,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    first: BTreeMap<String, Duration>,
    errors: Vec<String>,
}

fn watch<K>(
    api: Api<K>,
    cluster: &str,
) -> futures::stream::BoxStream<'static, Result<Vec<String>, String>>
where
    K: kube::Resource
        + Milestones
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let cluster = cluster.to_owned();
    watcher(api, watcher::Config::default())
        .applied_objects()
        .map(move |e| {
            e.map(|o| o.milestones(&cluster))
                .map_err(|e| format!("watch error: {e}"))
        })
        .boxed()
}

impl Timeline {
    /// Starts watching Cluster `cluster` in `ns`; offsets count from now, so start it just before
    /// creating the Cluster.
    pub fn start(client: Client, ns: &str, cluster: &str) -> Self {
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        let streams = vec![
            watch(Api::<Pod>::namespaced(client.clone(), ns), cluster),
            watch(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns),
                cluster,
            ),
            watch(Api::<Job>::namespaced(client.clone(), ns), cluster),
            watch(Api::<Restore>::namespaced(client.clone(), ns), cluster),
            watch(Api::<Cluster>::namespaced(client, ns), cluster),
        ];
        let task = tokio::spawn(async move {
            let mut events = futures::stream::select_all(streams);
            while let Some(ev) = events.next().await {
                let at = start.elapsed();
                let Ok(mut g) = s.lock() else { return };
                match ev {
                    Ok(ms) => {
                        for m in ms {
                            g.first.entry(m).or_insert(at);
                        }
                    }
                    Err(e) => g.errors.push(e),
                }
            }
        });
        Self { start, seen, task }
    }

    /// The milestones seen so far, with their offsets.
    pub fn seen(&self) -> BTreeMap<String, Duration> {
        self.seen
            .lock()
            .map(|g| g.first.clone())
            .unwrap_or_default()
    }

    /// Waits until the Cluster is `Running`, and returns the time it took. Fails as soon as the
    /// Cluster or its Restore fails, or at the deadline, listing the milestones seen.
    pub async fn wait_running(&self, deadline: Duration) -> Result<Duration> {
        loop {
            let seen = self.seen();
            if let Some(at) = seen.get(RUNNING) {
                return Ok(*at);
            }
            let failed = [FAILED, RESTORE_FAILED]
                .iter()
                .find(|m| seen.contains_key(**m));
            if failed.is_some() || self.start.elapsed() > deadline {
                let errors = self
                    .seen
                    .lock()
                    .map(|g| g.errors.join("; "))
                    .unwrap_or_default();
                bail!(
                    "{} after {:.1}s; milestones seen: {}; watch errors: [{errors}]",
                    failed.map_or("not Running", |m| *m),
                    self.start.elapsed().as_secs_f64(),
                    describe(&seen)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops watching and returns every milestone seen.
    pub fn finish(self) -> BTreeMap<String, Duration> {
        self.task.abort();
        self.seen()
    }
}

/// Milestones in the order they were seen, for messages.
pub fn describe(seen: &BTreeMap<String, Duration>) -> String {
    let mut v: Vec<_> = seen.iter().collect();
    v.sort_by_key(|(_, at)| **at);
    v.iter()
        .map(|(m, at)| format!("{m} {:.1}s", at.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secs(pairs: &[(&str, f64)]) -> BTreeMap<String, Duration> {
        pairs
            .iter()
            .map(|(k, s)| ((*k).to_owned(), Duration::from_secs_f64(*s)))
            .collect()
    }

    #[test]
    fn stages_end_at_their_last_milestone_and_add_up_to_the_total() {
        let seen = secs(&[
            ("pvc-0 bound", 1.0),
            ("pvc-1 bound", 3.0),
            ("data-0 started", 4.0),
            ("data-1 started", 5.5),
            ("data-0 loaded", 6.0),
            ("data-1 loaded", 6.5),
            (RUNNING, 8.0),
        ]);
        let got = stages(&seen, EMPTY_STAGES, 2).expect("all seen");
        let want = [
            ("PVC bind", 3.0),
            ("workload start", 2.5),
            ("data load", 1.0),
            ("roles and Running", 1.5),
        ];
        assert_eq!(got.len(), want.len());
        for ((n, d), (wn, ws)) in got.iter().zip(want) {
            assert_eq!(*n, wn);
            assert!((d.as_secs_f64() - ws).abs() < 1e-9, "{n}: {d:?}, want {ws}");
        }
        let total: Duration = got.iter().map(|(_, d)| *d).sum();
        assert_eq!(total, Duration::from_secs(8));
    }

    #[test]
    fn a_milestone_seen_before_the_stage_before_it_ended_makes_an_empty_stage() {
        // The PVC bound (1 s) before the Restore was seen validated (2 s).
        let mut seen = secs(&[("restore validated", 2.0)]);
        seen.extend(secs(&[("pvc-0 bound", 1.0)]));
        let plan: &[Stage] = &[
            ("validation", &["restore validated"]),
            ("PVC bind", &["pvc-{i} bound"]),
        ];
        let got = stages(&seen, plan, 1).expect("all seen");
        assert_eq!(got[1], ("PVC bind", Duration::ZERO));
    }

    #[test]
    fn a_milestone_never_seen_is_named() {
        let seen = secs(&[("pvc-0 bound", 1.0)]);
        let err = stages(&seen, EMPTY_STAGES, 2).expect_err("pvc-1 missing");
        assert!(err.contains("\"pvc-1 bound\""), "{err}");
    }

    #[test]
    fn objects_report_the_milestones_of_their_own_cluster_only() {
        let job_pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "r-falkordb-prepare-1-abcde", "labels": {"job-name": "r-falkordb-prepare-1"}},
            "status": {
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "mover", "image": "m", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"running": {}}}]
            }
        }))
        .expect("pod");
        assert_eq!(
            job_pod.milestones("r"),
            ["prepare-1 scheduled", "prepare-1 started"]
        );
        assert!(job_pod.milestones("rr").is_empty());

        let data: Pod = serde_json::from_value(json!({
            "metadata": {"name": "r-falkordb-0"},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "False"}
            ]}
        }))
        .expect("pod");
        assert_eq!(data.milestones("r"), ["data-0 scheduled", "data-0 loaded"]);
        // A sentinel's pod is no data pod.
        let sentinel: Pod = serde_json::from_value(
            json!({"metadata": {"name": "r-falkordb-sent-0"}, "status": {}}),
        )
        .expect("pod");
        assert!(sentinel.milestones("r").is_empty());

        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data-r-falkordb-1"}, "status": {"phase": "Bound"}
        }))
        .expect("pvc");
        assert_eq!(pvc.milestones("r"), ["pvc-1 bound"]);

        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "r-falkordb-verify"}, "status": {"succeeded": 1}
        }))
        .expect("job");
        assert_eq!(job.milestones("r"), ["verify created", "verify done"]);
    }
}
