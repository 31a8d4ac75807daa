use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a BackupRepo.
///
/// Lifeboat serves the storage providers `s3`, `minio` and `s3-compatible` (config keys
/// `bucket`, `endpoint`, `region`, `forcePathStyle`, and Lifeboat's `caBundle`; the credential
/// Secret's `accessKeyId` and `secretAccessKey`) and `pvc` (config keys `storageClassName` and `accessMode`; a PVC named
/// `lifeboat-repo-<repo>` is created in each namespace that backs up to it).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "dataprotection.kubeblocks.io",
    version = "v1alpha1",
    kind = "BackupRepo",
    doc = "BackupRepo is a place backups are stored: an S3-compatible bucket or a PVC-backed filesystem. It is Ready only once the store was reached.",
    status = "BackupRepoStatus",
    category = "kubeblocks",
    printcolumn(name = "STATUS", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "STORAGE-PROVIDER",
        type_ = "string",
        json_path = ".spec.storageProviderRef"
    ),
    printcolumn(
        name = "ACCESS-METHOD",
        type_ = "string",
        json_path = ".spec.accessMethod"
    ),
    printcolumn(name = "DEFAULT", type_ = "boolean", json_path = ".status.isDefault"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BackupRepoSpec {
    /// The storage provider: `s3`, `minio` or `pvc`. Immutable.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.storageProviderRef is immutable"))]
    #[x_kube(
        validation = Rule::new("self in ['s3', 'minio', 'pvc']")
            .message("spec.storageProviderRef must be one of s3, minio, pvc (the providers Lifeboat serves)")
    )]
    pub storage_provider_ref: String,

    /// How backup jobs reach the repo. `Mount` mounts a volume; `Tool` lets the mover talk to
    /// the store directly. Lifeboat uses `Tool` for S3 stores and `Mount` for `pvc` whatever
    /// this says, and records what it used in the status.
    #[serde(default)]
    pub access_method: AccessMethod,

    /// The capacity of the repo volume for the `pvc` provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_capacity: Option<Quantity>,

    /// What happens to repo volumes when the repo is deleted: `Retain` or `Delete`.
    #[serde(default)]
    pub pv_reclaim_policy: PvReclaimPolicy,

    /// Provider settings. S3 stores: `bucket`, `endpoint` and `region`; `forcePathStyle`
    /// (`"true"`, the default, or `"false"` for virtual-hosted style, where the bucket becomes
    /// the first label of the endpoint's host name); and `caBundle` (Lifeboat extension): PEM
    /// certificates of the authorities that sign the endpoint's certificate, trusted besides the
    /// system's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,

    /// The Secret holding the store's credentials (`accessKeyId`, `secretAccessKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<SecretReference>,

    /// A prefix for every object path in the repo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([a-zA-Z0-9_.\-]+/?)*$"))]
    pub path_prefix: Option<String>,
}

/// How backup jobs reach a repo.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessMethod {
    /// Through a mounted volume.
    #[default]
    Mount,
    /// Through the store's own API.
    Tool,
}

/// What happens to a repo's volumes when the repo is deleted.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PvReclaimPolicy {
    /// Volumes are kept.
    #[default]
    Retain,
    /// Volumes are deleted.
    Delete,
}

/// The observed state of a BackupRepo.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRepoStatus {
    /// The repo's phase: `Ready` once the store was reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupRepoPhase>,
    /// Conditions: `StorageProviderReady`, `PreCheckPassed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The name of the PVC backups use in each namespace (`pvc` provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_pvc_name: Option<String>,
    /// Whether this is the default repo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_default: Option<bool>,
    /// Lifeboat extension: why the repo is not `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The phase of a BackupRepo.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackupRepoPhase {
    /// Checking that the store is reachable.
    PreChecking,
    /// The store could not be reached or is misconfigured; the conditions say why.
    Failed,
    /// The store was reached; backups may use it.
    Ready,
    /// Being deleted.
    Deleting,
}
