//! `cargo xtask demo`: the main job. Boots the test bed, deploys Lifeboat from the current code,
//! and runs the field report's scenario with a verification report (crates/lifeboat-e2e,
//! `lifeboat-demo`).

use std::process::Command;

use anyhow::Result;

use crate::paths::workspace_root;
use crate::run::{stage, status};
use crate::{deploy, testbed};

pub fn run() -> Result<()> {
    stage("testbed up", testbed::up)?;
    stage("testbed images", testbed::images)?;
    deploy::operator()?;
    stage("field report scenario", scenario)
}

/// The scenario alone, on a bed with Lifeboat deployed. It replaces the clusters a previous run
/// left and leaves its own running, and marks no BackupRepo default, so it can run any number of
/// times and before or after the e2e tiers; `cargo xtask ci` runs it before them.
pub fn scenario() -> Result<()> {
    status(&mut e2e_bin("lifeboat-demo"))
}

/// `cargo run` of a binary of crates/lifeboat-e2e against the bed.
pub fn e2e_bin(bin: &str) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(["run", "--quiet", "-p", "lifeboat-e2e", "--bin", bin])
        .env("KUBECONFIG", testbed::kubeconfig_path())
        .current_dir(workspace_root());
    c
}
