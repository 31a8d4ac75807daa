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
    #[error("BackupRepo {repo}: spec.config.{key} {value:?} is invalid: {why}")]
    InvalidConfig {
        repo: String,
        key: &'static str,
        value: String,
        why: String,
    },
}

/// The storage providers Lifeboat reaches through the S3 API.
pub const S3_PROVIDERS: &[&str] = &["s3", "minio", "s3-compatible"];

/// How an S3 repo is addressed, from its `spec.config`; shared by the mover Jobs' environment
/// and the operator's own probe, so that a repo that probes Ready is reached the same way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Settings {
    pub bucket: String,
    /// The URL requests go to: `<endpoint>/<bucket>` is built by the client for path-style, and
    /// for virtual-hosted style this is already the bucket's own host.
    pub endpoint: String,
    pub region: Option<String>,
    pub virtual_hosted: bool,
    /// PEM of the authorities trusted for the endpoint besides the system's.
    pub ca_bundle: Option<String>,
}

/// Reads `bucket`, `endpoint`, `region`, `forcePathStyle` (KubeBlocks' parameter; `"true"` by
/// default, `"false"` for virtual-hosted style) and `caBundle` (a Lifeboat extension).
pub fn s3_settings(repo: &BackupRepo) -> Result<S3Settings, AccessError> {
    let name = repo.name_any();
    let provider = repo.spec.storage_provider_ref.clone();
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
    let invalid = |key: &'static str, value: &str, why: &str| AccessError::InvalidConfig {
        repo: name.clone(),
        key,
        value: value.to_owned(),
        why: why.to_owned(),
    };
    let bucket = cfg("bucket")?;
    let endpoint = cfg("endpoint")?;
    let virtual_hosted = match repo.spec.config.get("forcePathStyle").map(String::as_str) {
        None | Some("true") => false,
        Some("false") => true,
        Some(other) => {
            return Err(invalid(
                "forcePathStyle",
                other,
                "expected \"true\" or \"false\"",
            ));
        }
    };
    let endpoint = if virtual_hosted {
        virtual_hosted_endpoint(&endpoint, &bucket)
            .map_err(|why| invalid("endpoint", &endpoint, &why))?
    } else {
        endpoint
    };
    let ca_bundle = match repo.spec.config.get("caBundle") {
        Some(pem) if !pem.contains("-----BEGIN CERTIFICATE-----") => {
            // Not echoed: text pasted here by mistake may be a private key.
            return Err(invalid(
                "caBundle",
                &format!("<{} characters>", pem.chars().count()),
                "expected PEM certificates (-----BEGIN CERTIFICATE-----)",
            ));
        }
        other => other.cloned(),
    };
    Ok(S3Settings {
        bucket,
        endpoint,
        region: repo.spec.config.get("region").cloned(),
        virtual_hosted,
        ca_bundle,
    })
}

