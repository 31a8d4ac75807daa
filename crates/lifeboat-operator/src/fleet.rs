//! What the fleet looks like right now: Clusters by phase and the restores in flight with their
//! progress. Computed at every scrape from the controllers' watch caches, so a deleted object
//! leaves no stale series behind and nothing is counted twice. Pure.

use std::collections::BTreeMap;

use lifeboat_api::apps::v1::ClusterPhase;
use lifeboat_api::dataprotection::v1alpha1::RestorePhase;
use lifeboat_api::{Cluster, Restore};

/// Every phase a Cluster can show, and `Unknown` for one without a status yet: each is exported,
/// with 0 when no Cluster is in it, so that a dashboard's series never just vanish.
pub const PHASES: &[&str] = &[
    "Creating", "Running", "Updating", "Stopping", "Stopped", "Deleting", "Failed", "Abnormal",
    "Unknown",
];

/// One restore in flight.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoreInFlight {
    pub namespace: String,
    pub restore: String,
    /// Bytes done over bytes total of the transfer under way; `None` before the first reading.
    pub ratio: Option<f64>,
}

/// The fleet's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// Clusters by phase, every phase of [`PHASES`] present.
    pub clusters: BTreeMap<&'static str, i64>,
    pub restores: Vec<RestoreInFlight>,
}

fn phase_name(p: Option<ClusterPhase>) -> &'static str {
    match p {
        Some(ClusterPhase::Creating) => "Creating",
        Some(ClusterPhase::Running) => "Running",
        Some(ClusterPhase::Updating) => "Updating",
        Some(ClusterPhase::Stopping) => "Stopping",
        Some(ClusterPhase::Stopped) => "Stopped",
        Some(ClusterPhase::Deleting) => "Deleting",
        Some(ClusterPhase::Failed) => "Failed",
        Some(ClusterPhase::Abnormal) => "Abnormal",
        None => "Unknown",
    }
}

/// The fleet of `clusters` and `restores`.
pub fn of<'a>(
    clusters: impl IntoIterator<Item = &'a Cluster>,
    restores: impl IntoIterator<Item = &'a Restore>,
) -> Fleet {
    let mut counts: BTreeMap<&'static str, i64> = PHASES.iter().map(|p| (*p, 0)).collect();
    for c in clusters {
        let phase = c.status.as_ref().and_then(|s| s.phase);
        *counts.entry(phase_name(phase)).or_default() += 1;
    }
    let mut in_flight: Vec<RestoreInFlight> = restores
        .into_iter()
        .filter(|r| {
            // A Restore not yet picked up has no phase; it is in flight as much as a running one.
            matches!(
                r.status.as_ref().and_then(|s| s.phase),
                None | Some(RestorePhase::Running)
            ) && r.metadata.deletion_timestamp.is_none()
        })
        .map(|r| {
            let ratio = r
                .status
                .as_ref()
                .and_then(|s| s.progress.as_ref())
                .filter(|p| p.bytes_total > 0)
                .map(|p| (p.bytes_done as f64 / p.bytes_total as f64).clamp(0.0, 1.0));
            RestoreInFlight {
                namespace: r.metadata.namespace.clone().unwrap_or_default(),
                restore: r.metadata.name.clone().unwrap_or_default(),
                ratio,
            }
        })
        .collect();
    in_flight.sort_by(|a, b| (&a.namespace, &a.restore).cmp(&(&b.namespace, &b.restore)));
    Fleet {
        clusters: counts,
        restores: in_flight,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_api::apps::v1::ClusterStatus;
    use lifeboat_api::dataprotection::v1alpha1::{RestoreStatus, TransferProgress};

    fn cluster(name: &str, phase: Option<ClusterPhase>) -> Cluster {
        let mut c: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kubeblocks.io/v1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"terminationPolicy": "Delete", "componentSpecs": []}
        }))
        .expect("cluster");
        c.status = phase.map(|p| ClusterStatus {
            phase: Some(p),
            ..Default::default()
        });
        c
    }

    fn restore(name: &str, phase: Option<RestorePhase>, done: i64, total: i64) -> Restore {
        let mut r: Restore = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
            "kind": "Restore",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"backup": {"name": "b", "namespace": "ns"}}
        }))
        .expect("restore");
        r.status = Some(RestoreStatus {
            phase,
            progress: (total > 0).then(|| TransferProgress {
                stage: "download".into(),
                bytes_done: done,
                bytes_total: total,
                bytes_per_second: 0,
                eta_seconds: None,
                updated_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            }),
            ..Default::default()
        });
        r
    }

    #[test]
    fn clusters_are_counted_by_phase_with_every_phase_present() {
        let cs = [
            cluster("a", Some(ClusterPhase::Running)),
            cluster("b", Some(ClusterPhase::Running)),
            cluster("c", Some(ClusterPhase::Failed)),
            cluster("d", None),
        ];
        let f = of(&cs, &[]);
        assert_eq!(f.clusters.len(), PHASES.len());
        assert_eq!(f.clusters["Running"], 2);
        assert_eq!(f.clusters["Failed"], 1);
        assert_eq!(f.clusters["Unknown"], 1);
        assert_eq!(f.clusters["Creating"], 0);
        assert_eq!(of(&[], &[]).clusters.values().sum::<i64>(), 0);
    }

    #[test]
    fn only_restores_under_way_are_in_flight_with_their_progress() {
        let rs = [
            restore("running", Some(RestorePhase::Running), 25, 100),
            restore("new", None, 0, 0),
            restore("done", Some(RestorePhase::Completed), 100, 100),
            restore("failed", Some(RestorePhase::Failed), 10, 100),
        ];
        let f = of(&[], &rs);
        let names: Vec<(&str, Option<f64>)> = f
            .restores
            .iter()
            .map(|r| (r.restore.as_str(), r.ratio))
            .collect();
        assert_eq!(names, vec![("new", None), ("running", Some(0.25))]);
    }
}
