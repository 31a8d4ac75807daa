//! `restore BACKUP --to NEW_CLUSTER [--wait]`: a new Cluster shaped like the backed-up one, with
//! `spec.restore` naming the Backup; and following it until it serves the verified data.

use std::time::{Duration, Instant};

use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use lifeboat_api::apps::v1::ClusterPhase;
use lifeboat_api::dataprotection::v1alpha1::{RestorePhase, human_duration};
use lifeboat_api::labels::INSTANCE;
use lifeboat_api::{Backup, Cluster, Restore};

use crate::Error;

/// The new Cluster: the source Cluster's spec, without its own restore request and without its
/// backup schedule (a copy made to inspect or recover data should not start taking backups into
/// the same repo by itself), restoring from `backup`.
pub fn cluster_from(source: &Cluster, backup: &Backup, to: &str) -> Result<Cluster, Error> {
    let mut spec = serde_json::to_value(&source.spec).map_err(|e| Error::Render(e.to_string()))?;
    if let Some(m) = spec.as_object_mut() {
        m.remove("backup");
        m.insert(
            "restore".into(),
            serde_json::json!({"source": {
                "apiGroup": "dataprotection.kubeblocks.io",
                "kind": "Backup",
                "name": backup.name_any(),
                "namespace": backup.namespace(),
            }}),
        );
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps.kubeblocks.io/v1",
        "kind": "Cluster",
        "metadata": {"name": to, "namespace": source.namespace()},
        "spec": spec,
    }))
    .map_err(|e| Error::Render(format!("the new Cluster {to}: {e}")))
}

/// Creates the restoring Cluster `to` from Backup `backup`.
pub async fn create(client: &Client, ns: &str, backup: &str, to: &str) -> Result<(), Error> {
    let b = Api::<Backup>::namespaced(client.clone(), ns)
        .get_opt(backup)
        .await
        .map_err(|e| Error::api(format!("reading Backup {ns}/{backup}"), e))?
        .ok_or_else(|| Error::NotFound(format!("Backup {ns}/{backup}")))?;
    let source = b.labels().get(INSTANCE).cloned().ok_or_else(|| {
        Error::Usage(format!(
            "Backup {ns}/{backup} has no {INSTANCE} label naming its Cluster"
        ))
    })?;
    let c = Api::<Cluster>::namespaced(client.clone(), ns)
        .get_opt(&source)
        .await
        .map_err(|e| Error::api(format!("reading Cluster {ns}/{source}"), e))?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "Cluster {ns}/{source}, whose spec the restored Cluster copies (write the Cluster yourself with spec.restore naming Backup {backup})"
            ))
        })?;
    let new = cluster_from(&c, &b, to)?;
    Api::<Cluster>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &new)
        .await
        .map_err(|e| Error::api(format!("creating Cluster {ns}/{to}"), e))?;
    Ok(())
}

/// Where a restore is, as `--wait` prints it, from the Cluster and its Restores.
#[derive(Debug, PartialEq, Eq)]
pub enum Reading {
    Going(String),
    Done(String),
    Failed(String),
}

/// The first stage that is not done, named as the Restore's conditions name them.
const STAGES: [&str; 4] = [
    "ValidationPassed",
    "CheckBackupRepo",
    "PrepareData",
    "PostReady",
];

