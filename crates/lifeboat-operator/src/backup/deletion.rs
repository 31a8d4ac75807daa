//! Deleting a Backup whose `deletionPolicy` is `Delete` removes its data from the repo first:
//! a finalizer holds the Backup while a Job runs `lifeboat-mover delete`.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::BackupDeletionPolicy;
use lifeboat_api::{Backup, BackupRepo};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ownership::controlled_by;
use crate::{kubeapi, repo};

/// The finalizer on Backups whose data must go with them.
pub const FINALIZER: &str = "lifeboat.io/backup-data";

/// Whether the Backup's data must be removed when the Backup is deleted.
pub fn owns_data(b: &Backup) -> bool {
    b.spec.deletion_policy == BackupDeletionPolicy::Delete
}

async fn set_finalizers(ctx: &Context, b: &Backup, finalizers: Vec<String>) -> Result<()> {
    kubeapi::set_finalizers(&ctx.client, b, finalizers).await
}

/// Puts the finalizer on a Backup that is about to write data it owns.
pub async fn hold(ctx: &Context, b: &Backup) -> Result<()> {
    if !owns_data(b) || b.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let mut f = b.finalizers().to_vec();
    f.push(FINALIZER.into());
    set_finalizers(ctx, b, f).await
}

async fn release(ctx: &Context, b: &Backup) -> Result<Action> {
    let f = b
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, b, f).await?;
    Ok(Action::await_change())
}

/// Handles a Backup being deleted.
pub async fn on_delete(b: &Backup, ctx: &Context) -> Result<Action> {
    if !b.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = b.name_any();
    let ns = b.namespace().unwrap_or_default();
    let st = b.status.clone().unwrap_or_default();
    // A deletion has the Backup's deadline, counted from the delete: past it, what could not be
    // done is said in an event and the Backup goes, its data kept, rather than hanging in
    // Deleting for as long as Jobs are refused.
    let deadline = super::controller::deadline_of(b, ctx.config.backup_deadline)
        .unwrap_or(ctx.config.backup_deadline);
    let overdue = b
        .meta()
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| super::controller::past_deadline(t.0, ctx.clock.now(), deadline));
    if owns_data(b)
        && !crate::mutation::active(crate::mutation::Mutation::ReleaseWhileJobRuns)
        && stop_backup_job(ctx, b).await?
        && !overdue
    {
        return Ok(Action::requeue(std::time::Duration::from_secs(3)));
    }
    // The data recorded, or, for a Backup that started but recorded none (deleted while its
    // Job ran, or failed midway), whatever its Job wrote under the name Lifeboat gave it.
    let data = st
        .dataset
        .as_ref()
        .map(|d| d.manifest_path.clone())
        .or_else(|| {
            st.backup_repo_name
                .is_some()
                .then(|| super::controller::repo_name(b))
        });
    let (Some(data), Some(repo_name), true) = (data, st.backup_repo_name.clone(), owns_data(b))
    else {
        // Nothing was written, or the data is to be kept.
        return release(ctx, b).await;
    };
    let data = match own_data(b, &data) {
        Ok(d) => d,
        Err(why) => {
            ctx.event(
                b,
                EventType::Warning,
                "BackupDataKept",
                "Delete",
                format!("the data of Backup {ns}/{name} was not deleted: {why}"),
            )
            .await;
            return release(ctx, b).await;
        }
    };
    // No Job can start in a namespace being deleted; a `pvc` repo's volume goes with it anyway.
    let terminating = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&ns)
        .await
        .map_err(Error::kube("reading", format!("Namespace {ns}")))?
        .is_some_and(|n| n.meta().deletion_timestamp.is_some());
    let repo_obj = Api::<BackupRepo>::all(ctx.client.clone())
        .get_opt(&repo_name)
        .await
        .map_err(Error::kube("reading", format!("BackupRepo {repo_name}")))?;
    let Some(repo_obj) = repo_obj.filter(|_| !terminating) else {
        ctx.event(b, EventType::Warning, "BackupDataKept", "Delete", format!(
            "the data of Backup {ns}/{name} ({data} in BackupRepo {repo_name}) was not deleted: {}",
            if terminating { "its namespace is being deleted" } else { "the BackupRepo no longer exists" }
        ))
        .await;
        return release(ctx, b).await;
    };
    let job_name = format!("{name}-delete");
    match kubeapi::get_opt::<Job>(&ctx.client, &ns, &job_name).await? {
        None => {
            let access =
                repo::access::access(&repo_obj, &ns).map_err(|e| Error::InvalidObject {
                    object: format!("BackupRepo {repo_name}"),
                    message: e.to_string(),
                })?;
            let created = async {
                crate::repo::controller::ensure_namespace_access(ctx, &repo_obj, &ns).await?;
                kubeapi::create_if_absent(
                    &ctx.client,
                    &delete_job(b, &job_name, &data, &access, &ctx.config),
                )
                .await
            }
            .await;
            match created {
                Ok(_) => Ok(Action::requeue(std::time::Duration::from_secs(3))),
                Err(e) if overdue => {
                    ctx.event(b, EventType::Warning, "BackupDataKept", "Delete", format!(
                        "the data of Backup {ns}/{name} ({data} in BackupRepo {repo_name}) was not deleted: its delete Job could not be created within {}: {e}",
                        crate::duration::format(deadline)
                    ))
                    .await;
                    release(ctx, b).await
                }
                Err(e) => Err(e),
            }
        }
        Some(job) if !controlled_by(job.meta(), &b.uid().unwrap_or_default()) => {
            // Someone else's Job under the name: its outcome says nothing about this Backup's
            // data, and it must not be taken for the delete.
            ctx.event(b, EventType::Warning, "BackupDataKept", "Delete", format!(
                "the data of Backup {ns}/{name} is not deleted yet: Job {ns}/{job_name} exists but was not made for this Backup; remove or rename it"
            ))
            .await;
            Ok(Action::requeue(std::time::Duration::from_secs(60)))
        }
        Some(job) => {
            let js = job.status.unwrap_or_default();
            if js.succeeded.unwrap_or(0) > 0 {
                tracing::info!(backup = %name, data = %data, "backup data deleted");
                return release(ctx, b).await;
            }
            let failed = js
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Failed" && c.status == "True");
            if failed {
                let pods: Vec<Pod> =
                    kubeapi::list(&ctx.client, &ns, &format!("job-name={job_name}")).await?;
                let latest = pods.iter().max_by_key(|p| p.creation_timestamp());
                ctx.event(b, EventType::Warning, "BackupDataKept", "Delete", format!(
                    "deleting the data of Backup {ns}/{name} failed, so {data} stays in BackupRepo {repo_name}: {}",
                    kubeapi::termination_message(latest).trim()
                ))
                .await;
                return release(ctx, b).await;
            }
            Ok(Action::requeue(std::time::Duration::from_secs(3)))
        }
    }
}

