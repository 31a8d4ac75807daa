//! The BackupSchedule controller: observe the schedule, its policy and the Cluster's Backups;
//! plan each schedule ([`super::plan`]); create the Backup of a due run, or record it missed;
//! write the status; wake again at the next scheduled time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{
    BackupPhase, BackupSchedulePhase, BackupScheduleStatus, ScheduleStatus,
};
use lifeboat_api::{
    Backup, BackupPolicy, BackupSchedule, BackupSpec, Cluster, ClusterPhase, labels,
};
use tracing::Instrument;

use super::cron::Schedule;
use super::plan::{self, Input, Run, Taken};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::telemetry;
use crate::{kubeapi, naming};

const CONTROLLER: &str = "backupschedule";

/// How soon a run that holds for another Backup looks again.
const HOLD_RECHECK: Duration = Duration::from_secs(5);
/// The longest sleep between two looks, whatever the next time: a clock that jumped, or a
/// watch event lost, costs no more than this.
const MAX_SLEEP: Duration = Duration::from_secs(300);

/// One decision at a time across the operator: two schedules of one Cluster must not both see
/// it idle and both start a Backup. Deciding is a list and a create, so holding it is short.
static DECIDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs the BackupSchedule controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<DeserializeGuard<BackupSchedule>> = Api::all(ctx.client.clone());
    let backups: Api<Backup> = Api::all(ctx.client.clone());
    Controller::new(api, crate::observed::watch_config())
        // A scheduled Backup that ends changes its schedule's status.
        .watches(
            backups,
            crate::observed::watch_config().labels(labels::BACKUP_SCHEDULE),
            |b: Backup| {
                let ns = b.namespace()?;
                b.labels()
                    .get(labels::BACKUP_SCHEDULE)
                    .map(|s| ObjectRef::new(s).within(&ns))
            },
        )
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            |obj, ctx| async move {
                match &obj.0 {
                    Ok(s) => {
                        reconcile(s, &ctx)
                            .instrument(telemetry::reconcile_span(CONTROLLER, s.namespace().as_deref(), &s.name_any()))
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(name = ?e.metadata.name, error = %e.error, "skipping a BackupSchedule that does not deserialize");
                        Ok(Action::await_change())
                    }
                }
            },
            |_, err: &Error, ctx: Arc<Context>| {
                ctx.metrics.failure(CONTROLLER, err.metric_label());
                tracing::warn!(error = %err, "backup schedule reconcile failed");
                Action::requeue(Duration::from_secs(10))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// A schedule of the object, parsed, or why it cannot run.
struct Entry {
    name: String,
    index: usize,
    parsed: std::result::Result<Schedule, String>,
}

async fn reconcile(bs: &BackupSchedule, ctx: &Context) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    if bs.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = bs.name_any();
    let ns = bs.namespace().unwrap_or_default();
    let uid = bs.uid().unwrap_or_default();
    let prev = bs.status.clone().unwrap_or_default();
    let mut st = BackupScheduleStatus {
        phase: Some(BackupSchedulePhase::Available),
        observed_generation: bs.meta().generation,
        failure_reason: None,
        schedules: BTreeMap::new(),
    };
    // An edited spec starts every schedule afresh from now: a cursor kept from another
    // expression would count its times as missed.
    let edited = prev.observed_generation != bs.meta().generation;

    let policy_name = &bs.spec.backup_policy_name;
    let policy = kubeapi::get_opt::<BackupPolicy>(&ctx.client, &ns, policy_name).await?;
    let mut problems = Vec::new();
    if policy.is_none() {
        problems.push(format!(
            "spec.backupPolicyName: BackupPolicy {ns}/{policy_name} does not exist"
        ));
    }
    let entries: Vec<Entry> = bs
        .spec
        .schedules
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let sname = s.schedule_name().to_owned();
            let parsed = Schedule::parse(&s.cron_expression)
                .map_err(|e| {
                    format!(
                        "spec.schedules[{index}] ({sname}): cronExpression {:?} is invalid: {e}",
                        s.cron_expression
                    )
                })
                .and_then(|p| match &policy {
                    Some(pol)
                        if !pol
                            .spec
                            .backup_methods
                            .iter()
                            .any(|m| m.name == s.backup_method) =>
                    {
                        Err(format!(
                            "spec.schedules[{index}] ({sname}): BackupPolicy {ns}/{policy_name} has no method {:?}",
                            s.backup_method
                        ))
                    }
                    _ => Ok(p),
                });
            Entry {
                name: sname,
                index,
                parsed,
            }
        })
        .collect();
    problems.extend(
        entries
            .iter()
            .filter_map(|e| e.parsed.as_ref().err().cloned()),
    );
    if !problems.is_empty() {
        let reason = format!("BackupSchedule {ns}/{name}: {}", problems.join("; "));
        if prev.failure_reason.as_deref() != Some(reason.as_str()) {
            ctx.event(
                bs,
                EventType::Warning,
                "ScheduleInvalid",
                "Schedule",
                reason.clone(),
            )
            .await;
        }
        st.phase = Some(BackupSchedulePhase::Failed);
        st.failure_reason = Some(reason);
    }

    let (cluster, _) = policy
        .as_ref()
        .map(crate::backup::policy::target_of)
        .unwrap_or_default();
    let prefix = if cluster.is_empty() {
        name.clone()
    } else {
        cluster.clone()
    };
    // A Cluster that is not Running (still created, restored, or Failed) has no pod a Backup
    // could take: a due run holds until it runs, rather than failing at once.
    let not_running = if cluster.is_empty() {
        None
    } else {
        match kubeapi::get_opt::<Cluster>(&ctx.client, &ns, &cluster).await? {
            None => Some(format!("Cluster {ns}/{cluster} (it does not exist)")),
            Some(c) => match c.status.as_ref().and_then(|s| s.phase) {
                Some(ClusterPhase::Running) => None,
                p => Some(format!(
                    "Cluster {ns}/{cluster} ({}, not Running)",
                    p.map_or_else(|| "no phase yet".to_owned(), |p| format!("{p:?}"))
                )),
            },
        }
    };
    let now = Timestamp::now();
    let mut sleep = MAX_SLEEP;
    let mut report = Vec::new();
    {
        let _deciding = DECIDING.lock().await;
        let mut all: Vec<Backup> = kubeapi::list(&ctx.client, &ns, "").await?;
        for entry in &entries {
            let spec = &bs.spec.schedules[entry.index];
            let previous = prev.schedules.get(&entry.name).cloned().unwrap_or_default();
            let schedule = match &entry.parsed {
                Ok(s) => s,
                Err(why) => {
                    st.schedules.insert(
                        entry.name.clone(),
                        ScheduleStatus {
                            phase: Some(
                                lifeboat_api::dataprotection::v1alpha1::SchedulePhase::Failed,
                            ),
                            failure_reason: Some(why.clone()),
                            next_schedule_time: None,
                            message: None,
                            ..previous
                        },
                    );
                    continue;
                }
            };
            let Some(policy) = &policy else { continue };
            // Planned in a block of its own: the view of the Backups it borrows is added to below.
            let mut run = {
                let slot_name = |t: Timestamp| naming::scheduled_backup(&prefix, &entry.name, t);
                let busy = |t: Timestamp| {
                    not_running
                        .clone()
                        .or_else(|| busy_with(&all, &cluster, policy_name, &slot_name(t)))
                };
                let input = Input {
                    now,
                    schedule,
                    enabled: spec.is_enabled(),
                    deadline: bs
                        .spec
                        .starting_deadline_minutes
                        .map(|m| Duration::from_secs(u64::try_from(m).unwrap_or(0) * 60)),
                    next: if edited {
                        None
                    } else {
                        previous.next_schedule_time.as_ref().map(|t| t.0)
                    },
                    busy: &busy,
                };
                plan::plan(&input)
            };
            let mut created = None;
            if let Run::Start { time, missed, next } = &run {
                let mut backup = scheduled(bs, policy, entry, &prefix, *time);
                if let Some(d) = &spec.drill {
                    let interval = d
                        .min_interval
                        .as_deref()
                        .and_then(|p| crate::backup::retention::parse_period(p).ok());
                    if plan::drill_due(d.every, interval, &taken_by(&all, &uid, &entry.name), *time)
                    {
                        backup
                            .annotations_mut()
                            .insert(labels::DRILL.to_owned(), "true".to_owned());
                    }
                }
                let bname = backup.name_any();
                match start(ctx, &backup, &uid, *time).await? {
                    Started::Created(b) => {
                        ctx.event(
                            bs,
                            EventType::Normal,
                            "ScheduledBackup",
                            "Schedule",
                            format!(
                                "schedule {}: created Backup {ns}/{bname} for the run due at {time}",
                                entry.name
                            ),
                        )
                        .await;
                        ctx.metrics.schedule_run(&ns, &name, "started");
                        all.push(*b);
                        created = Some(bname);
                    }
                    Started::Found => created = Some(bname),
                    Started::Foreign(why) => {
                        let mut times = missed.clone();
                        times.push(*time);
                        run = Run::Miss {
                            times,
                            why,
                            next: *next,
                        };
                    }
                }
            }
            let missed = match &run {
                Run::Start { missed, .. } if !missed.is_empty() => Some((
                    missed.clone(),
                    "a later scheduled time came before it could start".to_owned(),
                )),
                Run::Miss { times, why, .. } => Some((times.clone(), why.clone())),
                _ => None,
            };
            if let Some((times, why)) = missed {
                let n = times.len();
                let last = times.last().map(|t| t.to_string()).unwrap_or_default();
                ctx.event(
                    bs,
                    EventType::Warning,
                    "ScheduleMissed",
                    "Schedule",
                    format!(
                        "schedule {}: {n} run(s) missed, the last due at {last}: {why}",
                        entry.name
                    ),
                )
                .await;
                for _ in 0..n {
                    ctx.metrics.schedule_run(&ns, &name, "missed");
                }
            }
            let mut sst = plan::status_after(&run, &previous, created.as_deref());
            let taken = taken_by(&all, &uid, &entry.name);
            plan::outcome(&mut sst, &taken);
            sleep = sleep.min(match &run {
                Run::Hold { .. } => HOLD_RECHECK,
                Run::Disabled => MAX_SLEEP,
                _ => until(now, sst.next_schedule_time.as_ref().map(|t| t.0)),
            });
            if let Some(interval) = sst
                .next_schedule_time
                .as_ref()
                .and_then(|n| Some(schedule.next_after(n.0)?.duration_since(n.0)))
            {
                report.push((entry.name.clone(), interval.as_secs().unsigned_abs()));
            }
            st.schedules.insert(entry.name.clone(), sst);
        }
    }
    if !cluster.is_empty() {
        // A Cluster whose schedule never succeeded counts from the schedule's creation, so that
        // the freshness alert fires for it too.
        if let Some(created) = bs.meta().creation_timestamp.as_ref() {
            ctx.metrics
                .backup_succeeded(&ns, &cluster, created.0.as_second());
            // Likewise for drills: a Cluster whose schedule drills and never passes alerts.
            if bs
                .spec
                .schedules
                .iter()
                .any(|s| s.is_enabled() && s.drill.is_some())
            {
                ctx.metrics
                    .backup_verified(&ns, &cluster, created.0.as_second());
            }
        }
        for (schedule, interval) in &report {
            ctx.metrics
                .schedule_interval(&ns, &cluster, &name, schedule, *interval);
        }
    }
    if bs.status.as_ref() != Some(&st) {
        let v = serde_json::to_value(&st).map_err(|source| Error::Serialize {
            object: format!("status of BackupSchedule {ns}/{name}"),
            source,
        })?;
        kubeapi::apply_status::<BackupSchedule>(&ctx.client, &name, &ns, v).await?;
    }
    Ok(Action::requeue(sleep))
}

