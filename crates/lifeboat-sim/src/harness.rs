//! One schedule: from a seed, a sequence of reconciles of the real Cluster and Backup
//! controllers, operator crashes and API errors inside them, Jobs that succeed, fail, hang or
//! cannot be scheduled, volumes that bind late or go, pods that crash, the restore's Backup
//! deleted, the Cluster deleted and created again under its name, a Backup of the restoring
//! Cluster taken, deleted and taken again under its name, and time passing deadlines. The
//! invariants are checked after every step; then faults stop, and the restore and the Backup
//! must end within their deadlines.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use kube::runtime::events::Reporter;
use lifeboat_operator::context::{Clock, Config, Context};
use lifeboat_operator::naming;
use serde_json::{Value, json};

use crate::invariants::{self, Memory};
use crate::server::{ApiServer, Fault, FaultPlan};
use crate::store::{Key, Store};
use crate::world::{self, JobEnd, key};

const NS: &str = "sim";
const CLUSTER: &str = "fdb-restored";
const COMPONENT: &str = "falkordb";
const BACKUP: &str = "fdb-backup-1";
/// The Backup a user takes of the restoring Cluster, through the policy its controller made.
const USER_BACKUP: &str = "fdb-restored-nightly";
/// Restore deadlines in the simulation: short, so that schedules reach them.
const DEADLINE: Duration = Duration::from_secs(120);
/// The controller's requeue period.
const PERIOD: i64 = 5;
const START: i64 = 1_800_000_000;

/// How a schedule ended.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    /// The steps taken, one line each.
    pub trace: Vec<String>,
    /// The invariant broken, if one was.
    pub violation: Option<String>,
    /// The Restore's phase at the end (of the Cluster that exists then).
    pub final_phase: Option<String>,
    /// The user's Backup's phase at the end; `None` when there is none.
    pub backup_phase: Option<String>,
    /// Backup Jobs started during the schedule.
    pub backup_jobs: usize,
    pub reconciles: usize,
}

/// The restoring Cluster of the user guide, as a user applies it.
const FIXTURE_CLUSTER: &str = include_str!("../../../examples/restore-spec.yaml");

fn cluster_object() -> Value {
    let mut c: Value = serde_yaml::from_str(FIXTURE_CLUSTER).unwrap_or(Value::Null);
    if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("uid");
        m.insert("namespace".into(), json!(NS));
    }
    c
}

fn fixtures(store: &mut Store) {
    store.now = START;
    store.put(
        &Key {
            api_version: "dataprotection.kubeblocks.io/v1alpha1".into(),
            plural: "backuprepos".into(),
            namespace: None,
            name: "repo".into(),
        },
        json!({"apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "BackupRepo",
            "metadata": {"name": "repo", "annotations": {"dataprotection.kubeblocks.io/is-default-repo": "true"}},
            "spec": {"storageProviderRef": "pvc", "volumeCapacity": "10Gi", "pvReclaimPolicy": "Retain"},
            "status": {"phase": "Ready"}}),
    );
    store.put(
        &key(
            "dataprotection.kubeblocks.io/v1alpha1",
            "backups",
            NS,
            BACKUP,
        ),
        json!({"apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": BACKUP},
            "spec": {"backupPolicyName": "p", "backupMethod": "datafile"},
            "status": {"phase": "Completed", "backupRepoName": "repo",
                "dataset": {"engine": "falkordb", "topology": "replication", "component": COMPONENT,
                    "manifestPath": "fdb-backup-1/manifest.json", "manifestFormatVersion": 1,
                    "dataBytes": 1048576, "fingerprint": {"keys": {"0": 10}}}}}),
    );
    store.put(
        &key("apps.kubeblocks.io/v1", "clusters", NS, CLUSTER),
        cluster_object(),
    );
}

fn user_backup_object() -> Value {
    json!({"apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
        "metadata": {"name": USER_BACKUP, "namespace": NS},
        "spec": {"backupPolicyName": naming::backup_policy(CLUSTER, COMPONENT),
            "backupMethod": "datafile", "deletionPolicy": "Delete"}})
}

