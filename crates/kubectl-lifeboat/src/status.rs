//! `status CLUSTER`: the Cluster's phase and conditions, its pods with their roles, its newest
//! and newest verified Backup, and a restore in progress.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::human_bytes;
use lifeboat_api::labels::{COMPONENT_NAME, INSTANCE, ROLE};
use lifeboat_api::{Backup, Cluster, Restore};
use serde::Serialize;

use crate::output::table;
use crate::restore_to::{Reading, reading};
use crate::{Error, backups};

/// What `status` shows, and what `-o json|yaml` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub cluster: String,
    pub namespace: String,
    pub phase: String,
    pub message: String,
    pub conditions: Vec<ConditionView>,
    pub pods: Vec<PodView>,
    pub last_backup: Option<String>,
    pub last_verified_backup: Option<String>,
    pub restore: Option<String>,
    /// Each sentinel's answer to "which address is the primary?"; empty without sentinels.
    pub sentinels: Vec<SentinelView>,
}

#[derive(Serialize)]
pub struct SentinelView {
    pub pod: String,
    /// `host:port`, or absent when the sentinel could not be asked.
    pub master: Option<String>,
}

#[derive(Serialize)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    pub name: String,
    pub component: String,
    pub role: String,
    pub ready: bool,
    pub restarts: i32,
    pub node: String,
    /// The server's own report; absent for sentinels and unreachable pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<crate::replication::Replication>,
    /// Bytes a replica is behind the primary, from the two offsets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<i64>,
}

pub fn view(c: &Cluster, pods: &[Pod], backups: &[Backup], restores: &[Restore]) -> View {
    let st = c.status.clone().unwrap_or_default();
    let completed = |b: &&Backup| {
        b.status.as_ref().and_then(|s| s.phase)
            == Some(lifeboat_api::dataprotection::v1alpha1::BackupPhase::Completed)
    };
    // `backups` is oldest first.
    let last_backup = backups
        .iter()
        .rev()
        .find(completed)
        .map(ResourceExt::name_any);
    let last_verified_backup = backups
        .iter()
        .rev()
        .filter(completed)
        .find(|b| backups::verified(b) == "True")
        .map(ResourceExt::name_any);
    let restore = match reading(c, restores) {
        Reading::Going(s) | Reading::Failed(s) if !restores.is_empty() => Some(s),
        _ => None,
    };
    View {
        cluster: c.name_any(),
        namespace: c.namespace().unwrap_or_default(),
        phase: st.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
        message: st.message.unwrap_or_default(),
        conditions: st
            .conditions
            .iter()
            .map(|k| ConditionView {
                type_: k.type_.clone(),
                status: k.status.clone(),
                reason: k.reason.clone(),
                message: k.message.clone(),
            })
            .collect(),
        pods: pods
            .iter()
            .map(|p| {
                let ps = p.status.clone().unwrap_or_default();
                PodView {
                    name: p.name_any(),
                    component: p.labels().get(COMPONENT_NAME).cloned().unwrap_or_default(),
                    role: p.labels().get(ROLE).cloned().unwrap_or_default(),
                    ready: ps
                        .conditions
                        .iter()
                        .flatten()
                        .any(|k| k.type_ == "Ready" && k.status == "True"),
                    restarts: ps
                        .container_statuses
                        .iter()
                        .flatten()
                        .map(|s| s.restart_count)
                        .sum(),
                    node: p
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default(),
                    replication: None,
                    lag_bytes: None,
                }
            })
            .collect(),
        last_backup,
        last_verified_backup,
        restore,
        sentinels: Vec::new(),
    }
}

/// Fills in what the servers report: replication per data pod, the replicas' lag, and each
/// sentinel's primary.
pub async fn ask_servers(client: &Client, ns: &str, v: &mut View, pods: &[Pod]) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let container = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone())
            .unwrap_or_default()
    };
    for (pv, p) in v.pods.iter_mut().zip(pods) {
        if pv.role == "primary" || pv.role == "secondary" {
            pv.replication = crate::replication::of_data_pod(&api, &pv.name, &container(p)).await;
        }
    }
    let primary_offset = v
        .pods
        .iter()
        .filter_map(|p| p.replication.as_ref())
        .find(|r| r.role == "master")
        .map(|r| r.offset);
    for pv in &mut v.pods {
        if let (Some(off), Some(r)) = (primary_offset, &pv.replication) {
            pv.lag_bytes = crate::replication::lag(off, r);
        }
    }
    for p in pods {
        let comp = p.labels().get(COMPONENT_NAME).cloned().unwrap_or_default();
        if let Some(data) = comp.strip_suffix("-sent") {
            let master = format!("{}-{data}", v.cluster);
            let answer =
                crate::replication::sentinel_master(&api, &p.name_any(), &container(p), &master)
                    .await;
            v.sentinels.push(SentinelView {
                pod: p.name_any(),
                master: answer,
            });
        }
    }
}

