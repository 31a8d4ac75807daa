//! The field report's scenario, shared by the restore tests and `lifeboat-demo`: a FalkorDB
//! replication Cluster with data, a `datafile` Backup into a repo, and a Cluster restored from it,
//! watched throughout for any moment where Lifeboat would lie.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, RestorePhase};
use lifeboat_api::{Backup, BackupPolicy, BackupRepo, Cluster, ClusterPhase, Restore, labels};
use serde_json::{Value, json};

use crate::lifeboat::*;
use crate::{TestNamespace, poll};

/// How long a Backup may take on the bed.
pub const BACKUP_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a restore may take on the bed.
pub const RESTORE_TIMEOUT: Duration = Duration::from_secs(600);

/// Creates (or keeps) a cluster-scoped `pvc` BackupRepo and waits until it is Ready. The repo is
/// not marked default: Backups that use it name it in their BackupPolicy, so that what they do
/// does not depend on which other repos the bed holds. An existing repo of this name that is
/// marked default (by an older run, or a test killed while it owned the default) is unmarked.
pub async fn pvc_repo(client: &Client, name: &str) -> Result<BackupRepo> {
    let api: Api<BackupRepo> = Api::all(client.clone());
    match api.get_opt(name).await? {
        None => {
            let repo: BackupRepo = serde_json::from_value(json!({
                "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
                "kind": "BackupRepo",
                "metadata": {"name": name},
                "spec": {
                    "storageProviderRef": "pvc",
                    "pvReclaimPolicy": "Delete",
                    "volumeCapacity": "5Gi",
                    "config": {"accessMode": "ReadWriteOnce"}
                }
            }))?;
            api.create(&PostParams::default(), &repo)
                .await
                .with_context(|| format!("creating BackupRepo {name}"))?;
        }
        Some(r) if is_marked_default(&r) => set_default(client, name, false).await?,
        Some(_) => {}
    }
    poll(
        &format!("BackupRepo {name} to be Ready"),
        Duration::from_secs(60),
        || async {
            let r = api.get(name).await?;
            let st = r.status.clone().unwrap_or_default();
            Ok(
                if st.phase == Some(lifeboat_api::dataprotection::v1alpha1::BackupRepoPhase::Ready)
                {
                    Ok(r)
                } else {
                    Err(format!("{:?}: {:?}", st.phase, st.message))
                },
            )
        },
    )
    .await
}

/// Whether BackupRepo `r` carries the default-repo annotation.
pub fn is_marked_default(r: &BackupRepo) -> bool {
    r.annotations()
        .get(labels::DEFAULT_REPO)
        .map(String::as_str)
        == Some("true")
}