pub fn reading(cluster: &Cluster, restores: &[Restore]) -> Reading {
    let cst = cluster.status.clone().unwrap_or_default();
    if let Some(r) = restores
        .iter()
        .find(|r| r.status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Failed))
    {
        let st = r.status.clone().unwrap_or_default();
        let why = st
            .conditions
            .iter()
            .find(|c| c.status == "False")
            .map(|c| format!("{}: {}", c.type_, c.message))
            .unwrap_or_default();
        return Reading::Failed(format!("Restore {} failed: {why}", r.name_any()));
    }
    if cst.phase == Some(ClusterPhase::Failed) {
        return Reading::Failed(format!(
            "Cluster {} failed: {}",
            cluster.name_any(),
            cst.message.unwrap_or_default()
        ));
    }
    let all_done = !restores.is_empty()
        && restores
            .iter()
            .all(|r| r.status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Completed));
    if all_done && cst.phase == Some(ClusterPhase::Running) {
        let verified = restores
            .iter()
            .filter_map(|r| r.status.as_ref()?.verification.as_ref())
            .filter(|v| v.matched)
            .map(|v| {
                let keys: i64 = v.expected.keys.values().sum();
                format!(
                    "{keys} keys and {} graphs match the backup's fingerprint and digests",
                    v.expected.graphs.len()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Reading::Done(format!("Running, restored and verified: {verified}"));
    }
    let Some(r) = restores.first() else {
        return Reading::Going("waiting for the operator to create the Restore".into());
    };
    let st = r.status.clone().unwrap_or_default();
    if st.phase == Some(RestorePhase::Completed) {
        return Reading::Going(format!(
            "verified; waiting for the Cluster to be Running (now {})",
            cst.phase
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "unset".into())
        ));
    }
    let stage = STAGES
        .iter()
        .find(|s| {
            !st.conditions
                .iter()
                .any(|c| c.type_ == **s && c.status == "True")
        })
        .copied()
        .unwrap_or("PostReady");
    let detail = match &st.progress {
        Some(p) => p.describe(),
        None => st
            .conditions
            .iter()
            .find(|c| c.type_ == stage)
            .map(|c| c.message.clone())
            .unwrap_or_else(|| "starting".into()),
    };
    Reading::Going(format!("{stage}: {detail}"))
}

/// Follows the restore of Cluster `name`, printing each new reading; `Ok` once it runs verified.
pub async fn wait(client: &Client, ns: &str, name: &str, timeout: Duration) -> Result<(), Error> {
    let clusters = Api::<Cluster>::namespaced(client.clone(), ns);
    let restores = Api::<Restore>::namespaced(client.clone(), ns);
    let start = Instant::now();
    let mut last = None;
    loop {
        let c = clusters
            .get_opt(name)
            .await
            .map_err(|e| Error::api(format!("reading Cluster {ns}/{name}"), e))?
            .ok_or_else(|| {
                Error::NotFound(format!("Cluster {ns}/{name} (deleted while waiting)"))
            })?;
        let rs = restores
            .list(&ListParams::default().labels(&format!("{INSTANCE}={name}")))
            .await
            .map_err(|e| Error::api(format!("listing the Restores of Cluster {ns}/{name}"), e))?
            .items;
        let r = reading(&c, &rs);
        if last.as_ref() != Some(&r) {
            let text = match &r {
                Reading::Going(s) | Reading::Done(s) | Reading::Failed(s) => s,
            };
            println!(
                "[{:>5}] {text}",
                human_duration(start.elapsed().as_secs() as i64)
            );
        }
        match r {
            Reading::Done(_) => return Ok(()),
            Reading::Failed(why) => return Err(Error::Failed(why)),
            Reading::Going(_) => {}
        }
        if start.elapsed() > timeout {
            return Err(Error::Failed(format!(
                "the restore of Cluster {ns}/{name} did not end within {}",
                human_duration(timeout.as_secs() as i64)
            )));
        }
        last = Some(r);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(phase: Option<&str>) -> Cluster {
        let mut v = serde_json::json!({
            "apiVersion": "apps.kubeblocks.io/v1", "kind": "Cluster",
            "metadata": {"name": "fdb2", "namespace": "demo"},
            "spec": {"terminationPolicy": "Delete", "clusterDef": "falkordb", "topology": "replication",
                     "componentSpecs": [{"name": "falkordb", "replicas": 2}],
                     "backup": {"enabled": true, "method": "datafile"}},
        });
        if let Some(p) = phase {
            v["status"] = serde_json::json!({"phase": p});
        }
        serde_json::from_value(v).expect("a Cluster")
    }

    fn restore(status: serde_json::Value) -> Restore {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Restore",
            "metadata": {"name": "fdb2-falkordb-restore", "namespace": "demo"},
            "spec": {"backup": {"name": "b1", "namespace": "demo"}},
            "status": status,
        }))
        .expect("a Restore")
    }

    fn cond(t: &str, s: &str, msg: &str) -> serde_json::Value {
        serde_json::json!({"type": t, "status": s, "reason": "R", "message": msg,
                           "lastTransitionTime": "2026-12-05T05:00:00Z"})
    }

    #[test]
    fn the_new_cluster_copies_the_spec_drops_the_schedule_and_names_the_backup() {
        let b: Backup = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "b1", "namespace": "demo"},
            "spec": {"backupPolicyName": "p", "backupMethod": "datafile"}
        }))
        .expect("a Backup");
        let c = cluster_from(&cluster(None), &b, "fdb3").expect("built");
        let v = serde_json::to_value(&c).expect("json");
        assert_eq!(v["metadata"]["name"], "fdb3");
        assert_eq!(v["spec"]["restore"]["source"]["name"], "b1");
        assert_eq!(v["spec"]["restore"]["source"]["kind"], "Backup");
        assert_eq!(v["spec"]["componentSpecs"][0]["replicas"], 2);
        assert!(v["spec"].get("backup").is_none(), "{v}");
    }

    #[test]
    fn readings_follow_the_stages_show_bytes_and_end_verified_or_failed() {
        assert_eq!(
            reading(&cluster(Some("Creating")), &[]),
            Reading::Going("waiting for the operator to create the Restore".into())
        );
        let moving = restore(serde_json::json!({
            "phase": "Running",
            "conditions": [cond("ValidationPassed", "True", "ok"), cond("CheckBackupRepo", "True", "ok"),
                           cond("PrepareData", "False", "writing")],
            "progress": {"stage": "download", "bytesDone": 104857600, "bytesTotal": 209715200,
                         "bytesPerSecond": 52428800, "etaSeconds": 2, "updatedAt": "2026-12-05T05:00:00Z"}
        }));
        assert_eq!(
            reading(&cluster(Some("Creating")), &[moving]),
            Reading::Going(
                "PrepareData: download 100.0 MiB of 200.0 MiB (50%) at 50.0 MiB/s, about 2s left"
                    .into()
            )
        );
        let done = restore(serde_json::json!({
            "phase": "Completed",
            "verification": {"matched": true, "expected": {"keys": {"0": 60000}, "graphs": [{"db": 0, "name": "g", "nodes": 1, "edges": 0}]}}
        }));
        assert_eq!(
            reading(&cluster(Some("Running")), &[done]),
            Reading::Done(
                "Running, restored and verified: 60000 keys and 1 graphs match the backup's fingerprint and digests".into()
            )
        );
        let failed = restore(serde_json::json!({
            "phase": "Failed",
            "conditions": [cond("ValidationPassed", "False", "Backup demo/b1 does not exist")]
        }));
        assert_eq!(
            reading(&cluster(Some("Failed")), &[failed]),
            Reading::Failed("Restore fdb2-falkordb-restore failed: ValidationPassed: Backup demo/b1 does not exist".into())
        );
    }
}
