//! Durations, periods, schedules and quantities as users write them in a Cluster's restore
//! parameters, a Backup's retention, a BackupSchedule's cron expression and a PVC's size.
//! Each parser either refuses or returns a value that its own formatter and the code that uses
//! it can take.
#![no_main]

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use lifeboat_operator::backup::retention::parse_period;
use lifeboat_operator::restore::preconditions::quantity_bytes;
use lifeboat_operator::schedule::cron::Schedule;
use lifeboat_operator::{duration, security};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(d) = duration::parse(s) {
        // What the status shows parses back to the same duration.
        assert_eq!(duration::parse(&duration::format(d)), Some(d), "{s:?}");
    }
    match parse_period(s) {
        Ok(d) => assert!(!d.is_zero()),
        Err(e) => assert!(e.contains("spec.retentionPeriod"), "{e}"),
    }
    if let Some(n) = quantity_bytes(&Quantity(s.to_owned())) {
        assert!(n >= 0, "{s:?} is {n} bytes");
    }
    let _ = security::parse_run_as_user(s);
    // Schedules: bounded input, since a search walks scheduled times.
    if s.len() <= 128
        && let Ok(sched) = Schedule::parse(s)
    {
        let t = Timestamp::from_second(1_800_000_000).expect("valid");
        if let Some(next) = sched.next_after(t) {
            assert!(next > t, "{s:?}: next {next} is not after {t}");
        }
        let from = t - k8s_openapi::jiff::SignedDuration::from_hours(24 * 3);
        let times = sched.times_between(from, t);
        assert!(times.len() <= lifeboat_operator::schedule::cron::MAX_TIMES);
        assert!(
            times.windows(2).all(|w| w[0] < w[1]),
            "{s:?}: times out of order"
        );
        assert!(
            times.iter().all(|x| *x >= from && *x <= t),
            "{s:?}: time outside the window"
        );
    }
});
