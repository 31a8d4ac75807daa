//! The fingerprint describes the saved file down to the values: backups under writes complete,
//! a restore with equal counts but a different value fails verification naming the digest, and
//! keys with a TTL that expire in between cause no false failure. Real FalkorDB processes.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::*;

fn db0_digest(o: &Out) -> String {
    o.json()["fingerprint"]["databases"]["0"]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_backup_under_continuous_writes_completes_and_matches_its_restore() {
    let b = Fixture::new(true);
    populate(&b.src);
    let stop = Arc::new(AtomicBool::new(false));
    let mut c = b.src.con();
    let s2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut acked = 0u64;
        while !s2.load(Ordering::Relaxed) {
            redis::cmd("SET")
                .arg(format!("churn:{acked}"))
                .arg(acked)
                .query::<()>(&mut c)
                .expect("a write during the backup");
            acked += 1;
        }
        acked
    });
    // The writer must be running before the backup starts, or this proves nothing.
    wait_until(Duration::from_secs(20), "writes before the backup", || {
        let mut c = b.src.con();
        let n: u64 = redis::cmd("DBSIZE")
            .query(&mut c)
            .map_err(|e| e.to_string())?;
        Ok(n > 100)
    });
    let out = b.backup_with("busy", &["--attempts", "1"]);
    stop.store(true, Ordering::Relaxed);
    let acked = writer.join().expect("writer");
    out.assert_ok();
    let j = out.json();
    assert_eq!(j["attempts"], 1, "{out}");
    let recorded = j["fingerprint"]["databases"]["0"]["keys"]
        .as_u64()
        .unwrap_or(0);
    let digest = db0_digest(&out);
    assert_eq!(digest.len(), 64, "a content digest is recorded: {j}");
    // populate() wrote 10 keys and 2 graphs into db 0, plus the hash.
    assert!(
        recorded > 13 && recorded <= 13 + acked,
        "the backup holds part of the {acked} acknowledged writes: {recorded} keys in db 0"
    );
    let live = b.restored("busy");
    let v = b.verify("busy", &live);
    v.assert_ok();
    assert_eq!(v.json()["match"], true, "{v}");
    assert_eq!(
        v.json()["live"]["databases"]["0"]["digest"],
        digest,
        "the restore holds what the saved file held: {v}"
    );
}

#[test]
fn equal_counts_with_one_value_changed_fail_verification_naming_the_digest() {
    let b = Fixture::new(true);
    populate(&b.src);
    let out = b.backup("b");
    out.assert_ok();
    let live = b.restored("b");
    b.verify("b", &live).assert_ok();
    let mut c = live.con();
    redis::cmd("SELECT").arg(3).query::<()>(&mut c).unwrap();
    redis::cmd("SET")
        .arg("k3:0")
        .arg("tampered")
        .query::<()>(&mut c)
        .unwrap();
    let v = b.verify("b", &live);
    v.assert_fails(
        11,
        &[
            "db 3: content digest of the keys without a TTL is",
            "in backup,",
            "live",
        ],
    );
    assert!(
        !v.error_line().contains("keys in backup"),
        "the counts are equal, only the digest differs: {v}"
    );
}

#[test]
fn a_graph_property_changed_fails_verification_naming_the_graph() {
    let b = Fixture::new(true);
    populate(&b.src);
    b.backup("g").assert_ok();
    let live = b.restored("g");
    b.verify("g", &live).assert_ok();
    let mut c = live.con();
    redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
    graph(&mut c, "roads", "MATCH (c:City {id: 7}) SET c.id = 70000");
    b.verify("g", &live)
        .assert_fails(11, &["db 1 graph \"roads\": content digest", "in backup,"]);
}

fn ttl_fixture(b: &Fixture, ttl_ms: u64) {
    populate(&b.src);
    let mut c = b.src.con();
    for i in 0..5 {
        redis::cmd("SET")
            .arg(format!("session:{i}"))
            .arg(i)
            .arg("PX")
            .arg(ttl_ms)
            .query::<()>(&mut c)
            .unwrap();
    }
}

/// Polls until every `session:*` key of db 0 has expired on `s`.
fn wait_sessions_gone(s: &Server) {
    wait_until(Duration::from_secs(30), "TTL keys to expire", || {
        let mut c = s.con();
        let n: Vec<String> = redis::cmd("KEYS")
            .arg("session:*")
            .query(&mut c)
            .map_err(|e| e.to_string())?;
        Ok(n.is_empty())
    });
}

