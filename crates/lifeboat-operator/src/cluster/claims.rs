//! Which PersistentVolumeClaims are a Cluster's. The decisions are pure ([`verdict`],
//! [`adoptable`]); [`adopt`] applies the one that labels claims of Clusters made before Lifeboat
//! labelled them, and termination applies [`verdict`] before it deletes anything.
//!
//! A claim is this Cluster's when it carries an owner reference to the Cluster's UID (restored
//! volumes), or when it has the exact name one of the Cluster's StatefulSets gives its claims
//! (`<template>-<cluster>-<component>-<ordinal>`) *and* the [`labels::CLUSTER_UID`] label with
//! the Cluster's UID. A claim with that exact name but no label is adopted (labelled) once it is
//! bound and mounted by a pod of this Cluster's StatefulSet; anything else is never touched.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use lifeboat_api::{Cluster, labels};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ownership::{controlled_by, label, owned_by};
use crate::{FIELD_MANAGER, kubeapi, naming};

/// What the decisions need to know of a Cluster: its name, UID, and the claim templates of each
/// component in its spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterIdentity {
    pub name: String,
    pub uid: String,
    /// Each component with the names of its claim templates.
    pub components: Vec<(String, Vec<String>)>,
}

impl ClusterIdentity {
    pub fn of(c: &Cluster) -> Self {
        Self {
            name: c.name_any(),
            uid: c.uid().unwrap_or_default(),
            components: c
                .spec
                .component_specs
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        s.volume_claim_templates
                            .iter()
                            .map(|t| t.name.clone())
                            .collect(),
                    )
                })
                .collect(),
        }
    }

    /// Whether `claim` is a name this Cluster's StatefulSets give their claims, for any ordinal:
    /// claims left by a scale-in keep theirs.
    pub fn is_claim_name(&self, claim: &str) -> bool {
        self.components.iter().any(|(component, templates)| {
            let workload = naming::workload(&self.name, component);
            templates.iter().any(|t| {
                claim
                    .strip_prefix(t.as_str())
                    .and_then(|r| r.strip_prefix('-'))
                    .and_then(|r| r.strip_prefix(workload.as_str()))
                    .and_then(|r| r.strip_prefix('-'))
                    .is_some_and(is_ordinal)
            })
        })
    }
}

/// A StatefulSet ordinal as the controller writes it: decimal digits, no leading zero.
fn is_ordinal(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'))
        && s.len() <= 10
}

