//! The cluster controller on the test bed, asserting on the database: replication, sentinel,
//! failover, scaling, termination policies and invalid specs. Needs Lifeboat deployed on the bed
//! (`cargo xtask testbed e2e` does it).

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Endpoints, Event, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use lifeboat_api::{Cluster, ClusterPhase};
use lifeboat_e2e::lifeboat::*;
use lifeboat_e2e::{in_namespace, poll};
use serde_json::json;

#[tokio::test]
async fn replication_cluster_runs_replicates_and_agrees_on_the_master() -> Result<()> {
    in_namespace("cluster-basic", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let primary = poll("one primary label", Duration::from_secs(30), || primary_pod(&ns, "fdb")).await?;
        let info = redis_cli(&pods, &primary, "INFO replication").await?;
        ensure!(info_field(&info, "role").as_deref() == Some("master"), "primary {primary} is not master: {info}");
        ensure!(info_field(&info, "connected_slaves").as_deref() == Some("1"), "primary {primary} should have 1 connected replica: {info}");

        let mut masters = Vec::new();
        for s in component_pods(&ns, "fdb", "falkordb-sent").await? {
            let name = s.metadata.name.clone().unwrap_or_default();
            let out = sentinel_cli(&pods, &name, "SENTINEL get-master-addr-by-name fdb-falkordb").await?;
            masters.push(out.lines().next().unwrap_or_default().to_owned());
        }
        ensure!(masters.len() == 3, "expected 3 sentinels, got {masters:?}");
        ensure!(masters.iter().all(|m| m == &masters[0]), "sentinels disagree: {masters:?}");
        ensure!(masters[0].starts_with(&primary), "sentinels name {} but the primary label is on {primary}", masters[0]);

        // Write through the client Service; read on the replica.
        let svc = format!("fdb-falkordb.{}.svc.cluster.local", ns.name);
        redis_cli(&pods, &primary, &format!("-h {svc} SET lifeboat:e2e hello")).await?;
        redis_cli(&pods, &primary, &format!("-h {svc} GRAPH.QUERY social \"CREATE (:Person {{name:'ada'}})-[:KNOWS]->(:Person {{name:'bob'}})\"")).await?;
        let replica = component_pods(&ns, "fdb", "falkordb").await?
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .find(|n| n != &primary)
            .ok_or_else(|| anyhow::anyhow!("no replica pod"))?;
        poll("the replica to hold the key and the graph", Duration::from_secs(30), || async {
            let v = redis_cli(&pods, &replica, "GET lifeboat:e2e").await?;
            let g = redis_cli(&pods, &replica, "GRAPH.RO_QUERY social \"MATCH (a)-[:KNOWS]->(b) RETURN a.name, b.name\"").await?;
            Ok(if v.trim() == "hello" && g.contains("ada") && g.contains("bob") { Ok(()) } else { Err(format!("GET: {v:?}; graph: {g:?}")) })
        })
        .await
    })
    .await
}

