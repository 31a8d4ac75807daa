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

/// The operator's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub failures: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram>,
    pub restores: Family<OutcomeLabels, Counter>,
    pub backups: Family<OutcomeLabels, Counter>,
    pub leader: Gauge,
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
        Self {
            registry: Mutex::new(registry),
            reconciles,
            failures,
            duration,
            restores,
            backups,
            leader,
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