/// What `lifeboat-mover backup` prints for the Backup with `uid`; `checked` when it read the
/// published manifest and objects back.
fn backup_line(uid: &str, checked: bool) -> String {
    format!(
        "{}\n",
        json!({"backupName": format!("{USER_BACKUP}-{}", uid.get(..8).unwrap_or(uid)),
            "repo": "file:///repo", "totalSize": 1048576, "storedSize": 524288, "objectCount": 1,
            "checkedObjects": usize::from(checked),
            "fingerprint": {"databases": {"0": {"keys": 10}}}, "durationSeconds": 1.0,
            "snapshotSeconds": 0.5, "transferSeconds": 0.5, "attempts": 1})
    )
}

/// Which controller a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller {
    Cluster,
    Backup,
}

/// A log with no result line in it.
const NO_RESULT: &str = "2026-12-05T05:00:00Z  INFO verify: loading the dataset\n";

fn verify_line(matches: bool) -> String {
    let fp = json!({"databases": {"0": {"keys": 10}}});
    let live = if matches {
        fp.clone()
    } else {
        json!({"databases": {"0": {"keys": 9}}})
    };
    let diff: Vec<String> = if matches {
        vec![]
    } else {
        vec!["db0: 10 keys in the backup, 9 live".into()]
    };
    format!(
        "{}\n",
        json!({"backupName": BACKUP, "match": matches, "expected": fp, "live": live, "differences": diff})
    )
}

fn context(server: &ApiServer, clock: &Arc<AtomicI64>) -> Context {
    let config = Config {
        prepare_data_deadline: DEADLINE,
        post_ready_deadline: DEADLINE,
        backup_deadline: DEADLINE,
        ..Config::default()
    };
    let mut ctx = Context::new(
        server.client(),
        Reporter {
            controller: "lifeboat".into(),
            instance: None,
        },
        Arc::default(),
        config,
    );
    ctx.clock = Clock::manual(clock.clone());
    ctx
}

struct Sim {
    server: ApiServer,
    clock: Arc<AtomicI64>,
    ctx: Context,
    rng: fastrand::Rng,
    mem: Memory,
    crashing: Vec<String>,
    trace: Vec<String>,
    reconciles: usize,
}

impl Sim {
    fn cluster(&self) -> Option<lifeboat_api::Cluster> {
        self.server
            .with_store(|s| {
                s.get(&key("apps.kubeblocks.io/v1", "clusters", NS, CLUSTER))
                    .cloned()
            })
            .and_then(|v| serde_json::from_value(v).ok())
    }

    fn advance(&mut self, secs: i64) {
        let now = self.server.with_store(|s| {
            s.now += secs;
            s.now
        });
        self.clock.store(now, Ordering::Release);
    }

    fn user_backup(&self) -> Option<lifeboat_api::Backup> {
        self.server
            .with_store(|s| {
                s.get(&key(
                    "dataprotection.kubeblocks.io/v1alpha1",
                    "backups",
                    NS,
                    USER_BACKUP,
                ))
                .cloned()
            })
            .and_then(|v| serde_json::from_value(v).ok())
    }

    async fn reconcile(&mut self, faulty: bool) {
        self.pass(Controller::Cluster, faulty).await;
    }

