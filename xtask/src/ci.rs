//! `cargo xtask ci`: everything CI runs, in order, each stage timed.

use std::process::Command;

use anyhow::Result;
use clap::Args;

use crate::paths::workspace_root;
use crate::run::{stage, status};

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
        cargo(&["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"])
    })?;
    stage("crd drift", || crate::crdgen::run_check())?;
    stage("tests", || cargo(&["test", "--workspace", "--locked"]))?;
    let _ = args.no_testbed;
    Ok(())
}
