//! The HTTP face of the store: the `tower::Service` kube's `Client` sends its requests to, with
//! faults injected per request.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::path::{self, Target};
use crate::store::{ApiError, Key, Store};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request as the server saw it, for a schedule's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Whether it could change the store.
    pub write: bool,
}

/// What to do with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Serve it.
    None,
    /// Refuse it with this status code (409 conflict, 500, 429, ...), changing nothing.
    Status(u16),
    /// Fail it as a timeout: the caller cannot tell whether it was applied, so it is applied
    /// first, as a request whose response was lost.
    Timeout,
    /// The operator process dies before this request reaches the server: it and every later
    /// request fail until [`ApiServer::restart`].
    Crash,
}

/// Decides each request's fault; the harness drives it from its seeded random source.
pub type FaultPlan = Box<dyn FnMut(&Request) -> Fault + Send>;

struct Inner {
    store: Store,
    faults: Option<FaultPlan>,
    crashed: bool,
    trace: Vec<Request>,
}

/// The simulated API server. Cloning shares it.
#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Mutex<Inner>>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new(Store::default())
    }
}

/// Kinds by resource, for list responses and objects created by apply without one.
fn kind_of(plural: &str) -> String {
    let known: BTreeMap<&str, &str> = [
        ("pods", "Pod"),
        ("services", "Service"),
        ("configmaps", "ConfigMap"),
        ("secrets", "Secret"),
        ("persistentvolumeclaims", "PersistentVolumeClaim"),
        ("events", "Event"),
        ("namespaces", "Namespace"),
        ("statefulsets", "StatefulSet"),
        ("jobs", "Job"),
        ("clusters", "Cluster"),
        ("backups", "Backup"),
        ("restores", "Restore"),
        ("backuprepos", "BackupRepo"),
        ("backuppolicies", "BackupPolicy"),
        ("backupschedules", "BackupSchedule"),
        ("leases", "Lease"),
    ]
    .into_iter()
    .collect();
    known
        .get(plural)
        .map_or_else(|| plural.to_owned(), |k| (*k).to_owned())
}

