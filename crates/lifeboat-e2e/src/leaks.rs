//! No secret value appears where it does not belong: in any object's status or spec, in an
//! event, in a pod's command line or literal environment, or in a log of the operator or of a
//! Job. Every test namespace is searched before it is deleted, for every secret value the test
//! could have used: the namespace's own Secrets (the generated database passwords, the copies of
//! repo credentials), the tests' repo credentials and the bed's MinIO root credentials.

use std::collections::BTreeSet;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};
use lifeboat_api::{Backup, BackupPolicy, BackupRepo, Cluster, Restore};

/// Where the operator runs.
const OPERATOR_NAMESPACE: &str = "lifeboat-system";
const OPERATOR_SELECTOR: &str =
    "app.kubernetes.io/name=lifeboat,app.kubernetes.io/component=operator";

/// Values shorter than this are not searched: a short value (`true`, a port) is found in any text.
const MIN_SECRET_LEN: usize = 8;

/// What was searched and what was found.
#[derive(Debug, Default)]
pub struct Search {
    /// How many distinct secret values were looked for.
    pub secrets: usize,
    /// How many texts (objects, events, pod specs, logs) were searched.
    pub texts: usize,
    /// One line per hit: where, and which Secret's key it came from. Never the value.
    pub hits: Vec<String>,
}

/// The secret values to look for in namespace `ns`, each with where it came from.
async fn secrets(client: &Client, ns: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut sources = vec![ns.to_owned(), crate::s3::CREDENTIALS_NS.to_owned()];
    sources.dedup();
    for source in sources {
        let api: Api<Secret> = Api::namespaced(client.clone(), &source);
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(e.into()),
        };
        for s in list {
            // Service account tokens are the cluster's, not Lifeboat's to keep.
            if s.type_.as_deref() == Some("kubernetes.io/service-account-token") {
                continue;
            }
            for (k, v) in s.data.iter().flatten() {
                if let Ok(text) = String::from_utf8(v.0.clone()) {
                    out.push((format!("Secret {source}/{} key {k}", s.name_any()), text));
                }
            }
        }
    }
    if let Ok(bed) = crate::s3::bed_credentials() {
        out.push(("the bed's MinIO access key".into(), bed.access_key_id));
        out.push(("the bed's MinIO secret key".into(), bed.secret_access_key));
    }
    let mut seen = BTreeSet::new();
    out.retain(|(_, v)| v.len() >= MIN_SECRET_LEN && seen.insert(v.clone()));
    Ok(out)
}

/// Every text in `ns` (and of the operator) where no secret value may appear.
async fn texts(client: &Client, ns: &str, since_seconds: i64) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    async fn objects<K>(client: &Client, ns: &str, out: &mut Vec<(String, String)>) -> Result<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
        <K as kube::Resource>::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(client.clone(), ns);
        for o in api.list(&ListParams::default()).await?.items {
            let kind = K::kind(&Default::default()).to_string();
            out.push((
                format!("{kind} {ns}/{}", o.name_any()),
                serde_json::to_string(&o)?,
            ));
        }
        Ok(())
    }
    objects::<Cluster>(client, ns, &mut out).await?;
    objects::<Backup>(client, ns, &mut out).await?;
    objects::<Restore>(client, ns, &mut out).await?;
    objects::<BackupPolicy>(client, ns, &mut out).await?;
    objects::<k8s_openapi::api::core::v1::ConfigMap>(client, ns, &mut out).await?;
    objects::<Event>(client, ns, &mut out).await?;
    let repos: Api<BackupRepo> = Api::all(client.clone());
    for r in repos.list(&ListParams::default()).await?.items {
        out.push((
            format!("BackupRepo {}", r.name_any()),
            serde_json::to_string(&r)?,
        ));
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for p in pods.list(&ListParams::default()).await?.items {
        let name = p.name_any();
        // The command line and literal environment of every container: a value from a Secret
        // reference is where a secret belongs, a literal one is not.
        let spec = p.spec.clone().unwrap_or_default();
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            let mut line: Vec<String> = c.command.clone().unwrap_or_default();
            line.extend(c.args.clone().unwrap_or_default());
            line.extend(c.env.iter().flatten().filter_map(|e| e.value.clone()));
            out.push((
                format!("pod {ns}/{name} container {} command line and env", c.name),
                line.join(" "),
            ));
        }
        // The logs of the mover's Jobs (their pods carry the job-name label).
        if p.labels().contains_key("batch.kubernetes.io/job-name") {
            for c in &spec.containers {
                let lp = LogParams {
                    container: Some(c.name.clone()),
                    ..Default::default()
                };
                if let Ok(log) = pods.logs(&name, &lp).await {
                    out.push((format!("log of pod {ns}/{name}"), log));
                }
            }
        }
    }
    let operators: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    for p in operators
        .list(&ListParams::default().labels(OPERATOR_SELECTOR))
        .await?
        .items
    {
        let lp = LogParams {
            since_seconds: Some(since_seconds.max(1)),
            ..Default::default()
        };
        if let Ok(log) = operators.logs(&p.name_any(), &lp).await {
            out.push((format!("log of operator pod {}", p.name_any()), log));
        }
    }
    Ok(out)
}

/// Searches namespace `ns`, and the operator's log of the last `since_seconds`, for every secret
/// value the namespace's test could have used.
pub async fn search(client: &Client, ns: &str, since_seconds: i64) -> Result<Search> {
    let secrets = secrets(client, ns).await?;
    let texts = texts(client, ns, since_seconds).await?;
    let mut hits = Vec::new();
    for (whose, value) in &secrets {
        for (where_, text) in &texts {
            if text.contains(value.as_str()) {
                hits.push(format!("{where_} holds the value of {whose}"));
            }
        }
    }
    Ok(Search {
        secrets: secrets.len(),
        texts: texts.len(),
        hits,
    })
}
