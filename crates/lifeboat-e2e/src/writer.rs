//! A client that keeps writing while a test breaks a Cluster, and the accounting that says
//! afterwards whether a write the database acknowledged was lost.
//!
//! The writer talks to the servers directly (the test host routes to pod IPs on the bed), the way
//! an application behind the client Service would: it writes to the pod labelled primary, and
//! when that fails it looks the label up again. Each write is a fresh key, so a retry never
//! hides the loss of an earlier attempt. A write counts as replicated-and-acknowledged only once
//! `WAIT` says a replica holds it: that is the promise failover must keep. A write only the
//! primary acknowledged may legitimately be lost when that primary dies, so it is counted apart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::lifeboat::info_field;
use crate::{TestNamespace, poll};

/// The data port of every server.
const DATA_PORT: u16 = 6379;
/// Connect and reply deadline: a server that takes longer is as good as down for a client.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the writer looks at the primary label while writes succeed, so that it follows a
/// label that moved away from a server still accepting writes, as a Service client would.
const RESOLVE_EVERY: Duration = Duration::from_secs(1);
/// How soon the label is looked up again after a failure: often enough to see a new primary
/// quickly, rarely enough not to list pods at the write rate.
const RESOLVE_RETRY: Duration = Duration::from_millis(250);
/// Keys per `MGET` when reading back.
const READ_BATCH: usize = 500;
/// The data component of a FalkorDB Cluster.
const DATA_COMPONENT: &str = "falkordb";

/// How fast and for how long a [`Writer`] writes.
#[derive(Clone, Copy, Debug)]
pub struct WriterConfig {
    /// Time between two writes (`WAIT` can stretch it by up to a second).
    pub interval: Duration,
    /// The writer stops by itself after this many attempts.
    pub max_writes: u64,
    /// The writer stops by itself after this long.
    pub max_duration: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(50),
            max_writes: 40_000,
            max_duration: Duration::from_secs(900),
        }
    }
}

/// One write the primary acknowledged.
#[derive(Clone, Copy, Debug)]
struct Ack {
    at: Instant,
    replicated: bool,
}

#[derive(Debug, Default)]
struct State {
    attempted: u64,
    failed: u64,
    acks: Vec<Ack>,
    acked_replicated: BTreeSet<u64>,
    acked_primary_only: BTreeSet<u64>,
    mark: Option<Instant>,
    /// The first moment after the mark when a write failed or there was no primary to write to.
    interrupted: Option<Instant>,
    /// The first acknowledged write after that.
    resumed: Option<Instant>,
    target: Option<String>,
    last_error: Option<String>,
}

/// What the writer did so far, for progress checks and failure messages.
#[derive(Clone, Debug)]
pub struct Progress {
    pub attempted: u64,
    pub failed: u64,
    pub acked_replicated: usize,
    pub acked_primary_only: usize,
    /// The pod the writer writes to now.
    pub target: Option<String>,
    pub last_error: Option<String>,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "writer: {} attempted, {} failed, {} acknowledged and replicated, {} acknowledged by the primary only, writing to {}, last error {}",
            self.attempted,
            self.failed,
            self.acked_replicated,
            self.acked_primary_only,
            self.target.as_deref().unwrap_or("nothing"),
            self.last_error.as_deref().unwrap_or("none")
        )
    }
}

/// What a stopped writer did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Writes sent to a server, acknowledged or not.
    pub attempted: u64,
    /// Writes that failed (error, timeout, no primary to send to is not counted).
    pub failed: u64,
    /// Keys the primary acknowledged and `WAIT` said a replica held.
    pub acked_replicated: BTreeSet<String>,
    /// Keys the primary acknowledged that no replica confirmed.
    pub acked_primary_only: BTreeSet<String>,
    /// From the last [`Writer::mark`] to the first acknowledged write after writes were first
    /// interrupted (a failed write, or no primary to write to); zero when they never were, `None`
    /// when they never resumed.
    pub writes_again_after: Option<Duration>,
    /// How long that first interruption lasted: a fault that reaches the primary late (a rolling
    /// update) interrupts writes well after the mark.
    pub interrupted_for: Option<Duration>,
}

