//! The Lifeboat operator binary.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use clap::Parser;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::events::Reporter;
use kube::runtime::wait::{await_condition, conditions};
use kube_lease_manager::LeaseManagerBuilder;
use lifeboat_operator::context::{Config, Context};
use lifeboat_operator::metrics::Metrics;
use lifeboat_operator::{backup, cluster, duration, repo, schedule, telemetry};
use tokio::sync::watch;

#[derive(Parser, Debug)]
#[command(
    name = "lifeboat-operator",
    version,
    about = "Runs FalkorDB and Redis clusters with verified restores"
)]
struct Args {
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, env = "LIFEBOAT_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// How many Clusters are reconciled at once.
    #[arg(long, env = "LIFEBOAT_CONCURRENCY", default_value_t = 4)]
    concurrency: u16,
    /// How many Backups are reconciled at once.
    #[arg(long, env = "LIFEBOAT_BACKUP_CONCURRENCY", default_value_t = 4)]
    backup_concurrency: u16,
    /// How many BackupRepos are reconciled (and their stores probed) at once.
    #[arg(long, env = "LIFEBOAT_REPO_CONCURRENCY", default_value_t = 2)]
    repo_concurrency: u16,
    /// How many BackupSchedules are reconciled at once.
    #[arg(long, env = "LIFEBOAT_SCHEDULE_CONCURRENCY", default_value_t = 2)]
    schedule_concurrency: u16,
    /// The leader Lease's name; two installations in one namespace need two names.
    #[arg(
        long,
        env = "LIFEBOAT_LEASE_NAME",
        default_value = "lifeboat-operator-leader"
    )]
    lease_name: String,
    /// The image of restore, backup and verify Jobs.
    #[arg(
        long,
        env = "LIFEBOAT_MOVER_IMAGE",
        default_value = "localhost/lifeboat/mover:0.1.0"
    )]
    mover_image: String,
    /// The database image.
    #[arg(
        long,
        env = "LIFEBOAT_FALKORDB_IMAGE",
        default_value = "localhost/lifeboat/falkordb:4.16.3"
    )]
    database_image: String,
    /// The cluster's DNS domain.
    #[arg(long, env = "LIFEBOAT_CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,
    /// Default prepareData deadline.
    #[arg(long, env = "LIFEBOAT_PREPARE_DATA_DEADLINE", default_value = "15m", value_parser = parse_duration)]
    prepare_data_deadline: Duration,
    /// Default postReady deadline.
    #[arg(long, env = "LIFEBOAT_POST_READY_DEADLINE", default_value = "10m", value_parser = parse_duration)]
    post_ready_deadline: Duration,
    /// This replica's name (the Lease holder identity and the event reporter instance).
    #[arg(long, env = "LIFEBOAT_POD_NAME", default_value = "lifeboat-operator")]
    pod_name: String,
    /// The namespace holding the leader Lease.
    #[arg(
        long,
        env = "LIFEBOAT_POD_NAMESPACE",
        default_value = "lifeboat-system"
    )]
    lease_namespace: String,
    /// `json` or `text`.
    #[arg(long, env = "LIFEBOAT_LOG_FORMAT", default_value = "text")]
    log_format: String,
    /// Requests and limits of the mover's Jobs, as a JSON ResourceRequirements
    /// (`{"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {...}}`); Lifeboat's default
    /// when unset.
    #[arg(long, env = "LIFEBOAT_JOB_RESOURCES", value_parser = parse_resources)]
    job_resources: Option<ResourceRequirements>,
    /// The user, group and fsGroup of every pod Lifeboat creates, or `platform` to leave them to
    /// the platform (OpenShift's restricted-v2 assigns them from the namespace's range).
    #[arg(long, env = "LIFEBOAT_POD_RUN_AS_USER", default_value = "999", value_parser = parse_run_as)]
    pod_run_as_user: RunAs,
    /// Pull Secrets (names, comma-separated) put on every pod Lifeboat creates; each must exist
    /// in the pod's namespace.
    #[arg(long, env = "LIFEBOAT_POD_IMAGE_PULL_SECRETS", value_delimiter = ',')]
    pod_image_pull_secrets: Vec<String>,
}

/// A `--pod-run-as-user` value: the user, or `None` for `platform`.
#[derive(Clone, Debug)]
struct RunAs(Option<i64>);

