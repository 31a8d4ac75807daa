//! The operator's RBAC, checked against what it really did on the bed.
//!
//! The bed's API server audits every request of the `lifeboat-system` service accounts
//! (metadata only; `testbed/scripts/services.sh`). After the e2e tiers, `cargo xtask ci` reads
//! the audit log from where it stood before the operator was deployed and fails when:
//! - a request of the operator was refused by the authorizer (RBAC), or
//! - the ClusterRole or the leader-election Role grants a verb on a resource that the operator
//!   never used, unless [`EXCEPTIONS`] says why the grant is needed anyway.
//!
//! Each exception is documented in docs/security.md with the test that exercises it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::testbed;

/// The operator's namespace, whose service accounts the bed audits.
const OPERATOR_NAMESPACE: &str = "lifeboat-system";
const CLUSTER_ROLE: &str = "lifeboat-operator";
const ROLE: &str = "lifeboat-operator-leader-election";

/// Grants that no request of the operator shows, and why each is needed.
pub const EXCEPTIONS: &[(&str, &str, &str, &str)] = &[
    // The first replica to start creates the Lease; a bed whose etcd outlived an earlier run
    // (a developer's second `cargo xtask ci`) already has it. CI's bed is booted afresh.
    (
        "coordination.k8s.io",
        "leases",
        "create",
        "the first replica creates the leader Lease",
    ),
    // Waiting for the CRDs to be established lists them and watches only while one is not: on
    // the bed they are established before the operator starts, so the first list answers.
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "watch",
        "watched at start-up only while a CRD is not yet established",
    ),
];

#[derive(clap::Args)]
pub struct RbacArgs {
    /// The audit log's byte offset to read from (0: the whole log since the bed booted).
    #[arg(long, default_value_t = 0)]
    pub since: u64,
}

/// The audit log of the bed's API server.
pub fn audit_log() -> PathBuf {
    testbed::state_dir().join("logs").join("audit.log")
}

/// Where the audit log ends now: the check reads from here on.
pub fn mark() -> u64 {
    std::fs::metadata(audit_log()).map(|m| m.len()).unwrap_or(0)
}

/// The audited requests of the operator's service accounts, from the byte offset `since` (a
/// [`mark`]) on.
pub fn operator_requests(since: u64) -> Result<Vec<serde_json::Value>> {
    let path = audit_log();
    let mut f = std::fs::File::open(&path).with_context(|| {
        format!(
            "opening {}: the bed's API server audits the operator's requests there; a bed \
             booted before auditing was added needs `cargo xtask testbed down` and `up`",
            path.display()
        )
    })?;
    f.seek(SeekFrom::Start(since))?;
    let mut out = Vec::new();
    for line in BufReader::new(f).lines() {
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(&line?) else {
            continue;
        };
        let user = ev["user"]["username"].as_str().unwrap_or_default();
        if user.starts_with(&format!("system:serviceaccount:{OPERATOR_NAMESPACE}:")) {
            out.push(ev);
        }
    }
    Ok(out)
}

/// (apiGroup, resource[/subresource], verb)
type Grant = (String, String, String);

