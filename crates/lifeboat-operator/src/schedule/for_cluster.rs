//! The BackupSchedule Lifeboat keeps for each data component of a Cluster that sets
//! `spec.backup`, as KubeBlocks does: one schedule, named after the method, under the
//! component's default BackupPolicy.

use kube::{Resource, ResourceExt};
use lifeboat_api::apps::v1::{ClusterBackup, DEFAULT_BACKUP_CRON};
use lifeboat_api::dataprotection::v1alpha1::{
    BackupScheduleSpec, DEFAULT_RETENTION, SchedulePolicy,
};
use lifeboat_api::{BackupSchedule, Cluster};

use crate::naming;

/// The BackupSchedule of a Cluster's data component, from its `spec.backup`. `enabled`
/// defaults to false, as in KubeBlocks: a `spec.backup` that does not enable keeps the schedule
/// suspended.
pub fn schedule(cluster: &Cluster, component: &str, backup: &ClusterBackup) -> BackupSchedule {
    let name = cluster.name_any();
    let mut bs = BackupSchedule::new(
        &naming::backup_schedule(&name, component),
        BackupScheduleSpec {
            backup_policy_name: naming::backup_policy(&name, component),
            starting_deadline_minutes: backup.starting_deadline_minutes,
            schedules: vec![SchedulePolicy {
                enabled: Some(backup.enabled.unwrap_or(false)),
                name: String::new(),
                backup_method: backup.method.clone(),
                cron_expression: backup
                    .cron_expression
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .unwrap_or_else(|| DEFAULT_BACKUP_CRON.to_owned()),
                retention_period: Some(
                    backup
                        .retention_period
                        .clone()
                        .unwrap_or_else(|| DEFAULT_RETENTION.to_owned()),
                ),
                parameters: vec![],
                drill: backup.drill.clone(),
            }],
        },
    );
    bs.metadata.namespace = cluster.namespace();
    bs.metadata.labels = Some(crate::cluster::build::selector_labels(
        &name, component, None,
    ));
    bs.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
    bs
}

/// The repo a Cluster's `spec.backup` names for its default BackupPolicy.
pub fn repo(cluster: &Cluster) -> Option<String> {
    cluster
        .spec
        .backup
        .as_ref()
        .and_then(|b| b.repo_name.clone())
        .filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_api::labels;

    fn cluster() -> Cluster {
        let mut c = Cluster::new("fdb", Default::default());
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn a_cluster_backup_becomes_kubeblocks_named_schedule_with_its_defaults() {
        let c = cluster();
        let bs = schedule(
            &c,
            "falkordb",
            &ClusterBackup {
                method: "datafile".into(),
                ..Default::default()
            },
        );
        assert_eq!(bs.name_any(), "fdb-falkordb-backup-schedule");
        assert_eq!(bs.spec.backup_policy_name, "fdb-falkordb-backup-policy");
        let s = &bs.spec.schedules[0];
        assert_eq!(s.enabled, Some(false), "KubeBlocks' default is disabled");
        assert_eq!(s.cron_expression, "0 18 * * *");
        assert_eq!(s.retention_period.as_deref(), Some("7d"));
        assert_eq!(s.schedule_name(), "datafile");
        assert_eq!(
            bs.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::INSTANCE)),
            Some(&"fdb".to_owned())
        );
        assert!(crate::ownership::controlled_by(&bs.metadata, "uid-1"));
    }

    #[test]
    fn the_cluster_backup_fields_are_carried() {
        let bs = schedule(
            &cluster(),
            "falkordb",
            &ClusterBackup {
                enabled: Some(true),
                method: "datafile".into(),
                cron_expression: Some("*/5 * * * *".into()),
                retention_period: Some("2h".into()),
                starting_deadline_minutes: Some(3),
                ..Default::default()
            },
        );
        let s = &bs.spec.schedules[0];
        assert_eq!(s.enabled, Some(true));
        assert_eq!(s.cron_expression, "*/5 * * * *");
        assert_eq!(s.retention_period.as_deref(), Some("2h"));
        assert_eq!(bs.spec.starting_deadline_minutes, Some(3));
    }
}