    async fn pass(&mut self, which: Controller, faulty: bool) {
        let (cluster, backup) = match which {
            Controller::Cluster => (self.cluster(), None),
            Controller::Backup => (None, self.user_backup()),
        };
        if cluster.is_none() && backup.is_none() {
            self.trace.push(match which {
                Controller::Cluster => "reconcile: no Cluster".into(),
                Controller::Backup => "backup reconcile: no Backup".into(),
            });
            return;
        }
        if faulty {
            let mut rng = fastrand::Rng::with_seed(self.rng.u64(..));
            self.server
                .set_faults(Some(Box::new(move |_| match rng.u32(..100) {
                    0..=3 => Fault::Status(500),
                    4..=5 => Fault::Status(409),
                    6 => Fault::Timeout,
                    7..=8 => Fault::Crash,
                    // Refusals that a retry does not cure on a real cluster: RBAC missing a
                    // verb, admission rejecting the object.
                    9 => Fault::Status(if rng.bool() { 403 } else { 422 }),
                    _ => Fault::None,
                })));
        }
        let r = match (&cluster, &backup) {
            (Some(c), _) => lifeboat_operator::cluster::reconcile(c, &self.ctx)
                .await
                .map(|_| ()),
            (_, Some(b)) => lifeboat_operator::backup::controller::reconcile(b, &self.ctx)
                .await
                .map(|_| ()),
            (None, None) => Ok(()),
        };
        self.reconciles += 1;
        self.server.set_faults(None);
        let crashed = self.server.crashed();
        let writes = self.server.take_trace().iter().filter(|r| r.write).count();
        self.trace.push(format!(
            "{}reconcile{}: {} ({writes} writes){}",
            if which == Controller::Backup {
                "backup "
            } else {
                ""
            },
            if faulty { " with faults" } else { "" },
            match &r {
                Ok(_) => "ok".to_owned(),
                Err(e) => format!("error: {e}"),
            },
            if crashed {
                ", operator crashed and restarted"
            } else {
                ""
            }
        ));
        if r.is_ok() && !crashed && which == Controller::Cluster {
            let after = self
                .server
                .with_store(|s| invariants::after_cluster_pass(s, NS));
            if let Err(why) = after {
                self.mem.after_pass.get_or_insert(why);
            }
        }
        if crashed {
            // A new process: nothing remembered but what the store holds.
            self.server.restart();
            self.ctx = context(&self.server, &self.clock);
        }
    }

    fn world(&mut self) {
        let crashing = self.crashing.clone();
        self.server.with_store(|s| {
            world::statefulsets(s, NS);
            world::job_pods(s, NS);
            world::kubelet(s, NS, &crashing);
        });
        self.trace
            .push("world: StatefulSets, Jobs and kubelet".into());
    }

    fn running_jobs(&self) -> Vec<(String, String, String)> {
        self.server.with_store(|s| {
            s.list("batch/v1", "jobs", Some(NS))
                .into_iter()
                .filter(|j| !world::job_ended(j))
                .filter(|j| {
                    s.get(&key(
                        "v1",
                        "pods",
                        NS,
                        &format!("{}-0", j["metadata"]["name"].as_str().unwrap_or_default()),
                    ))
                    .is_some()
                })
                .filter_map(|j| {
                    Some((
                        j.pointer("/metadata/name")?.as_str()?.to_owned(),
                        j.pointer("/metadata/uid")?.as_str()?.to_owned(),
                        j.pointer("/metadata/ownerReferences/0/uid")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    ))
                })
                .collect()
        })
    }

    fn end_job(&mut self, job: &str, uid: &str, end: JobEnd) {
        let matched = matches!(&end, JobEnd::Succeed(out) if out.contains("\"match\":true"));
        let checked = match &end {
            JobEnd::Succeed(out) if out.contains("\"checkedObjects\":1") => {
                serde_json::from_str::<Value>(out.trim())
                    .ok()
                    .and_then(|v| v["backupName"].as_str().map(str::to_owned))
            }
            _ => None,
        };
        let done = self
            .server
            .with_store(|s| world::finish_job(s, NS, job, &end));
        if done
            && !matches!(
                end,
                JobEnd::Unschedulable | JobEnd::ClaimNotSeen | JobEnd::ImageMissing
            )
        {
            self.mem.job_matched.insert(uid.to_owned(), matched);
            if let Some(name) = checked {
                self.mem.backup_printed.insert(uid.to_owned(), name);
            }
        }
        let what = match &end {
            JobEnd::Succeed(o) if o.contains("\"match\":true") => "succeeds, matching",
            JobEnd::Succeed(o) if o.contains("\"match\":false") => "succeeds, mismatching",
            JobEnd::Succeed(o) if o == NO_RESULT => "succeeds, printing no result",
            JobEnd::Succeed(o) if o.contains("\"checkedObjects\":1") => "succeeds, read back",
            JobEnd::Succeed(o) if o.contains("\"checkedObjects\":0") => "succeeds, not read back",
            JobEnd::Succeed(_) => "succeeds",
            JobEnd::Fail(_) => "fails",
            JobEnd::Unschedulable => "cannot be scheduled",
            JobEnd::ClaimNotSeen => "is told its claim is not found by a lagging scheduler",
            JobEnd::ImageMissing => "cannot start: its image is not on the node",
        };
        self.trace.push(format!("job {job} {what}"));
    }

