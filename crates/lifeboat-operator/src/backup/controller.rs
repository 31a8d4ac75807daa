//! The Backup controller: picks the target pod from the BackupPolicy, runs `lifeboat-mover
//! backup` in a Job next to it, and records the result, the manifest's location and the
//! dataset's fingerprint in the Backup's status.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodTemplateSpec,
    ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::conditions;
use lifeboat_api::dataprotection::v1alpha1::{
    BackupDataset, BackupPhase, BackupRepoPhase, BackupStatus, BackupTimeRange,
};
use lifeboat_api::{Backup, BackupPolicy, BackupRepo, Cluster, labels};
use tracing::Instrument;

use super::gate::Gate;
use crate::cluster::build::{DATA_DIR, password_env};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::mover_output::{self, BackupLine};
use crate::ownership::controlled_by;
use crate::restore::{confirm, diagnose};
use crate::telemetry;
use crate::{duration, kubeapi, naming, repo};

const CONTROLLER: &str = "backup";

/// Runs the Backup controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<DeserializeGuard<Backup>> = Api::all(ctx.client.clone());
    let jobs = crate::observed::watch_config().labels(&format!(
        "{}={}",
        labels::MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    Controller::new(api, crate::observed::watch_config())
        .owns(Api::<Job>::all(ctx.client.clone()), jobs)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            |obj, ctx| async move {
                match &obj.0 {
                    Ok(b) => {
                        reconcile(b, &ctx)
                            .instrument(telemetry::reconcile_span(CONTROLLER, b.namespace().as_deref(), &b.name_any()))
                            .await
                    }
                    Err(e) => {
                        tracing::warn!(name = ?e.metadata.name, error = %e.error, "skipping a Backup that does not deserialize");
                        Ok(Action::await_change())
                    }
                }
            },
            |_, err: &Error, ctx: Arc<Context>| {
                ctx.metrics.failure(CONTROLLER, err.metric_label());
                tracing::warn!(error = %err, "backup reconcile failed");
                Action::requeue(Duration::from_secs(10))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

fn now(ctx: &Context) -> Time {
    Time(ctx.clock.now())
}

pub(super) async fn write_status(ctx: &Context, b: &Backup, st: &BackupStatus) -> Result<()> {
    let name = b.name_any();
    let ns = b.namespace().unwrap_or_default();
    let v = serde_json::to_value(st).map_err(|source| Error::Serialize {
        object: format!("status of Backup {ns}/{name}"),
        source,
    })?;
    kubeapi::apply_status::<Backup>(&ctx.client, &name, &ns, v).await
}

/// Ends the Backup `Failed`. Its own Job, if it may still run, is suspended first, whatever the
/// failure: a pod pending for a node or an image could start later and write a whole backup into
/// the repo under a Backup that already says Failed (and a Backup can fail with its Job running
/// for reasons of its own, such as its policy deleted with its Cluster).
async fn fail(ctx: &Context, b: &Backup, mut st: BackupStatus, reason: String) -> Result<Action> {
    if !crate::mutation::active(crate::mutation::Mutation::FailWithoutSuspending) {
        stop_job(ctx, b).await?;
    }
    st.phase = Some(BackupPhase::Failed);
    st.progress = None;
    st.failure_reason = Some(reason.clone());
    st.completion_timestamp = Some(now(ctx));
    write_status(ctx, b, &st).await?;
    Metrics::outcome(&ctx.metrics.backups, "failed");
    if let Some(schedule) = b.labels().get(labels::BACKUP_SCHEDULE) {
        ctx.metrics
            .schedule_run(&b.namespace().unwrap_or_default(), schedule, "failed");
    }
    ctx.event(b, EventType::Warning, "BackupFailed", "Backup", reason)
        .await;
    Ok(Action::await_change())
}

/// Suspends the Backup's Job unless it has ended, is suspended already, or is not this Backup's.
async fn stop_job(ctx: &Context, b: &Backup) -> Result<()> {
    let ns = b.namespace().unwrap_or_default();
    let job_name = naming::backup_job(&b.name_any());
    let Some(job) = kubeapi::get_opt::<Job>(&ctx.client, &ns, &job_name).await? else {
        return Ok(());
    };
    let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    if suspended
        || kubeapi::job_finished(&job)
        || !controlled_by(job.meta(), &b.uid().unwrap_or_default())
    {
        return Ok(());
    }
    kubeapi::suspend_job(&ctx.client, &ns, &job_name).await
}

/// The name of a Backup's data inside its repo: unique even when a Backup is recreated under the
/// same name.
pub fn repo_name(b: &Backup) -> String {
    let uid = b.uid().unwrap_or_default();
    format!("{}-{}", b.name_any(), uid.get(..8).unwrap_or(&uid))
}

fn selector_string(s: &LabelSelector) -> String {
    s.match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// One pass over a Backup: the whole reconcile, as the controller and the simulation run it.
pub async fn reconcile(b: &Backup, ctx: &Context) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let name = b.name_any();
    let ns = b.namespace().unwrap_or_default();
    if b.meta().deletion_timestamp.is_some() {
        return super::deletion::on_delete(b, ctx).await;
    }
    let mut st = b.status.clone().unwrap_or_default();
    match st.phase {
        Some(BackupPhase::Completed) => {
            // A drill in progress holds the Backup from retention until it has ended.
            if let Some(a) = super::drill::step(b, ctx).await? {
                return Ok(a);
            }
            return super::retention::apply(b, ctx).await;
        }
        Some(BackupPhase::Failed) | Some(BackupPhase::Deleting) => {
            return Ok(Action::await_change());
        }
        Some(BackupPhase::Running) => return observe(b, ctx, st).await,
        Some(BackupPhase::New) | None => {}
    }
    let deadline = match deadline_of(b, ctx.config.backup_deadline) {
        Ok(d) => d,
        Err(msg) => return fail(ctx, b, st, msg).await,
    };
    let policy_name = &b.spec.backup_policy_name;
    let Some(policy) = kubeapi::get_opt::<BackupPolicy>(&ctx.client, &ns, policy_name).await?
    else {
        return fail(
            ctx,
            b,
            st,
            format!("BackupPolicy {ns}/{policy_name} does not exist"),
        )
        .await;
    };
    if !policy
        .spec
        .backup_methods
        .iter()
        .any(|m| m.name == b.spec.backup_method)
    {
        return fail(
            ctx,
            b,
            st,
            format!(
                "BackupPolicy {ns}/{policy_name} has no method {:?}",
                b.spec.backup_method
            ),
        )
        .await;
    }
    if policy
        .spec
        .backup_methods
        .iter()
        .any(|m| m.name == b.spec.backup_method && m.snapshot_volumes == Some(true))
    {
        return fail(
            ctx,
            b,
            st,
            format!(
                "method {:?} asks for volume snapshots, which Lifeboat does not take; use datafile",
                b.spec.backup_method
            ),
        )
        .await;
    }
    let Some(target) = policy.spec.target.clone() else {
        return fail(
            ctx,
            b,
            st,
            format!("BackupPolicy {ns}/{policy_name} has no spec.target"),
        )
        .await;
    };
    let selector = target.pod_selector.clone().unwrap_or_default();
    let (cluster_name, component) = super::policy::target_of(&policy);
    let cluster = kubeapi::get_opt::<Cluster>(&ctx.client, &ns, &cluster_name).await?;
    let Some(cluster) = cluster else {
        return fail(
            ctx,
            b,
            st,
            format!("Cluster {ns}/{cluster_name} of BackupPolicy {policy_name} does not exist"),
        )
        .await;
    };
    match super::gate::gate(&cluster) {
        Gate::Open => {}
        Gate::Fail(msg) => return fail(ctx, b, st, msg).await,
        Gate::Wait(msg) => {
            st.phase = Some(BackupPhase::New);
            conditions::set(
                &mut st.conditions,
                "Waiting",
                "True",
                "ClusterRestoring",
                &msg,
                b.meta().generation,
                &now(ctx),
            );
            write_status(ctx, b, &st).await?;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
    }
    let repos: Api<BackupRepo> = Api::all(ctx.client.clone());
    let repo_obj = match &policy.spec.backup_repo_name {
        Some(r) => repos
            .get_opt(r)
            .await
            .map_err(Error::kube("reading", format!("BackupRepo {r}")))?
            .ok_or_else(|| {
                format!("BackupRepo {r} of BackupPolicy {ns}/{policy_name} does not exist")
            }),
        None => default_repo(
            repos
                .list(&ListParams::default())
                .await
                .map_err(Error::kube("listing", "BackupRepos"))?
                .items,
        )
        .map_err(|e| format!("BackupPolicy {ns}/{policy_name} names no BackupRepo: {e}")),
    };
    let repo_obj = match repo_obj {
        Ok(r) => r,
        Err(msg) => return fail(ctx, b, st, msg).await,
    };
    if repo_obj.status.as_ref().and_then(|s| s.phase) != Some(BackupRepoPhase::Ready) {
        return fail(
            ctx,
            b,
            st,
            format!(
                "BackupRepo {} is not Ready: {}",
                repo_obj.name_any(),
                repo_obj
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_default()
            ),
        )
        .await;
    }
    let pods: Vec<Pod> =
        kubeapi::list(&ctx.client, &ns, &selector_string(&selector.label_selector)).await?;
    let mut pod = pods.into_iter().find(pod_ready);
    if pod.is_none()
        && let Some(fb) = &selector.fallback_label_selector
    {
        let pods: Vec<Pod> = kubeapi::list(&ctx.client, &ns, &selector_string(fb)).await?;
        pod = pods.into_iter().find(pod_ready);
    }
    let Some(pod) = pod else {
        // A Cluster just restored, or rolling, has its pods Ready again in moments: the Backup
        // waits for one, up to its deadline, instead of failing at the first look.
        let msg = format!(
            "no Ready pod of Cluster {ns}/{cluster_name} matches the BackupPolicy's target (role secondary, or primary)"
        );
        return wait(ctx, b, st, "NoReadyPod", msg, deadline).await;
    };
    // Label the Backup with its Cluster, as KubeBlocks does, and with the Cluster's UID, which
    // is what WipeOut deletes a Cluster's backups by (the name alone could be another Cluster's
    // of the same name, or a Helm release's). The engine recorded here goes into the dataset.
    let engine = cluster.spec.cluster_def.clone().unwrap_or_default();
    // A merge patch with the UID as precondition: an apply to a Backup deleted meanwhile would
    // be a create, which the operator may not do.
    let label_patch = serde_json::json!({
        "metadata": {"uid": b.uid(), "labels": {
            labels::INSTANCE: cluster_name, labels::COMPONENT_NAME: component,
            "app.kubernetes.io/name": engine, labels::BACKUP_POLICY: policy_name,
            labels::CLUSTER_UID: cluster.uid().unwrap_or_default(),
        }}
    });
    let labelled = Api::<Backup>::namespaced(ctx.client.clone(), &ns)
        .patch(
            &name,
            &kube::api::PatchParams {
                field_manager: Some(crate::FIELD_MANAGER.into()),
                ..Default::default()
            },
            &kube::api::Patch::Merge(&label_patch),
        )
        .await
        .map_err(Error::kube("labelling", format!("Backup {ns}/{name}")))?;
    let access = repo::access::access(&repo_obj, &ns).map_err(|e| Error::InvalidObject {
        object: format!("BackupRepo {}", repo_obj.name_any()),
        message: e.to_string(),
    })?;
    if let Err(msg) = crate::repo::namespaces::allows(&repo_obj, &ns) {
        return fail(ctx, b, st, msg).await;
    }
    crate::repo::controller::ensure_namespace_access(ctx, &repo_obj, &ns).await?;
    let secret = target
        .connection_credential
        .as_ref()
        .map(|c| c.secret_name.clone())
        .unwrap_or_default();
    // Before any data exists: a Backup deleted from here on takes its data with it. Held on
    // the labelled Backup: its resourceVersion is the finalizer patch's precondition, and the
    // one read at the start of this pass is already stale.
    super::deletion::hold(ctx, &labelled).await?;
    let method = policy
        .spec
        .backup_methods
        .iter()
        .enumerate()
        .find(|(_, m)| m.name == b.spec.backup_method);
    if let Some((i, m)) = method
        && let Some((j, var)) = crate::mover_env::first_reserved(&m.env)
    {
        return fail(
            ctx,
            b,
            st,
            format!(
                "BackupPolicy {ns}/{policy_name}: spec.backupMethods[{i}].env[{j}] {}",
                crate::mover_env::refusal(var)
            ),
        )
        .await;
    }
    let method = method.map(|(_, m)| m);
    let server = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == component))
        .and_then(|c| c.resources.as_ref());
    let resources = crate::job_resources::for_backup(
        &ctx.config.job_resources,
        method
            .and_then(|m| m.runtime_settings.as_ref())
            .and_then(|r| r.resources.as_ref()),
        server,
    );
    let run = JobRun {
        deadline,
        resources,
        user_env: method.map(|m| m.env.as_slice()).unwrap_or_default(),
    };
    let job = backup_job(b, &pod, &component, &secret, &access, &ctx.config, run);
    match kubeapi::create_if_absent(&ctx.client, &job).await {
        Ok(true) => {}
        Ok(false) => {
            if let Some(held) = foreign_job(ctx, b).await? {
                // Typically the Job of an earlier Backup of this name, deleted a moment ago:
                // the garbage collector removes it shortly. Taking it for this Backup's would
                // record that Backup's data (deleted with it) as this one's.
                return wait(ctx, b, st, "JobNameTaken", held, deadline).await;
            }
        }
        // An admission webhook or a quota that refuses the Job says so on the Backup, and
        // the Backup ends by its deadline rather than staying New with nothing to show.
        Err(e) => {
            tracing::warn!(backup = %name, error = %e, "backup Job not created");
            return wait(ctx, b, st, "JobNotCreated", e.to_string(), deadline).await;
        }
    }
    st.phase = Some(BackupPhase::Running);
    st.start_timestamp = Some(now(ctx));
    st.backup_repo_name = Some(repo_obj.name_any());
    st.path = Some(
        [repo::access::namespace_path(&repo_obj, &ns), repo_name(b)]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("/"),
    );
    st.target = Some(target);
    st.format_version = Some("1".into());
    conditions::set(
        &mut st.conditions,
        "Waiting",
        "False",
        "Started",
        &format!(
            "Job/{} backs up pod {}",
            naming::backup_job(&name),
            pod.name_any()
        ),
        b.meta().generation,
        &now(ctx),
    );
    write_status(ctx, b, &st).await?;
    Ok(Action::requeue(Duration::from_secs(3)))
}

/// How a backup Job runs: its deadline, its bounds and the method's own environment.
struct JobRun<'a> {
    deadline: Duration,
    resources: ResourceRequirements,
    user_env: &'a [EnvVar],
}

fn backup_job(
    b: &Backup,
    pod: &Pod,
    component: &str,
    secret: &str,
    access: &repo::access::RepoAccess,
    cfg: &crate::context::Config,
    run: JobRun<'_>,
) -> Job {
    let JobRun {
        deadline,
        resources,
        user_env,
    } = run;
    let ns = b.namespace().unwrap_or_default();
    let claim = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == "data"))
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .unwrap_or_default();
    let host = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone().zip(s.subdomain.clone()))
        .map(|(h, sub)| format!("{h}.{sub}.{ns}.svc.{}", cfg.cluster_domain))
        .unwrap_or_else(|| {
            pod.status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default()
        });
    let env = |n: &str, v: String| EnvVar {
        name: n.into(),
        value: Some(v),
        ..Default::default()
    };
    let mut envs = access.env.clone();
    envs.extend([
        env("LIFEBOAT_BACKUP_NAME", repo_name(b)),
        env("LIFEBOAT_DATA_DIR", DATA_DIR.into()),
        env("LIFEBOAT_REDIS_HOST", host),
        env("LIFEBOAT_COMPONENT", component.to_owned()),
        env("LIFEBOAT_LOG_FORMAT", "json".into()),
        password_env(secret, "LIFEBOAT_REDIS_PASSWORD"),
    ]);
    // The method's own variables, after Lifeboat's; none of them can be one of Lifeboat's
    // (refused above), so none overrides them.
    envs.extend(user_env.iter().cloned());
    let mut mounts = vec![VolumeMount {
        name: "data".into(),
        mount_path: DATA_DIR.into(),
        ..Default::default()
    }];
    mounts.extend(access.mounts.iter().cloned());
    let mut volumes = vec![Volume {
        name: "data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim,
            read_only: Some(false),
        }),
        ..Default::default()
    }];
    volumes.extend(access.volumes.iter().cloned());
    let labels_map = [
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
        ("lifeboat.io/backup".to_owned(), b.name_any()),
    ];
    Job {
        metadata: ObjectMeta {
            name: Some(naming::backup_job(&b.name_any())),
            namespace: Some(ns),
            labels: Some(labels_map.clone().into()),
            owner_references: b.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            // Trails the Backup's own deadline, so the operator, which can say why (a pending
            // pod's scheduler message), is the one that ends it; this only stops a Job the
            // operator could not.
            active_deadline_seconds: Some(
                i64::try_from(deadline.as_secs() + JOB_DEADLINE_SLACK.as_secs())
                    .unwrap_or(i64::MAX),
            ),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels_map.into()),
                    ..Default::default()
                }),
                spec: Some(crate::security::restricted(
                    PodSpec {
                        restart_policy: Some("Never".into()),
                        // The data volume is ReadWriteOnce: the Job must run where the server runs.
                        // A node selector, not nodeName, so the scheduler still binds the repo volume
                        // (a WaitForFirstConsumer claim is provisioned only through scheduling).
                        node_selector: pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.clone())
                            .map(|n| [("kubernetes.io/hostname".to_owned(), n)].into()),
                        enable_service_links: Some(false),
                        containers: vec![Container {
                            name: "backup".into(),
                            image: Some(cfg.mover_image.clone()),
                            image_pull_policy: Some("IfNotPresent".into()),
                            command: Some(vec!["lifeboat-mover".into(), "backup".into()]),
                            env: Some(envs),
                            volume_mounts: Some(mounts),
                            termination_message_policy: Some("FallbackToLogsOnError".into()),
                            resources: Some(resources),
                            ..Default::default()
                        }],
                        volumes: Some(volumes),
                        ..Default::default()
                    },
                    &cfg.pods,
                )),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn observe(b: &Backup, ctx: &Context, mut st: BackupStatus) -> Result<Action> {
    let name = b.name_any();
    let ns = b.namespace().unwrap_or_default();
    let job_name = naming::backup_job(&name);
    let Some(job) = kubeapi::get_opt::<Job>(&ctx.client, &ns, &job_name).await? else {
        return fail(
            ctx,
            b,
            st,
            format!("Job/{job_name} disappeared while the backup ran"),
        )
        .await;
    };
    if !controlled_by(job.meta(), &b.uid().unwrap_or_default()) {
        return fail(
            ctx,
            b,
            st,
            format!("Job/{job_name} was not made for this Backup, so its outcome says nothing about this Backup's data"),
        )
        .await;
    }
    let js = job.status.clone().unwrap_or_default();
    let pods: Vec<Pod> = kubeapi::list(&ctx.client, &ns, &format!("job-name={job_name}")).await?;
    let latest = pods.iter().max_by_key(|p| p.creation_timestamp());
    if js.succeeded.unwrap_or(0) > 0 {
        let logs = match latest {
            Some(p) => kubeapi::job_output(&ctx.client, &ns, p)
                .await
                .unwrap_or_default(),
            None => String::new(),
        };
        let Some(res) = mover_output::last::<BackupLine>(&logs) else {
            return fail(
                ctx,
                b,
                st,
                format!("Job/{job_name} succeeded but printed no result line"),
            )
            .await;
        };
        if let Err(why) = accept(b, &res) {
            return fail(ctx, b, st, format!("Job/{job_name} {why}")).await;
        }
        let completed = now(ctx);
        let cluster_def = b.labels().get("app.kubernetes.io/name").cloned();
        st.phase = Some(BackupPhase::Completed);
        st.progress = None;
        st.completion_timestamp = Some(completed.clone());
        st.total_size = Some(res.stored_size.to_string());
        if let Some(start) = &st.start_timestamp {
            let secs = u64::try_from(completed.0.as_second() - start.0.as_second()).unwrap_or(0);
            st.duration = Some(duration::format(Duration::from_secs(secs)));
        }
        st.time_range = Some(BackupTimeRange {
            time_zone: None,
            start: st.start_timestamp.clone(),
            end: Some(completed),
        });
        let component = st
            .target
            .as_ref()
            .and_then(|t| t.name.clone())
            .unwrap_or_default();
        st.dataset = Some(BackupDataset {
            engine: cluster_def.unwrap_or_else(|| "falkordb".into()),
            topology: None,
            component,
            manifest_path: res.backup_name.clone(),
            manifest_format_version: 1,
            data_bytes: i64::try_from(res.total_size).unwrap_or(i64::MAX),
            fingerprint: (&res.fingerprint).into(),
        });
        write_status(ctx, b, &st).await?;
        Metrics::outcome(&ctx.metrics.backups, "completed");
        if let Some(start) = &st.start_timestamp {
            let took = st
                .completion_timestamp
                .as_ref()
                .map(|c| c.0.duration_since(start.0).as_secs_f64())
                .unwrap_or_default();
            ctx.metrics.backup_duration.observe(took.max(0.0));
        }
        #[allow(clippy::cast_precision_loss)]
        ctx.metrics.backup_bytes.observe(res.stored_size as f64);
        for (stage, secs) in [
            ("snapshot", res.snapshot_seconds),
            ("transfer", res.transfer_seconds),
        ] {
            if let Some(s) = secs {
                ctx.metrics
                    .backup_stage_duration
                    .get_or_create(&crate::metrics::StageLabels {
                        stage: stage.to_owned(),
                    })
                    .observe(s.max(0.0));
            }
        }
        ctx.event(
            b,
            EventType::Normal,
            "BackupCompleted",
            "Backup",
            format!(
                "backed up {} bytes into {}",
                res.total_size,
                st.path.clone().unwrap_or_default()
            ),
        )
        .await;
        return Ok(Action::await_change());
    }
    if let Some(c) = js
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True")
    {
        let detail = kubeapi::termination_message(latest);
        return fail(
            ctx,
            b,
            st,
            format!(
                "Job/{job_name} failed ({}: {}): {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
                detail.trim()
            ),
        )
        .await;
    }
    let stuck = confirm::confirmed(
        &ctx.client,
        &ns,
        latest.and_then(|p| diagnose::diagnose(p, &[])),
    )
    .await?;
    if let Some(s) = stuck.as_ref().filter(|s| s.terminal) {
        return fail(ctx, b, st, format!("Job/{job_name}: {}", s.message)).await;
    }
    let deadline = deadline_of(b, ctx.config.backup_deadline).unwrap_or(ctx.config.backup_deadline);
    let started = st.start_timestamp.as_ref().map(|t| t.0);
    if let Some(started) = started
        && past_deadline(started, ctx.clock.now(), deadline)
    {
        let why = match (&stuck, latest) {
            (Some(s), _) => s.message.clone(),
            (None, Some(p)) => format!(
                "pod {} is still {}",
                p.name_any(),
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_else(|| "Pending".into())
            ),
            (None, None) => "the Job created no pod".into(),
        };
        return fail(
            ctx,
            b,
            st,
            format!(
                "Job/{job_name} did not finish within the backup deadline of {}: {why}",
                duration::format(deadline)
            ),
        )
        .await;
    }
    if let Some(p) =
        latest.filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    {
        let now = now(ctx);
        let report = kubeapi::log_tail(&ctx.client, &ns, &p.name_any())
            .await
            .as_deref()
            .and_then(mover_output::last_progress);
        let shown = report
            .as_ref()
            .and_then(|r| crate::progress::aggregate([r], &now));
        if shown.as_ref().map(|s| (&s.stage, s.bytes_done))
            != st.progress.as_ref().map(|s| (&s.stage, s.bytes_done))
            && crate::progress::refresh_due(st.progress.as_ref(), &now)
        {
            st.progress = shown;
            write_status(ctx, b, &st).await?;
        }
    }
    Ok(Action::requeue(Duration::from_secs(3)))
}

