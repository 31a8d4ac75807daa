//! Durability under faults: a client keeps writing to a FalkorDB replication Cluster while pods,
//! disks, sentinels or the operator are taken away, and no write that the primary acknowledged
//! and a replica confirmed (`WAIT`) may be missing afterwards. Each scenario prints one
//! `DURABILITY | …` row. Needs Lifeboat deployed on the bed (`cargo xtask testbed e2e` does it).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use lifeboat_api::{Cluster, ClusterPhase};
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::writer::{self, Outcome, Writer, WriterConfig};
use lifeboat_e2e::{TestNamespace, in_namespace, pod_summary, poll};
use serde_json::json;

const CLUSTER: &str = "fdb";
const DATA: &str = "falkordb";
const SENTINEL: &str = "falkordb-sent";
const SENTINELS: usize = 3;
/// Writes acknowledged and replicated before the fault, so that there is something to lose.
const BEFORE_FAULT: Duration = Duration::from_secs(5);
/// From the fault until the Cluster is Running again with every replaced pod back.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(300);
/// Writes acknowledged and replicated after recovery, before the writer stops.
const AFTER_RECOVERY: Duration = Duration::from_secs(3);
/// Where deploy/lifeboat.yaml runs the operator.
const OPERATOR_NAMESPACE: &str = "lifeboat-system";
const OPERATOR_DEPLOYMENT: &str = "lifeboat-operator";
const OPERATOR_SELECTOR: &str =
    "app.kubernetes.io/name=lifeboat,app.kubernetes.io/component=operator";

#[derive(Clone, Copy, Debug)]
enum Fault {
    PrimaryPod,
    AllDataPods,
    AllPods,
    PrimaryDiskAndAllPods,
    PrimaryPodAndOperator,
    ResourceRoll,
    AllSentinels,
}

impl Fault {
    fn describe(self) -> &'static str {
        match self {
            Fault::PrimaryPod => "primary pod deleted",
            Fault::AllDataPods => "every data pod deleted",
            Fault::AllPods => "every pod deleted",
            Fault::PrimaryDiskAndAllPods => "primary PVC and every pod deleted",
            Fault::PrimaryPodAndOperator => "primary pod and operator deleted",
            Fault::ResourceRoll => "resource edit rolls every data pod",
            Fault::AllSentinels => "every sentinel deleted",
        }
    }
}

/// What must be true again before the Cluster counts as recovered.
#[derive(Default)]
struct Expect {
    data: usize,
    /// Pods the fault removed, by name, with the UID they had: each must come back as a new pod.
    replaced: BTreeMap<String, String>,
    /// The deleted data PVC and its UID: it must come back as a new, bound claim.
    pvc: Option<(String, String)>,
    /// The Cluster generation the status must have observed.
    generation: Option<i64>,
    /// Operator pods deleted, by UID: the Deployment must be available with none of them.
    operator: Option<Vec<String>>,
}

fn selector(component: Option<&str>) -> String {
    match component {
        Some(c) => {
            format!("app.kubernetes.io/instance={CLUSTER},apps.kubeblocks.io/component-name={c}")
        }
        None => format!("app.kubernetes.io/instance={CLUSTER}"),
    }
}

/// Pod name to UID for the pods matching `selector`.
async fn uids(pods: &Api<Pod>, selector: &str) -> Result<BTreeMap<String, String>> {
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await
        .context("listing pods")?
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect())
}

/// Deletes every pod matching `selector` in one request, as a node or zone outage would.
async fn delete_all(pods: &Api<Pod>, selector: &str) -> Result<()> {
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(selector),
    )
    .await
    .with_context(|| format!("deleting the pods {selector}"))?;
    Ok(())
}

async fn primary(ns: &TestNamespace) -> Result<String> {
    poll("one primary label", Duration::from_secs(60), || {
        primary_pod(ns, CLUSTER)
    })
    .await
}

