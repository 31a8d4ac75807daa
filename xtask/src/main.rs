//! Developer and CI tasks for Lifeboat: `cargo xtask <task>`.
//!
//! Every task that CI runs is reachable from here so that a developer can run exactly what CI
//! runs. Tasks shell out to the real tools (cargo, go, buildah, kubectl) instead of re-implementing
//! them.

mod bench;
mod bench_scale;
mod bench_scale_data;
mod ci;
mod crdgen;
mod demo;
mod deploy;
mod e2e;
mod fuzz;
mod helm;
mod paths;
mod rbac;
mod run;
mod sim;
mod testbed;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "Lifeboat developer and CI tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Boot the test bed, deploy Lifeboat, back up and restore a FalkorDB cluster, and print the
    /// verification report.
    Demo,
    /// Everything CI runs: formatting, lints, unit tests, the mover's tests against real servers
    /// and the end-to-end tier on the test bed.
    Ci(ci::CiArgs),
    /// Regenerate the CRD YAML under deploy/crds (or check it with --check).
    Crdgen(crdgen::CrdgenArgs),
    /// Manage the local single-node Kubernetes test bed.
    Testbed(testbed::TestbedArgs),
    /// Benchmarks, reported as ratios against baselines measured in the same run.
    Bench(bench::BenchArgs),
    /// Render or check the Helm chart's plain manifest.
    Helm(helm::HelmArgs),
    /// Run the fuzz targets under fuzz/ for a bounded time each (docs/fuzzing.md).
    Fuzz(fuzz::FuzzArgs),
    /// Randomized schedules of the Cluster and Backup controllers against an in-memory API, and
    /// the proof that they catch planted bugs (docs/simulation.md).
    Sim(sim::SimArgs),
    /// Run the end-to-end tiers against the running bed, as CI does: several at once, then the
    /// tests that disturb the whole bed one at a time.
    E2e(e2e::E2eArgs),
    /// Rebuild the project's images and deploy Lifeboat onto the running test bed.
    Deploy,
    /// Check the operator's ClusterRole and Role against its requests in the bed's audit log.
    Rbac(rbac::RbacArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Demo => demo::run(),
        Task::Ci(args) => ci::run(args),
        Task::Crdgen(args) => crdgen::run(args),
        Task::Testbed(args) => testbed::run(args),
        Task::Bench(args) => bench::run(args),
        Task::Helm(args) => helm::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::Sim(args) => sim::run(args),
        Task::E2e(args) => e2e::run(args),
        Task::Deploy => testbed::images().and_then(|()| deploy::operator()),
        Task::Rbac(args) => rbac::check(args.since),
    }
}
