//! The CEL rules in the generated CRDs, evaluated as the API server would: both the accepting
//! and the rejecting side of each.

use lifeboat_api::schema_check::check;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/field-report/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_yaml::from_str(&text).expect("fixture is YAML")
}

fn messages(new: &Value, old: Option<&Value>) -> Vec<String> {
    check(new, old)
        .expect("a kind Lifeboat serves")
        .into_iter()
        .map(|v| v.to_string())
        .collect()
}

#[test]
fn unchanged_restore_is_accepted_on_update() {
    let old = fixture("cluster-spec-restore.yaml");
    let mut new = old.clone();
    new["spec"]["componentSpecs"][0]["replicas"] = json!(3);
    assert_eq!(messages(&new, Some(&old)), Vec::<String>::new());
}

#[test]
fn changing_spec_restore_is_rejected_on_update() {
    let old = fixture("cluster-spec-restore.yaml");
    let mut new = old.clone();
    new["spec"]["restore"]["source"]["name"] = json!("another-backup");
    let m = messages(&new, Some(&old));
    assert!(
        m.iter().any(|m| m.contains("spec.restore is immutable")),
        "{m:?}"
    );
}

#[test]
fn adding_spec_restore_to_an_existing_cluster_is_rejected() {
    let mut old = fixture("cluster-spec-restore.yaml");
    let restore = old["spec"]
        .as_object_mut()
        .and_then(|s| s.remove("restore"))
        .expect("fixture has spec.restore");
    let mut new = old.clone();
    new["spec"]["restore"] = restore;
    let m = messages(&new, Some(&old));
    assert!(
        m.iter()
            .any(|m| m.contains("can only be set when the Cluster is created")),
        "{m:?}"
    );
    // And creating a Cluster with it is fine.
    assert_eq!(messages(&new, None), Vec::<String>::new());
}

#[test]
fn removing_spec_restore_is_rejected() {
    let old = fixture("cluster-spec-restore.yaml");
    let mut new = old.clone();
    new["spec"].as_object_mut().map(|s| s.remove("restore"));
    let m = messages(&new, Some(&old));
    assert!(
        m.iter().any(|m| m.contains("cannot be removed once set")),
        "{m:?}"
    );
}

#[test]
fn cluster_def_and_topology_are_immutable() {
    let old = fixture("cluster-restore-annotation.yaml");
    let mut new = old.clone();
    new["spec"]["clusterDef"] = json!("redis");
    let m = messages(&new, Some(&old));
    assert!(
        m.iter().any(|m| m.contains("spec.clusterDef is immutable")),
        "{m:?}"
    );
    let mut new = old.clone();
    new["spec"]["topology"] = json!("standalone");
    let m = messages(&new, Some(&old));
    assert!(
        m.iter().any(|m| m.contains("spec.topology is immutable")),
        "{m:?}"
    );
}

#[test]
fn backup_method_and_policy_are_immutable() {
    let old = fixture("backup.yaml");
    let mut new = old.clone();
    new["spec"]["backupMethod"] = json!("volume-snapshot");
    let m = messages(&new, Some(&old));
    assert!(
        m.iter()
            .any(|m| m.contains("spec.backupMethod is immutable")),
        "{m:?}"
    );
    let mut new = old.clone();
    new["spec"]["deletionPolicy"] = json!("Retain");
    assert_eq!(messages(&new, Some(&old)), Vec::<String>::new());
}

#[test]
fn backup_repo_provider_is_checked() {
    let repo = |provider: &str| {
        json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
            "kind": "BackupRepo",
            "metadata": {"name": "r"},
            "spec": {"storageProviderRef": provider, "config": {"bucket": "b"}}
        })
    };
    assert_eq!(messages(&repo("minio"), None), Vec::<String>::new());
    let m = messages(&repo("ftp"), None);
    assert!(
        m.iter()
            .any(|m| m.contains("must be one of s3, minio, pvc")),
        "{m:?}"
    );
}

#[test]
fn backup_policy_needs_exactly_one_target_form() {
    let policy = |spec: Value| {
        json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
            "kind": "BackupPolicy",
            "metadata": {"name": "p", "namespace": "demo"},
            "spec": spec
        })
    };
    let methods = json!([{"name": "datafile"}]);
    let ok = policy(json!({"target": {}, "backupMethods": methods}));
    assert_eq!(messages(&ok, None), Vec::<String>::new());
    let neither = policy(json!({"backupMethods": methods}));
    let m = messages(&neither, None);
    assert!(
        m.iter().any(|m| m.contains("exactly one of spec.target")),
        "{m:?}"
    );
    let dup = policy(json!({"target": {}, "backupMethods": [{"name": "a"}, {"name": "a"}]}));
    let m = messages(&dup, None);
    assert!(
        m.iter()
            .any(|m| m.contains("backupMethods[].name must be unique")),
        "{m:?}"
    );
}

#[test]
fn backup_schedule_names_are_unique_with_the_method_standing_for_an_empty_name() {
    let schedule = |schedules: Value| {
        json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
            "kind": "BackupSchedule",
            "metadata": {"name": "s", "namespace": "demo"},
            "spec": {"backupPolicyName": "p", "schedules": schedules}
        })
    };
    let ok = schedule(json!([
        {"backupMethod": "datafile", "cronExpression": "0 3 * * *"},
        {"name": "hourly", "backupMethod": "datafile", "cronExpression": "0 * * * *"}
    ]));
    assert_eq!(messages(&ok, None), Vec::<String>::new());
    let clash = schedule(json!([
        {"backupMethod": "datafile", "cronExpression": "0 3 * * *"},
        {"name": "datafile", "backupMethod": "other", "cronExpression": "0 * * * *"}
    ]));
    let m = messages(&clash, None);
    assert!(
        m.iter()
            .any(|m| m.contains("spec.schedules[].name must be unique")),
        "{m:?}"
    );
}

#[test]
fn a_cluster_backup_asking_for_what_lifeboat_does_not_take_is_refused_naming_the_field() {
    let mut cluster = fixture("cluster-spec-restore.yaml");
    if let Some(spec) = cluster["spec"].as_object_mut() {
        spec.remove("restore");
    }
    cluster["spec"]["backup"] =
        json!({"enabled": true, "method": "datafile", "cronExpression": "0 3 * * *"});
    assert_eq!(messages(&cluster, None), Vec::<String>::new());
    cluster["spec"]["backup"]["pitrEnabled"] = json!(true);
    let m = messages(&cluster, None);
    assert!(
        m.iter().any(|m| m.contains("spec.backup.pitrEnabled")),
        "{m:?}"
    );
    cluster["spec"]["backup"]["pitrEnabled"] = json!(false);
    cluster["spec"]["backup"]["incrementalBackupEnabled"] = json!(true);
    let m = messages(&cluster, None);
    assert!(
        m.iter()
            .any(|m| m.contains("spec.backup.incrementalBackupEnabled")),
        "{m:?}"
    );
}