async fn inject(ns: &TestNamespace, fault: Fault, data: usize) -> Result<Expect> {
    let pods: Api<Pod> = ns.api();
    let mut expect = Expect {
        data,
        ..Expect::default()
    };
    match fault {
        Fault::PrimaryPod | Fault::PrimaryPodAndOperator => {
            let p = primary(ns).await?;
            let all = uids(&pods, &selector(Some(DATA))).await?;
            expect.replaced = all.into_iter().filter(|(n, _)| *n == p).collect();
            pods.delete(&p, &DeleteParams::default()).await?;
            if matches!(fault, Fault::PrimaryPodAndOperator) {
                let operators: Api<Pod> = Api::namespaced(ns.client.clone(), OPERATOR_NAMESPACE);
                expect.operator = Some(
                    uids(&operators, OPERATOR_SELECTOR)
                        .await?
                        .into_values()
                        .collect(),
                );
                delete_all(&operators, OPERATOR_SELECTOR).await?;
            }
        }
        Fault::AllDataPods => {
            expect.replaced = uids(&pods, &selector(Some(DATA))).await?;
            delete_all(&pods, &selector(Some(DATA))).await?;
        }
        Fault::AllPods => {
            expect.replaced = uids(&pods, &selector(None)).await?;
            delete_all(&pods, &selector(None)).await?;
        }
        Fault::PrimaryDiskAndAllPods => {
            let p = primary(ns).await?;
            let ordinal = p.rsplit('-').next().unwrap_or_default();
            let pvc = format!("data-{CLUSTER}-{DATA}-{ordinal}");
            let pvcs: Api<PersistentVolumeClaim> = ns.api();
            let uid = pvcs.get(&pvc).await?.metadata.uid.unwrap_or_default();
            expect.replaced = uids(&pods, &selector(None)).await?;
            // The claim stays Terminating while its pod uses it, and goes with the pod: the disk
            // is lost exactly when the whole Cluster restarts.
            pvcs.delete(&pvc, &DeleteParams::default()).await?;
            delete_all(&pods, &selector(None)).await?;
            expect.pvc = Some((pvc, uid));
        }
        Fault::ResourceRoll => {
            expect.replaced = uids(&pods, &selector(Some(DATA))).await?;
            let clusters: Api<Cluster> = ns.api();
            let resources = json!({"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "768Mi"}});
            let patch = json!([{"op": "add", "path": "/spec/componentSpecs/0/resources", "value": resources}]);
            let patched = clusters
                .patch(
                    CLUSTER,
                    &PatchParams::default(),
                    &Patch::Json::<()>(serde_json::from_value(patch)?),
                )
                .await?;
            expect.generation = patched.metadata.generation;
        }
        Fault::AllSentinels => {
            expect.replaced = uids(&pods, &selector(Some(SENTINEL))).await?;
            delete_all(&pods, &selector(Some(SENTINEL))).await?;
        }
    }
    Ok(expect)
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether the Cluster is back: Running (for the edited generation), every pod Ready and each
/// removed pod replaced by a new one, one primary label, a new claim for a lost disk, and a
/// running operator in place of a killed one. Otherwise what is still missing.
async fn recovered(ns: &TestNamespace, expect: &Expect) -> Result<std::result::Result<(), String>> {
    let mut missing = Vec::new();
    let clusters: Api<Cluster> = ns.api();
    let c = clusters.get(CLUSTER).await?;
    let st = c.status.clone().unwrap_or_default();
    if st.phase != Some(ClusterPhase::Running)
        || expect
            .generation
            .is_some_and(|g| st.observed_generation < Some(g))
    {
        missing.push(format!("Cluster: {}", cluster_summary(&c)));
    }
    let pods: Api<Pod> = ns.api();
    let list = pods
        .list(&ListParams::default().labels(&selector(None)))
        .await?
        .items;
    let live: Vec<&Pod> = list
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    if live.len() != expect.data + SENTINELS {
        missing.push(format!(
            "{} of {} pods",
            live.len(),
            expect.data + SENTINELS
        ));
    }
    for p in &live {
        let name = p.metadata.name.clone().unwrap_or_default();
        let old = expect.replaced.get(&name);
        if old.is_some() && old == p.metadata.uid.as_ref() {
            missing.push(format!("{name} not replaced yet"));
        } else if !ready(p) {
            missing.push(pod_summary(p));
        }
    }
    if let Err(why) = primary_pod(ns, CLUSTER).await? {
        missing.push(why);
    }
    if let Some((name, uid)) = &expect.pvc {
        let pvcs: Api<PersistentVolumeClaim> = ns.api();
        match pvcs.get_opt(name).await? {
            Some(c)
                if c.metadata.uid.as_ref() != Some(uid)
                    && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") => {}
            Some(c) => missing.push(format!(
                "PVC {name}: {} uid, phase {:?}",
                if c.metadata.uid.as_ref() == Some(uid) {
                    "old"
                } else {
                    "new"
                },
                c.status.and_then(|s| s.phase)
            )),
            None => missing.push(format!("PVC {name} absent")),
        }
    }
    if let Some(old) = &expect.operator {
        let deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), OPERATOR_NAMESPACE);
        let d = deployments.get(OPERATOR_DEPLOYMENT).await?;
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let ready_replicas = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        let operators: Api<Pod> = Api::namespaced(ns.client.clone(), OPERATOR_NAMESPACE);
        let left: Vec<String> = uids(&operators, OPERATOR_SELECTOR)
            .await?
            .into_iter()
            .filter(|(_, uid)| old.contains(uid))
            .map(|(n, _)| n)
            .collect();
        if ready_replicas < want || !left.is_empty() {
            missing.push(format!(
                "operator: {ready_replicas} of {want} ready, old pods left {left:?}"
            ));
        }
    }
    Ok(if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    })
}

