//! An in-memory Kubernetes API server for deterministic simulation of Lifeboat's controllers.
//!
//! kube's own [`kube::Client`] is built over [`ApiServer`] (a `tower::Service`), so the reconcile
//! code under simulation is the production code, with no trait of its own between it and the
//! API: the seam is the HTTP request. The model holds what the controllers depend on and nothing
//! more: objects as JSON with resourceVersions, UIDs and generations; create, get, list with
//! label selectors, replace with optimistic concurrency, server-side apply (approximated as a
//! merge of the applied fields), merge and JSON patches, the status subresource; deletion with
//! finalizers and deletion timestamps; garbage collection through owner references; pod logs.
//!
//! Faults are injected per request by a [`FaultPlan`]: an API error (conflict, 500, ...), a
//! timeout, or a crash, after which every request of that operator process fails until the
//! harness restarts it ([`ApiServer::restart`]). A crash therefore lands between two API calls,
//! and the restarted operator sees only what the store holds.

pub mod harness;
mod invariants;
mod path;
mod server;
mod store;
pub mod world;

pub use server::{ApiServer, Fault, FaultPlan, Request as SeenRequest};
pub use store::{Key, Store};