    /// How a Job ends when faults have stopped: every mover succeeds and reports in full.
    fn good_end(job: &str, owner: &str) -> JobEnd {
        JobEnd::Succeed(if job == naming::verify_job(CLUSTER, COMPONENT) {
            verify_line(true)
        } else if job == naming::backup_job(USER_BACKUP) {
            backup_line(owner, true)
        } else {
            "{\"restored\":true}\n".into()
        })
    }

    fn end_some_job(&mut self) {
        let jobs = self.running_jobs();
        if jobs.is_empty() {
            return self.world();
        }
        let (job, uid, owner) = jobs[self.rng.usize(..jobs.len())].clone();
        let verify = job == naming::verify_job(CLUSTER, COMPONENT);
        let backup = job == naming::backup_job(USER_BACKUP);
        let end = match (verify, backup, self.rng.u32(..100)) {
            (true, _, 0..=59) => JobEnd::Succeed(verify_line(true)),
            (true, _, 60..=69) => JobEnd::Succeed(verify_line(false)),
            // A repo that acknowledged writes it did not keep: the mover's read-back finds
            // fewer objects than it stored.
            (_, true, 60..=69) => JobEnd::Succeed(backup_line(&owner, false)),
            // Exits 0 having printed no result line: a mover that died quietly.
            (_, _, 70..=79) if verify || backup => JobEnd::Succeed(NO_RESULT.into()),
            (_, _, 80..=89) => JobEnd::Fail("mover: the repo did not answer".into()),
            (_, _, 90..=93) => JobEnd::Unschedulable,
            (_, _, 94..=96) => JobEnd::ClaimNotSeen,
            (_, _, 97..) => JobEnd::ImageMissing,
            // A backup Job's pod stuck for good is what fails a Backup before its deadline; it
            // comes more often, so that a failure that leaves its Job running is met soon.
            (_, true, 52..=59) => JobEnd::ImageMissing,
            _ => Self::good_end(&job, &owner),
        };
        self.end_job(&job, &uid, end);
    }

    fn advance_some(&mut self) {
        let secs = 1 + i64::from(self.rng.u32(..200));
        self.advance(secs);
        self.trace.push(format!("time advances {secs}s"));
    }

    fn collect_garbage(&mut self) {
        self.server.with_store(world::collect_garbage);
        self.trace.push("garbage collector runs".into());
    }

    fn delete_source_backup(&mut self) {
        let r = self.server.with_store(|s| {
            s.delete(&key(
                "dataprotection.kubeblocks.io/v1alpha1",
                "backups",
                NS,
                BACKUP,
            ))
        });
        self.trace.push(format!(
            "Backup deleted{}",
            if r.is_ok() { "" } else { " (already gone)" }
        ));
    }

    fn delete_or_recreate_cluster(&mut self) {
        let k = key("apps.kubeblocks.io/v1", "clusters", NS, CLUSTER);
        let existed = self.server.with_store(|s| match s.get(&k) {
            Some(_) => {
                let _ = s.delete(&k);
                true
            }
            None => {
                s.put(&k, cluster_object());
                false
            }
        });
        self.trace.push(
            if existed {
                "Cluster deleted"
            } else {
                "Cluster created again under its name"
            }
            .into(),
        );
    }

    fn crash_or_recover_pod(&mut self) {
        let pod = naming::pod(CLUSTER, COMPONENT, self.rng.i32(0..2));
        match self.crashing.iter().position(|p| *p == pod) {
            Some(i) => {
                self.crashing.remove(i);
                self.trace.push(format!("pod {pod} recovers"));
            }
            None => {
                self.trace.push(format!("pod {pod} crashes"));
                self.crashing.push(pod);
            }
        }
    }

