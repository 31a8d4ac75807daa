//! What must hold after every step of every schedule, read from the store alone.

use std::collections::{BTreeMap, BTreeSet};

use lifeboat_api::labels;
use serde_json::Value;

use crate::store::Store;
use crate::world::job_ended;

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn owner_uids(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| s(r, "/uid").map(str::to_owned))
        .collect()
}

/// What the checker remembers between steps.
#[derive(Debug, Default)]
pub struct Memory {
    /// Cluster UIDs whose Restore completed with a matching verification that the verify Job
    /// really printed. Kept after the Restore is gone: a pod it opened stays open legitimately.
    pub verified: BTreeSet<String>,
    /// How each Job the schedule ended, by Job UID: `true` when it printed a matching result.
    pub job_matched: BTreeMap<String, bool>,
    /// The backup a backup Job printed as stored and read back, by Job UID.
    pub backup_printed: BTreeMap<String, String>,
    /// Backup UIDs seen Completed with a result their own Job printed.
    pub backup_completed: BTreeSet<String>,
    /// Backup Jobs already judged when they first appeared, by UID.
    pub backup_jobs: BTreeSet<String>,
    /// Backups and Restores already judged when they were first seen Failed, by UID.
    pub failures: BTreeSet<String>,
    /// What the last Cluster pass that ended without an error left broken (invariant 11),
    /// reported by the next check.
    pub after_pass: Option<String>,
}

/// Checks every invariant; the first one broken, described with what was observed.
pub fn check(store: &Store, ns: &str, mem: &mut Memory) -> Result<(), String> {
    if let Some(why) = mem.after_pass.take() {
        return Err(why);
    }
    let restores = store.list(
        "dataprotection.kubeblocks.io/v1alpha1",
        "restores",
        Some(ns),
    );
    let jobs = store.list("batch/v1", "jobs", Some(ns));
    for r in &restores {
        let name = s(r, "/metadata/name").unwrap_or_default();
        let phase = s(r, "/status/phase");
        let owners = owner_uids(r);
        if phase == Some("Completed") {
            // 1. Completed only with a matching verification recorded, and one the verify Job
            //    of this Restore really printed.
            if r.pointer("/status/verification/matched") != Some(&Value::Bool(true)) {
                return Err(format!(
                    "Restore {name} is Completed without a matching verification recorded"
                ));
            }
            let uid = s(r, "/metadata/uid").unwrap_or_default();
            let printed = jobs.iter().any(|j| {
                owner_uids(j).iter().any(|u| u == uid)
                    && s(j, "/metadata/uid")
                        .is_some_and(|ju| mem.job_matched.get(ju) == Some(&true))
            });
            let already = owners.iter().any(|o| mem.verified.contains(o));
            if !printed && !already {
                return Err(format!(
                    "Restore {name} is Completed, but no verify Job of it printed a matching result"
                ));
            }
            mem.verified.extend(owners.iter().cloned());
        }
        // 5. A failed restore names a reason.
        if phase == Some("Failed") {
            let named = r
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| {
                    s(c, "/status") == Some("False")
                        && s(c, "/message").is_some_and(|m| !m.trim().is_empty())
                });
            if !named {
                return Err(format!(
                    "Restore {name} is Failed without a condition that says why"
                ));
            }
        }
    }
    // The owning Cluster UID of each StatefulSet.
    let sts_cluster: BTreeMap<String, Vec<String>> = store
        .list("apps/v1", "statefulsets", Some(ns))
        .into_iter()
        .filter_map(|st| Some((s(st, "/metadata/uid")?.to_owned(), owner_uids(st))))
        .collect();
    // 1. No data pod's gate is open, and no pod behind it Ready, unless its Cluster was verified.
    for p in store.list("v1", "pods", Some(ns)) {
        let gated = p
            .pointer("/spec/readinessGates")
            .and_then(Value::as_array)
            .is_some_and(|g| {
                g.iter().any(|g| {
                    s(g, "/conditionType") == Some(labels::READINESS_GATE_RESTORE_VERIFIED)
                })
            });
        if !gated {
            continue;
        }
        let open = p
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                s(c, "/type") == Some(labels::READINESS_GATE_RESTORE_VERIFIED)
                    && s(c, "/status") == Some("True")
            });
        if !open {
            continue;
        }
        let owners = owner_uids(p);
        let clusters: Vec<&String> = owners
            .iter()
            .filter_map(|u| sts_cluster.get(u))
            .flatten()
            .collect();
        let name = s(p, "/metadata/name").unwrap_or_default();
        // A pod whose StatefulSet is gone is a leftover the collector has not reached yet; its
        // gate was judged while its owner lived.
        if let Some(c) = clusters.iter().find(|c| !mem.verified.contains(c.as_str())) {
            return Err(format!(
                "pod {name} has its restore gate open, but its Cluster (uid {c}) has no verified restore"
            ));
        }
    }
    for c in store.list("apps.kubeblocks.io/v1", "clusters", Some(ns)) {
        let uid = s(c, "/metadata/uid").unwrap_or_default();
        let restoring = c.pointer("/spec/restore").is_some()
            || c.pointer(&format!(
                "/metadata/annotations/{}",
                labels::RESTORE_FROM_BACKUP.replace('/', "~1")
            ))
            .is_some();
        if !restoring || mem.verified.contains(uid) {
            continue;
        }
        let name = s(c, "/metadata/name").unwrap_or_default();
        if s(c, "/status/phase") == Some("Running") {
            return Err(format!(
                "Cluster {name} (uid {uid}) is Running without a verified restore"
            ));
        }
        if c.pointer(&format!(
            "/metadata/annotations/{}",
            lifeboat_operator::restore::intent::RESTORE_DONE.replace('/', "~1")
        ))
        .is_some()
        {
            return Err(format!(
                "Cluster {name} (uid {uid}) is marked restored without a verified restore"
            ));
        }
    }
    check_backups(store, ns, mem, &jobs)?;
    check_failures(store, ns, mem, &jobs)?;
    // 2. At most one prepare Job per volume.
    let mut per_claim: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for j in &jobs {
        for v in j
            .pointer("/spec/template/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(claim) = s(v, "/persistentVolumeClaim/claimName")
                && claim.starts_with("data-")
                && j.pointer("/metadata/labels/lifeboat.io~1backup").is_none()
            {
                per_claim
                    .entry(claim)
                    .or_default()
                    .push(s(j, "/metadata/name").unwrap_or_default());
            }
        }
    }
    if let Some((claim, js)) = per_claim.iter().find(|(_, js)| js.len() > 1) {
        return Err(format!(
            "volume {claim} has {} prepare Jobs at once: {}",
            js.len(),
            js.join(", ")
        ));
    }
    Ok(())
}

