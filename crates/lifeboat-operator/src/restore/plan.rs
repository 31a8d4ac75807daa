//! The restore stage machine. Pure: given what was observed, it says what to create next, whether
//! the workload may exist yet, and what the Restore's status is now.
//!
//! Stages, in order; each ends, within its deadline, in success or a terminal failure:
//! 1. **Validation**: the preconditions ([`super::preconditions`]).
//! 2. **prepareData**: the data PVCs, under the workload's own names, each filled by a Job. The
//!    workload does not exist yet.
//! 3. **postReady**: the workload starts on the restored volumes with its data pods held
//!    un-Ready by a readiness gate; a Job verifies the live dataset against the manifest. Only then
//!    are the gates opened.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use lifeboat_api::conditions::{
    self, CHECK_BACKUP_REPO, POST_READY, PREPARE_DATA, VALIDATION_PASSED,
};
use lifeboat_api::dataprotection::v1alpha1::{
    RestoreActionStatus, RestorePhase, RestoreStatus, RestoreStatusAction, RestoreStatusActions,
    VolumeClaimRestorePolicy,
};

use super::diagnose::Stuck;
use super::intent::ComponentRestore;
use crate::duration;
use crate::progress;

/// What the verify Job's outcome proves.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Not finished, or its result not read yet.
    Pending,
    /// Finished with a result line that matches.
    Verified,
    /// Finished without proof, or with a mismatch: why.
    Refuted(String),
}

/// A Job as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobObs {
    /// The Job's name.
    pub name: String,
    /// When it started.
    pub started: Option<Time>,
    /// When it finished.
    pub finished: Option<Time>,
    /// Whether it completed successfully.
    pub succeeded: bool,
    /// Why it failed, once it has failed for good (past its backoff limit).
    pub failed: Option<String>,
    /// Why its pod is stuck, if it is.
    pub stuck: Option<Stuck>,
    /// The result line the mover printed, once the Job finished.
    pub output: Option<String>,
    /// The newest progress line the mover printed, while the Job runs.
    pub progress: Option<crate::mover_output::Progress>,
    /// Whether it is suspended (`spec.suspend`): its pods are stopped and none starts again.
    pub suspended: bool,
}

/// A data PVC as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PvcObs {
    /// The PVC's name.
    pub name: String,
    /// Whether it exists.
    pub exists: bool,
    /// Whether it is being deleted.
    pub deleting: bool,
}

/// A data pod as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodObs {
    /// The pod's name.
    pub name: String,
    /// Whether every container runs: the instance manager answers, and tells the verify Job
    /// once its server serves the restored dataset, which may be before the pod is ready (a
    /// server started from its RDB writes its AOF first).
    pub running: bool,
    /// Why it is stuck, if it is.
    pub stuck: Option<Stuck>,
}

/// Everything the stage machine looks at.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    pub now: Time,
    pub req: &'a ComponentRestore,
    /// How many data replicas (volumes) to restore.
    pub replicas: i32,
    /// The preconditions' verdict; only consulted before the restore has started.
    pub precondition: Result<(), String>,
    /// The Restore's status so far.
    pub status: RestoreStatus,
    /// The data PVCs, by ordinal.
    pub pvcs: Vec<PvcObs>,
    /// The prepareData Jobs, by ordinal.
    pub prepare_jobs: Vec<Option<JobObs>>,
    /// Whether the workload exists.
    pub workload_exists: bool,
    /// The data pods that exist.
    pub pods: Vec<PodObs>,
    /// The verify Job, once created.
    pub verify_job: Option<JobObs>,
}

/// What to do next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The Restore's new status.
    pub status: RestoreStatus,
    /// Ordinals whose data PVC to create.
    pub create_pvcs: Vec<i32>,
    /// Ordinals whose prepareData Job to create.
    pub create_prepare_jobs: Vec<i32>,
    /// Whether the workload may exist.
    pub workload_allowed: bool,
    /// Whether to create the verify Job.
    pub create_verify_job: bool,
    /// Whether to open the data pods' readiness gates.
    pub open_gates: bool,
    /// Set when this plan ends the restore: the failure message.
    pub failed: Option<String>,
    /// Set when this plan completes the restore.
    pub completed: bool,
}

fn secs_between(a: &Time, b: &Time) -> u64 {
    let d = b.0.as_second() - a.0.as_second();
    u64::try_from(d).unwrap_or(0)
}

/// Which stage a create belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Data PVCs and prepareData Jobs.
    PrepareData,
    /// The verify Job.
    PostReady,
}

/// Whether the API server's refusal of a create is final: the same request is refused again
/// (invalid, a name over its limit, forbidden by admission or a quota). Conflicts, throttling and
/// server errors are retried.
pub fn refusal_is_final(code: u16) -> bool {
    matches!(code, 400 | 403 | 404 | 422)
}