/// Holds a Backup that cannot start yet in `New`, with a `Waiting` condition that says why, and
/// fails it once it has waited `deadline` for the same reason: a wait has an end.
async fn wait(
    ctx: &Context,
    b: &Backup,
    mut st: BackupStatus,
    reason: &str,
    msg: String,
    deadline: Duration,
) -> Result<Action> {
    let at = now(ctx);
    let since = conditions::get(&st.conditions, "Waiting")
        .filter(|c| c.status == "True" && c.reason == reason)
        .map(|c| c.last_transition_time.0);
    if let Some(since) = since
        && past_deadline(since, at.0, deadline)
    {
        let why = format!("{msg} (waited {} for this)", duration::format(deadline));
        return fail(ctx, b, st, why).await;
    }
    if since.is_none() {
        // Another reason: its wait starts now.
        st.conditions.retain(|c| c.type_ != "Waiting");
    }
    st.phase = Some(BackupPhase::New);
    conditions::set(
        &mut st.conditions,
        "Waiting",
        "True",
        reason,
        &msg,
        b.meta().generation,
        &at,
    );
    write_status(ctx, b, &st).await?;
    Ok(Action::requeue(Duration::from_secs(10)))
}

/// Why a Job named like this Backup's, which it could not create, is not its own; `None` when it
/// is.
async fn foreign_job(ctx: &Context, b: &Backup) -> Result<Option<String>> {
    let ns = b.namespace().unwrap_or_default();
    let job_name = naming::backup_job(&b.name_any());
    let Some(job) = kubeapi::get_opt::<Job>(&ctx.client, &ns, &job_name).await? else {
        return Ok(Some(format!(
            "Job/{job_name} existed a moment ago but was not made for this Backup; the backup starts once the name is free"
        )));
    };
    if controlled_by(job.meta(), &b.uid().unwrap_or_default()) {
        return Ok(None);
    }
    let owner = job
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{} {} (uid {})", o.kind, o.name, o.uid))
        .unwrap_or_else(|| "no controller".into());
    Ok(Some(format!(
        "Job/{job_name} exists but was not made for this Backup (its owner: {owner}); the backup starts once it is gone"
    )))
}

