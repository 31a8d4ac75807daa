//! The BackupRepo controller, and making a repo usable from a namespace.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Secret, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use lifeboat_api::conditions;
use lifeboat_api::dataprotection::v1alpha1::{BackupRepoPhase, BackupRepoStatus};
use lifeboat_api::{BackupRepo, labels};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::{FIELD_MANAGER, kubeapi, naming};

const CONTROLLER: &str = "backuprepo";

/// Runs the BackupRepo controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<DeserializeGuard<BackupRepo>> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(
            |obj, ctx| async move {
                match &obj.0 {
                    Ok(repo) => reconcile(repo, &ctx).await,
                    Err(e) => {
                        tracing::warn!(name = ?e.metadata.name, error = %e.error, "skipping a BackupRepo that does not deserialize");
                        Ok(Action::await_change())
                    }
                }
            },
            |_, err: &Error, ctx: Arc<Context>| {
                ctx.metrics.failure(CONTROLLER, err.metric_label());
                tracing::warn!(error = %err, "backuprepo reconcile failed");
                Action::requeue(Duration::from_secs(10))
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(repo: &BackupRepo, ctx: &Context) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let name = repo.name_any();
    let now = Time(Timestamp::now());
    let mut st = repo.status.clone().unwrap_or_default();
    st.observed_generation = repo.metadata.generation;
    st.is_default = Some(
        repo.annotations()
            .get(labels::DEFAULT_REPO)
            .map(String::as_str)
            == Some("true"),
    );
    let verdict = match super::access::access(repo, "probe") {
        Err(e) => Err(e.to_string()),
        Ok(_) => match (
            &repo.spec.credential,
            repo.spec.storage_provider_ref.as_str(),
        ) {
            (Some(cred), "s3" | "minio") => {
                let ns = cred.namespace.clone().unwrap_or_default();
                let sname = cred.name.clone().unwrap_or_default();
                match kubeapi::get_opt::<Secret>(&ctx.client, &ns, &sname).await? {
                    None => Err(format!(
                        "BackupRepo {name}: credential Secret {ns}/{sname} does not exist"
                    )),
                    Some(s) => {
                        let data = s.data.unwrap_or_default();
                        match ["accessKeyId", "secretAccessKey"]
                            .iter()
                            .find(|k| !data.contains_key(**k))
                        {
                            Some(k) => Err(format!(
                                "BackupRepo {name}: credential Secret {ns}/{sname} has no key {k}"
                            )),
                            None => Ok(()),
                        }
                    }
                }
            }
            _ => Ok(()),
        },
    };
    match verdict {
        Ok(()) => {
            st.phase = Some(BackupRepoPhase::Ready);
            st.message = None;
            conditions::set(
                &mut st.conditions,
                "PreCheckPassed",
                "True",
                "ConfigValid",
                "the provider settings and credentials are complete",
                repo.metadata.generation,
                &now,
            );
        }
        Err(msg) => {
            st.phase = Some(BackupRepoPhase::Failed);
            st.message = Some(msg.clone());
            conditions::set(
                &mut st.conditions,
                "PreCheckPassed",
                "False",
                "ConfigInvalid",
                &msg,
                repo.metadata.generation,
                &now,
            );
        }
    }
    if repo.spec.storage_provider_ref == "pvc" {
        st.backup_pvc_name = Some(naming::repo_pvc(&name));
    }
    let status = write(&st, &name)?;
    Api::<BackupRepo>::all(ctx.client.clone())
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await
        .map_err(Error::kube(
            "updating status of",
            format!("BackupRepo {name}"),
        ))?;
    Ok(Action::requeue(Duration::from_secs(60)))
}

fn write(st: &BackupRepoStatus, name: &str) -> Result<serde_json::Value> {
    Ok(serde_json::json!({
        "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
        "kind": "BackupRepo",
        "metadata": {"name": name},
        "status": serde_json::to_value(st).map_err(|source| Error::Serialize { object: format!("status of BackupRepo {name}"), source })?,
    }))
}

/// Makes `repo` usable by Jobs in `namespace`: a copy of the credential Secret for S3 stores,
/// the repo PVC for `pvc` repos.
pub async fn ensure_namespace_access(
    ctx: &Context,
    repo: &BackupRepo,
    namespace: &str,
) -> Result<()> {
    let name = repo.name_any();
    let meta = |n: String| ObjectMeta {
        name: Some(n),
        namespace: Some(namespace.to_owned()),
        labels: Some(
            [(
                labels::MANAGED_BY.to_owned(),
                labels::MANAGED_BY_VALUE.to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    match repo.spec.storage_provider_ref.as_str() {
        "pvc" => {
            let mut requests = std::collections::BTreeMap::new();
            requests.insert(
                "storage".to_owned(),
                repo.spec.volume_capacity.clone().unwrap_or(
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("10Gi".into()),
                ),
            );
            let pvc = PersistentVolumeClaim {
                metadata: meta(naming::repo_pvc(&name)),
                spec: Some(PersistentVolumeClaimSpec {
                    access_modes: Some(vec![
                        repo.spec
                            .config
                            .get("accessMode")
                            .cloned()
                            .unwrap_or_else(|| "ReadWriteOnce".into()),
                    ]),
                    storage_class_name: repo.spec.config.get("storageClassName").cloned(),
                    resources: Some(VolumeResourceRequirements {
                        requests: Some(requests),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            kubeapi::create_if_absent(&ctx.client, &pvc).await?;
        }
        _ => {
            let Some(cred) = &repo.spec.credential else {
                return Ok(());
            };
            let src_ns = cred.namespace.clone().unwrap_or_default();
            let src_name = cred.name.clone().unwrap_or_default();
            let src: Secret = kubeapi::get_opt(&ctx.client, &src_ns, &src_name)
                .await?
                .ok_or_else(|| Error::MissingField {
                    object: format!("Secret {src_ns}/{src_name} (credential of BackupRepo {name})"),
                    field: "data",
                })?;
            let copy = Secret {
                metadata: meta(naming::repo_credential(&name)),
                data: src.data,
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            kubeapi::apply(&ctx.client, &copy).await?;
        }
    }
    Ok(())
}
