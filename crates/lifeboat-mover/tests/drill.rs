//! `lifeboat-mover drill` against real FalkorDB: a good backup restores into a scratch
//! directory, loads into a private server and matches its fingerprint; a stored object changed
//! in the repo fails by its checksum, naming the object; a file that loads but differs from its
//! manifest fails naming the digest.

#![allow(clippy::unwrap_used)]

mod support;

use support::*;

fn drill(f: &Fixture, name: &str) -> Out {
    let bin = falkordb_dir();
    let work = tempfile::tempdir().unwrap();
    mover(
        &[
            "drill",
            "--backup",
            name,
            "--repo",
            &f.repo,
            "--work-dir",
            work.path().to_str().unwrap(),
            "--scratch-server",
            bin.join("redis-server").to_str().unwrap(),
            "--module",
            bin.join("falkordb.so").to_str().unwrap(),
        ],
        &[],
    )
}

#[test]
fn a_drill_of_a_good_backup_matches_what_the_backup_recorded() {
    let f = Fixture::new(true);
    populate(&f.src);
    let b = f.backup("b1");
    b.assert_ok();
    let d = drill(&f, "b1");
    d.assert_ok();
    let r = d.json();
    assert_eq!(r["match"], true, "{d}");
    assert_eq!(r["expected"], b.json()["fingerprint"], "{d}");
    assert_eq!(r["live"]["databases"], r["expected"]["databases"], "{d}");
    assert!(
        r["live"]["databases"]["1"]["graphs"]["roads"]["digest"]
            .as_str()
            .is_some_and(|s| s.len() == 64),
        "the drill digested the graphs too: {d}"
    );
}

#[test]
fn a_drill_of_an_object_changed_in_the_repo_fails_naming_it() {
    let f = Fixture::new(true);
    populate(&f.src);
    f.backup("b1").assert_ok();
    let obj = f.object("b1");
    let mut bytes = std::fs::read(&obj).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&obj, &bytes).unwrap();
    drill(&f, "b1").assert_fails(
        8,
        &["backup \"b1\": object \"dump.rdb.zst\" checksum mismatch: expected sha256 "],
    );
}

#[test]
fn a_drill_of_a_file_that_loads_but_differs_from_its_manifest_fails_naming_the_digest() {
    let f = Fixture::new(true);
    populate(&f.src);
    let b = f.backup("b1");
    b.assert_ok();
    let recorded = b.json()["fingerprint"]["databases"]["0"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let m = f.repo_dir.join("b1").join("manifest.json");
    let text = std::fs::read_to_string(&m).unwrap();
    assert!(text.contains(&recorded));
    std::fs::write(&m, text.replace(&recorded, &"0".repeat(64))).unwrap();
    drill(&f, "b1").assert_fails(11, &["db 0: content digest", "in backup,"]);
}