/// Whether a backup Job's result is this Backup's, complete and checked. `Err` says what is wrong,
/// worded to follow the Job's name.
pub fn accept(b: &Backup, res: &BackupLine) -> std::result::Result<(), String> {
    if crate::mutation::active(crate::mutation::Mutation::CompleteUncheckedBackup) {
        return Ok(());
    }
    let want = repo_name(b);
    if res.backup_name != want {
        return Err(format!(
            "reported backup {:?}, but this Backup's data is named {want:?}",
            res.backup_name
        ));
    }
    if res.object_count == 0 || res.checked_objects != res.object_count {
        return Err(format!(
            "reported {} of {} objects read back from the repo after its manifest was published; \
             a backup is complete only when the repo holds everything it acknowledged \
             (a mover older than the operator does not read back: use the operator's mover image)",
            res.checked_objects, res.object_count
        ));
    }
    Ok(())
}

/// How much longer the Job's own activeDeadlineSeconds runs than the Backup's deadline.
const JOB_DEADLINE_SLACK: Duration = Duration::from_secs(60);

/// The Backup's deadline: its `lifeboat.io/backup-deadline` annotation, else `default`. `Err`
/// names the annotation when it does not parse.
pub(super) fn deadline_of(b: &Backup, default: Duration) -> std::result::Result<Duration, String> {
    match b.annotations().get(labels::BACKUP_DEADLINE) {
        None => Ok(default),
        Some(v) => duration::parse(v).filter(|d| !d.is_zero()).ok_or_else(|| {
            format!(
                "annotation {} of Backup {}/{}: {v:?} is not a duration such as 45m or 1h30m",
                labels::BACKUP_DEADLINE,
                b.namespace().unwrap_or_default(),
                b.name_any()
            )
        }),
    }
}

