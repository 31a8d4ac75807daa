//! Cron expressions of BackupSchedules: five fields in UTC, as KubeBlocks reads them, or in the
//! zone a `CRON_TZ=`/`TZ=` prefix names (a Lifeboat extension, the form Kubernetes CronJobs
//! took before `spec.timeZone`). Parsing and the search for scheduled times are croner's.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed schedule: the fields and the zone they are read in.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: Cron,
    zone: TimeZone,
}

/// How many scheduled times one search walks at most; a schedule that was off for longer than
/// this many of its times counts only this many as missed.
pub const MAX_TIMES: usize = 10_000;

impl Schedule {
    /// Parses an expression; the error says what is wrong with it, for a message that names the
    /// schedule.
    pub fn parse(expression: &str) -> Result<Self, String> {
        let text = expression.trim();
        let (zone, fields) = match text
            .strip_prefix("CRON_TZ=")
            .or_else(|| text.strip_prefix("TZ="))
        {
            Some(rest) => {
                let (name, fields) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("{expression:?} has a time zone but no cron fields"))?;
                let zone = TimeZone::get(name).map_err(|_| {
                    format!("{name:?} is not a known time zone (IANA names such as Europe/Berlin)")
                })?;
                (zone, fields.trim())
            }
            None => (TimeZone::UTC, text),
        };
        if fields.is_empty() {
            return Err("the expression is empty".into());
        }
        // Five fields exactly, as cron and Kubernetes read them: croner would take a sixth as
        // seconds or a year, which KubeBlocks' CronJobs never accepted.
        if !fields.starts_with('@') && fields.split_whitespace().count() != 5 {
            return Err(format!(
                "{fields:?} has {} fields; a cron expression has five (minute hour day-of-month month day-of-week)",
                fields.split_whitespace().count()
            ));
        }
        // An empty entry in a list (`0 , * * *`, `1,,2`) is not cron; croner reads it as a field
        // that matches nothing, then searches years of minutes before it says "never" (the
        // durations fuzz target timed out on it, and the controller would spend the same CPU on
        // every pass).
        if let Some(f) = fields
            .split_whitespace()
            .find(|f| f.split(',').any(str::is_empty))
        {
            return Err(format!("{fields:?} has an empty entry in the list {f:?}"));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(fields)
            .map_err(|e| format!("{fields:?} does not parse: {e}"))?;
        let schedule = Self { cron, zone };
        // A pattern that never matches (30 February) parses; it is as wrong as one that does not.
        if schedule.next_after(Timestamp::UNIX_EPOCH).is_none() {
            return Err(format!("{fields:?} never comes"));
        }
        Ok(schedule)
    }

    /// The first scheduled time strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let z = t.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&z, false)
            .ok()
            .map(|n| n.timestamp())
    }

    /// The scheduled times in `[from, to]`, oldest first: the newest [`MAX_TIMES`] of them
    /// when there are more. Walked back from `to`, so a long outage costs no more than that.
    pub fn times_between(&self, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
        let mut out = Vec::new();
        let mut cursor = to.to_zoned(self.zone.clone());
        let mut inclusive = true;
        while out.len() < MAX_TIMES {
            let Ok(prev) = self.cron.find_previous_occurrence(&cursor, inclusive) else {
                break;
            };
            if prev.timestamp() < from {
                break;
            }
            out.push(prev.timestamp());
            cursor = prev;
            inclusive = false;
        }
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn five_fields_in_utc() {
        let s = Schedule::parse("0 18 * * *").expect("parses");
        assert_eq!(
            s.next_after(ts("2026-12-05T17:59:59Z")),
            Some(ts("2026-12-05T18:00:00Z"))
        );
        assert_eq!(
            s.next_after(ts("2026-12-05T18:00:00Z")),
            Some(ts("2026-12-06T18:00:00Z"))
        );
        let every = Schedule::parse("*/2 * * * *").expect("parses");
        assert_eq!(
            every.next_after(ts("2026-12-05T10:01:30Z")),
            Some(ts("2026-12-05T10:02:00Z"))
        );
        let hourly = Schedule::parse("@hourly").expect("nicknames parse");
        assert_eq!(
            hourly.next_after(ts("2026-12-05T10:01:30Z")),
            Some(ts("2026-12-05T11:00:00Z"))
        );
    }

    #[test]
    fn a_zone_prefix_reads_the_fields_in_that_zone() {
        // 03:00 in Berlin is 02:00 UTC in winter and 01:00 UTC in summer.
        let s = Schedule::parse("CRON_TZ=Europe/Berlin 0 3 * * *").expect("parses");
        assert_eq!(
            s.next_after(ts("2026-12-05T00:00:00Z")),
            Some(ts("2026-12-05T02:00:00Z"))
        );
        assert_eq!(
            s.next_after(ts("2026-07-05T00:00:00Z")),
            Some(ts("2026-07-05T01:00:00Z"))
        );
        let tz = Schedule::parse("TZ=Asia/Tokyo 0 9 * * *").expect("TZ= parses too");
        assert_eq!(
            tz.next_after(ts("2026-12-05T00:00:00Z")),
            Some(ts("2026-12-06T00:00:00Z"))
        );
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (expr, says) in [
            ("", "empty"),
            ("61 * * * *", "does not parse"),
            ("* * * *", "has 4 fields"),
            ("0 0 * * * *", "has 6 fields"),
            ("0 0 30 2 *", "never comes"),
            ("CRON_TZ=Mars/Olympus 0 3 * * *", "not a known time zone"),
            ("CRON_TZ=UTC", "no cron fields"),
            ("every day", "has 2 fields"),
            // Found by the durations fuzz target: croner takes these as fields that match
            // nothing and searches for seconds (far longer with a zone) before "never".
            ("0 , * * *", "empty entry in the list \",\""),
            ("CRON_TZ=Europe/Berlin 0 , * * 1-5", "empty entry"),
            ("0 1,,2 * * *", "empty entry"),
            ("0,5, 1 * * *", "empty entry"),
        ] {
            let err = Schedule::parse(expr).expect_err(expr);
            assert!(err.contains(says), "{expr:?}: {err}");
        }
    }

    #[test]
    fn times_between_lists_each_scheduled_time_once() {
        let s = Schedule::parse("*/10 * * * *").expect("parses");
        let times = s.times_between(ts("2026-12-05T10:00:00Z"), ts("2026-12-05T10:35:00Z"));
        assert_eq!(
            times,
            vec![
                ts("2026-12-05T10:00:00Z"),
                ts("2026-12-05T10:10:00Z"),
                ts("2026-12-05T10:20:00Z"),
                ts("2026-12-05T10:30:00Z"),
            ]
        );
        assert!(
            s.times_between(ts("2026-12-05T10:01:00Z"), ts("2026-12-05T10:09:00Z"))
                .is_empty()
        );
        let minutely = Schedule::parse("* * * * *").expect("parses");
        let many = minutely.times_between(ts("2000-01-01T00:00:00Z"), ts("2026-01-01T00:00:00Z"));
        assert_eq!(many.len(), MAX_TIMES);
        assert_eq!(many.last(), Some(&ts("2026-01-01T00:00:00Z")));
    }
}
