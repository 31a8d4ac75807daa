//! One step of a component's restore: observe, plan ([`crate::restore::plan`]), apply.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event as CoreEvent, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::RestorePhase;
use lifeboat_api::{Backup, BackupRepo, Cluster, Restore, labels};

use super::validate::{ValidCluster, ValidComponent};
use crate::FIELD_MANAGER;
use crate::cluster::status::RestoreState;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::restore::diagnose::{self, PodEvent};
use crate::restore::intent::{ComponentRestore, IntentSource, RESTORE_DONE};
use crate::restore::plan::{self, Input, JobObs, PodObs, PvcObs, Stage};
use crate::restore::{confirm, jobs, leftovers, preconditions};
use crate::{kubeapi, naming, repo};

/// What a restore step decided for the Cluster.
pub struct StepOutcome {
    pub workload_allowed: bool,
    pub state: RestoreState,
}

/// The Cluster-level view of a Restore.
pub fn state_of(r: &Restore) -> RestoreState {
    let st = r.status.clone().unwrap_or_default();
    let msg = st
        .conditions
        .iter()
        .rev()
        .find(|c| c.status != "True")
        .or_else(|| st.conditions.last())
        .map(|c| c.message.clone())
        .unwrap_or_default();
    match st.phase {
        Some(RestorePhase::Completed) => {
            RestoreState::Completed(format!("Restore {} completed and verified", r.name_any()))
        }
        Some(RestorePhase::Failed) => {
            RestoreState::Failed(format!("Restore {}: {msg}", r.name_any()))
        }
        _ => RestoreState::Running(match (msg.is_empty(), &st.progress) {
            (true, None) => "validating".into(),
            (false, None) => msg,
            (_, Some(p)) => format!("{msg}: {}", crate::progress::describe(p))
                .trim_start_matches(": ")
                .to_owned(),
        }),
    }
}

async fn pod_events(ctx: &Context, ns: &str, pod: &str) -> Vec<PodEvent> {
    let api: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.name={pod}"));
    match api.list(&lp).await {
        Ok(list) => list
            .items
            .into_iter()
            .map(|e| PodEvent {
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            })
            .collect(),
        Err(e) => {
            // Without them a stuck pod is still diagnosed from its status, with less detail.
            tracing::warn!(pod, error = %e, "could not list the pod's events");
            Vec::new()
        }
    }
}

/// Observes a Job: done, failed for good, or stuck, with its pod's explanation.
async fn observe_job(
    ctx: &Context,
    ns: &str,
    name: &str,
    restore_uid: &str,
    leftovers: &mut Vec<String>,
) -> Result<Option<JobObs>> {
    let Some(job) = kubeapi::get_opt::<Job>(&ctx.client, ns, name).await? else {
        return Ok(None);
    };
    if !leftovers::job_is_ours(&job.metadata, restore_uid) {
        leftovers.push(format!("Job {ns}/{name}"));
        return Ok(None);
    }
    let st = job.status.clone().unwrap_or_default();
    let mut obs = JobObs {
        name: name.to_owned(),
        started: st.start_time.clone(),
        finished: st.completion_time.clone(),
        succeeded: st.succeeded.unwrap_or(0) > 0,
        suspended: job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
        ..Default::default()
    };
    let failed = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == "True");
    let pods: Vec<Pod> = kubeapi::list(&ctx.client, ns, &format!("job-name={name}")).await?;
    let latest = pods.iter().max_by_key(|p| p.creation_timestamp());
    if let Some(c) = failed {
        let detail = kubeapi::termination_message(latest)
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        obs.failed = Some(format!(
            "{}: {}{}",
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
            if detail.is_empty() {
                String::new()
            } else {
                format!("; last output: {detail}")
            }
        ));
        obs.finished = c.last_transition_time.clone();
    }
    if latest.is_none() && !obs.succeeded && obs.failed.is_none() {
        // No pod at all: the Job's own events say whether its pod is being refused.
        obs.stuck = diagnose::job_without_pod(name, &pod_events(ctx, ns, name).await);
    }
    if let Some(p) = latest {
        let pname = p.name_any();
        if obs.succeeded || obs.failed.is_some() {
            obs.output = kubeapi::job_output(&ctx.client, ns, p).await;
        } else if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            obs.progress = kubeapi::log_tail(&ctx.client, ns, &pname)
                .await
                .as_deref()
                .and_then(crate::mover_output::last_progress);
        }
        if !obs.succeeded {
            let events = pod_events(ctx, ns, &pname).await;
            obs.stuck = confirm::confirmed(&ctx.client, ns, diagnose::diagnose(p, &events)).await?;
        }
    }
    Ok(Some(obs))
}