/// Waits until every sentinel names the labelled primary's address as the master.
async fn sentinels_agree(ns: &TestNamespace, primary: &str) -> Result<()> {
    let pods: Api<Pod> = ns.api();
    poll(
        &format!("every sentinel to name {primary} as the master"),
        Duration::from_secs(60),
        || async {
            let mut masters = Vec::new();
            for s in component_pods(ns, CLUSTER, SENTINEL).await? {
                let name = s.metadata.name.clone().unwrap_or_default();
                let out = sentinel_cli(
                    &pods,
                    &name,
                    &format!("SENTINEL get-master-addr-by-name {CLUSTER}-{DATA}"),
                )
                .await?;
                masters.push(out.lines().next().unwrap_or_default().to_owned());
            }
            let prefix = format!("{primary}.");
            Ok(
                if masters.len() == SENTINELS && masters.iter().all(|m| m.starts_with(&prefix)) {
                    Ok(())
                } else {
                    Err(format!("sentinels name {masters:?}"))
                },
            )
        },
    )
    .await
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || "never".to_owned(),
        |d| format!("{:.1}s", d.as_secs_f64()),
    )
}

fn count(n: Option<usize>) -> String {
    n.map_or_else(|| "?".to_owned(), |n| n.to_string())
}

/// The scenario's row. Written to the process's stdout directly: the test harness captures
/// `println!` of passing tests, and the rows are wanted from every run.
fn report(
    fault: Fault,
    data: usize,
    outcome: &Outcome,
    check: Option<&writer::Check>,
    running: Option<Duration>,
) {
    let name = if data == 2 {
        fault.describe().to_owned()
    } else {
        format!("{} ({data} data pods)", fault.describe())
    };
    let row = format!(
        "DURABILITY | {name} | attempted {} | acked+replicated {} | lost replicated {} | lost primary-only {} | writes again after {} | Running after {}\n",
        outcome.attempted,
        outcome.acked_replicated.len(),
        count(check.map(|c| c.lost_replicated.len())),
        count(check.map(|c| c.lost_primary_only.len())),
        secs(outcome.writes_again_after),
        secs(running),
    );
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(row.as_bytes());
    let _ = out.flush();
}