#[test]
fn keys_with_a_ttl_that_expire_before_verification_are_no_failure_and_no_hole() {
    let b = Fixture::new(false);
    ttl_fixture(&b, 3000);
    let out = b.backup("ttl");
    out.assert_ok();
    let vol = &out.json()["fingerprint"]["databases"]["0"]["volatile"];
    assert_eq!(vol["keys"], 5, "{out}");
    let live = b.restored("ttl");
    b.verify("ttl", &live).assert_ok();
    wait_sessions_gone(&live);
    let v = b.verify("ttl", &live);
    v.assert_ok();
    assert_eq!(
        v.json()["live"]["databases"]["0"]["volatile"],
        serde_json::Value::Null,
        "{v}"
    );
    // With the TTL keys gone, a changed persistent value is still caught.
    let mut c = live.con();
    redis::cmd("SET")
        .arg("k0:1")
        .arg("tampered")
        .query::<()>(&mut c)
        .unwrap();
    b.verify("ttl", &live)
        .assert_fails(11, &["db 0: content digest of the keys without a TTL"]);
}

#[test]
fn a_ttl_key_lost_before_any_could_expire_is_a_mismatch() {
    let b = Fixture::new(false);
    // Long enough that none can have expired (allowing for clock slack) when verified.
    ttl_fixture(&b, 120_000);
    b.backup("ttl2").assert_ok();
    let live = b.restored("ttl2");
    let mut c = live.con();
    redis::cmd("DEL")
        .arg("session:0")
        .query::<()>(&mut c)
        .unwrap();
    b.verify("ttl2", &live).assert_fails(
        11,
        &["db 0: 5 keys with a TTL in backup, 4 live, and none can have expired yet"],
    );
}

#[test]
fn a_saved_file_that_does_not_load_fails_the_backup_naming_it() {
    let b = Fixture::new(true);
    populate(&b.src);
    // A scratch server without the graph module cannot load a file holding graphs.
    let bin = falkordb_dir().join("redis-server");
    let wrapper = b.root.join("redis-server-without-modules");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n# Drops --loadmodule and its argument.\nskip=0\nfor a in \"$@\"; do\n  shift\n  if [ $skip = 1 ]; then skip=0; continue; fi\n  if [ \"$a\" = --loadmodule ]; then skip=1; continue; fi\n  set -- \"$@\" \"$a\"\ndone\nexec {} \"$@\"\n",
            bin.display()
        ),
    )
    .unwrap();
    make_executable(&wrapper);
    let out = b.backup_with("noload", &["--scratch-server", wrapper.to_str().unwrap()]);
    out.assert_fails(
        8,
        &["backup \"noload\": the saved RDB did not load into a scratch server"],
    );
    assert!(
        !b.root.join("repo/noload/manifest.json").exists(),
        "no backup is published: {out}"
    );
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_graph_larger_than_one_page_is_digested_in_every_page() {
    // The digest reads a graph in pages of 10,000 node ids: 25,000 nodes span three, and a
    // change in any page (a node in the second, an edge from the last) must fail verification.
    let b = Fixture::new(true);
    let mut c = b.src.con();
    graph(
        &mut c,
        "chain",
        "UNWIND range(0, 12499) AS i CREATE (:N {i: 2 * i})-[:NEXT {w: i}]->(:N {i: 2 * i + 1})",
    );
    let out = b.backup("pages");
    out.assert_ok();
    assert_eq!(
        out.json()["fingerprint"]["databases"]["0"]["graphs"]["chain"]["nodes"],
        25_000,
        "the fingerprint counts every node: {out}"
    );
    let live = b.restored("pages");
    b.verify("pages", &live).assert_ok();
    let mut c = live.con();
    graph(&mut c, "chain", "MATCH (n:N {i: 15000}) SET n.i = -1");
    b.verify("pages", &live)
        .assert_fails(11, &["db 0 graph \"chain\": content digest"]);
    graph(&mut c, "chain", "MATCH (n:N {i: -1}) SET n.i = 15000");
    b.verify("pages", &live).assert_ok();
    graph(
        &mut c,
        "chain",
        "MATCH (:N {i: 24998})-[r:NEXT]->() SET r.w = -1",
    );
    b.verify("pages", &live)
        .assert_fails(11, &["db 0 graph \"chain\": content digest"]);
}
