//! Every failure is loud: a distinct non-zero exit code, one line naming the object and cause,
//! and no state that a later restore or server start would mistake for success.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};

use support::*;

/// Enough pseudo-random data that the RDB is several MiB even after compression.
fn populate_bulk(s: &Server, mib: usize) {
    let mut c = s.con();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..(mib * 64) {
        let mut v = Vec::with_capacity(16 * 1024);
        while v.len() < 16 * 1024 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(&x.to_le_bytes());
        }
        redis::cmd("SET")
            .arg(format!("bulk:{i}"))
            .arg(v)
            .query::<()>(&mut c)
            .unwrap();
    }
}

fn marker_state(dir: &Path) -> Option<String> {
    let b = std::fs::read(dir.join(".lifeboat-restore.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&b).ok()?;
    v["state"].as_str().map(String::from)
}

/// Nothing a server would load may exist after a failed restore.
fn assert_nothing_loadable(dir: &Path) {
    for f in ["dump.rdb", "appendonlydir", "users.acl"] {
        assert!(
            !dir.join(f).exists(),
            "{f} exists in {} after a failed restore",
            dir.display()
        );
    }
    assert_ne!(
        marker_state(dir).as_deref(),
        Some("complete"),
        "marker claims completion"
    );
}

#[test]
fn unreachable_server_exits_3_naming_the_address() {
    let t = tempfile::tempdir().unwrap();
    let repo = file_repo(t.path());
    let port = free_port().to_string();
    let o = mover(
        &[
            "backup",
            "--backup",
            "b",
            "--repo",
            &repo,
            "--port",
            &port,
            "--connect-timeout",
            "1",
        ],
        &[],
    );
    o.assert_fails(3, &[&format!("server 127.0.0.1:{port} is unreachable")]);
    assert!(
        std::fs::read_dir(t.path()).unwrap().next().is_none(),
        "nothing may be written to the repo"
    );
    let v = mover(&["verify", "--backup", "b", "--repo", &repo], &[]);
    v.assert_fails(7, &["backup \"b\" not found"]);
}

#[test]
fn wrong_password_exits_4() {
    let f = Fixture::new(false);
    let mut a = vec![
        "backup".to_string(),
        "--backup".into(),
        "b".into(),
        "--repo".into(),
        f.repo.clone(),
    ];
    a.extend(f.src.args());
    let o = mover(&a, &[("LIFEBOAT_REDIS_PASSWORD", "not-the-password")]);
    o.assert_fails(
        4,
        &[&format!(
            "server 127.0.0.1:{} rejected the credentials",
            f.src.port
        )],
    );
    // The same through a password file, as a mounted Secret provides it.
    let pw = f.root.join("pw");
    std::fs::write(&pw, "also-wrong\n").unwrap();
    a.extend(["--password-file".to_string(), pw.display().to_string()]);
    mover(&a, &[]).assert_fails(4, &["rejected the credentials"]);
    assert!(!f.repo_dir.join("b").join("manifest.json").exists());
}

#[test]
fn unreachable_repo_exits_6() {
    let f = Fixture::new(false);
    let mut a = vec![
        "backup".to_string(),
        "--backup".into(),
        "b".into(),
        "--repo".into(),
        "file:///nonexistent/lifeboat-repo".into(),
    ];
    a.extend(f.src.args());
    mover(&a, &[]).assert_fails(
        6,
        &["repo file:///nonexistent/lifeboat-repo is unreachable"],
    );
    let port = free_port();
    let o = mover(
        &[
            "restore",
            "--backup",
            "b",
            "--repo",
            "s3://bucket/p",
            "--s3-endpoint",
            &format!("http://127.0.0.1:{port}"),
            "--target",
            f.root.join("t").to_str().unwrap(),
        ],
        &[("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "y")],
    );
    o.assert_fails(
        6,
        &["repo s3://bucket/p is unreachable", "Connection refused"],
    );
}

#[test]
fn missing_backup_exits_7_for_restore_inspect_and_verify() {
    let f = Fixture::new(false);
    let target = f.root.join("t");
    f.restore("ghost", &target).assert_fails(
        7,
        &["backup \"ghost\" not found in repo", "ghost/manifest.json"],
    );
    mover(&["inspect", "--backup", "ghost", "--repo", &f.repo], &[])
        .assert_fails(7, &["backup \"ghost\" not found"]);
    let mut a = vec![
        "verify".to_string(),
        "--backup".into(),
        "ghost".into(),
        "--repo".into(),
        f.repo.clone(),
    ];
    a.extend(f.src.args());
    mover(&a, &[]).assert_fails(7, &["backup \"ghost\" not found"]);
    assert!(!target.join("dump.rdb").exists());
}

#[test]
fn truncated_object_exits_8_and_an_interrupted_restore_can_be_retried() {
    let f = Fixture::new(true);
    populate(&f.src);
    f.backup("b1").assert_ok();
    let obj = f.object("b1");
    let good = std::fs::read(&obj).unwrap();
    std::fs::write(&obj, &good[..good.len() / 2]).unwrap();
    let target = f.root.join("t");
    let o = f.restore("b1", &target);
    o.assert_fails(
        8,
        &[
            "backup \"b1\": object \"dump.rdb.zst\" is truncated",
            &format!(
                "expected {} stored bytes, got {}",
                good.len(),
                good.len() / 2
            ),
        ],
    );
    assert_nothing_loadable(&target);
    assert_eq!(marker_state(&target).as_deref(), Some("inProgress"));

    // The unfinished restore is recognisably ours: once the object is repaired, the same restore
    // proceeds instead of refusing a non-empty target.
    std::fs::write(&obj, &good).unwrap();
    f.restore("b1", &target).assert_ok();
    assert_eq!(marker_state(&target).as_deref(), Some("complete"));
}

#[test]
fn flipped_byte_exits_8_with_checksum_mismatch() {
    let f = Fixture::new(true);
    populate(&f.src);
    let out = f.backup("b1");
    out.assert_ok();
    let obj = f.object("b1");
    let mut bytes = std::fs::read(&obj).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&obj, &bytes).unwrap();
    let target = f.root.join("t");
    f.restore("b1", &target).assert_fails(
        8,
        &["backup \"b1\": object \"dump.rdb.zst\" checksum mismatch: expected sha256 "],
    );
    assert_nothing_loadable(&target);
}

#[test]
fn corrupt_manifest_exits_8() {
    let f = Fixture::new(false);
    f.backup("b1").assert_ok();
    let m = f.repo_dir.join("b1").join("manifest.json");
    let s = std::fs::read_to_string(&m).unwrap();
    std::fs::write(
        &m,
        s.replace("\"formatVersion\": 1", "\"formatVersion\": 99"),
    )
    .unwrap();
    let target = f.root.join("t");
    f.restore("b1", &target).assert_fails(
        8,
        &["backup \"b1\": manifest is unusable", "formatVersion 99"],
    );
    assert!(!target.exists() || marker_state(&target).is_none());
}

#[test]
fn full_disk_on_restore_exits_9_and_leaves_nothing_loadable() {
    let f = Fixture::new(false);
    populate_bulk(&f.src, 3);
    f.backup("big").assert_ok();
    let fs = Tmpfs::mount("1m");
    let o = f.restore("big", fs.path());
    o.assert_fails(9, &["no space left on device", "dump.rdb"]);
    assert_nothing_loadable(fs.path());
}

#[test]
fn full_disk_on_backup_exits_9_and_publishes_no_backup() {
    let f = Fixture::new(false);
    populate_bulk(&f.src, 3);
    let fs = Tmpfs::mount("1m");
    let repo = file_repo(fs.path());
    let mut a = vec![
        "backup".to_string(),
        "--backup".into(),
        "big".into(),
        "--repo".into(),
        repo.clone(),
    ];
    a.extend(f.src.args());
    mover(&a, &[]).assert_fails(9, &["no space left on device"]);
    assert!(!fs.path().join("big").join("manifest.json").exists());
    mover(&["inspect", "--backup", "big", "--repo", &repo], &[]).assert_fails(7, &["not found"]);
}

#[test]
fn non_empty_target_exits_10_and_is_left_untouched() {
    let f = Fixture::new(false);
    populate(&f.src);
    f.backup("b1").assert_ok();
    let target = f.root.join("t");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("dump.rdb"), b"someone else's data").unwrap();
    f.restore("b1", &target).assert_fails(
        10,
        &[&format!(
            "target {} is not empty (found dump.rdb)",
            target.display()
        )],
    );
    assert_eq!(
        std::fs::read(target.join("dump.rdb")).unwrap(),
        b"someone else's data"
    );
    assert!(marker_state(&target).is_none());

    // A completed restore of another backup is not ours to overwrite either.
    f.backup("b2").assert_ok();
    let t2 = f.root.join("t2");
    f.restore("b1", &t2).assert_ok();
    f.restore("b2", &t2)
        .assert_fails(10, &["marker is for backup \"b1\""]);
}

#[test]
fn existing_backup_is_never_overwritten_exit_13() {
    let f = Fixture::new(false);
    f.backup("b1").assert_ok();
    let before = std::fs::read(f.repo_dir.join("b1/manifest.json")).unwrap();
    f.backup("b1")
        .assert_fails(13, &["backup \"b1\" already exists"]);
    assert_eq!(
        std::fs::read(f.repo_dir.join("b1/manifest.json")).unwrap(),
        before
    );
}

#[test]
fn delete_removes_the_manifest_and_objects_and_is_idempotent() {
    let f = Fixture::new(false);
    populate(&f.src);
    f.backup("b1").assert_ok();
    f.backup("b2").assert_ok();
    let out = mover(&["delete", "--backup", "b1", "--repo", &f.repo], &[]);
    out.assert_ok();
    let j = out.json();
    assert!(j["objectsDeleted"].as_u64().unwrap_or(0) >= 2, "{j}");
    assert_eq!(j["alreadyAbsent"], false, "{j}");
    mover(&["inspect", "--backup", "b1", "--repo", &f.repo], &[])
        .assert_fails(7, &["backup \"b1\" not found"]);
    // The other backup is untouched.
    mover(&["inspect", "--backup", "b2", "--repo", &f.repo], &[]).assert_ok();
    // Deleting again succeeds, saying so: a retried Job must not fail.
    let again = mover(&["delete", "--backup", "b1", "--repo", &f.repo], &[]);
    again.assert_ok();
    assert_eq!(again.json()["alreadyAbsent"], true);
}

#[test]
fn delete_leaves_a_backup_whose_name_extends_the_deleted_ones() {
    let f = Fixture::new(false);
    populate(&f.src);
    f.backup("a").assert_ok();
    f.backup("a-b").assert_ok();
    let files = |name: &str| -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut dirs = vec![f.repo_dir.join(name)];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    let bytes = std::fs::read(&p).unwrap();
                    out.push((p, bytes));
                }
            }
        }
        out.sort();
        out
    };
    let before = files("a-b");
    assert!(before.len() >= 2, "{before:?}");
    mover(&["delete", "--backup", "a", "--repo", &f.repo], &[]).assert_ok();
    mover(&["inspect", "--backup", "a", "--repo", &f.repo], &[])
        .assert_fails(7, &["backup \"a\" not found"]);
    assert_eq!(files("a-b"), before, "every object of a-b is untouched");
    mover(&["inspect", "--backup", "a-b", "--repo", &f.repo], &[]).assert_ok();
    f.restore("a-b", &f.root.join("t")).assert_ok();
}