#[tokio::test]
async fn primary_deleted_fails_over_and_labels_follow() -> Result<()> {
    in_namespace("cluster-failover", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let old = poll("one primary label", Duration::from_secs(30), || primary_pod(&ns, "fdb")).await?;
        let svc = format!("fdb-falkordb.{}.svc.cluster.local", ns.name);
        redis_cli(&pods, &old, &format!("-h {svc} SET before failover")).await?;

        let t0 = Instant::now();
        pods.delete(&old, &DeleteParams::default()).await?;
        let sentinel = component_pods(&ns, "fdb", "falkordb-sent").await?[0].metadata.name.clone().unwrap_or_default();
        let new_master = poll("sentinel to elect a new master", Duration::from_secs(90), || async {
            let m = sentinel_cli(&pods, &sentinel, "SENTINEL get-master-addr-by-name fdb-falkordb").await?;
            let m = m.lines().next().unwrap_or_default().to_owned();
            Ok(if !m.starts_with(&old) && !m.is_empty() { Ok(m) } else { Err(format!("master still {m}")) })
        })
        .await?;
        let t_sentinel = t0.elapsed();
        let new_primary = poll("the primary label to move", Duration::from_secs(60), || async {
            Ok(match primary_pod(&ns, "fdb").await? {
                Ok(p) if p != old && new_master.starts_with(&p) => Ok(p),
                Ok(p) => Err(format!("primary label on {p}, sentinel says {new_master}")),
                Err(e) => Err(e),
            })
        })
        .await?;
        let t_label = t0.elapsed();
        let endpoints: Api<Endpoints> = ns.api();
        poll("the client Service to route to the new primary", Duration::from_secs(30), || async {
            let ep = endpoints.get_opt("fdb-falkordb").await?;
            let targets: Vec<String> = ep.and_then(|e| e.subsets).unwrap_or_default().into_iter()
                .flat_map(|s| s.addresses.unwrap_or_default())
                .filter_map(|a| a.target_ref.and_then(|r| r.name))
                .collect();
            Ok(if targets == vec![new_primary.clone()] { Ok(()) } else { Err(format!("endpoints {targets:?}")) })
        })
        .await?;
        let t_service = t0.elapsed();
        poll("writes through the Service to succeed", Duration::from_secs(30), || async {
            Ok(match redis_cli(&pods, &new_primary, &format!("-h {svc} SET after failover")).await {
                Ok(out) if out.trim() == "OK" => Ok(()),
                Ok(out) => Err(out),
                Err(e) => Err(e.to_string()),
            })
        })
        .await?;
        let t_write = t0.elapsed();
        let v = redis_cli(&pods, &new_primary, "GET before").await?;
        ensure!(v.trim() == "failover", "data written before the failover is gone: {v:?}");
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let t_running = t0.elapsed();
        eprintln!(
            "failover timings: sentinel elected {:.1}s, role label {:.1}s, service endpoint {:.1}s, writes {:.1}s, Cluster Running again {:.1}s",
            t_sentinel.as_secs_f64(), t_label.as_secs_f64(), t_service.as_secs_f64(), t_write.as_secs_f64(), t_running.as_secs_f64()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scale_out_syncs_existing_data_and_scale_in_works() -> Result<()> {
    in_namespace("cluster-scale", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let primary = poll("one primary label", Duration::from_secs(30), || primary_pod(&ns, "fdb")).await?;
        redis_cli(&pods, &primary, "SET scale me").await?;
        let clusters: Api<Cluster> = ns.api();
        let patch = json!({"spec": {"componentSpecs": [
            {"name": "falkordb", "replicas": 3, "volumeClaimTemplates": falkordb_cluster("x", "Delete", 3)["spec"]["componentSpecs"][0]["volumeClaimTemplates"]},
            falkordb_cluster("x", "Delete", 3)["spec"]["componentSpecs"][1]
        ]}});
        clusters.patch("fdb", &PatchParams::default(), &Patch::Merge(&patch)).await?;
        poll("the third replica to hold the data", CLUSTER_TIMEOUT, || async {
            Ok(match redis_cli(&pods, "fdb-falkordb-2", "GET scale").await {
                Ok(v) if v.trim() == "me" => Ok(()),
                Ok(v) => Err(format!("GET scale on fdb-falkordb-2: {v:?}")),
                Err(e) => Err(e.to_string()),
            })
        })
        .await?;
        poll("the primary to see 2 replicas", Duration::from_secs(60), || async {
            let info = redis_cli(&pods, &primary, "INFO replication").await?;
            Ok(if info_field(&info, "connected_slaves").as_deref() == Some("2") { Ok(()) } else { Err(info) })
        })
        .await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let mut back = patch.clone();
        back["spec"]["componentSpecs"][0]["replicas"] = json!(2);
        clusters.patch("fdb", &PatchParams::default(), &Patch::Merge(&back)).await?;
        poll("the third pod to go", Duration::from_secs(120), || async {
            Ok(match pods.get_opt("fdb-falkordb-2").await? { None => Ok(()), Some(p) => Err(lifeboat_e2e::pod_summary(&p)) })
        })
        .await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        Ok(())
    })
    .await
}

async fn pvc_names(ns: &lifeboat_e2e::TestNamespace) -> Result<Vec<String>> {
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    Ok(pvcs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// The names of the PVCs the Cluster's StatefulSets made (`data-<cluster>-falkordb-<n>` and
/// `data-<cluster>-falkordb-sent-<n>`).
async fn own_pvcs(ns: &lifeboat_e2e::TestNamespace, cluster: &str) -> Result<Vec<String>> {
    let prefix = format!("data-{cluster}-falkordb-");
    Ok(pvc_names(ns)
        .await?
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect())
}

/// A Helm release of the Cluster's name in the same namespace: a PVC and a pod that mounts it,
/// both labelled `app.kubernetes.io/instance=<cluster>`, as every chart labels its objects.
struct Neighbour {
    pvc: PersistentVolumeClaim,
    pod: Pod,
}

const INSTANCE: &str = "app.kubernetes.io/instance";

async fn helm_neighbour(ns: &lifeboat_e2e::TestNamespace, cluster: &str) -> Result<Neighbour> {
    let claim = format!("data-{cluster}-helm-0");
    let labels = json!({INSTANCE: cluster, "app.kubernetes.io/managed-by": "Helm"});
    ns.create::<PersistentVolumeClaim>(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    }))
    .await?;
    let pod_name = format!("{cluster}-helm-0");
    ns.create::<Pod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": lifeboat_e2e::BASE_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "infinity"], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    }))
    .await?;
    let pods: Api<Pod> = ns.api();
    let pod = lifeboat_e2e::wait_pod_ready(&pods, &pod_name).await?;
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    let pvc = poll(
        &format!("PVC {claim} to be bound"),
        Duration::from_secs(60),
        || async {
            let p = pvcs.get(&claim).await?;
            Ok(match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Bound") => Ok(p),
                other => Err(format!("phase {other:?}")),
            })
        },
    )
    .await?;
    Ok(Neighbour { pvc, pod })
}

/// The neighbour is as it was: the same objects (UIDs), not being deleted, and not labelled by
/// Lifeboat (no cluster UID on the PVC, no role on the pod).
async fn ensure_untouched(ns: &lifeboat_e2e::TestNamespace, n: &Neighbour) -> Result<()> {
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    let name = n.pvc.metadata.name.clone().unwrap_or_default();
    let now = pvcs.get_opt(&name).await?;
    let Some(now) = now else {
        anyhow::bail!("the neighbouring PVC {name} was deleted");
    };
    ensure!(
        now.metadata.uid == n.pvc.metadata.uid,
        "the neighbouring PVC {name} was deleted and recreated"
    );
    ensure!(
        now.metadata.deletion_timestamp.is_none(),
        "the neighbouring PVC {name} is being deleted (its pod holds it)"
    );
    ensure!(
        now.metadata.labels == n.pvc.metadata.labels,
        "the neighbouring PVC {name} was relabelled: {:?}",
        now.metadata.labels
    );
    let pods: Api<Pod> = ns.api();
    let pname = n.pod.metadata.name.clone().unwrap_or_default();
    let Some(pod) = pods.get_opt(&pname).await? else {
        anyhow::bail!("the neighbouring pod {pname} was deleted");
    };
    ensure!(
        pod.metadata.uid == n.pod.metadata.uid && pod.metadata.deletion_timestamp.is_none(),
        "the neighbouring pod {pname} was deleted or replaced"
    );
    ensure!(
        pod.metadata.labels == n.pod.metadata.labels,
        "the neighbouring pod {pname} was relabelled: {:?}",
        pod.metadata.labels
    );
    Ok(())
}

/// Every PVC of the Cluster carries its UID label, which is what lets its deletion find them.
async fn wait_own_pvcs_labelled(ns: &lifeboat_e2e::TestNamespace, cluster: &str) -> Result<()> {
    let clusters: Api<Cluster> = ns.api();
    let uid = clusters
        .get(cluster)
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    let prefix = format!("data-{cluster}-falkordb-");
    poll(
        &format!("the PVCs of Cluster {cluster} to carry lifeboat.io/cluster-uid={uid}"),
        Duration::from_secs(60),
        || async {
            let list = pvcs.list(&ListParams::default()).await?.items;
            let own: Vec<&PersistentVolumeClaim> = list
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .collect();
            let unlabelled: Vec<String> = own
                .iter()
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("lifeboat.io/cluster-uid"))
                        != Some(&uid)
                })
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            Ok(if own.len() == 5 && unlabelled.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} PVCs; without the label: {unlabelled:?}",
                    own.len()
                ))
            })
        },
    )
    .await
}

