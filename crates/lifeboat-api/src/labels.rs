//! Label, annotation and finalizer keys. KubeBlocks' keys are kept where Lifeboat means the same
//! thing, so tools written against KubeBlocks keep finding objects.

/// The Cluster an object belongs to (KubeBlocks and the Kubernetes recommended labels).
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// The operator that manages an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY`] on everything Lifeboat creates.
pub const MANAGED_BY_VALUE: &str = "lifeboat";
/// The UID of the Cluster an object was made for. [`INSTANCE`] names the Cluster too, but every
/// Helm chart sets that label on its own objects; only Lifeboat writes this one, so it is what a
/// delete relies on. On the PVCs of a Cluster's StatefulSets, on restored volumes and on Backups.
pub const CLUSTER_UID: &str = "lifeboat.io/cluster-uid";
/// The name of the BackupRepo a namespace's copy of its credentials or its repo volume serves.
pub const BACKUP_REPO: &str = "lifeboat.io/backup-repo";
/// The UID of the BackupRepo such a copy or volume was made for.
pub const BACKUP_REPO_UID: &str = "lifeboat.io/backup-repo-uid";
/// Annotation on a repo's credential copy and volume: when a Job was last given access through
/// it. Rewritten on every use, so that a cleanup decided on an older version fails its
/// precondition instead of removing what a new Job is about to mount.
pub const REPO_ACCESS_AT: &str = "lifeboat.io/repo-access-at";
/// The component (within its Cluster) an object belongs to.
pub const COMPONENT_NAME: &str = "apps.kubeblocks.io/component-name";
/// The replication role of a database pod: `primary` or `secondary`.
pub const ROLE: &str = "kubeblocks.io/role";
/// The deprecated restore request, JSON keyed by component name.
pub const RESTORE_FROM_BACKUP: &str = "kubeblocks.io/restore-from-backup";
/// Marks the default BackupRepo.
pub const DEFAULT_REPO: &str = "dataprotection.kubeblocks.io/is-default-repo";
/// The BackupPolicy a Backup was taken under (KubeBlocks' label).
pub const BACKUP_POLICY: &str = "dataprotection.kubeblocks.io/backup-policy";
/// Restore parameter key: `Parallel` or `Serial` volume restore.
pub const PARAM_VOLUME_RESTORE_POLICY: &str = "dataprotection.kubeblocks.io/volume-restore-policy";
/// Restore parameter key: JSON list of extra environment variables for restore jobs.
pub const PARAM_RESTORE_ENV: &str = "dataprotection.kubeblocks.io/restore-env";
/// Restore parameter key: run post-ready actions only once the Cluster is otherwise running.
pub const PARAM_DEFER_POST_READY: &str =
    "dataprotection.kubeblocks.io/defer-post-ready-until-cluster-running";
/// Restore parameter key: which backup target to restore from.
pub const PARAM_SOURCE_TARGET_NAME: &str = "dataprotection.kubeblocks.io/source-target-name";
/// Lifeboat restore parameter key: the prepareData stage deadline (a duration such as `10m`).
pub const PARAM_PREPARE_DATA_DEADLINE: &str = "lifeboat.io/prepare-data-deadline";
/// Lifeboat restore parameter key: the postReady stage deadline (a duration such as `10m`).
pub const PARAM_POST_READY_DEADLINE: &str = "lifeboat.io/post-ready-deadline";
/// Annotation on a Backup: how long its Job may take, pending pods included (a duration such as
/// `45m`); the operator's `--backup-deadline` when absent.
pub const BACKUP_DEADLINE: &str = "lifeboat.io/backup-deadline";
/// Annotation on a Backup granting restores from the listed namespaces (comma separated, or `*`).
pub const RESTORE_GRANT: &str = "lifeboat.io/allow-restore-to-namespaces";
/// Pod readiness gate that holds restored database pods un-Ready until verification passes.
pub const READINESS_GATE_RESTORE_VERIFIED: &str = "lifeboat.io/restore-verified";
/// Marks a Backup a BackupSchedule took (KubeBlocks' label, value `"true"`).
pub const AUTOBACKUP: &str = "dataprotection.kubeblocks.io/autobackup";
/// The BackupSchedule that took a Backup (KubeBlocks' label).
pub const BACKUP_SCHEDULE: &str = "dataprotection.kubeblocks.io/backup-schedule";
/// The UID of the BackupSchedule that took a Backup: what proves a Backup under a run's name is
/// that run's, and not another object's of the same name.
pub const BACKUP_SCHEDULE_UID: &str = "lifeboat.io/backup-schedule-uid";
/// The schedule (its name within the BackupSchedule) that took a Backup.
pub const SCHEDULE_NAME: &str = "lifeboat.io/schedule";
/// Annotation on a scheduled Backup: the scheduled time of its run (RFC 3339).
pub const SCHEDULED_TIME: &str = "lifeboat.io/scheduled-time";
/// Annotation on a Backup: `"true"` asks for a restore drill once it completes (set by a user,
/// or by a schedule whose `drill` says so). The result is the Backup's `Verified` condition.
pub const DRILL: &str = "lifeboat.io/drill";
