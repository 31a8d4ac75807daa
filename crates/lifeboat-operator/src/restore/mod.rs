//! Restoring a Cluster from a Backup: the request ([`intent`]), the checks before anything is
//! created ([`preconditions`]), the stage machine ([`plan`]), the Jobs it runs ([`jobs`]), how a
//! stuck pod is explained ([`diagnose`]) and confirmed ([`confirm`]), and what is not this
//! restore's own ([`leftovers`]).

pub mod confirm;
pub mod diagnose;
pub mod intent;
pub mod jobs;
pub mod leftovers;
pub mod plan;
pub mod preconditions;