/// Deletes Cluster `cluster` and waits until it and its own PVCs are gone.
async fn delete_and_wait(ns: &lifeboat_e2e::TestNamespace, cluster: &str) -> Result<()> {
    let clusters: Api<Cluster> = ns.api();
    clusters.delete(cluster, &DeleteParams::default()).await?;
    poll(
        &format!("Cluster {cluster} and its PVCs to go"),
        Duration::from_secs(180),
        || async {
            let left = own_pvcs(ns, cluster).await?;
            let exists = clusters.get_opt(cluster).await?;
            Ok(if left.is_empty() && exists.is_none() {
                Ok(())
            } else {
                Err(format!(
                    "cluster: {:?}; its PVCs left: {left:?}",
                    exists.map(|c| cluster_summary(&c))
                ))
            })
        },
    )
    .await
}

/// A Warning event with `reason` on Cluster `cluster` whose message contains `needle`.
async fn wait_event(
    ns: &lifeboat_e2e::TestNamespace,
    cluster: &str,
    reason: &str,
    needle: &str,
) -> Result<()> {
    let events: Api<Event> = ns.api();
    poll(
        &format!("a {reason} event on Cluster {cluster} naming {needle}"),
        Duration::from_secs(60),
        || async {
            let list = events.list(&ListParams::default()).await?;
            let seen: Vec<String> = list
                .items
                .iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(cluster))
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.reason.clone().unwrap_or_default(),
                        e.message.clone().unwrap_or_default()
                    )
                })
                .collect();
            Ok(
                if seen
                    .iter()
                    .any(|m| m.starts_with(&format!("{reason}:")) && m.contains(needle))
                {
                    Ok(())
                } else {
                    Err(format!("events: {seen:?}"))
                },
            )
        },
    )
    .await
}

