//! Prometheus metrics, served at `/metrics`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

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
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestoreLabels {
    pub namespace: String,
    pub restore: String,
}

/// Reads the fleet from the controllers' watch caches ([`crate::fleet`]).
pub type FleetSource = Arc<dyn Fn() -> crate::fleet::Fleet + Send + Sync>;

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
    /// Clusters by phase, set at every scrape from the watch cache.
    pub clusters: Family<PhaseLabels, Gauge>,
    /// Restores not yet Completed or Failed, set at every scrape.
    pub restores_in_flight: Gauge,
    /// Each restore in flight's transfer progress (0 to 1), set at every scrape.
    pub restore_progress: Family<RestoreLabels, Gauge<f64, AtomicU64>>,
    fleet: RwLock<Option<FleetSource>>,
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
        let clusters = Family::<PhaseLabels, Gauge>::default();
        let restores_in_flight = Gauge::default();
        let restore_progress = Family::<RestoreLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "clusters",
            "Clusters by phase (Unknown: no status yet), as the operator's watch cache holds them at the scrape",
            clusters.clone(),
        );
        registry.register(
            "restores_in_flight",
            "Restores that are neither Completed nor Failed, at the scrape",
            restores_in_flight.clone(),
        );
        registry.register(
            "restore_progress_ratio",
            "The transfer progress of each restore in flight, bytes done over bytes total (absent before its first reading)",
            restore_progress.clone(),
        );
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
            clusters,
            restores_in_flight,
            restore_progress,
            fleet: RwLock::new(None),
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

    /// Where the scrape reads the fleet from; the Cluster controller sets it once its caches run.
    pub fn set_fleet_source(&self, source: FleetSource) {
        if let Ok(mut f) = self.fleet.write() {
            *f = Some(source);
        }
    }

    /// Sets the fleet gauges from `fleet`. The per-restore series are rebuilt, so a restore that
    /// ended or was deleted has none.
    pub fn show_fleet(&self, fleet: &crate::fleet::Fleet) {
        for (phase, n) in &fleet.clusters {
            self.clusters
                .get_or_create(&PhaseLabels {
                    phase: (*phase).to_owned(),
                })
                .set(*n);
        }
        self.restores_in_flight
            .set(i64::try_from(fleet.restores.len()).unwrap_or(i64::MAX));
        self.restore_progress.clear();
        for r in &fleet.restores {
            if let Some(ratio) = r.ratio {
                self.restore_progress
                    .get_or_create(&RestoreLabels {
                        namespace: r.namespace.clone(),
                        restore: r.restore.clone(),
                    })
                    .set(ratio);
            }
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let source = self.fleet.read().ok().and_then(|f| f.clone());
        if let Some(source) = source {
            self.show_fleet(&source());
        }
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
        m.show_fleet(&crate::fleet::Fleet {
            clusters: crate::fleet::PHASES.iter().map(|p| (*p, 0)).collect(),
            restores: vec![crate::fleet::RestoreInFlight {
                namespace: "ns".into(),
                restore: "r".into(),
                ratio: Some(0.5),
            }],
        });
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

        // The dashboard's panels, likewise, once every family has a sample.
        m.restore_failures
            .get_or_create(&StageLabels {
                stage: "PrepareData".into(),
            })
            .inc();
        m.restore_stage_duration
            .get_or_create(&StageLabels {
                stage: "prepareData".into(),
            })
            .observe(1.0);
        m.repo_ready
            .get_or_create(&RepoLabels {
                backuprepo: "r".into(),
            })
            .set(1);
        let exported = series(&m.encode());
        let dashboard = include_str!("../../../deploy/helm/lifeboat/dashboards/lifeboat.json");
        let used = names_used(dashboard);
        assert!(
            used.len() >= 10,
            "the dashboard names too few series: {used:?}"
        );
        // Descriptions may name a histogram by its family name.
        let missing: Vec<_> = used
            .iter()
            .filter(|n| !exported.contains(*n) && !exported.contains(&format!("{n}_bucket")))
            .collect();
        assert!(
            missing.is_empty(),
            "the dashboard names {missing:?}, which the operator does not export; it exports {exported:?}"
        );
    }

    #[test]
    fn fleet_gauges_follow_the_caches_and_leave_no_series_behind() {
        let m = Metrics::default();
        let fleet = |ratios: &[(&str, Option<f64>)]| crate::fleet::Fleet {
            clusters: crate::fleet::PHASES
                .iter()
                .map(|p| (*p, i64::from(*p == "Running") * 3))
                .collect(),
            restores: ratios
                .iter()
                .map(|(r, ratio)| crate::fleet::RestoreInFlight {
                    namespace: "ns".into(),
                    restore: (*r).into(),
                    ratio: *ratio,
                })
                .collect(),
        };
        m.show_fleet(&fleet(&[("a", Some(0.25)), ("b", None)]));
        let text = m.encode();
        assert!(
            text.contains("lifeboat_clusters{phase=\"Running\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("lifeboat_clusters{phase=\"Failed\"} 0"),
            "{text}"
        );
        assert!(text.contains("lifeboat_restores_in_flight 2"), "{text}");
        assert!(
            text.contains("lifeboat_restore_progress_ratio{namespace=\"ns\",restore=\"a\"} 0.25"),
            "{text}"
        );
        // "a" ended: its series goes.
        m.show_fleet(&fleet(&[]));
        let text = m.encode();
        assert!(text.contains("lifeboat_restores_in_flight 0"), "{text}");
        assert!(!text.contains("restore=\"a\""), "{text}");
    }
}
