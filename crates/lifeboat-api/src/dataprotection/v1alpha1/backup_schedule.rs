use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ParameterPair;

/// The desired state of a BackupSchedule: the policy its Backups are taken under, and when.
///
/// Lifeboat creates `<cluster>-<component>-backup-schedule` for a Cluster that sets
/// `spec.backup`, as KubeBlocks does. A user may write one too.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "dataprotection.kubeblocks.io",
    version = "v1alpha1",
    kind = "BackupSchedule",
    doc = "BackupSchedule takes Backups under a BackupPolicy on cron schedules, each with its own retention. Never two Backups of one Cluster run at once; a run that cannot start within startingDeadlineMinutes is recorded as missed.",
    namespaced,
    status = "BackupScheduleStatus",
    shortname = "bs",
    category = "kubeblocks",
    printcolumn(name = "STATUS", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BackupScheduleSpec {
    /// The BackupPolicy the scheduled Backups are taken under, in this namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([a-z0-9\.\-]*[a-z0-9])?$")
    )]
    pub backup_policy_name: String,

    /// How late, in minutes, a run may still start after its scheduled time: the operator was
    /// down, or another Backup of the same Cluster was still running. A run that cannot start
    /// by then is recorded as missed (`status.schedules[].missedRuns`), never silently skipped.
    /// Without it a late run starts whenever it can, until the schedule's next time comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1440))]
    pub starting_deadline_minutes: Option<i64>,

    /// The schedules. Their names (or, where a name is empty, their methods) must be unique.
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(
        validation = Rule::new("self.all(x, size(self.filter(s, (has(s.name) && s.name != '' ? s.name : s.backupMethod) == (has(x.name) && x.name != '' ? x.name : x.backupMethod))) == 1)")
            .message("spec.schedules[].name must be unique (an empty name stands for the backupMethod)")
    )]
    pub schedules: Vec<SchedulePolicy>,
}

/// One schedule of a BackupSchedule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulePolicy {
    /// Whether the schedule runs. A disabled schedule takes no Backup and records no missed run;
    /// enabled again, it starts from its next time after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,

    /// The schedule's name, unique within the BackupSchedule; the backupMethod when empty. It is
    /// the key of the schedule's status and part of its Backups' names.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(
        length(max = 32),
        regex(pattern = r"^([a-z0-9]([a-z0-9\-]*[a-z0-9])?)?$")
    )]
    pub name: String,

    /// The BackupPolicy's method the Backups use, for example `datafile`.
    #[schemars(length(min = 1, max = 63))]
    pub backup_method: String,

    /// When to take a Backup: five cron fields (minute, hour, day of month, month, day of week)
    /// or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`, in UTC as KubeBlocks reads it.
    /// Lifeboat extension: a `CRON_TZ=<IANA zone> ` prefix, as Kubernetes CronJobs once took
    /// it, reads the fields in that zone (`CRON_TZ=Europe/Berlin 0 3 * * *`). An expression
    /// that does not parse fails the BackupSchedule, naming the schedule.
    #[schemars(length(min = 1, max = 256))]
    pub cron_expression: String,

    /// How long each Backup of this schedule is kept after it completes (`7d`, `12h`,
    /// `1d12h30m`); it becomes the Backup's `spec.retentionPeriod`. Defaults to `7d`.
    #[serde(default = "default_retention", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(\d+[dhm])+$"))]
    pub retention_period: Option<String>,

    /// Parameters passed to each Backup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub parameters: Vec<ParameterPair>,

    /// Lifeboat extension: prove the schedule's Backups restorable. A Backup taken while a drill
    /// is due asks for one (annotation `lifeboat.io/drill`); once it completes, a Job restores it
    /// into a private scratch server and checks it against its fingerprint and content digests.
    /// The Backup's `Verified` condition says how that went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<DrillPolicy>,
}

/// How often a schedule drills its Backups.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrillPolicy {
    /// Drill every Nth Backup of the schedule; 1 (the default) drills each one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub every: Option<i32>,
    /// At most one drill per this interval (`12h`, `7d`), whatever `every` says: a big Cluster
    /// backed up hourly need not be drilled hourly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(\d+[dhm])+$"))]
    pub min_interval: Option<String>,
}

fn default_retention() -> Option<String> {
    Some(DEFAULT_RETENTION.into())
}

/// KubeBlocks' default retention of scheduled Backups.
pub const DEFAULT_RETENTION: &str = "7d";

impl SchedulePolicy {
    /// The schedule's name: its `name`, or its `backupMethod` when that is empty (KubeBlocks'
    /// rule).
    pub fn schedule_name(&self) -> &str {
        if self.name.is_empty() {
            &self.backup_method
        } else {
            &self.name
        }
    }

    /// Whether the schedule runs; a schedule that says nothing runs.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// The observed state of a BackupSchedule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupScheduleStatus {
    /// `Available` while every schedule can run; `Failed` when one cannot (an expression that
    /// does not parse, a missing policy or method), with `failureReason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupSchedulePhase>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Why the BackupSchedule failed, naming the schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Each schedule's state, by schedule name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schedules: BTreeMap<String, ScheduleStatus>,
}

/// The phase of a BackupSchedule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupSchedulePhase {
    /// Every schedule can run.
    Available,
    /// A schedule cannot run; `failureReason` says why.
    Failed,
}

/// The state of one schedule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// `Running` while the schedule runs and its last run produced a Backup that did not fail;
    /// `Failed` when its last run was missed or its Backup failed, with `failureReason`;
    /// `Disabled` (Lifeboat) while `enabled` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SchedulePhase>,
    /// Why the last run was missed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The scheduled time of the last run that created a Backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the newest Backup of this schedule completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// Lifeboat extension: the next scheduled time the schedule waits for. A run whose time has
    /// come is started from this, so an operator that was down runs it on return.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// Lifeboat extension: the Backup the last run created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup_name: Option<String>,
    /// Lifeboat extension: how many scheduled runs were missed since the schedule was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_runs: Option<i64>,
    /// Lifeboat extension: the scheduled time of the last missed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_missed_time: Option<Time>,
    /// Lifeboat extension: what the schedule waits for, when a due run has not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The phase of one schedule.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulePhase {
    /// The schedule runs.
    Running,
    /// The last run was missed or its Backup failed.
    Failed,
    /// Lifeboat: the schedule is not enabled.
    Disabled,
}