/// A writer running as a task of the test process.
pub struct Writer {
    state: Arc<Mutex<State>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves counters that are still worth reading.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(seq: u64) -> String {
    format!("dur:{seq}")
}

impl Writer {
    /// Starts writing to the primary of FalkorDB Cluster `cluster`.
    pub async fn start(ns: &TestNamespace, cluster: &str, config: WriterConfig) -> Result<Self> {
        let password = password(ns, cluster).await?;
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(
            ns.api(),
            cluster.to_owned(),
            password,
            config,
            state.clone(),
            stopped,
        ));
        Ok(Self { state, stop, task })
    }

    /// Marks the moment a fault is injected; [`Outcome::writes_again_after`] is measured from
    /// it.
    pub fn mark(&self) -> Instant {
        let now = Instant::now();
        let mut s = lock(&self.state);
        s.mark = Some(now);
        s.interrupted = None;
        s.resumed = None;
        now
    }

    pub fn progress(&self) -> Progress {
        let s = lock(&self.state);
        Progress {
            attempted: s.attempted,
            failed: s.failed,
            acked_replicated: s.acked_replicated.len(),
            acked_primary_only: s.acked_primary_only.len(),
            target: s.target.clone(),
            last_error: s.last_error.clone(),
        }
    }

    /// How long writes have been acknowledged and replicated since `since`: from the first such
    /// write at or after it to the latest. `None` when there was none.
    pub fn replicated_span_since(&self, since: Instant) -> Option<Duration> {
        let s = lock(&self.state);
        let mut replicated = s.acks.iter().filter(|a| a.replicated && a.at >= since);
        let first = replicated.next()?.at;
        let last = replicated.next_back().map_or(first, |a| a.at);
        Some(last - first)
    }

    /// Waits until writes have been acknowledged and replicated for `span` after `since`.
    pub async fn wait_replicated_for(
        &self,
        since: Instant,
        span: Duration,
        timeout: Duration,
    ) -> Result<()> {
        poll(
            &format!(
                "writes acknowledged by the primary and a replica for {}s",
                span.as_secs()
            ),
            timeout,
            || async {
                Ok(match self.replicated_span_since(since) {
                    Some(d) if d >= span => Ok(()),
                    d => Err(format!(
                        "replicated for {:.1}s; {}",
                        d.unwrap_or_default().as_secs_f64(),
                        self.progress()
                    )),
                })
            },
        )
        .await
    }

    /// Stops the writer and returns what it did.
    pub async fn finish(self) -> Result<Outcome> {
        // The task may already have stopped by itself (its limits), and dropped the receiver.
        let _ = self.stop.send(true);
        // A write in flight ends within the command timeouts.
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .context("the writer did not stop within 30s")?
            .context("the writer task failed")?;
        let s = lock(&self.state);
        let writes_again_after = s.mark.and_then(|mark| match s.interrupted {
            None => Some(Duration::ZERO),
            Some(_) => s.resumed.map(|r| r.duration_since(mark)),
        });
        let interrupted_for = match (s.interrupted, s.resumed) {
            (Some(i), Some(r)) => Some(r.duration_since(i)),
            (None, _) if s.mark.is_some() => Some(Duration::ZERO),
            _ => None,
        };
        Ok(Outcome {
            interrupted_for,
            attempted: s.attempted,
            failed: s.failed,
            acked_replicated: s.acked_replicated.iter().map(|n| key(*n)).collect(),
            acked_primary_only: s.acked_primary_only.iter().map(|n| key(*n)).collect(),
            writes_again_after,
        })
    }
}

/// The pod the writer writes to.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Target {
    pod: String,
    ip: String,
}

