//! A Cluster whose latest edit is invalid. If it never ran, it is `Failed` naming the field. If
//! it runs, the edit is refused, naming the field, and nothing is applied, but the running
//! workload is still followed as the spec it was built from describes it: role labels (and so
//! the client Service) follow failovers, and the status stays current. Freezing it instead would
//! leave the Service pointing at a primary that is gone.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use std::time::Duration;

use super::build::{self, BuildInput};
use super::status::{self, ComponentObs, StatusInput};
use super::validate::{self, Invalid};
use crate::context::Context;
use crate::error::Result;
use crate::ownership::controlled_by;
use crate::{kubeapi, naming};

/// Reconciles a Cluster whose spec does not validate.
pub async fn reconcile(
    cluster: &lifeboat_api::Cluster,
    ctx: &Context,
    mut input: StatusInput,
    invalid: Invalid,
) -> Result<Action> {
    let Some(applied) = applied(ctx, cluster).await? else {
        return super::fail_invalid(cluster, ctx, input, invalid).await;
    };
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let mut running = cluster.clone();
    running.spec = applied;
    let Ok(valid) = validate::validate(&running) else {
        return super::fail_invalid(cluster, ctx, input, invalid).await;
    };
    let why = invalid.to_string();
    let known = cluster
        .status
        .as_ref()
        .and_then(|s| s.message.as_deref())
        .is_some_and(|m| m.contains(why.as_str()));
    if !known {
        ctx.event(
            cluster,
            EventType::Warning,
            "InvalidSpec",
            "Validate",
            format!("{why}; the edit is not applied and the running workload is kept"),
        )
        .await;
    }
    let bi = BuildInput {
        cluster: &running,
        valid: &valid,
        image: "",
        manager_image: "",
        domain: "",
        restore_gate: false,
        pods: &ctx.config.pods,
    };
    let password = super::read_password(ctx, cluster, &ns, &bi.secret_name()).await?;
    for comp in &valid.components {
        let mut obs = ComponentObs {
            name: comp.spec.name.clone(),
            replicas: comp.spec.replicas,
            ..Default::default()
        };
        let sts_name = naming::workload(&name, &comp.spec.name);
        if let Some(sts) = crate::observed::statefulset(ctx, &ns, &sts_name).await? {
            obs.workload = true;
            obs.ready_replicas = sts.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            obs.problems = super::observe_roles(ctx, &running, &valid, comp, &password).await?;
        }
        input.components.push(obs);
    }
    input.rejected_edit = Some(why);
    let st = status::compute(&input);
    super::write_status_if_changed(ctx, cluster, &st).await?;
    // Roles keep being followed at the usual pace until the spec is fixed.
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// The spec the Cluster's running workload was built from, read from its StatefulSets (their
/// `lifeboat.io/applied-spec`); `None` when it has none that this Cluster controls.
async fn applied(
    ctx: &Context,
    cluster: &lifeboat_api::Cluster,
) -> Result<Option<lifeboat_api::apps::v1::ClusterSpec>> {
    let ns = cluster.namespace().unwrap_or_default();
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let list: Vec<StatefulSet> = kubeapi::list(
        &ctx.client,
        &ns,
        &format!("{}={}", lifeboat_api::labels::INSTANCE, cluster.name_any()),
    )
    .await?;
    Ok(list
        .iter()
        .filter(|s| controlled_by(&s.metadata, &uid))
        .find_map(build::applied_spec))
}
