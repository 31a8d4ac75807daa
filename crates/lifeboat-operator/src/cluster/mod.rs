//! The Cluster controller: validate, restore when asked, build and apply the workloads, keep the
//! role labels current, and report status.

pub mod build;
pub mod claims;
mod invalid_edit;
pub mod restore_step;
pub mod roles;
pub mod status;
pub mod termination;
#[cfg(test)]
pub mod test_support;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPolicy, BackupSchedule};
use lifeboat_api::labels;
use lifeboat_api::{Cluster, Restore};
use tracing::Instrument;

use crate::context::Context;
use crate::engine::ComponentKind;
use crate::engine::replication::MANAGER_PORT;
use crate::error::{Error, Result};
use crate::restore::intent::{self, Deadlines};
use crate::{kubeapi, naming, observed};
use build::BuildInput;
use status::{ComponentObs, RestoreState, StatusInput};

const CONTROLLER: &str = "cluster";

/// Runs the Cluster controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let clusters: Api<DeserializeGuard<Cluster>> = Api::all(client.clone());
    let wc = crate::observed::watch_config();
    let owned = crate::observed::watch_config().labels(&owned_selector());
    // The metadata of the objects every pass would re-apply, so that unchanged ones are not.
    let applied = &ctx.applied;
    let watches = [
        tokio::spawn(applied.watch::<ConfigMap>(client.clone(), &owned_selector())),
        tokio::spawn(applied.watch::<Service>(client.clone(), &owned_selector())),
        tokio::spawn(applied.watch::<StatefulSet>(client.clone(), &owned_selector())),
        tokio::spawn(applied.watch::<BackupPolicy>(client.clone(), &owned_selector())),
        tokio::spawn(applied.watch::<BackupSchedule>(client.clone(), &owned_selector())),
    ];
    // Jobs and pods are followed by their instance label, not only by a Cluster owner
    // reference: a restore's Jobs belong to its Restore, and its data pods to their StatefulSet,
    // yet each of their steps (a Job done, a server loaded) is what the Cluster's restore waits
    // for; without these triggers each step waited for the next 5 s pass.
    let controller = Controller::new(clusters, wc)
        .owns(Api::<StatefulSet>::all(client.clone()), owned.clone())
        .watches(Api::<Job>::all(client.clone()), owned.clone(), cluster_of)
        .watches(Api::<Pod>::all(client.clone()), owned.clone(), cluster_of)
        .owns(
            Api::<Restore>::all(client.clone()),
            crate::observed::watch_config(),
        );
    // What every pass reads comes from caches (crate::observed); the fleet gauges are read from
    // them and from the controller's Clusters at each scrape (crate::fleet).
    let caches = ctx.observed.start(&client);
    let cluster_cache = controller.store();
    let observed = ctx.observed.clone();
    ctx.metrics.set_fleet_source(Arc::new(move || {
        let clusters = cluster_cache.state();
        let restores = observed.all_restores().unwrap_or_default();
        crate::fleet::of(
            clusters.iter().filter_map(|c| c.0.as_ref().ok()),
            restores.iter().map(AsRef::as_ref),
        )
    }));
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile_guarded, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "cluster reconcile finished with an error");
            }
        })
        .await;
    for w in watches.into_iter().chain(caches) {
        w.abort();
    }
}

fn owned_selector() -> String {
    observed::managed()
}

/// The Cluster an object Lifeboat made belongs to: its controlling Cluster, or else the Cluster
/// its instance label names in its namespace.
fn cluster_of<K: Resource>(o: K) -> Option<ObjectRef<DeserializeGuard<Cluster>>> {
    let meta = o.meta();
    let ns = meta.namespace.as_deref()?;
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| {
            r.controller == Some(true)
                && r.kind == "Cluster"
                && r.api_version == Cluster::api_version(&())
        })
        .map(|r| r.name.as_str());
    let name = owner.or_else(|| {
        meta.labels
            .as_ref()?
            .get(labels::INSTANCE)
            .map(String::as_str)
    })?;
    Some(ObjectRef::new(name).within(ns))
}

