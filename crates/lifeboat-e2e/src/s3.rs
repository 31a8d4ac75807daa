//! S3 repos on the bed: the bed's own MinIO (started by `cargo xtask testbed up` on the node
//! address), MinIO servers a test owns and may kill, BackupRepos pointing at them, and listings
//! of what a repo holds, read with a real S3 client.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use lifeboat_api::BackupRepo;
use lifeboat_api::dataprotection::v1alpha1::BackupRepoPhase;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as StorePath;
use object_store::{ClientOptions, ObjectStore, RetryConfig};
use serde_json::json;

use crate::poll;

/// The node address the bed's components bind to; pods reach the host there.
pub const NODE_IP: &str = "10.200.0.1";
/// The bed's MinIO, as pods and the host reach it.
pub const BED_ENDPOINT: &str = "http://10.200.0.1:9000";
/// The bucket the bed creates in its MinIO.
pub const BED_BUCKET: &str = "lifeboat";
/// Where the tests keep the credential Secrets of their BackupRepos.
pub const CREDENTIALS_NS: &str = "lifeboat-e2e-credentials";

/// Access key and secret of an S3 store.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

pub(crate) fn state_dir() -> PathBuf {
    std::env::var_os("LIFEBOAT_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/lifeboat-testbed"))
}

fn cache_dir() -> PathBuf {
    std::env::var_os("LIFEBOAT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/lifeboat"))
}

/// The root credentials the bed generated for its MinIO.
pub fn bed_credentials() -> Result<Credentials> {
    let path = state_dir().join("minio/credentials.env");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading the bed's MinIO credentials {} (is the bed up?)",
            path.display()
        )
    })?;
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_owned)
            .with_context(|| format!("{} has no {k}", path.display()))
    };
    Ok(Credentials {
        access_key_id: get("MINIO_ROOT_USER")?,
        secret_access_key: get("MINIO_ROOT_PASSWORD")?,
    })
}

/// Creates (or replaces) the credential Secret `secret` and the BackupRepo `name` for an S3
/// store. Does not wait: see [`wait_repo`].
pub async fn s3_repo(
    client: &Client,
    name: &str,
    endpoint: &str,
    bucket: &str,
    creds: &Credentials,
) -> Result<()> {
    s3_repo_with(client, name, endpoint, bucket, creds, &[]).await
}

/// As [`s3_repo`], with more `spec.config` keys (`caBundle`, `forcePathStyle`).
pub async fn s3_repo_with(
    client: &Client,
    name: &str,
    endpoint: &str,
    bucket: &str,
    creds: &Credentials,
    extra_config: &[(&str, &str)],
) -> Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    if nss.get_opt(CREDENTIALS_NS).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": CREDENTIALS_NS}}))?;
        nss.create(&PostParams::default(), &ns).await?;
    }
    let secret_name = format!("{name}-credential");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), CREDENTIALS_NS);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret_name},
        // A key the mover does not read, as a user's Secret may hold: it is never copied.
        "stringData": {"accessKeyId": creds.access_key_id, "secretAccessKey": creds.secret_access_key,
                       "rootPassword": format!("{}-root", creds.secret_access_key)}
    });
    secrets
        .patch(
            &secret_name,
            &PatchParams::apply("lifeboat-e2e").force(),
            &Patch::Apply(&secret),
        )
        .await
        .with_context(|| format!("applying Secret {CREDENTIALS_NS}/{secret_name}"))?;
    let repos: Api<BackupRepo> = Api::all(client.clone());
    // Replaced rather than patched, so no status of an earlier run is read as this one's.
    if repos.get_opt(name).await?.is_some() {
        delete_repo(client, name).await?;
    }
    let mut config = json!({"bucket": bucket, "endpoint": endpoint, "region": "us-east-1"});
    for (k, v) in extra_config {
        config[*k] = json!(v);
    }
    let repo: BackupRepo = serde_json::from_value(json!({
        "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
        "kind": "BackupRepo",
        "metadata": {"name": name},
        "spec": {
            "storageProviderRef": "minio",
            "pvReclaimPolicy": "Retain",
            "pathPrefix": "e2e",
            "config": config,
            "credential": {"name": secret_name, "namespace": CREDENTIALS_NS}
        }
    }))?;
    repos
        .create(&PostParams::default(), &repo)
        .await
        .with_context(|| format!("creating BackupRepo {name}"))?;
    Ok(())
}

