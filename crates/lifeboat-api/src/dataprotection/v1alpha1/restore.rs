use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, PersistentVolumeClaimSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConnectionCredential, DatasetFingerprint, ParameterPair, TransferProgress};

/// The desired state of a Restore: the Backup, the volumes to write, and the checks to run
/// once the database is up.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "dataprotection.kubeblocks.io",
    version = "v1alpha1",
    kind = "Restore",
    doc = "Restore writes a Backup into volumes (prepareData) and then verifies the running database against the backup manifest (postReady). Lifeboat creates one per restored Cluster component, named <cluster>-<component>-restore and owned by the Cluster.",
    namespaced,
    status = "RestoreStatus",
    category = "kubeblocks",
    printcolumn(name = "BACKUP", type_ = "string", json_path = ".spec.backup.name"),
    printcolumn(
        name = "RESTORE-TIME",
        type_ = "string",
        json_path = ".spec.restoreTime",
        priority = 1
    ),
    printcolumn(name = "STATUS", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "DURATION", type_ = "string", json_path = ".status.duration"),
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
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// The Backup to restore. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.backup is immutable"))]
    pub backup: BackupRef,

    /// Point-in-time target. Lifeboat restores full backups only and rejects this when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_time: Option<String>,

    /// Extra environment variables for the restore jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Resources for the restore jobs' containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_resources: Option<ResourceRequirements>,

    /// Where and how the data is written before the database starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_data_config: Option<PrepareDataConfig>,

    /// The service account restore jobs run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// What runs once the database is up on the restored data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_config: Option<ReadyConfig>,

    /// How many times a restore job is retried before the Restore fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10))]
    pub backoff_limit: Option<i32>,

    /// Parameters passed to the restore actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<ParameterPair>,

    /// Lifeboat extension: how long each stage may take before the Restore fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlines: Option<RestoreDeadlines>,
}

/// The Backup a Restore reads.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRef {
    /// The Backup's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The Backup's namespace.
    pub namespace: String,
    /// Which target of a multi-target Backup to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_target_name: Option<String>,
}

/// Where and how restored data is written.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrepareDataConfig {
    /// Specific PVCs to restore into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claims: Vec<RestoreVolumeClaim>,
    /// PVCs to restore into, one set per replica, named `<template>-<ordinal>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claims_template: Option<RestoreVolumeClaimsTemplate>,
    /// Whether the volumes are written at the same time or one after another.
    #[serde(default)]
    pub volume_claim_restore_policy: VolumeClaimRestorePolicy,
    /// Scheduling constraints for the restore jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_spec: Option<SchedulingSpec>,
}

/// Whether restore volumes are written in parallel or one after another.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VolumeClaimRestorePolicy {
    /// All volumes at once.
    #[default]
    Parallel,
    /// One volume at a time, in ordinal order.
    Serial,
}

/// A PVC to restore into.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreVolumeClaim {
    /// The PVC's metadata; its name is the PVC the workload will use.
    pub metadata: RestoreObjectMeta,
    /// The PVC's spec, used when Lifeboat creates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_spec: Option<PersistentVolumeClaimSpec>,
    /// The name of the backed-up volume this PVC receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_source: Option<String>,
    /// Where the restore job mounts the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
}

/// The metadata Lifeboat keeps for a restore PVC.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreObjectMeta {
    /// The PVC's name.
    pub name: String,
    /// The PVC's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The PVC's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// PVC templates restored once per replica.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreVolumeClaimsTemplate {
    /// The templates; the PVC for replica `i` is named `<template name>-<i>`.
    pub templates: Vec<RestoreVolumeClaim>,
    /// How many replicas to restore.
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// The first ordinal.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub starting_index: i32,
}

/// Scheduling constraints for restore jobs.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingSpec {
    /// Node labels the jobs' pods must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// A node to run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// What runs once the database is up on the restored data.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReadyConfig {
    /// A job to run against the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_action: Option<JobAction>,
    /// Credentials for connecting to the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_credential: Option<ConnectionCredential>,
}

/// A job that runs against the database's pods.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobAction {
    /// The pods the job acts on.
    pub target: JobActionTarget,
}

/// The pods a ready action acts on.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobActionTarget {
    /// The labels of the target pods.
    pub pod_selector: LabelSelector,
}

/// Lifeboat extension: stage deadlines, as durations such as `10m` or `90s`.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreDeadlines {
    /// How long writing the data into the volumes may take. Default `15m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(\d+[hms])+$"))]
    pub prepare_data: Option<String>,
    /// How long starting the database and verifying its data may take. Default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(\d+[hms])+$"))]
    pub post_ready: Option<String>,
}

/// The observed state of a Restore.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// The Restore's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// When the restore started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the restore completed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// How long the restore took, for example `1m12s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// The actions of each stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<RestoreStatusActions>,
    /// Conditions: `ValidationPassed`, `CheckBackupRepo`, `PrepareData`, `PostReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Lifeboat extension: the result of comparing the live dataset with the backup's manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<RestoreVerification>,
    /// Lifeboat extension: how far the running stage's Jobs have come (bytes, rate, ETA);
    /// absent outside a transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<TransferProgress>,
}

/// The phase of a Restore.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RestorePhase {
    /// The restore is in progress.
    Running,
    /// The data is restored and verified.
    Completed,
    /// The restore failed; the conditions and actions say where and why.
    Failed,
    /// The Restore only provides data for volumes (KubeBlocks' data-source mode; unused by
    /// Lifeboat).
    AsDataSource,
}

/// The actions of each restore stage.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatusActions {
    /// Writing data into volumes, one action per volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prepare_data: Vec<RestoreStatusAction>,
    /// Checking the running database.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_ready: Vec<RestoreStatusAction>,
}

/// One restore action.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatusAction {
    /// The action's name.
    pub name: String,
    /// The Backup the action reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// The object running the action, for example `Job/<name>`.
    pub object_key: String,
    /// The action's state.
    pub status: RestoreActionStatus,
    /// What happened, or why the action failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the action started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the action ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

/// The state of one restore action.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RestoreActionStatus {
    /// Running.
    #[default]
    Processing,
    /// Done.
    Completed,
    /// Failed.
    Failed,
}

/// Lifeboat extension: the backup's recorded dataset against the live one.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreVerification {
    /// Whether the live dataset matched.
    pub matched: bool,
    /// The fingerprint recorded in the backup's manifest.
    pub expected: DatasetFingerprint,
    /// The fingerprint of the running database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<DatasetFingerprint>,
    /// The pod that was verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// When the verification ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}
