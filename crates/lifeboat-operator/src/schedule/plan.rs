//! What a schedule does now, decided from its status, the time and the Cluster's Backups: pure,
//! so that every rule below is a unit test.
//!
//! The rules:
//! - The status's `nextScheduleTime` is the cursor: every scheduled time from it up to now is
//!   due. An operator that was down finds them on return.
//! - Of the due times, only the newest may run; the older ones are missed, each counted.
//! - The newest runs if it can start within `startingDeadlineMinutes` of its time (no deadline:
//!   until the next time comes). Past that it is missed too.
//! - Never two Backups of one Cluster at once: while another Backup of the Cluster is `New` or
//!   `Running`, a due run holds, and starts when that one ends if its deadline has not passed.
//!   A run holds the same way while its Cluster is not `Running`: it has no pod to back up.
//! - A disabled schedule takes nothing and counts nothing; enabled again, it starts from its
//!   next time after that.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, SchedulePhase, ScheduleStatus};

use super::cron::Schedule;

/// The operator's own lateness on top of `startingDeadlineMinutes`: a reconcile woken at the
/// scheduled time runs a moment after it, and a deadline of 0 must not miss every run.
pub const DEADLINE_SLACK: Duration = Duration::from_secs(10);

/// What a schedule sees.
pub struct Input<'a> {
    pub now: Timestamp,
    pub schedule: &'a Schedule,
    pub enabled: bool,
    /// `startingDeadlineMinutes`, when set.
    pub deadline: Option<Duration>,
    /// The status's `nextScheduleTime`.
    pub next: Option<Timestamp>,
    /// What holds a run at the given time, described for a message: the Cluster not `Running`,
    /// or another Backup of it that has not ended (other than the one this run takes: an
    /// operator that died after creating it finds it again).
    pub busy: &'a dyn Fn(Timestamp) -> Option<String>,
}

/// What the schedule does.
#[derive(Clone, Debug, PartialEq)]
pub enum Run {
    /// Not enabled: nothing runs and the cursor is cleared.
    Disabled,
    /// Nothing is due before `next`.
    Wait { next: Timestamp },
    /// Take the Backup of `time`; `missed` are older due times it supersedes.
    Start {
        time: Timestamp,
        missed: Vec<Timestamp>,
        next: Timestamp,
    },
    /// `time` is due but another Backup of the Cluster runs; try again soon.
    Hold { time: Timestamp, why: String },
    /// Every due time is past its chance; record them as missed.
    Miss {
        times: Vec<Timestamp>,
        why: String,
        next: Timestamp,
    },
}

fn deadline_of(time: Timestamp, deadline: Option<Duration>, next: Timestamp) -> Timestamp {
    match deadline.and_then(|d| jiff::SignedDuration::try_from(d + DEADLINE_SLACK).ok()) {
        Some(d) => time
            .checked_add(d)
            .map_or(next, |t| if t < next { t } else { next }),
        None => next,
    }
}

/// Decides what the schedule does now.
pub fn plan(i: &Input<'_>) -> Run {
    if !i.enabled {
        return Run::Disabled;
    }
    let after_now = i.schedule.next_after(i.now).unwrap_or(Timestamp::MAX);
    let Some(cursor) = i.next else {
        return Run::Wait { next: after_now };
    };
    if i.now < cursor {
        return Run::Wait { next: cursor };
    }
    let mut due = i.schedule.times_between(cursor, i.now);
    let Some(newest) = due.pop() else {
        // The cursor was not itself a scheduled time (the expression changed): start afresh.
        return Run::Wait { next: after_now };
    };
    let start_by = deadline_of(newest, i.deadline, after_now);
    let busy = (i.busy)(newest);
    if i.now > start_by {
        due.push(newest);
        let why = match &busy {
            Some(b) => format!(
                "{b} still held it at its starting deadline ({})",
                describe_deadline(i.deadline)
            ),
            None => format!(
                "it had not started by its starting deadline ({}); the operator was not running, or not leading, at the time",
                describe_deadline(i.deadline)
            ),
        };
        return Run::Miss {
            times: due,
            why,
            next: after_now,
        };
    }
    if let Some(b) = &busy {
        return Run::Hold {
            time: newest,
            why: format!("the run due at {newest} waits for {b}; it may start until {start_by}"),
        };
    }
    Run::Start {
        time: newest,
        missed: due,
        next: after_now,
    }
}