/// Deletes BackupRepo `name` and waits until it is gone.
pub async fn delete_repo(client: &Client, name: &str) -> Result<()> {
    let repos: Api<BackupRepo> = Api::all(client.clone());
    let _ = repos.delete(name, &DeleteParams::default()).await;
    poll(
        &format!("BackupRepo {name} to be deleted"),
        Duration::from_secs(60),
        || async {
            Ok(match repos.get_opt(name).await? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            })
        },
    )
    .await
}

/// Waits until BackupRepo `name` is in `phase`; returns it.
pub async fn wait_repo(
    client: &Client,
    name: &str,
    phase: BackupRepoPhase,
    timeout: Duration,
) -> Result<BackupRepo> {
    let repos: Api<BackupRepo> = Api::all(client.clone());
    poll(
        &format!("BackupRepo {name} to be {phase:?}"),
        timeout,
        || async {
            let r = repos.get(name).await?;
            let st = r.status.clone().unwrap_or_default();
            Ok(if st.phase == Some(phase) {
                Ok(r)
            } else {
                Err(format!("phase {:?}, message {:?}", st.phase, st.message))
            })
        },
    )
    .await
}

/// A real S3 client for a store, to see what a repo holds.
pub fn store(endpoint: &str, bucket: &str, creds: &Credentials) -> Result<Arc<dyn ObjectStore>> {
    store_trusting(endpoint, bucket, creds, None)
}

/// As [`store`], trusting the authority `ca_pem` as well for an HTTPS endpoint.
pub fn store_trusting(
    endpoint: &str,
    bucket: &str,
    creds: &Credentials,
    ca_pem: Option<&str>,
) -> Result<Arc<dyn ObjectStore>> {
    let mut client = ClientOptions::new().with_timeout(Duration::from_secs(30));
    if let Some(pem) = ca_pem {
        for cert in object_store::Certificate::from_pem_bundle(pem.as_bytes())
            .context("reading the test authority's PEM")?
        {
            client = client.with_root_certificate(cert);
        }
    }
    let s = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .with_access_key_id(&creds.access_key_id)
        .with_secret_access_key(&creds.secret_access_key)
        .with_retry(RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
            ..Default::default()
        })
        .with_client_options(client)
        // After the client options, which would otherwise reset it.
        .with_allow_http(true)
        .build()
        .context("building the S3 client")?;
    Ok(Arc::new(s))
}

/// Every object below `prefix`, with its size.
pub async fn list(store: &dyn ObjectStore, prefix: &str) -> Result<Vec<(String, u64)>> {
    let prefix = StorePath::from(prefix.trim_matches('/'));
    let objects: Vec<_> = store
        .list(Some(&prefix))
        .try_collect()
        .await
        .with_context(|| format!("listing {prefix}"))?;
    Ok(objects
        .into_iter()
        .map(|o| (o.location.to_string(), o.size))
        .collect())
}

/// A MinIO server that one test owns, on the node address so that pods reach it, and that the
/// test may kill to make its repo unreachable. Killed and its data removed on drop.
pub struct OwnMinio {
    child: Option<Child>,
    dir: PathBuf,
    pub endpoint: String,
    pub bucket: String,
    pub creds: Credentials,
    /// The PEM of the authority that signed the server's certificate, when it serves HTTPS.
    pub ca_pem: Option<String>,
}