/// Starts a Cluster with `data` data pods and 3 sentinels, writes a graph, keeps a writer going
/// through `fault` until the Cluster has recovered and writes have been replicated again for a
/// while, then checks nothing acknowledged and replicated was lost.
async fn scenario(test: &str, fault: Fault, data: usize) -> Result<()> {
    in_namespace(test, |ns| async move {
        create_cluster(&ns, falkordb_cluster(CLUSTER, "Delete", i32::try_from(data)?)).await?;
        wait_phase(&ns, CLUSTER, ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        writer::write_graph(&ns, CLUSTER).await?;
        let w = Writer::start(&ns, CLUSTER, WriterConfig::default()).await?;
        w.wait_replicated_for(Instant::now(), BEFORE_FAULT, Duration::from_secs(60)).await?;

        let t0 = w.mark();
        let injected = inject(&ns, fault, data).await;
        let recovery = match &injected {
            Ok(expect) => poll(
                &format!("the Cluster to recover from: {}", fault.describe()),
                RECOVERY_TIMEOUT,
                || async {
                    Ok(recovered(&ns, expect).await?.map_err(|why| format!("{why}; {}", w.progress())))
                },
            )
            .await
            .map(|()| t0.elapsed()),
            Err(e) => Err(anyhow::anyhow!("injecting the fault: {e:#}")),
        };
        let settled = match &recovery {
            Ok(_) => w.wait_replicated_for(Instant::now(), AFTER_RECOVERY, Duration::from_secs(120)).await,
            Err(_) => Ok(()),
        };
        let outcome = w.finish().await?;
        let check = match (&recovery, &settled) {
            (Ok(_), Ok(())) => Some(writer::check(&ns, CLUSTER, &outcome).await),
            _ => None,
        };
        report(fault, data, &outcome, check.as_ref().and_then(|c| c.as_ref().ok()), recovery.as_ref().ok().copied());
        let running = recovery?;
        settled?;
        let check = check.context("no read-back")??;
        eprintln!(
            "{}: failed writes {}, primary-only acknowledged {} (lost {}), writes interrupted for {}, recovered in {:.1}s",
            fault.describe(),
            outcome.failed,
            outcome.acked_primary_only.len(),
            check.lost_primary_only.len(),
            secs(outcome.interrupted_for),
            running.as_secs_f64()
        );
        if !check.lost_replicated.is_empty() {
            bail!(
                "{} of {} writes acknowledged by the primary and a replica are gone from the primary {}: {}",
                check.lost_replicated.len(),
                outcome.acked_replicated.len(),
                check.primary,
                writer::sample(&check.lost_replicated)
            );
        }
        wait_phase(&ns, CLUSTER, ClusterPhase::Running, Duration::from_secs(60)).await?;
        let labelled = primary(&ns).await?;
        ensure!(labelled == check.primary, "the primary label moved from {} to {labelled} after the read-back", check.primary);
        sentinels_agree(&ns, &labelled).await?;
        writer::check_replicas(&ns, CLUSTER, &outcome.acked_replicated, Duration::from_secs(120)).await?;
        let nodes = writer::graph_nodes(&ns, CLUSTER).await?;
        ensure!(nodes == writer::GRAPH_NODES, "the graph has {nodes} nodes on {labelled}, {} were written", writer::GRAPH_NODES);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn durability_primary_pod_deleted() -> Result<()> {
    scenario("dur-primary", Fault::PrimaryPod, 2).await
}

#[tokio::test]
async fn durability_every_data_pod_deleted() -> Result<()> {
    scenario("dur-all-data", Fault::AllDataPods, 2).await
}

#[tokio::test]
async fn durability_every_pod_deleted() -> Result<()> {
    scenario("dur-all-pods", Fault::AllPods, 2).await
}

#[tokio::test]
async fn durability_primary_disk_lost_and_every_pod_deleted() -> Result<()> {
    scenario("dur-disk", Fault::PrimaryDiskAndAllPods, 2).await
}

#[tokio::test]
async fn durability_operator_killed_during_failover() -> Result<()> {
    scenario("dur-operator", Fault::PrimaryPodAndOperator, 2).await
}

#[tokio::test]
async fn durability_resource_edit_rolls_every_pod() -> Result<()> {
    scenario("dur-roll", Fault::ResourceRoll, 2).await
}

#[tokio::test]
async fn durability_every_sentinel_restarted() -> Result<()> {
    scenario("dur-sentinels", Fault::AllSentinels, 2).await
}

#[tokio::test]
async fn durability_primary_pod_deleted_three_data_pods() -> Result<()> {
    scenario("dur-primary-3", Fault::PrimaryPod, 3).await
}

/// Every data volume lost, then every pod: no copy of the data survives, so the Cluster must not
/// come back `Running` over empty volumes. It says which pods wait and why, in its status and an
/// event, and no data pod is Ready.
#[tokio::test]
async fn durability_every_data_volume_lost_is_not_running_and_says_why() -> Result<()> {
    in_namespace("dur-all-disks", |ns| async move {
        create_cluster(&ns, falkordb_cluster(CLUSTER, "Delete", 2)).await?;
        wait_phase(&ns, CLUSTER, ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        writer::write_graph(&ns, CLUSTER).await?;
        let pods: Api<Pod> = ns.api();
        let pvcs: Api<PersistentVolumeClaim> = ns.api();
        for i in 0..2 {
            pvcs.delete(
                &format!("data-{CLUSTER}-{DATA}-{i}"),
                &DeleteParams::default(),
            )
            .await?;
        }
        delete_all(&pods, &selector(None)).await?;
        let clusters: Api<Cluster> = ns.api();
        let message = poll(
            "the Cluster to say its data pods wait over empty volumes",
            Duration::from_secs(240),
            || async {
                let c = clusters.get(CLUSTER).await?;
                let msg = c
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_default();
                Ok(
                    if msg.contains("does not start its server") && msg.contains("empty volume") {
                        Ok((c.status.and_then(|s| s.phase), msg))
                    } else {
                        Err(cluster_summary(&c))
                    },
                )
            },
        )
        .await?;
        ensure!(
            message.0 != Some(ClusterPhase::Running),
            "the Cluster reads Running over empty volumes: {}",
            message.1
        );
        ensure!(
            message.1.contains(&format!("{CLUSTER}-{DATA}-0"))
                || message.1.contains(&format!("{CLUSTER}-{DATA}-1")),
            "the message names no pod: {}",
            message.1
        );
        // A bounded look: during 15 s the Cluster never turns Running and no data pod is Ready.
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            let c = clusters.get(CLUSTER).await?;
            ensure!(
                c.status.as_ref().and_then(|s| s.phase) != Some(ClusterPhase::Running),
                "the Cluster turned Running: {}",
                cluster_summary(&c)
            );
            for p in component_pods(&ns, CLUSTER, DATA).await? {
                ensure!(
                    !ready(&p),
                    "data pod is Ready over an empty volume: {}",
                    pod_summary(&p)
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let events: Api<k8s_openapi::api::core::v1::Event> = ns.api();
        let waiting = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("WaitingForData"))
            .count();
        ensure!(waiting > 0, "no WaitingForData event was published");
        eprintln!(
            "every data volume lost: phase {:?}, message: {}",
            message.0, message.1
        );
        Ok(())
    })
    .await
}
