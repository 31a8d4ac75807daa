//! What a BackupRepo leaves in the namespaces that use it: a copy of its credential Secret (S3
//! stores) or its volume (`pvc` repos). Both carry the repo's UID ([`labels::BACKUP_REPO_UID`]).
//! The credential copy is owned by the repo, so it goes with it; the volume is owned by the repo
//! only under `pvReclaimPolicy: Delete`. A namespace that no longer uses the repo loses its
//! credential copy, and its volume under `Delete`: [`sweep`], from the repo's periodic reconcile.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, PvReclaimPolicy, RestorePhase};
use lifeboat_api::{Backup, BackupRepo, Restore, labels};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ownership::{label, labelled};
use crate::{kubeapi, naming};

/// The owner references a repo volume should carry: the repo's only under `Delete`, so that
/// deleting the repo deletes the volume exactly when its policy says so. `None` when `existing`
/// is already right.
pub fn volume_owners(
    existing: &[OwnerReference],
    repo: &OwnerReference,
    policy: PvReclaimPolicy,
) -> Option<Vec<OwnerReference>> {
    let has = existing.iter().any(|o| o.uid == repo.uid);
    let want = policy == PvReclaimPolicy::Delete;
    if has == want {
        return None;
    }
    let mut refs: Vec<OwnerReference> = existing
        .iter()
        .filter(|o| o.uid != repo.uid)
        .cloned()
        .collect();
    if want {
        refs.push(repo.clone());
    }
    Some(refs)
}

/// Whose a repo volume that already exists under the repo's volume name is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExistingVolume {
    /// It carries this repo's UID.
    Ours,
    /// Made by Lifeboat before copies carried the repo's UID: Lifeboat's name for this repo's
    /// volume and Lifeboat's managed-by label, and Lifeboat is about to mount it for this repo.
    Adopt,
    /// It carries another repo's UID (a repo of the same name that went before), or is not
    /// Lifeboat's: used as it always was, never labelled, never deleted.
    Foreign,
}

/// Whose the existing volume `pvc` is, for repo `repo_uid`.
pub fn existing_volume(pvc: &PersistentVolumeClaim, repo_uid: &str) -> ExistingVolume {
    let meta = pvc.meta();
    if labelled(meta, labels::BACKUP_REPO_UID, repo_uid) {
        return ExistingVolume::Ours;
    }
    if label(meta, labels::BACKUP_REPO_UID).is_none()
        && label(meta, labels::MANAGED_BY) == Some(labels::MANAGED_BY_VALUE)
    {
        return ExistingVolume::Adopt;
    }
    ExistingVolume::Foreign
}

/// Whether a Job that has not finished mounts or reads a copy of `repo`.
fn job_uses(job: &Job, repo: &str) -> bool {
    if crate::kubeapi::job_finished(job) {
        return false;
    }
    let secret = naming::repo_credential(repo);
    let claim = naming::repo_pvc(repo);
    let spec: Option<&PodSpec> = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    spec.is_some_and(|p| {
        let env_refs = p
            .containers
            .iter()
            .flat_map(|c| c.env.iter().flatten())
            .filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
            .any(|r| r.name == secret);
        let volumes = p.volumes.iter().flatten().any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.claim_name == claim)
                || v.secret
                    .as_ref()
                    .is_some_and(|s| s.secret_name.as_deref() == Some(secret.as_str()))
        });
        env_refs || volumes
    })
}

/// Why a namespace still uses `repo`, or `None` when it no longer does: no Backup there is stored
/// in the repo (or, not started yet, might be), no restore is under way, and no unfinished Job
/// of Lifeboat's reads the repo's copies.
pub fn in_use(
    repo: &str,
    backups: &[Backup],
    restores: &[Restore],
    jobs: &[Job],
) -> Option<String> {
    if let Some(why) = backups_use(repo, backups) {
        return Some(why);
    }
    if let Some(r) = restores.iter().find(|r| {
        !matches!(
            r.status.as_ref().and_then(|s| s.phase),
            Some(RestorePhase::Completed | RestorePhase::Failed)
        )
    }) {
        return Some(format!("Restore {} is under way", r.name_any()));
    }
    jobs.iter()
        .find(|j| job_uses(j, repo))
        .map(|j| format!("Job {} reads it", j.name_any()))
}

