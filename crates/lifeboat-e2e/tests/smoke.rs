//! Smoke suite for the test bed: the cluster features Lifeboat relies on, each proven on the
//! real components. Needs KUBECONFIG (`cargo xtask testbed e2e` sets it); fails without it.

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, ListParams};
use lifeboat_e2e::{
    BASE_IMAGE, FALKORDB_IMAGE, POD_TIMEOUT, TestNamespace, exec_ok, in_namespace, logs,
    pod_summary, poll, wait_pod_ready,
};
use serde_json::json;
use std::time::Duration;

/// A container that idles until deleted; exec does the work.
fn idle_container(image: &str) -> serde_json::Value {
    json!({
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "infinity"],
    })
}

/// 1. A StatefulSet's volumeClaimTemplate volume keeps a file across the pod's deletion.
#[tokio::test(flavor = "multi_thread")]
async fn statefulset_volume_survives_pod_deletion() -> Result<()> {
    in_namespace("sts", |ns| async move {
        ns.create::<Service>(json!({
            "metadata": {"name": "data"},
            "spec": {"clusterIP": "None", "selector": {"app": "data"}, "ports": [{"port": 80}]}
        }))
        .await?;
        let mut container = idle_container(BASE_IMAGE);
        container["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
        ns.create::<StatefulSet>(json!({
            "metadata": {"name": "data"},
            "spec": {
                "serviceName": "data",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "data"}},
                "template": {
                    "metadata": {"labels": {"app": "data"}},
                    "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "16Mi"}}
                    }
                }]
            }
        }))
        .await?;

        let pods = ns.api::<Pod>();
        let first = wait_pod_ready(&pods, "data-0").await?;
        let token = format!(
            "written-by-{}",
            first.metadata.uid.clone().unwrap_or_default()
        );
        exec_ok(
            &pods,
            "data-0",
            &["sh", "-c", &format!("echo {token} > /data/marker && sync")],
        )
        .await?;

        pods.delete("data-0", &DeleteParams::default())
            .await
            .context("deleting data-0")?;
        let old_uid = first.metadata.uid.clone();
        poll(
            "the StatefulSet to recreate data-0",
            POD_TIMEOUT,
            || async {
                match pods.get_opt("data-0").await? {
                    Some(p) if p.metadata.uid != old_uid => Ok(Ok(())),
                    Some(_) => Ok(Err("the old pod is still there".to_string())),
                    None => Ok(Err("no pod yet".to_string())),
                }
            },
        )
        .await?;
        wait_pod_ready(&pods, "data-0").await?;
        let read = exec_ok(&pods, "data-0", &["cat", "/data/marker"]).await?;
        ensure!(
            read.trim() == token,
            "the new pod read {read:?}, expected {token:?}"
        );

        let claim = ns.api::<PersistentVolumeClaim>().get("data-data-0").await?;
        let phase = claim.status.and_then(|s| s.phase);
        ensure!(
            phase.as_deref() == Some("Bound"),
            "claim data-data-0 is {phase:?}"
        );
        Ok(())
    })
    .await
}

/// 2. A Job mounting an existing claim completes, and its output is readable through the API.
#[tokio::test(flavor = "multi_thread")]
async fn job_with_existing_claim_completes_and_logs() -> Result<()> {
    in_namespace("job", |ns| async move {
        ns.create::<PersistentVolumeClaim>(json!({
            "metadata": {"name": "work"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "16Mi"}}
            }
        }))
        .await?;
        ns.create::<Job>(json!({
            "metadata": {"name": "writer"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "main",
                            "image": BASE_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c",
                                "echo payload > /scratch/file && echo \"job read $(cat /scratch/file)\""],
                            "volumeMounts": [{"name": "work", "mountPath": "/scratch"}]
                        }],
                        "volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": "work"}}]
                    }
                }
            }
        }))
        .await?;

        let jobs = ns.api::<Job>();
        poll("job writer to complete", POD_TIMEOUT, || async {
            let job = jobs.get("writer").await?;
            let st = job.status.unwrap_or_default();
            if st.succeeded.unwrap_or(0) >= 1 {
                return Ok(Ok(()));
            }
            Ok(Err(format!(
                "active {:?} succeeded {:?} failed {:?}",
                st.active, st.succeeded, st.failed
            )))
        })
        .await?;

        let pods = ns.api::<Pod>();
        let list = pods.list(&ListParams::default().labels("job-name=writer")).await?;
        let pod = list.items.first().context("the job's pod is gone")?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let out = logs(&pods, &name).await?;
        ensure!(out.contains("job read payload"), "unexpected job log: {out:?}");
        Ok(())
    })
    .await
}