/// Runs one step of the restore of `comp`.
pub async fn step(
    cluster: &Cluster,
    ctx: &Context,
    valid: &ValidCluster,
    comp: &ValidComponent,
    req: &ComponentRestore,
    source: Option<IntentSource>,
) -> Result<StepOutcome> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let c = &comp.spec.name;
    let restore_name = naming::restore(&name, c);

    let backup: Option<Backup> =
        kubeapi::get_opt(&ctx.client, &req.backup_namespace, &req.backup_name).await?;
    // Default deadlines grow with what the stages move, so the Restore records (in
    // spec.deadlines) and every stage applies the scaled ones.
    let data_bytes = backup
        .as_ref()
        .and_then(|b| b.status.as_ref())
        .and_then(|s| s.dataset.as_ref())
        .map_or(0, |d| u64::try_from(d.data_bytes).unwrap_or(0));
    let scaled = req.scaled(data_bytes);
    let req = &scaled;

    let cluster_uid = cluster.metadata.uid.clone().unwrap_or_default();
    let since = cluster
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(|| ctx.clock.now(), |t| t.0);
    let mut restore = kubeapi::get_opt::<Restore>(&ctx.client, &ns, &restore_name).await?;
    if let Some(r) = &restore
        && !leftovers::restore_is_ours(&r.metadata, &cluster_uid)
    {
        // Not ours, so not ours to write to either: the Cluster alone says why it waits.
        let found = [format!("Restore {ns}/{restore_name}")];
        let state =
            match leftovers::verdict(&found, since, ctx.clock.now(), req.prepare_data_deadline) {
                leftovers::Verdict::Fail(why) => RestoreState::Failed(why),
                leftovers::Verdict::Wait(why) => RestoreState::Running(why),
                leftovers::Verdict::Clear => RestoreState::Running("validating".into()),
            };
        return Ok(StepOutcome {
            workload_allowed: false,
            state,
        });
    }
    if restore.is_none() {
        let obj = jobs::restore_object(cluster, comp, req);
        kubeapi::create_if_absent(&ctx.client, &obj).await?;
        if source == Some(IntentSource::Annotation) {
            ctx.event(
                cluster,
                EventType::Warning,
                "DeprecatedRestoreAnnotation",
                "Restore",
                format!(
                    "annotation {} is deprecated: it was honoured and translated into Restore {restore_name}; use spec.restore.source (kind Backup, name {}) instead",
                    labels::RESTORE_FROM_BACKUP, req.backup_name
                ),
            )
            .await;
        }
        ctx.event(
            cluster,
            EventType::Normal,
            "RestoreStarted",
            "Restore",
            format!(
                "restoring component {c} from Backup {}/{}",
                req.backup_namespace, req.backup_name
            ),
        )
        .await;
        restore = kubeapi::get_opt::<Restore>(&ctx.client, &ns, &restore_name).await?;
    }
    let restore = restore.ok_or_else(|| Error::MissingField {
        object: format!("Restore {ns}/{restore_name}"),
        field: "metadata (it vanished right after creation)",
    })?;
    let status = restore.status.clone().unwrap_or_default();
    let restore_uid = restore.metadata.uid.clone().unwrap_or_default();
    let mut found: Vec<String> = Vec::new();

    let repo_name = backup
        .as_ref()
        .and_then(|b| b.status.as_ref())
        .and_then(|s| s.backup_repo_name.clone());
    let repo_obj: Option<BackupRepo> = match &repo_name {
        Some(r) => Api::<BackupRepo>::all(ctx.client.clone())
            .get_opt(r)
            .await
            .map_err(Error::kube("reading", format!("BackupRepo {r}")))?,
        None => None,
    };
    let precondition = if status.phase.is_none() {
        preconditions::check(req, &ns, valid, backup.as_ref(), repo_obj.as_ref())
    } else {
        Ok(())
    };

    // Observe volumes, Jobs and pods.
    let mut pvcs = Vec::new();
    let mut prepare_jobs = Vec::new();
    for i in 0..comp.spec.replicas {
        let pvc_name = naming::data_pvc(&name, c, i);
        let pvc = kubeapi::get_opt::<PersistentVolumeClaim>(&ctx.client, &ns, &pvc_name).await?;
        let (pvc, leftover) = leftovers::own_claim(pvc.as_ref().map(|p| p.meta()), &cluster_uid);
        if leftover {
            found.push(format!("PersistentVolumeClaim {ns}/{pvc_name}"));
        }
        pvcs.push(PvcObs {
            name: pvc_name,
            exists: pvc.is_some(),
            deleting: pvc.is_some_and(|m| m.deletion_timestamp.is_some()),
        });
        prepare_jobs.push(
            observe_job(
                ctx,
                &ns,
                &naming::prepare_data_job(&name, c, i),
                &restore_uid,
                &mut found,
            )
            .await?,
        );
    }
    let sts = kubeapi::get_opt::<k8s_openapi::api::apps::v1::StatefulSet>(
        &ctx.client,
        &ns,
        &naming::workload(&name, c),
    )
    .await?;
    let pod_list = super::component_pods(ctx, &ns, &name, c).await?;
    let mut pods = Vec::new();
    for p in &pod_list {
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "ContainersReady" && c.status == "True")
            });
        let stuck = if ready {
            None
        } else {
            let events = pod_events(ctx, &ns, &p.name_any()).await;
            confirm::confirmed(&ctx.client, &ns, diagnose::diagnose(p, &events)).await?
        };
        pods.push(PodObs {
            name: p.name_any(),
            running: kubeapi::containers_running(p),
            stuck,
        });
    }
    let verify_job = observe_job(
        ctx,
        &ns,
        &naming::verify_job(&name, c),
        &restore_uid,
        &mut found,
    )
    .await?;

    let now = Time(ctx.clock.now());
    let input = Input {
        now: now.clone(),
        req,
        replicas: comp.spec.replicas,
        precondition,
        status: status.clone(),
        pvcs,
        prepare_jobs,
        workload_exists: sts.is_some(),
        pods,
        verify_job,
    };
    let mut p = plan::plan(&input);
    let waiting = p.hold_for_leftovers(
        &now,
        &leftovers::verdict(&found, since, now.0, req.prepare_data_deadline),
    );

    // Jobs are built from the Backup's manifest path and its repo. Deleted mid-restore, they can
    // no longer be built: the restore ends saying so, instead of failing every pass until no
    // deadline is ever checked again.
    let wants_jobs =
        !p.create_pvcs.is_empty() || !p.create_prepare_jobs.is_empty() || p.create_verify_job;
    if wants_jobs && waiting.is_none() && (backup.is_none() || repo_obj.is_none()) {
        let what = format!("Backup {}/{}", req.backup_namespace, req.backup_name);
        p.lost_source(
            &now,
            match (&backup, &repo_name) {
                (None, _) => format!("{what} was deleted during the restore, which still needs it to create its Jobs"),
                (Some(_), Some(r)) => format!("BackupRepo {r} of {what} was deleted during the restore, which still needs it to create its Jobs"),
                (Some(_), None) => format!("{what} names no BackupRepo, so the restore cannot create its Jobs"),
            },
        );
    }

    // The status goes first: a create that fails below must not lose this pass's record (above
    // all the start time, which every deadline counts from).
    let mut stored = status.clone();
    let status_last = crate::mutation::active(crate::mutation::Mutation::StatusAfterCreates);
    if plan::status_write_due(&stored, &p.status, &now) && !status_last {
        write_restore_status(ctx, &restore_name, &ns, &p.status).await?;
        stored = p.status.clone();
    }

    // Apply: create what the plan asks for. Names are deterministic, so a step repeated after a
    // crash finds what the previous one created.
    let mut created: Vec<String> = Vec::new();
    if !p.create_pvcs.is_empty() || !p.create_prepare_jobs.is_empty() || p.create_verify_job {
        let repo_obj = repo_obj.as_ref().ok_or_else(|| Error::MissingField {
            object: format!("Backup {}/{}", req.backup_namespace, req.backup_name),
            field: "status.backupRepoName (a Ready repo)",
        })?;
        let access = repo::access::access(repo_obj, &req.backup_namespace).map_err(|e| {
            Error::InvalidObject {
                object: format!("BackupRepo {}", repo_obj.name_any()),
                message: e.to_string(),
            }
        })?;
        crate::repo::controller::ensure_namespace_access(ctx, repo_obj, &ns).await?;
        let backup_path = backup
            .as_ref()
            .and_then(|b| b.status.as_ref())
            .and_then(|s| s.dataset.as_ref())
            .map(|d| d.manifest_path.clone())
            .unwrap_or_default();
        let ji = jobs::JobInput {
            cluster,
            comp,
            req,
            owner: restore.controller_owner_ref(&()),
            image: &ctx.config.mover_image,
            repo: &access,
            backup_path: &backup_path,
            resources: &ctx.config.job_resources,
            pods: &ctx.config.pods,
        };
        let mut refusal = None;
        for i in &p.create_pvcs {
            refusal = refusal.or(final_refusal(
                kubeapi::create_if_absent(&ctx.client, &jobs::data_pvc(cluster, comp, *i)).await,
                Stage::PrepareData,
            )?);
        }
        for i in &p.create_prepare_jobs {
            if refusal.is_some() {
                break;
            }
            let job = jobs::prepare_data_job(&ji, *i);
            refusal = final_refusal(
                kubeapi::create_if_absent(&ctx.client, &job).await,
                Stage::PrepareData,
            )?;
            if refusal.is_none() {
                created.push(job.name_any());
            }
        }
        if p.create_verify_job && refusal.is_none() {
            let secret = super::build::BuildInput {
                cluster,
                valid,
                image: "",
                manager_image: "",
                domain: "",
                restore_gate: true,
                pods: &ctx.config.pods,
            }
            .secret_name();
            refusal = final_refusal(
                kubeapi::create_if_absent(
                    &ctx.client,
                    &jobs::verify_job(&ji, &secret, &ctx.config.cluster_domain),
                )
                .await,
                Stage::PostReady,
            )?;
        }
        if let Some((stage, object, reason)) = refusal {
            p.refused(&now, stage, &object, &reason);
        }
    }
    if plan::status_write_due(&stored, &p.status, &now) {
        write_restore_status(ctx, &restore_name, &ns, &p.status).await?;
        stored = p.status.clone();
    }
    // After the status, which records the failure first: a pass stopped in between suspends them
    // on the next one, since a Failed restore keeps asking.
    if !crate::mutation::active(crate::mutation::Mutation::FailWithoutStoppingJobs) {
        for job in plan::jobs_to_suspend(&input, &p, &created) {
            kubeapi::suspend_job(&ctx.client, &ns, &job).await?;
            tracing::info!(job = %job, restore = %restore_name, "job of a failed restore suspended");
        }
    }
    // Gates open only after the Restore says Completed: no reader may see a Ready pod while the
    // Restore still claims to be running. A failure here is retried, since a Completed Restore
    // keeps asking for open gates.
    if p.open_gates {
        open_gates(ctx, &ns, &pod_list).await?;
    }
    // Told on the Restore as well, so that `kubectl describe restore` has the story too.
    if let Some(msg) = &p.failed {
        Metrics::outcome(&ctx.metrics.restores, "failed");
        ctx.metrics
            .restore_failures
            .get_or_create(&crate::metrics::StageLabels {
                stage: plan::failed_stage(&p.status).to_owned(),
            })
            .inc();
        let note = format!("Restore {restore_name} failed: {msg}");
        ctx.event(
            cluster,
            EventType::Warning,
            "RestoreFailed",
            "Restore",
            note.clone(),
        )
        .await;
        ctx.event(
            &restore,
            EventType::Warning,
            "RestoreFailed",
            "Restore",
            note,
        )
        .await;
    }
    if p.completed {
        Metrics::outcome(&ctx.metrics.restores, "completed");
        for (stage, secs) in plan::stage_durations(&p.status) {
            ctx.metrics
                .restore_stage_duration
                .get_or_create(&crate::metrics::StageLabels {
                    stage: stage.to_owned(),
                })
                .observe(secs);
        }
        ctx.metrics
            .restore_bytes
            .inc_by(data_bytes.saturating_mul(u64::try_from(comp.spec.replicas).unwrap_or(0)));
        let note = format!(
            "Restore {restore_name} completed: the live dataset matches Backup {}/{}",
            req.backup_namespace, req.backup_name
        );
        ctx.event(
            cluster,
            EventType::Normal,
            "RestoreCompleted",
            "Restore",
            note.clone(),
        )
        .await;
        ctx.event(
            &restore,
            EventType::Normal,
            "RestoreCompleted",
            "Restore",
            note,
        )
        .await;
    }
    // After the gates: marking done ends the restore for good, so it comes last, and it is
    // retried on every pass until written (the operator may stop right after `Completed`).
    if plan::should_mark_done(&p.status, cluster.annotations().contains_key(RESTORE_DONE)) {
        mark_done(ctx, cluster, &restore_name).await?;
    }
    // What the Restore says now, so the Cluster's condition changes only when it does.
    let mut shown = restore.clone();
    shown.status = Some(stored);
    Ok(StepOutcome {
        workload_allowed: p.workload_allowed,
        state: match waiting {
            Some(why) => RestoreState::Running(why),
            None => state_of(&shown),
        },
    })
}