    /// The user takes a Backup of the Cluster, or deletes the one there is.
    fn take_or_delete_backup(&mut self) {
        let k = key(
            "dataprotection.kubeblocks.io/v1alpha1",
            "backups",
            NS,
            USER_BACKUP,
        );
        let what = self.server.with_store(|s| match s.get(&k) {
            Some(b) if b.pointer("/metadata/deletionTimestamp").is_some() => {
                "Backup of the Cluster is being deleted"
            }
            Some(_) => {
                let _ = s.delete(&k);
                "Backup of the Cluster deleted"
            }
            // A user takes a Backup of a Cluster that is there: through the policy its
            // controller made.
            None if s
                .get(&key(
                    "dataprotection.kubeblocks.io/v1alpha1",
                    "backuppolicies",
                    NS,
                    &naming::backup_policy(CLUSTER, COMPONENT),
                ))
                .is_some() =>
            {
                s.put(&k, user_backup_object());
                "Backup of the Cluster created"
            }
            None => "no Backup taken: the Cluster has no BackupPolicy yet",
        });
        self.trace.push(what.into());
    }

    /// A data volume, or (one time in three) the repo's volume under the Backups.
    fn delete_some_volume(&mut self) {
        let claim = match self.rng.i32(0..3) {
            2 => naming::repo_pvc("repo"),
            i => naming::data_pvc(CLUSTER, COMPONENT, i),
        };
        let r = self
            .server
            .with_store(|s| s.delete(&key("v1", "persistentvolumeclaims", NS, &claim)));
        self.trace.push(format!(
            "volume {claim} deleted{}",
            if r.is_ok() { "" } else { " (none)" }
        ));
    }

    /// A step of the first round of faults, aimed at the restore (and a Backup taken meanwhile).
    async fn step(&mut self) {
        match self.rng.u32(..120) {
            0..=29 => self.reconcile(false).await,
            30..=39 => self.reconcile(true).await,
            40..=57 => self.world(),
            58..=63 => {
                self.server.with_store(|s| world::bind_claims(s, NS));
                self.trace.push("volumes bind".into());
            }
            64..=77 => self.end_some_job(),
            78..=85 => self.advance_some(),
            86..=88 => self.collect_garbage(),
            89 => self.delete_source_backup(),
            90..=92 => self.delete_or_recreate_cluster(),
            93..=95 => self.crash_or_recover_pod(),
            96..=99 => self.delete_some_volume(),
            100..=107 => self.pass(Controller::Backup, false).await,
            108..=111 => self.pass(Controller::Backup, true).await,
            112..=114 => self.take_or_delete_backup(),
            _ => self.world(),
        }
    }

    /// A step of the second round, on a restored Cluster: aimed at its Backups.
    async fn backup_step(&mut self) {
        match self.rng.u32(..100) {
            0..=24 => self.pass(Controller::Backup, false).await,
            25..=34 => self.pass(Controller::Backup, true).await,
            35..=42 => self.reconcile(false).await,
            43..=52 => self.world(),
            53..=69 => self.end_some_job(),
            70..=81 => self.take_or_delete_backup(),
            82..=88 => self.advance_some(),
            89..=93 => self.collect_garbage(),
            94..=95 => self.delete_or_recreate_cluster(),
            _ => self.crash_or_recover_pod(),
        }
    }