async fn reconcile_guarded(
    obj: Arc<DeserializeGuard<Cluster>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    match &obj.0 {
        Ok(cluster) => {
            reconcile(cluster, &ctx)
                .instrument(crate::telemetry::reconcile_span(
                    CONTROLLER,
                    cluster.namespace().as_deref(),
                    &cluster.name_any(),
                ))
                .await
        }
        Err(invalid) => {
            // One malformed object must not stop the watch; it is reported and skipped.
            tracing::warn!(name = ?invalid.metadata.name, namespace = ?invalid.metadata.namespace, error = %invalid.error, "skipping a Cluster that does not deserialize");
            Ok(Action::await_change())
        }
    }
}

fn error_policy(obj: Arc<DeserializeGuard<Cluster>>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failure(CONTROLLER, err.metric_label());
    let name = obj.0.as_ref().map(|c| c.name_any()).unwrap_or_default();
    if err.namespace_terminating() {
        // Every object the pass re-applies is refused until the Cluster's own deletion starts.
        tracing::info!(cluster = %name, error = %err, "the Cluster's namespace is being deleted; waiting for the Cluster's deletion");
    } else {
        tracing::warn!(cluster = %name, error = %err, "cluster reconcile failed; retrying");
    }
    Action::requeue(Duration::from_secs(5))
}

