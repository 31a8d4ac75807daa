use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A name/value pair, as KubeBlocks passes backup and restore parameters.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParameterPair {
    /// The parameter's name.
    pub name: String,
    /// The parameter's value.
    pub value: String,
}

/// Selects the pods a backup or restore acts on.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSelector {
    /// The labels a target pod must carry (for example `kubeblocks.io/role: secondary`).
    #[serde(flatten)]
    pub label_selector: LabelSelector,

    /// Used when no pod matches `labelSelector` (for example `kubeblocks.io/role: primary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_label_selector: Option<LabelSelector>,

    /// Whether one matching pod (`Any`) or every matching pod (`All`) is a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<PodSelectionStrategy>,
}

/// How many of the selected pods are targets.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodSelectionStrategy {
    /// One matching pod.
    #[default]
    Any,
    /// Every matching pod.
    All,
}

/// Where a database's credentials are, in a Secret.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionCredential {
    /// The Secret holding the credentials, in the target's namespace.
    pub secret_name: String,
    /// The key of the user name in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    /// The key of the password in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
    /// The key of the host in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
    /// The key of the port in the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_key: Option<String>,
}

/// The container port a backup or restore connects to.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    /// The container's name.
    pub container_name: String,
    /// The port's name in that container.
    pub port_name: String,
}

/// A backup target: the pods to back up and how to reach them.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupTarget {
    /// The target's name; with several targets, each names one component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which pods to back up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<PodSelector>,
    /// Credentials for connecting to the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_credential: Option<ConnectionCredential>,
    /// The port to connect to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_port: Option<ContainerPort>,
    /// The service account backup jobs run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

/// A time range covered by a backup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupTimeRange {
    /// The time zone of the range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The earliest point the backup holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Time>,
    /// The latest point the backup holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Time>,
}

/// Lifeboat extension: what a backed-up dataset holds, as recorded in the backup's manifest.
///
/// A restore is verified by comparing the live dataset with this fingerprint.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DatasetFingerprint {
    /// Keys per logical database, keyed by database index (`"0"`, `"1"`, ...). Databases with no
    /// keys are omitted.
    #[serde(default)]
    pub keys: BTreeMap<String, i64>,
    /// FalkorDB graphs with their node and edge counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graphs: Vec<GraphFingerprint>,
    /// Content digest of the keys without a TTL, per database index: an order-independent
    /// digest of every key's name, type and value. Absent for backups taken before digests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digests: BTreeMap<String, String>,
    /// How many of each database's keys carry a TTL. They are digested apart and compared
    /// exactly only while none can have expired, so expiry fails no good restore.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volatile_keys: BTreeMap<String, i64>,
}

/// One graph's size.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GraphFingerprint {
    /// The database index the graph lives in.
    pub db: i64,
    /// The graph's key.
    pub name: String,
    /// How many nodes it holds.
    pub nodes: i64,
    /// How many edges it holds.
    pub edges: i64,
    /// Digest of its nodes and edges with their labels, types and properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Lifeboat extension: how far the running mover Jobs have come, from the progress lines they
/// print every two seconds. The operator refreshes it at most every few seconds, so that a long
/// transfer does not turn into a stream of status writes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TransferProgress {
    /// The mover's stage: `snapshot` or `upload` (backup), `download` (restore), `verify`.
    pub stage: String,
    /// Bytes done, summed over the stage's Jobs.
    pub bytes_done: i64,
    /// Bytes the stage moves, summed over its Jobs; 0 when the stage moves none (verify).
    pub bytes_total: i64,
    /// The measured rate, summed over the Jobs: each Job's mean since its stage began.
    pub bytes_per_second: i64,
    /// Seconds left at the measured rate; absent while the rate is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<i64>,
    /// When the Jobs' logs were read.
    pub updated_at: Time,
}

/// `1.1 GiB`, `412.0 MiB`, `512 B`.
pub fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// `8s`, `2m05s`, `1h02m`.
pub fn human_duration(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

impl TransferProgress {
    /// One line for people: `download 412.0 MiB of 1.1 GiB (36%) at 95.3 MiB/s, about 8s left`.
    pub fn describe(&self) -> String {
        let p = self;
        if p.bytes_total <= 0 {
            return p.stage.clone();
        }
        let pct = (p.bytes_done.saturating_mul(100) / p.bytes_total).clamp(0, 100);
        let mut s = format!(
            "{} {} of {} ({pct}%)",
            p.stage,
            human_bytes(p.bytes_done),
            human_bytes(p.bytes_total)
        );
        if p.bytes_per_second > 0 {
            s.push_str(&format!(" at {}/s", human_bytes(p.bytes_per_second)));
        }
        if let Some(e) = p.eta_seconds {
            s.push_str(&format!(", about {} left", human_duration(e)));
        }
        s
    }
}

#[cfg(test)]
mod progress_tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_as_people_write_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1_192_377_825), "1.1 GiB");
        assert_eq!(human_duration(8), "8s");
        assert_eq!(human_duration(125), "2m05s");
        assert_eq!(human_duration(3720), "1h02m");
    }
}