#[tokio::test]
async fn termination_policies_do_what_they_say() -> Result<()> {
    in_namespace("cluster-termination", |ns| async move {
        let clusters: Api<Cluster> = ns.api();
        // DoNotTerminate: deletion is refused, with a Warning event, and nothing is removed.
        let keep_neighbour = helm_neighbour(&ns, "keep").await?;
        create_cluster(&ns, falkordb_cluster("keep", "DoNotTerminate", 2)).await?;
        wait_phase(&ns, "keep", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        wait_own_pvcs_labelled(&ns, "keep").await?;
        let before = pvc_names(&ns).await?;
        clusters.delete("keep", &DeleteParams::default()).await?;
        let events: Api<Event> = ns.api();
        poll(
            "a DeletionRefused event",
            Duration::from_secs(60),
            || async {
                let list = events.list(&ListParams::default()).await?;
                Ok(
                    if list
                        .items
                        .iter()
                        .any(|e| e.reason.as_deref() == Some("DeletionRefused"))
                    {
                        Ok(())
                    } else {
                        Err("no event yet".into())
                    },
                )
            },
        )
        .await?;
        ensure!(
            clusters.get_opt("keep").await?.is_some(),
            "a DoNotTerminate Cluster was deleted"
        );
        let sts: Api<StatefulSet> = ns.api();
        ensure!(
            sts.get_opt("keep-falkordb").await?.is_some(),
            "the StatefulSet of a DoNotTerminate Cluster was removed"
        );
        ensure!(
            pvc_names(&ns).await? == before,
            "PVCs changed under DoNotTerminate"
        );
        ensure_untouched(&ns, &keep_neighbour).await?;
        // Switching the policy lets the deletion proceed, through the operator (the finalizer
        // is still on): the Cluster's PVCs go, the neighbour's stays.
        clusters
            .patch(
                "keep",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"terminationPolicy": "Delete"}})),
            )
            .await?;
        poll("the Cluster to go", Duration::from_secs(120), || async {
            Ok(match clusters.get_opt("keep").await? {
                None => Ok(()),
                Some(c) => Err(cluster_summary(&c)),
            })
        })
        .await?;
        poll(
            "its PVCs to go with the Delete policy",
            Duration::from_secs(120),
            || async {
                let left = own_pvcs(&ns, "keep").await?;
                Ok(if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("PVCs left: {left:?}"))
                })
            },
        )
        .await?;
        ensure_untouched(&ns, &keep_neighbour).await?;

        // WipeOut removes everything of the Cluster's, and names the neighbour it left.
        let wipe_neighbour = helm_neighbour(&ns, "wipe").await?;
        create_cluster(&ns, falkordb_cluster("wipe", "WipeOut", 2)).await?;
        wait_phase(&ns, "wipe", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        wait_own_pvcs_labelled(&ns, "wipe").await?;
        // Its Backups go too (the Cluster's UID label proves them its own).
        lifeboat_e2e::scenario::pvc_repo(&ns.client, "lifeboat-e2e-wipe-repo").await?;
        lifeboat_e2e::scenario::policy_for_repo(
            &ns,
            "wipe",
            "wipe-to-repo",
            "lifeboat-e2e-wipe-repo",
        )
        .await?;
        lifeboat_e2e::scenario::backup_with(&ns, "wipe-backup", "wipe-to-repo", "Retain").await?;
        delete_and_wait(&ns, "wipe").await?;
        ensure_untouched(&ns, &wipe_neighbour).await?;
        wait_event(&ns, "wipe", "VolumesKept", "data-wipe-helm-0").await?;
        let backups: Api<lifeboat_api::Backup> = ns.api();
        poll(
            "WipeOut to delete the Cluster's Backup",
            Duration::from_secs(120),
            || async {
                Ok(match backups.get_opt("wipe-backup").await? {
                    None => Ok(()),
                    Some(b) => Err(format!("still there: {:?}", b.status.and_then(|s| s.phase))),
                })
            },
        )
        .await?;

        // Delete from the start: no finalizer, garbage collection through owner references and
        // the StatefulSets' retention.
        let del_neighbour = helm_neighbour(&ns, "del").await?;
        create_cluster(&ns, falkordb_cluster("del", "Delete", 2)).await?;
        wait_phase(&ns, "del", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        delete_and_wait(&ns, "del").await?;
        ensure_untouched(&ns, &del_neighbour).await?;
        ensure_untouched(&ns, &wipe_neighbour).await?;
        ensure_untouched(&ns, &keep_neighbour).await
    })
    .await
}

