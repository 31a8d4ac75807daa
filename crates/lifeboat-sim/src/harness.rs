//! One schedule: from a seed, a sequence of reconciles of the real Cluster controller, operator
//! crashes and API errors inside them, Jobs that succeed, fail, hang or cannot be scheduled,
//! volumes that bind late or go, pods that crash, the Backup deleted, the Cluster deleted and
//! created again under its name, and time passing deadlines. The invariants are checked after
//! every step; then faults stop, and the restore must end within its deadlines.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use kube::runtime::events::Reporter;
use lifeboat_operator::context::{Clock, Config, Context};
use lifeboat_operator::naming;
use serde_json::{Value, json};

use crate::invariants::{self, Memory};
use crate::server::{ApiServer, Fault};
use crate::store::{Key, Store};
use crate::world::{self, JobEnd, key};

const NS: &str = "sim";
const CLUSTER: &str = "fdb-restored";
const COMPONENT: &str = "falkordb";
const BACKUP: &str = "fdb-backup-1";
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
            "metadata": {"name": "repo"},
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

    async fn reconcile(&mut self, faulty: bool) {
        let Some(c) = self.cluster() else {
            self.trace.push("reconcile: no Cluster".into());
            return;
        };
        if faulty {
            let mut rng = fastrand::Rng::with_seed(self.rng.u64(..));
            self.server
                .set_faults(Some(Box::new(move |_| match rng.u32(..100) {
                    0..=3 => Fault::Status(500),
                    4..=5 => Fault::Status(409),
                    6 => Fault::Timeout,
                    7..=8 => Fault::Crash,
                    _ => Fault::None,
                })));
        }
        let r = lifeboat_operator::cluster::reconcile(&c, &self.ctx).await;
        self.reconciles += 1;
        self.server.set_faults(None);
        let crashed = self.server.crashed();
        let writes = self.server.take_trace().iter().filter(|r| r.write).count();
        self.trace.push(format!(
            "reconcile{}: {} ({writes} writes){}",
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

    fn running_jobs(&self) -> Vec<(String, String)> {
        self.server.with_store(|s| {
            s.list("batch/v1", "jobs", Some(NS))
                .into_iter()
                .filter(|j| {
                    j.pointer("/status/succeeded").is_none()
                        && j.pointer("/status/conditions").is_none()
                })
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
                    ))
                })
                .collect()
        })
    }

    fn end_job(&mut self, job: &str, uid: &str, end: JobEnd) {
        let matched = matches!(&end, JobEnd::Succeed(out) if out.contains("\"match\":true"));
        let done = self
            .server
            .with_store(|s| world::finish_job(s, NS, job, &end));
        if done && !matches!(end, JobEnd::Unschedulable) {
            self.mem.job_matched.insert(uid.to_owned(), matched);
        }
        let what = match &end {
            JobEnd::Succeed(o) if o.contains("\"match\":true") => "succeeds, matching",
            JobEnd::Succeed(o) if o.contains("\"match\":false") => "succeeds, mismatching",
            JobEnd::Succeed(o) if o == NO_RESULT => "succeeds, printing no result",
            JobEnd::Succeed(_) => "succeeds",
            JobEnd::Fail(_) => "fails",
            JobEnd::Unschedulable => "cannot be scheduled",
        };
        self.trace.push(format!("job {job} {what}"));
    }

    async fn step(&mut self) {
        let roll = self.rng.u32(..100);
        match roll {
            0..=29 => self.reconcile(false).await,
            30..=39 => self.reconcile(true).await,
            40..=57 => self.world(),
            58..=63 => {
                self.server.with_store(|s| world::bind_claims(s, NS));
                self.trace.push("volumes bind".into());
            }
            64..=77 => {
                let jobs = self.running_jobs();
                if jobs.is_empty() {
                    return self.world();
                }
                let (job, uid) = jobs[self.rng.usize(..jobs.len())].clone();
                let verify = job == naming::verify_job(CLUSTER, COMPONENT);
                let end = match (verify, self.rng.u32(..100)) {
                    (true, 0..=59) => JobEnd::Succeed(verify_line(true)),
                    (true, 60..=69) => JobEnd::Succeed(verify_line(false)),
                    // Exits 0 having printed no result line: a mover that died quietly.
                    (true, 70..=79) => JobEnd::Succeed(NO_RESULT.into()),
                    (_, 80..=89) => JobEnd::Fail("mover: the repo did not answer".into()),
                    (_, 90..) => JobEnd::Unschedulable,
                    (false, _) => JobEnd::Succeed("{\"restored\":true}\n".into()),
                };
                self.end_job(&job, &uid, end);
            }
            78..=85 => {
                let secs = 1 + i64::from(self.rng.u32(..200));
                self.advance(secs);
                self.trace.push(format!("time advances {secs}s"));
            }
            86..=88 => {
                self.server.with_store(world::collect_garbage);
                self.trace.push("garbage collector runs".into());
            }
            89 => {
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
            90..=92 => {
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
            93..=95 => {
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
            _ => {
                let claim = naming::data_pvc(CLUSTER, COMPONENT, self.rng.i32(0..2));
                let r = self
                    .server
                    .with_store(|s| s.delete(&key("v1", "persistentvolumeclaims", NS, &claim)));
                self.trace.push(format!(
                    "volume {claim} deleted{}",
                    if r.is_ok() { "" } else { " (none)" }
                ));
            }
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let mem = &mut self.mem;
        self.server.with_store(|s| invariants::check(s, NS, mem))
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
        reconciles: sim.reconciles,
        trace: sim.trace,
    };
    for _ in 0..steps {
        sim.step().await;
        if let Err(why) = sim.check() {
            return fail(sim, why);
        }
    }
    // Faults stop: no crashes, no errors, volumes bind, pods recover, the Cluster exists, and
    // each Job the restore starts from now on succeeds with a matching result.
    sim.trace.push("faults stop".into());
    sim.crashing.clear();
    if sim.cluster().is_none() {
        sim.server.with_store(|s| {
            world::collect_garbage(s);
            s.put(
                &key("apps.kubeblocks.io/v1", "clusters", NS, CLUSTER),
                cluster_object(),
            );
        });
        sim.trace
            .push("Cluster created again under its name".into());
    }
    // In one schedule of ten, a fault outlives the others: an admission webhook that is down
    // refuses every Job create from now on. The restore must still end, by its deadline.
    let webhook_down = sim.rng.u32(..10) == 0;
    if webhook_down {
        sim.trace
            .push("an admission webhook refuses every Job create from now on".into());
    }
    let quiet_from = sim.server.with_store(|s| s.now);
    // Every stage has its deadline; a stage that started before the faults stopped ends sooner.
    let limit = quiet_from + 2 * DEADLINE.as_secs() as i64 + 3 * PERIOD;
    loop {
        sim.server.with_store(|s| {
            world::collect_garbage(s);
            world::bind_claims(s, NS);
        });
        sim.world();
        for (job, uid) in sim.running_jobs() {
            let verify = job == naming::verify_job(CLUSTER, COMPONENT);
            let end = JobEnd::Succeed(if verify {
                verify_line(true)
            } else {
                "{\"restored\":true}\n".into()
            });
            sim.end_job(&job, &uid, end);
        }
        if webhook_down {
            sim.server.set_faults(Some(Box::new(|r| {
                if r.method == "POST" && r.path.ends_with("/jobs") {
                    Fault::Status(500)
                } else {
                    Fault::None
                }
            })));
        }
        sim.reconcile(false).await;
        if let Err(why) = sim.check() {
            return fail(sim, why);
        }
        if let Some("Completed" | "Failed") = sim.restore_phase().as_deref() {
            break;
        }
        let now = sim.server.with_store(|s| s.now);
        if now > limit {
            let why = format!(
                "the restore did not end within its deadlines after faults stopped: phase {:?} at {}s after",
                sim.restore_phase(),
                now - quiet_from
            );
            return fail(sim, why);
        }
        sim.advance(PERIOD);
    }
    Outcome {
        seed,
        violation: None,
        final_phase: sim.restore_phase(),
        reconciles: sim.reconciles,
        trace: sim.trace,
    }
}
