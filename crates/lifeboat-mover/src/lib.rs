#![cfg_attr(test, allow(clippy::unwrap_used))]
//! Lifeboat's data mover: takes consistent backups of FalkorDB/Redis servers into a repository
//! and restores them into data directories, verifying every byte on the way and the dataset
//! fingerprint afterwards. See `docs/mover.md` for the command-line contract.

pub mod backup;
mod content;
pub mod delete;
pub mod direct;
pub mod drill;
pub mod error;
pub mod fingerprint;
pub mod inspect;
pub mod manifest;
pub mod marker;
pub mod progress;
pub mod replica;
pub mod repo;
pub mod restore;
pub mod scratch;
pub mod server;
pub mod stream;
pub mod termination;
pub mod verify;
