//! Prometheus metrics, served at `/metrics`.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScheduleRunLabels {
    pub namespace: String,
    pub backupschedule: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScheduleLabels {
    pub namespace: String,
    pub cluster: String,
    pub backupschedule: String,
    pub schedule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepoLabels {
    pub backuprepo: String,
}

/// The operator's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub failures: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram>,
    pub restores: Family<OutcomeLabels, Counter>,
    pub backups: Family<OutcomeLabels, Counter>,
    pub leader: Gauge,
    /// When each Cluster's newest Backup completed (or its schedule was made, before one did).
    pub backup_last_success: Family<ClusterLabels, Gauge>,
    /// Scheduled runs by outcome: `started`, `missed`, and `failed` (the Backup failed).
    pub schedule_runs: Family<ScheduleRunLabels, Counter>,
    /// Each schedule's interval between two runs.
    pub schedule_interval: Family<ScheduleLabels, Gauge>,
    /// How long completed Backups took.
    pub backup_duration: Histogram,
    /// How many bytes completed Backups stored.
    pub backup_bytes: Histogram,
    /// When each Cluster's newest drilled Backup was proven restorable.
    pub backup_last_verified: Family<ClusterLabels, Gauge>,
    /// Drills by outcome (`passed`, `failed`), per namespace.
    pub drills: Family<NamespaceOutcomeLabels, Counter>,
    /// How long drills took.
    pub drill_duration: Histogram,
    /// How many bytes drills restored (the backups' uncompressed data).
    pub drill_bytes: Histogram,
    /// How long each stage of completed restores took.
    pub restore_stage_duration: Family<StageLabels, Histogram>,
    /// Failed restores by the stage that failed: a bounded reason.
    pub restore_failures: Family<StageLabels, Counter>,
    /// Bytes written into data volumes by completed restores.
    pub restore_bytes: Counter,
    /// How long each stage of completed backups took, as the mover measured it.
    pub backup_stage_duration: Family<StageLabels, Histogram>,
    /// 1 while a BackupRepo is Ready.
    pub repo_ready: Family<RepoLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceOutcomeLabels {
    pub namespace: String,
    pub outcome: String,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("lifeboat");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let failures = Family::<ErrorLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.005, 2.0, 12))
        });
        let restores = Family::<OutcomeLabels, Counter>::default();
        let backups = Family::<OutcomeLabels, Counter>::default();
        let leader = Gauge::default();
        let backup_last_success = Family::<ClusterLabels, Gauge>::default();
        let schedule_runs = Family::<ScheduleRunLabels, Counter>::default();
        let schedule_interval = Family::<ScheduleLabels, Gauge>::default();
        let backup_duration = Histogram::new(exponential_buckets(1.0, 2.0, 16));
        let backup_bytes = Histogram::new(exponential_buckets(1024.0 * 1024.0, 4.0, 12));
        let backup_last_verified = Family::<ClusterLabels, Gauge>::default();
        let drills = Family::<NamespaceOutcomeLabels, Counter>::default();
        let drill_duration = Histogram::new(exponential_buckets(1.0, 2.0, 16));
        let drill_bytes = Histogram::new(exponential_buckets(1024.0 * 1024.0, 4.0, 12));
        let restore_stage_duration = Family::<StageLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.5, 2.0, 16))
        });
        let restore_failures = Family::<StageLabels, Counter>::default();
        let restore_bytes = Counter::default();
        let repo_ready = Family::<RepoLabels, Gauge>::default();
        let backup_stage_duration = Family::<StageLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.5, 2.0, 16))
        });
        registry.register(
            "backup_stage_duration_seconds",
            "How long each stage of completed backups took: snapshot (the server's BGSAVE), transfer (compressing and storing the files)",
            backup_stage_duration.clone(),
        );
        registry.register(
            "restore_stage_duration_seconds",
            "How long each stage of completed restores took: validation, prepareData (volumes written and checked), postReady (database started and verified)",
            restore_stage_duration.clone(),
        );
        registry.register(
            "restore_failures",
            "Failed restores by the stage that failed: ValidationPassed, CheckBackupRepo, PrepareData, PostReady",
            restore_failures.clone(),
        );
        registry.register(
            "restore_bytes",
            "Bytes written into data volumes by completed restores (the backup's data, once per volume)",
            restore_bytes.clone(),
        );
        registry.register(
            "backup_repo_ready",
            "1 while the BackupRepo is Ready, 0 while it is not",
            repo_ready.clone(),
        );
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Reconciles that failed",
            failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long reconciles took",
            duration.clone(),
        );
        registry.register("restores", "Restores by terminal outcome", restores.clone());
        registry.register("backups", "Backups by terminal outcome", backups.clone());
        registry.register(
            "leader",
            "1 while this replica holds the lease",
            leader.clone(),
        );
        registry.register(
            "backup_last_success_timestamp_seconds",
            "When the Cluster's newest Backup completed, in Unix seconds; the creation of its schedule until one has",
            backup_last_success.clone(),
        );
        registry.register(
            "backup_schedule_runs",
            "Scheduled backup runs by outcome: started, missed (not started by their deadline), failed (the Backup failed)",
            schedule_runs.clone(),
        );
        registry.register(
            "backup_schedule_interval_seconds",
            "The time between two runs of a schedule",
            schedule_interval.clone(),
        );
        registry.register(
            "backup_duration_seconds",
            "How long completed Backups took, from start to completion",
            backup_duration.clone(),
        );
        registry.register(
            "backup_size_bytes",
            "The stored size of completed Backups",
            backup_bytes.clone(),
        );
        registry.register(
            "backup_last_verified_timestamp_seconds",
            "When the Cluster's newest drilled Backup was proven restorable, in Unix seconds",
            backup_last_verified.clone(),
        );
        registry.register(
            "backup_drills",
            "Restore drills by outcome: passed, failed",
            drills.clone(),
        );
        registry.register(
            "backup_drill_duration_seconds",
            "How long restore drills took, from the Job's start to its result",
            drill_duration.clone(),
        );
        registry.register(
            "backup_drill_size_bytes",
            "How many bytes restore drills restored (the backups' uncompressed data)",
            drill_bytes.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            reconciles,
            failures,
            duration,
            restores,
            backups,
            leader,
            backup_last_success,
            schedule_runs,
            schedule_interval,
            backup_duration,
            backup_bytes,
            backup_last_verified,
            drills,
            drill_duration,
            drill_bytes,
            restore_stage_duration,
            restore_failures,
            restore_bytes,
            repo_ready,
            backup_stage_duration,
        }
    }
}

