//! The field report's manifests apply unchanged: they deserialize into Lifeboat's types and pass
//! the generated schemas (structure and CEL). Mistakes in them are rejected with a message that
//! names the field.

use lifeboat_api::dataprotection::v1alpha1::BackupDeletionPolicy;
use lifeboat_api::schema_check::{Violation, check};
use lifeboat_api::{Backup, Cluster, restore_annotation};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/field-report/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn as_json(yaml: &str) -> Value {
    serde_yaml::from_str(yaml).expect("fixture is YAML")
}

fn violations(v: &Value) -> Vec<Violation> {
    check(v, None).expect("a kind Lifeboat serves")
}

fn assert_rejected(v: &Value, field: &str, needle: &str) {
    let found = violations(v);
    assert!(
        found
            .iter()
            .any(|x| x.field == field && x.message.contains(needle)),
        "expected a violation on {field} containing {needle:?}; got {found:?}"
    );
}

#[test]
fn annotated_cluster_deserializes_and_passes_schema() {
    let yaml = fixture("cluster-restore-annotation.yaml");
    let cluster: Cluster = serde_yaml::from_str(&yaml).expect("typed");
    assert_eq!(cluster.spec.cluster_def.as_deref(), Some("falkordb"));
    assert_eq!(cluster.spec.topology.as_deref(), Some("replication"));
    assert_eq!(cluster.spec.component_specs.len(), 2);
    assert_eq!(cluster.spec.component_specs[0].replicas, 2);
    assert_eq!(cluster.spec.component_specs[1].name, "falkordb-sent");
    let annotation = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(lifeboat_api::labels::RESTORE_FROM_BACKUP))
        .expect("annotation kept");
    let parsed = restore_annotation::parse(annotation).expect("annotation parses");
    assert_eq!(parsed["falkordb"].name, "fdb-backup-datafile");
    assert_eq!(violations(&as_json(&yaml)), vec![]);
}

#[test]
fn spec_restore_cluster_deserializes_and_passes_schema() {
    let yaml = fixture("cluster-spec-restore.yaml");
    let cluster: Cluster = serde_yaml::from_str(&yaml).expect("typed");
    let restore = cluster.spec.restore.expect("spec.restore kept");
    assert_eq!(restore.source.kind, "Backup");
    assert_eq!(restore.source.api_group, "dataprotection.kubeblocks.io");
    assert_eq!(restore.source.name, "fdb-backup-datafile");
    assert_eq!(restore.source.namespace.as_deref(), Some("demo"));
    assert_eq!(violations(&as_json(&yaml)), vec![]);
}

#[test]
fn backup_deserializes_and_passes_schema() {
    let yaml = fixture("backup.yaml");
    let backup: Backup = serde_yaml::from_str(&yaml).expect("typed");
    assert_eq!(backup.spec.backup_method, "datafile");
    assert_eq!(backup.spec.deletion_policy, BackupDeletionPolicy::Delete);
    assert_eq!(violations(&as_json(&yaml)), vec![]);
}

#[test]
fn typed_round_trip_keeps_every_field() {
    // Serializing the typed object must give back what the user wrote, so that nothing in a
    // KubeBlocks manifest is silently dropped by Lifeboat's types.
    for name in [
        "cluster-restore-annotation.yaml",
        "cluster-spec-restore.yaml",
    ] {
        let yaml = fixture(name);
        let typed: Cluster = serde_yaml::from_str(&yaml).expect("typed");
        let back = serde_json::to_value(&typed).expect("serializes");
        assert_eq!(back, as_json(&yaml), "{name}");
    }
    let yaml = fixture("backup.yaml");
    let typed: Backup = serde_yaml::from_str(&yaml).expect("typed");
    assert_eq!(
        serde_json::to_value(&typed).expect("serializes"),
        as_json(&yaml)
    );
}

#[test]
fn misspelt_field_is_rejected_by_name() {
    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    let spec = v["spec"].as_object_mut().expect("spec");
    let policy = spec.remove("terminationPolicy").expect("present");
    spec.insert("terminationPolicyy".into(), policy);
    assert_rejected(&v, "spec.terminationPolicyy", "unknown field");
    assert_rejected(&v, "spec.terminationPolicy", "Required value");

    let mut v = as_json(&fixture("cluster-restore-annotation.yaml"));
    v["spec"]["componentSpecs"][0]["replica"] = json!(2);
    assert_rejected(&v, "spec.componentSpecs[0].replica", "unknown field");

    let mut v = as_json(&fixture("backup.yaml"));
    v["spec"]["backupMethd"] = json!("datafile");
    assert_rejected(&v, "spec.backupMethd", "unknown field");
}

#[test]
fn unknown_termination_policy_is_rejected_by_name() {
    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["terminationPolicy"] = json!("Halt");
    assert_rejected(&v, "spec.terminationPolicy", "unsupported value \"Halt\"");
    // The typed layer agrees, and says which values it accepts.
    let e = serde_json::from_value::<Cluster>(v).expect_err("bad enum");
    assert!(
        e.to_string().contains("Halt") && e.to_string().contains("WipeOut"),
        "{e}"
    );
}

#[test]
fn wrong_enums_elsewhere_are_rejected_by_name() {
    let mut v = as_json(&fixture("backup.yaml"));
    v["spec"]["deletionPolicy"] = json!("Keep");
    assert_rejected(&v, "spec.deletionPolicy", "unsupported value \"Keep\"");

    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["restore"]["parameters"] =
        json!({"dataprotection.kubeblocks.io/volume-restore-policy": "Sometimes"});
    let found = violations(&v);
    assert!(
        found
            .iter()
            .any(|x| x.message.contains("must be Parallel or Serial")),
        "{found:?}"
    );
}

#[test]
fn duplicate_component_names_are_rejected_by_name() {
    let mut v = as_json(&fixture("cluster-restore-annotation.yaml"));
    v["spec"]["componentSpecs"][1]["name"] = json!("falkordb");
    let found = violations(&v);
    assert!(
        found.iter().any(|x| x
            .message
            .contains("spec.componentSpecs[].name must be unique")),
        "{found:?}"
    );
}

#[test]
fn wrong_types_and_bounds_are_rejected_by_name() {
    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["componentSpecs"][0]["replicas"] = json!("two");
    assert_rejected(
        &v,
        "spec.componentSpecs[0].replicas",
        "must be of type integer",
    );

    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["componentSpecs"][0]["replicas"] = json!(-1);
    assert_rejected(
        &v,
        "spec.componentSpecs[0].replicas",
        "greater than or equal to 0",
    );

    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["componentSpecs"][0]["name"] = json!("a-component-name-far-too-long");
    assert_rejected(&v, "spec.componentSpecs[0].name", "longer than 22");

    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["componentSpecs"] = json!([]);
    assert_rejected(&v, "spec.componentSpecs", "at least 1 items");
}

#[test]
fn restore_source_must_be_a_backup() {
    let mut v = as_json(&fixture("cluster-spec-restore.yaml"));
    v["spec"]["restore"]["source"]["kind"] = json!("Snapshot");
    let found = violations(&v);
    assert!(
        found
            .iter()
            .any(|x| x.message.contains("must reference a Backup")),
        "{found:?}"
    );
}
