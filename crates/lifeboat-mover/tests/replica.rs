//! Backing up a replica against a real primary: the backup holds what the primary held when it
//! started, or fails naming both servers; it never records a replica's empty first-sync state.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;

use support::*;

fn backup(name: &str, repo: &str, server: &Server, extra: &[&str]) -> Out {
    let mut a: Vec<String> = ["backup", "--backup", name, "--repo", repo]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    a.extend(server.args());
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    mover(&a, &[])
}

fn replica_of(dir: &Path, primary: &Server, masterauth: &str) -> Server {
    Server::start_with(
        dir,
        true,
        &[
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.port.to_string(),
            "--masterauth".into(),
            masterauth.into(),
        ],
    )
}

fn keys(s: &Server) -> i64 {
    redis::cmd("DBSIZE").query(&mut s.con()).unwrap()
}

#[test]
fn a_replica_in_its_first_sync_is_backed_up_only_once_it_holds_the_primarys_data() {
    let t = tempfile::tempdir().unwrap();
    let repo = file_repo(t.path());
    // The primary holds back its diskless transfer for a few seconds, which keeps a new replica
    // empty and answering PING: the state the field's empty backups came from.
    let primary = Server::start_with(
        &t.path().join("primary"),
        true,
        &[
            "--repl-diskless-sync".into(),
            "yes".into(),
            "--repl-diskless-sync-delay".into(),
            "3".into(),
        ],
    );
    populate(&primary);
    let replica = replica_of(&t.path().join("replica"), &primary, PASSWORD);
    assert_eq!(
        keys(&replica),
        0,
        "the replica synced before the backup started, so this run proves nothing; log: {}",
        replica.log_tail()
    );
    let from_replica = backup("from-replica", &repo, &replica, &[]);
    from_replica.assert_ok();
    assert!(
        from_replica
            .stderr
            .contains("replica has caught up with its primary"),
        "the backup did not wait for the replica: {from_replica}"
    );
    let from_primary = backup("from-primary", &repo, &primary, &[]);
    from_primary.assert_ok();
    assert_eq!(
        from_replica.json()["fingerprint"],
        from_primary.json()["fingerprint"],
        "the replica's backup differs from the primary's"
    );
    assert!(keys(&replica) > 0);
}

#[test]
fn a_replica_cut_off_from_its_primary_exits_15_naming_both() {
    let t = tempfile::tempdir().unwrap();
    let repo = file_repo(t.path());
    let primary = Server::start(&t.path().join("primary"), true);
    populate(&primary);
    // The primary refuses the replica's password, so its link never comes up.
    let replica = replica_of(&t.path().join("replica"), &primary, "not-the-password");
    backup("cut-off", &repo, &replica, &["--replica-sync-timeout", "2"]).assert_fails(
        15,
        &[
            &format!(
                "replica 127.0.0.1:{} has not caught up with its primary 127.0.0.1:{}",
                replica.port, primary.port
            ),
            "its link to the primary is",
            "after 2s",
        ],
    );
    assert!(!t.path().join("cut-off").join("manifest.json").exists());

    // With the primary gone, how far to catch up cannot be known: that fails too.
    let primary_port = primary.port;
    drop(primary);
    backup(
        "primary-gone",
        &repo,
        &replica,
        &["--replica-sync-timeout", "2", "--connect-timeout", "1"],
    )
    .assert_fails(
        15,
        &[
            &format!("its primary 127.0.0.1:{primary_port}"),
            "could not be asked how far to catch up",
        ],
    );
    assert!(!t.path().join("primary-gone").join("manifest.json").exists());
}
