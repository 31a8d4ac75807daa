//! `apps.kubeblocks.io`: the Cluster.

pub mod v1;
