//! Backup repositories: a local directory (a mounted PVC) or an S3-compatible bucket, both through
//! `object_store` so that backup and restore share one code path.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use crate::error::{Error, Result, chain_has_no_space, one_line};
use crate::manifest::{MANIFEST_FILE, Manifest};

/// Where the repo is and how to reach it. Secrets never come from flags: a flag value is visible
/// in the process list and in the Job spec.
#[derive(clap::Args, Debug, Clone)]
pub struct RepoArgs {
    /// Repository URL: `file:///absolute/path` or `s3://bucket[/prefix]`.
    #[arg(long, env = "LIFEBOAT_REPO")]
    pub repo: Option<String>,
    /// S3 endpoint URL, e.g. `http://minio.storage:9000`. `http://` endpoints are allowed
    /// because in-cluster object stores commonly serve plain HTTP.
    #[arg(long, env = "LIFEBOAT_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region.
    #[arg(long, env = "LIFEBOAT_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// Use virtual-hosted-style S3 URLs (bucket in the host name) instead of path-style. The
    /// endpoint is then the bucket's own, e.g. `https://backups.s3.example.com`: the operator
    /// puts the bucket into the endpoint's host name before it hands the endpoint over.
    #[arg(long, env = "LIFEBOAT_S3_VIRTUAL_HOSTED_STYLE")]
    pub s3_virtual_hosted_style: bool,
    /// PEM certificates of the authorities that sign the S3 endpoint's certificate, trusted in
    /// addition to the system's (an in-house CA in front of MinIO, say). PEM text, not a path:
    /// the operator sets it from the BackupRepo's `spec.config.caBundle`.
    #[arg(long, env = "LIFEBOAT_S3_CA_BUNDLE", hide_env_values = true)]
    pub s3_ca_bundle: Option<String>,
    /// Directory with files `accessKeyId` and `secretAccessKey` (a mounted Secret). Without it,
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are read from the environment.
    #[arg(long, env = "LIFEBOAT_S3_CREDENTIALS_DIR")]
    pub s3_credentials_dir: Option<PathBuf>,
}

pub struct Repo {
    pub store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// The repo URL, for messages.
    pub display: String,
    is_local: bool,
}

fn read_secret_file(dir: &std::path::Path, name: &str) -> Result<String> {
    let p = dir.join(name);
    let s = std::fs::read_to_string(&p)
        .map_err(|e| Error::local_io("reading credentials file", &p, e))?;
    let s = s.trim_end_matches(['\n', '\r']).to_string();
    if s.is_empty() {
        return Err(Error::Usage(format!(
            "credentials file {} is empty",
            p.display()
        )));
    }
    Ok(s)
}

/// The certificates of a PEM bundle; a bundle that holds none is refused, naming the setting,
/// rather than silently trusting only the system's authorities.
pub fn ca_certificates(pem: &str) -> Result<Vec<object_store::Certificate>> {
    let certs = object_store::Certificate::from_pem_bundle(pem.as_bytes()).map_err(|e| {
        Error::Usage(format!(
            "--s3-ca-bundle (LIFEBOAT_S3_CA_BUNDLE): not a PEM certificate bundle: {}",
            one_line(&e)
        ))
    })?;
    if certs.is_empty() {
        return Err(Error::Usage(
            "--s3-ca-bundle (LIFEBOAT_S3_CA_BUNDLE) holds no PEM certificate".into(),
        ));
    }
    Ok(certs)
}

