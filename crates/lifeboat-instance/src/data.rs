//! A data pod's life: decide the role from what the pods hold, start `redis-server`, keep the
//! dataset's record current while it serves, and hand the primary role over before a planned stop.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::boot::{self, AofAsk, AofStep, Boot, Persistence};
use crate::client::{self, Replication};
use crate::conf::{self, DataConf};
use crate::decide::{self, Decision, Observation, Peer, SentinelAnswer};
use crate::error::{Error, Result, io};
use crate::http::Shared;
use crate::lineage::LiveIdentity;
use crate::peers;
use crate::report::{Phase, Report, Role};
use crate::settings::{Members, Settings};
use crate::state::{self, State};
use crate::switchover;

/// How often the decision is retried while waiting.
const DECIDE_EVERY: Duration = Duration::from_secs(2);
/// How often a running server is observed.
const OBSERVE_EVERY: Duration = Duration::from_secs(1);
/// How often a primary asks the sentinels whom they monitor, to correct them.
const CLAIM_EVERY: Duration = Duration::from_secs(5);

/// Runs the data pod until a stop is asked for (Ok) or the server dies (Err).
pub async fn run(s: Settings) -> Result<()> {
    let dataset = state::dataset(&s.data_dir)?;
    tracing::info!(host = %s.host, present = dataset.present, lineage = ?dataset.lineage, last_role = ?dataset.last_role, "found the data volume");
    let shared = Shared::new(Some(Report {
        host: s.host.clone(),
        ordinal: s.ordinal,
        dataset: dataset.clone(),
        lineage: None,
        phase: Phase::Deciding,
    }));
    let _ = shared.fingerprint_from.set(crate::http::LocalServer {
        host: s.bind.clone().unwrap_or_else(|| "127.0.0.1".into()),
        port: s.port,
        password: s.password.clone(),
    });
    let http = tokio::spawn(crate::http::serve(
        s.bind.clone(),
        s.manager_port,
        shared.clone(),
    ));
    let mut term = signal(SignalKind::terminate()).map_err(io("listening for SIGTERM"))?;
    let http_client = peers::client();

    let decision = tokio::select! {
        d = decide_loop(&s, &shared, &http_client) => d?,
        _ = term.recv() => {
            tracing::info!("stop asked for before the server started");
            return Ok(());
        }
    };
    let (replica_of, set_aside) = match &decision {
        Decision::Replica {
            master, set_aside, ..
        } => (Some(master.clone()), *set_aside),
        _ => (None, false),
    };
    if set_aside {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let dest = state::set_aside(&s.data_dir, now)?;
        tracing::warn!(kept = %dest.display(), "this pod's dataset holds writes its new primary does not; it was moved aside before syncing");
    }
    let from_rdb = start_from_rdb(&s)?;
    let conf_path = conf::data_conf_path(&s.run_dir);
    conf::write_private(
        &conf_path,
        &conf::data_conf(&DataConf {
            base: &s.config_dir.join("redis.conf"),
            port: s.port,
            password: &s.password,
            announce: &s.host,
            server_args: &s.server_args,
            replica_of: replica_of.as_deref().map(|m| (m, s.port)),
            bind: s.bind.as_deref(),
            from_rdb,
        }),
    )?;
    // The record keeps the dataset's history; a replica that set its data aside starts afresh.
    let mut st = state::load(&s.data_dir)?
        .filter(|_| !set_aside && dataset.present)
        .unwrap_or_default();
    st.role = Some(if replica_of.is_some() {
        Role::Replica
    } else {
        Role::Primary
    });
    state::save(&s.data_dir, &st)?;
    let mut child = Command::new(&s.server_bin)
        .arg(&conf_path)
        .kill_on_drop(true)
        .spawn()
        .map_err(io(format!("starting {}", s.server_bin.display())))?;
    tracing::info!(decision = ?decision, "server started");

    let mut aof_owed = from_rdb;
    let outcome = tokio::select! {
        r = supervise(&s, &shared, &http_client, &mut st, &mut aof_owed) => r,
        status = child.wait() => Err(Error::ServerExited(match status {
            Ok(st) => st.to_string(),
            Err(e) => e.to_string(),
        })),
        _ = term.recv() => Ok(()),
    };
    http.abort();
    outcome?;
    stop(&s, &shared, &mut st, &mut child, aof_owed).await
}

