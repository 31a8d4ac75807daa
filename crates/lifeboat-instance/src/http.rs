//! The manager's HTTP endpoint: the kubelet's probes and the report peers and the operator read.
//! It carries no secret and changes nothing, so it needs no authentication.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::RwLock;

use crate::error::{Result, io};
use crate::report::Report;

/// What the endpoint serves, updated by the manager's loops.
pub struct Shared {
    /// The data pod's report; `None` for a sentinel.
    pub report: RwLock<Option<Report>>,
    /// Whether the pod should receive traffic.
    pub ready: AtomicBool,
    /// Why it is not ready, for the probe's body (the kubelet records it in events).
    pub not_ready_because: RwLock<String>,
}

impl Shared {
    /// A manager that is not ready yet.
    pub fn new(report: Option<Report>) -> Arc<Self> {
        Arc::new(Self {
            report: RwLock::new(report),
            ready: AtomicBool::new(false),
            not_ready_because: RwLock::new("starting".into()),
        })
    }

    /// Sets readiness and the reason when not ready.
    pub async fn set_ready(&self, ready: bool, because: &str) {
        self.ready.store(ready, Ordering::Relaxed);
        if !ready {
            let mut w = self.not_ready_because.write().await;
            if *w != because {
                because.clone_into(&mut w);
            }
        }
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            s.not_ready_because.read().await.clone(),
        )
    }
}

async fn report(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    match s.report.read().await.clone() {
        Some(r) => (
            [(CONTENT_TYPE, "application/json")],
            serde_json::to_string(&r).unwrap_or_default(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not a data pod").into_response(),
    }
}

/// Serves until the process ends.
pub async fn serve(bind: Option<String>, port: u16, shared: Arc<Shared>) -> Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/report", get(report))
        .with_state(shared);
    let listener = match bind {
        Some(b) => tokio::net::TcpListener::bind((b.as_str(), port)).await,
        None => match tokio::net::TcpListener::bind(("::", port)).await {
            Ok(l) => Ok(l),
            Err(_) => tokio::net::TcpListener::bind(("0.0.0.0", port)).await,
        },
    }
    .map_err(io(format!("listening on port {port}")))?;
    axum::serve(listener, app)
        .await
        .map_err(io("serving the manager endpoint"))
}
