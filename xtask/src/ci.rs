//! `cargo xtask ci`: everything CI runs, in order, each stage timed.

use std::process::Command;

use anyhow::Result;
use clap::Args;

use crate::paths::workspace_root;
use crate::run::{stage, status};
use crate::{crdgen, deploy, helm, testbed};

#[derive(Args)]
pub struct CiArgs {
    /// Skip the stages that need the test bed.
    #[arg(long)]
    no_testbed: bool,
}

fn cargo(args: &[&str]) -> Result<()> {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(args).current_dir(workspace_root());
    status(&mut c)
}

pub fn run(args: CiArgs) -> Result<()> {
    stage("fmt", || cargo(&["fmt", "--all", "--check"]))?;
    stage("clippy", || {
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ])
    })?;
    stage("crd drift", crdgen::run_check)?;
    stage("helm chart drift", helm::check)?;
    // Unit tests, and the mover's tests against real FalkorDB and MinIO servers they start.
    stage("tests", || {
        cargo(&[
            "test",
            "--workspace",
            "--locked",
            "--exclude",
            "lifeboat-e2e",
        ])
    })?;
    if args.no_testbed {
        return Ok(());
    }
    stage("testbed up", testbed::up)?;
    stage("testbed images", testbed::images)?;
    deploy::operator()?;
    testbed::run_e2e("smoke", 2)?;
    testbed::run_e2e("crds", 2)?;
    testbed::run_e2e("cluster", 1)?;
    testbed::run_e2e("restore", 1)?;
    Ok(())
}
