//! A sentinel pod's life. The sentinel's own file on its volume is its memory (the master, the
//! epochs, the known sentinels and replicas): it is seeded once and kept across restarts, so a
//! restarted sentinel never falls back to a default master. A sentinel that knows no master is
//! told which by the serving primary (see `switchover::correct_sentinels`).

use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::client;
use crate::conf::{quote, write_private};
use crate::error::{Error, Result, io};
use crate::http::Shared;
use crate::settings::Settings;

/// How long a start waits for the hosts the file names to resolve.
const RESOLVE: Duration = Duration::from_secs(120);

/// A stable sentinel id: a new id at every start would leave ghosts that the others keep
/// counting towards the failover majority.
pub fn myid(host: &str) -> String {
    hex::encode(&Sha256::digest(host.as_bytes())[..20])
}

/// The lines Lifeboat owns in the file; everything else is the sentinel's own state.
fn owned(line: &str) -> bool {
    let l = line.trim_start();
    l.starts_with("requirepass ")
        || l.starts_with("bind ")
        || l.starts_with("port ")
        || l.starts_with("dir ")
        || l.starts_with("sentinel announce-ip ")
        || l.starts_with("sentinel resolve-hostnames ")
        || l.starts_with("sentinel announce-hostnames ")
        || l.starts_with("sentinel sentinel-pass ")
        || l.starts_with("sentinel auth-pass ")
        || l.starts_with("user ")
}

/// The file to start with: the kept one with Lifeboat's lines renewed (the password may have been
/// rotated, the pod's name is stable), or a new one.
pub fn render(existing: Option<&str>, s: &Settings, master_name: &str, data_dir: &Path) -> String {
    let mut lines: Vec<String> = vec![
        format!("port {}", s.sentinel_port),
        format!("dir {}", data_dir.display()),
        "sentinel resolve-hostnames yes".into(),
        "sentinel announce-hostnames yes".into(),
        format!("sentinel announce-ip {}", s.host),
        format!("requirepass {}", quote(&s.password)),
        format!("sentinel sentinel-pass {}", quote(&s.password)),
    ];
    if let Some(b) = &s.bind {
        lines.push(format!("bind {b}"));
    }
    match existing {
        Some(text) => {
            let mut monitors = false;
            for l in text.lines().filter(|l| !owned(l)) {
                monitors |= l.trim_start().starts_with("sentinel monitor ");
                lines.push(l.to_owned());
            }
            if monitors {
                lines.push(format!(
                    "sentinel auth-pass {master_name} {}",
                    quote(&s.password)
                ));
            }
        }
        None => lines.push(format!("sentinel myid {}", myid(&s.host))),
    }
    lines.push(String::new());
    lines.join("\n")
}

/// The hosts a kept file names (the master, known replicas and sentinels).
pub fn named_hosts(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["sentinel", "monitor", _, host, ..] => Some(("monitor", *host)),
                ["sentinel", "known-replica", _, host, ..] => Some(("known-replica", *host)),
                ["sentinel", "known-sentinel", _, host, ..] => Some(("known-sentinel", *host)),
                _ => None,
            }
            .map(|(k, h)| (k.to_owned(), h.to_owned()))
        })
        .collect()
}

/// Drops lines naming hosts that do not resolve: the sentinel refuses to start over them. A
/// dropped master is told again by the serving primary; known replicas and sentinels are
/// rediscovered.
pub fn drop_unresolved(text: &str, unresolved: &[String], master_name: &str) -> String {
    let master_gone = text.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        matches!(w.as_slice(), ["sentinel", "monitor", _, h, ..] if unresolved.iter().any(|u| u == h))
    });
    text.lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let names_unresolved = w.len() >= 4 && unresolved.iter().any(|u| u == w[3]);
            let about_master = w.len() >= 3 && w[0] == "sentinel" && w[2] == master_name;
            !(names_unresolved || (master_gone && about_master))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

async fn resolves(host: &str) -> bool {
    tokio::net::lookup_host((host, 0)).await.is_ok()
}

