//! The fuzz targets start from the seeds under `fuzz/seeds`. A seed that no longer parses would
//! leave its target exploring refusals only, so the seeds are held to what they stand for here,
//! on stable, with the workspace's tests.

use std::path::PathBuf;
use std::time::Duration;

use lifeboat_api::Cluster;
use lifeboat_operator::cluster::validate::validate;
use lifeboat_operator::mover_output::{BackupLine, VerifyLine, last, last_progress};
use lifeboat_operator::restore::intent::{Deadlines, intent};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("a directory entry").path();
            let name = p
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&p).expect("a readable seed"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{} holds no seeds", dir.display());
    out
}

#[test]
fn every_cluster_seed_is_valid_and_the_restoring_ones_ask_for_a_restore() {
    let defaults = Deadlines {
        prepare_data: Duration::from_secs(60),
        post_ready: Duration::from_secs(60),
    };
    for (name, bytes) in seeds("cluster_validation") {
        let c: Cluster = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("seed {name} is not a Cluster: {e}"));
        let v = validate(&c).unwrap_or_else(|e| panic!("seed {name} is invalid: {e:?}"));
        let restore = intent(&c, &v, defaults)
            .unwrap_or_else(|e| panic!("seed {name}: restore request refused: {e:?}"));
        assert_eq!(
            restore.is_some(),
            name.starts_with("restore-"),
            "seed {name}: restore request {restore:?}"
        );
    }
}

#[test]
fn every_mover_result_seed_holds_the_line_it_is_named_for() {
    for (name, bytes) in seeds("mover_result") {
        let logs = String::from_utf8(bytes).expect("utf-8");
        let found = if name.starts_with("backup") {
            last::<BackupLine>(&logs).is_some()
        } else if name.starts_with("verify-match") {
            last::<VerifyLine>(&logs).is_some_and(|v| v.matches)
        } else if name.starts_with("verify-mismatch") {
            last::<VerifyLine>(&logs).is_some_and(|v| !v.matches)
        } else if name.starts_with("progress") {
            last_progress(&logs).is_some()
        } else {
            panic!("seed {name}: name it for the line it holds")
        };
        assert!(found, "seed {name} does not hold its line");
    }
}

#[test]
fn every_annotation_seed_parses_except_the_one_named_for_its_refusal() {
    for (name, bytes) in seeds("restore_annotation") {
        let text = String::from_utf8(bytes).expect("utf-8");
        let parsed = lifeboat_api::restore_annotation::parse(&text);
        assert_eq!(
            parsed.is_ok(),
            !name.starts_with("empty-name"),
            "seed {name}: {parsed:?}"
        );
    }
}
