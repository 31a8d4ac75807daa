//! Backing up a replica: it must first hold everything its primary had when the backup started.
//!
//! A replica answers PING and BGSAVE whatever the state of its link, so a replica that is still
//! in its first sync, or cut off from its primary, would save an empty or stale dataset and the
//! backup would record that dataset faithfully. The primary's replication offset, read once at the
//! start, is the line the replica has to reach; writes after it are the next backup's business.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tracing::info;

use crate::error::{Error, Result};
use crate::server::{POLL, Server, ServerOpts};

/// Upper bound for reaching the primary; the replica named it, so it should answer at once.
const PRIMARY_CONNECT: Duration = Duration::from_secs(10);

/// Where a replica stands against the offset it has to reach.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    CaughtUp { offset: u64 },
    Behind(String),
}

/// The primary a server replicates from, when it is a replica.
pub fn primary_of(info: &HashMap<String, String>) -> Option<(String, u16)> {
    if info.get("role").map(String::as_str) != Some("slave") {
        return None;
    }
    let host = info.get("master_host")?.clone();
    let port = info.get("master_port")?.parse().ok()?;
    Some((host, port))
}

fn offset(info: &HashMap<String, String>, field: &str) -> Option<u64> {
    info.get(field)?.parse().ok()
}

/// Judges a replica's `INFO replication` against the primary's offset at the start.
pub fn progress(info: &HashMap<String, String>, target: u64) -> Progress {
    let link = info
        .get("master_link_status")
        .map(String::as_str)
        .unwrap_or("unknown");
    if link != "up" {
        return Progress::Behind(format!("its link to the primary is {link}"));
    }
    if info.get("master_sync_in_progress").map(String::as_str) == Some("1") {
        return Progress::Behind("its full sync from the primary is still in progress".into());
    }
    match offset(info, "slave_repl_offset") {
        Some(o) if o >= target => Progress::CaughtUp { offset: o },
        Some(o) => Progress::Behind(format!(
            "it is at replication offset {o}, {} bytes behind the primary's {target}",
            target - o
        )),
        None => Progress::Behind("it reports no replication offset".into()),
    }
}

/// Waits until `srv`, if it is a replica, has caught up with its primary's offset as read now.
pub fn wait_caught_up(srv: &mut Server, opts: &ServerOpts, timeout: Duration) -> Result<()> {
    let Some((host, port)) = primary_of(&srv.info("replication")?) else {
        return Ok(());
    };
    let primary_addr = format!("{host}:{port}");
    let replica = srv.addr().to_string();
    let behind = |cause: String| Error::ReplicaBehind {
        replica: replica.clone(),
        primary: primary_addr.clone(),
        cause,
    };
    let primary_opts = ServerOpts {
        host,
        port,
        unix_socket: None,
        connect_timeout: opts.connect_timeout.min(PRIMARY_CONNECT),
        command_timeout: PRIMARY_CONNECT,
        ..opts.clone()
    };
    let target = Server::connect(&primary_opts, Instant::now() + PRIMARY_CONNECT)
        .and_then(|mut p| p.info("replication"))
        .map_err(|e| {
            behind(format!(
                "its primary could not be asked how far to catch up: {e}"
            ))
        })?;
    let target = offset(&target, "master_repl_offset")
        .ok_or_else(|| behind("its primary reports no master_repl_offset".into()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match progress(&srv.info("replication")?, target) {
            Progress::CaughtUp { offset } => {
                info!(primary = %primary_addr, target, offset, "replica has caught up with its primary");
                return Ok(());
            }
            Progress::Behind(why) if Instant::now() >= deadline => {
                return Err(behind(format!("{why} after {}s", timeout.as_secs())));
            }
            Progress::Behind(_) => std::thread::sleep(POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_primary_has_no_primary() {
        assert_eq!(primary_of(&info(&[("role", "master")])), None);
        assert_eq!(
            primary_of(&info(&[
                ("role", "slave"),
                ("master_host", "db-0.db-headless"),
                ("master_port", "6379")
            ])),
            Some(("db-0.db-headless".into(), 6379))
        );
    }

    #[test]
    fn a_replica_is_caught_up_only_with_its_link_up_and_the_offset_reached() {
        let up = |o: &str| {
            info(&[
                ("master_link_status", "up"),
                ("master_sync_in_progress", "0"),
                ("slave_repl_offset", o),
            ])
        };
        assert_eq!(
            progress(&up("100"), 100),
            Progress::CaughtUp { offset: 100 }
        );
        assert_eq!(
            progress(&up("150"), 100),
            Progress::CaughtUp { offset: 150 }
        );
        assert_eq!(
            progress(&up("40"), 100),
            Progress::Behind(
                "it is at replication offset 40, 60 bytes behind the primary's 100".into()
            )
        );
        let down = info(&[("master_link_status", "down"), ("slave_repl_offset", "500")]);
        assert_eq!(
            progress(&down, 100),
            Progress::Behind("its link to the primary is down".into())
        );
        let syncing = info(&[
            ("master_link_status", "up"),
            ("master_sync_in_progress", "1"),
            ("slave_repl_offset", "500"),
        ]);
        assert!(matches!(progress(&syncing, 100), Progress::Behind(w) if w.contains("full sync")));
    }
}
