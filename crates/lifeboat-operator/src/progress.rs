//! Transfer progress as users see it: the mover's progress lines (read from running Jobs' logs)
//! summed over a stage's Jobs, the text shown in action messages and conditions, and how often
//! the status may be rewritten for progress alone. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use lifeboat_api::dataprotection::v1alpha1::TransferProgress;

use crate::mover_output::Progress;

/// The least time between two status writes that change nothing but progress: a restore of
/// hours would otherwise write its status on every reconcile.
pub const REFRESH_SECS: i64 = 5;

/// Sums the progress of the Jobs of one stage. `None` when none of them has reported yet.
pub fn aggregate<'a>(
    reports: impl IntoIterator<Item = &'a Progress>,
    now: &Time,
) -> Option<TransferProgress> {
    let mut it = reports.into_iter().peekable();
    let stage = it.peek()?.stage.clone();
    let (mut done, mut total, mut rate) = (0u64, 0u64, 0u64);
    for p in it {
        done = done.saturating_add(p.bytes_done);
        total = total.saturating_add(p.bytes_total);
        rate = rate.saturating_add(p.bytes_per_second);
    }
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let eta = (rate > 0 && total >= done).then(|| (total - done).div_ceil(rate));
    Some(TransferProgress {
        stage,
        bytes_done: as_i64(done),
        bytes_total: as_i64(total),
        bytes_per_second: as_i64(rate),
        eta_seconds: eta.map(as_i64),
        updated_at: now.clone(),
    })
}

/// Whether a status that differs from the stored one only in its progress may be written now.
pub fn refresh_due(stored: Option<&TransferProgress>, now: &Time) -> bool {
    stored.is_none_or(|p| now.0.as_second() - p.updated_at.0.as_second() >= REFRESH_SECS)
}

/// One line for people; see [`TransferProgress::describe`].
pub fn describe(p: &TransferProgress) -> String {
    p.describe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("valid"))
    }

    fn report(done: u64, total: u64, rate: u64) -> Progress {
        Progress {
            stage: "download".into(),
            bytes_done: done,
            bytes_total: total,
            bytes_per_second: rate,
        }
    }

    #[test]
    fn the_jobs_of_a_stage_add_up_and_the_eta_comes_from_the_summed_rate() {
        let a = report(300 << 20, 1 << 30, 50 << 20);
        let b = report(100 << 20, 1 << 30, 50 << 20);
        let p = aggregate([&a, &b], &at(100)).expect("reported");
        assert_eq!(p.bytes_done, 400 << 20);
        assert_eq!(p.bytes_total, 2 << 30);
        assert_eq!(p.bytes_per_second, 100 << 20);
        // (2048 - 400) MiB at 100 MiB/s.
        assert_eq!(p.eta_seconds, Some(17));
        assert_eq!(
            describe(&p),
            "download 400.0 MiB of 2.0 GiB (19%) at 100.0 MiB/s, about 17s left"
        );
    }

    #[test]
    fn no_report_no_progress_and_no_rate_no_eta() {
        assert_eq!(aggregate([], &at(0)), None);
        let p = aggregate([&report(0, 10, 0)], &at(0)).expect("reported");
        assert_eq!(p.eta_seconds, None);
        assert_eq!(describe(&p), "download 0 B of 10 B (0%)");
    }

    #[test]
    fn a_stage_without_bytes_is_named_alone() {
        let mut r = report(0, 0, 0);
        r.stage = "verify".into();
        let p = aggregate([&r], &at(0)).expect("reported");
        assert_eq!(describe(&p), "verify");
    }

    #[test]
    fn progress_alone_is_rewritten_at_most_every_refresh_period() {
        let p = aggregate([&report(1, 2, 1)], &at(100)).expect("reported");
        assert!(refresh_due(None, &at(100)));
        assert!(!refresh_due(Some(&p), &at(104)));
        assert!(refresh_due(Some(&p), &at(105)));
    }
}
