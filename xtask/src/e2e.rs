//! The end-to-end tiers on the bed, as CI runs them (`cargo xtask e2e`).
//!
//! Most e2e tests own their namespace and touch nothing outside it, so the tiers run side by
//! side: most of a tier's time is waiting for pods, volumes and Jobs, not CPU. A few tests
//! change what every other test stands on (they stop or kill the operator, cordon the node, or
//! own the default BackupRepo); those are skipped in their tier and run afterwards, one at a
//! time, with nothing else on the bed. A test that does any of this belongs in [`EXCLUSIVE`].
//!
//! Every line a tier prints is prefixed with its name, so interleaved output stays readable and
//! a tier still running when CI's time ends has shown what it was doing.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::paths::workspace_root;
use crate::run::{stage, status, succeeded};
use crate::testbed;

/// A test target of crates/lifeboat-e2e and the test threads it runs with.
struct Tier {
    name: &'static str,
    threads: u32,
}

const fn tier(name: &'static str, threads: u32) -> Tier {
    Tier { name, threads }
}

/// Quick checks of the bed and of the CRDs, alone and first: if they fail, the rest would only
/// fail more slowly.
const FIRST: &[Tier] = &[tier("smoke", 2), tier("crds", 2)];

/// The tiers that run side by side, longest first so that the short ones fill in at the end.
/// A tier's threads are its own tests at once; the restore tier shares one source Cluster and
/// namespace between its tests, which one at a time keeps simple to read.
const POOL: &[Tier] = &[
    tier("restore", 1),
    tier("cluster", 2),
    tier("s3", 1),
    tier("schedule", 2),
    tier("durability", 2),
    tier("plugin", 2),
    tier("examples", 2),
];

/// Last: the namespaces the demo and every tier left behind.
const LAST: &[Tier] = &[tier("leaks", 1)];

/// Tests that would pull the ground from under tests running beside them, as (tier, test, what
/// it does to the bed). They run after the pool, one at a time, a tier's together in one run.
/// A tier's entries stay together in this list.
const EXCLUSIVE: &[(&str, &str, &str)] = &[
    (
        "durability",
        "durability_operator_killed_during_failover",
        "kills the operator",
    ),
    (
        "restore",
        "operator_killed_during_prepare_data_resumes_without_duplicating_jobs",
        "kills the operator",
    ),
    (
        "restore",
        "backup_job_that_cannot_be_scheduled_fails_within_its_deadline",
        "cordons the node",
    ),
    (
        "restore",
        "backup_through_the_default_repo_and_two_defaults_are_refused_naming_both",
        "owns the default BackupRepo, which the examples' S3 repo also claims",
    ),
    (
        "schedule",
        "a_run_the_operator_slept_through_starts_within_its_deadline_or_is_recorded_missed",
        "stops the operator for a minute",
    ),
];

#[derive(Args)]
pub struct E2eArgs {
    /// Run only these tiers (test targets of crates/lifeboat-e2e), their exclusive tests
    /// included; every tier when absent.
    #[arg(long = "tier")]
    pub tiers: Vec<String>,
    /// How many tiers run at once.
    #[arg(long, default_value_t = 3)]
    pub lanes: usize,
}

impl Default for E2eArgs {
    fn default() -> Self {
        Self {
            tiers: Vec::new(),
            lanes: 3,
        }
    }
}

