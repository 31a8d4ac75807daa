//! The manager's HTTP endpoint: the kubelet's probes and the report peers and the operator read.
//! Those carry no secret and change nothing, so they need no authentication.
//!
//! `/fingerprint` is the exception: it digests the whole dataset (see the mover's
//! `fingerprint.rs`) for a restore's verify Job. The digest needs `DEBUG`, which the server only
//! allows over loopback, and the manager is the one client on loopback. It costs a full scan, so
//! it asks for the database password as a bearer token and runs one scan at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
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
    /// Whether the server holds the dataset it serves: loaded and, for a replica, in sync with
    /// its primary; otherwise why not. This comes before ready when a server started from its
    /// RDB still writes its AOF, and a restore's verification may read the dataset from here on,
    /// so that the digest and the AOF's write overlap.
    pub serving: RwLock<std::result::Result<(), String>>,
    /// The local data server `/fingerprint` reads; unset for a sentinel.
    pub fingerprint_from: std::sync::OnceLock<LocalServer>,
    /// One dataset scan at a time.
    fingerprint_lock: tokio::sync::Mutex<()>,
}

/// How the manager reaches its own data server.
#[derive(Clone)]
pub struct LocalServer {
    /// Loopback, unless the server listens on one other address only (the manager's tests).
    pub host: String,
    pub port: u16,
    pub password: String,
}

impl Shared {
    /// A manager that is not ready yet.
    pub fn new(report: Option<Report>) -> Arc<Self> {
        Arc::new(Self {
            report: RwLock::new(report),
            ready: AtomicBool::new(false),
            not_ready_because: RwLock::new("starting".into()),
            serving: RwLock::new(Err("starting".into())),
            fingerprint_from: std::sync::OnceLock::new(),
            fingerprint_lock: tokio::sync::Mutex::new(()),
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

    /// Sets whether the server holds the dataset it serves, and why not.
    pub async fn set_serving(&self, serving: bool, because: &str) {
        *self.serving.write().await = if serving {
            Ok(())
        } else {
            Err(because.to_owned())
        };
    }

    /// Not ready and not serving, for the same reason: the server is not up, or is stopping.
    pub async fn set_down(&self, because: &str) {
        self.set_ready(false, because).await;
        self.set_serving(false, because).await;
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

/// How long one fingerprint may take, a restored dataset's load included.
const FINGERPRINT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Compares in constant time, so that the token cannot be guessed byte by byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn fingerprint(State(s): State<Arc<Shared>>, headers: HeaderMap) -> impl IntoResponse {
    let Some(local) = s.fingerprint_from.get().cloned() else {
        return (StatusCode::NOT_FOUND, "not a data pod".to_owned()).into_response();
    };
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !same(token.as_bytes(), local.password.as_bytes()) {
        return (
            StatusCode::UNAUTHORIZED,
            "the database password is required as a bearer token".to_owned(),
        )
            .into_response();
    }
    // A server that has not loaded, or a replica not yet in sync, would be digested over a
    // dataset it does not serve: the caller is told to ask again.
    if let Err(why) = &*s.serving.read().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, "1")],
            format!("the server does not serve its dataset yet: {why}"),
        )
            .into_response();
    }
    let _one_at_a_time = s.fingerprint_lock.lock().await;
    let res = tokio::task::spawn_blocking(move || {
        let opts = lifeboat_mover::server::ServerOpts {
            host: local.host,
            port: local.port,
            unix_socket: None,
            username: None,
            password: Some(local.password),
            connect_timeout: FINGERPRINT_TIMEOUT,
            command_timeout: FINGERPRINT_TIMEOUT,
        };
        lifeboat_mover::server::Server::connect(
            &opts,
            std::time::Instant::now() + FINGERPRINT_TIMEOUT,
        )
        .and_then(|mut srv| srv.fingerprint())
    })
    .await;
    match res {
        Ok(Ok(fp)) => (
            [(CONTENT_TYPE, "application/json")],
            serde_json::to_string(&fp).unwrap_or_default(),
        )
            .into_response(),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("fingerprint task failed: {e}"),
        )
            .into_response(),
    }
}

/// Serves until the process ends.
pub async fn serve(bind: Option<String>, port: u16, shared: Arc<Shared>) -> Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/report", get(report))
        .route("/fingerprint", get(fingerprint))
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