/// One reconcile of a Cluster.
pub async fn reconcile(cluster: &Cluster, ctx: &Context) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    if cluster.meta().deletion_timestamp.is_some() {
        return termination::on_delete(cluster, ctx).await;
    }
    termination::ensure_finalizer(ctx, cluster).await?;

    let previous = cluster.status.clone().unwrap_or_default();
    let mut status_input = StatusInput {
        now: Time(ctx.clock.now()),
        generation: cluster.meta().generation,
        previous,
        invalid: None,
        rejected_edit: None,
        restore: RestoreState::None,
        components: Vec::new(),
        deleting: false,
    };

    // Validation and the restore request come before anything is created.
    let valid = match validate::validate(cluster) {
        Ok(v) => v,
        Err(invalid) => {
            return invalid_edit::reconcile(cluster, ctx, status_input, invalid).await;
        }
    };
    let deadlines = Deadlines {
        prepare_data: ctx.config.prepare_data_deadline,
        post_ready: ctx.config.post_ready_deadline,
    };
    let restore_intent = match intent::intent(cluster, &valid, deadlines) {
        Ok(i) => i,
        Err(invalid) => return fail_invalid(cluster, ctx, status_input, invalid).await,
    };

    // With a restore request, whether it arrived late is decided from these: read from the API
    // server, not a cache that may not have seen the Restore created a moment ago.
    let restore_objects: Vec<Restore> =
        observed::restores_of(ctx, &ns, &name, restore_intent.is_some()).await?;
    // A restore applies only when a Cluster is created. One asked of a Cluster that already runs
    // (the annotation added later; spec.restore is immutable) must not touch the workload: no
    // gate, no roll, no Job aimed at live volumes.
    let mut refused = None;
    if let (Some(i), Some(data)) = (&restore_intent, valid.data()) {
        let sts = naming::workload(&name, &data.spec.name);
        // Only this Cluster's own count: an earlier Cluster of the same name may still be
        // going (see restore/leftovers.rs), and its objects say nothing about this one.
        let uid = cluster.metadata.uid.clone().unwrap_or_default();
        let workload = observed::statefulset(ctx, &ns, &sts)
            .await?
            .is_some_and(|s| crate::ownership::controlled_by(&s.metadata, &uid));
        let restore_object = restore_objects.iter().any(|r| {
            r.name_any() == naming::restore(&name, &data.spec.name)
                && crate::restore::leftovers::restore_is_ours(&r.metadata, &uid)
        });
        if intent::arrived_late(workload, restore_object) {
            let why = format!(
                "a restore only applies when a Cluster is created: Cluster {ns}/{name} already runs \
                 (StatefulSet {ns}/{sts} exists), so the restore from {} is refused and the running \
                 workload is left as it is; create a new Cluster with spec.restore instead",
                i.source_description()
            );
            let known = cluster.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == lifeboat_api::conditions::RESTORE
                        && c.reason == lifeboat_api::conditions::REASON_RESTORE_REFUSED
                })
            });
            if !known {
                ctx.event(
                    cluster,
                    EventType::Warning,
                    lifeboat_api::conditions::REASON_RESTORE_REFUSED,
                    "Restore",
                    why.clone(),
                )
                .await;
            }
            refused = Some(why);
        }
    }
    let restore_intent = if refused.is_some() {
        None
    } else {
        restore_intent
    };
    let input = BuildInput {
        cluster,
        valid: &valid,
        image: &ctx.config.database_image,
        manager_image: &ctx.config.mover_image,
        domain: &ctx.config.cluster_domain,
        restore_gate: false,
        pods: &ctx.config.pods,
    };

    // The password is created once and never re-applied. Read first: a create refused as a
    // conflict on every pass would be a write request every few seconds.
    let password = match read_password_opt(ctx, cluster, &ns, &input.secret_name()).await? {
        Some(p) => p,
        None => {
            if kubeapi::create_if_absent(
                &ctx.client,
                &build::account_secret(&input, build::generate_password()),
            )
            .await?
            {
                tracing::info!(cluster = %name, "created account secret");
            }
            read_password(ctx, cluster, &ns, &input.secret_name()).await?
        }
    };

    let mut restore_state = refused.map_or(RestoreState::None, RestoreState::Refused);
    for comp in &valid.components {
        let applied = &ctx.applied;
        kubeapi::apply_changed(&ctx.client, applied, &build::config_map(&input, comp)).await?;
        kubeapi::apply_changed(&ctx.client, applied, &build::headless_service(&input, comp))
            .await?;
        kubeapi::apply_changed(&ctx.client, applied, &build::client_service(&input, comp)).await?;
        if comp.def.kind == ComponentKind::Data {
            let policy = crate::backup::policy::default_policy(
                cluster,
                &comp.spec.name,
                &input.secret_name(),
                crate::schedule::for_cluster::repo(cluster),
            );
            kubeapi::apply_changed(&ctx.client, applied, &policy).await?;
            if let Some(backup) = &cluster.spec.backup {
                let schedule =
                    crate::schedule::for_cluster::schedule(cluster, &comp.spec.name, backup);
                kubeapi::apply_changed(&ctx.client, applied, &schedule).await?;
            }
        }

        let req = restore_intent
            .as_ref()
            .and_then(|i| i.components.iter().find(|c| c.component == comp.spec.name));
        let uid = cluster.metadata.uid.clone().unwrap_or_default();
        let existing_restore = restore_objects.iter().find(|r| {
            r.name_any() == naming::restore(&name, &comp.spec.name)
                && crate::restore::leftovers::restore_is_ours(&r.metadata, &uid)
        });
        // Data pods of a component that was restored keep the gate for good: removing it would
        // roll every pod; the operator opens it on each pod once the restore completed.
        let gated = req.is_some() || existing_restore.is_some();
        let comp_input = BuildInput {
            restore_gate: gated,
            ..input_clone(&input)
        };
        let workload_allowed = match req {
            Some(req) => {
                let outcome = restore_step::step(
                    cluster,
                    ctx,
                    &valid,
                    comp,
                    req,
                    restore_intent.as_ref().map(|i| i.source),
                )
                .await?;
                restore_state = merge_restore(restore_state, outcome.state.clone());
                outcome.workload_allowed
            }
            None => {
                if let Some(r) = existing_restore.filter(|_| comp.def.kind == ComponentKind::Data) {
                    restore_step::keep_gates_open(ctx, cluster, comp, r).await?;
                    if restore_state == RestoreState::None {
                        restore_state = restore_step::state_of(r);
                    }
                }
                true
            }
        };
        let sts_name = naming::workload(&name, &comp.spec.name);
        let mut obs = ComponentObs {
            name: comp.spec.name.clone(),
            replicas: comp.spec.replicas,
            ..Default::default()
        };
        if workload_allowed {
            let mut built = build::statefulset(&comp_input, comp);
            let existing = observed::statefulset(ctx, &ns, &sts_name).await?;
            match &existing {
                Some(existing) => build::keep_claim_templates(&mut built, existing),
                // Gone since the watch last saw it, or never made: sent whatever it says.
                None => ctx.applied.forget(&built),
            }
            let sts = kubeapi::apply_changed(&ctx.client, &ctx.applied, &built)
                .await?
                .or(existing);
            obs.workload = true;
            obs.ready_replicas = sts
                .and_then(|s| s.status)
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
        } else if let Some(sts) = observed::statefulset(ctx, &ns, &sts_name).await? {
            obs.workload = true;
            obs.ready_replicas = sts.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        }
        if obs.workload {
            obs.problems = observe_roles(ctx, cluster, &valid, comp, &password).await?;
        }
        status_input.components.push(obs);
    }
    // Claims made before Lifeboat labelled them get the label while their pods are running, so
    // that termination can prove they are this Cluster's.
    claims::adopt(ctx, cluster).await?;
    status_input.restore = restore_state;
    let st = status::compute(&status_input);
    let requeue = match st.phase {
        Some(lifeboat_api::ClusterPhase::Failed) => Duration::from_secs(60),
        _ => Duration::from_secs(5),
    };
    write_status_if_changed(ctx, cluster, &st).await?;
    Ok(Action::requeue(requeue))
}