/// Checks the audit log from `since` (a [`mark`]) against the deployed roles.
pub fn check(since: u64) -> Result<()> {
    let path = audit_log();
    let mut used: BTreeMap<Grant, u64> = BTreeMap::new();
    let mut denied: BTreeMap<String, u64> = BTreeMap::new();
    let mut events = 0u64;
    for ev in operator_requests(since)? {
        events += 1;
        let Some(grant) = grant_of(&ev) else {
            continue;
        };
        let code = ev["responseStatus"]["code"].as_i64();
        // A server-side apply that made the object is audited as a patch answered 201, and
        // was authorized as a create as well.
        if grant.2 == "patch" && code == Some(201) {
            *used
                .entry((grant.0.clone(), grant.1.clone(), "create".into()))
                .or_default() += 1;
        }
        // Only the authorizer's refusals: a 403 from admission (a namespace being deleted, Pod
        // Security) says nothing about the ClusterRole.
        if ev["annotations"]["authorization.k8s.io/decision"].as_str() == Some("forbid") {
            let o = &ev["objectRef"];
            *denied
                .entry(format!(
                    "{} {} {}/{} ({})",
                    grant.2,
                    display(&grant),
                    o["namespace"].as_str().unwrap_or("-"),
                    o["name"].as_str().unwrap_or("-"),
                    ev["responseStatus"]["message"].as_str().unwrap_or_default()
                ))
                .or_default() += 1;
        } else {
            *used.entry(grant).or_default() += 1;
        }
    }
    if events == 0 {
        bail!(
            "the audit log {} holds no request of the operator since offset {since}: the check \
             would prove nothing",
            path.display()
        );
    }
    let granted = granted()?;
    eprintln!("rbac: {events} audited requests of the operator; granted and used:");
    for g in &granted {
        let n = used.get(g).copied().unwrap_or_default();
        let why = exception(g)
            .map(|w| format!("  (exception: {w})"))
            .unwrap_or_default();
        eprintln!("  {:>8}  {} {}{why}", n, g.2, display(g));
    }
    let unused: Vec<&Grant> = granted
        .iter()
        .filter(|g| !used.contains_key(*g) && exception(g).is_none())
        .collect();
    let ungranted: Vec<&Grant> = used
        .keys()
        .filter(|g| !granted.contains(*g) && !is_discovery(g))
        .collect();
    let mut problems = Vec::new();
    for (d, n) in &denied {
        problems.push(format!("denied {n}x: {d}"));
    }
    for g in unused {
        problems.push(format!(
            "granted but never used: {} {} (remove it, or add an exception that says why)",
            g.2,
            display(g)
        ));
    }
    for g in ungranted {
        problems.push(format!("used without a grant: {} {}", g.2, display(g)));
    }
    if !problems.is_empty() {
        bail!(
            "the operator's RBAC does not match what it did:\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

fn display(g: &Grant) -> String {
    if g.0.is_empty() {
        g.1.clone()
    } else {
        format!("{}.{}", g.1, g.0)
    }
}

fn exception(g: &Grant) -> Option<&'static str> {
    EXCEPTIONS
        .iter()
        .find(|(group, res, verb, _)| g.0 == *group && g.1 == *res && g.2 == *verb)
        .map(|e| e.3)
}

/// Discovery and the like (no resource) are allowed to every authenticated user.
fn is_discovery(g: &Grant) -> bool {
    g.1.is_empty()
}

/// The grant a resource request needed; None for non-resource requests (discovery, /version).
fn grant_of(ev: &serde_json::Value) -> Option<Grant> {
    let o = ev.get("objectRef")?;
    let resource = o["resource"].as_str()?;
    let resource = match o["subresource"].as_str() {
        Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
        _ => resource.to_owned(),
    };
    Some((
        o["apiGroup"].as_str().unwrap_or_default().to_owned(),
        resource,
        ev["verb"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Every (group, resource, verb) the deployed ClusterRole and leader-election Role grant.
fn granted() -> Result<BTreeSet<Grant>> {
    let mut out = BTreeSet::new();
    for args in [
        vec!["get", "clusterrole", CLUSTER_ROLE, "-o", "json"],
        vec!["get", "role", ROLE, "-n", OPERATOR_NAMESPACE, "-o", "json"],
    ] {
        let o = testbed::kubectl_command(&args)
            .output()
            .context("running kubectl")?;
        if !o.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        let role: serde_json::Value = serde_json::from_slice(&o.stdout)?;
        for rule in role["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            for group in list("apiGroups") {
                for res in list("resources") {
                    for verb in list("verbs") {
                        out.insert((group.clone(), res.clone(), verb));
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_the_grant_of_its_resource_subresource_and_verb() {
        let ev = serde_json::json!({
            "verb": "patch",
            "objectRef": {"resource": "pods", "subresource": "status", "apiGroup": ""}
        });
        assert_eq!(
            grant_of(&ev),
            Some(("".into(), "pods/status".into(), "patch".into()))
        );
        let discovery = serde_json::json!({"verb": "get", "requestURI": "/apis"});
        assert_eq!(grant_of(&discovery), None);
    }
}
