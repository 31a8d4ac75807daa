//! Rewriting the deprecated `kubeblocks.io/restore-from-backup` annotation as `spec.restore`.
//!
//! The annotation is keyed by component, while `spec.restore` names one Backup for the whole
//! Cluster, so only an annotation whose components all agree has an equivalent.

use std::collections::BTreeMap;

use lifeboat_api::apps::v1::{ClusterRestore, RestoreSource};
use lifeboat_api::dataprotection::v1alpha1::VolumeClaimRestorePolicy;
use lifeboat_api::labels::{
    PARAM_DEFER_POST_READY, PARAM_RESTORE_ENV, PARAM_VOLUME_RESTORE_POLICY,
};
use lifeboat_api::restore_annotation::ComponentRestoreRequest;

/// Why an annotation has no single `spec.restore` equivalent.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NoEquivalent {
    #[error("the annotation names no component")]
    Empty,
    #[error(
        "components {first:?} and {other:?} restore from different backups ({first_backup} and {other_backup}), but spec.restore names one backup for the whole cluster"
    )]
    DifferentBackups {
        first: String,
        other: String,
        first_backup: String,
        other_backup: String,
    },
    #[error(
        "components {first:?} and {other:?} set {field} differently, but spec.restore applies one value to the whole cluster"
    )]
    DifferentSettings {
        first: String,
        other: String,
        field: &'static str,
    },
    #[error("the env of component {component:?} cannot be written as JSON: {message}")]
    Env { component: String, message: String },
}

/// The `spec.restore` equivalent to the parsed annotation of a Cluster in `cluster_namespace`.
pub fn to_spec_restore(
    requests: &BTreeMap<String, ComponentRestoreRequest>,
    cluster_namespace: Option<&str>,
) -> Result<ClusterRestore, NoEquivalent> {
    let mut entries = requests.iter();
    let Some((first_component, first)) = entries.next() else {
        return Err(NoEquivalent::Empty);
    };
    // An absent namespace means the Cluster's, so `demo` and absent agree for a Cluster in demo.
    let effective_ns = |r: &ComponentRestoreRequest| {
        r.namespace
            .as_deref()
            .or(cluster_namespace)
            .map(str::to_owned)
    };
    let backup_of = |r: &ComponentRestoreRequest| match effective_ns(r) {
        Some(ns) => format!("{ns}/{}", r.name),
        None => r.name.clone(),
    };
    for (component, r) in entries {
        let differs = |field: &'static str| NoEquivalent::DifferentSettings {
            first: first_component.clone(),
            other: component.clone(),
            field,
        };
        if r.name != first.name || effective_ns(r) != effective_ns(first) {
            return Err(NoEquivalent::DifferentBackups {
                first: first_component.clone(),
                other: component.clone(),
                first_backup: backup_of(first),
                other_backup: backup_of(r),
            });
        }
        if effective_policy(r) != effective_policy(first) {
            return Err(differs("volumeRestorePolicy"));
        }
        if r.restore_time != first.restore_time {
            return Err(differs("restoreTime"));
        }
        if r.env != first.env {
            return Err(differs("env"));
        }
        if r.do_ready_restore_after_cluster_running != first.do_ready_restore_after_cluster_running
        {
            return Err(differs("doReadyRestoreAfterClusterRunning"));
        }
    }

    let mut parameters = BTreeMap::new();
    if let Some(policy) = first.volume_restore_policy {
        let value = match policy {
            VolumeClaimRestorePolicy::Parallel => "Parallel",
            VolumeClaimRestorePolicy::Serial => "Serial",
        };
        parameters.insert(PARAM_VOLUME_RESTORE_POLICY.to_owned(), value.to_owned());
    }
    if !first.env.is_empty() {
        let env = serde_json::to_string(&first.env).map_err(|e| NoEquivalent::Env {
            component: first_component.clone(),
            message: e.to_string(),
        })?;
        parameters.insert(PARAM_RESTORE_ENV.to_owned(), env);
    }
    if let Some(defer) = &first.do_ready_restore_after_cluster_running {
        parameters.insert(PARAM_DEFER_POST_READY.to_owned(), defer.clone());
    }
    Ok(ClusterRestore {
        source: RestoreSource {
            api_group: "dataprotection.kubeblocks.io".to_owned(),
            kind: "Backup".to_owned(),
            name: first.name.clone(),
            namespace: first.namespace.clone(),
        },
        pitr: first.restore_time.clone(),
        parameters,
    })
}

/// Absent and `Parallel` mean the same: parallel is the default.
fn effective_policy(r: &ComponentRestoreRequest) -> VolumeClaimRestorePolicy {
    r.volume_restore_policy.unwrap_or_default()
}

