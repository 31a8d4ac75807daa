//! The checked-in CRD YAML matches the types, and the printer columns match KubeBlocks'.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use lifeboat_api::crds;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

#[test]
fn checked_in_yaml_matches_the_types() {
    let rendered = crds::rendered().expect("renders");
    let stale = crds::stale_files(&rendered, |f| {
        std::fs::read_to_string(crd_dir().join(f)).ok()
    });
    assert!(
        stale.is_empty(),
        "deploy/crds is stale for {stale:?}: run `cargo xtask crdgen` and commit the result"
    );
}

#[test]
fn drift_check_catches_a_field_added_without_regenerating() {
    let on_disk = crds::rendered().expect("renders");
    // A field added to the Cluster spec, as a developer would add one to the Rust type.
    let mut changed = crds::all();
    let cluster = changed
        .iter_mut()
        .find(|c| c.spec.names.kind == "Cluster")
        .expect("Cluster CRD");
    let spec = cluster.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("spec"))
        .and_then(|s| s.properties.as_mut())
        .expect("spec properties");
    spec.insert(
        "newField".into(),
        JSONSchemaProps {
            type_: Some("string".into()),
            ..Default::default()
        },
    );
    let rendered: Vec<(String, String)> = changed
        .iter()
        .map(|crd| {
            let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
            (file, serde_yaml::to_string(crd).expect("yaml"))
        })
        .collect();
    let header_free: Vec<(String, String)> = on_disk
        .iter()
        .map(|(f, y)| {
            (
                f.clone(),
                y.lines().skip(1).collect::<Vec<_>>().join("\n") + "\n",
            )
        })
        .collect();
    let stale = crds::stale_files(&rendered, |f| {
        header_free
            .iter()
            .find(|(n, _)| n == f)
            .map(|(_, y)| y.clone())
    });
    assert_eq!(stale, vec!["apps.kubeblocks.io_clusters.yaml".to_string()]);
}

fn columns(kind: &str) -> Vec<String> {
    let crd = crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    crd.spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.priority.unwrap_or(0) == 0)
        .map(|c| c.name)
        .collect()
}

#[test]
fn printer_columns_match_kubeblocks() {
    assert_eq!(
        columns("Cluster"),
        ["CLUSTER-DEFINITION", "TERMINATION-POLICY", "STATUS", "AGE"]
    );
    assert_eq!(
        columns("Backup"),
        ["METHOD", "REPO", "STATUS", "TOTAL-SIZE", "DURATION"]
    );
    assert_eq!(columns("Restore"), ["BACKUP", "STATUS", "DURATION"]);
    // KubeBlocks' BackupSchedule: STATUS and AGE, short name bs.
    assert_eq!(columns("BackupSchedule"), ["STATUS", "AGE"]);
    let bs = crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "BackupSchedule")
        .expect("BackupSchedule is served");
    assert_eq!(bs.spec.names.short_names, Some(vec!["bs".to_owned()]));
}

#[test]
fn groups_versions_and_scopes_match_kubeblocks() {
    let got: Vec<(String, String, String, String)> = crds::all()
        .into_iter()
        .map(|c| {
            (
                c.spec.group.clone(),
                c.spec.versions[0].name.clone(),
                c.spec.names.kind.clone(),
                c.spec.scope.clone(),
            )
        })
        .collect();
    let want = [
        ("apps.kubeblocks.io", "v1", "Cluster", "Namespaced"),
        (
            "dataprotection.kubeblocks.io",
            "v1alpha1",
            "Backup",
            "Namespaced",
        ),
        (
            "dataprotection.kubeblocks.io",
            "v1alpha1",
            "BackupPolicy",
            "Namespaced",
        ),
        (
            "dataprotection.kubeblocks.io",
            "v1alpha1",
            "BackupRepo",
            "Cluster",
        ),
        (
            "dataprotection.kubeblocks.io",
            "v1alpha1",
            "BackupSchedule",
            "Namespaced",
        ),
        (
            "dataprotection.kubeblocks.io",
            "v1alpha1",
            "Restore",
            "Namespaced",
        ),
    ];
    let want: Vec<(String, String, String, String)> = want
        .iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect();
    assert_eq!(got, want);
}
