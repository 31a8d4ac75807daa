use k8s_openapi::api::core::v1::{EnvVar, VolumeMount};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::BackupTarget;

/// The desired state of a BackupPolicy.
///
/// Lifeboat creates `<cluster>-<component>-backup-policy` for every data component from the
/// engine's defaults (method `datafile`, target role `secondary` with fallback `primary`). A
/// user may write one too.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "dataprotection.kubeblocks.io",
    version = "v1alpha1",
    kind = "BackupPolicy",
    doc = "BackupPolicy says how a Cluster component is backed up: which pods, which methods, into which repo.",
    namespaced,
    status = "BackupPolicyStatus",
    category = "kubeblocks",
    printcolumn(
        name = "BACKUP-REPO",
        type_ = "string",
        json_path = ".spec.backupRepoName"
    ),
    printcolumn(name = "STATUS", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.target) != has(self.targets)")
        .message("exactly one of spec.target and spec.targets must be set")
)]
pub struct BackupPolicySpec {
    /// The BackupRepo to store backups in. The default repo when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_repo_name: Option<String>,

    /// A prefix for this policy's backup paths inside the repo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,

    /// How many times a backup job is retried before the Backup fails.
    #[serde(default = "default_backoff_limit")]
    #[schemars(range(min = 0, max = 10))]
    pub backoff_limit: i32,

    /// The pods to back up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<BackupTarget>,

    /// Several targets, one per component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<BackupTarget>>,

    /// The backup methods this policy offers.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(
        validation = Rule::new("self.all(x, size(self.filter(m, m.name == x.name)) == 1)")
            .message("spec.backupMethods[].name must be unique")
    )]
    pub backup_methods: Vec<BackupMethod>,
}

fn default_backoff_limit() -> i32 {
    2
}

/// One way of backing up.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupMethod {
    /// The method's name, referenced by Backups (`datafile`).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Whether to back up with volume snapshots. Lifeboat does not take snapshots; a method
    /// that asks for them makes the Backup fail with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_volumes: Option<bool>,
    /// The KubeBlocks ActionSet this method would run. Lifeboat's engines carry their own
    /// actions, so this is recorded but not required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_set_name: Option<String>,
    /// The volumes the method reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_volumes: Option<TargetVolumeInfo>,
    /// Extra environment variables for the backup job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// How the method's backup Jobs run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
}

/// How a backup method's Jobs run.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSettings {
    /// Requests and limits of the backup Job's container, taken whole instead of Lifeboat's
    /// default. Without them the Job gets the operator's default bounds, with a memory limit
    /// grown by the database container's own (the backup loads the saved file into a scratch
    /// server to fingerprint it), or no memory limit when the database container has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
}

/// The volumes a backup method reads.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TargetVolumeInfo {
    /// The names of the volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Where the backup job mounts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
}

/// The observed state of a BackupPolicy.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicyStatus {
    /// `Available` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the policy failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
