//! The mover's JSON lines as the operator reads them from a Job's log: the result of a backup,
//! of a verification, and the progress lines. A log holds whatever the container printed, so
//! any text must be read without a panic, and a verification that did not say it matches must
//! never pass.
#![no_main]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use lifeboat_api::dataprotection::v1alpha1::DatasetFingerprint;
use lifeboat_operator::backup::drill::{Judgement, judge};
use lifeboat_operator::mover_output::{BackupLine, VerifyLine, last, last_progress};
use lifeboat_operator::progress;

fuzz_target!(|data: &[u8]| {
    let Ok(logs) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(b) = last::<BackupLine>(logs) {
        let f: DatasetFingerprint = (&b.fingerprint).into();
        assert!(
            f.keys.values().all(|k| *k > 0),
            "empty databases are omitted"
        );
    }
    let verify = last::<VerifyLine>(logs);
    if let Some(v) = &verify {
        let s = v.to_status();
        assert_eq!(s.matched, v.matches);
        // The pod is one DNS label of the server's name, never a whole address.
        assert!(s.pod.as_deref().is_none_or(|p| !p.is_empty() && !p.contains(['.', ':'])));
    }
    match judge("drill-job", true, None, None, verify.as_ref()) {
        Judgement::Passed(_) => assert!(verify.as_ref().is_some_and(|v| v.matches)),
        Judgement::Failed(..) => assert!(!verify.as_ref().is_some_and(|v| v.matches)),
        Judgement::Running => panic!("a succeeded drill Job is judged"),
    }
    if let Some(p) = last_progress(logs) {
        let now = Time(Timestamp::from_second(1_800_000_000).expect("valid"));
        let agg = progress::aggregate([&p, &p], &now).expect("one report aggregates");
        assert!(agg.bytes_done >= 0 && agg.bytes_total >= 0 && agg.bytes_per_second >= 0);
        let _ = progress::describe(&agg);
        let _ = progress::refresh_due(Some(&agg), &now);
    }
});
