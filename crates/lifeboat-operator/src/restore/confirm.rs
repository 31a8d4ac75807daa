//! Asks the API server before a pod is judged stuck for good because its volume is gone: the
//! scheduler and the kubelet say so from caches, which can lag behind a claim created a moment
//! before the pod.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::diagnose::{self, Stuck};
use crate::error::Result;
use crate::kubeapi;

/// `stuck` once the claims a terminal judgment rests on are read from the API server: still
/// terminal if one of them is absent or being deleted, otherwise left to the stage's deadline.
pub async fn confirmed(
    client: &kube::Client,
    ns: &str,
    stuck: Option<Stuck>,
) -> Result<Option<Stuck>> {
    let Some(stuck) = stuck else {
        return Ok(None);
    };
    if !stuck.terminal
        || stuck.claims.is_empty()
        || crate::mutation::active(crate::mutation::Mutation::TrustCachedClaimLoss)
    {
        return Ok(Some(stuck));
    }
    let mut gone = Vec::new();
    for claim in &stuck.claims {
        let pvc: Option<PersistentVolumeClaim> = kubeapi::get_opt(client, ns, claim).await?;
        if pvc.is_none_or(|p| p.metadata.deletion_timestamp.is_some()) {
            gone.push(claim.clone());
        }
    }
    Ok(Some(diagnose::settle(stuck, &gone)))
}