fn input_clone<'a>(i: &BuildInput<'a>) -> BuildInput<'a> {
    BuildInput {
        cluster: i.cluster,
        valid: i.valid,
        image: i.image,
        manager_image: i.manager_image,
        domain: i.domain,
        restore_gate: i.restore_gate,
        pods: i.pods,
    }
}

fn merge_restore(a: RestoreState, b: RestoreState) -> RestoreState {
    use RestoreState::*;
    match (a, b) {
        (Failed(m), _) | (_, Failed(m)) => Failed(m),
        (Running(m), _) | (_, Running(m)) => Running(m),
        (Completed(m), _) | (_, Completed(m)) => Completed(m),
        (Refused(m), _) | (_, Refused(m)) => Refused(m),
        (None, None) => None,
    }
}

/// Writes the status unless the Cluster already shows it (see [`status::needs_write`]).
async fn write_status_if_changed(
    ctx: &Context,
    cluster: &Cluster,
    st: &lifeboat_api::ClusterStatus,
) -> Result<()> {
    if !status::needs_write(cluster.status.as_ref(), st) {
        return Ok(());
    }
    let ns = cluster.namespace().unwrap_or_default();
    write_status(ctx, &cluster.name_any(), &ns, st).await
}

async fn write_status(
    ctx: &Context,
    name: &str,
    ns: &str,
    st: &lifeboat_api::ClusterStatus,
) -> Result<()> {
    let v = serde_json::to_value(st).map_err(|source| Error::Serialize {
        object: format!("status of Cluster {ns}/{name}"),
        source,
    })?;
    kubeapi::apply_status::<Cluster>(&ctx.client, name, ns, v).await
}

/// The pods of a Cluster's component that its StatefulSet runs.
pub async fn component_pods(
    ctx: &Context,
    ns: &str,
    cluster: &str,
    component: &str,
) -> Result<Vec<Pod>> {
    let all: Vec<Pod> = kubeapi::list(
        &ctx.client,
        ns,
        &format!(
            "{}={cluster},{}={component}",
            labels::INSTANCE,
            labels::COMPONENT_NAME
        ),
    )
    .await?;
    Ok(all.into_iter().filter(is_workload_pod).collect())
}

