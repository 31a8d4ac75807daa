//! Restore drills: a Completed Backup that asks for one (annotation `lifeboat.io/drill: "true"`,
//! set by a user or by its schedule) is restored by a Job into a private scratch volume, loaded
//! into a private server with the engine's modules, and compared with the Backup's fingerprint
//! and content digests by `lifeboat-mover drill`, the check a real restore's verify step makes.
//! The Backup then carries `Verified`: `True` with the time, or `False` with the reason.
//!
//! observe (the Job and its result line) → judge (pure, [`judge`]) → status and event.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, EnvVar, Pod, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::BackupRepoPhase;
use lifeboat_api::{Backup, BackupRepo, conditions, labels};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::mover_output::{self, VerifyLine};
use crate::repo::access::RepoAccess;
use crate::restore::{confirm, diagnose};
use crate::{kubeapi, naming};

/// The Backup condition a drill sets.
pub const VERIFIED: &str = "Verified";
const SCRATCH_DIR: &str = "/scratch";
/// Seconds a finished drill Job is kept, for its logs.
const DRILL_JOB_TTL: i32 = 3600;

/// Whether the Backup asks for a drill.
pub fn asked(b: &Backup) -> bool {
    b.annotations().get(labels::DRILL).map(String::as_str) == Some("true")
}

/// The Backup's `Verified` condition, once a drill ended.
pub fn verified(b: &Backup) -> Option<&Condition> {
    b.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == VERIFIED)
}

/// When the Backup was last proven restorable.
pub fn verified_at(b: &Backup) -> Option<Timestamp> {
    verified(b)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0)
}

