//! Whether a Backup may start on its Cluster now. Pure.
//!
//! A backup of a Cluster whose restore has not finished would capture a partial (or empty)
//! dataset and record it as good. The Cluster's `Restore` condition alone is not enough: a
//! Cluster created a moment ago asks for a restore before its controller has written any status,
//! so the request itself (`spec.restore` or the deprecated annotation) counts too.

use kube::ResourceExt;
use lifeboat_api::conditions::{
    self, REASON_RESTORE_COMPLETED, REASON_RESTORE_FAILED, REASON_RESTORE_RUNNING, RESTORE,
};
use lifeboat_api::{Cluster, labels};

use crate::restore::intent::RESTORE_DONE;

/// What the Backup controller does about the Cluster's restore.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// No restore is pending: the backup may start.
    Open,
    /// The Cluster's restore is pending or running; the message says so.
    Wait(String),
    /// The Cluster's restore failed, so there is no dataset worth backing up.
    Fail(String),
}

/// Judges the Cluster's restore state for a Backup.
pub fn gate(cluster: &Cluster) -> Gate {
    if crate::mutation::active(crate::mutation::Mutation::BackupIgnoresRestore) {
        return Gate::Open;
    }
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let annotations = cluster.annotations();
    if annotations.contains_key(RESTORE_DONE) {
        return Gate::Open;
    }
    let condition = cluster
        .status
        .as_ref()
        .and_then(|s| conditions::get(&s.conditions, RESTORE));
    // The Cluster says its restore completed (verified) even if the done annotation has not been
    // written yet: the operator may have stopped between the two.
    if condition.is_some_and(|c| c.reason == REASON_RESTORE_COMPLETED) {
        return Gate::Open;
    }
    if let Some(c) = condition.filter(|c| c.reason == REASON_RESTORE_FAILED) {
        return Gate::Fail(format!(
            "Cluster {ns}/{name} failed its restore, so it holds no dataset to back up: {}",
            c.message
        ));
    }
    let requested =
        cluster.spec.restore.is_some() || annotations.contains_key(labels::RESTORE_FROM_BACKUP);
    let running = condition.is_some_and(|c| c.reason == REASON_RESTORE_RUNNING);
    if requested || running {
        return Gate::Wait(format!(
            "Cluster {ns}/{name} is still being restored; the backup starts once its restore completed"
        ));
    }
    Gate::Open
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::field_report_cluster;
    use k8s_openapi::jiff::Timestamp;
    use lifeboat_api::apps::v1::{ClusterRestore, ClusterStatus};

    fn with_condition(mut c: Cluster, reason: &str, message: &str) -> Cluster {
        let mut st = ClusterStatus::default();
        conditions::set(
            &mut st.conditions,
            RESTORE,
            if reason == REASON_RESTORE_COMPLETED {
                "True"
            } else {
                "False"
            },
            reason,
            message,
            Some(1),
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        c.status = Some(st);
        c
    }

    fn restoring(c: &mut Cluster) {
        c.spec.restore = Some(
            serde_json::from_value::<ClusterRestore>(serde_json::json!({
                "source": {"apiGroup": "dataprotection.kubeblocks.io", "kind": "Backup", "name": "b1", "namespace": "demo"}
            }))
            .expect("restore parses"),
        );
    }

    #[test]
    fn a_cluster_without_a_restore_is_open() {
        assert_eq!(gate(&field_report_cluster()), Gate::Open);
    }

    #[test]
    fn a_restore_request_without_any_status_yet_waits() {
        // The race CI caught: the Backup arrived before the Cluster's first status write.
        let mut c = field_report_cluster();
        restoring(&mut c);
        assert!(matches!(gate(&c), Gate::Wait(m) if m.contains("demo/fdb")));
        let mut c = field_report_cluster();
        c.annotations_mut()
            .insert(labels::RESTORE_FROM_BACKUP.into(), "{}".into());
        assert!(matches!(gate(&c), Gate::Wait(_)));
    }

    #[test]
    fn a_running_restore_waits_and_a_failed_one_fails_with_its_reason() {
        let mut c = field_report_cluster();
        restoring(&mut c);
        let running = with_condition(c.clone(), REASON_RESTORE_RUNNING, "prepareData");
        assert!(matches!(gate(&running), Gate::Wait(_)));
        let failed = with_condition(c, REASON_RESTORE_FAILED, "Backup demo/b1 is Failed");
        assert!(
            matches!(gate(&failed), Gate::Fail(m) if m.contains("demo/fdb") && m.contains("Backup demo/b1 is Failed"))
        );
    }

    #[test]
    fn a_completed_restore_opens_even_though_spec_restore_stays() {
        // spec.restore is immutable, so completion is read from the done annotation.
        let mut c = field_report_cluster();
        restoring(&mut c);
        c.annotations_mut()
            .insert(RESTORE_DONE.into(), "fdb-falkordb-restore".into());
        let c = with_condition(c, REASON_RESTORE_COMPLETED, "done");
        assert_eq!(gate(&c), Gate::Open);
    }

    #[test]
    fn a_completed_restore_opens_before_the_done_annotation_is_written() {
        // The operator stopped after the Cluster said RestoreCompleted, before it annotated.
        let mut c = field_report_cluster();
        restoring(&mut c);
        let c = with_condition(c, REASON_RESTORE_COMPLETED, "done");
        assert_eq!(gate(&c), Gate::Open);
    }
}