/// How long until `next`, a second past it so that the time has surely come; at most
/// [`MAX_SLEEP`].
fn until(now: Timestamp, next: Option<Timestamp>) -> Duration {
    next.and_then(|n| Duration::try_from(n.duration_since(now)).ok())
        .map_or(MAX_SLEEP, |d| (d + Duration::from_secs(1)).min(MAX_SLEEP))
}

/// Another Backup of the Cluster (by its instance label, or taken under the same policy) that
/// has not ended, other than `own`, the run's own Backup.
fn busy_with(all: &[Backup], cluster: &str, policy: &str, own: &str) -> Option<String> {
    all.iter()
        .filter(|b| b.name_any() != own && b.meta().deletion_timestamp.is_none())
        .filter(|b| {
            (!cluster.is_empty()
                && b.labels().get(labels::INSTANCE).map(String::as_str) == Some(cluster))
                || b.spec.backup_policy_name == policy
        })
        .find(|b| {
            matches!(
                b.status.as_ref().and_then(|s| s.phase),
                None | Some(BackupPhase::New) | Some(BackupPhase::Running)
            )
        })
        .map(|b| {
            let phase = b
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or_else(|| "not started".to_owned(), |p| format!("{p:?}"));
            format!(
                "Backup {}/{} ({phase})",
                b.namespace().unwrap_or_default(),
                b.name_any()
            )
        })
}