/// Marks BackupRepo `name` default, or removes the mark.
pub async fn set_default(client: &Client, name: &str, on: bool) -> Result<()> {
    let api: Api<BackupRepo> = Api::all(client.clone());
    // A JSON merge patch with null removes the annotation rather than leaving "false" behind.
    let value = if on { json!("true") } else { Value::Null };
    let patch = json!({"metadata": {"annotations": {(labels::DEFAULT_REPO): value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| {
            format!(
                "{} BackupRepo {name}",
                if on {
                    "marking default"
                } else {
                    "unmarking default"
                }
            )
        })?;
    Ok(())
}

/// The BackupRepos marked default, by name.
pub async fn default_repos(client: &Client) -> Result<Vec<String>> {
    let api: Api<BackupRepo> = Api::all(client.clone());
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .context("listing BackupRepos")?
        .items
        .iter()
        .filter(|r| is_marked_default(r))
        .map(|r| r.name_any())
        .collect();
    names.sort();
    Ok(names)
}

/// The default repo, held by a test for its duration. Taking it fails, naming them, when another
/// repo is marked default: the test cannot know whose that is, and unmarking it would change a
/// bed it does not own. Call [`OwnedDefault::release`] on every path out of the test.
pub struct OwnedDefault {
    client: Client,
    name: String,
}

impl OwnedDefault {
    /// Marks `name` (a repo the test owns) default, after checking no other repo is.
    pub async fn take(client: &Client, name: &str) -> Result<Self> {
        let others: Vec<String> = default_repos(client)
            .await?
            .into_iter()
            .filter(|n| n != name)
            .collect();
        ensure!(
            others.is_empty(),
            "this test needs to own the default BackupRepo, but {} marked default; unmark it ({}) or run the test on a bed without one",
            if others.len() == 1 {
                format!("BackupRepo {} is", others[0])
            } else {
                format!("BackupRepos {} are", others.join(", "))
            },
            format_args!(
                "kubectl annotate backuprepo {} {}-",
                others.join(" "),
                labels::DEFAULT_REPO
            )
        );
        set_default(client, name, true).await?;
        Ok(Self {
            client: client.clone(),
            name: name.to_owned(),
        })
    }

    /// Removes the mark again.
    pub async fn release(self) -> Result<()> {
        set_default(&self.client, &self.name, false).await
    }
}

/// What a test wrote, to compare after the restore.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Keys per database index.
    pub keys: BTreeMap<u32, u64>,
    /// The rows of the graph query, as redis-cli prints them.
    pub graph_rows: String,
}

/// The query whose rows must come back identical.
pub const GRAPH_QUERY: &str = "GRAPH.RO_QUERY social \"MATCH (a:Person)-[:KNOWS]->(b:Person) RETURN a.name, b.name ORDER BY a.name, b.name\"";

/// Keys written per server-side script call.
const WRITE_BATCH: u64 = 2000;

/// Writes `per_db` keys into databases 0, 1 and 2 (with `value_bytes` each) and a small graph,
/// through the primary.
pub async fn write_dataset(
    ns: &TestNamespace,
    cluster: &str,
    per_db: u64,
    value_bytes: usize,
) -> Result<Written> {
    let pods: Api<Pod> = ns.api();
    let primary = poll("one primary label", Duration::from_secs(60), || {
        primary_pod(ns, cluster)
    })
    .await?;
    let mut written = Written::default();
    for db in 0u32..3 {
        // Server-side loops: fast, and need no DEBUG command. Values are SHA-1 hex chains, so
        // neither the RDB's LZF nor zstd can shrink them to nothing (about 2:1, like real data
        // rather than runs of one byte). Batches keep each script well under the busy-script
        // threshold, past which sentinel would try to kill it and fail over.
        let script = format!(
            "\"local n=math.ceil(tonumber(ARGV[3])/40) for i=tonumber(ARGV[1]),tonumber(ARGV[2]) do local p={{}} for j=1,n do p[j]=redis.sha1hex(i..':'..j) end redis.call('SET', 'db{db}:'..i, string.sub(table.concat(p),1,tonumber(ARGV[3]))) end return 1\""
        );
        let mut first = 1;
        while first <= per_db {
            let last = (first + WRITE_BATCH - 1).min(per_db);
            redis_cli(
                &pods,
                &primary,
                &format!("-n {db} EVAL {script} 0 {first} {last} {value_bytes}"),
            )
            .await?;
            first = last + 1;
        }
    }
    redis_cli(
        &pods,
        &primary,
        "GRAPH.QUERY social \"UNWIND range(1, 50) AS i CREATE (:Person {name: 'p' + toString(i)})-[:KNOWS]->(:Person {name: 'q' + toString(i)})\"",
    )
    .await?;
    written.graph_rows = graph_rows(&redis_cli(&pods, &primary, GRAPH_QUERY).await?);
    // What the source holds now is what a restore must give back, key for key. FalkorDB adds a
    // `telemetry{<graph>}` stream beside a graph, asynchronously, after queries; it is not data
    // (the mover's fingerprint leaves it out too), so keys are counted without it.
    for db in 0u32..3 {
        written
            .keys
            .insert(db, data_keys(&pods, &primary, db).await?);
    }
    ensure!(
        written.graph_rows.contains("p1"),
        "graph query returned no rows: {}",
        written.graph_rows
    );
    Ok(written)
}

/// The rows of a `GRAPH.QUERY` reply as redis-cli prints them, without the statistics lines
/// (execution time, cache use) that differ from run to run.
pub fn graph_rows(reply: &str) -> String {
    reply
        .lines()
        .filter(|l| {
            !l.starts_with("Cached execution") && !l.starts_with("Query internal execution time")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Keys in database `db` of a server, without FalkorDB's telemetry streams.
pub async fn data_keys(pods: &Api<Pod>, pod: &str, db: u32) -> Result<u64> {
    let script = "\"local n = 0 for _, k in ipairs(redis.call('KEYS', '*')) do if not string.find(k, 'telemetry{', 1, true) then n = n + 1 end end return n\"";
    let out = redis_cli(pods, pod, &format!("-n {db} EVAL {script} 0")).await?;
    out.trim()
        .parse()
        .with_context(|| format!("counting keys of db{db} on {pod}: {out:?}"))
}

/// Checks that a Completed Backup recorded the keys a test wrote, database by database, and the
/// test's graph. An empty or partial backup is caught here, where it was taken, rather than later
/// as a restore that "lost" data it never had.
pub fn ensure_backup_holds(b: &Backup, written: &Written) -> Result<()> {
    let name = b.metadata.name.clone().unwrap_or_default();
    let fp = b
        .status
        .as_ref()
        .and_then(|s| s.dataset.as_ref())
        .map(|d| d.fingerprint.clone())
        .with_context(|| format!("Backup {name} recorded no dataset fingerprint"))?;
    let recorded: BTreeMap<u32, u64> = fp
        .keys
        .iter()
        .filter_map(|(db, n)| Some((db.parse().ok()?, u64::try_from(*n).ok()?)))
        .collect();
    ensure!(
        recorded == written.keys,
        "Backup {name} recorded keys per database {recorded:?}, but the test wrote {:?}",
        written.keys
    );
    ensure!(
        fp.graphs
            .iter()
            .any(|g| g.name == "social" && g.nodes == 100 && g.edges == 50),
        "Backup {name} recorded graphs {:?}, not the test's social graph of 100 nodes and 50 edges",
        fp.graphs
    );
    Ok(())
}

/// The name of the BackupPolicy [`backup`] makes for `cluster`'s Backups into `repo`.
pub fn repo_policy(cluster: &str, repo: &str) -> String {
    format!("{cluster}-to-{repo}")
}

/// Takes a `datafile` Backup of `cluster` into BackupRepo `repo` and waits until it is
/// Completed. The repo is named in a BackupPolicy of its own, `<cluster>-to-<repo>` (made on first
/// use), rather than left to whichever repo is the default; the Backup must record that repo.
pub async fn backup(ns: &TestNamespace, cluster: &str, name: &str, repo: &str) -> Result<Backup> {
    let policy = repo_policy(cluster, repo);
    let policies: Api<BackupPolicy> = ns.api();
    if policies.get_opt(&policy).await?.is_none() {
        policy_for_repo(ns, cluster, &policy, repo).await?;
    }
    let b = backup_with(ns, name, &policy, "Delete").await?;
    let recorded = b.status.as_ref().and_then(|s| s.backup_repo_name.clone());
    ensure!(
        recorded.as_deref() == Some(repo),
        "Backup {name} under BackupPolicy {policy} went to BackupRepo {recorded:?}, not {repo}"
    );
    Ok(b)
}

/// Takes a `datafile` Backup under BackupPolicy `policy` and waits until it is Completed.
pub async fn backup_with(
    ns: &TestNamespace,
    name: &str,
    policy: &str,
    deletion_policy: &str,
) -> Result<Backup> {
    create_backup(ns, name, policy, deletion_policy).await?;
    wait_backup(ns, name, BackupPhase::Completed, BACKUP_TIMEOUT).await
}

/// Creates a `datafile` Backup under BackupPolicy `policy`, without waiting.
pub async fn create_backup(
    ns: &TestNamespace,
    name: &str,
    policy: &str,
    deletion_policy: &str,
) -> Result<Backup> {
    ns.create::<Backup>(json!({
        "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name},
        "spec": {"backupPolicyName": policy, "backupMethod": "datafile", "deletionPolicy": deletion_policy}
    }))
    .await
}

/// Waits until Backup `name` is gone from the API (its finalizers done), printing its phase
/// while it is not.
pub async fn wait_backup_gone(ns: &TestNamespace, name: &str, timeout: Duration) -> Result<()> {
    let api: Api<Backup> = ns.api();
    poll(&format!("Backup {name} to be deleted"), timeout, || async {
        Ok(match api.get_opt(name).await? {
            None => Ok(()),
            Some(b) => Err(format!("still there: {:?}", b.status.and_then(|s| s.phase))),
        })
    })
    .await
}

/// Waits until Backup `name` reaches the terminal phase `want`; fails at once, with the Backup's
/// failure reason, when it reaches the other one.
pub async fn wait_backup(
    ns: &TestNamespace,
    name: &str,
    want: BackupPhase,
    timeout: Duration,
) -> Result<Backup> {
    let api: Api<Backup> = ns.api();
    poll(
        &format!("Backup {name} to be {want:?}"),
        timeout,
        || async {
            let b = api.get(name).await?;
            let st = b.status.clone().unwrap_or_default();
            match st.phase {
                Some(p) if p == want => Ok(Ok(b)),
                Some(p @ (BackupPhase::Completed | BackupPhase::Failed)) => Err(anyhow::anyhow!(
                    "Backup {name} is {p:?}, not {want:?}: {}",
                    st.failure_reason.unwrap_or_default()
                )),
                p => Ok(Err(format!("phase {p:?}"))),
            }
        },
    )
    .await
}

/// How a restored Cluster asks for its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `spec.restore`.
    Spec,
    /// The deprecated annotation.
    Annotation,
}

/// A user-written BackupPolicy `name` for `cluster`'s data component: the default one's target
/// and method, storing into BackupRepo `repo`.
pub async fn policy_for_repo(
    ns: &TestNamespace,
    cluster: &str,
    name: &str,
    repo: &str,
) -> Result<BackupPolicy> {
    policy_from_default(ns, cluster, name, |spec| {
        spec["backupRepoName"] = json!(repo)
    })
    .await
}

/// A user-written BackupPolicy `name`: a copy of `cluster`'s default policy spec, changed by
/// `edit`.
pub async fn policy_from_default(
    ns: &TestNamespace,
    cluster: &str,
    name: &str,
    edit: impl FnOnce(&mut Value),
) -> Result<BackupPolicy> {
    let api: Api<BackupPolicy> = ns.api();
    let default = poll(
        &format!("the default BackupPolicy of {cluster}"),
        Duration::from_secs(60),
        || async {
            Ok(api
                .get_opt(&format!("{cluster}-falkordb-backup-policy"))
                .await?
                .ok_or_else(|| "not created yet".to_string()))
        },
    )
    .await?;
    let mut spec = serde_json::to_value(&default.spec)?;
    edit(&mut spec);
    ns.create::<BackupPolicy>(json!({
        "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
        "kind": "BackupPolicy",
        "metadata": {"name": name},
        "spec": spec
    }))
    .await
}

/// The field report's restored Cluster, asking for `backup` through `entry`.
pub fn restored_cluster(
    name: &str,
    ns: &str,
    backup: &str,
    entry: Entry,
    policy: &str,
    data: i32,
) -> Value {
    let mut m = falkordb_cluster(name, "Delete", data);
    match entry {
        Entry::Spec => {
            m["spec"]["restore"] = json!({
                "source": {"apiGroup": "dataprotection.kubeblocks.io", "kind": "Backup", "name": backup, "namespace": ns},
                "parameters": {"dataprotection.kubeblocks.io/volume-restore-policy": policy}
            });
        }
        Entry::Annotation => {
            let a = json!({"falkordb": {"name": backup, "namespace": ns, "volumeRestorePolicy": policy}});
            m["metadata"]["annotations"] =
                json!({"kubeblocks.io/restore-from-backup": a.to_string()});
        }
    }
    m
}

/// Watches a restoring Cluster and records every moment it lies: a data pod that became Ready
/// before its Restore completed, or the Cluster `Running` while its Restore is not `Completed`.
///
/// Readiness is judged by time, not by order of arrival: a pod's `Ready` condition carries the
/// time it turned true, the Restore its completion time, and a pod is a lie when the first is
/// earlier (or the Restore has none). Only this Cluster's own are judged: a Restore it controls,
/// and pods made since it was created. A Cluster deleted and created again under its name leaves
/// pods behind that stay Ready while they terminate, and they are not this restore's. A watch
/// that saw nothing of this Cluster, or failed, fails the check: it proves nothing either way.
pub struct LieWatcher {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default, Clone)]
struct Seen {
    events: usize,
    /// Events of pods made before the watched Cluster: an earlier Cluster's of the same name.
    earlier: usize,
    /// Of those, the pods that were Ready: judged as this Cluster's, they would be lies.
    earlier_ready: std::collections::BTreeSet<String>,
    violations: Vec<String>,
    errors: Vec<String>,
}

/// When a pod's `Ready` condition last turned true, if it is true.
fn ready_since(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

/// Whether a pod created at `pod_created` belongs to the Cluster created at `cluster_created`,
/// not to an earlier Cluster of the same name: it was made no earlier than the Cluster
/// (timestamps have whole seconds, and a StatefulSet's pods come after its Cluster). With no
/// Cluster, no pod is its.
fn of_this_life(pod_created: Option<Timestamp>, cluster_created: Option<Timestamp>) -> bool {
    match (pod_created, cluster_created) {
        (Some(pod), Some(cluster)) => pod >= cluster,
        _ => false,
    }
}

/// Whether a pod Ready since `ready` lies about a Restore completed at `completed`: it does
/// unless the Restore had completed by then (timestamps have whole seconds).
pub fn ready_before_verified(ready: Timestamp, completed: Option<Timestamp>) -> bool {
    completed.is_none_or(|c| ready < c)
}

impl LieWatcher {
    /// Starts watching Cluster `cluster` in `ns`.
    pub fn start(client: Client, ns: &str, cluster: &str) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let v = seen.clone();
        let (ns, cluster) = (ns.to_owned(), cluster.to_owned());
        let task = tokio::spawn(async move {
            let restores: Api<Restore> = Api::namespaced(client.clone(), &ns);
            let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let restore_name = format!("{cluster}-falkordb-restore");
            let sel = format!(
                "app.kubernetes.io/instance={cluster},apps.kubeblocks.io/component-name=falkordb"
            );
            let pod_events = watcher(pods, watcher::Config::default().labels(&sel))
                .applied_objects()
                .map(|e| e.map(|p| Either::Pod(Box::new(p))));
            let cluster_events = watcher(
                clusters.clone(),
                watcher::Config::default().fields(&format!("metadata.name={cluster}")),
            )
            .applied_objects()
            .map(|e| e.map(|c| Either::Cluster(Box::new(c))));
            let mut events = futures::stream::select(pod_events, cluster_events).boxed();
            while let Some(ev) = events.next().await {
                let record = |f: &dyn Fn(&mut Seen)| {
                    if let Ok(mut g) = v.lock() {
                        f(&mut g);
                    }
                };
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        let msg = format!("watch error: {e}");
                        record(&|g| g.errors.push(msg.clone()));
                        continue;
                    }
                };
                record(&|g| g.events += 1);
                // The Cluster of this life: a Cluster deleted and created again under the same
                // name leaves pods (still Ready while they terminate) and possibly its Restore
                // behind, under the same names. Neither is this Cluster's, so neither is judged
                // or counted for it.
                let current = match &ev {
                    Either::Cluster(c) => Some((**c).clone()),
                    Either::Pod(_) => match clusters.get_opt(&cluster).await {
                        Ok(c) => c,
                        Err(e) => {
                            let msg = format!("reading Cluster {cluster}: {e}");
                            record(&|g| g.errors.push(msg.clone()));
                            continue;
                        }
                    },
                };
                let cluster_uid = current.as_ref().and_then(|c| c.metadata.uid.clone());
                let restore = match restores.get_opt(&restore_name).await {
                    Ok(r) => r,
                    Err(e) => {
                        let msg = format!("reading Restore {restore_name}: {e}");
                        record(&|g| g.errors.push(msg.clone()));
                        continue;
                    }
                };
                let restore_seen = match &restore {
                    None => "no Restore".to_owned(),
                    Some(r) => format!(
                        "Restore uid {} {:?}",
                        r.metadata.uid.as_deref().unwrap_or("?"),
                        r.status.as_ref().and_then(|s| s.phase)
                    ),
                };
                let status = restore
                    .filter(|r| {
                        cluster_uid.as_deref().is_some_and(|uid| {
                            r.owner_references()
                                .iter()
                                .any(|o| o.controller == Some(true) && o.uid == uid)
                        })
                    })
                    .and_then(|r| r.status);
                let done = status.as_ref().and_then(|s| s.phase) == Some(RestorePhase::Completed);
                let completed = status
                    .as_ref()
                    .and_then(|s| s.completion_timestamp.as_ref())
                    .map(|t| t.0);
                let lie = match ev {
                    Either::Pod(p)
                        if !of_this_life(
                            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                            current
                                .as_ref()
                                .and_then(|c| c.metadata.creation_timestamp.as_ref())
                                .map(|t| t.0),
                        ) =>
                    {
                        let ready = ready_since(&p).is_some();
                        let name = format!("{} with {restore_seen}", p.name_any());
                        record(&|g| {
                            g.earlier += 1;
                            if ready {
                                g.earlier_ready.insert(name.clone());
                            }
                        });
                        None
                    }
                    Either::Pod(p) => ready_since(&p)
                        .filter(|since| ready_before_verified(*since, completed))
                        .map(|since| {
                            format!(
                                "pod {} is Ready since {since} but Restore {restore_name} completed {}",
                                p.name_any(),
                                completed.map_or("never".to_owned(), |c| format!("at {c}"))
                            )
                        }),
                    Either::Cluster(c) => {
                        let running =
                            c.status.as_ref().and_then(|s| s.phase) == Some(ClusterPhase::Running);
                        (running && !done).then(|| format!("Cluster {cluster} is Running while Restore {restore_name} is not Completed"))
                    }
                };
                if let Some(l) = lie {
                    record(&|g| g.violations.push(l.clone()));
                }
            }
        });
        Self { seen, task }
    }

    /// Stops watching; fails listing every lie seen, or when the watch saw nothing or failed.
    ///
    /// A watch delivers what happened a moment later, and a Cluster that fails at validation is
    /// done within seconds: on a loaded bed the test could reach here before the watch's first
    /// event. So a watch that has seen nothing of this Cluster yet gets up to [`FIRST_EVENT`] to
    /// see it (the Cluster exists, so its event must come) before it is judged blind.
    pub async fn finish(self) -> Result<()> {
        let seen_any = || {
            self.seen
                .lock()
                .map(|g| g.events > g.earlier || !g.errors.is_empty())
                .unwrap_or(true)
        };
        let deadline = tokio::time::Instant::now() + FIRST_EVENT;
        while !seen_any() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.task.abort();
        let s = self.seen.lock().map(|g| g.clone()).unwrap_or_default();
        if !s.violations.is_empty() {
            bail!(
                "the restore lied {} time(s): {}",
                s.violations.len(),
                s.violations.join("; ")
            );
        }
        if !s.errors.is_empty() {
            bail!(
                "the lie watch failed {} time(s), so it proves nothing: {}",
                s.errors.len(),
                s.errors.join("; ")
            );
        }
        if s.events == s.earlier {
            bail!("the lie watch saw no event of this Cluster at all, so it proves nothing");
        }
        if s.earlier > 0 {
            eprintln!(
                "the lie watch set aside {} event(s) of pods older than the Cluster (an earlier \
                 Cluster's); Ready among them: {:?}",
                s.earlier, s.earlier_ready
            );
        }
        Ok(())
    }
}

/// How long [`LieWatcher::finish`] waits for a watch's first event of its Cluster.
const FIRST_EVENT: Duration = Duration::from_secs(30);

enum Either {
    Pod(Box<Pod>),
    Cluster(Box<Cluster>),
}

/// Checks the restored Cluster holds what was written: key counts per database on the primary,
/// the same graph rows, the replica's copy, and sentinels agreeing on the master.
pub async fn assert_restored(ns: &TestNamespace, cluster: &str, want: &Written) -> Result<()> {
    let pods: Api<Pod> = ns.api();
    let primary = poll("one primary label", Duration::from_secs(60), || {
        primary_pod(ns, cluster)
    })
    .await?;
    for (db, n) in &want.keys {
        let size = data_keys(&pods, &primary, *db).await?;
        ensure!(
            size == *n,
            "db{db} on {primary}: {size} keys but {n} were backed up"
        );
    }
    let rows = graph_rows(&redis_cli(&pods, &primary, GRAPH_QUERY).await?);
    ensure!(
        rows == want.graph_rows,
        "graph rows differ on {primary}:\n{rows}\nvs backed up:\n{}",
        want.graph_rows
    );
    for p in component_pods(ns, cluster, "falkordb").await? {
        let name = p.name_any();
        if name == primary {
            continue;
        }
        // At once, no polling: the Cluster is Running only after every server, replicas
        // included, was verified, so a replica still catching up here is a lie.
        for (db, n) in &want.keys {
            let size = data_keys(&pods, &name, *db).await?;
            ensure!(
                size == *n,
                "replica {name}: db{db} holds {size} keys right after Running, {n} were backed up"
            );
        }
        let rows = graph_rows(&redis_cli(&pods, &name, GRAPH_QUERY).await?);
        ensure!(
            rows == want.graph_rows,
            "graph rows differ on replica {name} right after Running:\n{rows}\nvs backed up:\n{}",
            want.graph_rows
        );
    }
    let mut masters = Vec::new();
    for s in component_pods(ns, cluster, "falkordb-sent").await? {
        let out = sentinel_cli(
            &pods,
            &s.name_any(),
            &format!("SENTINEL get-master-addr-by-name {cluster}-falkordb"),
        )
        .await?;
        masters.push(out.lines().next().unwrap_or_default().to_owned());
    }
    ensure!(
        !masters.is_empty() && masters.iter().all(|m| m.starts_with(&primary)),
        "sentinels {masters:?} do not agree on primary {primary}"
    );
    Ok(())
}

/// Checks the Restore of `cluster` records its verification: a match, with the live fingerprint
/// equal to the backup's.
pub async fn assert_verification(ns: &TestNamespace, cluster: &str) -> Result<()> {
    let api: Api<Restore> = ns.api();
    let name = format!("{cluster}-falkordb-restore");
    let v = api
        .get(&name)
        .await?
        .status
        .and_then(|s| s.verification)
        .with_context(|| format!("Restore {name} completed without recording its verification"))?;
    ensure!(
        v.matched && v.observed.as_ref() == Some(&v.expected),
        "Restore {name} records expected {:?} but observed {:?} (matched: {})",
        v.expected,
        v.observed,
        v.matched
    );
    Ok(())
}

/// The restore's stage timings and verification, for reports.
pub async fn restore_report(ns: &TestNamespace, cluster: &str) -> Result<String> {
    let api: Api<Restore> = ns.api();
    let r = api.get(&format!("{cluster}-falkordb-restore")).await?;
    let st = r.status.unwrap_or_default();
    let mut out = format!(
        "Restore {}: phase {:?}, duration {}\n",
        r.metadata.name.unwrap_or_default(),
        st.phase,
        st.duration.unwrap_or_default()
    );
    let secs =
        |a: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
         b: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| match (a, b) {
            (Some(a), Some(b)) => format!("{}s", b.0.as_second() - a.0.as_second()),
            _ => "-".into(),
        };
    if let Some(actions) = st.actions {
        for a in actions.prepare_data.iter().chain(actions.post_ready.iter()) {
            out.push_str(&format!(
                "  {:<20} {:<40} {:?} {}\n",
                a.name,
                a.object_key,
                a.status,
                secs(&a.start_time, &a.end_time)
            ));
        }
    }
    if let Some(v) = st.verification {
        out.push_str(&format!(
            "  verification: matched={} \n    backup: {}\n    live:   {}\n",
            v.matched,
            serde_json::to_string(&v.expected).unwrap_or_default(),
            serde_json::to_string(&v.observed).unwrap_or_default()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn a_pod_ready_before_the_restore_completed_is_a_lie_whenever_it_is_seen() {
        let done = Some(at("2026-12-03T10:00:05Z"));
        assert!(ready_before_verified(at("2026-12-03T10:00:04Z"), done));
        assert!(!ready_before_verified(at("2026-12-03T10:00:05Z"), done));
        assert!(!ready_before_verified(at("2026-12-03T10:00:09Z"), done));
        assert!(
            ready_before_verified(at("2026-12-03T10:00:09Z"), None),
            "Ready while the Restore has not completed at all"
        );
    }

    #[test]
    fn a_pod_older_than_its_cluster_is_an_earlier_clusters_and_not_judged() {
        let cluster = Some(at("2026-12-03T10:00:05Z"));
        assert!(!of_this_life(Some(at("2026-12-03T09:58:00Z")), cluster));
        assert!(of_this_life(Some(at("2026-12-03T10:00:05Z")), cluster));
        assert!(of_this_life(Some(at("2026-12-03T10:00:40Z")), cluster));
        assert!(
            !of_this_life(Some(at("2026-12-03T10:00:40Z")), None),
            "with its Cluster gone, a pod is no restore's"
        );
    }
}
