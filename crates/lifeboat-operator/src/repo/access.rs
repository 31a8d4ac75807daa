//! How a mover Job reaches a BackupRepo: environment, volumes and the repo URL. Pure.

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, PersistentVolumeClaimVolumeSource, SecretKeySelector, Volume, VolumeMount,
};
use kube::ResourceExt;
use lifeboat_api::BackupRepo;

use crate::naming;

/// Where the `pvc` provider's volume is mounted in mover Jobs.
pub const REPO_MOUNT: &str = "/repo";

/// What a mover Job needs to reach a repo.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepoAccess {
    /// `LIFEBOAT_REPO` and the S3 settings and credentials.
    pub env: Vec<EnvVar>,
    /// The repo volume, for the `pvc` provider.
    pub volumes: Vec<Volume>,
    /// Where that volume is mounted.
    pub mounts: Vec<VolumeMount>,
}

/// Why a repo cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AccessError {
    #[error("BackupRepo {repo}: spec.config.{key} is required for provider {provider}")]
    MissingConfig {
        repo: String,
        provider: String,
        key: &'static str,
    },
    #[error("BackupRepo {repo}: spec.credential is required for provider {provider}")]
    MissingCredential { repo: String, provider: String },
    #[error("BackupRepo {repo}: storage provider {provider:?} is not served by Lifeboat")]
    UnknownProvider { repo: String, provider: String },
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The path of a namespace's backups inside a repo, below its prefix. Empty for `pvc` repos,
/// whose volume is the namespace's own.
pub fn namespace_path(repo: &BackupRepo, namespace: &str) -> String {
    if repo.spec.storage_provider_ref == "pvc" {
        return String::new();
    }
    match repo
        .spec
        .path_prefix
        .as_deref()
        .map(|p| p.trim_matches('/'))
    {
        Some(p) if !p.is_empty() => format!("{p}/{namespace}"),
        _ => namespace.to_owned(),
    }
}

/// How a Job in `namespace` reaches `repo`. S3 credentials come from the copy of the repo's
/// credential Secret in that namespace, as environment variables, never as arguments.
pub fn access(repo: &BackupRepo, namespace: &str) -> Result<RepoAccess, AccessError> {
    let name = repo.name_any();
    let provider = repo.spec.storage_provider_ref.clone();
    match provider.as_str() {
        "s3" | "minio" => {
            let cfg = |key: &'static str| {
                repo.spec
                    .config
                    .get(key)
                    .cloned()
                    .ok_or_else(|| AccessError::MissingConfig {
                        repo: name.clone(),
                        provider: provider.clone(),
                        key,
                    })
            };
            let path = namespace_path(repo, namespace);
            let bucket = cfg("bucket")?;
            let endpoint = cfg("endpoint")?;
            if repo.spec.credential.is_none() {
                return Err(AccessError::MissingCredential {
                    repo: name,
                    provider,
                });
            }
            let secret = naming::repo_credential(&name);
            let mut env_vars = vec![
                env("LIFEBOAT_REPO", format!("s3://{bucket}/{path}")),
                env("LIFEBOAT_S3_ENDPOINT", endpoint),
                secret_env("AWS_ACCESS_KEY_ID", &secret, "accessKeyId"),
                secret_env("AWS_SECRET_ACCESS_KEY", &secret, "secretAccessKey"),
            ];
            if let Some(region) = repo.spec.config.get("region") {
                env_vars.push(env("LIFEBOAT_S3_REGION", region.clone()));
            }
            Ok(RepoAccess {
                env: env_vars,
                ..Default::default()
            })
        }
        // The volume is already per namespace and per repo, and its root is the one directory
        // certain to exist (the mover refuses a repo path that does not).
        "pvc" => Ok(RepoAccess {
            env: vec![env("LIFEBOAT_REPO", format!("file://{REPO_MOUNT}"))],
            volumes: vec![Volume {
                name: "repo".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: naming::repo_pvc(&name),
                    read_only: Some(false),
                }),
                ..Default::default()
            }],
            mounts: vec![VolumeMount {
                name: "repo".into(),
                mount_path: REPO_MOUNT.into(),
                ..Default::default()
            }],
        }),
        _ => Err(AccessError::UnknownProvider {
            repo: name,
            provider,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::SecretReference;
    use lifeboat_api::dataprotection::v1alpha1::BackupRepoSpec;

    fn repo(provider: &str, config: &[(&str, &str)], cred: bool) -> BackupRepo {
        BackupRepo::new(
            "r",
            BackupRepoSpec {
                storage_provider_ref: provider.into(),
                config: config
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                credential: cred.then(|| SecretReference {
                    name: Some("creds".into()),
                    namespace: Some("lifeboat-system".into()),
                }),
                path_prefix: Some("/backups/".into()),
                ..Default::default()
            },
        )
    }

    #[test]
    fn s3_access_uses_env_and_never_arguments() {
        let a = access(
            &repo(
                "minio",
                &[("bucket", "b"), ("endpoint", "http://m:9000")],
                true,
            ),
            "demo",
        )
        .expect("access");
        let by: std::collections::BTreeMap<_, _> =
            a.env.iter().map(|e| (e.name.as_str(), e)).collect();
        assert_eq!(
            by["LIFEBOAT_REPO"].value.as_deref(),
            Some("s3://b/backups/demo")
        );
        assert!(
            by["AWS_SECRET_ACCESS_KEY"].value.is_none(),
            "secret comes from a Secret ref"
        );
        assert!(a.volumes.is_empty());
    }

    #[test]
    fn missing_settings_name_the_field() {
        let e =
            access(&repo("s3", &[("endpoint", "http://m")], true), "demo").expect_err("no bucket");
        assert!(e.to_string().contains("spec.config.bucket"), "{e}");
        let e = access(
            &repo("s3", &[("bucket", "b"), ("endpoint", "e")], false),
            "demo",
        )
        .expect_err("no credential");
        assert!(e.to_string().contains("spec.credential"), "{e}");
    }

    #[test]
    fn pvc_access_mounts_the_repo_volume() {
        let a = access(&repo("pvc", &[], false), "demo").expect("access");
        assert_eq!(a.env[0].value.as_deref(), Some("file:///repo"));
        assert_eq!(
            a.volumes[0]
                .persistent_volume_claim
                .as_ref()
                .map(|p| p.claim_name.as_str()),
            Some("lifeboat-repo-r")
        );
    }
}
