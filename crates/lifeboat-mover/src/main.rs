//! The `lifeboat-mover` binary. Exit codes and output contracts are documented in docs/mover.md.

use std::io::{IsTerminal, Write};

use clap::{Parser, Subcommand};
use lifeboat_mover::error::{Error, exit, one_line};
use lifeboat_mover::verify::VerifyReport;
use lifeboat_mover::{backup, delete, drill, inspect, progress, restore, termination, verify};

#[derive(Parser)]
#[command(
    name = "lifeboat-mover",
    version,
    about = "Back up and restore FalkorDB/Redis data, and verify restores"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, env = "LIFEBOAT_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Where a successful command also writes its result lines, for the operator to read from
    /// the pod's status. Written only when the file exists, as the kubelet's does in every
    /// container; never created.
    #[arg(
        long,
        global = true,
        env = "LIFEBOAT_TERMINATION_LOG",
        default_value = "/dev/termination-log"
    )]
    termination_log: std::path::PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Take a consistent backup of a running server into the repo.
    Backup(backup::BackupArgs),
    /// Write a backup into an empty data directory.
    Restore(restore::RestoreArgs),
    /// Compare a running server's dataset with a backup's fingerprint.
    Verify(verify::VerifyArgs),
    /// Prove a backup restorable: restore it into a scratch directory, load it into a private
    /// server and compare it with the backup's fingerprint.
    Drill(drill::DrillArgs),
    /// Print a backup's manifest.
    Inspect(inspect::InspectArgs),
    /// Remove a backup from the repo, manifest first.
    Delete(delete::DeleteArgs),
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LIFEBOAT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    if format == "json" {
        b.json().init();
    } else {
        b.init();
    }
}

/// Prints one line to stdout; a closed stdout must not turn success into a panic.
fn emit(line: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::Internal(format!("writing stdout: {e}")))
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, Error> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("serialising output: {e}")))
}

async fn run(cmd: Command, termination_log: &std::path::Path) -> Result<(), Error> {
    // Commands that can run for minutes report progress; the short ones do not.
    let progress = matches!(
        cmd,
        Command::Backup(_) | Command::Restore(_) | Command::Verify(_) | Command::Drill(_)
    )
    .then(progress::Reporter::start);
    let result = outcome(cmd).await;
    // Stopped before the result is printed: the result line is always the last line.
    drop(progress);
    let mut lines = Vec::new();
    let printed = match result? {
        Outcome::Line(line) => {
            let printed = emit(&line);
            lines.push(line);
            printed
        }
        Outcome::Report(r) => report(r, &mut lines),
        Outcome::Reports(rs) => {
            // Every server's line is printed; the first mismatch is the command's failure.
            let mut failed = Ok(());
            for r in rs {
                if let (Err(e), Ok(())) = (report(r, &mut lines), &failed) {
                    failed = Err(e);
                }
            }
            failed
        }
    };
    // Only a success: a failed container's message is its log's tail, ending in the error line.
    if printed.is_ok() {
        termination::write(termination_log, &lines);
    }
    printed
}

enum Outcome {
    Line(String),
    Report(VerifyReport),
    Reports(Vec<VerifyReport>),
}

async fn outcome(cmd: Command) -> Result<Outcome, Error> {
    Ok(match cmd {
        Command::Backup(a) => {
            let s = backup::run(a).await?;
            tracing::info!(backup = %s.backup_name, total_size = s.total_size, stored_size = s.stored_size,
                seconds = s.duration_seconds, "backup complete");
            Outcome::Line(to_json(&s)?)
        }
        Command::Restore(a) => {
            let s = restore::run(a).await?;
            tracing::info!(backup = %s.backup_name, target = %s.target.display(), already = s.already_restored,
                "restore complete");
            Outcome::Line(to_json(&s)?)
        }
        Command::Verify(a) => Outcome::Reports(verify::run_all(a).await?),
        Command::Drill(a) => Outcome::Report(drill::run(a).await?),
        Command::Inspect(a) => Outcome::Line(inspect::run(a).await?),
        Command::Delete(a) => {
            let s = delete::run(a).await?;
            tracing::info!(backup = %s.backup_name, objects = s.objects_deleted, "backup deleted");
            Outcome::Line(to_json(&s)?)
        }
    })
}

/// Prints a verify or drill report; a mismatch is the command's failure.
fn report(r: VerifyReport, lines: &mut Vec<String>) -> Result<(), Error> {
    let line = to_json(&r)?;
    emit(&line)?;
    lines.push(line);
    if r.matches {
        tracing::info!("{}", r.message);
        Ok(())
    } else {
        eprintln!("backup: {}", r.expected.summary());
        eprintln!("live:   {}", r.live.summary());
        Err(Error::VerifyMismatch {
            backup: r.backup_name.clone(),
            diff: r.differences.join("; "),
        })
    }
}

fn main() {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lifeboat-mover: error: cannot start runtime: {e}");
            std::process::exit(exit::INTERNAL);
        }
    };
    let result = rt.block_on(run(cli.command, &cli.termination_log));
    // Drop the runtime before exiting so that pending multipart cleanups run.
    drop(rt);
    match result {
        Ok(()) => std::process::exit(exit::OK),
        Err(e) => {
            eprintln!("lifeboat-mover: error: {}", one_line(&e));
            std::process::exit(e.exit_code());
        }
    }
}
