//! Progress reports: while a command runs, one JSON line on stdout every two seconds saying its
//! stage and how many of its bytes are done, so that a person (or the operator reading the Job's
//! log) can tell a slow restore from a stuck one. The result line is still the last line.
//!
//! The state is process-wide: the mover runs one command per process, and the byte counters
//! sit deep in the streaming loops, where threading a handle through would touch every
//! signature for the sake of a number.

use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often a report is printed.
pub const EVERY: Duration = Duration::from_secs(2);

static DONE: AtomicU64 = AtomicU64::new(0);
/// Whether a `Reporter` runs: only then does a stage's start print a report.
static REPORTING: AtomicBool = AtomicBool::new(false);
static STAGE: Mutex<Option<Stage>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct Stage {
    name: &'static str,
    total: u64,
    started: Instant,
}

/// One report, as printed: `{"progress": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `snapshot` (waiting for the server's save), `upload`, `download`, `verify`.
    pub stage: String,
    pub bytes_done: u64,
    /// 0 when the stage moves no bytes (verify).
    pub bytes_total: u64,
    pub elapsed_seconds: f64,
    /// The mean rate since the stage began.
    pub bytes_per_second: u64,
}

#[derive(Serialize)]
struct Line<'a> {
    progress: &'a Report,
}

/// Starts a stage; its byte count starts at zero. Reported at once, so that even a stage
/// shorter than the period says that it ran and how many bytes it had to move.
pub fn stage(name: &'static str, total: u64) {
    DONE.store(0, Ordering::Relaxed);
    if let Ok(mut s) = STAGE.lock() {
        *s = Some(Stage {
            name,
            total,
            started: Instant::now(),
        });
    }
    if REPORTING.load(Ordering::Relaxed)
        && let Some(r) = snapshot()
    {
        print(&r);
    }
}

/// Counts bytes of the current stage as done.
pub fn add(n: u64) {
    DONE.fetch_add(n, Ordering::Relaxed);
}

/// The current stage's report, if a stage has begun.
pub fn snapshot() -> Option<Report> {
    let s = (*STAGE.lock().ok()?)?;
    let elapsed = s.started.elapsed().as_secs_f64();
    let done = DONE.load(Ordering::Relaxed);
    Some(Report {
        stage: s.name.to_owned(),
        bytes_done: done,
        bytes_total: s.total,
        elapsed_seconds: (elapsed * 10.0).round() / 10.0,
        bytes_per_second: rate(done, elapsed),
    })
}

fn rate(done: u64, elapsed: f64) -> u64 {
    if elapsed > 0.0 {
        (done as f64 / elapsed) as u64
    } else {
        0
    }
}

fn print(r: &Report) {
    if let Ok(line) = serde_json::to_string(&Line { progress: r }) {
        let mut out = std::io::stdout().lock();
        // A closed stdout must not end the command: progress is a courtesy.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }
}

/// Prints a report every `EVERY` until dropped.
pub struct Reporter(tokio::task::JoinHandle<()>);

impl Reporter {
    pub fn start() -> Reporter {
        REPORTING.store(true, Ordering::Relaxed);
        Reporter(tokio::spawn(async {
            // A stage's start is reported by `stage` itself; the ticks follow it.
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + EVERY, EVERY);
            loop {
                tick.tick().await;
                if let Some(r) = snapshot() {
                    print(&r);
                }
            }
        }))
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        REPORTING.store(false, Ordering::Relaxed);
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_one_json_object_under_progress() {
        let r = Report {
            stage: "download".into(),
            bytes_done: 5,
            bytes_total: 10,
            elapsed_seconds: 2.0,
            bytes_per_second: 2,
        };
        let line = serde_json::to_string(&Line { progress: &r }).expect("serialises");
        assert_eq!(
            line,
            r#"{"progress":{"stage":"download","bytesDone":5,"bytesTotal":10,"elapsedSeconds":2.0,"bytesPerSecond":2}}"#
        );
    }

    #[test]
    fn the_rate_of_a_stage_that_has_not_run_is_zero() {
        assert_eq!(rate(100, 0.0), 0);
        assert_eq!(rate(100, 2.0), 50);
    }
}