/// Makes a throwaway authority, and a certificate for the node address signed by it, with the
/// openssl command line, in MinIO's layout under `dir/certs`; returns the authority's PEM.
fn make_certificates(dir: &std::path::Path) -> Result<String> {
    std::fs::create_dir_all(dir.join("certs"))?;
    let run = |args: &[&str]| -> Result<()> {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .context("running openssl")?;
        if !o.status.success() {
            bail!("openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        }
        Ok(())
    };
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let args = |s: String| -> Vec<String> { s.split(' ').map(str::to_owned).collect() };
    let ca = args(format!(
        "req -x509 {key} -keyout ca.key -out ca.crt -days 2 -subj /CN=lifeboat-e2e-authority"
    ));
    run(&ca.iter().map(String::as_str).collect::<Vec<_>>())?;
    let csr = args(format!(
        "req {key} -keyout certs/private.key -out server.csr -subj /CN={NODE_IP}"
    ));
    run(&csr.iter().map(String::as_str).collect::<Vec<_>>())?;
    std::fs::write(
        dir.join("server.ext"),
        format!(
            "subjectAltName=IP:{NODE_IP}\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        ),
    )?;
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "certs/public.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ])?;
    Ok(std::fs::read_to_string(dir.join("ca.crt"))?)
}

impl OwnMinio {
    /// Starts MinIO with `bucket` present and waits until it answers a listing.
    pub async fn start(bucket: &str) -> Result<OwnMinio> {
        Self::launch(bucket, false).await
    }

    /// As [`OwnMinio::start`], serving HTTPS with a certificate from a throwaway authority
    /// ([`OwnMinio::ca_pem`]) that nothing on the node trusts.
    pub async fn start_tls(bucket: &str) -> Result<OwnMinio> {
        Self::launch(bucket, true).await
    }

    async fn launch(bucket: &str, tls: bool) -> Result<OwnMinio> {
        let bin = cache_dir().join("bin/minio");
        if !bin.exists() {
            bail!(
                "{} is missing; `cargo xtask testbed up` builds it",
                bin.display()
            );
        }
        let port = TcpListener::bind((NODE_IP, 0))
            .with_context(|| format!("finding a free port on {NODE_IP}"))?
            .local_addr()?
            .port();
        let dir = std::env::temp_dir().join(format!("lifeboat-e2e-minio-{port}"));
        std::fs::create_dir_all(dir.join("data").join(bucket))?;
        // Unlike any name: the leak search looks for both everywhere.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let creds = Credentials {
            access_key_id: format!("ak{:x}", nanos ^ u128::from(port)),
            secret_access_key: format!("sk{:x}{port}{}", nanos, std::process::id()),
        };
        let ca_pem = if tls {
            Some(make_certificates(&dir.join("tls"))?)
        } else {
            None
        };
        let log = std::fs::File::create(dir.join("minio.log"))?;
        let mut cmd = Command::new(&bin);
        cmd.args([
            "server",
            "--quiet",
            "--address",
            &format!("{NODE_IP}:{port}"),
        ]);
        if tls {
            cmd.arg("--certs-dir").arg(dir.join("tls").join("certs"));
        }
        let child = cmd
            .arg(dir.join("data"))
            .env("MINIO_ROOT_USER", &creds.access_key_id)
            .env("MINIO_ROOT_PASSWORD", &creds.secret_access_key)
            .env("MINIO_BROWSER", "off")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let scheme = if tls { "https" } else { "http" };
        let m = OwnMinio {
            child: Some(child),
            dir,
            endpoint: format!("{scheme}://{NODE_IP}:{port}"),
            bucket: bucket.into(),
            creds,
            ca_pem,
        };
        let s = store_trusting(&m.endpoint, bucket, &m.creds, m.ca_pem.as_deref())?;
        poll(
            &format!("MinIO at {} to serve bucket {bucket}", m.endpoint),
            Duration::from_secs(60),
            || async {
                Ok(match list(s.as_ref(), "").await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!("{e:#}")),
                })
            },
        )
        .await?;
        Ok(m)
    }

    /// Kills the server at once, as a crashed store or a cut network would look.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().context("killing MinIO")?;
            c.wait().context("reaping MinIO")?;
        }
        Ok(())
    }
}

impl Drop for OwnMinio {
    fn drop(&mut self) {
        let _ = self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