async fn run(
    pods: Api<Pod>,
    cluster: String,
    password: String,
    config: WriterConfig,
    state: Arc<Mutex<State>>,
    mut stop: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut ticker = tokio::time::interval(config.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut conn: Option<(Target, MultiplexedConnection)> = None;
    let mut next_resolve = Instant::now();
    let mut seq = 0u64;
    let fail = |why: String| {
        let mut s = lock(&state);
        s.last_error = Some(why);
    };
    let interrupted = || {
        let mut s = lock(&state);
        if s.mark.is_some() && s.interrupted.is_none() {
            s.interrupted = Some(Instant::now());
        }
    };
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = stop.changed() => if changed.is_err() || *stop.borrow() { break },
        }
        if *stop.borrow() || started.elapsed() > config.max_duration || seq >= config.max_writes {
            break;
        }
        if Instant::now() >= next_resolve {
            next_resolve = Instant::now() + RESOLVE_EVERY;
            let looked_up = tokio::time::timeout(COMMAND_TIMEOUT, primary_target(&pods, &cluster))
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the API server took over 2s")));
            match looked_up {
                Ok(Ok(t)) => {
                    if conn.as_ref().map(|(c, _)| c) != Some(&t) {
                        conn = match connect(&t.ip, &password).await {
                            Ok(c) => Some((t, c)),
                            Err(e) => {
                                fail(format!("connecting to {}: {e}", t.pod));
                                next_resolve = Instant::now() + RESOLVE_RETRY;
                                None
                            }
                        };
                    }
                }
                // No pod is labelled primary: a client behind the Service has nowhere to write
                // either.
                Ok(Err(why)) => {
                    fail(why);
                    conn = None;
                    next_resolve = Instant::now() + RESOLVE_RETRY;
                }
                // The API server did not answer: keep writing where the writer was.
                Err(e) => {
                    fail(format!("looking up the primary: {e:#}"));
                    if conn.is_none() {
                        next_resolve = Instant::now() + RESOLVE_RETRY;
                    }
                }
            }
            lock(&state).target = conn.as_ref().map(|(t, _)| t.pod.clone());
        }
        let Some((target, c)) = conn.as_mut() else {
            interrupted();
            continue;
        };
        seq += 1;
        lock(&state).attempted += 1;
        let k = key(seq);
        let set: redis::RedisResult<()> = redis::cmd("SET").arg(&k).arg(seq).query_async(c).await;
        if let Err(e) = set {
            let why = format!("SET {k} on {}: {e}", target.pod);
            {
                let mut s = lock(&state);
                s.failed += 1;
                s.last_error = Some(why);
            }
            interrupted();
            // READONLY, LOADING, refused, timed out: whatever it was, the label is asked again.
            conn = None;
            next_resolve = Instant::now() + RESOLVE_RETRY;
            continue;
        }
        let replicas: redis::RedisResult<i64> =
            redis::cmd("WAIT").arg(1).arg(1000).query_async(c).await;
        let now = Instant::now();
        let replicated = matches!(replicas, Ok(n) if n >= 1);
        let mut s = lock(&state);
        if s.interrupted.is_some() && s.resumed.is_none() {
            s.resumed = Some(now);
        }
        s.acks.push(Ack {
            at: now,
            replicated,
        });
        if replicated {
            s.acked_replicated.insert(seq);
        } else {
            s.acked_primary_only.insert(seq);
        }
        if let Err(e) = replicas {
            s.last_error = Some(format!("WAIT after {k} on {}: {e}", target.pod));
            drop(s);
            conn = None;
            next_resolve = Instant::now() + RESOLVE_RETRY;
        }
    }
}

