//! The BackupRepo controller, and making a repo usable from a namespace.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Secret, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use lifeboat_api::conditions;
use lifeboat_api::dataprotection::v1alpha1::{BackupRepoPhase, BackupRepoStatus};
use lifeboat_api::{BackupRepo, labels};
use tracing::Instrument;

use super::copies;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::telemetry;
use crate::{FIELD_MANAGER, kubeapi, naming};

const CONTROLLER: &str = "backuprepo";

/// Runs the BackupRepo controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<DeserializeGuard<BackupRepo>> = Api::all(ctx.client.clone());
    Controller::new(api, crate::observed::watch_config())
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(
            |obj, ctx| async move {
                match &obj.0 {
                    Ok(repo) => {
                        reconcile(repo, &ctx)
                            .instrument(telemetry::reconcile_span(CONTROLLER, None, &repo.name_any()))
                            .await
                    }
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
    let verdict = check(repo, ctx).await?;
    match verdict {
        Ok(what) => {
            st.phase = Some(BackupRepoPhase::Ready);
            st.message = None;
            conditions::set(
                &mut st.conditions,
                "PreCheckPassed",
                "True",
                "StorageReachable",
                what,
                repo.metadata.generation,
                &now,
            );
        }
        Err((reason, msg)) => {
            if st.phase != Some(BackupRepoPhase::Failed) || st.message.as_ref() != Some(&msg) {
                tracing::warn!(repo = %name, reason, message = %msg, "backup repo not usable");
            }
            st.phase = Some(BackupRepoPhase::Failed);
            st.message = Some(msg.clone());
            conditions::set(
                &mut st.conditions,
                "PreCheckPassed",
                "False",
                reason,
                &msg,
                repo.metadata.generation,
                &now,
            );
        }
    }
    let failed = st.phase == Some(BackupRepoPhase::Failed);
    ctx.metrics
        .repo_ready
        .get_or_create(&crate::metrics::RepoLabels {
            backuprepo: name.clone(),
        })
        .set(i64::from(!failed));
    // Told once per change, so that `kubectl describe backuprepo` shows when it came and went.
    let before = repo.status.as_ref().and_then(|s| s.phase);
    if before != st.phase {
        let (kind, reason, note) = if failed {
            (
                EventType::Warning,
                "RepoNotReady",
                format!(
                    "BackupRepo {name} is not usable: {}",
                    st.message.clone().unwrap_or_default()
                ),
            )
        } else {
            (
                EventType::Normal,
                "RepoReady",
                format!("BackupRepo {name} is Ready: its storage answered the probe"),
            )
        };
        ctx.event(repo, kind, reason, "Probe", note).await;
    }
    if repo.spec.storage_provider_ref == "pvc" {
        st.backup_pvc_name = Some(naming::repo_pvc(&name));
    }
    // A probe that finds what the status already says writes nothing.
    if repo.status.as_ref() != Some(&st) {
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
    }
    // Namespaces that stopped using the repo lose its copies; checked on every probe, since
    // nothing about the repo itself changes when a namespace's last Backup goes.
    copies::sweep(ctx, repo).await?;
    // Re-probed on a schedule, since a store can go away without any Kubernetes object changing;
    // a failed repo sooner, so that a recovered store is usable again quickly.
    Ok(Action::requeue(if failed {
        FAILED_RECHECK
    } else {
        READY_RECHECK
    }))
}

/// How often a Ready repo is probed again.
const READY_RECHECK: Duration = Duration::from_secs(30);
/// How often a Failed repo is probed again.
const FAILED_RECHECK: Duration = Duration::from_secs(10);

/// Checks the repo's settings, its credentials and, for object stores, that the store answers.
/// `Ok` says what was checked; `Err` is a condition reason and a message naming the repo.
async fn check(
    repo: &BackupRepo,
    ctx: &Context,
) -> Result<std::result::Result<&'static str, (&'static str, String)>> {
    let name = repo.name_any();
    if let Err(e) = super::access::access(repo, "probe") {
        return Ok(Err(("ConfigInvalid", e.to_string())));
    }
    let provider = repo.spec.storage_provider_ref.as_str();
    let (Some(cred), true) = (
        &repo.spec.credential,
        super::access::S3_PROVIDERS.contains(&provider),
    ) else {
        return Ok(Ok(
            "the repo volume is created in each namespace that uses it",
        ));
    };
    let ns = cred.namespace.clone().unwrap_or_default();
    let sname = cred.name.clone().unwrap_or_default();
    let Some(secret) = kubeapi::get_opt::<Secret>(&ctx.client, &ns, &sname).await? else {
        return Ok(Err((
            "CredentialMissing",
            format!("BackupRepo {name}: credential Secret {ns}/{sname} does not exist"),
        )));
    };
    let data = secret.data.unwrap_or_default();
    let mut keys = Vec::new();
    for k in ["accessKeyId", "secretAccessKey"] {
        match data.get(k).map(|v| String::from_utf8(v.0.clone())) {
            Some(Ok(v)) if !v.is_empty() => keys.push(v),
            _ => {
                return Ok(Err((
                    "CredentialMissing",
                    format!(
                        "BackupRepo {name}: credential Secret {ns}/{sname} has no usable key {k}"
                    ),
                )));
            }
        }
    }
    let s3 = match super::access::s3_settings(repo) {
        Ok(s3) => s3,
        Err(e) => return Ok(Err(("ConfigInvalid", e.to_string()))),
    };
    let target = super::probe::S3Target {
        s3: &s3,
        prefix: repo.spec.path_prefix.as_deref().unwrap_or_default(),
        access_key_id: &keys[0],
        secret_access_key: &keys[1],
    };
    Ok(match super::probe::probe_s3(&target).await {
        Ok(()) => Ok("the store answered a listing of the repo's prefix with these credentials"),
        Err(why) => Err(("StorageUnreachable", format!("BackupRepo {name}: {why}"))),
    })
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
/// the repo PVC for `pvc` repos. Both carry the repo's UID and the time of this use
/// ([`copies`]), which is what lets a namespace that stops using the repo lose them.
pub async fn ensure_namespace_access(
    ctx: &Context,
    repo: &BackupRepo,
    namespace: &str,
) -> Result<()> {
    let name = repo.name_any();
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
                metadata: copies::volume_meta(repo, namespace),
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
            if !kubeapi::create_if_absent(&ctx.client, &pvc).await? {
                let pvc_name = naming::repo_pvc(&name);
                if let Some(existing) =
                    kubeapi::get_opt::<PersistentVolumeClaim>(&ctx.client, namespace, &pvc_name)
                        .await?
                {
                    copies::touch_volume(ctx, repo, &existing).await?;
                }
            }
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
            // Recorded before the copy exists, so that the sweep, which finds copies by these
            // records and never by listing Secrets, cannot miss one.
            if !super::namespaces::recorded(repo).contains(namespace) {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    super::namespaces::copy_key(namespace): k8s_openapi::jiff::Timestamp::now().to_string()
                }}});
                Api::<BackupRepo>::all(ctx.client.clone())
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(Error::kube(
                        "recording a credential copy on",
                        format!("BackupRepo {name}"),
                    ))?;
            }
            kubeapi::apply(&ctx.client, &copies::credential_copy(repo, namespace, &src)).await?;
        }
    }
    Ok(())
}