fn describe_deadline(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("startingDeadlineMinutes {}", d.as_secs() / 60),
        None => "its next scheduled time".into(),
    }
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

/// The schedule's status after `run`; `backup` names the Backup a start creates.
pub fn status_after(run: &Run, prev: &ScheduleStatus, backup: Option<&str>) -> ScheduleStatus {
    let mut st = prev.clone();
    match run {
        Run::Disabled => {
            st.phase = Some(SchedulePhase::Disabled);
            st.next_schedule_time = None;
            st.message = None;
        }
        Run::Wait { next } => {
            if st.phase.is_none() || st.phase == Some(SchedulePhase::Disabled) {
                st.phase = Some(SchedulePhase::Running);
            }
            st.next_schedule_time = Some(time(*next));
            st.message = None;
        }
        Run::Hold { why, .. } => {
            st.message = Some(why.clone());
        }
        Run::Start {
            time: t,
            missed,
            next,
        } => {
            count_missed(&mut st, missed);
            st.last_schedule_time = Some(time(*t));
            st.last_backup_name = backup.map(str::to_owned);
            st.next_schedule_time = Some(time(*next));
            st.message = None;
        }
        Run::Miss { times, why, next } => {
            count_missed(&mut st, times);
            st.next_schedule_time = Some(time(*next));
            st.phase = Some(SchedulePhase::Failed);
            if let Some(last) = times.last() {
                st.failure_reason = Some(format!("the run due at {last} was missed: {why}"));
            }
            st.message = None;
        }
    }
    st
}

fn count_missed(st: &mut ScheduleStatus, times: &[Timestamp]) {
    if let Some(last) = times.last() {
        let n = i64::try_from(times.len()).unwrap_or(i64::MAX);
        st.missed_runs = Some(st.missed_runs.unwrap_or(0).saturating_add(n));
        st.last_missed_time = Some(time(*last));
    }
}

/// A Backup of the schedule, as the outcome reads it.
#[derive(Clone, Debug)]
pub struct Taken {
    pub name: String,
    /// Its scheduled time.
    pub time: Timestamp,
    pub phase: Option<BackupPhase>,
    pub completed: Option<Timestamp>,
    pub failure: Option<String>,
    /// Whether it asked for a drill.
    pub drill: bool,
}

/// Whether the run about to start asks for a drill: the first Backup of a schedule that drills
/// does, then every `every`th one, and never two within `min_interval` (by their times).
pub fn drill_due(
    every: Option<i32>,
    min_interval: Option<Duration>,
    taken: &[Taken],
    time: Timestamp,
) -> bool {
    let last = taken.iter().filter(|t| t.drill).map(|t| t.time).max();
    let Some(last) = last else {
        return true;
    };
    let since = taken
        .iter()
        .filter(|t| t.time > last && t.time < time)
        .count();
    let every = usize::try_from(every.unwrap_or(1).max(1)).unwrap_or(1);
    let spaced = min_interval
        .and_then(|d| jiff::SignedDuration::try_from(d).ok())
        .and_then(|d| last.checked_add(d).ok())
        .is_none_or(|earliest| time >= earliest);
    since + 1 >= every && spaced
}

