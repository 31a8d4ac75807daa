use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BackupTarget, BackupTimeRange, DatasetFingerprint, ParameterPair, TransferProgress};

/// The desired state of a Backup: the policy and method to take it with, and how long to keep it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "dataprotection.kubeblocks.io",
    version = "v1alpha1",
    kind = "Backup",
    doc = "Backup is one backup of a Cluster component, taken under a BackupPolicy into a BackupRepo, with a manifest recording what the dataset holds.",
    namespaced,
    status = "BackupStatus",
    category = "kubeblocks",
    printcolumn(
        name = "POLICY",
        type_ = "string",
        json_path = ".spec.backupPolicyName",
        priority = 1
    ),
    printcolumn(name = "METHOD", type_ = "string", json_path = ".spec.backupMethod"),
    printcolumn(name = "REPO", type_ = "string", json_path = ".status.backupRepoName"),
    printcolumn(name = "STATUS", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "TOTAL-SIZE", type_ = "string", json_path = ".status.totalSize"),
    printcolumn(name = "DURATION", type_ = "string", json_path = ".status.duration"),
    printcolumn(
        name = "DELETION-POLICY",
        type_ = "string",
        json_path = ".spec.deletionPolicy",
        priority = 1
    ),
    printcolumn(
        name = "CREATION-TIME",
        type_ = "string",
        json_path = ".metadata.creationTimestamp",
        priority = 1
    ),
    printcolumn(
        name = "COMPLETION-TIME",
        type_ = "string",
        json_path = ".status.completionTimestamp",
        priority = 1
    ),
    printcolumn(
        name = "EXPIRATION-TIME",
        type_ = "string",
        json_path = ".status.expiration",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The BackupPolicy this backup is taken under. Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.backupPolicyName is immutable"))]
    pub backup_policy_name: String,

    /// The backup method of the policy to use, for example `datafile`. Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.backupMethod is immutable"))]
    pub backup_method: String,

    /// Whether deleting the Backup also deletes its data in the repo.
    #[serde(default)]
    pub deletion_policy: BackupDeletionPolicy,

    /// How long to keep the backup after it completes, for example `7d`, `12h` or `1d12h30m`;
    /// then it is deleted, with its repo data under `deletionPolicy: Delete`. Kept forever when
    /// empty. A Cluster's newest Completed Backup, its newest verified one, and one a restore
    /// still reads are kept past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(\d+[dhm])+$"))]
    pub retention_period: Option<String>,

    /// The parent of an incremental backup. Lifeboat takes full backups only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_backup_name: Option<String>,

    /// Parameters passed to the backup method.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<ParameterPair>,
}

/// Whether deleting a Backup deletes its data.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackupDeletionPolicy {
    /// The repo data is deleted with the Backup.
    #[default]
    Delete,
    /// The repo data is kept.
    Retain,
}

/// The observed state of a Backup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// The version of the backup data format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_version: Option<String>,
    /// The Backup's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// When the backup expires, from `retentionPeriod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<Time>,
    /// When the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the backup completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// How long the backup took, for example `12s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// The size of the stored backup data in bytes, as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_size: Option<String>,
    /// Why the backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The BackupRepo holding the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_repo_name: Option<String>,
    /// Where the data lives inside the repo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The time range the backup covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_range: Option<BackupTimeRange>,
    /// The target the backup was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<BackupTarget>,
    /// The actions the backup ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionStatus>,
    /// Lifeboat extension: what the backed-up dataset holds and where its manifest is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<BackupDataset>,
    /// Lifeboat extension: how far the running backup Job has come (bytes, rate, ETA); absent
    /// once the backup has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<TransferProgress>,
    /// Lifeboat extension: conditions explaining waits and failures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of a Backup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackupPhase {
    /// Accepted, not started (or waiting; the conditions say for what).
    New,
    /// The backup job is running.
    Running,
    /// The data is in the repo and its manifest is written.
    Completed,
    /// The backup failed; `failureReason` says why.
    Failed,
    /// The Backup and its data are being deleted.
    Deleting,
}

/// The state of one action of a backup.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ActionStatus {
    /// The action's name.
    pub name: String,
    /// The action's phase: `New`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The object running the action, for example `Job/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<String>,
    /// When the action started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the action completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// Why the action failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The size of the data the action stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_size: Option<String>,
}

/// Lifeboat extension: the backed-up dataset.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupDataset {
    /// The engine the backup was taken from: `falkordb` or `redis`.
    pub engine: String,
    /// The source Cluster's topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// The component the backup was taken from.
    pub component: String,
    /// The manifest's path inside the repo.
    pub manifest_path: String,
    /// The manifest's format version.
    pub manifest_format_version: u32,
    /// The size of the restored data in bytes (uncompressed); restore volumes must hold it.
    pub data_bytes: i64,
    /// What the dataset holds.
    pub fingerprint: DatasetFingerprint,
}