pub fn run(args: E2eArgs) -> Result<()> {
    let failed = run_tiers(&args)?;
    if !failed.is_empty() {
        bail!("end-to-end tiers failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Runs the tiers; returns the ones that failed. Every tier runs even after one failed, so that
/// one run reports every broken tier. Errs only when none could run.
pub fn run_tiers(args: &E2eArgs) -> Result<Vec<String>> {
    testbed::require_ready()?;
    let known: Vec<&str> = tier_names();
    if let Some(unknown) = args.tiers.iter().find(|t| !known.contains(&t.as_str())) {
        bail!("no e2e tier {unknown}; the tiers are {}", known.join(", "));
    }
    let wanted = |name: &str| args.tiers.is_empty() || args.tiers.iter().any(|n| n == name);
    let chosen = |t: &&Tier| wanted(t.name);
    // Built once before the tiers start, so that they do not queue on cargo's lock one by one.
    stage("e2e build", || {
        status(
            cargo()
                .args([
                    "test",
                    "--locked",
                    "-p",
                    "lifeboat-e2e",
                    "--tests",
                    "--no-run",
                ])
                .current_dir(workspace_root()),
        )
    })?;

    let failed = Mutex::new(Vec::new());
    let record = |label: String, r: Result<()>| {
        if let Err(e) = r {
            eprintln!("e2e {label} failed: {e:#}");
            failed.lock().unwrap_or_else(|p| p.into_inner()).push(label);
        }
    };
    for t in FIRST.iter().filter(chosen) {
        record(t.name.to_string(), run_tier(t, &Filter::SkipExclusive));
    }
    let queue = Mutex::new(POOL.iter().filter(chosen).collect::<Vec<_>>().into_iter());
    std::thread::scope(|s| {
        for _ in 0..args.lanes.max(1) {
            s.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                    let Some(t) = next else { break };
                    record(t.name.to_string(), run_tier(t, &Filter::SkipExclusive));
                }
            });
        }
    });
    // One process per tier for its exclusive tests, one test at a time: a tier's process sets up
    // what its tests share (the restore tier's source Cluster and Backups) once.
    let mut tiers_with_exclusive: Vec<&str> = EXCLUSIVE.iter().map(|(t, _, _)| *t).collect();
    tiers_with_exclusive.dedup();
    for tier_name in tiers_with_exclusive {
        if !wanted(tier_name) {
            continue;
        }
        let tests: Vec<&str> = EXCLUSIVE
            .iter()
            .filter(|(t, _, _)| *t == tier_name)
            .map(|(_, test, what)| {
                eprintln!("e2e: {tier_name}::{test} runs alone: it {what}");
                *test
            })
            .collect();
        let t = tier(tier_name, 1);
        record(
            format!("{tier_name} alone"),
            run_tier(&t, &Filter::Only(&tests)),
        );
    }
    for t in LAST.iter().filter(chosen) {
        record(t.name.to_string(), run_tier(t, &Filter::SkipExclusive));
    }
    Ok(failed.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// Every tier's name, in the order they run.
fn tier_names() -> Vec<&'static str> {
    FIRST
        .iter()
        .chain(POOL)
        .chain(LAST)
        .map(|t| t.name)
        .collect()
}

enum Filter<'a> {
    /// Every test of the tier but its exclusive ones.
    SkipExclusive,
    /// These tests of the tier, exactly.
    Only(&'a [&'a str]),
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs one test target against the bed, its output prefixed with the label.
fn run_tier(t: &Tier, filter: &Filter) -> Result<()> {
    let label = match filter {
        Filter::SkipExclusive => t.name.to_string(),
        Filter::Only(_) => format!("{} alone", t.name),
    };
    stage(&format!("e2e {label}"), || {
        let mut c = cargo();
        c.args(["test", "--locked", "-p", "lifeboat-e2e", "--test", t.name])
            .arg("--")
            .args(["--test-threads", &t.threads.to_string()]);
        match filter {
            Filter::SkipExclusive => {
                for (_, test, _) in EXCLUSIVE.iter().filter(|(n, _, _)| *n == t.name) {
                    c.args(["--skip", test]);
                }
            }
            Filter::Only(tests) => {
                c.arg("--exact").args(tests.iter());
            }
        }
        c.env("KUBECONFIG", testbed::kubeconfig_path())
            // The examples tier applies the manifests with kubectl, as a reader of the guide does.
            .env("KUBECTL", testbed::kubectl_bin())
            .current_dir(workspace_root());
        prefixed(&mut c, &label)
    })
}

/// Runs a command with every line of its output prefixed by `label`; fails with the command line
/// on a non-zero exit.
fn prefixed(c: &mut Command, label: &str) -> Result<()> {
    let line = format!("{c:?}");
    eprintln!("[{label}] + {line}");
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start {line}"))?;
    let out = child.stdout.take();
    let err = child.stderr.take();
    std::thread::scope(|s| {
        if let Some(out) = out {
            s.spawn(move || copy_lines(out, label));
        }
        if let Some(err) = err {
            s.spawn(move || copy_lines(err, label));
        }
    });
    let st = child
        .wait()
        .with_context(|| format!("waiting for {line}"))?;
    succeeded(st, &line)
}

fn copy_lines(from: impl Read, label: &str) {
    let mut r = BufReader::new(from);
    let mut buf = Vec::new();
    // Lines as bytes: a test may print anything, and one bad byte must not end the copy.
    while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
        let text = String::from_utf8_lossy(&buf);
        eprintln!("[{label}] {}", text.trim_end_matches(['\n', '\r']));
        buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exclusive_test_names_a_tier_that_runs() {
        let tiers: Vec<&str> = tier_names();
        for (tier_name, test, _) in EXCLUSIVE {
            assert!(
                tiers.contains(tier_name),
                "{test} names no tier: {tier_name}"
            );
        }
    }

    #[test]
    fn a_tiers_exclusive_tests_are_listed_together() {
        let mut seen: Vec<&str> = Vec::new();
        for (tier_name, test, _) in EXCLUSIVE {
            if seen.last() != Some(tier_name) {
                assert!(
                    !seen.contains(tier_name),
                    "{test} is apart from the other {tier_name} tests"
                );
                seen.push(tier_name);
            }
        }
    }

    #[test]
    fn every_exclusive_test_exists_in_its_tier() {
        for (tier_name, test, _) in EXCLUSIVE {
            let path = workspace_root().join(format!("crates/lifeboat-e2e/tests/{tier_name}.rs"));
            let source = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                source.contains(&format!("async fn {test}(")),
                "{} has no test {test}; a renamed test would run beside the others",
                path.display()
            );
        }
    }

    #[test]
    fn every_test_target_is_a_tier() {
        let dir = workspace_root().join("crates/lifeboat-e2e/tests");
        let tiers: Vec<&str> = tier_names();
        let entries = std::fs::read_dir(&dir).map(|d| d.flatten().collect::<Vec<_>>());
        let entries = entries.unwrap_or_default();
        assert!(
            !entries.is_empty(),
            "no test targets under {}",
            dir.display()
        );
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(target) = name.strip_suffix(".rs") {
                assert!(
                    tiers.contains(&target),
                    "tests/{name} is in no e2e tier, so CI never runs it"
                );
            }
        }
    }
}
