//! The operator as the tests see it: stopped and started again, as an outage would, and the
//! events it published.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::{TestNamespace, poll};

/// Where deploy/lifeboat.yaml runs the operator.
pub const NAMESPACE: &str = "lifeboat-system";
pub const DEPLOYMENT: &str = "lifeboat-operator";
pub const SELECTOR: &str = "app.kubernetes.io/name=lifeboat,app.kubernetes.io/component=operator";

async fn scale(client: &Client, replicas: i32) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    deployments
        .patch(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await?;
    Ok(())
}

/// Scales the operator to nothing and waits until no operator pod is left; returns how many
/// replicas it had, for [`start`].
pub async fn stop(client: &Client) -> Result<i32> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let replicas = deployments
        .get(DEPLOYMENT)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(1);
    scale(client, 0).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    poll(
        "every operator pod to be gone",
        Duration::from_secs(120),
        || async {
            let left = pods.list(&ListParams::default().labels(SELECTOR)).await?;
            Ok(if left.items.is_empty() {
                Ok(replicas)
            } else {
                Err(format!("{} operator pod(s) left", left.items.len()))
            })
        },
    )
    .await
}

/// Scales the operator back to `replicas` and waits until they are Ready (one of them leading,
/// or about to).
pub async fn start(client: &Client, replicas: i32) -> Result<()> {
    scale(client, replicas).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    poll(
        "the operator to be Ready again",
        Duration::from_secs(180),
        || async {
            let d = deployments.get(DEPLOYMENT).await?;
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            Ok(if ready >= replicas {
                Ok(())
            } else {
                Err(format!("{ready} ready replicas"))
            })
        },
    )
    .await
}

/// The events on the object `name` in the test's namespace, as `Reason: message`.
pub async fn events_on(ns: &TestNamespace, name: &str) -> Result<Vec<String>> {
    let events: Api<Event> = ns.api();
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect())
}
