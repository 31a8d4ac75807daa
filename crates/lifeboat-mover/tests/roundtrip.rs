//! Round trips against real servers: back up, restore into a fresh directory, start a second
//! server on it and check that it holds the same data.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::*;

const SOCIAL_Q: &str =
    "MATCH (a:Person)-[k:KNOWS]->(b:Person) RETURN a.name, a.age, k.since, b.name ORDER BY a.name";
const ROADS_Q: &str = "MATCH (a:City)-[r:ROAD]->(b:City) RETURN a.id, r.km, b.id ORDER BY a.id";

#[test]
fn falkordb_round_trip_restores_keys_graphs_and_query_rows() {
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src = Server::start(&t.path().join("src"), true);
    assert_eq!(populate(&src), 3);
    let mut c = src.con();
    let social = graph_rows(&mut c, 0, "social", SOCIAL_Q);
    let roads = graph_rows(&mut c, 1, "roads", ROADS_Q);

    let out = backup_of(&repo, "nightly-1", &src);
    out.assert_ok();
    let summary = out.json();
    assert_eq!(summary["backupName"], "nightly-1", "{out}");
    assert!(summary["totalSize"].as_u64().unwrap() > 0, "{out}");
    assert!(summary["objectCount"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(
        summary["checkedObjects"], summary["objectCount"],
        "every object read back from the repo at its size: {out}"
    );
    assert!(summary["durationSeconds"].as_f64().is_some(), "{out}");
    let fp = &summary["fingerprint"]["databases"];
    assert_eq!(
        fp["0"]["keys"],
        10 + 1 + 2,
        "db0: 10 strings, a hash, 2 graphs: {out}"
    );
    for (db, g, nodes, edges) in [("0", "social", 3, 2), ("1", "roads", 100, 50)] {
        let counts = &fp[db]["graphs"][g];
        assert_eq!(
            (&counts["nodes"], &counts["edges"]),
            (&serde_json::json!(nodes), &serde_json::json!(edges)),
            "{out}"
        );
        assert_eq!(
            counts["digest"].as_str().map(str::len),
            Some(64),
            "graph {g} has a content digest: {out}"
        );
    }
    assert_eq!(fp["1"]["keys"], 15 + 1 + 1, "{out}");
    assert_eq!(fp["3"]["keys"], 25 + 1, "{out}");
    assert!(fp.get("2").is_none(), "{out}");

    let insp = mover(&["inspect", "--backup", "nightly-1", "--repo", &repo], &[]);
    insp.assert_ok();
    assert!(insp.stdout.contains("objects/dump.rdb.zst"), "{insp}");
    assert!(insp.stdout.contains("graph \"social\" 3n/2e"), "{insp}");
    let insp_json = mover(
        &[
            "inspect",
            "--backup",
            "nightly-1",
            "--repo",
            &repo,
            "--json",
        ],
        &[],
    );
    let m = insp_json.assert_ok().json();
    assert_eq!(m["formatVersion"], 1);
    assert_eq!(m["fingerprint"]["databases"], *fp);
    assert_eq!(m["objects"][0]["role"], "rdb");
    // The source runs with its AOF on, but the AOF's files are not the fingerprinted snapshot and
    // restore never writes them: the backup holds the RDB alone.
    assert!(
        src_dir_has_aof(&t.path().join("src")),
        "the source server keeps an AOF"
    );
    let roles: Vec<&str> = m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["role"].as_str())
        .collect();
    assert_eq!(roles, ["rdb"], "{insp_json}");
    assert_eq!(
        m["totalSize"], m["objects"][0]["size"],
        "the backup's data is the RDB's bytes: {insp_json}"
    );

    let dst = t.path().join("dst");
    let r = restore_into(&repo, "nightly-1", &dst);
    r.assert_ok();
    assert!(
        dst.join("appendonlydir/appendonly.aof.manifest").exists(),
        "{r}"
    );
    // Progress lines come first, the result line last: the download's start names its bytes.
    let lines: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (result, progress) = lines.split_last().expect("output");
    assert_eq!(result["backupName"], "nightly-1", "{r}");
    let download = progress
        .iter()
        .find(|p| p["progress"]["stage"] == "download")
        .unwrap_or_else(|| panic!("no download progress: {r}"));
    assert_eq!(
        download["progress"]["bytesTotal"], result["totalSize"],
        "the download moves the restored files' bytes: {r}"
    );
    assert!(progress.iter().all(|p| p.get("progress").is_some()), "{r}");
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dst.join(".lifeboat-restore.json")).unwrap())
            .unwrap();
    assert_eq!(marker["state"], "complete");
    assert_eq!(marker["backupName"], "nightly-1");
    let leftovers: Vec<_> = walk(&dst)
        .into_iter()
        .filter(|p| p.contains("lifeboat-partial"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // Verify is started before the server is ready: waiting for it is the mover's job.
    let restored = Server::spawn_unwaited(&dst, true);
    let mut vargs = vec![
        "verify".to_string(),
        "--backup".into(),
        "nightly-1".into(),
        "--repo".into(),
        repo.clone(),
        "--timeout".into(),
        "60".into(),
    ];
    vargs.extend(restored.args());
    let v = mover(&vargs, &[]);
    assert_eq!(
        v.code,
        0,
        "verify failed: {v}\nserver log:\n{}",
        restored.log_tail()
    );
    assert_eq!(v.json()["match"], true, "{v}");

    let mut rc = restored.con();
    assert_eq!(graph_rows(&mut rc, 0, "social", SOCIAL_Q), social);
    assert_eq!(graph_rows(&mut rc, 1, "roads", ROADS_Q), roads);
    redis::cmd("SELECT").arg(3).query::<()>(&mut rc).unwrap();
    let v7: String = redis::cmd("GET").arg("k3:7").query(&mut rc).unwrap();
    assert_eq!(v7, "v7");

    // The marker alone is enough to verify, without repo access.
    let mut margs = vec![
        "verify".to_string(),
        "--restored-dir".into(),
        dst.to_str().unwrap().into(),
    ];
    margs.extend(restored.args());
    mover(&margs, &[]).assert_ok();

    // Restoring the same backup again is a no-op success (a retried Job must not fail).
    let again = restore_into(&repo, "nightly-1", &dst);
    assert_eq!(again.assert_ok().json()["alreadyRestored"], true, "{again}");

    // A diverged server must fail verification, naming both sides.
    redis::cmd("SELECT").arg(0).query::<()>(&mut rc).unwrap();
    redis::cmd("SET")
        .arg("intruder")
        .arg("1")
        .query::<()>(&mut rc)
        .unwrap();
    let bad = mover(&vargs, &[]);
    bad.assert_fails(11, &["nightly-1", "db 0: 13 keys in backup, 14 live"]);
    assert!(
        bad.stderr.contains("backup: db0: 13 keys") && bad.stderr.contains("live:   db0: 14 keys"),
        "{bad}"
    );
    assert_eq!(bad.json()["match"], false);
}

#[test]
fn plain_redis_without_graph_module_round_trips() {
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src = Server::start(&t.path().join("src"), false);
    assert_eq!(populate(&src), 0);
    let out = backup_of(&repo, "plain", &src);
    let fp = out.assert_ok().json()["fingerprint"].clone();
    assert_eq!(
        fp["databases"]["1"]["keys"],
        serde_json::json!(16),
        "15 strings and a hash: {out}"
    );
    assert_eq!(
        fp["databases"]["1"]["digest"].as_str().map(str::len),
        Some(64),
        "a content digest: {out}"
    );
    let dst = t.path().join("dst");
    restore_into(&repo, "plain", &dst).assert_ok();
    let restored = Server::start(&dst, false);
    let mut vargs = vec![
        "verify".to_string(),
        "--backup".into(),
        "plain".into(),
        "--repo".into(),
        repo,
    ];
    vargs.extend(restored.args());
    let v = mover(&vargs, &[]);
    assert_eq!(v.code, 0, "{v}\n{}", restored.log_tail());
}

#[test]
fn empty_dataset_backs_up_restores_and_verifies_as_empty() {
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src = Server::start(&t.path().join("src"), true);
    let out = backup_of(&repo, "empty", &src);
    assert_eq!(
        out.assert_ok().json()["fingerprint"],
        serde_json::json!({"databases": {}}),
        "{out}"
    );
    let dst = t.path().join("dst");
    restore_into(&repo, "empty", &dst).assert_ok();
    let restored = Server::start(&dst, true);
    let mut vargs = vec![
        "verify".to_string(),
        "--backup".into(),
        "empty".into(),
        "--repo".into(),
        repo,
    ];
    vargs.extend(restored.args());
    let v = mover(&vargs, &[]);
    v.assert_ok();
    assert_eq!(
        v.json()["message"],
        "dataset is empty, as the backup recorded",
        "{v}"
    );
    assert!(
        v.stderr
            .contains("dataset is empty, as the backup recorded"),
        "{v}"
    );
}

#[test]
fn restored_data_survives_the_appendonly_trap() {
    // Without the seeded AOF directory, an appendonly server would start empty on dump.rdb alone;
    // this pins the observable outcome: the restored server has the keys and verify agrees.
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src = Server::start(&t.path().join("src"), false);
    let mut c = src.con();
    redis::cmd("SET")
        .arg("only")
        .arg("one")
        .query::<()>(&mut c)
        .unwrap();
    backup_of(&repo, "trap", &src).assert_ok();
    let dst = t.path().join("dst");
    restore_into(&repo, "trap", &dst).assert_ok();
    let restored = Server::start(&dst, false);
    let mut rc = restored.con();
    wait_until(Duration::from_secs(10), "restored key", || {
        let v: Option<String> = redis::cmd("GET")
            .arg("only")
            .query(&mut rc)
            .map_err(|e| e.to_string())?;
        Ok(v.as_deref() == Some("one"))
    });
    assert!(
        restored.log_tail().contains("appendonly.aof.1.base.rdb"),
        "{}",
        restored.log_tail()
    );
}

fn src_dir_has_aof(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir.join("appendonlydir")).is_ok_and(|mut d| d.next().is_some())
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p.display().to_string());
    }
    out
}

