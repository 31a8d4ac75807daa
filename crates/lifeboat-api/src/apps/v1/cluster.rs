use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, ResourceRequirements, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a Cluster: which definition and topology, its components, and
/// optionally the Backup it is restored from.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "apps.kubeblocks.io",
    version = "v1",
    kind = "Cluster",
    doc = "Cluster is a database cluster made of components, each a group of identical pods. A Cluster created with spec.restore (or the deprecated kubeblocks.io/restore-from-backup annotation) is not Running until its restored data has been verified against the backup.",
    namespaced,
    status = "ClusterStatus",
    shortname = "cl",
    category = "kubeblocks",
    category = "all",
    printcolumn(
        name = "CLUSTER-DEFINITION",
        type_ = "string",
        json_path = ".spec.clusterDef",
        description = "ClusterDefinition referenced by the cluster"
    ),
    printcolumn(
        name = "TERMINATION-POLICY",
        type_ = "string",
        json_path = ".spec.terminationPolicy",
        description = "What deleting the cluster removes"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "Cluster phase"
    ),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("!has(oldSelf.spec.restore) || has(self.spec.restore)")
        .message("spec.restore is immutable: it cannot be removed once set")
        .field_path(".spec.restore"),
    validation = Rule::new("has(oldSelf.spec.restore) || !has(self.spec.restore)")
        .message("spec.restore is immutable: it can only be set when the Cluster is created")
        .field_path(".spec.restore")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The ClusterDefinition this cluster is built from: `falkordb` or `redis`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 63),
        regex(pattern = r"^[a-z0-9]([a-z0-9\.\-]*[a-z0-9])?$")
    )]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.clusterDef is immutable"))]
    pub cluster_def: Option<String>,

    /// The topology of the ClusterDefinition to use: `standalone` or `replication`. Defaults to
    /// the definition's default topology (`standalone`). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.topology is immutable"))]
    pub topology: Option<String>,

    /// What deleting the Cluster removes. `DoNotTerminate` refuses deletion; `Delete` removes
    /// workloads and volumes; `WipeOut` also removes the Cluster's backups and their repo data.
    pub termination_policy: TerminationPolicy,

    /// The components of the cluster. Names must be unique.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(
        validation = Rule::new("self.all(x, size(self.filter(c, c.name == x.name)) == 1)")
            .message("spec.componentSpecs[].name must be unique: two components share a name")
    )]
    pub component_specs: Vec<ClusterComponentSpec>,

    /// Create this Cluster from a backup. The data is restored into the Cluster's volumes before
    /// any database pod starts, and verified against the backup's manifest before the Cluster
    /// becomes `Running`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.restore is immutable"))]
    pub restore: Option<ClusterRestore>,

    /// Scheduled backups of the Cluster. Lifeboat keeps a BackupSchedule
    /// `<cluster>-<component>-backup-schedule` for each data component from it, as KubeBlocks
    /// does; `enabled: false` suspends that schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<ClusterBackup>,

    /// Where the Cluster's pods are scheduled, for every component that sets no policy of its
    /// own. Without an affinity, the pods of each component prefer different nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,
}

/// A Cluster's scheduled backups (KubeBlocks' `ClusterBackup`).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.pitrEnabled) || !self.pitrEnabled")
        .message("spec.backup.pitrEnabled: Lifeboat takes full backups only; point-in-time recovery is not served")
        .field_path(".pitrEnabled"),
    validation = Rule::new("!has(self.incrementalBackupEnabled) || !self.incrementalBackupEnabled")
        .message("spec.backup.incrementalBackupEnabled: Lifeboat takes full backups only")
        .field_path(".incrementalBackupEnabled")
)]
pub struct ClusterBackup {
    /// Whether scheduled backups run. `false` keeps the BackupSchedule, disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long each scheduled Backup is kept after it completes (`7d`, `12h`, `1d12h30m`).
    /// Defaults to `7d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(\d+[dhm])+$"))]
    pub retention_period: Option<String>,
    /// The backup method, for example `datafile`.
    #[schemars(length(min = 1, max = 63))]
    pub method: String,
    /// When to back up, as five cron fields in UTC (or with a `CRON_TZ=<zone> ` prefix, a
    /// Lifeboat extension). Defaults to `0 18 * * *`, as KubeBlocks does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub cron_expression: Option<String>,
    /// How late, in minutes, a scheduled backup may still start; later it is recorded as
    /// missed. Set on the BackupSchedule when Lifeboat creates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1440))]
    pub starting_deadline_minutes: Option<i64>,
    /// The BackupRepo to back up into; the default repo when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub repo_name: Option<String>,
    /// Point-in-time recovery. Lifeboat takes full backups only: `true` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitr_enabled: Option<bool>,
    /// The continuous method for point-in-time recovery. Recorded, not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous_method: Option<String>,
    /// Incremental backups. Lifeboat takes full backups only: `true` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_backup_enabled: Option<bool>,
    /// The cron expression of incremental backups. Recorded, not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_cron_expression: Option<String>,
    /// Lifeboat extension: prove the scheduled Backups restorable by restore drills; carried to
    /// the schedule's `drill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<crate::dataprotection::v1alpha1::DrillPolicy>,
}