fn query(uri: &http::Uri) -> BTreeMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn json_response(code: u16, body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Full<Bytes>> {
    json_response(e.code, &e.status())
}

impl ApiServer {
    pub fn new(store: Store) -> Self {
        ApiServer {
            inner: Arc::new(Mutex::new(Inner {
                store,
                faults: None,
                crashed: false,
                trace: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a failed simulation already; its state is still the
        // best evidence there is.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads or changes the store between requests, as the world outside the operator does.
    pub fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        f(&mut self.lock().store)
    }

    pub fn set_faults(&self, plan: Option<FaultPlan>) {
        self.lock().faults = plan;
    }

    /// Whether the operator process has crashed (see [`Fault::Crash`]).
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// A new operator process: requests are served again.
    pub fn restart(&self) {
        self.lock().crashed = false;
    }

    /// The requests served or refused since the last call.
    pub fn take_trace(&self) -> Vec<Request> {
        std::mem::take(&mut self.lock().trace)
    }

    /// A kube client whose requests this server answers.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    fn handle(
        &self,
        method: &Method,
        uri: &http::Uri,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response<Full<Bytes>>, BoxError> {
        let mut g = self.lock();
        let seen = Request {
            method: method.to_string(),
            path: uri.path().to_owned(),
            write: method != Method::GET,
        };
        g.trace.push(seen.clone());
        if g.crashed {
            return Err("simulated operator crash: the process is gone".into());
        }
        let fault = match g.faults.as_mut() {
            Some(plan) => plan(&seen),
            None => Fault::None,
        };
        match fault {
            Fault::None => Ok(serve(&mut g.store, method, uri, content_type, body)),
            Fault::Status(code) => Ok(error_response(&ApiError {
                code,
                reason: match code {
                    403 => "Forbidden",
                    409 => "Conflict",
                    422 => "Invalid",
                    429 => "TooManyRequests",
                    503 => "ServiceUnavailable",
                    _ => "InternalError",
                },
                message: format!("simulated fault: {code} for {} {}", seen.method, seen.path),
            })),
            Fault::Timeout => {
                // Applied, then the response is lost.
                let _ = serve(&mut g.store, method, uri, content_type, body);
                Err("simulated timeout: no response".into())
            }
            Fault::Crash => {
                g.crashed = true;
                Err("simulated operator crash: the process is gone".into())
            }
        }
    }
}

fn serve(
    store: &mut Store,
    method: &Method,
    uri: &http::Uri,
    content_type: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let Some(t) = path::parse(uri.path()) else {
        return error_response(&ApiError {
            code: 404,
            reason: "NotFound",
            message: format!(
                "the server could not find the requested resource ({})",
                uri.path()
            ),
        });
    };
    let q = query(uri);
    match serve_target(store, method, &t, &q, content_type, body) {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError {
        code: 400,
        reason: "BadRequest",
        message: format!("the body is not JSON: {e}"),
    })
}

fn serve_target(
    store: &mut Store,
    method: &Method,
    t: &Target,
    q: &BTreeMap<String, String>,
    content_type: &str,
    body: &[u8],
) -> Result<Response<Full<Bytes>>, ApiError> {
    let dry_run = q.contains_key("dryRun");
    let status_only = t.subresource.as_deref() == Some("status");
    let key = |name: &str| Key {
        api_version: t.api_version.clone(),
        plural: t.plural.clone(),
        namespace: t.namespace.clone(),
        name: name.to_owned(),
    };
    match (method, &t.name) {
        (&Method::GET, None) => {
            let selector = q
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default();
            let items: Vec<Value> = store
                .list(&t.api_version, &t.plural, t.namespace.as_deref())
                .into_iter()
                .filter(|o| {
                    let labels = o
                        .pointer("/metadata/labels")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    path::selector_matches(selector, &labels)
                })
                .cloned()
                .collect();
            Ok(json_response(
                200,
                &json!({
                    "apiVersion": t.api_version,
                    "kind": format!("{}List", kind_of(&t.plural)),
                    "metadata": {"resourceVersion": store.revision().to_string()},
                    "items": items,
                }),
            ))
        }
        (&Method::GET, Some(name)) if t.subresource.as_deref() == Some("log") => {
            let ns = t.namespace.clone().unwrap_or_default();
            if store.get(&key(name)).is_none() {
                return Err(ApiError::not_found(&key(name)));
            }
            let text = store
                .logs
                .get(&(ns, name.clone()))
                .cloned()
                .unwrap_or_default();
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            Ok(r)
        }
        (&Method::GET, Some(name)) => store
            .get(&key(name))
            .map(|o| json_response(200, o))
            .ok_or_else(|| ApiError::not_found(&key(name))),
        (&Method::POST, None) => {
            let mut obj = parse_body(body)?;
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ApiError::invalid(format!("{}: metadata.name: Required value", t.plural))
                })?;
            if obj.get("kind").is_none() {
                obj["kind"] = json!(kind_of(&t.plural));
            }
            if dry_run {
                return Ok(json_response(201, &obj));
            }
            store
                .create(&key(&name), obj)
                .map(|o| json_response(201, &o))
        }
        (&Method::PUT, Some(name)) => {
            let obj = parse_body(body)?;
            store
                .replace(&key(name), obj, status_only)
                .map(|o| json_response(200, &o))
        }
        (&Method::PATCH, Some(name)) => {
            let patch = parse_body(body)?;
            let k = key(name);
            let r = if content_type.starts_with("application/json-patch") {
                store.json_patch(&k, &patch, status_only)
            } else {
                let apply = content_type.starts_with("application/apply-patch");
                let mut patch = patch;
                if apply && store.get(&k).is_none() && patch.get("kind").is_none() {
                    patch["kind"] = json!(kind_of(&t.plural));
                }
                store.merge(&k, &patch, status_only, apply)
            };
            r.map(|o| json_response(200, &o))
        }
        (&Method::DELETE, Some(name)) => store.delete(&key(name)).map(|o| json_response(200, &o)),
        _ => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!("{method} is not served on {}", t.plural),
        }),
    }
}

impl tower::Service<http::Request<kube::client::Body>> for ApiServer {
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let ct = parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            this.handle(&parts.method, &parts.uri, &ct, &bytes)
        })
    }
}