/// The claims mounted by pods of this Cluster's StatefulSets. A StatefulSet counts when the
/// Cluster is its controller, a pod when such a StatefulSet is its controller, and a claim when
/// it has the name the StatefulSet gives it (`<volume>-<pod>`).
pub fn mounted_claims(
    cluster_uid: &str,
    statefulsets: &[StatefulSet],
    pods: &[Pod],
) -> BTreeSet<String> {
    let ours: BTreeSet<String> = statefulsets
        .iter()
        .filter(|s| controlled_by(s.meta(), cluster_uid))
        .filter_map(|s| s.uid())
        .collect();
    pods.iter()
        .filter(|p| ours.iter().any(|uid| controlled_by(p.meta(), uid)))
        .flat_map(|p| {
            let pod = p.name_any();
            p.spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .filter_map(move |v| {
                    let claim = &v.persistent_volume_claim.as_ref()?.claim_name;
                    (*claim == format!("{}-{pod}", v.name)).then(|| claim.clone())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Whether a claim made before the UID label existed is adopted: it has no UID label, has the
/// exact name of this Cluster's claims, is bound, and a pod of this Cluster's StatefulSet mounts
/// it.
pub fn adoptable(
    id: &ClusterIdentity,
    pvc: &PersistentVolumeClaim,
    mounted: &BTreeSet<String>,
) -> bool {
    let name = pvc.name_any();
    !id.uid.is_empty()
        && label(pvc.meta(), labels::CLUSTER_UID).is_none()
        && pvc.meta().deletion_timestamp.is_none()
        && id.is_claim_name(&name)
        && bound(pvc)
        && mounted.contains(&name)
}

/// Why a claim is the Cluster's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proof {
    /// An owner reference to the Cluster's UID (restored volumes).
    OwnerReference,
    /// The exact claim name and the Cluster's UID label.
    NameAndUidLabel,
    /// The exact claim name, bound and mounted by the Cluster's pod; adopted now.
    Adopted,
}

/// Why a claim is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// It carries another Cluster's UID: a Cluster of the same name that went before.
    OtherCluster(String),
    /// It carries this Cluster's UID but a name none of its StatefulSets uses.
    ForeignName,
    /// It has this Cluster's claim name but no UID label, and no pod of this Cluster mounts it.
    Unproven,
    /// Nothing ties it to this Cluster (at most labels that others set too).
    NotOurs,
}

impl Kept {
    /// Why, for the Warning event that names the claim.
    pub fn reason(&self) -> String {
        match self {
            Kept::OtherCluster(uid) => {
                format!(
                    "it carries {} of another Cluster ({uid})",
                    labels::CLUSTER_UID
                )
            }
            Kept::ForeignName => {
                "it carries this Cluster's UID under a name none of its StatefulSets uses".into()
            }
            Kept::Unproven => format!(
                "it has this Cluster's claim name but no {} label, and no pod of this Cluster mounts it",
                labels::CLUSTER_UID
            ),
            Kept::NotOurs => format!(
                "neither an owner reference to this Cluster nor its {} label",
                labels::CLUSTER_UID
            ),
        }
    }
}

/// Delete or keep, when the Cluster's volumes go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Delete(Proof),
    Keep(Kept),
}

/// Whether a claim goes with the Cluster.
pub fn verdict(
    id: &ClusterIdentity,
    pvc: &PersistentVolumeClaim,
    mounted: &BTreeSet<String>,
) -> Verdict {
    let meta = pvc.meta();
    if owned_by(meta, &id.uid) {
        return Verdict::Delete(Proof::OwnerReference);
    }
    let named = id.is_claim_name(&pvc.name_any());
    match label(meta, labels::CLUSTER_UID) {
        Some(uid) if uid == id.uid && !id.uid.is_empty() => {
            if named {
                Verdict::Delete(Proof::NameAndUidLabel)
            } else {
                Verdict::Keep(Kept::ForeignName)
            }
        }
        Some(uid) => Verdict::Keep(Kept::OtherCluster(uid.to_owned())),
        None if adoptable(id, pvc, mounted) => Verdict::Delete(Proof::Adopted),
        None if named => Verdict::Keep(Kept::Unproven),
        None => Verdict::Keep(Kept::NotOurs),
    }
}

/// Whether a kept claim looks like the Cluster's, so that a Warning names it: it carries the
/// Cluster's name as its instance label, its UID, or one of its claim names.
pub fn looks_related(id: &ClusterIdentity, pvc: &PersistentVolumeClaim) -> bool {
    let meta = pvc.meta();
    label(meta, labels::INSTANCE) == Some(id.name.as_str())
        || label(meta, labels::CLUSTER_UID) == Some(id.uid.as_str())
        || id.is_claim_name(&pvc.name_any())
}

/// Labels the claims of a Cluster made before Lifeboat labelled them ([`adoptable`]). Cheap when
/// there is nothing to adopt: one list of the unlabelled claims carrying the Cluster's name.
pub async fn adopt(ctx: &Context, cluster: &Cluster) -> Result<()> {
    let id = ClusterIdentity::of(cluster);
    if id.uid.is_empty() {
        return Ok(());
    }
    let ns = cluster.namespace().unwrap_or_default();
    if !crate::observed::may_have_loose_claims(ctx, &ns, &id.name) {
        return Ok(());
    }
    // Only a pre-filter: the claim name and the mounting pod are the proof.
    let candidates: Vec<PersistentVolumeClaim> = kubeapi::list(
        &ctx.client,
        &ns,
        &format!("{}={},!{}", labels::INSTANCE, id.name, labels::CLUSTER_UID),
    )
    .await?;
    if candidates.is_empty() {
        return Ok(());
    }
    let selector = format!("{}={}", labels::INSTANCE, id.name);
    let statefulsets: Vec<StatefulSet> = kubeapi::list(&ctx.client, &ns, &selector).await?;
    let pods: Vec<Pod> = kubeapi::list(&ctx.client, &ns, &selector).await?;
    let mounted = mounted_claims(&id.uid, &statefulsets, &pods);
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for pvc in candidates.iter().filter(|p| adoptable(&id, p, &mounted)) {
        let name = pvc.name_any();
        // A merge patch on exactly the claim that was judged (its UID is a precondition): an
        // apply would create a claim deleted meanwhile.
        let patch = serde_json::json!({
            "metadata": {"uid": pvc.uid(), "labels": {labels::CLUSTER_UID: id.uid}}
        });
        api.patch(
            &name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::kube(
            "adopting",
            format!("PersistentVolumeClaim {ns}/{name}"),
        ))?;
        tracing::info!(cluster = %id.name, pvc = %name, "adopted a volume made before the cluster UID label");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::field_report_cluster;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource, PodSpec, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    const UID: &str = "1b2c3d4e-0000-0000-0000-000000000001";
    const STS_UID: &str = "5757-0001";

    fn id() -> ClusterIdentity {
        ClusterIdentity::of(&field_report_cluster())
    }

    fn owner(kind: &str, uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            kind: kind.into(),
            uid: uid.into(),
            controller: Some(controller),
            ..Default::default()
        }
    }

    fn pvc(
        name: &str,
        labels_: &[(&str, &str)],
        owners: Vec<OwnerReference>,
        phase: &str,
    ) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels_
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                owner_references: (!owners.is_empty()).then_some(owners),
                ..Default::default()
            },
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn statefulset(name: &str, uid: &str, controller_uid: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                owner_references: Some(vec![owner("Cluster", controller_uid, true)]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn pod(name: &str, controller_uid: &str, claim: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                owner_references: Some(vec![owner("StatefulSet", controller_uid, true)]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.into(),
                        read_only: None,
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn our_mounts() -> BTreeSet<String> {
        mounted_claims(
            UID,
            &[statefulset("fdb-falkordb", STS_UID, UID)],
            &[pod("fdb-falkordb-0", STS_UID, "data-fdb-falkordb-0")],
        )
    }

    #[test]
    fn claim_names_are_exact() {
        let id = id();
        for yes in [
            "data-fdb-falkordb-0",
            "data-fdb-falkordb-1",
            "data-fdb-falkordb-7",
            "data-fdb-falkordb-sent-2",
        ] {
            assert!(id.is_claim_name(yes), "{yes}");
        }
        for no in [
            "data-fdb-falkordb",
            "data-fdb-falkordb-",
            "data-fdb-falkordb-01",
            "data-fdb-falkordb-x",
            "data-fdb-falkordb-sent",
            "data-fdb-helm-0",
            "data-fdbx-falkordb-0",
            "logs-fdb-falkordb-0",
            "data-fdb-falkordb-0-extra",
            "lifeboat-repo-r",
        ] {
            assert!(!id.is_claim_name(no), "{no}");
        }
    }

    #[test]
    fn only_pods_of_the_clusters_own_statefulset_count_as_mounting() {
        let sts = [
            statefulset("fdb-falkordb", STS_UID, UID),
            statefulset("fdb-impostor", "other-sts", "other-cluster"),
        ];
        let pods = [
            pod("fdb-falkordb-0", STS_UID, "data-fdb-falkordb-0"),
            pod("fdb-falkordb-1", "other-sts", "data-fdb-falkordb-1"),
            // A pod of ours mounting a claim under another pod's name is not the template's.
            pod("fdb-falkordb-2", STS_UID, "data-fdb-falkordb-3"),
        ];
        let m = mounted_claims(UID, &sts, &pods);
        assert_eq!(m, BTreeSet::from(["data-fdb-falkordb-0".to_owned()]));
    }

    /// The table the termination rule is checked against: each row a claim, what it carries,
    /// and whether it goes with the Cluster.
    #[test]
    fn termination_deletes_only_what_is_proven_the_clusters() {
        let id = id();
        let mounted = our_mounts();
        let instance = (labels::INSTANCE, "fdb");
        let ours = (labels::CLUSTER_UID, UID);
        let theirs = (labels::CLUSTER_UID, "0ther-uid");
        let rows: Vec<(&str, PersistentVolumeClaim, Verdict)> = vec![
            (
                "owned by the Cluster (a restored volume)",
                pvc(
                    "data-fdb-falkordb-1",
                    &[instance],
                    vec![owner("Cluster", UID, false)],
                    "Bound",
                ),
                Verdict::Delete(Proof::OwnerReference),
            ),
            (
                "exact name and this Cluster's UID label",
                pvc("data-fdb-falkordb-1", &[instance, ours], vec![], "Bound"),
                Verdict::Delete(Proof::NameAndUidLabel),
            ),
            (
                "left by a scale-in, labelled",
                pvc("data-fdb-falkordb-5", &[instance, ours], vec![], "Bound"),
                Verdict::Delete(Proof::NameAndUidLabel),
            ),
            (
                "labelled with another Cluster's UID",
                pvc("data-fdb-falkordb-1", &[instance, theirs], vec![], "Bound"),
                Verdict::Keep(Kept::OtherCluster("0ther-uid".into())),
            ),
            (
                "labelled with another UID, even when mounted by our pod",
                pvc("data-fdb-falkordb-0", &[instance, theirs], vec![], "Bound"),
                Verdict::Keep(Kept::OtherCluster("0ther-uid".into())),
            ),
            (
                "third-party labelled (a Helm release named fdb)",
                pvc(
                    "data-fdb-helm-0",
                    &[instance, (labels::MANAGED_BY, "Helm")],
                    vec![],
                    "Bound",
                ),
                Verdict::Keep(Kept::NotOurs),
            ),
            (
                "third-party, owned by something else",
                pvc(
                    "cache-fdb",
                    &[instance],
                    vec![owner("StatefulSet", "helm-sts", true)],
                    "Bound",
                ),
                Verdict::Keep(Kept::NotOurs),
            ),
            (
                "exact name without a label, not mounted by our pod",
                pvc("data-fdb-falkordb-1", &[instance], vec![], "Bound"),
                Verdict::Keep(Kept::Unproven),
            ),
            (
                "exact name without a label and no labels at all",
                pvc("data-fdb-falkordb-1", &[], vec![], "Pending"),
                Verdict::Keep(Kept::Unproven),
            ),
            (
                "exact name, bound and mounted by our pod: adopted",
                pvc("data-fdb-falkordb-0", &[instance], vec![], "Bound"),
                Verdict::Delete(Proof::Adopted),
            ),
            (
                "exact name, mounted by our pod but not bound",
                pvc("data-fdb-falkordb-0", &[instance], vec![], "Pending"),
                Verdict::Keep(Kept::Unproven),
            ),
            (
                "this Cluster's UID on a name it does not use",
                pvc("scratch", &[ours], vec![], "Bound"),
                Verdict::Keep(Kept::ForeignName),
            ),
        ];
        for (what, p, want) in rows {
            assert_eq!(verdict(&id, &p, &mounted), want, "{what}");
        }
    }

    #[test]
    fn adoption_needs_name_binding_and_our_pod_and_no_label() {
        let id = id();
        let mounted = our_mounts();
        let instance = (labels::INSTANCE, "fdb");
        assert!(adoptable(
            &id,
            &pvc("data-fdb-falkordb-0", &[instance], vec![], "Bound"),
            &mounted
        ));
        for (what, p) in [
            (
                "already labelled",
                pvc(
                    "data-fdb-falkordb-0",
                    &[instance, (labels::CLUSTER_UID, UID)],
                    vec![],
                    "Bound",
                ),
            ),
            (
                "not bound",
                pvc("data-fdb-falkordb-0", &[instance], vec![], "Pending"),
            ),
            (
                "not mounted by our pod",
                pvc("data-fdb-falkordb-1", &[instance], vec![], "Bound"),
            ),
            (
                "another name",
                pvc("data-fdb-helm-0", &[instance], vec![], "Bound"),
            ),
        ] {
            assert!(!adoptable(&id, &p, &mounted), "{what}");
        }
        let mut deleting = pvc("data-fdb-falkordb-0", &[instance], vec![], "Bound");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!adoptable(&id, &deleting, &mounted), "being deleted");
        let anonymous = ClusterIdentity {
            uid: String::new(),
            ..id.clone()
        };
        assert!(!adoptable(
            &anonymous,
            &pvc("data-fdb-falkordb-0", &[instance], vec![], "Bound"),
            &mounted
        ));
    }

    #[test]
    fn warnings_name_only_claims_that_look_like_the_clusters() {
        let id = id();
        assert!(looks_related(
            &id,
            &pvc("x", &[(labels::INSTANCE, "fdb")], vec![], "Bound")
        ));
        assert!(looks_related(
            &id,
            &pvc("data-fdb-falkordb-3", &[], vec![], "Bound")
        ));
        assert!(!looks_related(
            &id,
            &pvc("x", &[(labels::INSTANCE, "other")], vec![], "Bound")
        ));
    }
}