    /// Faults stop: no crashes, no errors, volumes bind, pods recover, the Cluster exists, and
    /// each Job started from now on succeeds and reports in full. The restore and the Backup
    /// must then end within their deadlines. With `may_break_webhook`, one schedule in ten keeps
    /// one fault: an admission webhook that is down refuses every Job create, and both must
    /// still end, by their deadlines.
    async fn settle(&mut self, may_break_webhook: bool) -> Result<(), String> {
        self.trace.push("faults stop".into());
        self.crashing.clear();
        if self.cluster().is_none() {
            self.server.with_store(|s| {
                world::collect_garbage(s);
                s.put(
                    &key("apps.kubeblocks.io/v1", "clusters", NS, CLUSTER),
                    cluster_object(),
                );
            });
            self.trace
                .push("Cluster created again under its name".into());
        }
        let webhook_down = may_break_webhook && self.rng.u32(..10) == 0;
        // Down, a webhook fails the call (500); up and denying, it refuses the object (403).
        let refusal = if self.rng.bool() { 403 } else { 500 };
        if webhook_down {
            self.trace.push(format!(
                "an admission webhook refuses every Job create from now on ({refusal})"
            ));
        }
        let quiet_from = self.server.with_store(|s| s.now);
        // Every stage has its deadline; a stage that started before the faults stopped ends
        // sooner.
        let limit = quiet_from + 2 * DEADLINE.as_secs() as i64 + 3 * PERIOD;
        let webhook = || -> Option<FaultPlan> {
            webhook_down.then(|| {
                Box::new(move |r: &crate::server::Request| {
                    if r.method == "POST" && r.path.ends_with("/jobs") {
                        Fault::Status(refusal)
                    } else {
                        Fault::None
                    }
                }) as FaultPlan
            })
        };
        loop {
            self.server.with_store(|s| {
                world::collect_garbage(s);
                world::bind_claims(s, NS);
            });
            self.world();
            for (job, uid, owner) in self.running_jobs() {
                let end = Sim::good_end(&job, &owner);
                self.end_job(&job, &uid, end);
            }
            for which in [Controller::Cluster, Controller::Backup] {
                self.server.set_faults(webhook());
                self.pass(which, false).await;
                self.check()?;
            }
            let backup = self.backup_ended();
            let restore_ended = matches!(
                self.restore_phase().as_deref(),
                Some("Completed" | "Failed")
            );
            if restore_ended && backup.is_ok() {
                return Ok(());
            }
            let now = self.server.with_store(|s| s.now);
            if now > limit && !restore_ended {
                return Err(format!(
                    "the restore did not end within its deadlines after faults stopped: phase {:?} at {}s after",
                    self.restore_phase(),
                    now - quiet_from
                ));
            }
            // A Backup waits for the restore to end, then has its own deadline.
            if now > limit + DEADLINE.as_secs() as i64 + 4 * PERIOD
                && let Err(b) = backup
            {
                return Err(format!(
                    "the backup did not end within its deadline after faults stopped and the restore ended: {b}, {}s after",
                    now - quiet_from
                ));
            }
            self.advance(PERIOD);
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let mem = &mut self.mem;
        self.server.with_store(|s| invariants::check(s, NS, mem))
    }

    /// Whether the user's Backup, if there is one, has ended: Completed, Failed, or gone.
    fn backup_ended(&self) -> Result<(), String> {
        match self.user_backup() {
            None => Ok(()),
            Some(b) if b.metadata.deletion_timestamp.is_some() => Err(format!(
                "Backup {USER_BACKUP} is still held by finalizers {:?}",
                b.metadata.finalizers.unwrap_or_default()
            )),
            Some(b) => {
                let phase = b.status.as_ref().and_then(|s| s.phase);
                match phase {
                    Some(
                        lifeboat_api::dataprotection::v1alpha1::BackupPhase::Completed
                        | lifeboat_api::dataprotection::v1alpha1::BackupPhase::Failed,
                    ) => Ok(()),
                    other => Err(format!(
                        "Backup {USER_BACKUP} is {other:?}, conditions {:?}",
                        b.status
                            .map(|s| s
                                .conditions
                                .into_iter()
                                .map(|c| format!(
                                    "{}={} {}: {}",
                                    c.type_, c.status, c.reason, c.message
                                ))
                                .collect::<Vec<_>>())
                            .unwrap_or_default()
                    )),
                }
            }
        }
    }

    fn backup_phase(&self) -> Option<String> {
        let b = self.user_backup()?;
        Some(
            b.status
                .and_then(|s| s.phase)
                .map_or_else(|| "New".to_owned(), |p| format!("{p:?}")),
        )
    }

    fn restore_phase(&self) -> Option<String> {
        let uid = self.cluster()?.metadata.uid?;
        self.server.with_store(|s| {
            s.list(
                "dataprotection.kubeblocks.io/v1alpha1",
                "restores",
                Some(NS),
            )
            .into_iter()
            .find(|r| {
                r.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|o| o.iter().any(|o| o["uid"].as_str() == Some(uid.as_str())))
            })
            .and_then(|r| {
                r.pointer("/status/phase")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
        })
    }
}

/// Runs the schedule of `seed`: `steps` random steps, then faults stop and the restore must end.
pub async fn run(seed: u64, steps: usize) -> Outcome {
    let server = ApiServer::default();
    server.with_store(fixtures);
    let clock = Arc::new(AtomicI64::new(START));
    let mut sim = Sim {
        ctx: context(&server, &clock),
        server,
        clock,
        rng: fastrand::Rng::with_seed(seed),
        mem: Memory::default(),
        crashing: Vec::new(),
        trace: Vec::new(),
        reconciles: 0,
    };
    let fail = |sim: Sim, why: String| Outcome {
        seed,
        violation: Some(why),
        final_phase: sim.restore_phase(),
        backup_phase: sim.backup_phase(),
        backup_jobs: sim.mem.backup_jobs.len(),
        reconciles: sim.reconciles,
        trace: sim.trace,
    };
    for _ in 0..steps {
        sim.step().await;
        if let Err(why) = sim.check() {
            return fail(sim, why);
        }
    }
    if let Err(why) = sim.settle(true).await {
        return fail(sim, why);
    }
    // The restored Cluster serves: a second round of faults, aimed at its Backups (taken,
    // deleted and taken again under the name, their Jobs ending every way), with the Cluster
    // itself now and then deleted and created again, restoring, under its name.
    if sim.restore_phase().as_deref() == Some("Completed") {
        sim.trace.push("faults resume, aimed at the Backup".into());
        for _ in 0..steps / 3 {
            sim.backup_step().await;
            if let Err(why) = sim.check() {
                return fail(sim, why);
            }
        }
        if let Err(why) = sim.settle(false).await {
            return fail(sim, why);
        }
    }
    if let Some(b) = sim.user_backup() {
        let st = b.status.unwrap_or_default();
        sim.trace.push(format!(
            "end: Backup {USER_BACKUP} is {:?}{}",
            st.phase,
            st.failure_reason
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ));
    }
    Outcome {
        seed,
        violation: None,
        final_phase: sim.restore_phase(),
        backup_phase: sim.backup_phase(),
        backup_jobs: sim.mem.backup_jobs.len(),
        reconciles: sim.reconciles,
        trace: sim.trace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn sim() -> Sim {
        let server = ApiServer::default();
        server.with_store(fixtures);
        let clock = Arc::new(AtomicI64::new(START));
        Sim {
            ctx: context(&server, &clock),
            server,
            clock,
            rng: fastrand::Rng::with_seed(0),
            mem: Memory::default(),
            crashing: Vec::new(),
            trace: Vec::new(),
            reconciles: 0,
        }
    }

    /// With no fault anywhere, a Backup of the restored Cluster starts on its first pass. The
    /// pass labels the Backup, then puts its finalizer on with the resourceVersion as
    /// precondition: the one the label patch returned, not the one read at the start of the pass,
    /// which that patch made stale (it was, and every Backup's first pass failed with a conflict).
    #[tokio::test(flavor = "current_thread")]
    async fn a_backup_starts_on_its_first_pass_without_a_conflict() {
        let mut sim = sim();
        sim.settle(false).await.expect("the restore ends");
        assert_eq!(
            sim.restore_phase().as_deref(),
            Some("Completed"),
            "{:#?}",
            sim.trace
        );
        // The opened gates make the pods Ready, and the role labels follow.
        sim.world();
        sim.take_or_delete_backup();
        sim.pass(Controller::Backup, false).await;
        let last = sim.trace.last().cloned().unwrap_or_default();
        assert!(
            last.starts_with("backup reconcile: ok"),
            "{last}\n{:#?}",
            sim.trace
        );
        let b = sim.user_backup().expect("the Backup");
        assert!(
            b.finalizers()
                .iter()
                .any(|f| f == lifeboat_operator::backup::deletion::FINALIZER),
            "{:?}",
            b.metadata
        );
        assert_eq!(
            b.status.and_then(|s| s.phase),
            Some(lifeboat_api::dataprotection::v1alpha1::BackupPhase::Running)
        );
    }
}