/// The persistence the server's config asks for: the operator's base file, then the server
/// arguments, read in the order the server reads them.
fn persistence(s: &Settings) -> Result<Persistence> {
    let base = s.config_dir.join("redis.conf");
    let text = match std::fs::read_to_string(&base) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(format!("reading {}", base.display()))(e)),
    };
    let args = conf::args_as_lines(&s.server_args);
    Ok(Persistence::from_lines(
        text.lines().chain(args.iter().map(String::as_str)),
    ))
}

/// Whether the server starts from `dump.rdb` with the AOF off (see `boot.rs`), removing a
/// restore's AOF that only repeats the RDB first.
fn start_from_rdb(s: &Settings) -> Result<bool> {
    let want = persistence(s)?;
    let replicated = s.members()?.data.len() > 1;
    let Boot::FromRdb { seed, why } =
        boot::plan(&boot::observe(&s.data_dir, &want)?, &want, replicated)
    else {
        return Ok(false);
    };
    if !seed.is_empty() && !boot::remove_seed(&s.data_dir, &want, &seed)? {
        return Ok(false);
    }
    tracing::info!(%why, removed = ?seed, "starting from the RDB with the AOF off; the AOF is written once the dataset is loaded");
    Ok(true)
}

async fn observe(
    s: &Settings,
    client: &reqwest::Client,
    started: Instant,
    refused: bool,
) -> Result<Observation> {
    let members: Members = s.members()?;
    let me = Report {
        host: s.host.clone(),
        ordinal: s.ordinal,
        dataset: state::dataset(&s.data_dir)?,
        lineage: None,
        phase: Phase::Deciding,
    };
    let peers: Vec<Peer> = peers::fetch_all(client, &members.data, &s.host, s.manager_port).await;
    let sentinels: Vec<SentinelAnswer> = client::sentinel_masters(
        &members.sentinels,
        s.sentinel_port,
        &s.password,
        &members.master_name,
    )
    .await;
    Ok(Observation {
        me,
        peers,
        sentinels,
        waited: started.elapsed(),
        grace: s.grace,
        handover_refused: refused,
    })
}

async fn decide_loop(s: &Settings, shared: &Shared, client: &reqwest::Client) -> Result<Decision> {
    let started = Instant::now();
    let mut refused = false;
    let mut last_reason = String::new();
    loop {
        let o = observe(s, client, started, refused).await?;
        match decide::decide(&o) {
            Decision::Wait { reason } => {
                if reason != last_reason {
                    tracing::warn!(%reason, "not starting the server yet");
                    last_reason.clone_from(&reason);
                }
                shared.set_down(&reason).await;
                if let Some(r) = shared.report.write().await.as_mut() {
                    r.phase = Phase::Waiting { reason };
                }
                tokio::time::sleep(DECIDE_EVERY).await;
            }
            Decision::HandOver { why } => {
                tracing::info!(%why, "asking the sentinels to hand the primary role to a replica");
                let members = s.members()?;
                match switchover::sentinel_failover(s, &members, None).await {
                    Ok(new) => tracing::info!(primary = %new, "the sentinels handed the role over"),
                    Err(e) => {
                        tracing::warn!(error = %e, "the hand-over did not happen; deciding without it");
                        refused = true;
                    }
                }
            }
            d => {
                tracing::info!(decision = ?d, "decided");
                return Ok(d);
            }
        }
    }
}