pub fn human(v: &View) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Cluster:   {}/{}", v.namespace, v.cluster);
    let _ = writeln!(o, "Phase:     {}", v.phase);
    if !v.message.is_empty() {
        let _ = writeln!(o, "Message:   {}", v.message);
    }
    if let Some(r) = &v.restore {
        let _ = writeln!(o, "Restore:   {r}");
    }
    let _ = writeln!(
        o,
        "Backup:    {}",
        v.last_backup.as_deref().unwrap_or("none completed")
    );
    let _ = writeln!(
        o,
        "Verified:  {}",
        v.last_verified_backup
            .as_deref()
            .unwrap_or("no backup verified by a drill yet")
    );
    let _ = writeln!(o, "\nConditions:");
    o.push_str(&table(
        &["TYPE", "STATUS", "REASON", "MESSAGE"],
        v.conditions
            .iter()
            .map(|c| {
                vec![
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                ]
            })
            .collect(),
    ));
    let _ = writeln!(o, "\nPods:");
    o.push_str(&table(
        &[
            "NAME",
            "COMPONENT",
            "ROLE",
            "READY",
            "RESTARTS",
            "LINK",
            "OFFSET",
            "LAG",
            "NODE",
        ],
        v.pods
            .iter()
            .map(|p| {
                let r = p.replication.as_ref();
                let link = match r {
                    Some(r) if r.role == "master" => "-".to_owned(),
                    Some(r) => r.link.clone().unwrap_or_default(),
                    None => String::new(),
                };
                vec![
                    p.name.clone(),
                    p.component.clone(),
                    p.role.clone(),
                    p.ready.to_string(),
                    p.restarts.to_string(),
                    link,
                    r.map(|r| r.offset.to_string()).unwrap_or_default(),
                    p.lag_bytes.map(human_bytes).unwrap_or_default(),
                    p.node.clone(),
                ]
            })
            .collect(),
    ));
    if !v.sentinels.is_empty() {
        let _ = writeln!(o, "\nSentinels:");
        o.push_str(&table(
            &["SENTINEL", "NAMES AS PRIMARY"],
            v.sentinels
                .iter()
                .map(|s| {
                    vec![
                        s.pod.clone(),
                        s.master.clone().unwrap_or_else(|| "(no answer)".into()),
                    ]
                })
                .collect(),
        ));
    }
    o
}

pub async fn fetch(client: &Client, ns: &str, name: &str) -> Result<View, Error> {
    let c = Api::<Cluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(format!("reading Cluster {ns}/{name}"), e))?
        .ok_or_else(|| Error::NotFound(format!("Cluster {ns}/{name}")))?;
    let lp = ListParams::default().labels(&format!("{INSTANCE}={name}"));
    let mut pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map_err(|e| Error::api(format!("listing the pods of Cluster {ns}/{name}"), e))?
        .items;
    pods.sort_by_key(ResourceExt::name_any);
    let restores = Api::<Restore>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map_err(|e| Error::api(format!("listing the Restores of Cluster {ns}/{name}"), e))?
        .items;
    let backups = backups::list(client, ns, Some(name)).await?;
    let mut v = view(&c, &pods, &backups, &restores);
    ask_servers(client, ns, &mut v, &pods).await;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_roles_readiness_and_the_newest_verified_backup() {
        let c: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kubeblocks.io/v1", "kind": "Cluster",
            "metadata": {"name": "fdb", "namespace": "demo"},
            "spec": {"terminationPolicy": "Delete", "clusterDef": "falkordb", "topology": "replication",
                     "componentSpecs": [{"name": "falkordb", "replicas": 2}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "reason": "AllReady",
                       "message": "every pod is ready", "lastTransitionTime": "2026-12-05T05:00:00Z"}]}
        }))
        .expect("a Cluster");
        let pod = |n: &str, role: &str, ready: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": n, "labels": {ROLE: role, COMPONENT_NAME: "falkordb"}},
                "spec": {"containers": [], "nodeName": "node1"},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}
            }))
            .expect("a Pod")
        };
        let b = |n: &str, verified: &str| -> Backup {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
                "metadata": {"name": n},
                "spec": {"backupPolicyName": "p", "backupMethod": "datafile"},
                "status": {"phase": "Completed", "conditions": [{"type": "Verified", "status": verified,
                           "reason": "R", "message": "", "lastTransitionTime": "2026-12-05T05:00:00Z"}]}
            }))
            .expect("a Backup")
        };
        let v = view(
            &c,
            &[
                pod("fdb-falkordb-0", "primary", "True"),
                pod("fdb-falkordb-1", "secondary", "False"),
            ],
            &[b("old", "True"), b("new", "Unknown")],
            &[],
        );
        assert_eq!(v.last_backup.as_deref(), Some("new"));
        assert_eq!(v.last_verified_backup.as_deref(), Some("old"));
        assert_eq!(v.restore, None);
        let h = human(&v);
        assert!(h.contains("Phase:     Running"), "{h}");
        let primary = h
            .lines()
            .find(|l| l.starts_with("fdb-falkordb-0"))
            .expect("pod row");
        assert!(
            primary.contains("primary") && primary.contains("true"),
            "{h}"
        );
        let replica = h
            .lines()
            .find(|l| l.starts_with("fdb-falkordb-1"))
            .expect("pod row");
        assert!(
            replica.contains("secondary") && replica.contains("false"),
            "{h}"
        );
    }
}