/// `spec.restore` as a YAML snippet to paste into the Cluster.
pub fn snippet(restore: &ClusterRestore) -> Result<String, serde_yaml::Error> {
    // Structs rather than a JSON map keep the fields in the API's order (source first).
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        spec: Spec<'a>,
    }
    #[derive(serde::Serialize)]
    struct Spec<'a> {
        restore: &'a ClusterRestore,
    }
    serde_yaml::to_string(&Doc {
        spec: Spec { restore },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EnvVar;
    use lifeboat_api::restore_annotation::parse;

    #[test]
    fn field_report_annotation_becomes_spec_restore() {
        let requests = parse(
            r#"{"falkordb":{"name":"fdb-backup-datafile","namespace":"demo","volumeRestorePolicy":"Parallel"}}"#,
        )
        .expect("valid annotation");
        let restore = to_spec_restore(&requests, Some("demo")).expect("one backup");
        assert_eq!(restore.source.api_group, "dataprotection.kubeblocks.io");
        assert_eq!(restore.source.kind, "Backup");
        assert_eq!(restore.source.name, "fdb-backup-datafile");
        assert_eq!(restore.source.namespace.as_deref(), Some("demo"));
        assert_eq!(restore.pitr, None);
        assert_eq!(
            restore.parameters,
            BTreeMap::from([(
                PARAM_VOLUME_RESTORE_POLICY.to_owned(),
                "Parallel".to_owned()
            )])
        );
        let yaml = snippet(&restore).expect("serialisable");
        assert!(yaml.starts_with("spec:\n  restore:\n"), "{yaml}");
        assert!(yaml.contains("name: fdb-backup-datafile"), "{yaml}");
    }

    #[test]
    fn every_setting_maps_to_its_parameter() {
        let requests = parse(
            r#"{"falkordb":{"name":"b","volumeRestorePolicy":"Serial","restoreTime":"2026-01-01T00:00:00Z",
                "env":[{"name":"A","value":"1"}],"doReadyRestoreAfterClusterRunning":"true"}}"#,
        )
        .expect("valid annotation");
        let restore = to_spec_restore(&requests, Some("demo")).expect("one backup");
        assert_eq!(
            restore.source.namespace, None,
            "absent namespace stays absent"
        );
        assert_eq!(restore.pitr.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(restore.parameters[PARAM_VOLUME_RESTORE_POLICY], "Serial");
        assert_eq!(restore.parameters[PARAM_DEFER_POST_READY], "true");
        let env: Vec<EnvVar> =
            serde_json::from_str(&restore.parameters[PARAM_RESTORE_ENV]).expect("env is JSON");
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].name, "A");
        assert_eq!(env[0].value.as_deref(), Some("1"));
    }

    #[test]
    fn components_sharing_a_backup_have_an_equivalent() {
        // The sentinel entry omits the namespace and the default policy; both agree with the
        // data component's explicit values for a Cluster in demo.
        let requests = parse(
            r#"{"falkordb":{"name":"b","namespace":"demo","volumeRestorePolicy":"Parallel"},
                "falkordb-sent":{"name":"b"}}"#,
        )
        .expect("valid annotation");
        let restore = to_spec_restore(&requests, Some("demo")).expect("same backup");
        assert_eq!(restore.source.name, "b");
    }

    #[test]
    fn different_backups_have_no_equivalent() {
        let requests =
            parse(r#"{"falkordb":{"name":"a"},"falkordb-sent":{"name":"b"}}"#).expect("valid");
        let err = to_spec_restore(&requests, Some("demo")).expect_err("two backups");
        assert!(
            matches!(err, NoEquivalent::DifferentBackups { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("demo/a") && msg.contains("demo/b"), "{msg}");

        let requests =
            parse(r#"{"x":{"name":"a","namespace":"one"},"y":{"name":"a","namespace":"two"}}"#)
                .expect("valid");
        assert!(matches!(
            to_spec_restore(&requests, Some("demo")),
            Err(NoEquivalent::DifferentBackups { .. })
        ));
    }

    #[test]
    fn different_settings_have_no_equivalent() {
        let requests = parse(
            r#"{"falkordb":{"name":"a","volumeRestorePolicy":"Serial"},"falkordb-sent":{"name":"a"}}"#,
        )
        .expect("valid");
        assert_eq!(
            to_spec_restore(&requests, None),
            Err(NoEquivalent::DifferentSettings {
                first: "falkordb".into(),
                other: "falkordb-sent".into(),
                field: "volumeRestorePolicy"
            })
        );
    }
}
