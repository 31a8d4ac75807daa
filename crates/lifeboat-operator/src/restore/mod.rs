//! Restoring a Cluster from a Backup: the request ([`intent`]), the checks before anything is
//! created ([`preconditions`]), the stage machine ([`plan`]), the Jobs it runs ([`jobs`]) and
//! how a stuck pod is explained ([`diagnose`]).

pub mod diagnose;
pub mod intent;
pub mod jobs;
pub mod plan;
pub mod preconditions;