impl Metrics {
    /// Counts a reconcile and returns a guard that records its duration when dropped.
    pub fn reconcile(&self, controller: &str) -> DurationGuard<'_> {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        DurationGuard {
            metrics: self,
            labels,
            start: std::time::Instant::now(),
        }
    }

    /// Counts a failed reconcile by error kind.
    pub fn failure(&self, controller: &str, error: &str) {
        self.failures
            .get_or_create(&ErrorLabels {
                controller: controller.to_owned(),
                error: error.to_owned(),
            })
            .inc();
    }

    /// Counts a terminal restore or backup outcome.
    pub fn outcome(family: &Family<OutcomeLabels, Counter>, outcome: &str) {
        family
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Records that a Backup of the Cluster completed at `at` (Unix seconds); the gauge keeps
    /// the newest.
    pub fn backup_succeeded(&self, namespace: &str, cluster: &str, at: i64) {
        let g = self.backup_last_success.get_or_create(&ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
        });
        if g.get() < at {
            g.set(at);
        }
    }

    /// Records that a Backup of the Cluster was proven restorable at `at`; the newest is kept.
    pub fn backup_verified(&self, namespace: &str, cluster: &str, at: i64) {
        let g = self.backup_last_verified.get_or_create(&ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
        });
        if g.get() < at {
            g.set(at);
        }
    }

    /// Counts a drill's outcome.
    pub fn drill(&self, namespace: &str, outcome: &str) {
        self.drills
            .get_or_create(&NamespaceOutcomeLabels {
                namespace: namespace.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts a scheduled run's outcome.
    pub fn schedule_run(&self, namespace: &str, backupschedule: &str, outcome: &str) {
        self.schedule_runs
            .get_or_create(&ScheduleRunLabels {
                namespace: namespace.to_owned(),
                backupschedule: backupschedule.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Records a schedule's interval.
    pub fn schedule_interval(
        &self,
        namespace: &str,
        cluster: &str,
        backupschedule: &str,
        schedule: &str,
        seconds: u64,
    ) {
        self.schedule_interval
            .get_or_create(&ScheduleLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
                backupschedule: backupschedule.to_owned(),
                schedule: schedule.to_owned(),
            })
            .set(i64::try_from(seconds).unwrap_or(i64::MAX));
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = match self.registry.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Records a reconcile's duration when dropped.
pub struct DurationGuard<'a> {
    metrics: &'a Metrics,
    labels: ControllerLabels,
    start: std::time::Instant,
}

impl Drop for DurationGuard<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .get_or_create(&self.labels)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series names of an exposition: the first word of every sample line.
    fn series(text: &str) -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(str::to_owned)
            .collect()
    }

    /// Every `lifeboat_…` name in `text`.
    fn names_used(text: &str) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut rest = text;
        while let Some(i) = rest.find("lifeboat_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.insert(tail[..end].to_owned());
            rest = &tail[end..];
        }
        out
    }

    #[test]
    fn every_series_the_charts_alerts_name_is_exported() {
        let m = Metrics::default();
        drop(m.reconcile("cluster"));
        m.failure("cluster", "kube");
        Metrics::outcome(&m.backups, "failed");
        Metrics::outcome(&m.restores, "failed");
        m.leader.set(1);
        m.backup_succeeded("ns", "c", 1);
        m.schedule_run("ns", "s", "missed");
        m.schedule_interval("ns", "c", "s", "datafile", 60);
        m.backup_duration.observe(1.0);
        m.backup_bytes.observe(1.0);
        m.backup_verified("ns", "c", 1);
        m.drill("ns", "failed");
        m.drill_duration.observe(1.0);
        let exported = series(&m.encode());
        let rule = include_str!("../../../deploy/helm/lifeboat/templates/prometheusrule.yaml");
        let used = names_used(rule);
        assert!(used.len() >= 4, "the rule names too few series: {used:?}");
        let missing: Vec<_> = used.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "the PrometheusRule names {missing:?}, which the operator does not export; it exports {exported:?}"
        );
        // The outcomes the alerts select are the ones the controllers count.
        assert!(rule.contains("outcome=\"failed\""));
    }
}