/// Runs the sentinel until a stop is asked for.
pub async fn run(s: Settings) -> Result<()> {
    let members = s.members()?;
    let conf = s.data_dir.join("sentinel.conf");
    let existing = match std::fs::read_to_string(&conf) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(format!("reading {}", conf.display()))(e)),
    };
    let mut text = render(existing.as_deref(), &s, &members.master_name, &s.data_dir);
    let hosts = named_hosts(&text);
    let deadline = Instant::now() + RESOLVE;
    let unresolved = loop {
        let mut missing = Vec::new();
        for (_, h) in &hosts {
            if !resolves(h).await {
                missing.push(h.clone());
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    if !unresolved.is_empty() {
        tracing::warn!(hosts = ?unresolved, "names in the kept sentinel file do not resolve; dropping them");
        text = drop_unresolved(&text, &unresolved, &members.master_name);
    }
    write_private(&conf, &text)?;
    tracing::info!(kept = existing.is_some(), "starting sentinel");

    let shared = Shared::new(None);
    let http = tokio::spawn(crate::http::serve(
        s.bind.clone(),
        s.manager_port,
        shared.clone(),
    ));
    let mut term = signal(SignalKind::terminate()).map_err(io("listening for SIGTERM"))?;
    let mut child = Command::new(&s.server_bin)
        .arg(&conf)
        .arg("--sentinel")
        .kill_on_drop(true)
        .spawn()
        .map_err(io(format!(
            "starting {} --sentinel",
            s.server_bin.display()
        )))?;
    let probe = async {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let local = s.bind.as_deref().unwrap_or("127.0.0.1");
            let ok = match client::connect(local, s.sentinel_port, &s.password).await {
                Ok(mut c) => c.run::<String>(&redis::cmd("PING")).await.is_ok(),
                Err(_) => false,
            };
            shared
                .set_ready(ok, "the sentinel does not answer PING")
                .await;
        }
    };
    let r = tokio::select! {
        () = probe => Ok(()),
        status = child.wait() => Err(Error::ServerExited(match status {
            Ok(st) => st.to_string(),
            Err(e) => e.to_string(),
        })),
        _ = term.recv() => {
            // The sentinel flushes its file at every state change: stopping it abruptly loses
            // nothing.
            let _ = child.start_kill();
            let _ = child.wait().await;
            Ok(())
        }
    };
    http.abort();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            host: "s-0.h.ns.svc.cluster.local".into(),
            ordinal: 0,
            data_dir: "/data".into(),
            run_dir: "/run".into(),
            config_dir: "/etc/lifeboat".into(),
            password: "pw".into(),
            server_args: vec![],
            port: 6379,
            sentinel_port: 26379,
            manager_port: 8000,
            server_bin: "redis-server".into(),
            bind: None,
            grace: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_new_file_has_a_stable_id_and_a_password_but_no_master() {
        let t = render(None, &settings(), "fdb-falkordb", Path::new("/data"));
        assert!(t.contains(&format!(
            "sentinel myid {}",
            myid("s-0.h.ns.svc.cluster.local")
        )));
        assert_eq!(myid("x").len(), 40);
        assert!(t.contains("requirepass \"pw\""));
        assert!(!t.contains("monitor"), "{t}");
    }

    #[test]
    fn a_kept_file_keeps_its_state_and_renews_the_password() {
        let old = "port 26379\nrequirepass \"old\"\nsentinel myid abc\nsentinel monitor fdb-falkordb d-1.h 6379 2\nsentinel auth-pass fdb-falkordb old\nsentinel config-epoch fdb-falkordb 4\nsentinel known-replica fdb-falkordb d-0.h 6379\nsentinel current-epoch 4\n";
        let t = render(Some(old), &settings(), "fdb-falkordb", Path::new("/data"));
        assert!(t.contains("sentinel myid abc"));
        assert!(t.contains("sentinel monitor fdb-falkordb d-1.h 6379 2"));
        assert!(t.contains("sentinel config-epoch fdb-falkordb 4"));
        assert!(t.contains("sentinel auth-pass fdb-falkordb \"pw\""));
        assert!(!t.contains("old"), "{t}");
        assert_eq!(
            named_hosts(&t),
            vec![
                ("monitor".to_owned(), "d-1.h".to_owned()),
                ("known-replica".to_owned(), "d-0.h".to_owned())
            ]
        );
        let dropped = drop_unresolved(&t, &["d-1.h".into()], "fdb-falkordb");
        assert!(!dropped.contains("fdb-falkordb"), "{dropped}");
        assert!(dropped.contains("sentinel current-epoch 4"));
        assert!(dropped.contains("sentinel myid abc"));
    }
}
