//! Objects found under a restore's names that are not this Cluster's. Pure.
//!
//! A restore finds its Restore, PVCs and Jobs by deterministic names. A Cluster deleted and
//! created again under the same name, before garbage collection removed the first one's
//! objects, would find them too, and could inherit a `Completed` Restore, its Jobs and volumes,
//! and be reported verified without restoring anything. So nothing is taken as this restore's
//! state unless it carries the identity of what made it: the Restore is controlled by this
//! Cluster's UID, a PVC is owned by it or labelled with it, a Job is controlled by this
//! Restore's UID. Anything else is a leftover: the restore waits for it to go, and fails naming
//! it if it stays past the stage's deadline.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use lifeboat_api::labels;

use crate::ownership::{controlled_by, labelled, owned_by};

/// Whether a Restore found under this Cluster's restore name is the Cluster's own.
pub fn restore_is_ours(meta: &ObjectMeta, cluster_uid: &str) -> bool {
    controlled_by(meta, cluster_uid)
}

/// Whether a data PVC found under this Cluster's names is the Cluster's own.
pub fn pvc_is_ours(meta: &ObjectMeta, cluster_uid: &str) -> bool {
    owned_by(meta, cluster_uid) || labelled(meta, labels::CLUSTER_UID, cluster_uid)
}

/// A data claim found under this Cluster's name, as the restore may see it: the Cluster's own
/// claim, or nothing. Another Cluster's claim is no state of this restore (its deletion is not
/// this restore's volume lost), only a leftover to wait for: `true` says it is one.
pub fn own_claim<'a>(
    found: Option<&'a ObjectMeta>,
    cluster_uid: &str,
) -> (Option<&'a ObjectMeta>, bool) {
    match found {
        Some(meta) if !pvc_is_ours(meta, cluster_uid) => (None, true),
        other => (other, false),
    }
}

/// Whether a Job found under this restore's names is this Restore's own.
pub fn job_is_ours(meta: &ObjectMeta, restore_uid: &str) -> bool {
    controlled_by(meta, restore_uid)
}

/// What the restore does about leftovers.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// None found: go on.
    Clear,
    /// Some found, still within the deadline: wait for garbage collection; why.
    Wait(String),
    /// Some found past the deadline: fail; why.
    Fail(String),
}

/// Judges the leftovers found (each described, e.g. `Job ns/name`), given when waiting began
/// (the Cluster's creation) and the deadline for it.
pub fn verdict(found: &[String], since: Timestamp, now: Timestamp, limit: Duration) -> Verdict {
    if found.is_empty() {
        return Verdict::Clear;
    }
    let what = found.join(", ");
    let waited = now.duration_since(since).unsigned_abs();
    if waited >= limit {
        Verdict::Fail(format!(
            "{what} {} left over from an earlier Cluster of this name (it does not carry this \
             Cluster's UID) and {} still there after {}s; delete {} so that the restore can run",
            if found.len() == 1 { "is" } else { "are" },
            if found.len() == 1 { "is" } else { "are" },
            waited.as_secs(),
            if found.len() == 1 { "it" } else { "them" },
        ))
    } else {
        Verdict::Wait(format!(
            "waiting for {what}, left over from an earlier Cluster of this name, to be deleted \
             before restoring"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    #[test]
    fn an_earlier_clusters_claim_being_deleted_is_a_leftover_not_this_restores_lost_volume() {
        let mut theirs = meta(Some("old-uid"), Some("old-uid"));
        theirs.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now(),
        ));
        assert_eq!(own_claim(Some(&theirs), "new-uid"), (None, true));
        let ours = meta(None, Some("new-uid"));
        assert_eq!(own_claim(Some(&ours), "new-uid"), (Some(&ours), false));
        assert_eq!(own_claim(None, "new-uid"), (None, false));
    }

    fn meta(owner: Option<&str>, uid_label: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            owner_references: owner.map(|uid| {
                vec![OwnerReference {
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            labels: uid_label
                .map(|u| BTreeMap::from([(labels::CLUSTER_UID.to_owned(), u.to_owned())])),
            ..Default::default()
        }
    }

    #[test]
    fn only_objects_carrying_this_identity_are_ours() {
        assert!(restore_is_ours(&meta(Some("new"), None), "new"));
        assert!(
            !restore_is_ours(&meta(Some("old"), None), "new"),
            "an earlier Cluster's Restore"
        );
        assert!(!restore_is_ours(&meta(None, None), "new"));
        assert!(pvc_is_ours(&meta(Some("new"), None), "new"));
        assert!(pvc_is_ours(&meta(None, Some("new")), "new"));
        assert!(!pvc_is_ours(&meta(Some("old"), Some("old")), "new"));
        assert!(job_is_ours(&meta(Some("restore-new"), None), "restore-new"));
        assert!(!job_is_ours(
            &meta(Some("restore-old"), None),
            "restore-new"
        ));
    }

    #[test]
    fn leftovers_are_waited_for_then_fail_naming_them() {
        let t0: Timestamp = "2026-12-03T10:00:00Z".parse().expect("ts");
        let limit = Duration::from_secs(900);
        assert_eq!(verdict(&[], t0, t0, limit), Verdict::Clear);
        let found = vec!["Restore ns/fdb-falkordb-restore".to_owned()];
        assert!(matches!(
            verdict(&found, t0, t0 + Duration::from_secs(60), limit),
            Verdict::Wait(m) if m.contains("Restore ns/fdb-falkordb-restore")
        ));
        assert!(matches!(
            verdict(&found, t0, t0 + Duration::from_secs(900), limit),
            Verdict::Fail(m) if m.contains("Restore ns/fdb-falkordb-restore") && m.contains("900s")
        ));
    }
}