async fn read_password(ctx: &Context, cluster: &Cluster, ns: &str, secret: &str) -> Result<String> {
    read_password_opt(ctx, cluster, ns, secret)
        .await?
        .ok_or_else(|| Error::MissingField {
            object: format!("Secret {ns}/{secret}"),
            field: "data (the Secret is missing)",
        })
}

/// The password, `None` when the Secret does not exist; an error when it exists without one.
async fn read_password_opt(
    ctx: &Context,
    cluster: &Cluster,
    ns: &str,
    secret: &str,
) -> Result<Option<String>> {
    let uid = cluster.uid().unwrap_or_default();
    if let Some(p) = ctx.observed.password(ns, secret, &uid) {
        return Ok(Some(p));
    }
    let Some(s) = kubeapi::get_opt::<Secret>(&ctx.client, ns, secret).await? else {
        return Ok(None);
    };
    // An earlier Cluster's Secret, not yet collected, would hand its password to this Cluster's
    // restore Jobs and then vanish under its pods; its replacement, made once it is gone, is ours.
    if let Some(owner) = crate::ownership::earlier_controller(&s.metadata, "Cluster", &uid) {
        return Err(Error::EarlierLife {
            object: format!("Secret {ns}/{secret}"),
            owner,
        });
    }
    let password = s
        .data
        .as_ref()
        .and_then(|d| d.get(build::PASSWORD_KEY))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .ok_or_else(|| Error::MissingField {
            object: format!("Secret {ns}/{secret}"),
            field: "data.password",
        })?;
    ctx.observed.remember_password(ns, secret, &uid, &password);
    Ok(Some(password))
}

async fn fail_invalid(
    cluster: &Cluster,
    ctx: &Context,
    mut input: StatusInput,
    invalid: validate::Invalid,
) -> Result<Action> {
    let msg = invalid.to_string();
    if cluster.status.as_ref().and_then(|s| s.message.as_deref()) != Some(msg.as_str()) {
        ctx.event(
            cluster,
            EventType::Warning,
            "InvalidSpec",
            "Validate",
            msg.clone(),
        )
        .await;
    }
    input.invalid = Some(msg);
    let st = status::compute(&input);
    write_status_if_changed(ctx, cluster, &st).await?;
    Ok(Action::await_change())
}

/// Whether a pod belongs to a component's StatefulSet (and is not, say, a Job's pod that shares
/// the Cluster's labels).
pub fn is_workload_pod(p: &Pod) -> bool {
    p.owner_references().iter().any(|o| o.kind == "StatefulSet")
}