/// The Backups this BackupSchedule's schedule took, proven by the schedule's UID.
fn taken_by(all: &[Backup], uid: &str, schedule: &str) -> Vec<Taken> {
    all.iter()
        .filter(|b| crate::ownership::labelled(b.meta(), labels::BACKUP_SCHEDULE_UID, uid))
        .filter(|b| b.labels().get(labels::SCHEDULE_NAME).map(String::as_str) == Some(schedule))
        .filter_map(|b| {
            let time: Timestamp = b.annotations().get(labels::SCHEDULED_TIME)?.parse().ok()?;
            let st = b.status.as_ref();
            Some(Taken {
                name: b.name_any(),
                time,
                phase: st.and_then(|s| s.phase),
                completed: st
                    .and_then(|s| s.completion_timestamp.as_ref())
                    .map(|t| t.0),
                failure: st.and_then(|s| s.failure_reason.clone()),
                drill: crate::backup::drill::asked(b),
            })
        })
        .collect()
}

/// The Backup of a run, named, labelled and annotated as KubeBlocks' scheduled Backups are,
/// plus the schedule's UID and the run's time.
fn scheduled(
    bs: &BackupSchedule,
    policy: &BackupPolicy,
    entry: &Entry,
    prefix: &str,
    time: Timestamp,
) -> Backup {
    let spec = &bs.spec.schedules[entry.index];
    let (cluster, component) = crate::backup::policy::target_of(policy);
    let mut l = BTreeMap::from([
        (labels::AUTOBACKUP.to_owned(), "true".to_owned()),
        (labels::BACKUP_SCHEDULE.to_owned(), bs.name_any()),
        (
            labels::BACKUP_SCHEDULE_UID.to_owned(),
            bs.uid().unwrap_or_default(),
        ),
        (labels::SCHEDULE_NAME.to_owned(), entry.name.clone()),
        (
            labels::BACKUP_POLICY.to_owned(),
            bs.spec.backup_policy_name.clone(),
        ),
    ]);
    if !cluster.is_empty() {
        l.insert(labels::INSTANCE.to_owned(), cluster);
    }
    if !component.is_empty() {
        l.insert(labels::COMPONENT_NAME.to_owned(), component);
    }
    Backup {
        metadata: ObjectMeta {
            name: Some(naming::scheduled_backup(prefix, &entry.name, time)),
            namespace: bs.namespace(),
            labels: Some(l),
            annotations: Some(BTreeMap::from([(
                labels::SCHEDULED_TIME.to_owned(),
                time.to_string(),
            )])),
            ..Default::default()
        },
        spec: BackupSpec {
            backup_policy_name: bs.spec.backup_policy_name.clone(),
            backup_method: spec.backup_method.clone(),
            retention_period: spec.retention_period.clone(),
            parameters: spec.parameters.clone(),
            ..Default::default()
        },
        status: None,
    }
}

enum Started {
    Created(Box<Backup>),
    /// This run's Backup exists already: an operator that died after creating it.
    Found,
    /// The name is another object's; the run cannot be taken.
    Foreign(String),
}

async fn start(ctx: &Context, backup: &Backup, uid: &str, time: Timestamp) -> Result<Started> {
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&kube::api::PostParams::default(), backup).await {
        Ok(b) => return Ok(Started::Created(Box::new(b))),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(Error::kube("creating", format!("Backup {ns}/{name}"))(e)),
    }
    let existing = kubeapi::get_opt::<Backup>(&ctx.client, &ns, &name).await?;
    let ours = existing.as_ref().is_some_and(|b| {
        crate::ownership::labelled(b.meta(), labels::BACKUP_SCHEDULE_UID, uid)
            && b.annotations().get(labels::SCHEDULED_TIME) == Some(&time.to_string())
    });
    Ok(if ours {
        Started::Found
    } else {
        Started::Foreign(format!(
            "Backup {ns}/{name}, the run's name, is taken by an object this schedule did not create"
        ))
    })
}