/// 3. A pod reaches another through a Service name (kube-proxy) and through a StatefulSet pod's
/// stable name under its headless Service (CoreDNS).
#[tokio::test(flavor = "multi_thread")]
async fn pod_reaches_pod_through_service_dns() -> Result<()> {
    in_namespace("dns", |ns| async move {
        for (name, headless) in [("kv", false), ("kv-hl", true)] {
            let mut spec = json!({"selector": {"app": "kv"}, "ports": [{"port": 6379}]});
            if headless {
                spec["clusterIP"] = json!("None");
            }
            ns.create::<Service>(json!({"metadata": {"name": name}, "spec": spec}))
                .await?;
        }
        ns.create::<StatefulSet>(json!({
            "metadata": {"name": "kv"},
            "spec": {
                "serviceName": "kv-hl",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "kv"}},
                "template": {
                    "metadata": {"labels": {"app": "kv"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "redis",
                            "image": FALKORDB_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["redis-server", "--protected-mode", "no", "--save", ""],
                            "readinessProbe": {
                                "exec": {"command": ["redis-cli", "ping"]},
                                "periodSeconds": 1
                            }
                        }]
                    }
                }
            }
        }))
        .await?;
        let mut client = idle_container(FALKORDB_IMAGE);
        client["name"] = json!("client");
        ns.create::<Pod>(json!({
            "metadata": {"name": "client"},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [client]}
        }))
        .await?;

        let pods = ns.api::<Pod>();
        wait_pod_ready(&pods, "kv-0").await?;
        wait_pod_ready(&pods, "client").await?;
        let fqdn = format!("kv.{}.svc.cluster.local", ns.name);
        for host in ["kv", fqdn.as_str(), "kv-0.kv-hl"] {
            // Endpoints and DNS records follow readiness by a moment, hence the poll.
            poll(
                &format!("PING through {host}"),
                Duration::from_secs(60),
                || async {
                    let out =
                        lifeboat_e2e::exec(&pods, "client", &["redis-cli", "-h", host, "ping"])
                            .await?;
                    if out.stdout.trim() == "PONG" {
                        Ok(Ok(()))
                    } else {
                        Ok(Err(format!(
                            "stdout {:?} stderr {:?}",
                            out.stdout, out.stderr
                        )))
                    }
                },
            )
            .await?;
        }
        Ok(())
    })
    .await
}

/// 4. The local FalkorDB image serves graph queries, checked through the API's exec.
#[tokio::test(flavor = "multi_thread")]
async fn falkordb_answers_graph_query() -> Result<()> {
    in_namespace("falkordb", |ns| async move {
        ns.create::<Pod>(json!({
            "metadata": {"name": "falkordb"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "falkordb",
                    "image": FALKORDB_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "readinessProbe": {
                        "exec": {"command": ["redis-cli", "ping"]},
                        "periodSeconds": 1
                    }
                }]
            }
        }))
        .await?;
        let pods = ns.api::<Pod>();
        wait_pod_ready(&pods, "falkordb").await?;

        let create = "CREATE (:Person {name:'ada'})-[:KNOWS]->(:Person {name:'bob'})";
        let out = exec_ok(
            &pods,
            "falkordb",
            &["redis-cli", "GRAPH.QUERY", "social", create],
        )
        .await?;
        ensure!(
            out.contains("Nodes created: 2"),
            "GRAPH.QUERY CREATE answered {out:?}"
        );

        let query = "MATCH (a:Person)-[:KNOWS]->(b) RETURN b.name";
        let out = exec_ok(
            &pods,
            "falkordb",
            &["redis-cli", "GRAPH.QUERY", "social", query],
        )
        .await?;
        ensure!(out.contains("bob"), "GRAPH.QUERY MATCH answered {out:?}");

        // The graph's key, and possibly the `telemetry{social}` stream FalkorDB adds beside it
        // asynchronously after queries; nothing else.
        let keys = exec_ok(&pods, "falkordb", &["redis-cli", "--raw", "KEYS", "*"]).await?;
        let mut keys: Vec<&str> = keys
            .lines()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .collect();
        keys.sort_unstable();
        ensure!(
            keys == ["social"] || keys == ["social", "telemetry{social}"],
            "KEYS answered {keys:?}, expected the graph key (and its telemetry stream)"
        );
        let out = exec_ok(&pods, "falkordb", &["redis-cli", "DBSIZE"]).await?;
        let n: usize = out.trim().parse().unwrap_or(0);
        ensure!(
            (1..=2).contains(&n),
            "DBSIZE answered {out:?}, expected the graph key and at most its telemetry stream"
        );

        let out = exec_ok(&pods, "falkordb", &["redis-cli", "MODULE", "LIST"]).await?;
        ensure!(out.contains("graph"), "MODULE LIST answered {out:?}");
        Ok(())
    })
    .await
}

/// 5. A pod whose claim does not exist stays Pending, and the scheduler says why in the pod's
/// conditions and in an event.
#[tokio::test(flavor = "multi_thread")]
async fn pod_with_missing_claim_stays_pending_with_reason() -> Result<()> {
    in_namespace("pending", |ns: TestNamespace| async move {
        let mut container = idle_container(BASE_IMAGE);
        container["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
        ns.create::<Pod>(json!({
            "metadata": {"name": "orphan"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [container],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
            }
        }))
        .await?;

        let pods = ns.api::<Pod>();
        let message = poll(
            "the scheduler to mark the pod unschedulable",
            POD_TIMEOUT,
            || async {
                let pod = pods.get("orphan").await?;
                let cond = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                            .cloned()
                    });
                match cond {
                    Some(c) if c.reason.as_deref() == Some("Unschedulable") => {
                        Ok(Ok(c.message.unwrap_or_default()))
                    }
                    _ => Ok(Err(pod_summary(&pod))),
                }
            },
        )
        .await?;
        ensure!(
            message.contains("persistentvolumeclaim \"missing\" not found"),
            "unexpected scheduler message: {message:?}"
        );

        let events = ns.api::<Event>();
        let event = poll(
            "a FailedScheduling event",
            Duration::from_secs(60),
            || async {
                let list = events.list(&ListParams::default()).await?;
                let found = list.items.into_iter().find(|e| {
                    e.involved_object.name.as_deref() == Some("orphan")
                        && e.reason.as_deref() == Some("FailedScheduling")
                });
                Ok(found.ok_or_else(|| "no FailedScheduling event yet".to_string()))
            },
        )
        .await?;
        let text = event.message.unwrap_or_default();
        ensure!(
            text.contains("\"missing\" not found"),
            "unexpected event message: {text:?}"
        );

        // Still Pending: nothing bound it or started it meanwhile.
        let pod = pods.get("orphan").await?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        ensure!(phase.as_deref() == Some("Pending"), "{}", pod_summary(&pod));
        Ok(())
    })
    .await
}
