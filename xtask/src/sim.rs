//! `cargo xtask sim`: randomized schedules of the Cluster and Backup controllers against the
//! in-memory API (`crates/lifeboat-sim`, docs/simulation.md), then the proof that they catch
//! planted bugs. Built in release: the schedules are CPU-bound, and CI runs 10,000 of them.

use std::process::Command;

use anyhow::Result;
use clap::Args;

use crate::paths::workspace_root;
use crate::run::status;

#[derive(Args)]
pub struct SimArgs {
    /// How many schedules.
    #[arg(long, default_value_t = 10_000)]
    schedules: u64,
    /// Random steps per schedule before faults stop.
    #[arg(long, default_value_t = 60)]
    steps: usize,
    /// Replay this seed and print its trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Schedules tried per planted bug; 0 skips the mutation proof.
    #[arg(long, default_value_t = 2_000)]
    mutation_budget: u64,
}

pub fn run(args: SimArgs) -> Result<()> {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(["run", "--release", "--locked", "-p", "lifeboat-sim", "--"])
        .arg("--schedules")
        .arg(args.schedules.to_string())
        .arg("--steps")
        .arg(args.steps.to_string())
        .arg("--mutation-budget")
        .arg(args.mutation_budget.to_string())
        .current_dir(workspace_root());
    if let Some(s) = args.seed {
        c.arg("--seed").arg(s.to_string());
    }
    status(&mut c)
}

/// Builds the simulation as [`run`] runs it, so that a run after it starts at once.
pub fn build() -> Result<()> {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(["build", "--release", "--locked", "-p", "lifeboat-sim"])
        .current_dir(workspace_root());
    status(&mut c)
}

/// CI's run: 10,000 schedules and every planted bug.
pub fn ci() -> Result<()> {
    run(SimArgs {
        schedules: 10_000,
        steps: 60,
        seed: None,
        mutation_budget: 2_000,
    })
}
