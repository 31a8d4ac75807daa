//! Running child processes with their command line echoed, and stage timing.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Runs a command to completion, inheriting stdio; fails with the command line on a non-zero exit.
pub fn cmd(program: &str, args: &[&str]) -> Result<()> {
    let mut c = Command::new(program);
    c.args(args);
    status(&mut c)
}

/// Runs a prepared command, inheriting stdio; fails with the command line on a non-zero exit.
pub fn status(c: &mut Command) -> Result<()> {
    let line = format!("{c:?}");
    eprintln!("+ {line}");
    let st = c
        .status()
        .with_context(|| format!("could not start {line}"))?;
    succeeded(st, &line)
}

/// Fails with the command line when a command exited non-zero.
pub fn succeeded(st: std::process::ExitStatus, line: &str) -> Result<()> {
    if !st.success() {
        bail!("command failed ({st}): {line}");
    }
    Ok(())
}

/// Times a named stage and prints its duration whether it passes or fails, so CI output shows
/// where the minutes went.
pub fn stage<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    eprintln!("==> stage {name}: start");
    let t = Instant::now();
    let r = f();
    let secs = t.elapsed().as_secs_f64();
    match &r {
        Ok(_) => eprintln!("==> stage {name}: ok in {secs:.1}s"),
        Err(e) => eprintln!("==> stage {name}: FAILED in {secs:.1}s: {e:#}"),
    }
    r
}
