//! Termination policies. A finalizer is used only where deletion needs the operator:
//! `DoNotTerminate` (to refuse it) and `WipeOut` (to delete the Cluster's backups). `Delete` is
//! left to garbage collection through owner references and the StatefulSets' PVC retention.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::apps::v1::TerminationPolicy;
use lifeboat_api::{Backup, Cluster, labels};

use crate::context::Context;
use crate::error::{Error, Result};

/// The finalizer Lifeboat puts on Clusters that need it.
pub const FINALIZER: &str = "lifeboat.io/termination";

fn needs_finalizer(c: &Cluster) -> bool {
    c.spec.termination_policy != TerminationPolicy::Delete
}

async fn set_finalizers(ctx: &Context, c: &Cluster, finalizers: Vec<String>) -> Result<()> {
    crate::kubeapi::set_finalizers(&ctx.client, c, finalizers).await
}

/// Adds the finalizer when the policy needs it, and removes it when it no longer does.
pub async fn ensure_finalizer(ctx: &Context, c: &Cluster) -> Result<()> {
    let has = c.finalizers().iter().any(|f| f == FINALIZER);
    match (needs_finalizer(c), has) {
        (true, false) => {
            let mut f = c.finalizers().to_vec();
            f.push(FINALIZER.into());
            set_finalizers(ctx, c, f).await
        }
        (false, true) => {
            let f = c
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect();
            set_finalizers(ctx, c, f).await
        }
        _ => Ok(()),
    }
}

/// Deletes the Cluster's PVCs. The StatefulSets' retention policy covers a Cluster deleted under
/// `Delete`, but not one whose policy was `DoNotTerminate` (retain) until just before; the
/// finalizer is still on such a Cluster, so this is where its volumes go. A PVC still mounted is
/// removed by Kubernetes once its pod is gone.
async fn delete_volumes(c: &Cluster, ctx: &Context) -> Result<()> {
    let name = c.name_any();
    let ns = c.namespace().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let lp = ListParams::default().labels(&format!("{}={name}", labels::INSTANCE));
    let list = pvcs.list(&lp).await.map_err(Error::kube(
        "listing volumes of",
        format!("Cluster {ns}/{name}"),
    ))?;
    for p in list
        .items
        .iter()
        .filter(|p| p.meta().deletion_timestamp.is_none())
    {
        pvcs.delete(&p.name_any(), &DeleteParams::background())
            .await
            .map_err(Error::kube(
                "deleting",
                format!("PersistentVolumeClaim {ns}/{}", p.name_any()),
            ))?;
    }
    Ok(())
}

/// Removes Lifeboat's finalizer, letting the deletion finish.
async fn release(ctx: &Context, c: &Cluster) -> Result<()> {
    let f = c
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, c, f).await
}

/// Handles a Cluster being deleted.
pub async fn on_delete(c: &Cluster, ctx: &Context) -> Result<Action> {
    let name = c.name_any();
    let ns = c.namespace().unwrap_or_default();
    if !c.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    match c.spec.termination_policy {
        TerminationPolicy::DoNotTerminate => {
            ctx.event(
                c,
                EventType::Warning,
                "DeletionRefused",
                "Delete",
                format!(
                    "Cluster {ns}/{name} has terminationPolicy DoNotTerminate, so its deletion is refused and nothing was removed; set spec.terminationPolicy to Delete or WipeOut to delete it"
                ),
            )
            .await;
            Ok(Action::requeue(std::time::Duration::from_secs(60)))
        }
        TerminationPolicy::WipeOut => {
            // Backups go first; each Backup's own finalizer removes its repo data.
            let backups: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
            let lp = ListParams::default().labels(&format!("{}={name}", labels::INSTANCE));
            let list = backups.list(&lp).await.map_err(Error::kube(
                "listing backups of",
                format!("Cluster {ns}/{name}"),
            ))?;
            for b in &list.items {
                if b.meta().deletion_timestamp.is_none() {
                    backups
                        .delete(&b.name_any(), &DeleteParams::background())
                        .await
                        .map_err(Error::kube(
                            "deleting",
                            format!("Backup {ns}/{}", b.name_any()),
                        ))?;
                    tracing::info!(cluster = %name, backup = %b.name_any(), "WipeOut: deleting backup");
                }
            }
            if !list.items.is_empty() {
                return Ok(Action::requeue(std::time::Duration::from_secs(2)));
            }
            delete_volumes(c, ctx).await?;
            release(ctx, c).await?;
            Ok(Action::await_change())
        }
        TerminationPolicy::Delete => {
            delete_volumes(c, ctx).await?;
            release(ctx, c).await?;
            Ok(Action::await_change())
        }
    }
}
