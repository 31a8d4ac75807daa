//! The CRDs generated from the types, and their rendering to YAML for `deploy/crds`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Backup, BackupPolicy, BackupRepo, BackupSchedule, Cluster, Restore};

const HEADER: &str = "# Generated from crates/lifeboat-api by `cargo xtask crdgen`. Do not edit.\n";

/// Every CRD Lifeboat serves.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        Cluster::crd(),
        Backup::crd(),
        BackupPolicy::crd(),
        BackupRepo::crd(),
        BackupSchedule::crd(),
        Restore::crd(),
    ]
}

/// Each CRD as `(file name, YAML)`, named `<group>_<plural>.yaml` as KubeBlocks names its own.
pub fn rendered() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    all()
        .into_iter()
        .map(|crd| {
            let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            serde_yaml::to_string(&crd).map(|y| (file, format!("{HEADER}{y}")))
        })
        .collect()
}

/// The `openAPIV3Schema` of a CRD as JSON, for validating manifests against it.
pub fn schema_of(crd: &CustomResourceDefinition) -> Option<serde_json::Value> {
    let schema = crd
        .spec
        .versions
        .first()?
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?;
    serde_json::to_value(schema).ok()
}

/// The files whose rendered YAML differs from `on_disk` (file name to current content); an
/// empty list means the checked-in YAML matches the types.
pub fn stale_files(
    rendered: &[(String, String)],
    on_disk: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    rendered
        .iter()
        .filter(|(file, yaml)| on_disk(file).as_deref() != Some(yaml.as_str()))
        .map(|(file, _)| file.clone())
        .collect()
}
