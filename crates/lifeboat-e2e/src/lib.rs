//! Helpers for end-to-end tests against a real cluster: the test bed that
//! `cargo xtask testbed up` boots, or any cluster that KUBECONFIG points at and
//! that holds the bed's images.
//!
//! Everything goes through the Kubernetes API (exec and logs included), so the
//! tests need no tool on PATH. Each test works in a namespace of its own that
//! is deleted afterwards, waits by polling with deadlines, and prints what it
//! observed in the namespace when it fails.

pub mod audit;
pub mod leaks;
pub mod lifeboat;
pub mod operator;
pub mod s3;
pub mod scenario;
pub mod timeline;
pub mod writer;

use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolumeClaim, Pod, ServiceAccount};
use kube::api::{AttachParams, DeleteParams, ListParams, LogParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;
use tokio::io::AsyncReadExt;

/// The bed's Debian base image: a shell and coreutils.
pub const BASE_IMAGE: &str = "localhost/lifeboat/debian:bookworm";
/// The bed's FalkorDB image: redis-server with falkordb.so, and redis-cli.
pub const FALKORDB_IMAGE: &str = "localhost/lifeboat/falkordb:4.16.3";

/// The labels of every namespace the tests and the demo make: Pod Security `restricted` is
/// enforced, so every pod Lifeboat creates there proves that it is admitted under it.
pub fn restricted_namespace_labels(e2e: &str) -> serde_json::Value {
    json!({
        "lifeboat.dev/e2e": e2e,
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
    })
}

/// Makes a test's own pod (a Pod, or the pod template of a Job, StatefulSet or Deployment)
/// admissible in a `restricted` namespace: a non-root user, no privilege escalation, no
/// capabilities, the runtime's seccomp profile. Lifeboat's pods are never passed through this:
/// the operator has to build them admissible itself.
pub fn restrict_test_pod(manifest: &mut serde_json::Value, kind: &str) {
    let spec = match kind {
        "Pod" => manifest.get_mut("spec"),
        "Job" | "StatefulSet" | "Deployment" => manifest
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
            .and_then(|t| t.get_mut("spec")),
        _ => None,
    };
    let Some(spec) = spec.and_then(|s| s.as_object_mut()) else {
        return;
    };
    spec.entry("securityContext").or_insert_with(|| {
        json!({"runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999,
               "seccompProfile": {"type": "RuntimeDefault"}})
    });
    for list in ["initContainers", "containers"] {
        for c in spec
            .get_mut(list)
            .and_then(|c| c.as_array_mut())
            .into_iter()
            .flatten()
        {
            if let Some(c) = c.as_object_mut() {
                c.entry("securityContext").or_insert_with(|| {
                    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
                });
            }
        }
    }
}

/// Time for one pod to be scheduled, provisioned and started on a 2-core machine.
pub const POD_TIMEOUT: Duration = Duration::from_secs(180);

/// A client for the cluster named by KUBECONFIG. Fails, rather than skipping, when KUBECONFIG is
/// unset: a suite that passes without a cluster would hide that nothing was tested.
pub async fn client() -> Result<Client> {
    // Feature unification can give rustls two crypto providers; pick one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let path = std::env::var_os("KUBECONFIG")
        .filter(|p| !p.is_empty())
        .context(
            "KUBECONFIG is not set. These end-to-end tests need a running cluster: \
         run `cargo xtask testbed up`, then `cargo xtask testbed e2e` (or set \
         KUBECONFIG to the path `cargo xtask testbed env` prints).",
        )?;
    let kubeconfig = Kubeconfig::read_from(&path)
        .with_context(|| format!("reading KUBECONFIG {}", path.to_string_lossy()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading KUBECONFIG")?;
    Client::try_from(config).context("building the Kubernetes client")
}

/// A namespace that belongs to one test.
pub struct TestNamespace {
    pub client: Client,
    pub name: String,
}

impl TestNamespace {
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates an object from a JSON manifest in this namespace; a test's own pods are made
    /// admissible under `restricted` first ([`restrict_test_pod`]).
    pub async fn create<K>(&self, manifest: serde_json::Value) -> Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
        <K as kube::Resource>::DynamicType: Default,
    {
        let kind = K::kind(&Default::default()).to_string();
        let mut manifest = manifest;
        restrict_test_pod(&mut manifest, &kind);
        let obj: K = serde_json::from_value(manifest).context("manifest does not parse")?;
        self.api::<K>()
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating {kind} in {}", self.name))
    }
}

/// Fails naming each place in namespace `ns` (or the operator's log of the last `elapsed`) that
/// holds a secret value; prints what was searched.
async fn leak_check(client: &Client, ns: &str, elapsed: Duration) -> Result<()> {
    let since = i64::try_from(elapsed.as_secs())
        .unwrap_or(i64::MAX)
        .saturating_add(60);
    let found = leaks::search(client, ns, since).await?;
    eprintln!(
        "secret leak search in {ns}: {} secret values in {} texts, {} hits",
        found.secrets,
        found.texts,
        found.hits.len()
    );
    if !found.hits.is_empty() {
        bail!("secret values leaked:\n  {}", found.hits.join("\n  "));
    }
    Ok(())
}

/// Runs `body` in a fresh namespace named after `test`, prints the namespace's state if the body
/// fails, and deletes the namespace either way (waiting until it is gone).
pub async fn in_namespace<F, Fut>(test: &str, body: F) -> Result<()>
where
    F: FnOnce(TestNamespace) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let client = client().await?;
    let name = format!("e2e-{test}-{}", suffix());
    create_namespace(&client, &name, test).await?;

    let started = Instant::now();
    let result = body(TestNamespace {
        client: client.clone(),
        name: name.clone(),
    })
    .await;
    // Before the namespace goes: no secret value the test could have used may appear in its
    // objects, events, pod command lines, Job logs, or the operator's log of the test's time.
    let result = match result {
        Ok(()) => leak_check(&client, &name, started.elapsed()).await,
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        // The failure first: a CI report that keeps only the head of a long output still has it.
        eprintln!("test failed: {e:#}");
        eprintln!("{}", describe_namespace(&client, &name).await);
    }
    let cleanup = delete_namespace(&client, &name).await;
    match (result, cleanup) {
        (Err(e), _) => Err(e),
        (Ok(()), Err(e)) => Err(e.context(format!("cleaning up namespace {name}"))),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// A namespace `name` made afresh for a long-lived run (the demo, a benchmark): one a previous
/// run left is deleted first, so the run can be repeated any number of times.
pub async fn fresh_namespace(client: &Client, name: &str, label: &str) -> Result<TestNamespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(name).await?.is_some() {
        println!("removing the previous namespace {name}");
        delete_namespace(client, name).await?;
    }
    create_namespace(client, name, label).await?;
    Ok(TestNamespace {
        client: client.clone(),
        name: name.to_owned(),
    })
}

/// Creates namespace `name` with the restricted labels and waits for its default ServiceAccount.
async fn create_namespace(client: &Client, name: &str, label: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": restricted_namespace_labels(label)}
    }))?;
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    // The ServiceAccount admission plugin rejects pods until the namespace's default
    // ServiceAccount exists, and the controller-manager creates it asynchronously.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    poll(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async {
            Ok(sas
                .get_opt("default")
                .await?
                .map(|_| ())
                .ok_or_else(|| "not created yet".to_string()))
        },
    )
    .await
}

