//! `cargo xtask bench scale`: the operator's control plane under many Clusters.
//!
//! The bed's API server, controllers and scheduler are real; the data pods are not. kwok (built
//! from its Go module, `sigs.k8s.io/kwok`) runs fake nodes that take every new pod while the real
//! node is cordoned, and moves pods to Running and Ready as a kubelet would. The operator is the
//! one deployed on the bed, unchanged, on the real node.
//!
//! The operator decides roles by asking each data server and sentinel (`ROLE`, `INFO`,
//! `SENTINEL get-master-addr-by-name`), so fake pods need real answers. kwok gives every pod one
//! of three addresses on the bed's node network by what it is (`bench_scale_stages.yaml`), and
//! real servers from the FalkorDB package answer there: a master, a replica of it, and a
//! sentinel that monitors every replicated Cluster's master under its name. So the operator runs
//! its production code end to end; no data is served, and none is the subject here.
//!
//! Some of the Clusters have volumes and are backed up, and new Clusters restore those Backups;
//! their Jobs' results are written by the bench (`bench_scale_data.rs`).
//!
//! Measured, in one run: the time from creating all Clusters to all `Running`; the operator's
//! peak and steady RSS (from `/proc`, leader process); reconcile latency p50 and p99 (from its
//! histogram, over creation and over the steady state); API requests and writes per minute at
//! steady state (from the bed's audit log, which records every request of the operator); and
//! the time to converge again after the operator process is killed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::run::stage;
use crate::testbed;

const KWOK_VERSION: &str = "v0.7.0";
const STAGES: &str = include_str!("bench_scale_stages.yaml");
/// The namespaces' label, so that a later run (or `--clean-only`) finds what a run made.
const BENCH_LABEL: &str = "lifeboat.io/bench=scale";
const MASTER_IP: &str = "10.200.0.201";
const REPLICA_IP: &str = "10.200.0.202";
const SENTINEL_IP: &str = "10.200.0.203";
/// The bed's node interface (testbed/scripts/common.sh).
const NODE_IF: &str = "lifeboat0";
const NODE_NAME_PREFIX: &str = "kwok-node-";
/// What the host servers accept before the Clusters' own passwords are added.
const BENCH_PASSWORD: &str = "bench-scale";

#[derive(clap::Args)]
pub struct ScaleBench {
    /// Clusters to create.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Namespaces they are spread across.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// Every n-th Cluster is a FalkorDB replication Cluster (2 data pods, 3 sentinels); the
    /// others are standalone Redis.
    #[arg(long, default_value_t = 3)]
    replication_every: usize,
    /// Clusters that get data volumes and one Backup each (one per namespace first), once all
    /// are Running.
    #[arg(long, default_value_t = 50)]
    backups: usize,
    /// Clusters created from those Backups (`spec.restore`), once the Backups completed.
    #[arg(long, default_value_t = 20)]
    restores: usize,
    /// Fake nodes kwok runs.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// How long the steady state is observed.
    #[arg(long, default_value_t = 120)]
    steady_seconds: u64,
    /// How long all Clusters may take to be Running.
    #[arg(long, default_value_t = 1800)]
    deadline_seconds: u64,
    /// Leave the Clusters, kwok and the servers running afterwards.
    #[arg(long)]
    keep: bool,
}

/// Processes that end with the value.
struct Procs(Vec<(String, Child)>);

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Undoes the bed changes of a run: the cordon, the host addresses, the fake nodes.
struct BedChanges {
    keep: bool,
}

impl Drop for BedChanges {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let _ = kubectl(&["uncordon", &real_node()]);
        for ip in [MASTER_IP, REPLICA_IP, SENTINEL_IP] {
            let _ = Command::new("ip")
                .args(["addr", "del", &format!("{ip}/32"), "dev", NODE_IF])
                .status();
        }
    }
}

use testbed::kubectl_quiet as kubectl;