/// What a drill Job says.
#[derive(Clone, Debug, PartialEq)]
pub enum Judgement {
    Running,
    Passed(String),
    /// `(reason, message)`.
    Failed(&'static str, String),
}

/// What the drill Job's state and output mean. `line` is the mover's result line, `failed` the
/// Job's failure (its condition and the pod's termination message), `stuck` a pod that cannot
/// run (unschedulable, image absent).
pub fn judge(
    job: &str,
    succeeded: bool,
    failed: Option<String>,
    stuck: Option<String>,
    line: Option<&VerifyLine>,
) -> Judgement {
    if succeeded {
        return match line {
            Some(l) if l.matches => Judgement::Passed(format!(
                "restored into a scratch server by Job/{job}: {} keys and {} graphs match the backup's fingerprint and content digests",
                l.live
                    .databases
                    .values()
                    .fold(0u64, |n, d| n.saturating_add(d.keys)),
                l.live
                    .databases
                    .values()
                    .map(|d| d.graphs.len())
                    .sum::<usize>()
            )),
            Some(l) => Judgement::Failed(
                "DrillMismatch",
                format!(
                    "Job/{job} restored the backup, but it differs from its manifest: {}",
                    l.differences.join("; ")
                ),
            ),
            None => Judgement::Failed(
                "DrillNoResult",
                format!("Job/{job} succeeded but printed no result line"),
            ),
        };
    }
    if let Some(why) = failed {
        return Judgement::Failed("DrillFailed", format!("Job/{job} failed: {why}"));
    }
    if let Some(why) = stuck {
        return Judgement::Failed("DrillFailed", format!("Job/{job}: {why}"));
    }
    Judgement::Running
}

/// The drill Job: the mover restores the Backup's data (the repo name `data`) into an emptyDir
/// and loads it into a private server. Owned by the Backup.
pub fn drill_job(
    b: &Backup,
    data: &str,
    access: &RepoAccess,
    cfg: &crate::context::Config,
    modules: &[String],
    deadline: Duration,
) -> Job {
    let bytes = b
        .status
        .as_ref()
        .and_then(|s| s.dataset.as_ref())
        .map_or(0, |d| d.data_bytes.max(0));
    let env = |n: &str, v: String| EnvVar {
        name: n.into(),
        value: Some(v),
        ..Default::default()
    };
    let mut envs = access.env.clone();
    envs.extend([
        env("LIFEBOAT_BACKUP_NAME", data.to_owned()),
        env("LIFEBOAT_DRILL_DIR", SCRATCH_DIR.into()),
        env("LIFEBOAT_SCRATCH_MODULES", modules.join(",")),
        env("LIFEBOAT_LOG_FORMAT", "json".into()),
    ]);
    let mut mounts = vec![VolumeMount {
        name: "scratch".into(),
        mount_path: SCRATCH_DIR.into(),
        ..Default::default()
    }];
    mounts.extend(access.mounts.iter().cloned());
    // The restored files, and room for the server's own: twice the data, and never less than
    // 256 MiB.
    let room = (bytes.saturating_mul(2) / (1024 * 1024) + 1).max(256);
    let mut volumes = vec![Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(format!("{room}Mi"))),
            ..Default::default()
        }),
        ..Default::default()
    }];
    volumes.extend(access.volumes.iter().cloned());
    super::job::build(
        b,
        super::job::BackupJob {
            name: naming::drill_job(&b.name_any()),
            subcommand: "drill",
            env: envs,
            mounts,
            volumes,
            resources: crate::job_resources::for_drill(&cfg.job_resources, bytes),
            backoff_limit: 1,
            deadline_seconds: i64::try_from(deadline.as_secs()).unwrap_or(i64::MAX),
            // The outcome lives on in the Backup's condition; the Job, its logs and its scratch
            // volume go an hour after it ended.
            ttl_after_finished: Some(DRILL_JOB_TTL),
            extra_labels: BTreeMap::from([("lifeboat.io/drill".to_owned(), b.name_any())]),
        },
        cfg,
    )
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// One step of a Backup's drill. `None` when there is nothing to do (none asked, or it ended
/// before this reconcile), so the caller goes on with retention; `Some` while the drill runs,
/// which also keeps the Backup from retention until it has ended, and once when it has just
/// ended.
pub async fn step(b: &Backup, ctx: &Context) -> Result<Option<Action>> {
    if !asked(b) || verified(b).is_some() {
        return Ok(None);
    }
    let ns = b.namespace().unwrap_or_default();
    let name = b.name_any();
    let job_name = naming::drill_job(&name);
    let uid = b.uid().unwrap_or_default();
    let existing = kubeapi::get_opt::<Job>(&ctx.client, &ns, &job_name).await?;
    let job = match existing {
        Some(j) if crate::ownership::controlled_by(&j.metadata, &uid) => j,
        Some(_) => {
            let msg = format!(
                "Job {ns}/{job_name}, the drill's name, belongs to another object; the drill cannot run"
            );
            return record(ctx, b, Judgement::Failed("DrillFailed", msg), None).await;
        }
        None => {
            let Some(repo_name) = b.status.as_ref().and_then(|s| s.backup_repo_name.clone()) else {
                let msg = format!("Backup {ns}/{name} records no BackupRepo to drill from");
                return record(ctx, b, Judgement::Failed("DrillFailed", msg), None).await;
            };
            let repo = get_repo(ctx, &repo_name).await?;
            let repo = match repo {
                Some(r)
                    if r.status.as_ref().and_then(|s| s.phase) == Some(BackupRepoPhase::Ready) =>
                {
                    r
                }
                Some(r) => {
                    let msg = format!(
                        "BackupRepo {repo_name} is not Ready: {}",
                        r.status.and_then(|s| s.message).unwrap_or_default()
                    );
                    return record(ctx, b, Judgement::Failed("DrillFailed", msg), None).await;
                }
                None => {
                    let msg =
                        format!("BackupRepo {repo_name} of Backup {ns}/{name} does not exist");
                    return record(ctx, b, Judgement::Failed("DrillFailed", msg), None).await;
                }
            };
            let access =
                crate::repo::access::access(&repo, &ns).map_err(|e| Error::InvalidObject {
                    object: format!("BackupRepo {repo_name}"),
                    message: e.to_string(),
                })?;
            if let Err(msg) = crate::repo::namespaces::allows(&repo, &ns) {
                return record(ctx, b, Judgement::Failed("DrillFailed", msg), None).await;
            }
            crate::repo::controller::ensure_namespace_access(ctx, &repo, &ns).await?;
            let engine = b
                .status
                .as_ref()
                .and_then(|s| s.dataset.as_ref())
                .map(|d| d.engine.clone())
                .unwrap_or_default();
            let modules = crate::engine::lookup(&engine)
                .map(|e| e.modules())
                .unwrap_or_default();
            let job = drill_job(
                b,
                &super::controller::repo_name(b),
                &access,
                &ctx.config,
                &modules,
                ctx.config.backup_deadline,
            );
            if kubeapi::create_if_absent(&ctx.client, &job).await? {
                ctx.event(
                    b,
                    EventType::Normal,
                    "DrillStarted",
                    "Drill",
                    format!("Job/{job_name} restores the backup into a scratch server to prove it restorable"),
                )
                .await;
            }
            return Ok(Some(Action::requeue(Duration::from_secs(5))));
        }
    };
    let js = job.status.clone().unwrap_or_default();
    let pods: Vec<Pod> = kubeapi::list(&ctx.client, &ns, &format!("job-name={job_name}")).await?;
    let latest = pods.iter().max_by_key(|p| p.creation_timestamp());
    let succeeded = js.succeeded.unwrap_or(0) > 0;
    let line = if succeeded {
        match latest {
            Some(p) => kubeapi::job_output(&ctx.client, &ns, p)
                .await
                .and_then(|logs| mover_output::last::<VerifyLine>(&logs)),
            None => None,
        }
    } else {
        None
    };
    let failed = js
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
                kubeapi::termination_message(latest).trim()
            )
        });
    let stuck = confirm::confirmed(
        &ctx.client,
        &ns,
        latest.and_then(|p| diagnose::diagnose(p, &[])),
    )
    .await?
    .filter(|s| s.terminal)
    .map(|s| s.message);
    match judge(&job_name, succeeded, failed, stuck, line.as_ref()) {
        Judgement::Running => Ok(Some(Action::requeue(Duration::from_secs(5)))),
        done => {
            let started = job.status.as_ref().and_then(|s| s.start_time.as_ref());
            record(ctx, b, done, started).await
        }
    }
}

