//! Talking to the FalkorDB/Redis server: connection, readiness, the BGSAVE consistent point and
//! the live fingerprint. All of it is synchronous; callers run it on a blocking thread.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Value};

use crate::error::{Error, Result};
use crate::fingerprint::{DatabaseFingerprint, Fingerprint, GraphCounts, telemetry_key};

/// How often readiness and BGSAVE progress are polled. Polling is bounded by a caller deadline.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// The key type FalkorDB registers for graphs.
const GRAPH_TYPE: &str = "graphdata";

#[derive(Clone, Debug)]
pub struct ServerOpts {
    pub host: String,
    pub port: u16,
    /// A Unix socket to use instead of `host:port` (the backup's scratch server listens on one).
    pub unix_socket: Option<std::path::PathBuf>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// How long to keep retrying a refused connection (the server may still be starting).
    pub connect_timeout: Duration,
    /// Upper bound for a single command, including a FalkorDB count query on a big graph.
    pub command_timeout: Duration,
}

impl ServerOpts {
    pub fn addr(&self) -> String {
        match &self.unix_socket {
            Some(p) => p.display().to_string(),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

pub struct Server {
    con: redis::Connection,
    addr: String,
    /// How this connection was made, for a second one (graph digests run beside key digests).
    opts: ServerOpts,
    /// FalkorDB's module version when the graph module is loaded.
    pub graph_module: Option<String>,
}

/// One entry of `MODULE LIST`.
#[derive(Debug, Default)]
struct ModuleInfo {
    name: String,
    ver: String,
    path: String,
    args: Vec<String>,
}

/// The outcome of a successful BGSAVE, identifying which save produced the file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaveId {
    pub rdb_saves: Option<u64>,
    pub lastsave: i64,
}

fn classify(addr: &str, e: &redis::RedisError) -> Error {
    let cause = e.to_string().replace(['\n', '\r'], " ");
    let code = e.code().unwrap_or("");
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM")
    {
        Error::ServerAuth {
            addr: addr.to_string(),
            cause,
        }
    } else if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() {
        Error::ServerUnreachable {
            addr: addr.to_string(),
            cause,
        }
    } else {
        Error::Server {
            addr: addr.to_string(),
            cause,
        }
    }
}

fn is_loading(e: &redis::RedisError) -> bool {
    e.code() == Some("LOADING")
}

impl Server {
    /// Connects and waits until the server has finished loading its dataset, both within
    /// `deadline`. Refused connections are retried until `connect_timeout`; wrong credentials fail
    /// at once since retrying cannot fix them.
    pub fn connect(opts: &ServerOpts, ready_deadline: Instant) -> Result<Server> {
        let addr = opts.addr();
        let mut redis_info = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(u) = &opts.username {
            redis_info = redis_info.set_username(u);
        }
        if let Some(p) = &opts.password {
            redis_info = redis_info.set_password(p);
        }
        let conn_addr = match &opts.unix_socket {
            Some(p) => ConnectionAddr::Unix(p.clone()),
            None => ConnectionAddr::Tcp(opts.host.clone(), opts.port),
        };
        let info = conn_addr
            .into_connection_info()
            .map_err(|e| classify(&addr, &e))?
            .set_redis_settings(redis_info);
        let client = redis::Client::open(info).map_err(|e| classify(&addr, &e))?;
        let connect_deadline = Instant::now() + opts.connect_timeout;
        let con = loop {
            let err = match client.get_connection_with_timeout(Duration::from_secs(5)) {
                Ok(con) => break con,
                Err(e) => e,
            };
            // A server that is still loading may refuse the handshake with LOADING.
            let retry_until = if is_loading(&err) {
                ready_deadline
            } else {
                connect_deadline
            };
            let class = classify(&addr, &err);
            let retriable = is_loading(&err) || matches!(class, Error::ServerUnreachable { .. });
            if !retriable || Instant::now() >= retry_until {
                return Err(class);
            }
            std::thread::sleep(POLL);
        };
        con.set_read_timeout(Some(opts.command_timeout))
            .map_err(|e| classify(&addr, &e))?;
        con.set_write_timeout(Some(opts.command_timeout))
            .map_err(|e| classify(&addr, &e))?;
        let mut server = Server {
            con,
            addr,
            opts: opts.clone(),
            graph_module: None,
        };
        server.wait_loaded(ready_deadline)?;
        server.graph_module = server.detect_graph_module()?;
        Ok(server)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub(crate) fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        cmd.query(&mut self.con)
            .map_err(|e| classify(&self.addr, &e))
    }

    pub(crate) fn query_pipe<T: redis::FromRedisValue>(
        &mut self,
        p: &redis::Pipeline,
    ) -> Result<T> {
        p.query(&mut self.con).map_err(|e| classify(&self.addr, &e))
    }

    pub(crate) fn server_err(&self, cause: impl Into<String>) -> Error {
        Error::Server {
            addr: self.addr.clone(),
            cause: cause.into(),
        }
    }

    pub fn info(&mut self, section: &str) -> Result<HashMap<String, String>> {
        let text: String = self.query(redis::cmd("INFO").arg(section))?;
        Ok(parse_info(&text))
    }

    /// Waits until the server no longer reports `loading:1`; a restored dataset can take minutes
    /// to load and commands other than INFO fail with LOADING meanwhile.
    pub fn wait_loaded(&mut self, deadline: Instant) -> Result<()> {
        loop {
            match redis::cmd("INFO")
                .arg("persistence")
                .query::<String>(&mut self.con)
            {
                Ok(text) => {
                    let info = parse_info(&text);
                    let loading = info.get("loading").map(String::as_str) == Some("1")
                        || info.get("async_loading").map(String::as_str) == Some("1");
                    if !loading {
                        return Ok(());
                    }
                }
                Err(e) if is_loading(&e) => {}
                Err(e) => return Err(classify(&self.addr, &e)),
            }
            if Instant::now() >= deadline {
                return Err(self.server_err("still loading its dataset when the deadline passed"));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Every module as `MODULE LIST` reports it (RESP2 arrays or RESP3 maps).
    fn modules(&mut self) -> Result<Vec<ModuleInfo>> {
        let modules: Value = self.query(&redis::cmd("MODULE").arg("LIST").clone())?;
        let Value::Array(list) = modules else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for m in list {
            let fields = match m {
                Value::Array(f) => f,
                Value::Map(kv) => kv.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => continue,
            };
            let mut info = ModuleInfo::default();
            for pair in fields.chunks(2) {
                if let [k, v] = pair {
                    match value_to_string(k).as_deref() {
                        Some("name") => info.name = value_to_string(v).unwrap_or_default(),
                        Some("ver") => info.ver = value_to_string(v).unwrap_or_default(),
                        Some("path") => info.path = value_to_string(v).unwrap_or_default(),
                        Some("args") => {
                            if let Value::Array(a) = v {
                                info.args = a.iter().filter_map(value_to_string).collect();
                            }
                        }
                        _ => {}
                    }
                }
            }
            out.push(info);
        }
        Ok(out)
    }

    fn detect_graph_module(&mut self) -> Result<Option<String>> {
        Ok(self
            .modules()?
            .into_iter()
            .find(|m| m.name == "graph")
            .map(|m| m.ver))
    }

    /// The modules the server loaded from a file, with their arguments; built-in modules (no
    /// path) are left out.
    pub fn loaded_modules(&mut self) -> Result<Vec<(std::path::PathBuf, Vec<String>)>> {
        Ok(self
            .modules()?
            .into_iter()
            .filter(|m| !m.path.is_empty())
            .map(|m| (std::path::PathBuf::from(m.path), m.args))
            .collect())
    }

    pub fn redis_version(&mut self) -> Result<String> {
        Ok(self
            .info("server")?
            .get("redis_version")
            .cloned()
            .unwrap_or_default())
    }

    /// `CONFIG GET`, or `None` when the parameter is unset or CONFIG is not permitted (managed
    /// deployments often rename or ACL-restrict it; callers fall back to documented defaults).
    pub fn config_get(&mut self, name: &str) -> Result<Option<String>> {
        let res: redis::RedisResult<Value> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(&mut self.con);
        let v = match res {
            Ok(v) => v,
            Err(e) => {
                let class = classify(&self.addr, &e);
                return match class {
                    Error::ServerUnreachable { .. } => Err(class),
                    _ => Ok(None),
                };
            }
        };
        let items: Vec<Value> = match v {
            Value::Array(a) => a,
            Value::Map(kv) => kv.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => return Ok(None),
        };
        Ok(items
            .get(1)
            .and_then(value_to_string)
            .filter(|s| !s.is_empty()))
    }

    fn save_id(&mut self) -> Result<(SaveId, HashMap<String, String>)> {
        let info = self.info("persistence")?;
        let lastsave: i64 = self.query(&redis::cmd("LASTSAVE"))?;
        let rdb_saves = info.get("rdb_saves").and_then(|s| s.parse().ok());
        Ok((
            SaveId {
                rdb_saves,
                lastsave,
            },
            info,
        ))
    }

    /// Identifies the save currently on disk, so a caller can detect a later save replacing it.
    pub fn current_save(&mut self) -> Result<SaveId> {
        Ok(self.save_id()?.0)
    }

    /// Runs BGSAVE and waits for it to finish, returning the identity of the resulting save.
    /// Fails on `rdb_last_bgsave_status:err` and when `deadline` passes.
    pub fn bgsave(&mut self, deadline: Instant) -> Result<SaveId> {
        // Wait out a save someone else started: its fork point predates our fingerprint.
        loop {
            let info = self.info("persistence")?;
            if info.get("rdb_bgsave_in_progress").map(String::as_str) != Some("1") {
                break;
            }
            self.check_deadline(deadline, "a running BGSAVE did not finish")?;
            std::thread::sleep(POLL);
        }
        let (before, info) = self.save_id()?;
        let status_before = info
            .get("rdb_last_bgsave_status")
            .cloned()
            .unwrap_or_default();
        loop {
            // SCHEDULE makes BGSAVE wait for a running AOF rewrite instead of failing.
            match redis::cmd("BGSAVE")
                .arg("SCHEDULE")
                .query::<Value>(&mut self.con)
            {
                Ok(_) => break,
                Err(e) if e.to_string().contains("already in progress") => {
                    self.check_deadline(deadline, "BGSAVE could not be started")?;
                    std::thread::sleep(POLL);
                }
                Err(e) => return Err(classify(&self.addr, &e)),
            }
        }
        loop {
            let (now, info) = self.save_id()?;
            let in_progress = info.get("rdb_bgsave_in_progress").map(String::as_str) == Some("1");
            let status = info
                .get("rdb_last_bgsave_status")
                .map(String::as_str)
                .unwrap_or("");
            if !in_progress {
                let advanced = match (before.rdb_saves, now.rdb_saves) {
                    (Some(b), Some(n)) => n > b,
                    _ => now.lastsave > before.lastsave,
                };
                if status == "err" && (advanced || status_before != "err") {
                    return Err(self.server_err(
                        "BGSAVE failed (rdb_last_bgsave_status:err); see the server log",
                    ));
                }
                if advanced && now.lastsave >= before.lastsave {
                    return Ok(now);
                }
            }
            self.check_deadline(deadline, "BGSAVE did not complete")?;
            std::thread::sleep(POLL);
        }
    }

    fn check_deadline(&self, deadline: Instant, what: &str) -> Result<()> {
        if Instant::now() >= deadline {
            Err(self.server_err(format!("{what} before the deadline")))
        } else {
            Ok(())
        }
    }

    /// The live fingerprint; see `fingerprint.rs` for the definition. The content digests need
    /// `DEBUG`; a server that refuses it (for a connection that is not local, by default) gets
    /// counts only, which verification reports as a missing digest.
    pub fn fingerprint(&mut self) -> Result<Fingerprint> {
        let keyspace = self.info("keyspace")?;
        let mut dbs: Vec<u32> = keyspace
            .keys()
            .filter_map(|k| k.strip_prefix("db").and_then(|n| n.parse().ok()))
            .collect();
        dbs.sort_unstable();
        let mut fp = Fingerprint::default();
        // GRAPH.LIST names the graphs of all databases; a graph belongs to the databases where
        // its name is a key of FalkorDB's type.
        let all_graphs: Vec<String> = match self.graph_module {
            Some(_) => self.query(&redis::cmd("GRAPH.LIST"))?,
            None => Vec::new(),
        };
        let mut per_db: Vec<(u32, BTreeMap<String, GraphCounts>)> = Vec::new();
        for db in dbs {
            self.query::<()>(redis::cmd("SELECT").arg(db))?;
            let mut graphs = BTreeMap::new();
            for g in &all_graphs {
                let t: String = self.query(redis::cmd("TYPE").arg(g))?;
                if t == GRAPH_TYPE {
                    let nodes = self.graph_count(g, "MATCH (n) RETURN count(n)")?;
                    let edges = self.graph_count(g, "MATCH ()-[r]->() RETURN count(r)")?;
                    graphs.insert(
                        g.clone(),
                        GraphCounts {
                            nodes,
                            edges,
                            digest: None,
                        },
                    );
                }
            }
            per_db.push((db, graphs));
        }
        // Graphs are digested on a second connection while this one digests the keys: FalkorDB
        // answers graph queries on its own threads, so the two overlap.
        let jobs: Vec<(u32, String)> = per_db
            .iter()
            .flat_map(|(db, g)| g.keys().map(move |name| (*db, name.clone())))
            .collect();
        let opts = self.opts.clone();
        let (graph_digests, key_digests) = std::thread::scope(|sc| {
            let graphs = sc.spawn(move || -> Result<BTreeMap<(u32, String), String>> {
                let mut out = BTreeMap::new();
                if jobs.is_empty() {
                    return Ok(out);
                }
                let mut other = Server::connect(&opts, Instant::now() + opts.connect_timeout)?;
                for (db, g) in jobs {
                    other.query::<()>(redis::cmd("SELECT").arg(db))?;
                    let d = other.graph_digest(&g)?;
                    out.insert((db, g), d);
                }
                Ok(out)
            });
            let mut keys = Vec::new();
            let mut debug_allowed = true;
            let res = (|| -> Result<()> {
                for (db, graphs) in &per_db {
                    self.query::<()>(redis::cmd("SELECT").arg(*db))?;
                    let k = if debug_allowed {
                        self.key_digests(*db, graphs)?
                    } else {
                        None
                    };
                    debug_allowed = k.is_some();
                    keys.push(k);
                }
                Ok(())
            })();
            let g = graphs
                .join()
                .map_err(|_| Error::Internal("the graph digest thread panicked".into()))?;
            res?;
            Ok::<_, Error>((g?, keys))
        })?;
        for ((db, mut graphs), keys) in per_db.into_iter().zip(key_digests) {
            for (name, counts) in graphs.iter_mut() {
                counts.digest = graph_digests.get(&(db, name.clone())).cloned();
            }
            let entry = match keys {
                // Counted by the scan itself, so that the count and the digest describe the
                // same keys even when some expire meanwhile.
                Some(k) => DatabaseFingerprint {
                    keys: k.persistent.count() + k.volatile.count(),
                    graphs,
                    digest: Some(k.persistent.hex()),
                    volatile: k.volatile_keys(),
                },
                None => {
                    self.query::<()>(redis::cmd("SELECT").arg(db))?;
                    // Counted after the graph queries, which may themselves create telemetry
                    // streams.
                    let mut keys: u64 = self.query(&redis::cmd("DBSIZE"))?;
                    for g in graphs.keys() {
                        let t: String = self.query(redis::cmd("TYPE").arg(telemetry_key(g)))?;
                        if t == "stream" {
                            keys = keys.saturating_sub(1);
                        }
                    }
                    DatabaseFingerprint {
                        keys,
                        graphs,
                        ..Default::default()
                    }
                }
            };
            if entry.keys > 0 || !entry.graphs.is_empty() {
                fp.databases.insert(db, entry);
            }
        }
        self.query::<()>(redis::cmd("SELECT").arg(0))?;
        Ok(fp)
    }

    pub(crate) fn graph_count(&mut self, graph: &str, q: &str) -> Result<u64> {
        let v: Value = self.query(redis::cmd("GRAPH.RO_QUERY").arg(graph).arg(q))?;
        // Reply shape: [header, rows, statistics]; rows = [[count]].
        let n = match &v {
            Value::Array(parts) => match parts.get(1) {
                Some(Value::Array(rows)) => match rows.first() {
                    Some(Value::Array(cols)) => cols.first().and_then(value_to_u64),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        };
        n.ok_or_else(|| {
            self.server_err(format!(
                "graph \"{graph}\": unexpected reply to count query: {v:?}"
            ))
        })
    }
}

fn value_to_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

pub(crate) fn value_to_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => value_to_string(other).and_then(|s| s.parse().ok()),
    }
}

pub fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_parsing_skips_sections() {
        let i = parse_info(
            "# Persistence\r\nloading:0\r\nrdb_saves:3\r\n\r\n# Keyspace\r\ndb0:keys=4,expires=0\r\n",
        );
        assert_eq!(i["loading"], "0");
        assert_eq!(i["rdb_saves"], "3");
        assert_eq!(i["db0"], "keys=4,expires=0");
    }
}

/// How to reach the server. The password is read from `LIFEBOAT_REDIS_PASSWORD` or a file, never
/// from a flag, so it does not show up in the process list or the Job spec.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    #[arg(long, env = "LIFEBOAT_REDIS_HOST", default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, env = "LIFEBOAT_REDIS_PORT", default_value_t = 6379)]
    pub port: u16,
    /// ACL user name; without it the `default` user is used.
    #[arg(long, env = "LIFEBOAT_REDIS_USERNAME")]
    pub username: Option<String>,
    /// File holding the password (trailing newline ignored). Takes precedence over
    /// LIFEBOAT_REDIS_PASSWORD.
    #[arg(long, env = "LIFEBOAT_REDIS_PASSWORD_FILE")]
    pub password_file: Option<std::path::PathBuf>,
    /// Seconds to keep retrying a refused connection.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub connect_timeout: u64,
}

pub const PASSWORD_ENV: &str = "LIFEBOAT_REDIS_PASSWORD";

impl ServerArgs {
    pub fn opts(&self) -> Result<ServerOpts> {
        let password = match &self.password_file {
            Some(p) => {
                let s = std::fs::read_to_string(p)
                    .map_err(|e| Error::local_io("reading password file", p, e))?;
                Some(s.trim_end_matches(['\n', '\r']).to_string())
            }
            None => std::env::var(PASSWORD_ENV).ok().filter(|s| !s.is_empty()),
        };
        Ok(ServerOpts {
            host: self.host.clone(),
            port: self.port,
            unix_socket: None,
            username: self.username.clone(),
            password,
            connect_timeout: Duration::from_secs(self.connect_timeout),
            command_timeout: Duration::from_secs(600),
        })
    }
}