/// KubeBlocks' cron expression of a Cluster's backups when `spec.backup` gives none.
pub const DEFAULT_BACKUP_CRON: &str = "0 18 * * *";

/// Where pods are scheduled (KubeBlocks' `SchedulingPolicy`). Each field, when set, is copied to
/// the pods as it is.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// The scheduler that places the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Node labels the pods require.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// A node to place every pod on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Node and pod affinity. When set it replaces Lifeboat's default, which makes the pods of a
    /// component prefer different nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Taints the pods tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// How the pods spread across topology domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
}

/// What deleting a Cluster removes.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TerminationPolicy {
    /// Deletion is refused while this policy is set.
    DoNotTerminate,
    /// Workloads, services and volumes are removed; backups are kept.
    #[default]
    Delete,
    /// Everything is removed, including the Cluster's backups and their repo data.
    WipeOut,
}

/// One component of a Cluster: a group of identical pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterComponentSpec {
    /// The component's name, unique within the Cluster. For FalkorDB: `falkordb` (data) and
    /// `falkordb-sent` (sentinel).
    #[schemars(
        length(min = 1, max = 22),
        regex(pattern = r"^[a-z]([a-z0-9\-]*[a-z0-9])?$")
    )]
    pub name: String,

    /// The ComponentDefinition to use. Defaults to the one the cluster definition's topology
    /// names for this component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub component_def: Option<String>,

    /// The version of the database service, for example `4.16.3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub service_version: Option<String>,

    /// How many pods the component runs.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,

    /// CPU and memory for the component's main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Volumes each pod gets. The data volume is named `data`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_templates: Vec<ClusterComponentVolumeClaimTemplate>,

    /// Extra environment variables for the component's main container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,

    /// Extra labels for the component's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Extra annotations for the component's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Where the component's pods are scheduled; replaces the Cluster's `schedulingPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,
}

fn default_replicas() -> i32 {
    1
}

/// A PersistentVolumeClaim template for a component's pods.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterComponentVolumeClaimTemplate {
    /// The volume's name, referenced by the containers' volume mounts (`data` for the data
    /// volume). PVCs are named `<name>-<cluster>-<component>-<ordinal>`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,

    /// Labels for the PVCs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Annotations for the PVCs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// The PVC spec: access modes, storage class and requested size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
}

/// Where to restore a new Cluster from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRestore {
    /// The Backup to restore from.
    pub source: RestoreSource,

    /// Point-in-time recovery target. Lifeboat restores full backups only; a Cluster that sets
    /// this fails with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitr: Option<String>,

    /// Restore parameters. KubeBlocks' keys are honoured:
    /// `dataprotection.kubeblocks.io/volume-restore-policy` (`Parallel` or `Serial`),
    /// `dataprotection.kubeblocks.io/restore-env` (JSON list of env vars for restore jobs).
    /// Lifeboat adds `lifeboat.io/prepare-data-deadline` and `lifeboat.io/post-ready-deadline`
    /// (durations such as `10m`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(
        validation = Rule::new(
            "!('dataprotection.kubeblocks.io/volume-restore-policy' in self) || \
             self['dataprotection.kubeblocks.io/volume-restore-policy'] in ['Parallel', 'Serial']"
        )
        .message("spec.restore.parameters[dataprotection.kubeblocks.io/volume-restore-policy] must be Parallel or Serial")
    )]
    pub parameters: BTreeMap<String, String>,
}

/// A reference to the object a Cluster is restored from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.apiGroup == 'dataprotection.kubeblocks.io' && self.kind == 'Backup'")
        .message("spec.restore.source must reference a Backup of apiGroup dataprotection.kubeblocks.io")
)]
pub struct RestoreSource {
    /// The API group of the source: `dataprotection.kubeblocks.io`.
    pub api_group: String,
    /// The kind of the source: `Backup`.
    pub kind: String,
    /// The source's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The source's namespace. Defaults to the Cluster's. Restoring from another namespace needs
    /// a grant on the Backup (annotation `lifeboat.io/allow-restore-to-namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The observed state of a Cluster.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The Cluster's phase. A restoring Cluster stays `Creating` until its data is verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,

    /// Why the Cluster is in its phase, when that needs explaining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Per-component status, keyed by component name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ClusterComponentStatus>,

    /// Conditions: `Ready`, `Available` and, for a restored Cluster, `Restore`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of a Cluster or one of its components.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterPhase {
    /// Being created; for a restored Cluster, until the restored data is verified.
    Creating,
    /// Every component is ready and, for a restored Cluster, the data is verified.
    Running,
    /// A spec change is being rolled out.
    Updating,
    /// Being stopped.
    Stopping,
    /// Stopped.
    Stopped,
    /// Being deleted.
    Deleting,
    /// Failed; `message` says why. A failed restore is terminal.
    Failed,
    /// Running, but some pods or links are not healthy.
    Abnormal,
}

/// The observed state of one component.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterComponentStatus {
    /// The component's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Messages about the component, keyed by the object or aspect they concern.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub message: BTreeMap<String, String>,
    /// The Cluster generation this component status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Whether the component's workload matches the current spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date: Option<bool>,
}
