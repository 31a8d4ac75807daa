//! Talking to data servers and sentinels, through the `redis` crate, always authenticated and
//! always with a deadline.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

use crate::decide::SentinelAnswer;
use crate::error::{Error, Result};

/// Every command's deadline: a pod that does not answer within it counts as unreachable.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// A connection to one server.
pub struct Conn {
    addr: String,
    con: MultiplexedConnection,
}

/// Connects to `host:port` with the password.
pub async fn connect(host: &str, port: u16, password: &str) -> Result<Conn> {
    let addr = format!("{host}:{port}");
    let settings = RedisConnectionInfo::default()
        .set_skip_set_lib_name()
        .set_password(password);
    let info = ConnectionAddr::Tcp(host.to_owned(), port)
        .into_connection_info()
        .map_err(|source| Error::Redis {
            what: format!("connecting to {addr}"),
            source,
        })?
        .set_redis_settings(settings);
    let client = redis::Client::open(info).map_err(|source| Error::Redis {
        what: format!("connecting to {addr}"),
        source,
    })?;
    let con = tokio::time::timeout(TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| Error::Timeout {
            what: format!("connecting to {addr}"),
        })?
        .map_err(|source| Error::Redis {
            what: format!("connecting to {addr}"),
            source,
        })?;
    Ok(Conn { addr, con })
}

impl Conn {
    /// Runs one command.
    pub async fn run<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T> {
        let what = || {
            let mut name = String::new();
            for a in cmd.args_iter().take(2) {
                if let redis::Arg::Simple(b) = a {
                    name.push_str(&String::from_utf8_lossy(b));
                    name.push(' ');
                }
            }
            format!("{}on {}", name, self.addr)
        };
        tokio::time::timeout(TIMEOUT, cmd.query_async(&mut self.con))
            .await
            .map_err(|_| Error::Timeout { what: what() })?
            .map_err(|source| Error::Redis {
                what: what(),
                source,
            })
    }

    /// `INFO replication`.
    pub async fn replication(&mut self) -> Result<Replication> {
        let text: String = self.run(redis::cmd("INFO").arg("replication")).await?;
        Ok(Replication::parse(&text))
    }
}

/// What `INFO replication` says, the parts the manager uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replication {
    /// The whole text, for the lineage.
    pub text: String,
    /// `role:master`.
    pub is_master: bool,
    /// A replica's master host.
    pub master_host: Option<String>,
    /// A replica's `master_link_status:up`.
    pub link_up: bool,
    /// A replica's `master_sync_in_progress:1`.
    pub syncing: bool,
    /// `master_repl_offset`.
    pub offset: u64,
    /// A master's replicas: host and acknowledged offset, for those `online`.
    pub replicas: Vec<(String, u64)>,
}

/// The value of `name` in `INFO` text (`name:value` lines), trimmed.
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

impl Replication {
    /// Parses `INFO replication`.
    pub fn parse(text: &str) -> Self {
        let field = |k: &str| info_field(text, k).map(str::to_owned);
        let replicas = text
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("ip="))
            .filter_map(|l| {
                let (_, kv) = l.split_once(':')?;
                let get = |k: &str| {
                    kv.split(',')
                        .find_map(|p| p.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                };
                (get("state")? == "online")
                    .then(|| Some((get("ip")?.to_owned(), get("offset")?.parse().ok()?)))
                    .flatten()
            })
            .collect();
        Self {
            text: text.to_owned(),
            is_master: field("role").as_deref() == Some("master"),
            master_host: field("master_host"),
            link_up: field("master_link_status").as_deref() == Some("up"),
            syncing: field("master_sync_in_progress").as_deref() == Some("1"),
            offset: field("master_repl_offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            replicas,
        }
    }
}

/// Asks one sentinel which master it monitors under `name`.
pub async fn sentinel_master(host: &str, port: u16, password: &str, name: &str) -> SentinelAnswer {
    let Ok(mut c) = connect(host, port, password).await else {
        return SentinelAnswer::Unreachable;
    };
    let r: Result<Option<Vec<String>>> = c
        .run(
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name),
        )
        .await;
    match r {
        Ok(Some(v)) => v
            .into_iter()
            .next()
            .map_or(SentinelAnswer::NoMaster, SentinelAnswer::Master),
        Ok(None) => SentinelAnswer::NoMaster,
        Err(_) => SentinelAnswer::Unreachable,
    }
}

/// Asks every sentinel.
pub async fn sentinel_masters(
    hosts: &[String],
    port: u16,
    password: &str,
    name: &str,
) -> Vec<SentinelAnswer> {
    let mut out = Vec::with_capacity(hosts.len());
    for h in hosts {
        out.push(sentinel_master(h, port, password, name).await);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_master_with_one_online_replica() {
        let t = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=fdb-1.h,port=6379,state=online,offset=420,lag=0\r\nslave1:ip=fdb-2.h,port=6379,state=wait_bgsave,offset=0,lag=0\r\nmaster_repl_offset:430\r\n";
        let r = Replication::parse(t);
        assert!(r.is_master);
        assert_eq!(r.offset, 430);
        assert_eq!(r.replicas, vec![("fdb-1.h".to_owned(), 420)]);
    }

    #[test]
    fn parses_a_replica() {
        let t = "role:slave\r\nmaster_host:fdb-0.h\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nmaster_repl_offset:7\r\n";
        let r = Replication::parse(t);
        assert!(!r.is_master);
        assert!(r.link_up && !r.syncing);
        assert_eq!(r.master_host.as_deref(), Some("fdb-0.h"));
    }
}