impl Repo {
    pub fn open(args: &RepoArgs) -> Result<Repo> {
        let Some(url) = args.repo.clone() else {
            return Err(Error::Usage("--repo (or LIFEBOAT_REPO) is required".into()));
        };
        let display = url.clone();
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(Error::Usage(format!(
                    "repo {display}: file:// URLs need an absolute path"
                )));
            }
            let meta = std::fs::metadata(path).map_err(|e| Error::RepoUnreachable {
                repo: display.clone(),
                cause: format!("{path}: {e}"),
            })?;
            if !meta.is_dir() {
                return Err(Error::RepoUnreachable {
                    repo: display,
                    cause: format!("{path} is not a directory"),
                });
            }
            let store = LocalFileSystem::new_with_prefix(path)
                .map_err(|e| Error::RepoUnreachable {
                    repo: display.clone(),
                    cause: one_line(&e),
                })?
                .with_fsync(true);
            return Ok(Repo {
                store: Arc::new(store),
                prefix: Path::default(),
                display,
                is_local: true,
            });
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::Usage(format!("repo {display}: missing bucket name")));
            }
            let mut client = ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_timeout(Duration::from_secs(300));
            if let Some(pem) = &args.s3_ca_bundle {
                for cert in ca_certificates(pem)? {
                    client = client.with_root_certificate(cert);
                }
            }
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_region(&args.s3_region)
                .with_virtual_hosted_style_request(args.s3_virtual_hosted_style)
                // Fail within seconds when the endpoint is down instead of the default minutes.
                .with_retry(RetryConfig {
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(30),
                    ..Default::default()
                })
                .with_client_options(client);
            if let Some(ep) = &args.s3_endpoint {
                b = b
                    .with_endpoint(ep)
                    .with_allow_http(ep.starts_with("http://"));
            }
            if let Some(dir) = &args.s3_credentials_dir {
                b = b
                    .with_access_key_id(read_secret_file(dir, "accessKeyId")?)
                    .with_secret_access_key(read_secret_file(dir, "secretAccessKey")?);
            }
            let store = b
                .build()
                .map_err(|e| Error::Usage(format!("repo {display}: {}", one_line(&e))))?;
            let prefix = Path::parse(prefix.trim_matches('/'))
                .map_err(|e| Error::Usage(format!("repo {display}: bad prefix: {e}")))?;
            return Ok(Repo {
                store: Arc::new(store),
                prefix,
                display,
                is_local: false,
            });
        }
        Err(Error::Usage(format!(
            "repo {display}: expected file:///path or s3://bucket[/prefix]"
        )))
    }

    /// A filesystem repo at `dir`, for unit tests.
    #[cfg(test)]
    pub(crate) fn local(dir: &std::path::Path) -> Repo {
        Repo::open(&RepoArgs {
            repo: Some(format!("file://{}", dir.display())),
            s3_endpoint: None,
            s3_region: "us-east-1".into(),
            s3_virtual_hosted_style: false,
            s3_ca_bundle: None,
            s3_credentials_dir: None,
        })
        .expect("a filesystem repo opens")
    }

    pub fn is_local(&self) -> bool {
        self.is_local
    }

    fn child(&self, parts: &[&str]) -> Path {
        let mut p = self.prefix.clone();
        for part in parts {
            for seg in part.split('/') {
                p = p.clone().join(seg);
            }
        }
        p
    }

    /// Everything of one backup lives under this path.
    pub fn backup_prefix(&self, backup: &str) -> Path {
        self.child(&[backup])
    }

    pub fn manifest_path(&self, backup: &str) -> Path {
        self.child(&[backup, MANIFEST_FILE])
    }

    pub fn object_path(&self, backup: &str, key: &str) -> Path {
        self.child(&[backup, key])
    }

    /// Maps an object store failure to the mover's classes: a full disk, an unreachable endpoint
    /// or store-side refusal.
    pub fn error(&self, what: &str, e: &object_store::Error) -> Error {
        if chain_has_no_space(e) {
            return Error::NoSpace {
                what: format!("repo {}: {what}", self.display),
            };
        }
        let cause = format!("{what}: {}", one_line(e));
        if is_unreachable(e) {
            Error::RepoUnreachable {
                repo: self.display.clone(),
                cause,
            }
        } else {
            Error::Repo {
                repo: self.display.clone(),
                cause,
            }
        }
    }

    pub async fn manifest_exists(&self, backup: &str) -> Result<bool> {
        match self.store.head(&self.manifest_path(backup)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(&format!("checking backup \"{backup}\""), &e)),
        }
    }

    /// Reads and validates a manifest, returning it with its raw bytes (their hash identifies
    /// the exact backup in restore markers).
    pub async fn read_manifest(&self, backup: &str) -> Result<(Manifest, Vec<u8>)> {
        let path = self.manifest_path(backup);
        let got = match self.store.get(&path).await {
            Ok(g) => g.bytes().await,
            Err(e) => Err(e),
        };
        let bytes = match got {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::BackupNotFound {
                    backup: backup.to_string(),
                    repo: self.display.clone(),
                    manifest: path.to_string(),
                });
            }
            Err(e) => {
                return Err(self.error(&format!("reading manifest of backup \"{backup}\""), &e));
            }
        };
        let m = Manifest::parse(backup, &bytes)?;
        Ok((m, bytes.to_vec()))
    }

    /// Publishes a manifest; this is the step that makes a backup exist.
    pub async fn put_manifest(&self, m: &Manifest) -> Result<()> {
        let path = self.manifest_path(&m.backup_name);
        let bytes = m.to_json()?;
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| {
                self.error(
                    &format!("writing manifest of backup \"{}\"", m.backup_name),
                    &e,
                )
            })?;
        Ok(())
    }
}

fn is_unreachable(e: &object_store::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind as K;
            return matches!(
                h.kind(),
                K::Connect | K::Timeout | K::Request | K::Interrupted
            );
        }
        cur = err.source();
    }
    false
}