fn parse_run_as(s: &str) -> Result<RunAs, String> {
    lifeboat_operator::security::parse_run_as_user(s).map(RunAs)
}

fn parse_resources(s: &str) -> Result<ResourceRequirements, String> {
    serde_json::from_str(s).map_err(|e| {
        format!("--job-resources: {e}: expected a JSON ResourceRequirements such as {{\"requests\": {{\"memory\": \"128Mi\"}}}}")
    })
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    duration::parse(s).ok_or_else(|| format!("{s:?} is not a duration such as 90s, 15m or 1h"))
}

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
}

async fn metrics_handler(State(h): State<Health>) -> String {
    h.metrics.encode()
}

async fn ready_handler(State(h): State<Health>) -> (axum::http::StatusCode, &'static str) {
    if *h.ready.borrow() {
        (axum::http::StatusCode::OK, "ok")
    } else {
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!("shutting down");
}

async fn wait_for_crds(client: &kube::Client) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in lifeboat_api::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(Duration::from_secs(60), established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("watching CRD {name}: {e}")),
            Err(_) => {
                return Err(format!(
                    "CRD {name} is not established after 60s: install the CRDs first (kubectl apply -f deploy/crds/, or the Helm chart)"
                ));
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    telemetry::init(&args.log_format);
    // Ignoring the error is right: it only says a provider was installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "lifeboat-operator stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("connecting to the API server: {e}"))?;
    let metrics = Arc::new(Metrics::default());
    let (ready_tx, ready_rx) = watch::channel(false);
    let health = Health {
        metrics: metrics.clone(),
        ready: ready_rx,
    };
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|e| format!("binding {}: {e}", args.metrics_addr))?;
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown_signal())
            .await
        {
            tracing::error!(error = %e, "metrics server failed");
        }
    });

    wait_for_crds(&client).await?;

    // Only the leader reconciles: two replicas never race on the same Jobs.
    let lease = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(args.lease_namespace.clone())
        .with_identity(args.pod_name.clone())
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .map_err(|e| format!("creating the leader lease: {e}"))?;
    let (mut leader, lease_task) = lease.watch().await;
    tracing::info!(identity = %args.pod_name, "waiting for leadership");
    let _ = ready_tx.send(true);
    loop {
        if *leader.borrow_and_update() {
            break;
        }
        tokio::select! {
            r = leader.changed() => if r.is_err() { return Err("leader election stopped".into()) },
            _ = shutdown_signal() => return Ok(()),
        }
    }
    metrics.leader.set(1);
    tracing::info!("leading; starting controllers");

    let config = Config {
        mover_image: args.mover_image,
        database_image: args.database_image,
        cluster_domain: args.cluster_domain,
        prepare_data_deadline: args.prepare_data_deadline,
        post_ready_deadline: args.post_ready_deadline,
        job_resources: args
            .job_resources
            .unwrap_or_else(lifeboat_operator::job_resources::default_resources),
        pods: lifeboat_operator::security::PodSettings {
            run_as_user: args.pod_run_as_user.0,
            image_pull_secrets: args
                .pod_image_pull_secrets
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
        },
        ..Config::default()
    };
    let reporter = Reporter {
        controller: "lifeboat-operator".into(),
        instance: Some(args.pod_name.clone()),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        reporter,
        metrics.clone(),
        config,
    ));

    // Losing the lease stops the controllers: a replica that is no longer leader must not write.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let controllers = async {
        tokio::join!(
            cluster::run(ctx.clone(), args.concurrency, stop()),
            backup::controller::run(ctx.clone(), args.backup_concurrency, stop()),
            repo::controller::run(ctx.clone(), args.repo_concurrency, stop()),
            schedule::controller::run(ctx.clone(), args.schedule_concurrency, stop()),
        )
    };
    let watchdog = async {
        tokio::select! {
            _ = shutdown_signal() => "shutdown",
            _ = leader.wait_for(|l| !*l) => "lost leadership",
        }
    };
    tokio::pin!(controllers);
    let why = tokio::select! {
        _ = &mut controllers => "controllers ended",
        why = watchdog => why,
    };
    tracing::info!(reason = why, "stopping controllers");
    let _ = stop_tx.send(true);
    controllers.await;
    metrics.leader.set(0);
    drop(leader);
    let _ = lease_task.await;
    server.abort();
    if why == "lost leadership" {
        return Err("lost leadership".into());
    }
    Ok(())
}