#[test]
fn acl_file_is_backed_up_and_restored() {
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src_dir = t.path().join("src");
    std::fs::create_dir(&src_dir).unwrap();
    // With an ACL file the default user comes from it, not from requirepass.
    std::fs::write(
        src_dir.join("users.acl"),
        format!("user default on >{PASSWORD} ~* &* +@all\n"),
    )
    .unwrap();
    // Inside the data directory, like KubeBlocks' /data/users.acl.
    let acl = vec![
        "--aclfile".to_string(),
        src_dir.join("users.acl").display().to_string(),
    ];
    let src = Server::start_with(&src_dir, false, &acl);
    let mut c = src.con();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("operator")
        .arg("on")
        .arg(">op-pass")
        .arg("~*")
        .arg("+@all")
        .query::<()>(&mut c)
        .unwrap();
    redis::cmd("ACL").arg("SAVE").query::<()>(&mut c).unwrap();
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    backup_of(&repo, "acl", &src).assert_ok();

    let dst = t.path().join("dst");
    let r = restore_into(&repo, "acl", &dst);
    assert!(
        r.assert_ok().json()["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "users.acl"),
        "{r}"
    );
    let acl = vec![
        "--aclfile".to_string(),
        dst.join("users.acl").display().to_string(),
    ];
    let restored = Server::start_with(&dst, false, &acl);
    // The restored user can log in with its password; verify runs as that user.
    let mut vargs = vec![
        "verify".to_string(),
        "--backup".into(),
        "acl".into(),
        "--repo".into(),
        repo,
        "--username".into(),
        "operator".into(),
    ];
    vargs.extend(restored.args());
    let v = mover(&vargs, &[("LIFEBOAT_REDIS_PASSWORD", "op-pass")]);
    assert_eq!(v.code, 0, "{v}\n{}", restored.log_tail());
}

#[test]
fn verify_waits_while_the_restored_server_is_loading() {
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src = Server::start(&t.path().join("src"), true);
    populate(&src);
    // Many small keys spread over ~30 KiB, so loading is slow and regularly serves clients.
    let mut c = src.con();
    redis::cmd("SELECT").arg(2).query::<()>(&mut c).unwrap();
    for i in 0..300 {
        redis::cmd("SET")
            .arg(format!("pad:{i}"))
            .arg("x".repeat(100))
            .query::<()>(&mut c)
            .unwrap();
    }
    backup_of(&repo, "slow", &src).assert_ok();
    let dst = t.path().join("dst");
    restore_into(&repo, "slow", &dst).assert_ok();

    // Redis' own test knobs: sleep 20 ms per loaded key, so loading lasts several seconds, and
    // serve clients every KiB loaded (the default, 2 MiB, is more than this whole dataset).
    let slow: Vec<String> = [
        "--key-load-delay",
        "20000",
        "--loading-process-events-interval-bytes",
        "1024",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let restored = Server::spawn_unwaited_with(&dst, true, &slow);
    wait_until(
        Duration::from_secs(20),
        "the restored server to report loading:1",
        || {
            let mut c = restored.try_connect().map_err(|e| e.to_string())?;
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut c)
                .map_err(|e| e.to_string())?;
            if info.contains("loading:1") {
                Ok(true)
            } else {
                Err("not loading: the delay is too short to test waiting".into())
            }
        },
    );
    let mut vargs = vec![
        "verify".to_string(),
        "--backup".into(),
        "slow".into(),
        "--repo".into(),
        repo,
    ];
    vargs.extend(restored.args());

    let mut short = vargs.clone();
    short.extend(["--timeout".to_string(), "1".into()]);
    mover(&short, &[]).assert_fails(
        5,
        &[
            &format!("server 127.0.0.1:{}", restored.port),
            "still loading",
        ],
    );

    vargs.extend(["--timeout".to_string(), "120".into()]);
    let v = mover(&vargs, &[]);
    assert_eq!(v.code, 0, "{v}\n{}", restored.log_tail());
    assert_eq!(v.json()["match"], true, "{v}");
}

/// The operator's verify Job checks every data pod with one `--hosts` run: each server is
/// compared on its own, one line each, and a mismatch is the last line whichever server it is.
#[test]
fn every_server_of_hosts_is_verified_and_a_mismatch_is_the_last_line() {
    let t = tempfile::tempdir().unwrap();
    let repo_dir = t.path().join("repo");
    std::fs::create_dir(&repo_dir).unwrap();
    let repo = file_repo(&repo_dir);
    let src = Server::start(&t.path().join("src"), true);
    populate(&src);
    backup_of(&repo, "b", &src).assert_ok();
    let servers: Vec<Server> = ["one", "two"]
        .iter()
        .map(|d| {
            let dst = t.path().join(d);
            restore_into(&repo, "b", &dst).assert_ok();
            Server::start(&dst, true)
        })
        .collect();
    let names: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let vargs = [
        "verify",
        "--backup",
        "b",
        "--repo",
        &repo,
        "--hosts",
        &names.join(" "),
    ];
    let results = |out: &Out| -> Vec<(String, bool)> {
        out.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("match").is_some())
            .map(|v| {
                (
                    v["server"].as_str().unwrap_or("").to_owned(),
                    v["match"] == true,
                )
            })
            .collect()
    };

    let ok = mover(&vargs, &[]);
    ok.assert_ok();
    assert_eq!(
        results(&ok),
        [(names[0].clone(), true), (names[1].clone(), true)],
        "{ok}"
    );

    // The first server diverges: its line comes last, and the failure names it.
    let mut c = servers[0].con();
    redis::cmd("SET")
        .arg("intruder")
        .arg("1")
        .query::<()>(&mut c)
        .unwrap();
    let bad = mover(&vargs, &[]);
    bad.assert_fails(11, &["b"]);
    assert_eq!(
        results(&bad),
        [(names[1].clone(), true), (names[0].clone(), false)],
        "{bad}"
    );
    let last = bad.stdout.lines().last().unwrap_or("");
    assert!(last.contains(&format!("(server {})", names[0])), "{bad}");
}