/// Observes the running server until it fails: the record, the report, readiness, and (on a
/// primary) the sentinels.
async fn supervise(
    s: &Settings,
    shared: &Shared,
    client: &reqwest::Client,
    st: &mut State,
    aof_owed: &mut bool,
) -> Result<()> {
    let mut owed = AofWrite::default();
    let mut con = None;
    let mut primary_since: Option<Instant> = None;
    let mut last_claim: Option<Instant> = None;
    let mut last_save = Instant::now();
    loop {
        tokio::time::sleep(OBSERVE_EVERY).await;
        if con.is_none() {
            con = client::connect(local(s), s.port, &s.password).await.ok();
        }
        let Some(c) = con.as_mut() else {
            shared
                .set_down("the server does not accept connections yet")
                .await;
            continue;
        };
        let rep = match c.replication().await {
            Ok(r) => r,
            Err(e) => {
                // LOADING while a large dataset loads, or a dropped connection.
                shared.set_down(&e.to_string()).await;
                con = None;
                continue;
            }
        };
        record(s, st, &rep, &mut last_save)?;
        let role = if rep.is_master {
            Role::Primary
        } else {
            Role::Replica
        };
        let in_sync = rep.is_master || (rep.link_up && !rep.syncing);
        let aof_wait = if *aof_owed {
            match owe_aof(s, c, in_sync, &mut owed).await {
                Ok(None) => {
                    *aof_owed = false;
                    tracing::info!("the AOF is written: the volume loads from it from now on");
                    None
                }
                Ok(Some(reason)) => Some(reason),
                Err(e) => Some(e.to_string()),
            }
        } else {
            None
        };
        match aof_wait {
            Some(reason) => shared.set_ready(false, &reason).await,
            None => {
                shared
                    .set_ready(in_sync, "the replica's link to its primary is not up")
                    .await
            }
        }
        // After readiness, so that a caller told the server serves reads why it is not ready.
        shared
            .set_serving(in_sync, "the replica is not in sync with its primary")
            .await;
        if let Some(r) = shared.report.write().await.as_mut() {
            r.lineage = Some(st.lineage.clone());
            r.phase = Phase::Running {
                role,
                master: rep.master_host.clone(),
                link_up: rep.link_up,
            };
        }
        if rep.is_master {
            let since = *primary_since.get_or_insert_with(Instant::now);
            if last_claim.is_none_or(|t| t.elapsed() >= CLAIM_EVERY) {
                let members = s.members()?;
                let serving = since.elapsed();
                if let Some(which) =
                    switchover::which_to_correct(serving, rep.replicas.len(), &members.data)
                {
                    last_claim = Some(Instant::now());
                    switchover::correct_sentinels(s, &members, client, which).await;
                }
            }
        } else {
            primary_since = None;
        }
    }
}

/// The manager's side of the AOF a server started from its RDB owes.
#[derive(Default)]
struct AofWrite {
    /// When the last request to write it went out.
    asked: Option<Instant>,
    /// LZF was turned off for the write and is turned on again once it is done.
    lzf_off: bool,
}

/// One step of the AOF a server started from its RDB owes; `None` once it is written, otherwise
/// why the pod is not ready yet.
async fn owe_aof(
    s: &Settings,
    c: &mut client::Conn,
    in_sync: bool,
    owed: &mut AofWrite,
) -> Result<Option<String>> {
    let info: String = c.run(redis::cmd("INFO").arg("persistence")).await?;
    let progress = boot::aof_progress(&info);
    match boot::aof_step(&progress, in_sync, owed.asked.map(|t| t.elapsed())) {
        AofStep::Done => {
            if owed.lzf_off {
                // Before the pod may be ready: later saves and rewrites compress as configured.
                let _: redis::Value = c
                    .run(
                        redis::cmd("CONFIG")
                            .arg("SET")
                            .arg("rdbcompression")
                            .arg("yes"),
                    )
                    .await?;
                owed.lzf_off = false;
                tracing::info!("the AOF is written; LZF is on again");
            }
            Ok(None)
        }
        AofStep::Wait { ask, reason } => {
            if let Some(ask) = ask {
                owed.asked = Some(Instant::now());
                if !owed.lzf_off {
                    owed.lzf_off = lzf_off_for_the_write(s, c).await?;
                }
                let cmd = match ask {
                    AofAsk::TurnOn => {
                        let mut c = redis::cmd("CONFIG");
                        c.arg("SET").arg("appendonly").arg("yes");
                        c
                    }
                    AofAsk::Rewrite => redis::cmd("BGREWRITEAOF"),
                };
                tracing::info!(?ask, ?progress, "asking the server to write its AOF");
                let _: redis::Value = c.run(&cmd).await?;
            }
            Ok(Some(reason))
        }
    }
}

