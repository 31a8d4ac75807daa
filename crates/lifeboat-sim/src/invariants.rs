//! What must hold after every step of every schedule, read from the store alone.

use std::collections::{BTreeMap, BTreeSet};

use lifeboat_api::labels;
use serde_json::Value;

use crate::store::Store;

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
}

/// Checks every invariant; the first one broken, described with what was observed.
pub fn check(store: &Store, ns: &str, mem: &mut Memory) -> Result<(), String> {
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