async fn get_repo(ctx: &Context, name: &str) -> Result<Option<BackupRepo>> {
    Api::<BackupRepo>::all(ctx.client.clone())
        .get_opt(name)
        .await
        .map_err(Error::kube("reading", format!("BackupRepo {name}")))
}

/// Writes the drill's outcome as the `Verified` condition, with an event and the metrics.
async fn record(
    ctx: &Context,
    b: &Backup,
    j: Judgement,
    started: Option<&Time>,
) -> Result<Option<Action>> {
    let ns = b.namespace().unwrap_or_default();
    // The watch may hand the same Backup again before it shows the condition just written: read
    // it afresh, so one drill is one condition, one event and one count.
    // Either way the caller stops here: its copy of the Backup is older than this status, and a
    // retention pass writing from it would drop the condition again. The next reconcile reads
    // the Backup as it now is.
    let again = Ok(Some(Action::requeue(Duration::from_secs(1))));
    let Some(fresh) = kubeapi::get_opt::<Backup>(&ctx.client, &ns, &b.name_any()).await? else {
        return Ok(None);
    };
    if verified(&fresh).is_some() || fresh.uid() != b.uid() {
        return again;
    }
    let b = &fresh;
    let mut st = b.status.clone().unwrap_or_default();
    let cluster = b
        .labels()
        .get(labels::INSTANCE)
        .cloned()
        .unwrap_or_default();
    let (status, reason, message) = match &j {
        Judgement::Passed(m) => ("True", "DrillPassed", m.clone()),
        Judgement::Failed(r, m) => ("False", *r, m.clone()),
        Judgement::Running => return Ok(Some(Action::requeue(Duration::from_secs(5)))),
    };
    let at = now();
    conditions::set(
        &mut st.conditions,
        VERIFIED,
        status,
        reason,
        &message,
        b.meta().generation,
        &at,
    );
    super::controller::write_status(ctx, b, &st).await?;
    if let Some(start) = started {
        ctx.metrics
            .drill_duration
            .observe(at.0.duration_since(start.0).as_secs_f64().max(0.0));
        let bytes = st.dataset.as_ref().map_or(0, |d| d.data_bytes.max(0));
        #[allow(clippy::cast_precision_loss)]
        ctx.metrics.drill_bytes.observe(bytes as f64);
    }
    if status == "True" {
        ctx.metrics.drill(&ns, "passed");
        if !cluster.is_empty() {
            ctx.metrics.backup_verified(&ns, &cluster, at.0.as_second());
        }
        ctx.event(b, EventType::Normal, reason, "Drill", message)
            .await;
    } else {
        ctx.metrics.drill(&ns, "failed");
        ctx.event(b, EventType::Warning, "DrillFailed", "Drill", message)
            .await;
    }
    again
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mover_output::{DatabaseFingerprint, Fingerprint};

    fn line(matches: bool) -> VerifyLine {
        let mut fp = Fingerprint::default();
        fp.databases.insert(
            0,
            DatabaseFingerprint {
                keys: 3,
                ..Default::default()
            },
        );
        VerifyLine {
            server: None,
            matches,
            expected: fp.clone(),
            live: fp,
            differences: if matches {
                vec![]
            } else {
                vec![
                    "db 0: content digest of the keys without a TTL is a in backup, b restored"
                        .into(),
                ]
            },
        }
    }

    #[test]
    fn key_counts_that_overflow_when_added_do_not_panic_the_judgement() {
        let mut l = line(true);
        let huge = DatabaseFingerprint {
            keys: u64::MAX,
            ..Default::default()
        };
        l.live.databases.insert(0, huge.clone());
        l.live.databases.insert(1, huge);
        assert!(matches!(
            judge("j", true, None, None, Some(&l)),
            Judgement::Passed(m) if m.contains(&u64::MAX.to_string())
        ));
    }

    #[test]
    fn a_drill_passes_only_on_a_result_line_that_matches() {
        assert!(matches!(
            judge("j", true, None, None, Some(&line(true))),
            Judgement::Passed(m) if m.contains("3 keys")
        ));
        assert!(matches!(
            judge("j", true, None, None, Some(&line(false))),
            Judgement::Failed("DrillMismatch", m) if m.contains("content digest")
        ));
        assert!(matches!(
            judge("j", true, None, None, None),
            Judgement::Failed("DrillNoResult", _)
        ));
    }

    #[test]
    fn a_failed_or_stuck_job_fails_the_drill_saying_why_and_a_running_one_waits() {
        assert!(matches!(
            judge("j", false, Some("BackoffLimitExceeded: object \"dump.rdb.zst\" checksum mismatch".into()), None, None),
            Judgement::Failed("DrillFailed", m) if m.contains("dump.rdb.zst")
        ));
        assert!(matches!(
            judge("j", false, None, Some("image absent".into()), None),
            Judgement::Failed("DrillFailed", m) if m.contains("image absent")
        ));
        assert_eq!(judge("j", false, None, None, None), Judgement::Running);
    }

    #[test]
    fn the_drill_job_is_private_bounded_and_restricted() {
        let mut b = Backup::new("b", Default::default());
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let cfg = crate::context::Config::default();
        let job = drill_job(
            &b,
            "b-uid1",
            &RepoAccess::default(),
            &cfg,
            &["/usr/local/lib/falkordb.so".into()],
            Duration::from_secs(600),
        );
        assert_eq!(job.name_any(), "b-drill");
        assert!(crate::ownership::controlled_by(&job.metadata, "uid-1"));
        let spec = job.spec.as_ref().expect("spec");
        assert_eq!(spec.active_deadline_seconds, Some(600));
        assert_eq!(spec.ttl_seconds_after_finished, Some(DRILL_JOB_TTL));
        let pod = spec.template.spec.as_ref().expect("pod");
        assert!(crate::security::restricted_violations(pod).is_empty());
        let c = &pod.containers[0];
        let env: BTreeMap<_, _> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            env["LIFEBOAT_SCRATCH_MODULES"],
            "/usr/local/lib/falkordb.so"
        );
        // A user's env can never redirect the drill.
        for name in env.keys() {
            assert!(
                crate::mover_env::is_reserved(name),
                "{name} is not reserved"
            );
        }
        assert_eq!(env["LIFEBOAT_BACKUP_NAME"], "b-uid1");
        assert!(
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .is_some_and(|l| l.contains_key("memory")),
            "the drill Job is bounded"
        );
        // No port, no Service: nothing reaches its scratch server.
        assert!(c.ports.is_none());
    }
}