/// Why the Backups of a namespace keep it using `repo`: one is stored there, or has not chosen
/// its repo yet.
pub fn backups_use(repo: &str, backups: &[Backup]) -> Option<String> {
    for b in backups {
        let st = b.status.as_ref();
        match st.and_then(|s| s.backup_repo_name.as_deref()) {
            Some(r) if r == repo => {
                return Some(format!("Backup {} is stored in it", b.name_any()));
            }
            Some(_) => {}
            None => {
                let phase = st.and_then(|s| s.phase);
                if !matches!(phase, Some(BackupPhase::Completed | BackupPhase::Failed)) {
                    return Some(format!(
                        "Backup {} has not chosen its repo yet",
                        b.name_any()
                    ));
                }
            }
        }
    }
    None
}

/// The labels and annotation every copy of `repo` carries.
fn copy_meta(repo: &BackupRepo, name: String, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_owned()),
        labels: Some(BTreeMap::from([
            (
                labels::MANAGED_BY.to_owned(),
                labels::MANAGED_BY_VALUE.to_owned(),
            ),
            (labels::BACKUP_REPO.to_owned(), repo.name_any()),
            (
                labels::BACKUP_REPO_UID.to_owned(),
                repo.uid().unwrap_or_default(),
            ),
        ])),
        annotations: Some(BTreeMap::from([(
            labels::REPO_ACCESS_AT.to_owned(),
            k8s_openapi::jiff::Timestamp::now().to_string(),
        )])),
        ..Default::default()
    }
}

/// The keys of a repo's credential Secret that the mover reads; nothing else is copied.
pub const CREDENTIAL_KEYS: &[&str] = &["accessKeyId", "secretAccessKey"];