fn kubectl_stdin(args: &[&str], input: &str) -> Result<String> {
    let mut child = testbed::kubectl_command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running kubectl")?;
    child
        .stdin
        .take()
        .context("kubectl stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn json(args: &[&str]) -> Result<serde_json::Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    Ok(serde_json::from_str(&kubectl(&a)?)?)
}

fn real_node() -> String {
    kubectl(&[
        "get",
        "nodes",
        "-l",
        "type!=kwok",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])
    .unwrap_or_default()
}

/// Builds kwok once into the cache, keyed by version.
fn kwok_bin() -> Result<PathBuf> {
    let dir = crate::paths::cache_dir()
        .join("tools")
        .join(format!("kwok-{KWOK_VERSION}"));
    let bin = dir.join("kwok");
    if !bin.exists() {
        std::fs::create_dir_all(&dir)?;
        crate::run::status(
            Command::new("go")
                .args([
                    "install",
                    &format!("sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}"),
                ])
                .env("GOBIN", &dir)
                .env("GOFLAGS", "-buildvcs=false"),
        )?;
    }
    Ok(bin)
}

fn wait_until(what: &str, deadline: Duration, mut f: impl FnMut() -> Result<bool>) -> Result<()> {
    let end = Instant::now() + deadline;
    let mut last = String::new();
    loop {
        match f() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > end {
            bail!(
                "{what}: not within {}s (last error: {last})",
                deadline.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Polls `f` every 2 s until it says done, tracking the leader's peak RSS; returns the seconds
/// since `t`. `f` answers (done, what it saw).
fn wait_for(
    deadline_seconds: u64,
    t: Instant,
    peak: &mut u64,
    pid: u32,
    mut f: impl FnMut() -> Result<(bool, String)>,
) -> Result<f64> {
    let end = t + Duration::from_secs(deadline_seconds);
    let mut last_print = Instant::now();
    loop {
        let (_, hwm) = rss(pid)?;
        *peak = (*peak).max(hwm);
        let (done, seen) = f()?;
        if done {
            return Ok(t.elapsed().as_secs_f64());
        }
        if last_print.elapsed() > Duration::from_secs(30) {
            eprintln!("  {:>5.0}s: {seen}", t.elapsed().as_secs_f64());
            last_print = Instant::now();
        }
        if Instant::now() > end {
            bail!("not within {deadline_seconds}s: {seen}");
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Deletes what an earlier run left: its namespaces (the operator tears their Clusters down,
/// kwok deletes the pods) and its fake nodes.
fn clean() -> Result<()> {
    let ns = kubectl(&[
        "get",
        "ns",
        "-l",
        BENCH_LABEL,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    let names: Vec<&str> = ns.split_whitespace().collect();
    if !names.is_empty() {
        eprintln!("deleting {} bench namespaces", names.len());
        let mut args = vec!["delete", "ns", "--wait=true", "--timeout=900s"];
        args.extend(names.iter().copied());
        kubectl(&args)?;
    }
    let _ = kubectl(&[
        "delete",
        "backuprepo",
        crate::bench_scale_data::REPO,
        "--ignore-not-found",
    ]);
    // The volumes go through the provisioner's helper pods on the fake nodes, which the
    // finisher completes: the nodes stay until then.
    let left = || -> Result<usize> {
        let v = json(&["get", "pv"])?;
        Ok(v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["spec"]["claimRef"]["namespace"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("scale-"))
            })
            .count())
    };
    if let Err(e) = wait_until(
        "the bench's volumes deleted",
        Duration::from_secs(300),
        || Ok(left()? == 0),
    ) {
        eprintln!("warning: {e:#}");
    }
    let _ = kubectl(&["delete", "nodes", "-l", "type=kwok", "--ignore-not-found"]);
    Ok(())
}

fn start_servers(work: &Path, fb: &Path) -> Result<Procs> {
    for ip in [MASTER_IP, REPLICA_IP, SENTINEL_IP] {
        let _ = Command::new("ip")
            .args(["addr", "add", &format!("{ip}/32"), "dev", NODE_IF])
            .status();
    }
    let server = fb.join("redis-server");
    let mut procs = Procs(Vec::new());
    let common = |ip: &str, port: &str, log: &str| -> Vec<String> {
        [
            "--bind",
            ip,
            "--port",
            port,
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxclients",
            "10000",
            "--logfile",
            &work.join(log).display().to_string(),
            "--dir",
            &work.display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut master = common(MASTER_IP, "6379", "master.log");
    master.extend(["--requirepass".into(), BENCH_PASSWORD.into()]);
    master.extend(["--dbfilename".into(), "master.rdb".into()]);
    procs.0.push((
        "master".into(),
        Command::new(&server)
            .args(&master)
            .spawn()
            .context("starting the master")?,
    ));
    let mut replica = common(REPLICA_IP, "6379", "replica.log");
    replica.extend([
        "--requirepass".into(),
        BENCH_PASSWORD.into(),
        "--masterauth".into(),
        BENCH_PASSWORD.into(),
        "--replicaof".into(),
        MASTER_IP.into(),
        "6379".into(),
        // Its connections to the master leave from the master's own address (both are local),
        // so unannounced it would be listed as a replica at the master's address.
        "--replica-announce-ip".into(),
        REPLICA_IP.into(),
        "--dbfilename".into(),
        "replica.rdb".into(),
    ]);
    procs.0.push((
        "replica".into(),
        Command::new(&server)
            .args(&replica)
            .spawn()
            .context("starting the replica")?,
    ));
    // The sentinel resolves the data pods' host names through a hosts file of its own, in a
    // mount namespace of its own, so the machine's /etc/hosts is not touched.
    let hosts = work.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n")?;
    let conf = work.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "bind {SENTINEL_IP}\nport 26379\ndir {}\nlogfile {}\nrequirepass {BENCH_PASSWORD}\n\
             sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n",
            work.display(),
            work.join("sentinel.log").display()
        ),
    )?;
    procs.0.push((
        "sentinel".into(),
        Command::new("unshare")
            .args(["-m", "sh", "-c"])
            .arg(format!(
                "mount --bind {} /etc/hosts && exec {} {} --sentinel",
                hosts.display(),
                server.display(),
                conf.display()
            ))
            .spawn()
            .context("starting the sentinel")?,
    ));
    for (ip, port) in [(MASTER_IP, 6379), (REPLICA_IP, 6379), (SENTINEL_IP, 26379)] {
        wait_until(
            &format!("the server on {ip}:{port}"),
            Duration::from_secs(30),
            || {
                let c = redis::Client::open(format!("redis://:{BENCH_PASSWORD}@{ip}:{port}/"))?;
                let mut con = c.get_connection()?;
                redis::cmd("PING").query::<String>(&mut con)?;
                Ok(true)
            },
        )?;
    }
    Ok(procs)
}

/// A bench Cluster. `volumes`: its data component gets a volume (a Backup needs one) and backs
/// up into the bench's repo; `restore_from`: it restores that Backup.
fn cluster_yaml(
    name: &str,
    ns: &str,
    replicated: bool,
    volumes: bool,
    restore_from: Option<&str>,
) -> String {
    let (def, topology, comp, replicas) = if replicated {
        ("falkordb", "replication", "falkordb", 2)
    } else {
        ("redis", "standalone", "redis", 1)
    };
    let mut y = format!(
        "apiVersion: apps.kubeblocks.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: {ns}\n  \
         labels:\n    lifeboat-bench: scale\nspec:\n  clusterDef: {def}\n  topology: {topology}\n  terminationPolicy: Delete\n"
    );
    if volumes || restore_from.is_some() {
        y.push_str(&format!(
            "  backup:\n    method: datafile\n    repoName: {}\n",
            crate::bench_scale_data::REPO
        ));
    }
    if let Some(b) = restore_from {
        y.push_str(&format!(
            "  restore:\n    source:\n      apiGroup: dataprotection.kubeblocks.io\n      kind: Backup\n      name: {b}\n    \
             parameters:\n      dataprotection.kubeblocks.io/volume-restore-policy: Parallel\n"
        ));
    }
    y.push_str(&format!(
        "  componentSpecs:\n    - name: {comp}\n      replicas: {replicas}\n"
    ));
    if volumes || restore_from.is_some() {
        y.push_str(
            "      volumeClaimTemplates:\n        - name: data\n          spec:\n            \
             accessModes: [ReadWriteOnce]\n            resources:\n              requests:\n                storage: 1Gi\n",
        );
    }
    if replicated {
        y.push_str("    - name: falkordb-sent\n      replicas: 3\n");
    }
    y.push_str("---\n");
    y
}

/// Adds every Cluster's password to the host servers, and has the sentinel monitor every
/// replicated Cluster's master under the name the operator asks for. Returns how many Clusters
/// are now answered for.
fn answer_for(
    clusters: &[(String, String, bool)],
    done: &mut std::collections::BTreeSet<String>,
    hosts: &Path,
) -> Result<usize> {
    let secrets = json(&[
        "get",
        "secrets",
        "-A",
        "-l",
        "app.kubernetes.io/managed-by=lifeboat",
    ])?;
    // Decoded only for the Clusters not yet answered for.
    let mut passwords = BTreeMap::new();
    for s in secrets["items"].as_array().into_iter().flatten() {
        let ns = s["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = s["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(p) = s["data"]["password"].as_str() {
            passwords.insert((ns.to_string(), name.to_string()), p.to_string());
        }
    }
    let con = |ip: &str, port: u16| -> Result<redis::Connection> {
        Ok(
            redis::Client::open(format!("redis://:{BENCH_PASSWORD}@{ip}:{port}/"))?
                .get_connection()?,
        )
    };
    let (mut master, mut replica, mut sentinel) = (
        con(MASTER_IP, 6379)?,
        con(REPLICA_IP, 6379)?,
        con(SENTINEL_IP, 26379)?,
    );
    let mut hosts_add = String::new();
    let mut monitors = Vec::new();
    for (ns, name, replicated) in clusters {
        let key = format!("{ns}/{name}");
        if done.contains(&key) {
            continue;
        }
        let comp = if *replicated { "falkordb" } else { "redis" };
        let Some(encoded) = passwords.get(&(ns.clone(), format!("{name}-{comp}-account-default")))
        else {
            continue;
        };
        let pw = String::from_utf8(BASE64.decode(encoded)?)?;
        for c in [&mut master, &mut replica, &mut sentinel] {
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("default")
                .arg(format!(">{pw}"))
                .query::<()>(c)?;
        }
        if *replicated {
            let fqdn = format!("{name}-{comp}-0.{name}-{comp}-headless.{ns}.svc.cluster.local");
            hosts_add.push_str(&format!("{MASTER_IP} {fqdn}\n"));
            monitors.push((format!("{name}-{comp}"), fqdn));
        }
        done.insert(key);
    }
    if !hosts_add.is_empty() {
        // Appended in place: the sentinel's bind mount follows the file, not its name.
        let mut f = std::fs::OpenOptions::new().append(true).open(hosts)?;
        f.write_all(hosts_add.as_bytes())?;
    }
    for (master_name, fqdn) in monitors {
        redis::cmd("SENTINEL")
            .arg("MONITOR")
            .arg(&master_name)
            .arg(&fqdn)
            .arg(6379)
            .arg(1)
            .query::<()>(&mut sentinel)
            .with_context(|| format!("sentinel monitor {master_name} {fqdn}"))?;
        // One server is every replicated Cluster's master: a failover of one would demote it
        // for all. Roles are not what this bench measures, so none is started.
        redis::cmd("SENTINEL")
            .arg("SET")
            .arg(&master_name)
            .arg("auth-pass")
            .arg(BENCH_PASSWORD)
            .arg("down-after-milliseconds")
            .arg(86_400_000)
            .query::<()>(&mut sentinel)?;
    }
    Ok(done.len())
}

/// Phases of the bench's Clusters.
fn phases() -> Result<BTreeMap<String, usize>> {
    let v = json(&[
        "get",
        "clusters.apps.kubeblocks.io",
        "-A",
        "-l",
        "lifeboat-bench=scale",
    ])?;
    let mut m = BTreeMap::new();
    for c in v["items"].as_array().into_iter().flatten() {
        let p = c["status"]["phase"]
            .as_str()
            .unwrap_or("(none)")
            .to_string();
        *m.entry(p).or_default() += 1;
    }
    Ok(m)
}

/// The leader operator: its pod, pod IP, and the host PID of its process.
struct Leader {
    pod: String,
    ip: String,
    pid: u32,
}

fn find_leader() -> Result<Leader> {
    let holder = kubectl(&[
        "get",
        "lease",
        "-n",
        "lifeboat-system",
        "-o",
        "jsonpath={.items[0].spec.holderIdentity}",
    ])?;
    let pod = holder.trim().to_string();
    let ip = kubectl(&[
        "get",
        "pod",
        "-n",
        "lifeboat-system",
        &pod,
        "-o",
        "jsonpath={.status.podIP}",
    ])?
    .trim()
    .to_string();
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with("lifeboat-operat") {
            continue;
        }
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let hostname =
            std::fs::read_to_string(e.path().join("root/etc/hostname")).unwrap_or_default();
        if hostname.trim() == pod
            || env
                .split(|b| *b == 0)
                .any(|kv| kv == format!("HOSTNAME={pod}").as_bytes())
        {
            return Ok(Leader { pod, ip, pid });
        }
    }
    bail!("no lifeboat-operator process of pod {pod} on this machine")
}

/// (VmRSS, VmHWM) in KiB.
pub(crate) fn rss(pid: u32) -> Result<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

fn metrics(ip: &str) -> Result<String> {
    let out = Command::new("curl")
        .args([
            "-sf",
            "--max-time",
            "10",
            &format!("http://{ip}:8080/metrics"),
        ])
        .output()?;
    if !out.status.success() {
        bail!("metrics of {ip} not served");
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Cluster controller's reconcile-duration histogram: (upper bound, cumulative count).
fn histogram(text: &str) -> Vec<(f64, f64)> {
    let mut v = Vec::new();
    for l in text.lines() {
        if !l.starts_with("lifeboat_reconcile_duration_seconds_bucket")
            || !l.contains("controller=\"cluster\"")
        {
            continue;
        }
        let le = l
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(|s| {
                if s == "+Inf" {
                    f64::INFINITY
                } else {
                    s.parse().unwrap_or(f64::NAN)
                }
            });
        let n = l.rsplit(' ').next().and_then(|n| n.parse().ok());
        if let (Some(le), Some(n)) = (le, n) {
            v.push((le, n));
        }
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// A quantile of the reconciles between two scrapes, as the bucket bound it falls under.
fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<(f64, f64)> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, n)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map(|(_, n)| *n)
                .unwrap_or(0.0);
            (*le, n - b)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    delta
        .iter()
        .find(|(_, n)| *n >= q * total)
        .map(|(le, _)| (*le, total))
}

/// The operator's audited requests from an audit-log offset on, with their times (Unix
/// seconds).
fn requests(since: u64) -> Result<Vec<(f64, serde_json::Value)>> {
    Ok(crate::rbac::operator_requests(since)?
        .into_iter()
        .filter_map(|ev| {
            let at = ev["requestReceivedTimestamp"]
                .as_str()?
                .parse::<jiff::Timestamp>()
                .ok()?;
            Some((at.as_millisecond() as f64 / 1000.0, ev))
        })
        .collect())
}

/// The operator's requests in `[from, to)`: (all, writes, requests by verb and resource: the
/// writes, and the Lease renewals apart).
fn audited(
    reqs: &[(f64, serde_json::Value)],
    from: f64,
    to: f64,
) -> (u64, u64, BTreeMap<String, u64>) {
    let (mut all, mut writes) = (0, 0);
    let mut by = BTreeMap::new();
    for (at, ev) in reqs {
        if !(*at >= from && *at < to) {
            continue;
        }
        all += 1;
        let verb = ev["verb"].as_str().unwrap_or_default();
        let r = &ev["objectRef"];
        if r["resource"].as_str() == Some("leases") && verb != "get" {
            *by.entry(format!("(leader election, not counted) {verb} leases"))
                .or_default() += 1;
        }
        if reconcile_write(ev) {
            writes += 1;
            *by.entry(format!(
                "{verb} {}{}",
                r["resource"].as_str().unwrap_or_default(),
                r["subresource"]
                    .as_str()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default()
            ))
            .or_default() += 1;
        }
    }
    (all, writes, by)
}

/// Whether an audited request is a write of the operator's reconciles. The leader-election
/// Lease's renewals (a patch every few seconds, whatever the Clusters do) are not: they are
/// reported apart.
fn reconcile_write(ev: &serde_json::Value) -> bool {
    matches!(
        ev["verb"].as_str().unwrap_or_default(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    ) && ev["objectRef"]["resource"].as_str() != Some("leases")
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub fn run(b: ScaleBench) -> Result<()> {
    let kwok = stage("kwok binary", kwok_bin)?;
    let fb = super::bench::falkordb_dir()?;
    let work = std::env::temp_dir().join("lifeboat-bench-scale");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let node = real_node();
    if node.is_empty() {
        bail!("no real node: is the bed up (`cargo xtask testbed up`) with Lifeboat deployed?");
    }
    let _changes = BedChanges { keep: b.keep };
    let mut procs = stage("host servers (master, replica, sentinel)", || {
        start_servers(&work, &fb)
    })?;
    // Before the clean-up of an earlier run, whose volumes need it too.
    let finisher = crate::bench_scale_data::Finisher::start();
    stage("kwok and its fake nodes", || {
        let stages = work.join("stages.yaml");
        std::fs::write(&stages, STAGES)?;
        let log = std::fs::File::create(work.join("kwok.log"))?;
        procs.0.push((
            "kwok".into(),
            Command::new(&kwok)
                .arg("--kubeconfig")
                .arg(testbed::kubeconfig_path())
                .arg("--config")
                .arg(&stages)
                .args([
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--node-lease-duration-seconds=40",
                    "--server-address=127.0.0.1:10247",
                ])
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("starting kwok")?,
        ));
        let mut nodes = String::new();
        for i in 0..b.nodes {
            nodes.push_str(&format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE_NAME_PREFIX}{i}\n  annotations:\n    \
                 kwok.x-k8s.io/node: fake\n    node.alpha.kubernetes.io/ttl: \"0\"\n  labels:\n    type: kwok\n    \
                 kubernetes.io/hostname: {NODE_NAME_PREFIX}{i}\n    kubernetes.io/os: linux\n    kubernetes.io/arch: amd64\n---\n"
            ));
        }
        kubectl_stdin(&["apply", "-f", "-"], &nodes)?;
        // New pods go to the fake nodes only; the operator's own pods stay where they run.
        kubectl(&["cordon", &node])?;
        // An earlier run's pods are on fake nodes: only a running kwok lets them go.
        stage("clean an earlier run", clean)?;
        kubectl_stdin(&["apply", "-f", "-"], &nodes)?;
        wait_until("fake nodes Ready", Duration::from_secs(120), || {
            let v = json(&["get", "nodes", "-l", "type=kwok"])?;
            let ready = v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|n| {
                    n["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
                .count();
            Ok(ready == b.nodes)
        })
    })?;

    let mut leader = find_leader()?;
    let (rss0, _) = rss(leader.pid)?;
    let mut clusters = Vec::new();
    let mut yaml = String::new();
    for n in 0..b.namespaces {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scale-{n:02}\n  labels:\n    lifeboat.io/bench: scale\n---\n"
        ));
    }
    for i in 0..b.clusters {
        let ns = format!("scale-{:02}", i % b.namespaces);
        let replicated = b.replication_every > 0 && i % b.replication_every == 0;
        let name = format!("c{i:04}");
        yaml.push_str(&cluster_yaml(&name, &ns, replicated, i < b.backups, None));
        clusters.push((ns, name, replicated));
    }
    let replicated = clusters.iter().filter(|c| c.2).count();
    if b.backups > 0 {
        kubectl_stdin(&["apply", "-f", "-"], &crate::bench_scale_data::repo_yaml())?;
    }
    let hist0 = histogram(&metrics(&leader.ip)?);
    let t_create = Instant::now();
    stage(
        &format!(
            "create {} Clusters in {} namespaces",
            b.clusters, b.namespaces
        ),
        || kubectl_stdin(&["apply", "--server-side", "-f", "-"], &yaml).map(|_| ()),
    )?;
    let mut answered = std::collections::BTreeSet::new();
    let mut peak = 0u64;
    let mut last_print = Instant::now();
    let to_running = stage("all Clusters Running", || {
        let end = Instant::now() + Duration::from_secs(b.deadline_seconds);
        loop {
            if answered.len() < clusters.len() {
                answer_for(&clusters, &mut answered, &work.join("hosts"))?;
            }
            let (_, hwm) = rss(leader.pid)?;
            peak = peak.max(hwm);
            let p = phases()?;
            let running = p.get("Running").copied().unwrap_or(0);
            if running == b.clusters {
                return Ok(t_create.elapsed().as_secs_f64());
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                eprintln!(
                    "  {:>5.0}s: phases {p:?}; passwords answered for {}",
                    t_create.elapsed().as_secs_f64(),
                    answered.len()
                );
                last_print = Instant::now();
            }
            if Instant::now() > end {
                bail!("not all Running within {}s: {p:?}", b.deadline_seconds);
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    })?;
    let hist1 = histogram(&metrics(&leader.ip)?);

    let backups: Vec<(String, String, bool)> = clusters
        .iter()
        .take(b.backups)
        .map(|(ns, name, rep)| (ns.clone(), format!("{name}-backup"), *rep))
        .collect();
    let to_completed = if backups.is_empty() {
        None
    } else {
        let mut yaml = String::new();
        for ((ns, bk, rep), (_, name, _)) in backups.iter().zip(&clusters) {
            let comp = if *rep { "falkordb" } else { "redis" };
            yaml.push_str(&format!(
                "apiVersion: dataprotection.kubeblocks.io/v1alpha1\nkind: Backup\nmetadata:\n  name: {bk}\n  \
                 namespace: {ns}\n  labels:\n    lifeboat-bench: scale\nspec:\n  backupPolicyName: {name}-{comp}-backup-policy\n  \
                 backupMethod: datafile\n  deletionPolicy: Retain\n---\n"
            ));
        }
        let t = Instant::now();
        kubectl_stdin(&["apply", "-f", "-"], &yaml)?;
        Some(stage(
            &format!("{} Backups Completed", backups.len()),
            || {
                wait_for(b.deadline_seconds, t, &mut peak, leader.pid, || {
                    let v = json(&[
                        "get",
                        "backups.dataprotection.kubeblocks.io",
                        "-A",
                        "-l",
                        "lifeboat-bench=scale",
                    ])?;
                    let mut m: BTreeMap<String, usize> = BTreeMap::new();
                    for x in v["items"].as_array().into_iter().flatten() {
                        let phase = x["status"]["phase"].as_str().unwrap_or("(none)");
                        if phase == "Failed" {
                            bail!(
                                "Backup {}/{} failed: {}",
                                x["metadata"]["namespace"].as_str().unwrap_or_default(),
                                x["metadata"]["name"].as_str().unwrap_or_default(),
                                x["status"]["failureReason"].as_str().unwrap_or_default()
                            );
                        }
                        *m.entry(phase.to_owned()).or_default() += 1;
                    }
                    Ok((m.get("Completed") == Some(&backups.len()), format!("{m:?}")))
                })
            },
        )?)
    };
    let restores = b.restores.min(backups.len());
    let to_restored = if restores == 0 {
        None
    } else {
        let mut yaml = String::new();
        for (k, (ns, bk, rep)) in backups.iter().take(restores).enumerate() {
            let name = format!("r{k:03}");
            yaml.push_str(&cluster_yaml(&name, ns, *rep, true, Some(bk)));
            clusters.push((ns.clone(), name, *rep));
        }
        let t = Instant::now();
        kubectl_stdin(&["apply", "--server-side", "-f", "-"], &yaml)?;
        let total = clusters.len();
        Some(stage(
            &format!("{restores} restoring Clusters Running"),
            || {
                wait_for(b.deadline_seconds, t, &mut peak, leader.pid, || {
                    answer_for(&clusters, &mut answered, &work.join("hosts"))?;
                    let p = phases()?;
                    Ok((p.get("Running") == Some(&total), format!("{p:?}")))
                })
            },
        )?)
    };
    let total = clusters.len();

    // Steady state: nothing changes; the operator keeps following roles.
    let since = crate::rbac::mark();
    let settle = Duration::from_secs(30);
    std::thread::sleep(settle);
    let from = unix_now();
    let hist_s0 = histogram(&metrics(&leader.ip)?);
    let mut steady_rss = Vec::new();
    let t_steady = Instant::now();
    while t_steady.elapsed() < Duration::from_secs(b.steady_seconds) {
        let (r, hwm) = rss(leader.pid)?;
        steady_rss.push(r);
        peak = peak.max(hwm);
        std::thread::sleep(Duration::from_secs(5));
    }
    let to = unix_now();
    let hist_s1 = histogram(&metrics(&leader.ip)?);
    let (all, writes, by) = audited(&requests(since)?, from, to);
    let minutes = (to - from) / 60.0;
    let still = phases()?;

    // Restart: the leader's process is killed; the kubelet restarts it in the same pod on the
    // real node (or the other replica takes the lease). Converged: every Cluster Running, the
    // new leader has reconciled at least as many times as there are Clusters, and no write for
    // 15 s. The figure is the time from the kill to its last write (to the moment the reconcile
    // count was reached, if it wrote nothing).
    let since_r = crate::rbac::mark();
    let t_kill = unix_now();
    Command::new("kill")
        .args(["-9", &leader.pid.to_string()])
        .status()?;
    let convergence = stage("converge after the operator restarts", || {
        let end = Instant::now() + Duration::from_secs(600);
        let mut counted_at = None;
        let mut seen = String::from("no new leader process yet");
        let mut last_print = Instant::now();
        loop {
            std::thread::sleep(Duration::from_secs(2));
            if Instant::now() > end {
                bail!("no convergence within 600 s; last seen: {seen}");
            }
            if last_print.elapsed() > Duration::from_secs(30) {
                eprintln!("  {:>5.0}s after the kill: {seen}", unix_now() - t_kill);
                last_print = Instant::now();
            }
            let l = match find_leader() {
                Ok(l) => l,
                Err(e) => {
                    seen = format!("no leader: {e:#}");
                    continue;
                }
            };
            if l.pid == leader.pid {
                seen = format!("the leader is still the killed process {}", l.pid);
                continue;
            }
            let text = match metrics(&l.ip) {
                Ok(t) => t,
                Err(e) => {
                    seen = format!("leader {} (pid {}): {e:#}", l.pod, l.pid);
                    continue;
                }
            };
            let reconciled = text
                .lines()
                .find(|x| x.starts_with("lifeboat_reconciles_total{controller=\"cluster\"}"))
                .and_then(|x| x.rsplit(' ').next())
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or(0.0);
            seen = format!("leader {} (pid {}) reconciled {reconciled}", l.pod, l.pid);
            if reconciled < total as f64 {
                continue;
            }
            let now = unix_now();
            let counted = *counted_at.get_or_insert(now);
            let reqs = requests(since_r)?;
            let (_, w_recent, _) = audited(&reqs, now - 15.0, now);
            let p = phases()?;
            seen = format!("{seen}; {w_recent} writes in the last 15 s; phases {p:?}");
            if w_recent > 0 || now - counted < 15.0 || p.get("Running") != Some(&total) {
                continue;
            }
            // The last write since the kill, or the moment the reconcile count was reached.
            let writes: Vec<f64> = reqs
                .iter()
                .filter(|(at, ev)| *at >= t_kill && reconcile_write(ev))
                .map(|(at, _)| *at)
                .collect();
            let last = writes.iter().copied().reduce(f64::max).unwrap_or(counted);
            return Ok((last - t_kill, writes.len() as u64, l));
        }
    });
    let (conv_secs, conv_writes, new_leader) = convergence?;
    leader = new_leader;
    let (rss_after, _) = rss(leader.pid)?;

    let mut r = String::new();
    let mut line = |s: String| {
        r.push_str(&s);
        r.push('\n');
    };
    line(format!(
        "workload: {} Clusters in {} namespaces ({} FalkorDB replication with 2 data pods and 3 \
         sentinels, {} Redis standalone); {} fake nodes; leader {}",
        b.clusters,
        b.namespaces,
        replicated,
        b.clusters - replicated,
        b.nodes,
        leader.pod
    ));
    line(format!(
        "operator RSS before creating: {:.1} MiB",
        rss0 as f64 / 1024.0
    ));
    line(format!("create all -> all Running: {to_running:.1} s"));
    if let Some(t) = to_completed {
        line(format!(
            "{} Backups (one per Cluster with volumes) created -> all Completed: {t:.1} s",
            backups.len()
        ));
    }
    if let Some(t) = to_restored {
        line(format!(
            "{restores} Clusters restoring those Backups created -> all Running: {t:.1} s; \
             pods completed by the bench (Job pods and volume helpers): {}",
            finisher.completed()
        ));
    }
    let steady = steady_rss.iter().copied().max().unwrap_or(0);
    line(format!(
        "operator RSS: peak {:.1} MiB, steady max {:.1} MiB  (target < 100 MiB: {})",
        peak as f64 / 1024.0,
        steady as f64 / 1024.0,
        if peak < 100 * 1024 { "MET" } else { "MISSED" }
    ));
    for (what, a, b2) in [
        ("creation", &hist0, &hist1),
        ("steady state", &hist_s0, &hist_s1),
    ] {
        let p50 = quantile(a, b2, 0.5);
        let p99 = quantile(a, b2, 0.99);
        line(format!(
            "reconcile latency, {what}: p50 <= {} s, p99 <= {} s over {} reconciles",
            p50.map(|x| x.0.to_string()).unwrap_or("-".into()),
            p99.map(|x| x.0.to_string()).unwrap_or("-".into()),
            p50.map(|x| x.1).unwrap_or(0.0)
        ));
    }
    line(format!(
        "steady state ({:.1} min): {:.0} requests/min, {:.1} writes/min  (target 0 writes: {})",
        minutes,
        all as f64 / minutes,
        writes as f64 / minutes,
        if writes == 0 { "MET" } else { "MISSED" }
    ));
    for (k, n) in &by {
        line(format!("  steady-state write: {n:>6}  {k}"));
    }
    line(format!("phases at the end of the steady state: {still:?}"));
    line(format!(
        "restart convergence: {conv_secs:.1} s ({conv_writes} writes)  (target < 60 s: {}); RSS after {:.1} MiB",
        if conv_secs < 60.0 { "MET" } else { "MISSED" },
        rss_after as f64 / 1024.0
    ));
    std::io::stdout().lock().write_all(r.as_bytes())?;
    if !b.keep {
        stage("clean up", clean)?;
        drop(procs);
    }
    drop(finisher);
    Ok(())
}