/// The password of the Cluster's `default` account, from the Secret Lifeboat creates under
/// KubeBlocks' name.
pub async fn password(ns: &TestNamespace, cluster: &str) -> Result<String> {
    let secrets: Api<Secret> = ns.api();
    let name = format!("{cluster}-{DATA_COMPONENT}-account-default");
    let secret = poll(
        &format!("Secret {name}"),
        Duration::from_secs(60),
        || async {
            Ok(secrets
                .get_opt(&name)
                .await?
                .ok_or_else(|| "not created yet".to_string()))
        },
    )
    .await?;
    let bytes = secret
        .data
        .and_then(|d| d.get("password").cloned())
        .with_context(|| format!("Secret {name} has no password"))?;
    String::from_utf8(bytes.0).with_context(|| format!("the password in {name} is not UTF-8"))
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ip(p: &Pod) -> Option<String> {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
}

/// The one data pod labelled primary, not being deleted, with an IP. The observation when there
/// is not exactly one.
async fn primary_target(
    pods: &Api<Pod>,
    cluster: &str,
) -> Result<std::result::Result<Target, String>> {
    let lp = ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={cluster},apps.kubeblocks.io/component-name={DATA_COMPONENT},kubeblocks.io/role=primary"
    ));
    let list = pods.list(&lp).await.context("listing the primary")?.items;
    // A pod being deleted has left the Service's endpoints; a client no longer reaches it.
    let live: Vec<Target> = list
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            Some(Target {
                pod: p.metadata.name.clone()?,
                ip: pod_ip(p)?,
            })
        })
        .collect();
    Ok(match live.as_slice() {
        [one] => Ok(one.clone()),
        other => Err(format!(
            "pods labelled primary and live: {:?}",
            other.iter().map(|t| &t.pod).collect::<Vec<_>>()
        )),
    })
}

/// A connection to the data server at `ip`, authenticated, with connect and reply deadlines.
pub async fn connect(ip: &str, password: &str) -> redis::RedisResult<MultiplexedConnection> {
    connect_with(ip, password, COMMAND_TIMEOUT).await
}

/// [`connect`] with a reply deadline of its own, for bulk loads whose commands take seconds.
pub async fn connect_with(
    ip: &str,
    password: &str,
    reply_deadline: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    let info = ConnectionAddr::Tcp(ip.to_owned(), DATA_PORT)
        .into_connection_info()?
        .set_redis_settings(
            RedisConnectionInfo::default()
                .set_skip_set_lib_name()
                .set_password(password),
        );
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(COMMAND_TIMEOUT))
        .set_response_timeout(Some(reply_deadline));
    redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// The data servers of a Cluster: pod name to IP, and which one is labelled primary.
struct DataPods {
    primary: String,
    ips: BTreeMap<String, String>,
}

/// Waits until exactly one live data pod is labelled primary and every data pod is Ready with
/// an IP.
async fn data_pods(ns: &TestNamespace, cluster: &str) -> Result<DataPods> {
    let pods: Api<Pod> = ns.api();
    poll(
        "one primary label and every data pod Ready",
        Duration::from_secs(120),
        || async {
            let primary = match primary_target(&pods, cluster).await? {
                Ok(t) => t.pod,
                Err(why) => return Ok(Err(why)),
            };
            let lp = ListParams::default().labels(&format!(
                "app.kubernetes.io/instance={cluster},apps.kubeblocks.io/component-name={DATA_COMPONENT}"
            ));
            let list = pods.list(&lp).await?.items;
            let mut ips = BTreeMap::new();
            for p in &list {
                let name = p.metadata.name.clone().unwrap_or_default();
                match pod_ip(p) {
                    Some(ip) if pod_ready(p) => {
                        ips.insert(name, ip);
                    }
                    _ => return Ok(Err(crate::pod_summary(p))),
                }
            }
            Ok(Ok(DataPods { primary, ips }))
        },
    )
    .await
}