/// Turns LZF off for the AOF write where the configuration has it on and the volume has room
/// for the larger file ([`boot::aof_without_lzf`]); true if it did.
async fn lzf_off_for_the_write(s: &Settings, c: &mut client::Conn) -> Result<bool> {
    let conf: Vec<String> = c
        .run(redis::cmd("CONFIG").arg("GET").arg("rdbcompression"))
        .await?;
    if conf.get(1).is_none_or(|v| !v.eq_ignore_ascii_case("yes")) {
        return Ok(false);
    }
    let memory: String = c.run(redis::cmd("INFO").arg("memory")).await?;
    let used = client::info_field(&memory, "used_memory")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let vfs = nix::sys::statvfs::statvfs(&s.data_dir).map_err(|e| Error::Io {
        what: format!("reading the free space of {}", s.data_dir.display()),
        source: e.into(),
    })?;
    let free = vfs.blocks_available().saturating_mul(vfs.fragment_size());
    if !boot::aof_without_lzf(free, used) {
        tracing::info!(
            free_bytes = free,
            used_memory = used,
            "writing the AOF with LZF: the volume has too little room for it uncompressed"
        );
        return Ok(false);
    }
    let _: redis::Value = c
        .run(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("rdbcompression")
                .arg("no"),
        )
        .await?;
    tracing::info!(
        free_bytes = free,
        used_memory = used,
        "writing the AOF without LZF, which is most of its cost"
    );
    Ok(true)
}

/// Updates the record from what the server says; saved at most once a second, and whenever the
/// history or role changes.
fn record(s: &Settings, st: &mut State, rep: &Replication, last_save: &mut Instant) -> Result<()> {
    let role = Some(if rep.is_master {
        Role::Primary
    } else {
        Role::Replica
    });
    let mut changed = st.role != role;
    st.role = role;
    // A replica that is not in sync reports its own id (a random one after a start from the
    // AOF): recording it would claim a history nobody else shares. In sync, it carries its
    // primary's id.
    if !rep.is_master && (rep.syncing || !rep.link_up) {
        if changed {
            state::save(&s.data_dir, st)?;
        }
        return Ok(());
    }
    if let Some(live) = LiveIdentity::from_info(&rep.text) {
        let before = st.lineage.entries.len();
        let moved = st.lineage.observe(&live);
        changed |= st.lineage.entries.len() != before;
        if changed || (moved && last_save.elapsed() >= OBSERVE_EVERY) {
            state::save(&s.data_dir, st)?;
            *last_save = Instant::now();
        }
    } else if changed {
        state::save(&s.data_dir, st)?;
    }
    Ok(())
}

/// A planned stop: a primary hands its role to a caught-up replica first; then the server shuts
/// down (saving its RDB and syncing its AOF), and the record is written last.
async fn stop(
    s: &Settings,
    shared: &Shared,
    st: &mut State,
    child: &mut Child,
    aof_owed: bool,
) -> Result<()> {
    if let Some(r) = shared.report.write().await.as_mut() {
        r.phase = Phase::Stopping;
    }
    shared.set_down("stopping").await;
    let mut con = client::connect(local(s), s.port, &s.password).await.ok();
    if let Some(c) = con.as_mut()
        && let Ok(rep) = c.replication().await
    {
        if rep.is_master && !rep.replicas.is_empty() {
            match s.members() {
                Ok(m) if !m.sentinels.is_empty() => match switchover::hand_over(s, &m, c).await {
                    Ok(to) => {
                        tracing::info!(primary = %to, "handed the primary role over before stopping")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not hand the primary role over; stopping anyway")
                    }
                },
                _ => {}
            }
        }
        let mut last = Instant::now() - OBSERVE_EVERY;
        if let Ok(rep) = c.replication().await {
            record(s, st, &rep, &mut last)?;
        }
        // SHUTDOWN saves the RDB and syncs the AOF; the connection then drops, so its reply is
        // an error by design. Before its AOF is written, the RDB is all the next start loads,
        // so it is saved whatever the save points say.
        let mut shutdown = redis::cmd("SHUTDOWN");
        if aof_owed {
            shutdown.arg("SAVE");
        }
        let _: Result<()> = c.run(&shutdown).await;
    }
    match tokio::time::timeout(Duration::from_secs(20), child.wait()).await {
        Ok(Ok(status)) => tracing::info!(%status, "server stopped"),
        _ => {
            tracing::warn!("server did not stop in 20s; killing it");
            let _ = child.start_kill();
        }
    }
    state::save(&s.data_dir, st)?;
    Ok(())
}

fn local(s: &Settings) -> &str {
    s.bind.as_deref().unwrap_or("127.0.0.1")
}