/// Clears the restore intent so that later reconciles (scale-outs) never restore again.
async fn mark_done(ctx: &Context, cluster: &Cluster, restore: &str) -> Result<()> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({"metadata": {"annotations": {RESTORE_DONE: restore}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(
            "marking restore done on",
            format!("Cluster {ns}/{name}"),
        ))?;
    Ok(())
}

/// Sets the restore-verified readiness-gate condition on pods that lack it.
async fn open_gates(ctx: &Context, ns: &str, pods: &[Pod]) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    for p in pods {
        let open = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == labels::READINESS_GATE_RESTORE_VERIFIED && c.status == "True"
                })
            });
        if open {
            continue;
        }
        let name = p.name_any();
        let patch = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "status": {"conditions": [{
                "type": labels::READINESS_GATE_RESTORE_VERIFIED,
                "status": "True",
                "reason": "RestoreVerified",
                "message": "the restored data matches the backup's manifest",
                "lastTransitionTime": Time(ctx.clock.now()),
            }]}
        });
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube(
            "opening the restore gate of",
            format!("Pod {ns}/{name}"),
        ))?;
        tracing::info!(pod = %name, "restore readiness gate opened");
    }
    Ok(())
}

/// After a completed restore, pods created later (scale-out, rescheduling) start empty and sync
/// from the primary; their gate is opened as they appear.
pub async fn keep_gates_open(
    ctx: &Context,
    cluster: &Cluster,
    comp: &ValidComponent,
    r: &Restore,
) -> Result<()> {
    let done = r.status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Completed);
    if !done {
        return Ok(());
    }
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    // From the watch cache: a restored Cluster passes here every few seconds for good.
    let pods = crate::observed::workload_pods(ctx, &ns, &name, &comp.spec.name).await?;
    open_gates(ctx, &ns, &pods).await
}

/// A create's outcome: `Some` when the API server refused it for good (quoted), an error to retry
/// otherwise.
fn final_refusal(r: Result<bool>, stage: Stage) -> Result<Option<(Stage, String, String)>> {
    match r {
        Ok(_) => Ok(None),
        Err(Error::Kube {
            object,
            source: kube::Error::Api(s),
            ..
        }) if plan::refusal_is_final(s.code) => Ok(Some((
            stage,
            object,
            format!("{} ({})", s.message, s.reason),
        ))),
        Err(e) => Err(e),
    }
}

async fn write_restore_status(
    ctx: &Context,
    name: &str,
    ns: &str,
    status: &lifeboat_api::dataprotection::v1alpha1::RestoreStatus,
) -> Result<()> {
    kubeapi::apply_status::<Restore>(
        &ctx.client,
        name,
        ns,
        serde_json::to_value(status).map_err(|source| Error::Serialize {
            object: format!("status of Restore {ns}/{name}"),
            source,
        })?,
    )
    .await
}
