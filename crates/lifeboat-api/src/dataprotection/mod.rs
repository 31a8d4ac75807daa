//! `dataprotection.kubeblocks.io`: backups, restores, repos and policies.

pub mod v1alpha1;
