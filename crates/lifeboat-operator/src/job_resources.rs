//! The requests and limits of the mover's Jobs.
//!
//! Every Job gets bounds, so that a namespace quota admits it and a runaway mover cannot take a
//! node's memory. The mover streams in fixed buffers (well under 64 MiB at any dataset size), so
//! one default fits restore, verify and delete Jobs. A backup Job is the exception: its scratch
//! server loads the saved file to fingerprint it, so it holds the dataset once more, and its
//! memory limit has to grow with the database's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::restore::preconditions::quantity_bytes;

const MIB: i64 = 1024 * 1024;

/// The operator's default for every mover Job: modest requests, a memory limit far above what
/// the mover streams with. Overridden by the operator's `--job-resources` (the chart's
/// `jobResources`).
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", "100m"), ("memory", "128Mi")])),
        limits: Some(quantities(&[("cpu", "1"), ("memory", "512Mi")])),
        ..Default::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// The resources of a backup Job of a server whose container has `server`'s resources.
///
/// `method` (the BackupPolicy method's `runtimeSettings.resources`) wins whole when given: the
/// user said what the Job needs. Otherwise the operator's default, with the memory limit raised
/// by the server's own memory limit, since the scratch server may hold all of it; a server
/// without a memory limit gives no bound to derive, so the Job gets none either (a limit below
/// the dataset would kill every backup of a large database).
pub fn for_backup(
    default: &ResourceRequirements,
    method: Option<&ResourceRequirements>,
    server: Option<&ResourceRequirements>,
) -> ResourceRequirements {
    if let Some(m) = method {
        return m.clone();
    }
    let mut out = default.clone();
    let server_limit = server
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(quantity_bytes);
    let limits = out.limits.get_or_insert_with(BTreeMap::new);
    match server_limit {
        Some(server) => add_memory(limits, server),
        None => {
            limits.remove("memory");
        }
    }
    if limits.is_empty() {
        out.limits = None;
    }
    out
}

/// The resources of a restore drill of a backup of `data_bytes`: the operator's default, with a
/// memory limit raised by twice the data (the scratch server holds the loaded dataset and its
/// own overhead). A default without a memory limit stays without one.
pub fn for_drill(default: &ResourceRequirements, data_bytes: i64) -> ResourceRequirements {
    let mut out = default.clone();
    if let Some(limits) = out.limits.as_mut()
        && limits.contains_key("memory")
    {
        add_memory(limits, data_bytes.max(0).saturating_mul(2));
    }
    out
}

/// Raises the memory limit in `limits` (none counts as 0) by `extra` bytes, rounded up to MiB.
fn add_memory(limits: &mut BTreeMap<String, Quantity>, extra: i64) {
    let own = limits
        .get("memory")
        .and_then(quantity_bytes)
        .unwrap_or_default();
    limits.insert(
        "memory".into(),
        Quantity(format!(
            "{}Mi",
            own.saturating_add(extra).saturating_add(MIB - 1) / MIB
        )),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem_limit(r: &ResourceRequirements) -> Option<String> {
        r.limits
            .as_ref()
            .and_then(|l| l.get("memory"))
            .map(|q| q.0.clone())
    }

    #[test]
    fn every_job_has_requests_and_limits_by_default() {
        let d = default_resources();
        assert!(
            d.requests
                .as_ref()
                .is_some_and(|r| r.contains_key("memory"))
        );
        assert_eq!(mem_limit(&d).as_deref(), Some("512Mi"));
    }

    #[test]
    fn a_backup_job_may_hold_the_servers_whole_memory_once_more() {
        let server = ResourceRequirements {
            limits: Some(quantities(&[("memory", "2Gi")])),
            ..Default::default()
        };
        let r = for_backup(&default_resources(), None, Some(&server));
        assert_eq!(mem_limit(&r).as_deref(), Some("2560Mi"));
        assert_eq!(r.requests, default_resources().requests);
    }

    #[test]
    fn a_server_without_a_memory_limit_leaves_the_backup_job_without_one() {
        let r = for_backup(&default_resources(), None, None);
        assert_eq!(mem_limit(&r), None);
        assert!(r.limits.as_ref().is_some_and(|l| l.contains_key("cpu")));
    }

    #[test]
    fn the_policys_runtime_settings_win_whole() {
        let mine = ResourceRequirements {
            requests: Some(quantities(&[("cpu", "2")])),
            ..Default::default()
        };
        let server = ResourceRequirements {
            limits: Some(quantities(&[("memory", "2Gi")])),
            ..Default::default()
        };
        assert_eq!(
            for_backup(&default_resources(), Some(&mine), Some(&server)),
            mine
        );
    }

    #[test]
    fn a_drill_job_gets_twice_the_data_on_top_of_the_default_limit() {
        let d = default_resources();
        let r = for_drill(&d, 100 * MIB);
        assert_eq!(
            r.limits.as_ref().and_then(|l| l.get("memory")),
            Some(&Quantity("712Mi".into()))
        );
        assert_eq!(r.requests, d.requests);
        let unbounded = ResourceRequirements::default();
        assert_eq!(for_drill(&unbounded, 100 * MIB), unbounded);
    }
}