/// The schedule's phase, failure reason and last success from its Backups: the newest event
/// (a run's Backup, or a missed run) decides the phase.
pub fn outcome(st: &mut ScheduleStatus, taken: &[Taken]) {
    if st.phase == Some(SchedulePhase::Disabled) {
        return;
    }
    if let Some(done) = taken
        .iter()
        .filter(|t| t.phase == Some(BackupPhase::Completed))
        .filter_map(|t| t.completed)
        .max()
    {
        st.last_successful_time = Some(time(done));
    }
    let newest = taken.iter().max_by_key(|t| t.time);
    let missed_last = st.last_missed_time.as_ref().map(|t| t.0);
    let after_miss = |t: &Taken| missed_last.is_none_or(|m| t.time > m);
    match newest {
        Some(t) if after_miss(t) && t.phase == Some(BackupPhase::Failed) => {
            st.phase = Some(SchedulePhase::Failed);
            st.failure_reason = Some(format!(
                "Backup {} failed: {}",
                t.name,
                t.failure.as_deref().unwrap_or("no reason given")
            ));
        }
        _ if newest.is_none_or(|t| !after_miss(t)) && missed_last.is_some() => {
            st.phase = Some(SchedulePhase::Failed);
        }
        _ => {
            st.phase = Some(SchedulePhase::Running);
            st.failure_reason = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn every_ten() -> Schedule {
        Schedule::parse("*/10 * * * *").expect("parses")
    }

    fn input<'a>(s: &'a Schedule, now: &str, next: Option<&str>) -> Input<'a> {
        Input {
            now: ts(now),
            schedule: s,
            enabled: true,
            deadline: Some(Duration::from_secs(120)),
            next: next.map(ts),
            busy: &|_| None,
        }
    }

    #[test]
    fn a_new_schedule_waits_for_its_first_time_and_never_backfills() {
        let s = every_ten();
        let i = input(&s, "2026-12-05T10:07:00Z", None);
        assert_eq!(
            plan(&i),
            Run::Wait {
                next: ts("2026-12-05T10:10:00Z")
            }
        );
        let i = input(&s, "2026-12-05T10:09:59Z", Some("2026-12-05T10:10:00Z"));
        assert_eq!(
            plan(&i),
            Run::Wait {
                next: ts("2026-12-05T10:10:00Z")
            }
        );
    }

    #[test]
    fn a_due_time_starts_and_the_cursor_moves_past_now() {
        let s = every_ten();
        let i = input(&s, "2026-12-05T10:10:01Z", Some("2026-12-05T10:10:00Z"));
        assert_eq!(
            plan(&i),
            Run::Start {
                time: ts("2026-12-05T10:10:00Z"),
                missed: vec![],
                next: ts("2026-12-05T10:20:00Z")
            }
        );
    }

    #[test]
    fn an_operator_back_within_the_deadline_runs_the_time_it_slept_through() {
        let s = every_ten();
        // Down from 10:09 to 10:11:30; the deadline is two minutes.
        let i = input(&s, "2026-12-05T10:11:30Z", Some("2026-12-05T10:10:00Z"));
        assert!(matches!(plan(&i), Run::Start { time, .. } if time == ts("2026-12-05T10:10:00Z")));
    }

    #[test]
    fn an_operator_back_after_the_deadline_records_the_run_missed() {
        let s = every_ten();
        let i = input(&s, "2026-12-05T10:12:11Z", Some("2026-12-05T10:10:00Z"));
        let run = plan(&i);
        let Run::Miss { times, why, next } = &run else {
            panic!("{run:?}")
        };
        assert_eq!(times, &vec![ts("2026-12-05T10:10:00Z")]);
        assert_eq!(*next, ts("2026-12-05T10:20:00Z"));
        assert!(why.contains("startingDeadlineMinutes 2"), "{why}");
        let st = status_after(&run, &ScheduleStatus::default(), None);
        assert_eq!(st.missed_runs, Some(1));
        assert_eq!(st.phase, Some(SchedulePhase::Failed));
        assert!(
            st.failure_reason
                .as_deref()
                .is_some_and(|r| r.contains("2026-12-05T10:10:00Z was missed")),
            "{st:?}"
        );
        // The slack: ten seconds past the deadline still starts.
        let i = input(&s, "2026-12-05T10:12:09Z", Some("2026-12-05T10:10:00Z"));
        assert!(matches!(plan(&i), Run::Start { .. }));
    }

    #[test]
    fn only_the_newest_due_time_runs_and_the_older_ones_are_counted_missed() {
        let s = every_ten();
        let i = input(&s, "2026-12-05T10:41:00Z", Some("2026-12-05T10:10:00Z"));
        let run = plan(&i);
        assert_eq!(
            run,
            Run::Start {
                time: ts("2026-12-05T10:40:00Z"),
                missed: vec![
                    ts("2026-12-05T10:10:00Z"),
                    ts("2026-12-05T10:20:00Z"),
                    ts("2026-12-05T10:30:00Z")
                ],
                next: ts("2026-12-05T10:50:00Z")
            }
        );
        let prev = ScheduleStatus {
            missed_runs: Some(2),
            ..Default::default()
        };
        let st = status_after(&run, &prev, Some("c-datafile-20261205104000"));
        assert_eq!(st.missed_runs, Some(5));
        assert_eq!(st.last_missed_time, Some(time(ts("2026-12-05T10:30:00Z"))));
        assert_eq!(
            st.last_schedule_time,
            Some(time(ts("2026-12-05T10:40:00Z")))
        );
        assert_eq!(
            st.last_backup_name.as_deref(),
            Some("c-datafile-20261205104000")
        );
        assert_eq!(
            st.next_schedule_time,
            Some(time(ts("2026-12-05T10:50:00Z")))
        );
    }

    #[test]
    fn a_run_holds_while_another_backup_of_the_cluster_runs_then_starts_or_is_missed() {
        let s = every_ten();
        let mut i = input(&s, "2026-12-05T10:10:30Z", Some("2026-12-05T10:10:00Z"));
        i.busy = &|_| Some("Backup ns/other (Running)".into());
        let run = plan(&i);
        let Run::Hold { time: t, why } = &run else {
            panic!("{run:?}")
        };
        assert_eq!(*t, ts("2026-12-05T10:10:00Z"));
        assert!(why.contains("Backup ns/other"), "{why}");
        // Holding does not move the cursor.
        let st = status_after(&run, &ScheduleStatus::default(), None);
        assert_eq!(st.next_schedule_time, None);
        assert!(st.message.is_some());
        // The other one ends in time: this one starts.
        i.busy = &|_| None;
        i.now = ts("2026-12-05T10:11:00Z");
        assert!(matches!(plan(&i), Run::Start { .. }));
        // It does not: missed, naming it.
        i.busy = &|_| Some("Backup ns/other (Running)".into());
        i.now = ts("2026-12-05T10:13:00Z");
        let run = plan(&i);
        assert!(
            matches!(&run, Run::Miss { why, .. } if why.contains("Backup ns/other (Running) still held it")),
            "{run:?}"
        );
    }

    #[test]
    fn without_a_deadline_a_late_run_starts_until_its_next_time() {
        let s = every_ten();
        let mut i = input(&s, "2026-12-05T10:19:00Z", Some("2026-12-05T10:10:00Z"));
        i.deadline = None;
        assert!(matches!(plan(&i), Run::Start { time, .. } if time == ts("2026-12-05T10:10:00Z")));
        i.busy = &|_| Some("Backup ns/long (Running)".into());
        assert!(matches!(plan(&i), Run::Hold { .. }));
        // At 10:20 the 10:10 run gives way to the 10:20 one, which holds in turn.
        i.now = ts("2026-12-05T10:20:05Z");
        assert!(matches!(plan(&i), Run::Hold { time, .. } if time == ts("2026-12-05T10:20:00Z")));
        i.busy = &|_| None;
        assert_eq!(
            plan(&i),
            Run::Start {
                time: ts("2026-12-05T10:20:00Z"),
                missed: vec![ts("2026-12-05T10:10:00Z")],
                next: ts("2026-12-05T10:30:00Z")
            }
        );
    }

    #[test]
    fn a_disabled_schedule_counts_nothing_and_restarts_from_its_next_time() {
        let s = every_ten();
        let mut i = input(&s, "2026-12-05T12:00:30Z", Some("2026-12-05T10:10:00Z"));
        i.enabled = false;
        let run = plan(&i);
        assert_eq!(run, Run::Disabled);
        let st = status_after(&run, &ScheduleStatus::default(), None);
        assert_eq!(st.phase, Some(SchedulePhase::Disabled));
        assert_eq!(st.next_schedule_time, None);
        i.enabled = true;
        i.next = None;
        assert_eq!(
            plan(&i),
            Run::Wait {
                next: ts("2026-12-05T12:10:00Z")
            }
        );
    }

    #[test]
    fn a_changed_expression_starts_afresh_from_now() {
        // The cursor came from an hourly expression; the schedule is now every ten minutes
        // past five, and no time of the new one lies between the cursor and now.
        let s = Schedule::parse("5-55/10 * * * *").expect("parses");
        let i = input(&s, "2026-12-05T11:00:30Z", Some("2026-12-05T11:00:00Z"));
        assert_eq!(
            plan(&i),
            Run::Wait {
                next: ts("2026-12-05T11:05:00Z")
            }
        );
    }

    fn taken(name: &str, at: &str, phase: BackupPhase) -> Taken {
        Taken {
            name: name.into(),
            time: ts(at),
            phase: Some(phase),
            completed: (phase == BackupPhase::Completed).then(|| ts(at)),
            failure: (phase == BackupPhase::Failed).then(|| "no Ready pod".to_owned()),
            drill: false,
        }
    }

    #[test]
    fn the_newest_event_decides_the_phase() {
        let mut st = ScheduleStatus::default();
        outcome(
            &mut st,
            &[
                taken("a", "2026-12-05T10:00:00Z", BackupPhase::Completed),
                taken("b", "2026-12-05T10:10:00Z", BackupPhase::Failed),
            ],
        );
        assert_eq!(st.phase, Some(SchedulePhase::Failed));
        assert_eq!(
            st.failure_reason.as_deref(),
            Some("Backup b failed: no Ready pod")
        );
        assert_eq!(
            st.last_successful_time,
            Some(time(ts("2026-12-05T10:00:00Z")))
        );
        // A later success clears it.
        outcome(
            &mut st,
            &[
                taken("b", "2026-12-05T10:10:00Z", BackupPhase::Failed),
                taken("c", "2026-12-05T10:20:00Z", BackupPhase::Completed),
            ],
        );
        assert_eq!(st.phase, Some(SchedulePhase::Running));
        assert_eq!(st.failure_reason, None);
        // A miss after it fails the schedule again, keeping the miss's reason.
        st.last_missed_time = Some(time(ts("2026-12-05T10:30:00Z")));
        st.failure_reason = Some("the run due at 10:30 was missed".into());
        outcome(
            &mut st,
            &[taken("c", "2026-12-05T10:20:00Z", BackupPhase::Completed)],
        );
        assert_eq!(st.phase, Some(SchedulePhase::Failed));
        assert!(st.failure_reason.is_some());
        // A run in flight after the miss is Running.
        outcome(
            &mut st,
            &[taken("d", "2026-12-05T10:40:00Z", BackupPhase::Running)],
        );
        assert_eq!(st.phase, Some(SchedulePhase::Running));
    }

    #[test]
    fn drills_come_first_then_every_nth_and_never_closer_than_the_interval() {
        let at = |m: u32| ts(&format!("2026-12-05T10:{m:02}:00Z"));
        let run = |m: u32, drill: bool| Taken {
            drill,
            ..taken(
                "b",
                &format!("2026-12-05T10:{m:02}:00Z"),
                BackupPhase::Completed,
            )
        };
        // The first Backup of a drilling schedule is drilled.
        assert!(drill_due(None, None, &[], at(0)));
        // Every one, by default.
        assert!(drill_due(None, None, &[run(0, true)], at(1)));
        // Every third: after a drilled one, two pass, the third is drilled.
        let hist = [run(0, true), run(1, false)];
        assert!(!drill_due(Some(3), None, &hist, at(2)));
        let hist = [run(0, true), run(1, false), run(2, false)];
        assert!(drill_due(Some(3), None, &hist, at(3)));
        // At most one per ten minutes, whatever every says.
        let hist = [run(0, true), run(1, false)];
        assert!(!drill_due(
            None,
            Some(Duration::from_secs(600)),
            &hist,
            at(5)
        ));
        assert!(drill_due(
            None,
            Some(Duration::from_secs(600)),
            &hist,
            at(10)
        ));
    }
}