/// Observes roles for the data component of a replicated Cluster, labels the pods, and returns
/// what keeps the component from being healthy. Sentinels are checked for agreement.
async fn observe_roles(
    ctx: &Context,
    cluster: &Cluster,
    valid: &validate::ValidCluster,
    comp: &validate::ValidComponent,
    password: &str,
) -> Result<Vec<String>> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    if comp.def.kind != ComponentKind::Data {
        return Ok(Vec::new());
    }
    let pods = observed::workload_pods(ctx, &ns, &name, &comp.spec.name).await?;
    let mut servers = BTreeMap::new();
    let mut waiting = Vec::new();
    for p in &pods {
        let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let ordinal = p
            .name_any()
            .rsplit('-')
            .next()
            .and_then(|o| o.parse().ok())
            .unwrap_or(0);
        let fqdn = naming::pod_fqdn(
            &name,
            &comp.spec.name,
            ordinal,
            &ns,
            &ctx.config.cluster_domain,
        );
        let role = roles::server_role(&ip, comp.def.port, password).await;
        if matches!(role, roles::ServerRole::Unknown(_))
            && let Some(r) = roles::manager_report(&ip, MANAGER_PORT).await
            && let Some(problem) = roles::waiting_problem(&p.name_any(), &r)
        {
            waiting.push(problem);
        }
        servers.insert(p.name_any(), (fqdn, role));
    }
    let mut sentinel_masters = Vec::new();
    let mut sentinel_count = 0;
    if let Some(s) = valid.sentinel() {
        sentinel_count = usize::try_from(s.spec.replicas).unwrap_or(0);
        for p in &observed::workload_pods(ctx, &ns, &name, &s.spec.name).await? {
            if let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone())
                && let Some(m) = roles::sentinel_master(
                    &ip,
                    s.def.port,
                    &valid.engine.master_name(&name),
                    password,
                )
                .await
            {
                sentinel_masters.push(m);
            }
        }
    }
    let mut decided = roles::decide(&servers, &sentinel_masters, sentinel_count);
    // A pod that will not start its server says why; that reason leads the Cluster's message,
    // and a new one is an event.
    for w in waiting.iter().rev() {
        let known = cluster
            .status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .is_some_and(|m| m.contains(w.as_str()));
        if !known && w.contains("does not start") {
            ctx.event(
                cluster,
                EventType::Warning,
                "WaitingForData",
                "Start",
                w.clone(),
            )
            .await;
        }
        decided.problems.insert(0, w.clone());
    }
    for p in &pods {
        let pod_name = p.name_any();
        let Some(want) = decided.labels.get(&pod_name) else {
            continue;
        };
        if p.labels().get(labels::ROLE).map(String::as_str) != Some(*want) {
            // A merge patch, not an apply: an apply to a pod deleted since it was listed would
            // be a create, which the operator may not do (and is refused as such, not as
            // missing). The UID makes it a precondition: a pod re-created under the name in
            // between is not labelled with what its predecessor was.
            let patch = serde_json::json!({
                "metadata": {"uid": p.uid(), "labels": {labels::ROLE: want}}
            });
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            api.patch(
                &pod_name,
                &kube::api::PatchParams {
                    field_manager: Some(crate::FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .map_err(Error::kube(
                "labelling role of",
                format!("Pod {ns}/{pod_name}"),
            ))?;
            tracing::info!(cluster = %name, pod = %pod_name, role = want, "role label updated");
        }
    }
    Ok(decided.problems)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn meta(labels: &[(&str, &str)], owner: Option<(&str, &str)>) -> ObjectMeta {
        ObjectMeta {
            name: Some("x".into()),
            namespace: Some("ns".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            owner_references: owner.map(|(kind, name)| {
                vec![OwnerReference {
                    api_version: if kind == "Cluster" {
                        Cluster::api_version(&()).into_owned()
                    } else {
                        Restore::api_version(&()).into_owned()
                    },
                    kind: kind.into(),
                    name: name.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    #[test]
    fn restore_jobs_and_data_pods_wake_the_cluster_their_instance_label_names() {
        let job = Job {
            metadata: meta(
                &[(labels::INSTANCE, "r")],
                Some(("Restore", "r-falkordb-restore")),
            ),
            ..Default::default()
        };
        assert_eq!(
            cluster_of(job),
            Some(ObjectRef::new("r").within("ns")),
            "a Restore's Job"
        );
        let pod = Pod {
            metadata: meta(&[(labels::INSTANCE, "r")], None),
            ..Default::default()
        };
        assert_eq!(cluster_of(pod), Some(ObjectRef::new("r").within("ns")));
        let owned = Job {
            metadata: meta(&[(labels::INSTANCE, "other")], Some(("Cluster", "c"))),
            ..Default::default()
        };
        assert_eq!(
            cluster_of(owned),
            Some(ObjectRef::new("c").within("ns")),
            "the controlling Cluster comes first"
        );
        let unlabelled = Pod {
            metadata: meta(&[], None),
            ..Default::default()
        };
        assert_eq!(cluster_of(unlabelled), None);
    }
}
