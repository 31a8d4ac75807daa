//! What every reconcile shares: the client, the one event recorder, metrics and configuration.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};

use crate::metrics::Metrics;

/// Operator configuration, from flags and environment.
#[derive(Clone, Debug)]
pub struct Config {
    /// The image restore, backup and verify Jobs run (`lifeboat-mover`).
    pub mover_image: String,
    /// The database image (redis-server with the FalkorDB module, and redis-cli).
    pub database_image: String,
    /// The cluster's DNS domain.
    pub cluster_domain: String,
    /// Default prepareData deadline.
    pub prepare_data_deadline: Duration,
    /// Default postReady deadline.
    pub post_ready_deadline: Duration,
    /// How long a backup may take.
    pub backup_deadline: Duration,
    /// Requests and limits of every mover Job ([`crate::job_resources`]).
    pub job_resources: k8s_openapi::api::core::v1::ResourceRequirements,
    /// The user and pull secrets of every pod Lifeboat creates.
    pub pods: crate::security::PodSettings,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mover_image: "localhost/lifeboat/mover:0.1.0".into(),
            database_image: "localhost/lifeboat/falkordb:4.16.3".into(),
            cluster_domain: "cluster.local".into(),
            prepare_data_deadline: Duration::from_secs(15 * 60),
            post_ready_deadline: Duration::from_secs(10 * 60),
            backup_deadline: Duration::from_secs(30 * 60),
            job_resources: crate::job_resources::default_resources(),
            pods: crate::security::PodSettings::default(),
        }
    }
}

/// The time the controllers read. The system clock, except in a simulation, which sets it to
/// move schedules past deadlines without waiting for them.
#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<std::sync::atomic::AtomicI64>>);

impl Clock {
    /// A clock that reads `seconds` (since the Unix epoch), as its owner sets them.
    pub fn manual(seconds: Arc<std::sync::atomic::AtomicI64>) -> Self {
        Clock(Some(seconds))
    }

    pub fn now(&self) -> jiff::Timestamp {
        match &self.0 {
            None => jiff::Timestamp::now(),
            Some(s) => jiff::Timestamp::from_second(s.load(std::sync::atomic::Ordering::Acquire))
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        }
    }
}

/// Shared by all reconciles.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The one event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Configuration.
    pub config: Config,
    /// What was applied, so that an apply that would change nothing is not sent.
    pub applied: Arc<crate::applied::Applied>,
    /// What "now" is for deadlines and recorded times.
    pub clock: Clock,
    /// Caches of what every Cluster pass reads; empty until the operator starts their watches.
    pub observed: Arc<crate::observed::Observed>,
}

impl Context {
    /// Builds the shared context.
    pub fn new(client: Client, reporter: Reporter, metrics: Arc<Metrics>, config: Config) -> Self {
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            recorder,
            metrics,
            config,
            applied: Arc::default(),
            clock: Clock::default(),
            observed: Arc::default(),
        }
    }

    /// Publishes an event on `obj`. Events are best effort: failing to publish one is logged and
    /// never fails a reconcile.
    pub async fn event<K>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let ev = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(note, 1000)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(object = %obj.name_any(), reason, error = %e, "could not publish event");
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
