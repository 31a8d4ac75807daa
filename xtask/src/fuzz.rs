//! `cargo xtask fuzz`: the libFuzzer targets under `fuzz/` (docs/fuzzing.md), each run for a
//! bounded time from its checked-in seeds. CI runs every target for 10 seconds; a longer run is
//! the same command with `--seconds`.
//!
//! cargo-fuzz is installed into the cache, keyed by version, and the targets build with the
//! nightly toolchain into their own target directory there: their instrumentation flags differ
//! from the workspace's, and sharing a directory would rebuild both every time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::paths::{cache_dir, workspace_root};
use crate::run::status;

const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Every target, in the order they run.
pub const TARGETS: &[&str] = &[
    "restore_annotation",
    "repo_manifest",
    "mover_result",
    "durations_and_quantities",
    "zstd_frames",
    "cluster_validation",
    "server_info",
];

#[derive(Args)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Run only these targets (by name); all when absent.
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Build the targets without running them.
    #[arg(long)]
    build_only: bool,
    /// Optimised, with AddressSanitizer: about three times the CPU to build, several times
    /// faster to run. For long runs; CI's short runs use the quick build (dev profile, debug
    /// assertions, no sanitizer).
    #[arg(long)]
    thorough: bool,
}

impl FuzzArgs {
    /// cargo-fuzz's build flags, and the target directory for them: the two builds use different
    /// compiler flags, so each keeps its own directory rather than rebuilding the other's.
    fn build_flags(&self) -> (Vec<&'static str>, PathBuf) {
        if self.thorough {
            (vec![], target_dir().join("thorough"))
        } else {
            (
                vec!["--dev", "--sanitizer", "none"],
                target_dir().join("quick"),
            )
        }
    }
}

fn cargo_fuzz() -> Result<PathBuf> {
    let root = cache_dir()
        .join("tools")
        .join(format!("cargo-fuzz-{CARGO_FUZZ_VERSION}"));
    let bin = root.join("bin").join("cargo-fuzz");
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!(
        "installing cargo-fuzz {CARGO_FUZZ_VERSION} into {} (cached afterwards)",
        root.display()
    );
    let root_s = root.to_string_lossy().into_owned();
    // Unoptimised: cargo-fuzz only assembles cargo command lines, and on a fresh machine its
    // optimised build cost minutes of CI.
    status(Command::new("cargo").args([
        "install",
        "cargo-fuzz",
        "--debug",
        "--locked",
        "--version",
        CARGO_FUZZ_VERSION,
        "--root",
        &root_s,
    ]))?;
    Ok(bin)
}

fn fuzz_dir() -> PathBuf {
    workspace_root().join("fuzz")
}

fn target_dir() -> PathBuf {
    cache_dir().join("fuzz-target")
}

/// `cargo +nightly fuzz <args>` in the fuzz crate, with cargo-fuzz from the cache.
fn cargo_fuzz_cmd(bin: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![dir];
    paths.extend(std::env::split_paths(&path));
    c.arg("+nightly")
        .arg("fuzz")
        .args(args)
        .current_dir(fuzz_dir())
        // The workspace's target directory (set by CI) holds stable builds; see the module doc.
        .env_remove("CARGO_TARGET_DIR")
        .env("PATH", std::env::join_paths(paths).unwrap_or(path));
    c
}

fn build(args: &FuzzArgs) -> Result<PathBuf> {
    let bin = cargo_fuzz()?;
    let (flags, dir) = args.build_flags();
    let td = dir.to_string_lossy().into_owned();
    let mut a = vec!["build"];
    a.extend(flags);
    a.extend(["--target-dir", &td]);
    status(&mut cargo_fuzz_cmd(&bin, &a))?;
    Ok(bin)
}

/// What libFuzzer printed last about executions: `Done 802100 runs in 16 second(s)`.
fn runs(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        let rest = l.strip_prefix("Done ")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// CI's run: every target for 10 seconds. Short because CI's budget is: a cold machine spends
/// most of its 90 minutes on the test bed.
pub fn run_smoke() -> Result<()> {
    run(FuzzArgs {
        seconds: 10,
        targets: Vec::new(),
        build_only: false,
        thorough: false,
    })
}

pub fn run(args: FuzzArgs) -> Result<()> {
    for t in &args.targets {
        if !TARGETS.contains(&t.as_str()) {
            bail!(
                "--target {t:?} is not a fuzz target; the targets are {}",
                TARGETS.join(", ")
            );
        }
    }
    let bin = build(&args)?;
    if args.build_only {
        return Ok(());
    }
    let (flags, dir) = args.build_flags();
    let td = dir.to_string_lossy().into_owned();
    let mut failed = Vec::new();
    let mut table = Vec::new();
    for t in TARGETS
        .iter()
        .filter(|t| args.targets.is_empty() || args.targets.iter().any(|a| a == *t))
    {
        // New inputs go to a corpus kept in the cache, so that later runs on this machine start
        // where earlier ones stopped; the seeds in the checkout are only read.
        let corpus = cache_dir().join("fuzz-corpus").join(t);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("creating {}", corpus.display()))?;
        let seeds = fuzz_dir().join("seeds").join(t);
        let (corpus_s, seeds_s) = (
            corpus.to_string_lossy().into_owned(),
            seeds.to_string_lossy().into_owned(),
        );
        let time = format!("-max_total_time={}", args.seconds);
        let dict = fuzz_dir().join("dicts").join(format!("{t}.dict"));
        let dict_arg = format!("-dict={}", dict.display());
        let mut fuzz_args = vec!["run"];
        fuzz_args.extend(flags.iter().copied());
        // An input that runs this long is a hang: reported as one, with the input, instead of
        // stalling the run (the zstd frame reader once waited forever for a buffer). The quick
        // build is unoptimised, so it gets more time per input.
        let timeout = format!("-timeout={}", if args.thorough { 25 } else { 60 });
        fuzz_args.extend([
            "--target-dir",
            &td,
            t,
            &corpus_s,
            &seeds_s,
            "--",
            &time,
            &timeout,
        ]);
        if dict.is_file() {
            fuzz_args.push(&dict_arg);
        }
        eprintln!("==> fuzz {t}: {} s", args.seconds);
        let started = Instant::now();
        let out = cargo_fuzz_cmd(&bin, &fuzz_args)
            .output()
            .with_context(|| format!("could not start cargo fuzz run {t}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let n = runs(&log);
        let secs = started.elapsed().as_secs_f64();
        if out.status.success() {
            table.push(format!(
                "{t}: {} runs in {secs:.0}s, corpus {} inputs",
                n.map_or("?".into(), |n| n.to_string()),
                std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0)
            ));
        } else {
            // The whole report: the panic, the input and the command that reproduces it.
            eprintln!("{log}");
            table.push(format!("{t}: FAILED ({}) after {secs:.0}s", out.status));
            failed.push(*t);
        }
    }
    for l in &table {
        eprintln!("fuzz: {l}");
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {}; reproduce with `cargo +nightly fuzz run {}<target> <crash file>` in fuzz/",
            failed.join(", "),
            flags.iter().map(|f| format!("{f} ")).collect::<String>()
        );
    }
    Ok(())
}