#[tokio::test]
async fn invalid_cluster_fails_naming_the_field_and_creates_nothing() -> Result<()> {
    in_namespace("cluster-invalid", |ns| async move {
        let mut m = falkordb_cluster("bad", "Delete", 2);
        m["spec"]["componentSpecs"][1]["replicas"] = json!(1);
        create_cluster(&ns, m).await?;
        let c = wait_phase(&ns, "bad", ClusterPhase::Failed, Duration::from_secs(60)).await?;
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("spec.componentSpecs[1].replicas"),
            "message does not name the field: {msg}"
        );
        let mut m = falkordb_cluster("nodef", "Delete", 2);
        m["spec"]["clusterDef"] = json!("mongodb");
        create_cluster(&ns, m).await?;
        let c = wait_phase(&ns, "nodef", ClusterPhase::Failed, Duration::from_secs(60)).await?;
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("spec.clusterDef"),
            "message does not name the field: {msg}"
        );
        // A name whose derived Service and Job names would break their 63-character limit.
        let long = format!("long-{}", "n".repeat(40));
        create_cluster(&ns, falkordb_cluster(&long, "Delete", 2)).await?;
        let c = wait_phase(&ns, &long, ClusterPhase::Failed, Duration::from_secs(60)).await?;
        let msg = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            msg.contains("metadata.name") && msg.contains("limit of"),
            "message does not name the field: {msg}"
        );
        let sts: Api<StatefulSet> = ns.api();
        let list = sts.list(&ListParams::default()).await?;
        ensure!(
            list.items.is_empty(),
            "an invalid Cluster created StatefulSets: {:?}",
            list.items
                .iter()
                .map(|s| s.metadata.name.clone())
                .collect::<Vec<_>>()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn an_invalid_edit_of_a_running_cluster_keeps_following_its_roles() -> Result<()> {
    in_namespace("cluster-invalid-edit", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let clusters: Api<Cluster> = ns.api();
        let pods: Api<Pod> = ns.api();
        let edit = |replicas: i32| {
            Patch::<serde_json::Value>::Json(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/componentSpecs/1/replicas", "value": replicas}
                ]))
                .expect("a JSON patch"),
            )
        };
        // One sentinel is not a quorum: the edit is invalid.
        clusters
            .patch("fdb", &PatchParams::default(), &edit(1))
            .await?;
        let msg = poll(
            "the Cluster to refuse the edit, naming the field",
            Duration::from_secs(60),
            || async {
                let st = clusters.get("fdb").await?.status.unwrap_or_default();
                let msg = st.message.clone().unwrap_or_default();
                Ok(
                    if msg.contains("spec.componentSpecs[1].replicas")
                        && msg.contains("not applied")
                    {
                        Ok(msg)
                    } else {
                        Err(format!("phase {:?}: {msg}", st.phase))
                    },
                )
            },
        )
        .await?;
        eprintln!("the Cluster says: {msg}");
        let sts: Api<StatefulSet> = ns.api();
        let sentinels = sts
            .get("fdb-falkordb-sent")
            .await?
            .spec
            .and_then(|s| s.replicas);
        ensure!(
            sentinels == Some(3),
            "the invalid edit was applied: {sentinels:?} sentinels"
        );

        // A failover while the spec is invalid: the role label and the Service still follow.
        let old = poll("one primary label", Duration::from_secs(30), || {
            primary_pod(&ns, "fdb")
        })
        .await?;
        pods.delete(&old, &DeleteParams::default()).await?;
        let new_primary = poll(
            "the primary label to move off the deleted pod",
            Duration::from_secs(120),
            || async {
                Ok(match primary_pod(&ns, "fdb").await? {
                    Ok(p) if p != old => Ok(p),
                    Ok(p) => Err(format!("primary label still on {p}")),
                    Err(e) => Err(e),
                })
            },
        )
        .await?;
        let endpoints: Api<Endpoints> = ns.api();
        poll(
            "the client Service to route to the new primary",
            Duration::from_secs(60),
            || async {
                let ep = endpoints.get_opt("fdb-falkordb").await?;
                let targets: Vec<String> = ep
                    .and_then(|e| e.subsets)
                    .unwrap_or_default()
                    .into_iter()
                    .flat_map(|s| s.addresses.unwrap_or_default())
                    .filter_map(|a| a.target_ref.and_then(|r| r.name))
                    .collect();
                Ok(if targets == vec![new_primary.clone()] {
                    Ok(())
                } else {
                    Err(format!("endpoints {targets:?}"))
                })
            },
        )
        .await?;
        let c = clusters.get("fdb").await?;
        let still = c.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            still.contains("spec.componentSpecs[1].replicas"),
            "the Cluster stopped saying the edit is invalid: {still}"
        );

        // Fixed, the message goes and the Cluster is Running.
        clusters
            .patch("fdb", &PatchParams::default(), &edit(3))
            .await?;
        poll(
            "the Cluster to accept the fixed spec",
            Duration::from_secs(120),
            || async {
                let st = clusters.get("fdb").await?.status.unwrap_or_default();
                Ok(
                    if st.phase == Some(ClusterPhase::Running) && st.message.is_none() {
                        Ok(())
                    } else {
                        Err(format!("phase {:?}: {:?}", st.phase, st.message))
                    },
                )
            },
        )
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn redis_replication_cluster_runs_replicates_and_agrees_on_the_master() -> Result<()> {
    in_namespace("cluster-redis", |ns| async move {
        create_cluster(&ns, redis_cluster("rds", 2)).await?;
        wait_phase(&ns, "rds", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let primary = poll("one primary label", Duration::from_secs(30), || {
            primary_pod_of(&ns, "rds", "redis")
        })
        .await?;
        let info = redis_cli(&pods, &primary, "INFO replication").await?;
        ensure!(
            info_field(&info, "role").as_deref() == Some("master")
                && info_field(&info, "connected_slaves").as_deref() == Some("1"),
            "primary {primary} should be master with 1 replica: {info}"
        );
        let modules = redis_cli(&pods, &primary, "MODULE LIST").await?;
        ensure!(
            !modules.to_lowercase().contains("graph"),
            "a plain Redis cluster loaded a graph module: {modules}"
        );
        let mut masters = Vec::new();
        for s in component_pods(&ns, "rds", "redis-sentinel").await? {
            let name = s.metadata.name.clone().unwrap_or_default();
            let out =
                sentinel_cli(&pods, &name, "SENTINEL get-master-addr-by-name rds-redis").await?;
            masters.push(out.lines().next().unwrap_or_default().to_owned());
        }
        ensure!(
            masters.len() == 3 && masters.iter().all(|m| m.starts_with(&primary)),
            "sentinels {masters:?} do not all name the primary {primary}"
        );
        let svc = format!("rds-redis.{}.svc.cluster.local", ns.name);
        redis_cli(
            &pods,
            &primary,
            &format!("-h {svc} SET lifeboat:redis hello"),
        )
        .await?;
        let replica = component_pods(&ns, "rds", "redis")
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .find(|n| n != &primary)
            .ok_or_else(|| anyhow::anyhow!("no replica pod"))?;
        poll(
            "the replica to hold the key",
            Duration::from_secs(30),
            || async {
                let v = redis_cli(&pods, &replica, "GET lifeboat:redis").await?;
                Ok(if v.trim() == "hello" {
                    Ok(())
                } else {
                    Err(format!("GET: {v:?}"))
                })
            },
        )
        .await
    })
    .await
}

#[tokio::test]
async fn editing_resources_rolls_the_pods_and_keeps_the_data() -> Result<()> {
    in_namespace("cluster-resources", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let primary = poll("one primary label", Duration::from_secs(30), || primary_pod(&ns, "fdb")).await?;
        redis_cli(&pods, &primary, "SET lifeboat:kept yes").await?;
        let clusters: Api<Cluster> = ns.api();
        let resources = json!({"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "768Mi"}});
        let patch = json!([{"op": "add", "path": "/spec/componentSpecs/0/resources", "value": resources}]);
        let patched = clusters
            .patch("fdb", &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(patch)?))
            .await?;
        let generation = patched.metadata.generation;
        let started = Instant::now();
        poll("every data pod to run with the new resources, and the Cluster Running", CLUSTER_TIMEOUT, || async {
            let c = clusters.get("fdb").await?;
            let st = c.status.clone().unwrap_or_default();
            let data = component_pods(&ns, "fdb", "falkordb").await?;
            let updated: Vec<String> = data
                .iter()
                .filter(|p| {
                    let r = p.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.resources.clone()).unwrap_or_default();
                    let memory = r.limits.as_ref().and_then(|l| l.get("memory")).map(|q| q.0.clone());
                    memory.as_deref() == Some("768Mi")
                        && p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            Ok(if updated.len() == 2 && st.observed_generation == generation && st.phase == Some(ClusterPhase::Running) {
                Ok(())
            } else {
                Err(format!("ready with the new limits: {updated:?}; phase {:?}, observedGeneration {:?} of {generation:?}", st.phase, st.observed_generation))
            })
        })
        .await?;
        eprintln!("resources rolled and Running again in {:.0}s", started.elapsed().as_secs_f64());
        let primary = poll("one primary label", Duration::from_secs(60), || primary_pod(&ns, "fdb")).await?;
        let v = redis_cli(&pods, &primary, "GET lifeboat:kept").await?;
        ensure!(v.trim() == "yes", "the key written before the roll reads {v:?} on {primary}");
        let info = redis_cli(&pods, &primary, "INFO replication").await?;
        ensure!(
            info_field(&info, "connected_slaves").as_deref() == Some("1"),
            "after the roll the primary {primary} has no replica: {info}"
        );
        Ok(())
    })
    .await
}

/// A restore asked of a Cluster that already runs (the deprecated annotation added after the
/// fact) is refused: a Warning event and a `Restore` condition say why, and the workload is not
/// touched — no readiness gate, no roll, no Job aimed at the live volumes, data pods Ready and the
/// data still there.
#[tokio::test]
async fn a_restore_asked_of_a_running_cluster_is_refused_and_touches_nothing() -> Result<()> {
    in_namespace("cluster-late-restore", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let primary = poll("one primary label", Duration::from_secs(30), || primary_pod(&ns, "fdb")).await?;
        redis_cli(&pods, &primary, "SET lifeboat:late kept").await?;
        let uids = |list: Vec<Pod>| -> Vec<(Option<String>, Option<String>)> {
            list.into_iter().map(|p| (p.metadata.name, p.metadata.uid)).collect()
        };
        let before = uids(component_pods(&ns, "fdb", "falkordb").await?);

        let clusters: Api<Cluster> = ns.api();
        let annotation = json!({"falkordb": {"name": "any-backup", "namespace": ns.name, "volumeRestorePolicy": "Parallel"}}).to_string();
        clusters
            .patch(
                "fdb",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"kubeblocks.io/restore-from-backup": annotation}}})),
            )
            .await?;
        let message = poll("the Restore condition to say the request is refused", Duration::from_secs(60), || async {
            let c = clusters.get("fdb").await?;
            let cond = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|x| x.type_ == "Restore").cloned());
            Ok(match cond {
                Some(x) if x.reason == "RestoreRefused" => Ok(x.message),
                other => Err(format!("{}; Restore condition {other:?}", cluster_summary(&c))),
            })
        })
        .await?;
        ensure!(message.contains("only applies when a Cluster is created") && message.contains("any-backup"), "{message}");
        let events: Api<Event> = ns.api();
        let refused = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| e.reason.as_deref() == Some("RestoreRefused") && e.type_.as_deref() == Some("Warning"));
        ensure!(refused, "no RestoreRefused Warning event");

        // The workload is as it was: same pods, all Ready, no gate, no Job, the Cluster Running.
        let sts: Api<StatefulSet> = ns.api();
        let gates = sts
            .get("fdb-falkordb")
            .await?
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.readiness_gates)
            .unwrap_or_default();
        ensure!(gates.is_empty(), "the running StatefulSet got readiness gates: {gates:?}");
        let after_pods = component_pods(&ns, "fdb", "falkordb").await?;
        for p in &after_pods {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            ensure!(ready, "data pod not Ready after the refused restore: {}", lifeboat_e2e::pod_summary(p));
        }
        ensure!(uids(after_pods) == before, "the data pods were replaced");
        let jobs: Api<k8s_openapi::api::batch::v1::Job> = ns.api();
        let names: Vec<String> = jobs.list(&ListParams::default()).await?.items.into_iter().filter_map(|j| j.metadata.name).collect();
        ensure!(names.is_empty(), "Jobs were created for a refused restore: {names:?}");
        let c = clusters.get("fdb").await?;
        ensure!(c.status.as_ref().and_then(|s| s.phase) == Some(ClusterPhase::Running), "{}", cluster_summary(&c));
        let v = redis_cli(&pods, &primary, "GET lifeboat:late").await?;
        ensure!(v.trim() == "kept", "the data changed: {v:?}");
        Ok(())
    })
    .await
}