/// The repo a Backup whose policy names none stores into: the one BackupRepo annotated default.
/// With two or more, choosing by list order would put the data wherever the API server happens
/// to list first, and a restore or a person would look for it in the other; so none is chosen and
/// the message names them all.
fn default_repo(repos: Vec<BackupRepo>) -> std::result::Result<BackupRepo, String> {
    let mut defaults: Vec<BackupRepo> = repos
        .into_iter()
        .filter(|r| {
            r.annotations()
                .get(labels::DEFAULT_REPO)
                .map(String::as_str)
                == Some("true")
        })
        .collect();
    match defaults.len() {
        0 => Err(format!(
            "there is no default BackupRepo (annotation {}=true)",
            labels::DEFAULT_REPO
        )),
        1 => Ok(defaults.remove(0)),
        _ => {
            let mut names: Vec<String> = defaults.iter().map(|r| r.name_any()).collect();
            names.sort();
            Err(format!(
                "{} BackupRepos are marked default ({}); set {}=true on one only, or name the repo in spec.backupRepoName",
                names.len(),
                names.join(", "),
                labels::DEFAULT_REPO
            ))
        }
    }
}

/// Whether a backup started at `started` has run past `deadline` at `now`.
pub(super) fn past_deadline(started: Timestamp, now: Timestamp, deadline: Duration) -> bool {
    let elapsed = now.as_second() - started.as_second();
    u64::try_from(elapsed).is_ok_and(|e| e > deadline.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(annotation: Option<&str>) -> Backup {
        let mut b = Backup::new(
            "b",
            serde_json::from_value(serde_json::json!({
                "backupPolicyName": "p", "backupMethod": "datafile"
            }))
            .expect("spec"),
        );
        b.metadata.namespace = Some("ns".into());
        if let Some(v) = annotation {
            b.metadata.annotations =
                Some([(labels::BACKUP_DEADLINE.to_owned(), v.to_owned())].into());
        }
        b
    }

    #[test]
    fn the_deadline_annotation_overrides_the_default_and_bad_values_name_it() {
        let d = Duration::from_secs(1800);
        assert_eq!(deadline_of(&backup(None), d), Ok(d));
        assert_eq!(
            deadline_of(&backup(Some("45s")), d),
            Ok(Duration::from_secs(45))
        );
        for bad in ["soon", "0s", ""] {
            let e = deadline_of(&backup(Some(bad)), d).expect_err(bad);
            assert!(
                e.contains(labels::BACKUP_DEADLINE) && e.contains("ns/b"),
                "{e}"
            );
        }
    }

    fn repo(name: &str, default: Option<&str>) -> BackupRepo {
        let mut r: BackupRepo = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
            "kind": "BackupRepo",
            "metadata": {"name": name},
            "spec": {"storageProviderRef": "pvc"}
        }))
        .expect("repo");
        if let Some(v) = default {
            r.metadata.annotations = Some([(labels::DEFAULT_REPO.to_owned(), v.to_owned())].into());
        }
        r
    }

    #[test]
    fn the_one_repo_marked_default_is_chosen() {
        let chosen = default_repo(vec![
            repo("a", None),
            repo("b", Some("false")),
            repo("c", Some("true")),
        ])
        .expect("one default");
        assert_eq!(chosen.name_any(), "c");
    }

    #[test]
    fn no_default_repo_is_an_error_naming_the_annotation() {
        let e = default_repo(vec![repo("a", None), repo("b", Some("false"))]).expect_err("none");
        assert!(
            e.contains("no default") && e.contains(labels::DEFAULT_REPO),
            "{e}"
        );
        assert!(default_repo(vec![]).is_err());
    }

    #[test]
    fn two_default_repos_are_refused_naming_both_whatever_the_list_order() {
        for repos in [
            vec![repo("zeta", Some("true")), repo("alpha", Some("true"))],
            vec![
                repo("alpha", Some("true")),
                repo("mid", None),
                repo("zeta", Some("true")),
            ],
        ] {
            let e = default_repo(repos).expect_err("two defaults");
            assert!(
                e.contains("2 BackupRepos are marked default (alpha, zeta)")
                    && e.contains("spec.backupRepoName"),
                "{e}"
            );
        }
    }

    #[test]
    fn only_this_backups_checked_result_completes_it() {
        let mut b = backup(None);
        b.metadata.uid = Some("1234abcd-5678".into());
        let line = |name: &str, count: usize, checked: usize| -> BackupLine {
            serde_json::from_value(serde_json::json!({
                "backupName": name, "totalSize": 10, "storedSize": 4,
                "fingerprint": {"databases": {}},
                "objectCount": count, "checkedObjects": checked,
            }))
            .expect("line")
        };
        assert_eq!(accept(&b, &line("b-1234abcd", 2, 2)), Ok(()));
        // The Job of an earlier Backup of this name (another UID) printed it.
        let e = accept(&b, &line("b-99999999", 2, 2)).expect_err("other backup");
        assert!(e.contains("\"b-1234abcd\""), "{e}");
        // Not everything came back from the repo, or the mover did not check at all.
        for (count, checked) in [(2, 1), (2, 0), (0, 0)] {
            let e = accept(&b, &line("b-1234abcd", count, checked)).expect_err("unchecked");
            assert!(e.contains("read back"), "{e}");
        }
        let old: BackupLine = serde_json::from_value(serde_json::json!({
            "backupName": "b-1234abcd", "totalSize": 10, "storedSize": 4,
            "fingerprint": {"databases": {}}, "objectCount": 1,
        }))
        .expect("an older mover's line");
        assert!(accept(&b, &old).is_err());
    }

    #[test]
    fn a_backup_is_past_its_deadline_only_after_it() {
        let start = Timestamp::from_second(1_000).expect("ts");
        let at = |s| Timestamp::from_second(s).expect("ts");
        let d = Duration::from_secs(60);
        assert!(!past_deadline(start, at(1_060), d));
        assert!(past_deadline(start, at(1_061), d));
        assert!(
            !past_deadline(start, at(900), d),
            "a clock step back is not a timeout"
        );
    }
}
