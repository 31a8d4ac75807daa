//! `apps.kubeblocks.io/v1`.

mod cluster;

pub use cluster::*;