/// Following an idle Cluster's roles costs no writes: the API server's audit of the operator's
/// requests shows 75 s in a row, with the Cluster's password read again in them (so the operator
/// was reconciling it), without a create, patch, update or delete. A Service deleted behind the
/// operator's back is applied again all the same.
#[tokio::test]
async fn an_idle_cluster_costs_no_api_writes_and_drift_is_repaired() -> Result<()> {
    use lifeboat_e2e::audit;
    // A pass reads nothing from the API server (the operator's watch caches), except the
    // Cluster's password, read again once a minute. So a window longer than that refresh, in which
    // the Secret was read, is one in which the operator kept reconciling this Cluster: about one
    // pass every 5 s, fifteen here.
    const WINDOW: Duration = Duration::from_secs(75);
    in_namespace("cluster-idle", |ns| async move {
        create_cluster(&ns, falkordb_cluster("fdb", "Delete", 2)).await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;

        // Becoming Running may take a last write or two (labels, conditions); a window that
        // saw a write starts again. Under a write on every pass, no window ever completes.
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut from = audit::mark()?;
        let mut started = Instant::now();
        loop {
            let requests = audit::since(from, &ns.name)?;
            let refreshes = requests.iter().filter(|r| r.verb == "get" && r.resource == "secrets").count();
            let writes: Vec<String> = requests.iter().filter(|r| r.is_write()).map(ToString::to_string).collect();
            let waited = started.elapsed().as_secs();
            let last = if !writes.is_empty() {
                from = audit::mark()?;
                started = Instant::now();
                format!("{} writes in a window of {waited} s: {writes:?}", writes.len())
            } else if started.elapsed() >= WINDOW && refreshes >= 1 {
                println!(
                    "{waited} s of the idle Cluster with no write: {} requests, {refreshes} password re-reads",
                    requests.len()
                );
                break;
            } else {
                format!("{waited} s, {refreshes} password re-reads and no write so far")
            };
            ensure!(
                Instant::now() < deadline,
                "the idle Cluster never went {} s without an API write with its password read again in that time; last window: {last}",
                WINDOW.as_secs()
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }

        // Drift is still repaired: the watch sees the Service go, and the next pass applies it.
        let services: Api<k8s_openapi::api::core::v1::Service> = ns.api();
        let before = services.get("fdb-falkordb").await?.metadata.uid;
        services.delete("fdb-falkordb", &DeleteParams::default()).await?;
        poll("the deleted client Service to be applied again", Duration::from_secs(60), || async {
            Ok(match services.get_opt("fdb-falkordb").await? {
                Some(s) if s.metadata.uid != before && s.metadata.deletion_timestamp.is_none() => Ok(()),
                Some(_) => Err("the old Service is still there".to_string()),
                None => Err("not there".to_string()),
            })
        })
        .await
    })
    .await
}