/// Whether the Cluster asks for a restore (the field or the deprecated annotation).
fn restoring(c: &Value) -> bool {
    c.pointer("/spec/restore").is_some()
        || c.pointer(&format!(
            "/metadata/annotations/{}",
            labels::RESTORE_FROM_BACKUP.replace('/', "~1")
        ))
        .is_some()
}

/// 6. A Backup completes only on a result its own Job printed after reading the published
///    manifest and objects back, naming the data Lifeboat gave that Backup (its name and UID).
/// 7. A backup Job starts only on a Cluster that restores nothing or whose restore was verified.
/// 8. A Backup is released only once its backup Job no longer runs.
fn check_backups(store: &Store, ns: &str, mem: &mut Memory, jobs: &[&Value]) -> Result<(), String> {
    let backups = store.list("dataprotection.kubeblocks.io/v1alpha1", "backups", Some(ns));
    for b in &backups {
        if s(b, "/status/phase") != Some("Completed") || b.pointer("/status/dataset").is_none() {
            continue;
        }
        let uid = s(b, "/metadata/uid").unwrap_or_default();
        if mem.backup_completed.contains(uid) {
            continue;
        }
        // The restore's own source Backup is a fixture: it was taken before the schedule.
        let Some(cluster_uid) = s(
            b,
            &format!(
                "/metadata/labels/{}",
                labels::CLUSTER_UID.replace('/', "~1")
            ),
        ) else {
            continue;
        };
        let name = s(b, "/metadata/name").unwrap_or_default();
        let data = s(b, "/status/dataset/manifestPath").unwrap_or_default();
        let own = format!("{name}-{}", uid.get(..8).unwrap_or(uid));
        if data != own {
            return Err(format!(
                "Backup {name} (uid {uid}) is Completed with data {data:?}, not its own {own:?}"
            ));
        }
        let printed = jobs.iter().any(|j| {
            owner_uids(j).iter().any(|u| u == uid)
                && s(j, "/metadata/uid")
                    .and_then(|ju| mem.backup_printed.get(ju))
                    .is_some_and(|n| *n == own)
        });
        if !printed {
            return Err(format!(
                "Backup {name} (uid {uid}, Cluster uid {cluster_uid}) is Completed, but no Job of it printed a read-back result for {own:?}"
            ));
        }
        mem.backup_completed.insert(uid.to_owned());
    }
    let live: BTreeSet<&str> = backups
        .iter()
        .filter_map(|b| s(b, "/metadata/uid"))
        .collect();
    let clusters = store.list("apps.kubeblocks.io/v1", "clusters", Some(ns));
    for j in jobs {
        // Backup Jobs only: a Backup's delete Job carries the same label.
        if j.pointer("/spec/template/spec/containers/0/command/1")
            .and_then(Value::as_str)
            != Some("backup")
        {
            continue;
        }
        let job = s(j, "/metadata/name").unwrap_or_default();
        // 8. A Backup whose data goes with it is released only once its backup Job no longer
        //    runs: a Job left running would write a whole backup after the delete.
        if !job_ended(j)
            && let Some(gone) = owner_uids(j)
                .into_iter()
                .find(|u| !live.contains(u.as_str()))
        {
            return Err(format!(
                "backup Job {job} still runs, but its Backup (uid {gone}) is gone: it would write data no Backup refers to"
            ));
        }
        let juid = s(j, "/metadata/uid").unwrap_or_default();
        if !mem.backup_jobs.insert(juid.to_owned()) {
            continue;
        }
        // The Cluster whose pods the Job backs up is the one that exists now, under the name
        // its Backup's policy targets: there is only one here.
        for c in &clusters {
            let uid = s(c, "/metadata/uid").unwrap_or_default();
            if restoring(c) && !mem.verified.contains(uid) {
                return Err(format!(
                    "backup Job {job} started while Cluster {} (uid {uid}) has no verified restore: it would capture a partial dataset",
                    s(c, "/metadata/name").unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}

/// The claim a failure reason says is not found (`persistentvolumeclaim "name" not found`).
fn claim_not_found(reason: &str) -> Option<&str> {
    let (_, rest) = reason.split_once("persistentvolumeclaim \"")?;
    let (claim, after) = rest.split_once('"')?;
    after.trim_start().starts_with("not found").then_some(claim)
}

/// 9. A Backup or Restore never fails before its deadline saying a claim is not found while the
///    API server holds that claim: the scheduler said so from a cache that had not seen it yet.
/// 10. A Backup fails only once its backup Job can no longer write: finished, or suspended.
fn check_failures(
    store: &Store,
    ns: &str,
    mem: &mut Memory,
    jobs: &[&Value],
) -> Result<(), String> {
    let claims: BTreeSet<String> = store
        .list("v1", "persistentvolumeclaims", Some(ns))
        .into_iter()
        .filter(|c| c.pointer("/metadata/deletionTimestamp").is_none())
        .filter_map(|c| s(c, "/metadata/name").map(str::to_owned))
        .collect();
    let failed = |kind: &str, v: &Value| -> Option<(String, String, String)> {
        if s(v, "/status/phase") != Some("Failed") {
            return None;
        }
        let reason = if kind == "Backup" {
            s(v, "/status/failureReason").unwrap_or_default().to_owned()
        } else {
            v.pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| s(c, "/message"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        Some((
            s(v, "/metadata/uid")?.to_owned(),
            s(v, "/metadata/name").unwrap_or_default().to_owned(),
            reason,
        ))
    };
    for (kind, plural) in [("Backup", "backups"), ("Restore", "restores")] {
        for v in store.list("dataprotection.kubeblocks.io/v1alpha1", plural, Some(ns)) {
            let Some((uid, name, reason)) = failed(kind, v) else {
                continue;
            };
            if !mem.failures.insert(uid.clone()) {
                continue;
            }
            // At a deadline the scheduler's last word is quoted, whatever it says: the failure is
            // the deadline's.
            if let Some(claim) = claim_not_found(&reason)
                && claims.contains(claim)
                && !reason.contains("deadline")
            {
                return Err(format!(
                    "{kind} {name} failed saying claim {claim} is not found, while the API server holds it: {reason}"
                ));
            }
            if kind != "Backup" {
                continue;
            }
            let writing = jobs.iter().find(|j| {
                owner_uids(j).contains(&uid)
                    && j.pointer("/spec/template/spec/containers/0/command/1")
                        .and_then(Value::as_str)
                        == Some("backup")
                    && job_may_run(j)
            });
            if let Some(j) = writing {
                return Err(format!(
                    "Backup {name} failed while its Job {} still runs unsuspended: it could write a whole backup under a Backup that says Failed ({reason})",
                    s(j, "/metadata/name").unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}

/// Whether a Job may still run a pod: it has not ended, and it is not suspended (which the Job
/// controller has not acted on yet).
fn job_may_run(j: &Value) -> bool {
    !job_ended(j) && j.pointer("/spec/suspend") != Some(&Value::Bool(true))
}

/// 11. After a Cluster pass that ended without an error, no Job of that Cluster's `Failed`
///     Restore may still run: a pod left pending would wait for good, one left running would
///     keep writing into the volumes of a Cluster that says `Failed`.
pub fn after_cluster_pass(store: &Store, ns: &str) -> Result<(), String> {
    let live: BTreeSet<&str> = store
        .list("apps.kubeblocks.io/v1", "clusters", Some(ns))
        .into_iter()
        .filter(|c| c.pointer("/metadata/deletionTimestamp").is_none())
        .filter_map(|c| s(c, "/metadata/uid"))
        .collect();
    let jobs = store.list("batch/v1", "jobs", Some(ns));
    for r in store.list(
        "dataprotection.kubeblocks.io/v1alpha1",
        "restores",
        Some(ns),
    ) {
        if s(r, "/status/phase") != Some("Failed")
            || !owner_uids(r).iter().any(|o| live.contains(o.as_str()))
        {
            continue;
        }
        let uid = s(r, "/metadata/uid").unwrap_or_default();
        if let Some(j) = jobs
            .iter()
            .find(|j| owner_uids(j).iter().any(|o| o == uid) && job_may_run(j))
        {
            return Err(format!(
                "Restore {} is Failed, and after a whole Cluster pass its Job {} still runs unsuspended",
                s(r, "/metadata/name").unwrap_or_default(),
                s(j, "/metadata/name").unwrap_or_default()
            ));
        }
    }
    Ok(())
}
