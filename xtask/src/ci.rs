//! `cargo xtask ci`: everything CI runs, in order, each stage timed: fmt, clippy, CRD and chart
//! drift, the workspace tests, the fuzz smoke runs and the simulation, then on the test bed the
//! demo's scenario and the e2e tiers, several at a time (see `e2e.rs`).

use std::process::Command;

use anyhow::Result;
use clap::Args;

use crate::paths::workspace_root;
use crate::run::{stage, status};
use crate::{crdgen, demo, deploy, e2e, fuzz, helm, rbac, sim, testbed};

#[derive(Args)]
pub struct CiArgs {
    /// Skip the stages that need the test bed.
    #[arg(long)]
    no_testbed: bool,
    /// How many e2e tiers run at once on the bed (`cargo xtask e2e --lanes`).
    #[arg(long, default_value_t = 3)]
    e2e_lanes: usize,
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
        ])?;
        // The e2e crate's own unit tests (how its watchers judge lies and cut stages) need no bed.
        cargo(&["test", "--locked", "-p", "lifeboat-e2e", "--lib"])
    })?;
    // The simulation's release build side by side with the fuzz smoke runs (libFuzzer runs on
    // one core; the build ends in single-crate compiles): every parser of input Lifeboat did not
    // write, fuzzed from its seeds. Then the 10,000 randomized schedules of the Cluster and
    // Backup controllers and the planted bugs, with both cores to themselves: their time is a
    // figure the simulation reports, and another process on a core would make it the noise's.
    stage("fuzz smoke and simulation", || {
        std::thread::scope(|s| {
            let built = s.spawn(|| stage("simulation build", sim::build));
            let fuzzed = stage("fuzz smoke", fuzz::run_smoke);
            let built = built
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the simulation build thread panicked")));
            fuzzed.and(built)
        })?;
        stage("simulation", sim::ci)
    })?;
    if args.no_testbed {
        return Ok(());
    }
    stage("testbed up", testbed::up)?;
    stage("testbed images", testbed::images)?;
    // The RBAC check reads the operator's audited requests from here on: the deploy, the demo
    // and every tier.
    let audit_from = rbac::mark();
    deploy::operator()?;
    stage("helm server dry run", helm::server_dry_run)?;
    // The README's first command, `cargo xtask demo`, on every change; the tiers then run on the
    // bed it leaves, as they do for someone who ran the demo first. Like a tier, a failed demo
    // does not stop the tiers.
    let demo = match stage("demo", demo::scenario) {
        Ok(()) => None,
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            Some("demo")
        }
    };
    // Every tier runs even after one failed, so that one run reports every broken tier.
    let tiers = e2e::E2eArgs {
        tiers: Vec::new(),
        lanes: args.e2e_lanes,
    };
    let mut failed: Vec<String> = demo.into_iter().map(String::from).collect();
    match e2e::run_tiers(&tiers) {
        Ok(f) => failed.extend(f),
        Err(e) => {
            eprintln!("e2e tiers could not run: {e:#}");
            failed.push("e2e".into());
        }
    }
    // After every tier: the audit covers all that they made the operator do.
    if let Err(e) = stage("rbac audit", || rbac::check(audit_from)) {
        eprintln!("rbac audit failed: {e:#}");
        failed.push("rbac audit".into());
    }
    if !failed.is_empty() {
        anyhow::bail!("end-to-end stages failed: {}", failed.join(", "));
    }
    Ok(())
}
