//! KubeBlocks-compatible API types served by Lifeboat.
//!
//! The groups, versions, kinds, field names, enums and status shapes follow KubeBlocks'
//! published API (`apps.kubeblocks.io/v1` and `dataprotection.kubeblocks.io/v1alpha1`) for the
//! subset Lifeboat serves, so that manifests written for KubeBlocks apply unchanged. Fields that
//! Lifeboat adds are optional, documented as Lifeboat extensions, and listed in
//! `docs/api-extensions.md`.
//!
//! The rustdoc on each field becomes its description in the generated CRD.

// kube-derive takes one `printcolumn(...)` per column, which this lint mistakes for repeats.
#![allow(clippy::duplicated_attributes)]

pub mod apps;
pub mod conditions;
pub mod crds;
pub mod dataprotection;
pub mod labels;
pub mod restore_annotation;
pub mod schema_check;

pub use apps::v1::{Cluster, ClusterPhase, ClusterSpec, ClusterStatus};
pub use dataprotection::v1alpha1::{
    Backup, BackupPhase, BackupPolicy, BackupRepo, BackupSchedule, BackupSpec, BackupStatus,
    Restore, RestorePhase,
};