/// Deletes namespace `name` and waits until it is gone; one already being deleted is waited for.
pub async fn delete_namespace(client: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let terminating = namespaces
        .get_opt(name)
        .await?
        .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some());
    if !terminating {
        namespaces
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting namespace {name}"))?;
    }
    poll(
        &format!("namespace {name} to be deleted"),
        Duration::from_secs(300),
        || async {
            Ok(match namespaces.get_opt(name).await? {
                None => Ok(()),
                Some(ns) => Err(format!(
                    "still there, phase {:?}",
                    ns.status.and_then(|s| s.phase)
                )),
            })
        },
    )
    .await
}

/// Polls `check` every half second until it returns `Ok(Ok(v))` or the deadline passes. The
/// check reports what it observed as `Ok(Err(observation))`; the last observation is part of
/// the timeout error. An `Err` from the check (an API error) is retried the same way, since an
/// apiserver blip must not fail a test that would pass a moment later.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<std::result::Result<T, String>>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(observed)) => observed,
            Err(e) => format!("error: {e:#}"),
        };
        if start.elapsed() > timeout {
            bail!(
                "timed out after {}s waiting for {what}; last observed: {last}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the pod runs with all containers ready, and returns it.
pub async fn wait_pod_ready(pods: &Api<Pod>, name: &str) -> Result<Pod> {
    poll(&format!("pod {name} to be ready"), POD_TIMEOUT, || async {
        let Some(pod) = pods.get_opt(name).await? else {
            return Ok(Err("pod does not exist".to_string()));
        };
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            Ok(Ok(pod))
        } else {
            Ok(Err(pod_summary(&pod)))
        }
    })
    .await
}

/// The output of a command run in a container through the API's exec.
#[derive(Debug)]
pub struct ExecOutput {
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
    pub status: String,
}

/// Runs a command in a pod's (first) container through the API's exec (a websocket), with a
/// deadline.
pub async fn exec(pods: &Api<Pod>, pod: &str, command: &[&str]) -> Result<ExecOutput> {
    let run = async {
        let ap = AttachParams::default()
            .stdin(false)
            .stdout(true)
            .stderr(true);
        let mut proc = pods
            .exec(pod, command.iter().map(|s| s.to_string()), &ap)
            .await
            .with_context(|| format!("exec {command:?} in pod {pod}"))?;
        let mut out = proc.stdout().context("exec gave no stdout")?;
        let mut err = proc.stderr().context("exec gave no stderr")?;
        let status = proc.take_status().context("exec gave no status")?;
        let (mut o, mut e) = (String::new(), String::new());
        let (ro, re) = tokio::join!(out.read_to_string(&mut o), err.read_to_string(&mut e));
        ro?;
        re?;
        let st = status.await;
        proc.join().await.context("exec stream")?;
        let success = st.as_ref().and_then(|s| s.status.as_deref()) == Some("Success");
        let status = match st {
            Some(s) => format!(
                "{} {}",
                s.status.unwrap_or_default(),
                s.message.unwrap_or_default()
            ),
            None => "no status".to_string(),
        };
        Ok::<_, anyhow::Error>(ExecOutput {
            stdout: o,
            stderr: e,
            success,
            status,
        })
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .with_context(|| format!("exec {command:?} in pod {pod} took over 60s"))?
}

/// Like [`exec`], but fails unless the command exits 0.
pub async fn exec_ok(pods: &Api<Pod>, pod: &str, command: &[&str]) -> Result<String> {
    let out = exec(pods, pod, command).await?;
    if !out.success {
        bail!(
            "exec {command:?} in pod {pod} failed ({}); stdout: {:?}; stderr: {:?}",
            out.status,
            out.stdout,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// A pod's container logs through the API.
pub async fn logs(pods: &Api<Pod>, pod: &str) -> Result<String> {
    pods.logs(pod, &LogParams::default())
        .await
        .with_context(|| format!("logs of pod {pod}"))
}

/// One line about a pod: phase, conditions and container states.
pub fn pod_summary(pod: &Pod) -> String {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let Some(st) = &pod.status else {
        return format!("pod {name}: no status");
    };
    let mut s = format!("pod {name}: phase {}", st.phase.clone().unwrap_or_default());
    for c in st.conditions.iter().flatten() {
        let _ = write!(s, "; {}={}", c.type_, c.status);
        if let Some(r) = &c.reason {
            let _ = write!(s, " ({r}: {})", c.message.clone().unwrap_or_default());
        }
    }
    for cs in st.container_statuses.iter().flatten() {
        let state = cs.state.as_ref().map(|st| {
            if let Some(w) = &st.waiting {
                format!(
                    "waiting {} {}",
                    w.reason.clone().unwrap_or_default(),
                    w.message.clone().unwrap_or_default()
                )
            } else if let Some(t) = &st.terminated {
                format!(
                    "terminated exit {} {}",
                    t.exit_code,
                    t.reason.clone().unwrap_or_default()
                )
            } else {
                "running".to_string()
            }
        });
        let _ = write!(s, "; container {}: {}", cs.name, state.unwrap_or_default());
    }
    s
}

/// What a failing test saw: pods, claims, events and the containers' last log lines in its
/// namespace.
pub async fn describe_namespace(client: &Client, ns: &str) -> String {
    let mut s = format!("---- state of namespace {ns} ----\n");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    match pods.list(&ListParams::default()).await {
        Ok(list) => list.items.iter().for_each(|p| {
            let _ = writeln!(s, "{}", pod_summary(p));
        }),
        Err(e) => {
            let _ = writeln!(s, "listing pods: {e}");
        }
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = pvcs.list(&ListParams::default()).await {
        for c in list.items {
            let _ = writeln!(
                s,
                "pvc {}: phase {:?} volume {:?}",
                c.metadata.name.unwrap_or_default(),
                c.status.and_then(|st| st.phase),
                c.spec.and_then(|sp| sp.volume_name)
            );
        }
    }
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = events.list(&ListParams::default()).await {
        for e in list.items {
            let _ = writeln!(
                s,
                "event {} {}/{}: {} {}",
                e.type_.unwrap_or_default(),
                e.involved_object.kind.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            );
        }
    }
    // The last lines each container printed: a data pod's start script says which role it took
    // and why, which no event records.
    if let Ok(list) = pods.list(&ListParams::default()).await {
        for p in list.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            let containers = p.spec.map(|sp| sp.containers).unwrap_or_default();
            for c in containers {
                let params = LogParams {
                    container: Some(c.name.clone()),
                    tail_lines: Some(LOG_TAIL),
                    ..LogParams::default()
                };
                match pods.logs(&name, &params).await {
                    Ok(text) if !text.trim().is_empty() => {
                        let _ = writeln!(s, "logs {name}/{}:", c.name);
                        for line in text.lines() {
                            let _ = writeln!(s, "  | {line}");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = writeln!(s, "logs {name}/{}: unavailable: {e}", c.name);
                    }
                }
            }
        }
    }
    s.push_str("---- end ----");
    s
}

/// Log lines per container in a failing test's namespace dump.
const LOG_TAIL: i64 = 12;

/// Short, unique enough for namespaces of concurrent test runs.
fn suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", std::process::id() % 0x1000, nanos % 0x10000)
}
