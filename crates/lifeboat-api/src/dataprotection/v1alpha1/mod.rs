//! `dataprotection.kubeblocks.io/v1alpha1`.

mod backup;
mod backup_policy;
mod backup_repo;
mod backup_schedule;
mod common;
mod restore;

pub use backup::*;
pub use backup_policy::*;
pub use backup_repo::*;
pub use backup_schedule::*;
pub use common::*;
pub use restore::*;