/// Keys of `keys` that `conn` does not hold with the value the writer wrote.
async fn missing(conn: &mut MultiplexedConnection, keys: &BTreeSet<String>) -> Result<Vec<String>> {
    let keys: Vec<&String> = keys.iter().collect();
    let mut lost = Vec::new();
    for batch in keys.chunks(READ_BATCH) {
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg(batch)
            .query_async(conn)
            .await
            .context("MGET")?;
        for (k, v) in batch.iter().zip(values) {
            let want = k.strip_prefix("dur:").unwrap_or_default();
            if v.as_deref() != Some(want) {
                lost.push((*k).clone());
            }
        }
    }
    Ok(lost)
}

/// What the read-back found.
#[derive(Clone, Debug, Default)]
pub struct Check {
    /// The data pod labelled primary that was read.
    pub primary: String,
    /// Replicated-and-acknowledged keys the primary no longer holds.
    pub lost_replicated: Vec<String>,
    /// Keys only the old primary had acknowledged that the primary no longer holds.
    pub lost_primary_only: Vec<String>,
}

/// Reads back, from the pod labelled primary, every key the writer had acknowledged.
pub async fn check(ns: &TestNamespace, cluster: &str, outcome: &Outcome) -> Result<Check> {
    let (pods, mut conn) = primary_connection(ns, cluster).await?;
    Ok(Check {
        lost_replicated: missing(&mut conn, &outcome.acked_replicated).await?,
        lost_primary_only: missing(&mut conn, &outcome.acked_primary_only).await?,
        primary: pods.primary,
    })
}

/// Waits until every replica is linked to the labelled primary and has caught up with the
/// primary's replication offset as it was when the check began, then checks each holds every key
/// in `keys`.
pub async fn check_replicas(
    ns: &TestNamespace,
    cluster: &str,
    keys: &BTreeSet<String>,
    timeout: Duration,
) -> Result<()> {
    let password = password(ns, cluster).await?;
    let pods = data_pods(ns, cluster).await?;
    let primary_ip = pods
        .ips
        .get(&pods.primary)
        .with_context(|| format!("no IP for {}", pods.primary))?;
    let mut primary = connect(primary_ip, &password)
        .await
        .with_context(|| format!("connecting to the primary {}", pods.primary))?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut primary)
        .await?;
    let target: u64 = info_field(&info, "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no master_repl_offset from {}: {info}", pods.primary))?;
    ensure!(
        info_field(&info, "role").as_deref() == Some("master"),
        "the pod labelled primary, {}, is not a master: {info}",
        pods.primary
    );
    for (name, ip) in pods.ips.iter().filter(|(n, _)| **n != pods.primary) {
        poll(
            &format!(
                "replica {name} to be linked to {} and reach offset {target}",
                pods.primary
            ),
            timeout,
            || async {
                let mut c = match connect(ip, &password).await {
                    Ok(c) => c,
                    Err(e) => return Ok(Err(format!("connecting: {e}"))),
                };
                let info: String = match redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut c)
                    .await
                {
                    Ok(i) => i,
                    Err(e) => return Ok(Err(format!("INFO: {e}"))),
                };
                let field = |k| info_field(&info, k).unwrap_or_default();
                let offset: u64 = field("slave_repl_offset").parse().unwrap_or(0);
                let master = field("master_host");
                let linked = field("role") == "slave"
                    && field("master_link_status") == "up"
                    && (master.starts_with(&format!("{}.", pods.primary))
                        || master == pods.primary
                        || master == *primary_ip);
                Ok(if linked && offset >= target {
                    Ok(())
                } else {
                    Err(format!(
                        "role {}, master {master}, link {}, offset {offset}",
                        field("role"),
                        field("master_link_status")
                    ))
                })
            },
        )
        .await?;
        let mut c = connect(ip, &password)
            .await
            .with_context(|| format!("connecting to replica {name}"))?;
        let lost = missing(&mut c, keys).await?;
        if !lost.is_empty() {
            bail!(
                "replica {name} lacks {} replicated-and-acknowledged key(s) the primary holds: {}",
                lost.len(),
                sample(&lost)
            );
        }
    }
    Ok(())
}