/// The copy of the repo's credential Secret in `namespace`, owned by the repo: the keys the
/// mover needs ([`CREDENTIAL_KEYS`]) and no other.
pub fn credential_copy(repo: &BackupRepo, namespace: &str, src: &Secret) -> Secret {
    let mut metadata = copy_meta(repo, naming::repo_credential(&repo.name_any()), namespace);
    metadata.owner_references = repo.controller_owner_ref(&()).map(|o| vec![o]);
    let data = src.data.as_ref().map(|d| {
        d.iter()
            .filter(|(k, _)| CREDENTIAL_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    Secret {
        metadata,
        data,
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// The repo volume's metadata: owned by the repo only under `Delete`.
pub fn volume_meta(repo: &BackupRepo, namespace: &str) -> ObjectMeta {
    let mut m = copy_meta(repo, naming::repo_pvc(&repo.name_any()), namespace);
    if repo.spec.pv_reclaim_policy == PvReclaimPolicy::Delete {
        m.owner_references = repo.controller_owner_ref(&()).map(|o| vec![o]);
    }
    m
}

/// Marks an existing repo volume as used now, adopting it when Lifeboat made it before copies
/// carried the repo's UID, and setting its owner references to the repo's policy. A volume that
/// is not this repo's is left as it is.
pub async fn touch_volume(
    ctx: &Context,
    repo: &BackupRepo,
    existing: &PersistentVolumeClaim,
) -> Result<()> {
    let uid = repo.uid().unwrap_or_default();
    let ns = existing.namespace().unwrap_or_default();
    let name = existing.name_any();
    if existing_volume(existing, &uid) == ExistingVolume::Foreign {
        tracing::warn!(repo = %repo.name_any(), pvc = %format!("{ns}/{name}"), "the repo volume's name is taken by a claim of another repo or owner; it is used but never labelled or deleted by Lifeboat");
        return Ok(());
    }
    let want = volume_meta(repo, &ns);
    let mut patch = serde_json::json!({
        "metadata": {"labels": want.labels, "annotations": want.annotations}
    });
    if let Some(repo_ref) = repo.controller_owner_ref(&())
        && let Some(refs) = volume_owners(
            existing.owner_references(),
            &repo_ref,
            repo.spec.pv_reclaim_policy,
        )
    {
        // The list is replaced whole, so only over the version it was computed from.
        patch["metadata"]["ownerReferences"] = serde_json::json!(refs);
        patch["metadata"]["resourceVersion"] = serde_json::json!(existing.resource_version());
    }
    Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube(
            "marking the repo volume",
            format!("PersistentVolumeClaim {ns}/{name}"),
        ))?;
    Ok(())
}

/// Deletes `meta`'s object only if it is still the version that was judged unused: a Job given
/// access since then rewrote [`labels::REPO_ACCESS_AT`], and the delete fails its precondition.
fn unchanged(meta: &ObjectMeta) -> DeleteParams {
    DeleteParams::background().preconditions(Preconditions {
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
    })
}

/// Ignores a delete that failed its precondition or found the object gone: the next sweep judges
/// it again.
fn tolerate_race(r: std::result::Result<(), kube::Error>) -> std::result::Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        other => other,
    }
}

/// Removes the copies of `repo` from namespaces that no longer use it ([`in_use`]): the
/// credential copy always, the volume under `pvReclaimPolicy: Delete` (under `Retain` it stays,
/// with the backups in it). Credential copies are found through the namespaces recorded on the
/// repo ([`super::namespaces`]) and deleted only when they carry the repo's UID; volumes by the
/// repo's UID label.
pub async fn sweep(ctx: &Context, repo: &BackupRepo) -> Result<()> {
    let Some(uid) = repo.uid().filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    let name = repo.name_any();
    let lp = ListParams::default().labels(&format!("{}={uid}", labels::BACKUP_REPO_UID));
    let recorded = super::namespaces::recorded(repo);
    let copy_name = naming::repo_credential(&name);
    let volumes = Api::<PersistentVolumeClaim>::all(ctx.client.clone())
        .list(&lp)
        .await
        .map_err(Error::kube(
            "listing volumes of",
            format!("BackupRepo {name}"),
        ))?
        .items;
    let namespaces: std::collections::BTreeSet<String> = recorded
        .iter()
        .cloned()
        .chain(volumes.iter().filter_map(|v| v.namespace()))
        .collect();
    let delete_volumes = repo.spec.pv_reclaim_policy == PvReclaimPolicy::Delete;
    for ns in namespaces {
        let backups: Vec<Backup> = kubeapi::list(&ctx.client, &ns, "").await?;
        // Most namespaces keep a Backup in the repo: one list says so, and the sweep, which runs
        // on every probe, reads nothing more there.
        if let Some(why) = backups_use(&name, &backups) {
            tracing::debug!(repo = %name, namespace = %ns, why, "repo still in use");
            continue;
        }
        let restores: Vec<Restore> = kubeapi::list(&ctx.client, &ns, "").await?;
        let jobs: Vec<Job> = kubeapi::list(
            &ctx.client,
            &ns,
            &format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE),
        )
        .await?;
        if let Some(why) = in_use(&name, &backups, &restores, &jobs) {
            tracing::debug!(repo = %name, namespace = %ns, why, "repo still in use");
            continue;
        }
        if recorded.contains(&ns) {
            let copy: Option<Secret> = kubeapi::get_opt(&ctx.client, &ns, &copy_name).await?;
            if let Some(s) = copy.filter(|s| labelled(s.meta(), labels::BACKUP_REPO_UID, &uid)) {
                let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
                tolerate_race(
                    api.delete(&copy_name, &unchanged(s.meta()))
                        .await
                        .map(|_| ()),
                )
                .map_err(Error::kube("deleting", format!("Secret {ns}/{copy_name}")))?;
                tracing::info!(repo = %name, namespace = %ns, secret = %copy_name, "namespace no longer uses the repo: credential copy deleted");
            }
            // The record goes once no copy of this repo is left there (a copy made again since
            // was recorded before it was made, and the next sweep sees it).
            let still: Option<Secret> = kubeapi::get_opt(&ctx.client, &ns, &copy_name).await?;
            if !still.is_some_and(|s| labelled(s.meta(), labels::BACKUP_REPO_UID, &uid)) {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    super::namespaces::copy_key(&ns): null
                }}});
                Api::<BackupRepo>::all(ctx.client.clone())
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(Error::kube(
                        "forgetting a credential copy on",
                        format!("BackupRepo {name}"),
                    ))?;
            }
        }
        if !delete_volumes {
            continue;
        }
        for v in volumes
            .iter()
            .filter(|v| v.namespace().as_deref() == Some(&ns))
        {
            if v.meta().deletion_timestamp.is_some() {
                continue;
            }
            let vname = v.name_any();
            let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
            tolerate_race(api.delete(&vname, &unchanged(v.meta())).await.map(|_| ())).map_err(
                Error::kube("deleting", format!("PersistentVolumeClaim {ns}/{vname}")),
            )?;
            tracing::info!(repo = %name, namespace = %ns, pvc = %vname, "namespace no longer uses the repo: volume deleted (pvReclaimPolicy Delete)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_copy_holds_only_the_keys_the_mover_reads() {
        let repo: BackupRepo = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "BackupRepo",
            "metadata": {"name": "s3", "uid": "u-1"},
            "spec": {"storageProviderRef": "s3", "pvReclaimPolicy": "Retain"}
        }))
        .expect("repo");
        let src: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cred", "namespace": "ops"},
            "data": {"accessKeyId": "YQ==", "secretAccessKey": "Yg==", "rootPassword": "Yw=="}
        }))
        .expect("secret");
        let copy = credential_copy(&repo, "team", &src);
        let keys: Vec<&String> = copy.data.iter().flatten().map(|(k, _)| k).collect();
        assert_eq!(keys, ["accessKeyId", "secretAccessKey"]);
        assert_eq!(copy.metadata.namespace.as_deref(), Some("team"));
    }
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::api::core::v1::{
        Container, EnvVar, EnvVarSource, PersistentVolumeClaimVolumeSource, PodTemplateSpec,
        SecretKeySelector, Volume,
    };
    use lifeboat_api::dataprotection::v1alpha1::{BackupStatus, RestoreStatus};

    fn backup(name: &str, repo: Option<&str>, phase: Option<BackupPhase>) -> Backup {
        let mut b = Backup::new(
            name,
            serde_json::from_value(serde_json::json!({
                "backupPolicyName": "p", "backupMethod": "datafile"
            }))
            .expect("spec"),
        );
        b.status = Some(BackupStatus {
            backup_repo_name: repo.map(str::to_owned),
            phase,
            ..Default::default()
        });
        b
    }

    fn restore(phase: Option<RestorePhase>) -> Restore {
        let mut r: Restore = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Restore",
            "metadata": {"name": "r"},
            "spec": {"backup": {"name": "b", "namespace": "ns"}}
        }))
        .expect("restore");
        r.status = Some(RestoreStatus {
            phase,
            ..Default::default()
        });
        r
    }

    fn job(secret: Option<&str>, claim: Option<&str>, done: bool) -> Job {
        let env = secret.map(|s| {
            vec![EnvVar {
                name: "AWS_ACCESS_KEY_ID".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: s.into(),
                        key: "accessKeyId".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]
        });
        let volumes = claim.map(|c| {
            vec![Volume {
                name: "repo".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: c.into(),
                    read_only: None,
                }),
                ..Default::default()
            }]
        });
        Job {
            metadata: ObjectMeta {
                name: Some("j".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            env,
                            ..Default::default()
                        }],
                        volumes,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }),
            status: done.then(|| JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_namespace_uses_a_repo_while_anything_there_may_read_it() {
        let none: (&[Backup], &[Restore], &[Job]) = (&[], &[], &[]);
        assert_eq!(in_use("r", none.0, none.1, none.2), None);
        let stored = [backup("b", Some("r"), Some(BackupPhase::Completed))];
        assert!(in_use("r", &stored, &[], &[]).is_some());
        let elsewhere = [backup("b", Some("other"), Some(BackupPhase::Completed))];
        assert_eq!(in_use("r", &elsewhere, &[], &[]), None);
        let starting = [backup("b", None, Some(BackupPhase::New))];
        assert!(
            in_use("r", &starting, &[], &[]).is_some(),
            "a Backup that has not chosen its repo may choose this one"
        );
        let failed_early = [backup("b", None, Some(BackupPhase::Failed))];
        assert_eq!(in_use("r", &failed_early, &[], &[]), None);
        assert!(in_use("r", &[], &[restore(Some(RestorePhase::Running))], &[]).is_some());
        assert!(in_use("r", &[], &[restore(None)], &[]).is_some());
        assert_eq!(
            in_use("r", &[], &[restore(Some(RestorePhase::Completed))], &[]),
            None
        );
        let secret = naming::repo_credential("r");
        let claim = naming::repo_pvc("r");
        assert!(in_use("r", &[], &[], &[job(Some(&secret), None, false)]).is_some());
        assert!(in_use("r", &[], &[], &[job(None, Some(&claim), false)]).is_some());
        assert_eq!(
            in_use("r", &[], &[], &[job(Some(&secret), None, true)]),
            None,
            "a finished Job reads nothing"
        );
        assert_eq!(
            in_use(
                "r",
                &[],
                &[],
                &[job(Some(&naming::repo_credential("r2")), None, false)]
            ),
            None,
            "another repo's copy"
        );
    }

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            uid: uid.into(),
            kind: "BackupRepo".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_volume_is_owned_by_the_repo_exactly_under_delete() {
        let repo = owner("repo");
        let other = owner("x");
        assert_eq!(volume_owners(&[], &repo, PvReclaimPolicy::Retain), None);
        assert_eq!(
            volume_owners(std::slice::from_ref(&other), &repo, PvReclaimPolicy::Delete),
            Some(vec![other.clone(), repo.clone()])
        );
        assert_eq!(
            volume_owners(
                &[other.clone(), repo.clone()],
                &repo,
                PvReclaimPolicy::Delete
            ),
            None
        );
        assert_eq!(
            volume_owners(
                &[repo.clone(), other.clone()],
                &repo,
                PvReclaimPolicy::Retain
            ),
            Some(vec![other])
        );
    }

    #[test]
    fn only_lifeboats_unlabelled_volume_is_adopted() {
        let pvc = |l: &[(&str, &str)]| PersistentVolumeClaim {
            metadata: ObjectMeta {
                labels: Some(
                    l.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let lifeboat = (labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
        assert_eq!(
            existing_volume(&pvc(&[lifeboat, (labels::BACKUP_REPO_UID, "u")]), "u"),
            ExistingVolume::Ours
        );
        assert_eq!(
            existing_volume(&pvc(&[lifeboat]), "u"),
            ExistingVolume::Adopt
        );
        assert_eq!(
            existing_volume(&pvc(&[lifeboat, (labels::BACKUP_REPO_UID, "old")]), "u"),
            ExistingVolume::Foreign
        );
        assert_eq!(
            existing_volume(&pvc(&[(labels::MANAGED_BY, "Helm")]), "u"),
            ExistingVolume::Foreign
        );
    }
}
