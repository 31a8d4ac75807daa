//! Lifeboat's controllers.
//!
//! Each controller reconciles as a pipeline: observe the object and its children, plan (pure
//! functions in `plan`/`build` modules, unit-tested), apply with server-side apply under the one
//! field manager [`FIELD_MANAGER`], then write status through the status subresource.

pub mod applied;
pub mod backup;
pub mod cluster;
pub mod context;
pub mod duration;
pub mod engine;
pub mod error;
pub mod fleet;
pub mod job_resources;
pub mod kubeapi;
pub mod metrics;
pub mod mover_env;
pub mod mover_output;
pub mod mutation;
pub mod naming;
pub mod observed;
pub mod ownership;
pub mod progress;
pub mod repo;
pub mod restore;
pub mod schedule;
pub mod security;
pub mod telemetry;

/// The one field manager Lifeboat writes with.
pub const FIELD_MANAGER: &str = "lifeboat";
