//! The deprecated `kubeblocks.io/restore-from-backup` annotation.
//!
//! KubeBlocks 1.2.0-alpha.2 removed it without a replacement or an error, so Clusters carrying it
//! came up empty. Lifeboat honours it: it is parsed here, strictly, and the operator translates
//! it into the same restore as `spec.restore`, with a deprecation Warning event.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use serde::{Deserialize, Serialize};

use crate::dataprotection::v1alpha1::VolumeClaimRestorePolicy;
use crate::labels::RESTORE_FROM_BACKUP;

/// One component's entry in the annotation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentRestoreRequest {
    /// The Backup's name.
    pub name: String,
    /// The Backup's namespace; the Cluster's when absent.
    #[serde(default)]
    pub namespace: Option<String>,
    /// `Parallel` or `Serial`.
    #[serde(default)]
    pub volume_restore_policy: Option<VolumeClaimRestorePolicy>,
    /// Point-in-time target (maps to `spec.restore.pitr`).
    #[serde(default)]
    pub restore_time: Option<String>,
    /// Extra environment for restore jobs (maps to the restore-env parameter).
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// `"true"` or `"false"` (maps to the defer-post-ready parameter).
    #[serde(default)]
    pub do_ready_restore_after_cluster_running: Option<String>,
}

/// Why an annotation value is unusable. Each message names the annotation and the field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnnotationError {
    #[error(
        "annotation {RESTORE_FROM_BACKUP} is not valid JSON of the form {{\"<component>\": {{\"name\": \"<backup>\", ...}}}}: {0}"
    )]
    Malformed(String),
    #[error("annotation {RESTORE_FROM_BACKUP} names no component")]
    Empty,
    #[error("annotation {RESTORE_FROM_BACKUP}: component {component:?} has an empty backup name")]
    EmptyName { component: String },
    #[error(
        "annotation {RESTORE_FROM_BACKUP}: component {component:?} has doReadyRestoreAfterClusterRunning {value:?}; expected \"true\" or \"false\""
    )]
    BadBool { component: String, value: String },
}

/// Parses the annotation's value into per-component requests, keyed by component name.
pub fn parse(value: &str) -> Result<BTreeMap<String, ComponentRestoreRequest>, AnnotationError> {
    let map: BTreeMap<String, ComponentRestoreRequest> =
        serde_json::from_str(value).map_err(|e| AnnotationError::Malformed(e.to_string()))?;
    if map.is_empty() {
        return Err(AnnotationError::Empty);
    }
    for (component, req) in &map {
        if req.name.trim().is_empty() {
            return Err(AnnotationError::EmptyName {
                component: component.clone(),
            });
        }
        if let Some(v) = &req.do_ready_restore_after_cluster_running
            && v != "true"
            && v != "false"
        {
            return Err(AnnotationError::BadBool {
                component: component.clone(),
                value: v.clone(),
            });
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_field_report_annotation() {
        let v = r#"{"falkordb":{"name":"fdb-backup-datafile","namespace":"demo","volumeRestorePolicy":"Parallel"}}"#;
        let m = parse(v).expect("valid annotation");
        let r = &m["falkordb"];
        assert_eq!(r.name, "fdb-backup-datafile");
        assert_eq!(r.namespace.as_deref(), Some("demo"));
        assert_eq!(
            r.volume_restore_policy,
            Some(VolumeClaimRestorePolicy::Parallel)
        );
    }

    #[test]
    fn rejects_malformed_json_naming_the_annotation() {
        let e = parse("{falkordb:").expect_err("not JSON");
        assert!(e.to_string().contains(RESTORE_FROM_BACKUP), "{e}");
    }

    #[test]
    fn rejects_unknown_fields_and_bad_enums() {
        let e = parse(r#"{"falkordb":{"name":"b","volumeRestorPolicy":"Serial"}}"#)
            .expect_err("misspelt key");
        assert!(e.to_string().contains("volumeRestorPolicy"), "{e}");
        let e = parse(r#"{"falkordb":{"name":"b","volumeRestorePolicy":"Sometimes"}}"#)
            .expect_err("bad policy");
        assert!(e.to_string().contains("Sometimes"), "{e}");
    }

    #[test]
    fn rejects_empty_requests() {
        assert_eq!(parse("{}"), Err(AnnotationError::Empty));
        assert_eq!(
            parse(r#"{"falkordb":{"name":" "}}"#),
            Err(AnnotationError::EmptyName {
                component: "falkordb".into()
            })
        );
        assert!(matches!(
            parse(r#"{"falkordb":{"name":"b","doReadyRestoreAfterClusterRunning":"yes"}}"#),
            Err(AnnotationError::BadBool { .. })
        ));
    }
}
