//! `dataprotection.kubeblocks.io/v1alpha1`.

mod backup;
mod backup_policy;
mod backup_repo;
mod common;
mod restore;

pub use backup::*;
pub use backup_policy::*;
pub use backup_repo::*;
pub use common::*;
pub use restore::*;