/// Stops the Backup's own backup Job if it still runs; true while it is going (the delete
/// waits for that, up to its deadline). A Job left running would write its objects and manifest
/// after the delete had removed the Backup's data, leaving a complete backup in the repo that no
/// Backup refers to.
async fn stop_backup_job(ctx: &Context, b: &Backup) -> Result<bool> {
    let ns = b.namespace().unwrap_or_default();
    let job_name = crate::naming::backup_job(&b.name_any());
    let Some(job) = kubeapi::get_opt::<Job>(&ctx.client, &ns, &job_name).await? else {
        return Ok(false);
    };
    if !controlled_by(job.meta(), &b.uid().unwrap_or_default()) {
        return Ok(false);
    }
    if kubeapi::job_finished(&job) {
        return Ok(false);
    }
    if job.meta().deletion_timestamp.is_none() {
        // Foreground: the Job stays until its pods are gone, so "gone" means nothing writes.
        // The UID as precondition: a Job re-created under the name meanwhile is not this one.
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: job.uid(),
                resource_version: None,
            }),
            ..kube::api::DeleteParams::foreground()
        };
        Api::<Job>::namespaced(ctx.client.clone(), &ns)
            .delete(&job_name, &params)
            .await
            .map_err(Error::kube("stopping", format!("Job {ns}/{job_name}")))?;
        tracing::info!(backup = %b.name_any(), job = %job_name, "backup Job stopped: its Backup is being deleted");
    }
    Ok(true)
}

/// The name of the Backup's data in the repo, when it is the Backup's own: the name Lifeboat gave
/// it when taking it ([`crate::backup::controller::repo_name`], from the Backup's name and UID),
/// and a single path segment, so the delete can reach nothing but that backup's directory. `Err`
/// says why the recorded name is refused.
pub fn own_data(b: &Backup, recorded: &str) -> std::result::Result<String, String> {
    let want = super::controller::repo_name(b);
    if recorded != want {
        return Err(format!(
            "status.dataset.manifestPath is {recorded:?}, not {want:?}, the name Lifeboat gave this Backup's data"
        ));
    }
    if want.is_empty() || want.contains('/') || want == "." || want == ".." {
        return Err(format!("{want:?} is not a single path segment"));
    }
    Ok(want)
}

fn delete_job(
    b: &Backup,
    name: &str,
    data: &str,
    access: &repo::access::RepoAccess,
    cfg: &crate::context::Config,
) -> Job {
    let mut env = access.env.clone();
    env.push(k8s_openapi::api::core::v1::EnvVar {
        name: "LIFEBOAT_BACKUP_NAME".into(),
        value: Some(data.to_owned()),
        ..Default::default()
    });
    super::job::build(
        b,
        super::job::BackupJob {
            name: name.to_owned(),
            subcommand: "delete",
            env,
            mounts: access.mounts.clone(),
            volumes: access.volumes.clone(),
            resources: cfg.job_resources.clone(),
            backoff_limit: 2,
            deadline_seconds: 600,
            ttl_after_finished: None,
            extra_labels: Default::default(),
        },
        cfg,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(name: &str, uid: &str) -> Backup {
        let mut b = Backup::new(
            name,
            serde_json::from_value(serde_json::json!({
                "backupPolicyName": "p", "backupMethod": "datafile"
            }))
            .expect("spec"),
        );
        b.metadata.uid = Some(uid.into());
        b
    }

    #[test]
    fn only_the_backups_own_data_is_deleted() {
        let a = backup("a", "1234abcd-0000");
        assert_eq!(own_data(&a, "a-1234abcd"), Ok("a-1234abcd".into()));
        // A sibling whose name shares the prefix, a parent path, another Backup of the same
        // name (another UID): all refused.
        for bad in [
            "a",
            "a-b-5678ef90",
            "a-1234abcd/..",
            "",
            "a-1234abcd-x",
            "a-99999999",
        ] {
            assert!(own_data(&a, bad).is_err(), "{bad:?}");
        }
    }
}