/// Up to 50 keys, for messages.
pub fn sample(keys: &[String]) -> String {
    let mut s = keys.iter().take(50).cloned().collect::<Vec<_>>().join(" ");
    if keys.len() > 50 {
        s.push_str(&format!(" … and {} more", keys.len() - 50));
    }
    s
}

/// The graph written next to the writer's keys.
pub const GRAPH: &str = "social";
/// Nodes of [`GRAPH`].
pub const GRAPH_NODES: i64 = 100;

/// The data pods and a connection to the one labelled primary.
async fn primary_connection(
    ns: &TestNamespace,
    cluster: &str,
) -> Result<(DataPods, redis::aio::MultiplexedConnection)> {
    let password = password(ns, cluster).await?;
    let pods = data_pods(ns, cluster).await?;
    let ip = pods
        .ips
        .get(&pods.primary)
        .with_context(|| format!("no IP for {}", pods.primary))?;
    let c = connect(ip, &password)
        .await
        .with_context(|| format!("connecting to the primary {}", pods.primary))?;
    Ok((pods, c))
}

/// Creates [`GRAPH_NODES`] nodes in [`GRAPH`] on the primary and waits until a replica holds
/// them, so that the graph is data a failover must keep.
pub async fn write_graph(ns: &TestNamespace, cluster: &str) -> Result<()> {
    let (pods, mut c) = primary_connection(ns, cluster).await?;
    let _: redis::Value = redis::cmd("GRAPH.QUERY")
        .arg(GRAPH)
        .arg(format!(
            "UNWIND range(1,{GRAPH_NODES}) AS i CREATE (:P {{id:i}})"
        ))
        .query_async(&mut c)
        .await
        .context("creating the graph")?;
    let replicas: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1500)
        .query_async(&mut c)
        .await
        .context("WAIT after the graph")?;
    ensure!(
        replicas >= 1,
        "no replica acknowledged the graph written on {}",
        pods.primary
    );
    Ok(())
}

/// The number of nodes in [`GRAPH`] on the pod labelled primary.
pub async fn graph_nodes(ns: &TestNamespace, cluster: &str) -> Result<i64> {
    let (pods, mut c) = primary_connection(ns, cluster).await?;
    let reply: redis::Value = redis::cmd("GRAPH.RO_QUERY")
        .arg(GRAPH)
        .arg("MATCH (n:P) RETURN count(n)")
        .query_async(&mut c)
        .await
        .with_context(|| format!("counting the graph's nodes on {}", pods.primary))?;
    first_int(&reply).with_context(|| format!("no count in the reply {reply:?}"))
}

/// The count in a `GRAPH.RO_QUERY` reply: header, rows, statistics; the first cell of the first
/// row.
fn first_int(reply: &redis::Value) -> Option<i64> {
    let redis::Value::Array(parts) = reply else {
        return None;
    };
    let redis::Value::Array(rows) = parts.get(1)? else {
        return None;
    };
    let redis::Value::Array(cells) = rows.first()? else {
        return None;
    };
    match cells.first()? {
        redis::Value::Int(n) => Some(*n),
        other => redis::from_redis_value_ref::<i64>(other).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_is_read_from_the_first_row() {
        let reply = redis::Value::Array(vec![
            redis::Value::Array(vec![redis::Value::BulkString(b"count(n)".to_vec())]),
            redis::Value::Array(vec![redis::Value::Array(vec![redis::Value::Int(100)])]),
            redis::Value::Array(vec![]),
        ]);
        assert_eq!(first_int(&reply), Some(100));
        assert_eq!(first_int(&redis::Value::Nil), None);
    }

    #[test]
    fn sample_is_bounded() {
        let keys: Vec<String> = (1..=60).map(key).collect();
        let s = sample(&keys);
        assert!(s.starts_with("dur:1 dur:2"));
        assert!(s.ends_with("and 10 more"));
    }
}