impl Plan {
    /// Holds the restore while objects under its names are not its own (see `leftovers.rs`):
    /// nothing is created and no gate opens; past the deadline the restore fails naming them.
    /// Returns the message to show while waiting.
    pub fn hold_for_leftovers(
        &mut self,
        now: &Time,
        verdict: &super::leftovers::Verdict,
    ) -> Option<String> {
        use super::leftovers::Verdict;
        match verdict {
            Verdict::Clear => return None,
            Verdict::Wait(_) => {}
            Verdict::Fail(why) => self.fail(now, PREPARE_DATA, why.clone()),
        }
        self.open_gates = false;
        self.completed = false;
        self.workload_allowed = false;
        self.create_pvcs.clear();
        self.create_prepare_jobs.clear();
        self.create_verify_job = false;
        match verdict {
            Verdict::Wait(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// Ends the restore because what it restores from is gone: the Backup, or its repo, was
    /// deleted while the restore still needed them to create its Jobs.
    pub fn lost_source(&mut self, now: &Time, why: String) {
        let condition = if self.create_verify_job {
            POST_READY
        } else {
            PREPARE_DATA
        };
        self.fail(now, condition, why);
        self.open_gates = false;
        self.completed = false;
        self.create_pvcs.clear();
        self.create_prepare_jobs.clear();
        self.create_verify_job = false;
    }

    /// Ends the restore because the API server refused to create an object it needs, quoting the
    /// server's reason.
    pub fn refused(&mut self, now: &Time, stage: Stage, object: &str, reason: &str) {
        let condition = match stage {
            Stage::PrepareData => PREPARE_DATA,
            Stage::PostReady => POST_READY,
        };
        self.fail(
            now,
            condition,
            format!("the API server refused to create {object}: {reason}"),
        );
        self.open_gates = false;
        self.completed = false;
        self.create_pvcs.clear();
        self.create_prepare_jobs.clear();
        self.create_verify_job = false;
    }

    fn fail(&mut self, now: &Time, condition: &str, message: String) {
        let st = &mut self.status;
        st.phase = Some(RestorePhase::Failed);
        st.progress = None;
        st.completion_timestamp = Some(now.clone());
        if let Some(start) = &st.start_timestamp {
            st.duration = Some(duration::format(Duration::from_secs(secs_between(
                start, now,
            ))));
        }
        conditions::set(
            &mut st.conditions,
            condition,
            "False",
            "Failed",
            &message,
            None,
            now,
        );
        self.failed = Some(message);
    }
}

fn action(name: &str, backup: &str, job: &JobObs, now: &Time) -> RestoreStatusAction {
    let (status, message) = if job.succeeded {
        (
            RestoreActionStatus::Completed,
            format!("Job/{} completed", job.name),
        )
    } else if let Some(f) = &job.failed {
        (RestoreActionStatus::Failed, f.clone())
    } else if let Some(s) = &job.stuck {
        (RestoreActionStatus::Processing, s.message.clone())
    } else if let Some(pr) = job
        .progress
        .as_ref()
        .and_then(|r| progress::aggregate([r], now))
    {
        (
            RestoreActionStatus::Processing,
            format!("Job/{}: {}", job.name, progress::describe(&pr)),
        )
    } else {
        (
            RestoreActionStatus::Processing,
            format!("Job/{} is processing", job.name),
        )
    };
    RestoreStatusAction {
        name: name.to_owned(),
        backup_name: Some(backup.to_owned()),
        object_key: format!("Job/{}", job.name),
        status,
        message: Some(message),
        start_time: Some(job.started.clone().unwrap_or_else(|| now.clone())),
        end_time: job.finished.clone(),
    }
}

/// The Jobs to suspend once a restore has failed: its Jobs that neither finished nor are
/// suspended yet, observed this pass or created by it (`created`, before a later create was
/// refused). A failed restore must not leave a pod pending for good, waiting for a node or an
/// image, nor one still writing into the volumes of a Cluster that says `Failed`. Jobs that
/// ended keep their pods, for their logs.
pub fn jobs_to_suspend(input: &Input<'_>, p: &Plan, created: &[String]) -> Vec<String> {
    if p.status.phase != Some(RestorePhase::Failed) {
        return Vec::new();
    }
    let observed = input
        .prepare_jobs
        .iter()
        .flatten()
        .chain(input.verify_job.iter())
        .filter(|j| !j.succeeded && j.failed.is_none() && !j.suspended)
        .map(|j| j.name.clone());
    let mut names: Vec<String> = observed.chain(created.iter().cloned()).collect();
    names.sort();
    names.dedup();
    names
}

/// The stages of a completed restore and how long each took, in seconds, from its conditions:
/// validation (start to ValidationPassed), prepareData (to PrepareData) and postReady (to
/// completion). A stage whose ends are not both recorded is left out.
pub fn stage_durations(st: &RestoreStatus) -> Vec<(&'static str, f64)> {
    let at = |c: &str| {
        conditions::get(&st.conditions, c)
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0)
    };
    let marks = [
        st.start_timestamp.as_ref().map(|t| t.0),
        at(VALIDATION_PASSED),
        at(PREPARE_DATA),
        st.completion_timestamp.as_ref().map(|t| t.0),
    ];
    ["validation", "prepareData", "postReady"]
        .into_iter()
        .zip(marks.windows(2))
        .filter_map(|(stage, w)| match (w[0], w[1]) {
            (Some(a), Some(b)) => Some((stage, b.duration_since(a).as_secs_f64().max(0.0))),
            _ => None,
        })
        .collect()
}

/// The stage a failed restore failed in: the condition it set False. A bounded metric label.
pub fn failed_stage(st: &RestoreStatus) -> &'static str {
    [
        VALIDATION_PASSED,
        CHECK_BACKUP_REPO,
        PREPARE_DATA,
        POST_READY,
    ]
    .into_iter()
    .find(|c| conditions::get(&st.conditions, c).is_some_and(|c| c.status == "False"))
    .unwrap_or("Unknown")
}

/// Whether the planned status must be written over the stored one: always when anything but
/// progress changed (a phase, a condition, an action's outcome), and for progress alone at most
/// every `progress::REFRESH_SECS`.
pub fn status_write_due(stored: &RestoreStatus, planned: &RestoreStatus, now: &Time) -> bool {
    if stored == planned {
        return false;
    }
    let without_progress = |s: &RestoreStatus| {
        let mut s = s.clone();
        s.progress = None;
        if let Some(a) = s.actions.as_mut() {
            for x in a.prepare_data.iter_mut().chain(a.post_ready.iter_mut()) {
                if x.status == RestoreActionStatus::Processing {
                    x.message = None;
                }
            }
        }
        s
    };
    without_progress(stored) != without_progress(planned)
        || progress::refresh_due(stored.progress.as_ref(), now)
}

/// Whether the Cluster must now be marked as restored (`lifeboat.io/restore-completed`): on every
/// pass that finds the Restore `Completed` and the mark missing, not only the pass that completed
/// it, since the operator may stop between writing `Completed` and the mark. Until the mark, a
/// Backup of the Cluster waits.
pub fn should_mark_done(status: &RestoreStatus, marked: bool) -> bool {
    !marked && status.phase == Some(RestorePhase::Completed)
}

/// Decides the next step of a component's restore.
pub fn plan(input: &Input<'_>) -> Plan {
    let now = &input.now;
    let mut p = Plan {
        status: input.status.clone(),
        ..Default::default()
    };
    match p.status.phase {
        Some(RestorePhase::Completed) => {
            p.workload_allowed = true;
            p.open_gates = true;
            return p;
        }
        // Terminal: nothing more is created. Ended Jobs are kept for their logs, and unfinished
        // ones are suspended by the step ([`jobs_to_suspend`]).
        Some(RestorePhase::Failed) | Some(RestorePhase::AsDataSource) => {
            p.workload_allowed = input.workload_exists;
            return p;
        }
        Some(RestorePhase::Running) => {}
        None => {
            if let Err(msg) = &input.precondition {
                p.status.start_timestamp = Some(now.clone());
                p.fail(now, VALIDATION_PASSED, msg.clone());
                return p;
            }
            p.status.phase = Some(RestorePhase::Running);
            p.status.start_timestamp = Some(now.clone());
            let st = &mut p.status.conditions;
            conditions::set(
                st,
                VALIDATION_PASSED,
                "True",
                "Validated",
                "the Backup, its repo and the Cluster fit",
                None,
                now,
            );
            conditions::set(
                st,
                CHECK_BACKUP_REPO,
                "True",
                "Ready",
                "the backup repo is Ready",
                None,
                now,
            );
        }
    }
    let started = p
        .status
        .start_timestamp
        .clone()
        .unwrap_or_else(|| now.clone());
    let backup = input.req.backup_name.as_str();
    // Progress describes this pass's running Jobs only.
    p.status.progress = None;

    // --- prepareData ---
    let prepared = conditions::get(&p.status.conditions, PREPARE_DATA)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.clone());
    let prepared = match prepared {
        Some(at) => at,
        None => {
            let mut actions = Vec::new();
            let mut all_done = true;
            let mut first_stuck: Option<String> = None;
            let mut earlier_done = true;
            let mut reports = Vec::new();
            for ord in 0..input.replicas {
                let i = usize::try_from(ord).unwrap_or(0);
                let pvc = input.pvcs.get(i).cloned().unwrap_or_default();
                let job = input.prepare_jobs.get(i).cloned().flatten();
                let may_start =
                    input.req.policy == VolumeClaimRestorePolicy::Parallel || earlier_done;
                // Until the workload has taken them over, a restored volume that goes away
                // would be replaced by an empty one: that ends the restore, whether or not its
                // Job has finished.
                let lost = |state: &str, j: &JobObs| {
                    if j.succeeded {
                        format!(
                            "PersistentVolumeClaim {} {state} after prepareData Job/{} wrote the backup into it, before the database started on it",
                            pvc.name, j.name
                        )
                    } else {
                        format!(
                            "PersistentVolumeClaim {} {state} while prepareData Job/{} still needs it",
                            pvc.name, j.name
                        )
                    }
                };
                match (&job, pvc.exists, pvc.deleting) {
                    (Some(j), _, true) => {
                        p.fail(now, PREPARE_DATA, lost("is being deleted", j));
                        return p;
                    }
                    (Some(j), false, _) => {
                        p.fail(now, PREPARE_DATA, lost("disappeared", j));
                        return p;
                    }
                    (None, _, true) => {
                        p.fail(now, PREPARE_DATA, format!(
                            "PersistentVolumeClaim {} is being deleted; it cannot receive restored data",
                            pvc.name
                        ));
                        return p;
                    }
                    (None, false, _) if may_start => p.create_pvcs.push(ord),
                    (None, true, _) if may_start => p.create_prepare_jobs.push(ord),
                    _ => {}
                }
                match &job {
                    Some(j) => {
                        if let Some(f) = &j.failed {
                            // A Job that timed out with its pod never started says why here.
                            let why = match &j.stuck {
                                Some(st) => format!("{f}; {}", st.message),
                                None => f.clone(),
                            };
                            p.fail(
                                now,
                                PREPARE_DATA,
                                format!("prepareData Job/{} failed: {why}", j.name),
                            );
                            return p;
                        }
                        if let Some(s) = &j.stuck {
                            if s.terminal {
                                p.fail(
                                    now,
                                    PREPARE_DATA,
                                    format!("prepareData Job/{}: {}", j.name, s.message),
                                );
                                return p;
                            }
                            first_stuck.get_or_insert_with(|| s.message.clone());
                        }
                        if !j.succeeded {
                            all_done = false;
                            earlier_done = false;
                            reports.extend(j.progress.clone());
                        }
                        actions.push(action(&format!("prepareData-{ord}"), backup, j, now));
                    }
                    None => {
                        all_done = false;
                        earlier_done = false;
                    }
                }
            }
            p.status
                .actions
                .get_or_insert_with(RestoreStatusActions::default)
                .prepare_data = actions;
            if !all_done {
                p.status.progress = progress::aggregate(&reports, now);
                let limit = input.req.prepare_data_deadline;
                if secs_between(&started, now) > limit.as_secs() {
                    let why = first_stuck.unwrap_or_else(|| "its Jobs are still running".into());
                    p.fail(
                        now,
                        PREPARE_DATA,
                        format!(
                            "prepareData did not finish within its deadline of {}: {why}",
                            duration::format(limit)
                        ),
                    );
                    return p;
                }
                let msg = first_stuck
                    .unwrap_or_else(|| "writing the backup into the data volumes".into());
                conditions::set(
                    &mut p.status.conditions,
                    PREPARE_DATA,
                    "False",
                    "Processing",
                    &msg,
                    None,
                    now,
                );
                return p;
            }
            conditions::set(
                &mut p.status.conditions,
                PREPARE_DATA,
                "True",
                "Completed",
                "every data volume holds the backup, checked against its checksums",
                None,
                now,
            );
            now.clone()
        }
    };