/// The bucket's own URL for virtual-hosted-style requests: the bucket becomes the first label of
/// the endpoint's host, as AWS's SDKs do (`https://s3.example.com` and bucket `backups` give
/// `https://backups.s3.example.com`).
pub fn virtual_hosted_endpoint(endpoint: &str, bucket: &str) -> Result<String, String> {
    let (scheme, rest) = endpoint
        .split_once("://")
        .ok_or("expected a URL with http:// or https://")?;
    if scheme != "http" && scheme != "https" {
        return Err("expected a URL with http:// or https://".into());
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if rest.trim_end_matches('/') != authority {
        return Err("virtual-hosted style takes an endpoint without a path".into());
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    if host.is_empty() {
        return Err("the URL has no host".into());
    }
    if host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok() {
        return Err(
            "virtual-hosted style needs a host name, not an IP address; set forcePathStyle \"true\""
                .into(),
        );
    }
    if bucket.contains('.') && scheme == "https" {
        return Err(format!(
            "bucket {bucket:?} has dots, which no wildcard certificate of the host covers; \
             set forcePathStyle \"true\""
        ));
    }
    Ok(format!("{scheme}://{bucket}.{authority}"))
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
        p if S3_PROVIDERS.contains(&p) => {
            let s3 = s3_settings(repo)?;
            if repo.spec.credential.is_none() {
                return Err(AccessError::MissingCredential {
                    repo: name,
                    provider,
                });
            }
            let path = namespace_path(repo, namespace);
            let secret = naming::repo_credential(&name);
            let mut env_vars = vec![
                env("LIFEBOAT_REPO", format!("s3://{}/{path}", s3.bucket)),
                env("LIFEBOAT_S3_ENDPOINT", s3.endpoint),
                secret_env("AWS_ACCESS_KEY_ID", &secret, "accessKeyId"),
                secret_env("AWS_SECRET_ACCESS_KEY", &secret, "secretAccessKey"),
            ];
            if let Some(region) = s3.region {
                env_vars.push(env("LIFEBOAT_S3_REGION", region));
            }
            if s3.virtual_hosted {
                env_vars.push(env("LIFEBOAT_S3_VIRTUAL_HOSTED_STYLE", "true"));
            }
            if let Some(pem) = s3.ca_bundle {
                env_vars.push(env("LIFEBOAT_S3_CA_BUNDLE", pem));
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
    fn virtual_hosted_style_puts_the_bucket_in_the_host_and_refuses_what_cannot_work() {
        let a = access(
            &repo(
                "s3-compatible",
                &[
                    ("bucket", "backups"),
                    ("endpoint", "https://store.example.com:9443"),
                    ("forcePathStyle", "false"),
                ],
                true,
            ),
            "demo",
        )
        .expect("access");
        let by: std::collections::BTreeMap<_, _> =
            a.env.iter().map(|e| (e.name.as_str(), e)).collect();
        assert_eq!(
            by["LIFEBOAT_S3_ENDPOINT"].value.as_deref(),
            Some("https://backups.store.example.com:9443")
        );
        assert_eq!(
            by["LIFEBOAT_S3_VIRTUAL_HOSTED_STYLE"].value.as_deref(),
            Some("true")
        );
        assert_eq!(
            by["LIFEBOAT_REPO"].value.as_deref(),
            Some("s3://backups/backups/demo")
        );
        for (endpoint, bucket, why) in [
            ("http://10.0.0.1:9000", "b", "not an IP address"),
            ("https://[::1]:9000", "b", "not an IP address"),
            ("store.example.com", "b", "http:// or https://"),
            ("https://store.example.com/s3", "b", "without a path"),
            ("https://store.example.com", "my.bucket", "has dots"),
        ] {
            let e = s3_settings(&repo(
                "s3",
                &[
                    ("bucket", bucket),
                    ("endpoint", endpoint),
                    ("forcePathStyle", "false"),
                ],
                true,
            ))
            .expect_err(endpoint);
            let m = e.to_string();
            assert!(
                m.contains("BackupRepo r: spec.config.endpoint") && m.contains(why),
                "{m}"
            );
        }
        // Path style, the default, leaves the endpoint as given.
        let s = s3_settings(&repo(
            "s3",
            &[("bucket", "b"), ("endpoint", "http://10.0.0.1:9000")],
            true,
        ))
        .expect("path style");
        assert_eq!(
            (s.endpoint.as_str(), s.virtual_hosted),
            ("http://10.0.0.1:9000", false)
        );
    }

    #[test]
    fn a_bad_force_path_style_or_ca_bundle_is_refused_naming_the_key() {
        let with = |k: &str, v: &str| {
            s3_settings(&repo(
                "minio",
                &[("bucket", "b"), ("endpoint", "https://m"), (k, v)],
                true,
            ))
        };
        let e = with("forcePathStyle", "yes").expect_err("yes");
        assert!(
            e.to_string().contains(
                "spec.config.forcePathStyle \"yes\" is invalid: expected \"true\" or \"false\""
            ),
            "{e}"
        );
        let e = with("caBundle", "-----BEGIN PRIVATE KEY-----\nMIIEvQ").expect_err("a key");
        let m = e.to_string();
        assert!(
            m.contains("spec.config.caBundle \"<34 characters>\""),
            "{m}"
        );
        assert!(!m.contains("MIIEvQ"), "the text is echoed: {m}");
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let a = access(
            &repo(
                "minio",
                &[
                    ("bucket", "b"),
                    ("endpoint", "https://m"),
                    ("caBundle", pem),
                ],
                true,
            ),
            "demo",
        )
        .expect("access");
        let ca = a.env.iter().find(|e| e.name == "LIFEBOAT_S3_CA_BUNDLE");
        assert_eq!(ca.and_then(|e| e.value.as_deref()), Some(pem));
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
