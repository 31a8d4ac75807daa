//! Helpers for tests of Lifeboat itself: Cluster manifests like the field report's, commands
//! against the database through exec, and waiting on Lifeboat's objects.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use lifeboat_api::{Cluster, ClusterPhase};
use serde_json::{Value, json};

use crate::{ExecOutput, TestNamespace, exec, poll};

/// Long enough for a replication Cluster (2 data pods, 3 sentinels) to start on 2 cores.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(300);

/// The field report's Cluster: FalkorDB replication, `data` replicas plus 3 sentinels.
pub fn falkordb_cluster(name: &str, policy: &str, data: i32) -> Value {
    replication_cluster(
        name,
        "falkordb",
        ("falkordb", "falkordb-sent"),
        policy,
        data,
    )
}

/// A Redis replication Cluster as KubeBlocks' redis addon shapes it: `data` replicas of `redis`
/// plus 3 of `redis-sentinel`.
pub fn redis_cluster(name: &str, data: i32) -> Value {
    replication_cluster(name, "redis", ("redis", "redis-sentinel"), "Delete", data)
}

/// A `replication` Cluster of `cluster_def`: `data` replicas of the data component plus 3
/// sentinels, each with a 1Gi data volume.
fn replication_cluster(
    name: &str,
    cluster_def: &str,
    (data_component, sentinel): (&str, &str),
    policy: &str,
    data: i32,
) -> Value {
    let vct = json!([{
        "name": "data",
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }]);
    json!({
        "apiVersion": "apps.kubeblocks.io/v1",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "terminationPolicy": policy,
            "clusterDef": cluster_def,
            "topology": "replication",
            "componentSpecs": [
                {"name": data_component, "replicas": data, "volumeClaimTemplates": vct},
                {"name": sentinel, "replicas": 3, "volumeClaimTemplates": vct}
            ]
        }
    })
}

/// Creates a Cluster from a manifest.
pub async fn create_cluster(ns: &TestNamespace, manifest: Value) -> Result<Cluster> {
    ns.create::<Cluster>(manifest).await
}

/// A one-line account of a Cluster's status, for failure messages.
pub fn cluster_summary(c: &Cluster) -> String {
    let st = c.status.clone().unwrap_or_default();
    let conds: Vec<String> = st
        .conditions
        .iter()
        .map(|c| format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message))
        .collect();
    format!(
        "phase {:?}, message {:?}, conditions [{}]",
        st.phase,
        st.message.unwrap_or_default(),
        conds.join("; ")
    )
}

/// Waits until the Cluster has `phase`, and returns it.
pub async fn wait_phase(
    ns: &TestNamespace,
    name: &str,
    phase: ClusterPhase,
    timeout: Duration,
) -> Result<Cluster> {
    let api: Api<Cluster> = ns.api();
    poll(
        &format!("Cluster {name} to be {phase:?}"),
        timeout,
        || async {
            let Some(c) = api.get_opt(name).await? else {
                return Ok(Err("Cluster does not exist".into()));
            };
            if c.status.as_ref().and_then(|s| s.phase) == Some(phase) {
                Ok(Ok(c))
            } else {
                Ok(Err(cluster_summary(&c)))
            }
        },
    )
    .await
}

/// Runs `redis-cli` with the server's password in a pod of the Cluster (through exec).
pub async fn redis_cli(pods: &Api<Pod>, pod: &str, args: &str) -> Result<String> {
    let cmd = format!("redis-cli -a \"$REDIS_PASSWORD\" --no-auth-warning {args}");
    let out = exec(pods, pod, &["sh", "-c", &cmd]).await?;
    if !out.success {
        bail!(
            "redis-cli {args} in {pod} failed ({}): {} {}",
            out.status,
            out.stdout,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// Runs `redis-cli` against a sentinel pod, with the pod's `REDIS_PASSWORD`. A sentinel that has
/// no password refuses AUTH, and is asked again without one, so this works before and after
/// sentinels require the password.
pub async fn sentinel_cli(pods: &Api<Pod>, pod: &str, args: &str) -> Result<String> {
    let cmd = format!("REDISCLI_AUTH=\"$REDIS_PASSWORD\" redis-cli -p 26379 {args}");
    let mut out = exec(pods, pod, &["sh", "-c", &cmd]).await?;
    if auth_refused(&out) {
        let cmd = format!("redis-cli -p 26379 {args}");
        out = exec(pods, pod, &["sh", "-c", &cmd]).await?;
    }
    if !out.success {
        bail!(
            "sentinel {args} in {pod} failed ({}): {}",
            out.status,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// Whether redis-cli's AUTH was refused because the server has no password to check.
fn auth_refused(out: &ExecOutput) -> bool {
    // Redis 6 and later, and the older wording.
    [&out.stdout, &out.stderr]
        .iter()
        .any(|t| t.contains("without any password configured") || t.contains("no password is set"))
}

/// A field of `INFO` output.
pub fn info_field(info: &str, key: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_owned())
}

/// The pods of a component, by name.
pub async fn component_pods(
    ns: &TestNamespace,
    cluster: &str,
    component: &str,
) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = ns.api();
    let lp = ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={cluster},apps.kubeblocks.io/component-name={component}"
    ));
    let mut list = pods.list(&lp).await.context("listing pods")?.items;
    list.sort_by_key(|p| p.metadata.name.clone());
    Ok(list)
}

/// The FalkorDB data pod carrying `kubeblocks.io/role=primary`.
pub async fn primary_pod(
    ns: &TestNamespace,
    cluster: &str,
) -> Result<std::result::Result<String, String>> {
    primary_pod_of(ns, cluster, "falkordb").await
}

/// The pod of `component` carrying `kubeblocks.io/role=primary`.
pub async fn primary_pod_of(
    ns: &TestNamespace,
    cluster: &str,
    component: &str,
) -> Result<std::result::Result<String, String>> {
    let pods = component_pods(ns, cluster, component).await?;
    let primaries: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubeblocks.io/role"))
                .map(String::as_str)
                == Some("primary")
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    Ok(match primaries.as_slice() {
        [one] => Ok(one.clone()),
        other => Err(format!("pods labelled primary: {other:?}")),
    })
}

/// `DBSIZE` and per-database key counts as `INFO keyspace` reports them.
pub async fn keyspace(pods: &Api<Pod>, pod: &str) -> Result<String> {
    redis_cli(pods, pod, "INFO keyspace").await
}