    // --- postReady ---
    p.workload_allowed = true;
    let limit = input.req.post_ready_deadline;
    let over = secs_between(&prepared, now) > limit.as_secs();
    if let Some(j) = &input.verify_job {
        if crate::mutation::active(crate::mutation::Mutation::OpenGatesBeforeVerify) {
            p.open_gates = true;
        }
        let mut a = action("postReady-verify", backup, j, now);
        if !j.succeeded && j.failed.is_none() {
            p.status.progress = j
                .progress
                .as_ref()
                .and_then(|r| progress::aggregate([r], now));
        }
        let line = j
            .output
            .as_deref()
            .and_then(crate::mover_output::last::<crate::mover_output::VerifyLine>);
        if let Some(v) = &line {
            p.status.verification = Some(v.to_status());
        }
        // A Job that exits 0 has not proven anything by itself: completion needs the mover's
        // result line, saying it matches, with both fingerprints recorded.
        let verdict = match (j.succeeded, &j.output, &line) {
            (false, _, _) => Verdict::Pending,
            // The log could not be read yet: asked again next pass, up to the deadline.
            (true, None, _) => Verdict::Pending,
            (true, Some(_), None)
                if crate::mutation::active(crate::mutation::Mutation::CompleteWithoutResult) =>
            {
                Verdict::Verified
            }
            (true, Some(_), None) => Verdict::Refuted(format!(
                "verification Job/{} succeeded but printed no verification result, so the restore is not verified",
                j.name
            )),
            (true, Some(_), Some(v)) if !v.matches => Verdict::Refuted(format!(
                "verification Job/{} succeeded but its result says the live dataset does not match the backup's manifest: {}",
                j.name,
                if v.differences.is_empty() {
                    "no difference listed".to_owned()
                } else {
                    v.differences.join("; ")
                }
            )),
            (true, Some(_), Some(_)) => Verdict::Verified,
        };
        if verdict == Verdict::Verified {
            a.message = Some("the live dataset matches the backup's manifest".into());
        }
        p.status
            .actions
            .get_or_insert_with(RestoreStatusActions::default)
            .post_ready = vec![a];
        if let Verdict::Refuted(why) = verdict {
            p.fail(now, POST_READY, why);
            return p;
        }
        if verdict == Verdict::Verified {
            let st = &mut p.status;
            st.phase = Some(RestorePhase::Completed);
            st.completion_timestamp = Some(now.clone());
            st.duration = Some(duration::format(Duration::from_secs(secs_between(
                &started, now,
            ))));
            conditions::set(
                &mut st.conditions,
                POST_READY,
                "True",
                "Verified",
                "the live dataset matches the backup's manifest",
                None,
                now,
            );
            p.open_gates = true;
            p.completed = true;
            return p;
        }
        if let Some(f) = &j.failed {
            p.fail(
                now,
                POST_READY,
                format!("verification Job/{} failed: {f}", j.name),
            );
            return p;
        }
        if let Some(s) = j.stuck.as_ref().filter(|s| s.terminal) {
            p.fail(
                now,
                POST_READY,
                format!("verification Job/{}: {}", j.name, s.message),
            );
            return p;
        }
        if over {
            let why = j
                .stuck
                .as_ref()
                .map(|s| s.message.clone())
                .unwrap_or_else(|| {
                    if j.succeeded {
                        format!("the output of Job/{} could not be read", j.name)
                    } else {
                        format!("Job/{} is still running", j.name)
                    }
                });
            p.fail(
                now,
                POST_READY,
                format!(
                    "postReady did not finish within its deadline of {}: {why}",
                    duration::format(limit)
                ),
            );
            return p;
        }
        conditions::set(
            &mut p.status.conditions,
            POST_READY,
            "False",
            "Processing",
            "verifying the live dataset against the backup's manifest",
            None,
            now,
        );
        return p;
    }
    if let Some(s) = input
        .pods
        .iter()
        .filter_map(|pod| pod.stuck.as_ref())
        .find(|s| s.terminal)
    {
        p.fail(now, POST_READY, s.message.clone());
        return p;
    }
    // The verify Job starts once every data pod runs, not once each is ready: it waits in each
    // pod for the server to serve its dataset, and its digest overlaps the AOF the servers
    // write before they may be ready. The Cluster is Running only once they are.
    let running = input.pods.iter().filter(|pod| pod.running).count();
    let want = usize::try_from(input.replicas).unwrap_or(0);
    let all_running = input.workload_exists && running >= want && want > 0;
    // Checked before the verify Job is asked for again: when its create keeps failing, the stage
    // must still end at its deadline.
    if all_running && over {
        p.fail(
            now,
            POST_READY,
            format!(
                "postReady did not finish within its deadline of {}: the verification Job could not be created",
                duration::format(limit)
            ),
        );
        return p;
    }
    if all_running {
        p.create_verify_job = true;
        conditions::set(
            &mut p.status.conditions,
            POST_READY,
            "False",
            "Processing",
            "starting verification of the live dataset",
            None,
            now,
        );
        return p;
    }
    let waiting = input
        .pods
        .iter()
        .find_map(|pod| pod.stuck.as_ref().map(|s| s.message.clone()))
        .unwrap_or_else(|| {
            format!("{running} of {want} database pods have started on the restored data")
        });
    if over {
        p.fail(
            now,
            POST_READY,
            format!(
                "postReady did not finish within its deadline of {}: {waiting}",
                duration::format(limit)
            ),
        );
        return p;
    }
    conditions::set(
        &mut p.status.conditions,
        POST_READY,
        "False",
        "Processing",
        &waiting,
        None,
        now,
    );
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + s).expect("time"))
    }

    fn req(policy: VolumeClaimRestorePolicy) -> ComponentRestore {
        ComponentRestore {
            component: "falkordb".into(),
            backup_name: "b".into(),
            backup_namespace: "demo".into(),
            policy,
            env: vec![],
            prepare_data_deadline: Duration::from_secs(600),
            post_ready_deadline: Duration::from_secs(300),
            deadlines_given: false,
        }
    }

    fn pvc(i: i32, exists: bool) -> PvcObs {
        PvcObs {
            name: format!("data-fdb-falkordb-{i}"),
            exists,
            deleting: false,
        }
    }

    fn job(i: i32, succeeded: bool) -> Option<JobObs> {
        Some(JobObs {
            name: format!("fdb-falkordb-prepare-{i}"),
            succeeded,
            started: Some(at(1)),
            finished: succeeded.then(|| at(5)),
            ..Default::default()
        })
    }

    fn input<'a>(r: &'a ComponentRestore, now: i64) -> Input<'a> {
        Input {
            now: at(now),
            req: r,
            replicas: 2,
            precondition: Ok(()),
            status: RestoreStatus::default(),
            pvcs: vec![pvc(0, false), pvc(1, false)],
            prepare_jobs: vec![None, None],
            workload_exists: false,
            pods: vec![],
            verify_job: None,
        }
    }

    /// Feeds each plan's status into the next step, as the controller does.
    fn step(mut i: Input<'_>, prev: &Plan) -> Plan {
        i.status = prev.status.clone();
        plan(&i)
    }

    fn downloading(i: i32, done: u64) -> Option<JobObs> {
        let mut j = job(i, false)?;
        j.progress = Some(crate::mover_output::Progress {
            stage: "download".into(),
            bytes_done: done,
            bytes_total: 100 << 20,
            bytes_per_second: 10 << 20,
        });
        Some(j)
    }

    #[test]
    fn running_prepare_jobs_show_their_bytes_in_the_actions_and_the_summed_progress() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let first = plan(&input(&r, 0));
        let mut i = input(&r, 10);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![downloading(0, 40 << 20), downloading(1, 60 << 20)];
        let p = step(i, &first);
        let actions = &p.status.actions.as_ref().expect("actions").prepare_data;
        assert_eq!(
            actions[0].message.as_deref(),
            Some(
                "Job/fdb-falkordb-prepare-0: download 40.0 MiB of 100.0 MiB (40%) at 10.0 MiB/s, about 6s left"
            )
        );
        let pr = p.status.progress.clone().expect("progress");
        assert_eq!((pr.bytes_done, pr.bytes_total), (100 << 20, 200 << 20));
        assert_eq!(
            pr.eta_seconds,
            Some(5),
            "100 MiB left at the summed 20 MiB/s"
        );
        // Once the volumes are written, the transfer's progress is gone.
        let mut i = input(&r, 20);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, true)];
        let done = step(i, &p);
        assert_eq!(done.status.progress, None);
    }

    #[test]
    fn progress_alone_is_written_at_most_every_refresh_period_and_outcomes_at_once() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let first = plan(&input(&r, 0));
        let at_bytes = |t: i64, done: u64, prev: &Plan| {
            let mut i = input(&r, t);
            i.pvcs = vec![pvc(0, true), pvc(1, true)];
            i.prepare_jobs = vec![downloading(0, done), downloading(1, done)];
            step(i, prev)
        };
        let stored = at_bytes(10, 1 << 20, &first).status;
        let soon = at_bytes(12, 5 << 20, &first).status;
        assert_ne!(stored, soon);
        assert!(
            !status_write_due(&stored, &soon, &at(12)),
            "2 s after the last write"
        );
        let later = at_bytes(15, 9 << 20, &first).status;
        assert!(
            status_write_due(&stored, &later, &at(15)),
            "5 s after the last write"
        );
        let mut failed = soon.clone();
        failed.phase = Some(RestorePhase::Failed);
        assert!(
            status_write_due(&stored, &failed, &at(12)),
            "an outcome is never held back"
        );
        assert!(
            !status_write_due(&stored, &stored, &at(60)),
            "nothing changed"
        );
    }

    #[test]
    fn a_completed_restore_reports_each_stage_and_a_failed_one_its_stage() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let mut p = plan(&input(&r, 0));
        let st = &mut p.status;
        conditions::set(
            &mut st.conditions,
            PREPARE_DATA,
            "True",
            "Completed",
            "ok",
            None,
            &at(40),
        );
        st.completion_timestamp = Some(at(55));
        assert_eq!(
            stage_durations(st),
            vec![
                ("validation", 0.0),
                ("prepareData", 40.0),
                ("postReady", 15.0)
            ]
        );
        let mut failed = input(&r, 0);
        failed.precondition = Err("Backup demo/b does not exist".into());
        assert_eq!(failed_stage(&plan(&failed).status), "ValidationPassed");
    }

    #[test]
    fn precondition_failure_is_terminal_and_creates_nothing() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let mut i = input(&r, 0);
        i.precondition = Err("Backup demo/b does not exist".into());
        let p = plan(&i);
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        assert_eq!(p.failed.as_deref(), Some("Backup demo/b does not exist"));
        assert!(p.create_pvcs.is_empty() && p.create_prepare_jobs.is_empty());
        assert!(!p.workload_allowed);
        // And it stays failed even if the Backup appears later.
        let mut again = input(&r, 10);
        again.status = p.status.clone();
        let p2 = plan(&again);
        assert_eq!(p2.status.phase, Some(RestorePhase::Failed));
        assert!(p2.create_pvcs.is_empty());
    }

    #[test]
    fn parallel_restore_happy_path_gates_workload_until_verified() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        assert_eq!(p1.create_pvcs, vec![0, 1]);
        assert!(!p1.workload_allowed, "no workload before data");

        let mut i = input(&r, 2);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        let p2 = step(i, &p1);
        assert_eq!(p2.create_prepare_jobs, vec![0, 1]);
        assert!(!p2.workload_allowed);

        let mut i = input(&r, 3);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, false)];
        let p3 = step(i, &p2);
        assert!(!p3.workload_allowed, "one volume is still being written");
        assert!(p3.create_prepare_jobs.is_empty());

        let mut i = input(&r, 10);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, true)];
        let p4 = step(i, &p3);
        assert!(p4.workload_allowed);
        assert!(!p4.open_gates, "gates stay shut until verification");
        assert!(!p4.create_verify_job, "pods are not up yet");

        let mut i = input(&r, 20);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, true)];
        i.workload_exists = true;
        i.pods = vec![
            PodObs {
                name: "fdb-falkordb-0".into(),
                running: true,
                stuck: None,
            },
            PodObs {
                name: "fdb-falkordb-1".into(),
                running: false,
                stuck: None,
            },
        ];
        let waiting = step(i.clone(), &p4);
        assert!(
            !waiting.create_verify_job,
            "one pod's containers do not run yet"
        );
        // Running, not ready: the servers may still be loading or writing their AOF; the verify
        // Job waits in each pod for its server to serve the dataset, so it starts now.
        i.pods[1].running = true;
        let p5 = step(i.clone(), &p4);
        assert!(p5.create_verify_job);
        assert!(!p5.open_gates);
        assert_eq!(p5.status.phase, Some(RestorePhase::Running));

        i.now = at(30);
        // The mover's result line is followed by its own log line, as in a real verify Job.
        i.verify_job = Some(JobObs {
            name: "fdb-falkordb-verify".into(),
            succeeded: true,
            output: Some(concat!(
                r#"{"backupName":"b-1","match":true,"expected":{"databases":{"0":{"keys":3}}},"live":{"databases":{"0":{"keys":3}}},"differences":[]}"#,
                "\n",
                r#"{"timestamp":"2026-01-01T00:00:00Z","level":"INFO","fields":{"message":"live dataset matches"}}"#
            ).into()),
            ..Default::default()
        });
        let p6 = step(i, &p5);
        let v = p6
            .status
            .verification
            .as_ref()
            .expect("the verification is recorded");
        assert!(v.matched);
        assert_eq!(v.expected.keys.get("0"), Some(&3));
        assert!(p6.open_gates && p6.completed);
        assert_eq!(p6.status.phase, Some(RestorePhase::Completed));
        assert_eq!(p6.status.duration.as_deref(), Some("30s"));
        let prep = &p6.status.actions.as_ref().expect("actions").prepare_data;
        assert_eq!(prep.len(), 2);
        assert!(
            prep.iter()
                .all(|a| a.status == RestoreActionStatus::Completed)
        );
    }

    #[test]
    fn serial_restore_writes_one_volume_at_a_time() {
        let r = req(VolumeClaimRestorePolicy::Serial);
        let p1 = plan(&input(&r, 0));
        assert_eq!(p1.create_pvcs, vec![0]);
        let mut i = input(&r, 1);
        i.pvcs = vec![pvc(0, true), pvc(1, false)];
        let p2 = step(i, &p1);
        assert_eq!(p2.create_prepare_jobs, vec![0]);
        assert!(p2.create_pvcs.is_empty());
        let mut i = input(&r, 2);
        i.pvcs = vec![pvc(0, true), pvc(1, false)];
        i.prepare_jobs = vec![job(0, true), None];
        let p3 = step(i, &p2);
        assert_eq!(p3.create_pvcs, vec![1]);
    }

    #[test]
    fn pvc_deleted_under_a_running_job_fails_at_once() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut i = input(&r, 5);
        i.pvcs = vec![
            PvcObs {
                name: "data-fdb-falkordb-0".into(),
                exists: true,
                deleting: true,
            },
            pvc(1, true),
        ];
        i.prepare_jobs = vec![job(0, false), job(1, false)];
        let p = step(i, &p1);
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        let msg = p.failed.expect("failed");
        assert!(
            msg.contains("data-fdb-falkordb-0") && msg.contains("being deleted"),
            "{msg}"
        );
        assert!(!p.workload_allowed);
    }

    #[test]
    fn restored_volume_deleted_before_the_workload_fails() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut i = input(&r, 5);
        // Volume 0 was written, then deleted before volume 1 finished: without this check the
        // StatefulSet would provision an empty volume in its place.
        i.pvcs = vec![
            PvcObs {
                name: "data-fdb-falkordb-0".into(),
                exists: false,
                deleting: false,
            },
            pvc(1, true),
        ];
        i.prepare_jobs = vec![job(0, true), job(1, false)];
        let p = step(i, &p1);
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        let msg = p.failed.expect("failed");
        assert!(
            msg.contains("data-fdb-falkordb-0") && msg.contains("before the database started"),
            "{msg}"
        );
    }

    #[test]
    fn stuck_job_fails_at_the_deadline_quoting_the_scheduler() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let stuck = Stuck {
            terminal: false,
            message: "pod x cannot be scheduled: 0/1 nodes are available".into(),
            claims: Vec::new(),
        };
        let mut j = job(0, false);
        if let Some(j) = j.as_mut() {
            j.stuck = Some(stuck);
        }
        let mut i = input(&r, 100);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![j.clone(), job(1, true)];
        let p2 = step(i.clone(), &p1);
        assert_eq!(
            p2.status.phase,
            Some(RestorePhase::Running),
            "before the deadline it waits"
        );
        i.now = at(601);
        let p3 = step(i, &p2);
        assert_eq!(p3.status.phase, Some(RestorePhase::Failed));
        let msg = p3.failed.expect("failed");
        assert!(
            msg.contains("within its deadline of 10m0s") && msg.contains("0/1 nodes"),
            "{msg}"
        );
    }

    #[test]
    fn a_failed_restore_suspends_its_unfinished_jobs_and_keeps_the_ended_ones() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut failed = job(0, false);
        if let Some(j) = failed.as_mut() {
            j.failed = Some("BackoffLimitExceeded: checksum mismatch".into());
        }
        let mut i = input(&r, 100);
        i.replicas = 3;
        i.pvcs = vec![pvc(0, true), pvc(1, true), pvc(2, true)];
        i.prepare_jobs = vec![failed, job(1, false), job(2, true)];
        let running = step(i.clone(), &p1);
        assert_eq!(running.status.phase, Some(RestorePhase::Failed));
        assert_eq!(
            jobs_to_suspend(&i, &running, &[]),
            vec!["fdb-falkordb-prepare-1".to_owned()],
            "the Job still running is stopped; the failed and the finished ones keep their pods"
        );
        // On a later pass (the operator may have stopped between the status and the suspension)
        // the terminal phase still asks for it, and a Job created by the failing pass is included.
        let later = step(i.clone(), &running);
        assert_eq!(
            jobs_to_suspend(&i, &later, &["fdb-falkordb-prepare-3".to_owned()]),
            vec![
                "fdb-falkordb-prepare-1".to_owned(),
                "fdb-falkordb-prepare-3".to_owned()
            ]
        );
        // Once suspended, it is not asked again.
        if let Some(j) = i.prepare_jobs[1].as_mut() {
            j.suspended = true;
        }
        assert!(jobs_to_suspend(&i, &later, &[]).is_empty());
        // A restore that has not failed stops nothing.
        let mut ok = input(&r, 100);
        ok.pvcs = vec![pvc(0, true), pvc(1, true)];
        ok.prepare_jobs = vec![job(0, false), job(1, false)];
        let fine = step(ok.clone(), &p1);
        assert_eq!(fine.status.phase, Some(RestorePhase::Running));
        assert!(jobs_to_suspend(&ok, &fine, &[]).is_empty());
    }

    #[test]
    fn failed_job_and_failed_verification_are_terminal() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut j = job(0, false);
        if let Some(j) = j.as_mut() {
            j.failed = Some("BackoffLimitExceeded: checksum mismatch".into());
        }
        let mut i = input(&r, 5);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![j, job(1, true)];
        let p = step(i, &p1);
        assert!(
            p.failed
                .as_deref()
                .unwrap_or_default()
                .contains("checksum mismatch")
        );

        let mut i = verifying(&r);
        i.verify_job = Some(JobObs {
            name: "v".into(),
            failed: Some("mismatch: db0 expected 10 keys, found 0".into()),
            ..Default::default()
        });
        let p = step(i, &p1);
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        assert!(!p.open_gates);
        assert!(
            p.failed
                .as_deref()
                .unwrap_or_default()
                .contains("expected 10 keys")
        );
    }

    #[test]
    fn a_refused_create_ends_the_restore_with_the_servers_reason() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let mut p = plan(&input(&r, 0));
        assert!(!p.create_pvcs.is_empty(), "the first pass creates the PVCs");
        p.refused(
            &at(3),
            Stage::PrepareData,
            "PersistentVolumeClaim ns/data-fdb-falkordb-0",
            "exceeded quota: pvcs, requested: persistentvolumeclaims=1, used: 0, limited: 0",
        );
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        let msg = p.failed.clone().expect("failed");
        assert!(
            msg.contains("refused to create PersistentVolumeClaim ns/data-fdb-falkordb-0")
                && msg.contains("exceeded quota"),
            "{msg}"
        );
        assert!(p.create_pvcs.is_empty() && p.create_prepare_jobs.is_empty());
        assert!(refusal_is_final(403) && refusal_is_final(422));
        assert!(!refusal_is_final(409) && !refusal_is_final(429) && !refusal_is_final(500));
    }

    /// The pass after prepareData finished and the workload exists: postReady's turn.
    fn verifying(r: &ComponentRestore) -> Input<'_> {
        let mut i = input(r, 20);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, true)];
        i.workload_exists = true;
        i
    }

    /// A verify Job that exited 0, with `output` as its log.
    fn verified_by(output: Option<&str>) -> Plan {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut i = verifying(&r);
        i.verify_job = Some(JobObs {
            name: "v".into(),
            succeeded: true,
            output: output.map(str::to_owned),
            ..Default::default()
        });
        step(i, &p1)
    }

    #[test]
    fn a_verify_job_that_succeeded_without_a_result_line_fails_the_restore() {
        let p = verified_by(Some("mover: verifying\nsome other line\n"));
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        assert!(!p.open_gates && !p.completed);
        let msg = p.failed.expect("failed");
        assert!(msg.contains("printed no verification result"), "{msg}");
    }

    #[test]
    fn a_verify_job_that_succeeded_with_a_mismatch_fails_the_restore() {
        let line = r#"{"match":false,"expected":{"databases":{"0":{"keys":10}}},"live":{"databases":{"0":{"keys":9}}},"differences":["db0: 10 keys expected, 9 found"]}"#;
        let p = verified_by(Some(line));
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        assert!(!p.open_gates && !p.completed);
        let msg = p.failed.expect("failed");
        assert!(
            msg.contains("does not match") && msg.contains("9 found"),
            "{msg}"
        );
        let v = p.status.verification.expect("recorded");
        assert!(!v.matched && v.observed.is_some());
    }

    #[test]
    fn an_unread_verify_log_keeps_the_gates_shut_until_it_is_read() {
        let p = verified_by(None);
        assert_ne!(p.status.phase, Some(RestorePhase::Completed));
        assert!(!p.open_gates && !p.completed && p.failed.is_none());
    }

    #[test]
    fn post_ready_deadline_runs_from_the_end_of_prepare_data() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut i = input(&r, 500);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, true)];
        let p2 = step(i.clone(), &p1);
        assert!(p2.workload_allowed);
        i.workload_exists = true;
        i.pods = vec![PodObs {
            name: "fdb-falkordb-0".into(),
            running: false,
            stuck: None,
        }];
        i.now = at(700);
        let p3 = step(i.clone(), &p2);
        assert_eq!(p3.status.phase, Some(RestorePhase::Running));
        i.now = at(801);
        let p4 = step(i, &p3);
        assert_eq!(p4.status.phase, Some(RestorePhase::Failed));
        assert!(
            p4.failed
                .as_deref()
                .unwrap_or_default()
                .contains("0 of 2 database pods"),
            "{:?}",
            p4.failed
        );
    }

    /// Found by the simulation (seed 847 of `crates/lifeboat-sim`): with every pod up, the plan
    /// asked for the verify Job again on every pass before looking at the deadline, so a verify
    /// Job that could never be created (its Backup deleted) held the restore Running forever.
    #[test]
    fn a_verify_job_that_cannot_be_created_does_not_hold_post_ready_past_its_deadline() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let p1 = plan(&input(&r, 0));
        let mut i = input(&r, 500);
        i.pvcs = vec![pvc(0, true), pvc(1, true)];
        i.prepare_jobs = vec![job(0, true), job(1, true)];
        let p2 = step(i.clone(), &p1);
        i.workload_exists = true;
        i.pods = (0..2)
            .map(|n| PodObs {
                name: format!("fdb-falkordb-{n}"),
                running: true,
                stuck: None,
            })
            .collect();
        i.now = at(700);
        let p3 = step(i.clone(), &p2);
        assert!(
            p3.create_verify_job,
            "within the deadline the Job is asked for"
        );
        i.now = at(801);
        let p4 = step(i, &p3);
        assert_eq!(p4.status.phase, Some(RestorePhase::Failed));
        assert!(!p4.create_verify_job);
        assert!(
            p4.failed
                .as_deref()
                .unwrap_or_default()
                .contains("could not be created"),
            "{:?}",
            p4.failed
        );
    }

    #[test]
    fn a_lost_backup_ends_the_stage_that_needed_it() {
        let r = req(VolumeClaimRestorePolicy::Parallel);
        let mut p = plan(&input(&r, 0));
        assert!(!p.create_pvcs.is_empty() || !p.create_prepare_jobs.is_empty());
        p.lost_source(
            &at(1),
            "Backup demo/b was deleted during the restore".into(),
        );
        assert_eq!(p.status.phase, Some(RestorePhase::Failed));
        assert!(p.create_pvcs.is_empty() && p.create_prepare_jobs.is_empty());
        assert!(
            p.status.conditions.iter().any(
                |c| c.type_ == PREPARE_DATA && c.message.contains("deleted during the restore")
            )
        );
    }

    #[test]
    fn the_done_mark_is_retried_until_written_whatever_pass_completed_the_restore() {
        let completed = RestoreStatus {
            phase: Some(RestorePhase::Completed),
            ..Default::default()
        };
        // The operator stopped right after writing Completed: the next pass still marks.
        assert!(should_mark_done(&completed, false));
        assert!(!should_mark_done(&completed, true), "marked once is enough");
        let running = RestoreStatus {
            phase: Some(RestorePhase::Running),
            ..Default::default()
        };
        assert!(!should_mark_done(&running, false));
        let failed = RestoreStatus {
            phase: Some(RestorePhase::Failed),
            ..Default::default()
        };
        assert!(!should_mark_done(&failed, false));
    }
}
