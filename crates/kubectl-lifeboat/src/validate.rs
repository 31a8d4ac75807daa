//! `kubectl lifeboat validate`: checks manifests offline the way the API server would, so a bad
//! manifest is rejected before it reaches a cluster.

use lifeboat_api::labels::RESTORE_FROM_BACKUP;
use lifeboat_api::schema_check::{self, CheckError, Violation};
use lifeboat_api::{crds, restore_annotation};
use serde::Deserialize;
use serde_json::Value;

use crate::annotation;

/// What validating one file found.
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    /// One `FILE: Kind/name: field: message` line per problem; any problem fails the command.
    pub problems: Vec<String>,
    /// Deprecations and skipped documents, for stderr; they do not fail the command.
    pub warnings: Vec<String>,
}

impl Report {
    fn problem(&mut self, file: &str, object: &str, field: &str, message: impl std::fmt::Display) {
        // A violation of the whole object has an empty path; `.` keeps the line's four fields.
        let field = if field.is_empty() { "." } else { field };
        self.problems
            .push(format!("{file}: {object}: {field}: {message}"));
    }

    fn warning(&mut self, file: &str, object: &str, message: impl std::fmt::Display) {
        self.warnings
            .push(format!("{file}: {object}: warning: {message}"));
    }
}

/// Validates every document of a (multi-document) YAML file. `file` is only used in messages.
pub fn validate(file: &str, content: &str) -> Report {
    let mut report = Report::default();
    for (index, doc) in serde_yaml::Deserializer::from_str(content).enumerate() {
        let label = format!("document {}", index + 1);
        let value = match Value::deserialize(doc) {
            Ok(v) => v,
            Err(e) => {
                report.problem(file, &label, ".", format!("not valid YAML: {e}"));
                // The parser cannot resynchronise after a syntax error; later documents would
                // only produce noise.
                break;
            }
        };
        match value {
            Value::Null => {}
            Value::Object(_) if is_list(&value) => {
                let items = value
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (i, item) in items.iter().enumerate() {
                    check_object(file, &format!("{label} item {}", i + 1), item, &mut report);
                }
            }
            _ => check_object(file, &label, &value, &mut report),
        }
    }
    report
}

fn is_list(v: &Value) -> bool {
    v.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && v.get("kind").and_then(Value::as_str) == Some("List")
}

/// `Kind/name` as kubectl prints it, falling back to the document's position.
fn object_name(v: &Value, fallback: &str) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let meta = v.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .or_else(|| {
            meta.and_then(|m| m.get("generateName"))
                .and_then(Value::as_str)
        });
    match (kind, name) {
        ("", _) => fallback.to_owned(),
        (kind, Some(name)) => format!("{kind}/{name}"),
        (kind, None) => format!("{kind} ({fallback})"),
    }
}

/// Whether `api_version` belongs to a group Lifeboat serves: a wrong version or kind there is a
/// mistake to report, while other groups (a Secret next to a Cluster) are simply not ours.
fn served_group(api_version: &str) -> bool {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    crds::all().iter().any(|crd| crd.spec.group == group)
}

fn check_object(file: &str, fallback: &str, v: &Value, report: &mut Report) {
    let object = object_name(v, fallback);
    if !v.is_object() {
        report.problem(
            file,
            &object,
            ".",
            "must be a mapping with apiVersion and kind",
        );
        return;
    }
    match schema_check::check(v, None) {
        Ok(violations) => {
            for Violation { field, message } in violations {
                report.problem(file, &object, &field, message);
            }
        }
        Err(e @ CheckError::NoKind) => report.problem(file, &object, "apiVersion", e),
        Err(e @ CheckError::UnknownKind { .. }) => {
            let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            if served_group(api_version) {
                report.problem(file, &object, "kind", e);
            } else {
                report.warning(file, &object, "skipped: not a kind served by Lifeboat");
            }
            return;
        }
    }
    if v.get("kind").and_then(Value::as_str) == Some("Cluster") {
        check_restore_annotation(file, &object, v, report);
    }
}

fn check_restore_annotation(file: &str, object: &str, cluster: &Value, report: &mut Report) {
    let meta = cluster.get("metadata");
    let Some(raw) = meta
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(RESTORE_FROM_BACKUP))
    else {
        return;
    };
    let field = format!("metadata.annotations[{RESTORE_FROM_BACKUP}]");
    let Some(raw) = raw.as_str() else {
        report.problem(file, object, &field, "must be a string");
        return;
    };
    let requests = match restore_annotation::parse(raw) {
        Ok(r) => r,
        Err(e) => {
            report.problem(file, object, &field, e);
            return;
        }
    };
    // The operator fails such a Cluster before creating anything, so this is an error here too.
    if cluster.get("spec").and_then(|s| s.get("restore")).is_some() {
        report.problem(
            file,
            object,
            &field,
            "is set together with spec.restore; a Cluster may request its restore only once: remove the deprecated annotation",
        );
        return;
    }
    let namespace = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str);
    let advice = match annotation::to_spec_restore(&requests, namespace) {
        Ok(restore) => match annotation::snippet(&restore) {
            Ok(yaml) => format!(
                "replace it with this equivalent spec.restore:\n{}",
                indent(&yaml)
            ),
            Err(e) => format!("its spec.restore equivalent could not be printed: {e}"),
        },
        Err(e) => format!("no single spec.restore is equivalent: {e}"),
    };
    report.warning(
        file,
        object,
        format!("annotation {RESTORE_FROM_BACKUP} is deprecated; {advice}"),
    );
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}\n"))
        .collect::<String>()
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "\
apiVersion: apps.kubeblocks.io/v1
kind: Cluster
metadata:
  name: fdb
  namespace: demo
spec:
  terminationPolicy: Delete
  componentSpecs:
    - name: falkordb
";

    #[test]
    fn valid_manifest_has_no_problems() {
        let r = validate("c.yaml", CLUSTER);
        assert_eq!(r, Report::default());
    }

    #[test]
    fn violations_are_printed_as_file_object_field_message() {
        let bad = CLUSTER
            .replace("terminationPolicy: Delete", "terminationPolicy: Sometimes")
            .replace("- name: falkordb", "- name: FalkorDB");
        let r = validate("c.yaml", &bad);
        assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
        assert!(
            r.problems.iter().any(|l| l.starts_with(
                "c.yaml: Cluster/fdb: spec.terminationPolicy: unsupported value \"Sometimes\""
            )),
            "{:?}",
            r.problems
        );
        assert!(
            r.problems
                .iter()
                .any(|l| l.starts_with("c.yaml: Cluster/fdb: spec.componentSpecs[0].name: ")),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn every_document_is_checked_and_foreign_kinds_are_skipped() {
        let bad_backup = "apiVersion: dataprotection.kubeblocks.io/v1alpha1\nkind: Backup\nmetadata:\n  name: b\nspec:\n  backupPolicyName: p\n  backupMethod: datafile\n  bogus: 1\n";
        let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n";
        let content = format!("{CLUSTER}---\n{secret}---\n{bad_backup}---\n");
        let r = validate("m.yaml", &content);
        assert_eq!(
            r.problems,
            vec!["m.yaml: Backup/b: spec.bogus: field not declared in schema (unknown field)"]
        );
        assert_eq!(
            r.warnings,
            vec!["m.yaml: Secret/s: warning: skipped: not a kind served by Lifeboat"]
        );
    }

    #[test]
    fn wrong_version_of_a_served_group_is_a_problem() {
        let r = validate(
            "c.yaml",
            &CLUSTER.replace("apps.kubeblocks.io/v1", "apps.kubeblocks.io/v1alpha1"),
        );
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(
            r.problems[0].starts_with("c.yaml: Cluster/fdb: kind: no CRD served by Lifeboat"),
            "{}",
            r.problems[0]
        );
    }

    #[test]
    fn missing_kind_and_bad_yaml_are_problems() {
        let r = validate("x.yaml", "metadata:\n  name: a\n");
        assert_eq!(
            r.problems,
            vec!["x.yaml: document 1: apiVersion: manifest has no apiVersion and kind"]
        );
        let r = validate("x.yaml", "a: [\n");
        assert_eq!(r.problems.len(), 1);
        assert!(
            r.problems[0].starts_with("x.yaml: document 1: .: not valid YAML"),
            "{}",
            r.problems[0]
        );
    }

    #[test]
    fn list_items_are_checked() {
        let item = CLUSTER.replace("terminationPolicy: Delete", "terminationPolicy: Nope");
        let items: Value = serde_yaml::from_str(&item).expect("yaml");
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [items]});
        let r = validate("l.yaml", &serde_yaml::to_string(&list).expect("yaml"));
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(
            r.problems[0].starts_with("l.yaml: Cluster/fdb: spec.terminationPolicy:"),
            "{}",
            r.problems[0]
        );
    }

    #[test]
    fn bad_annotation_is_a_problem_naming_the_annotation() {
        let c = CLUSTER.replace(
            "  namespace: demo\n",
            "  namespace: demo\n  annotations:\n    kubeblocks.io/restore-from-backup: '{\"falkordb\":{\"name\":\"b\",\"volumeRestorPolicy\":\"Serial\"}}'\n",
        );
        let r = validate("c.yaml", &c);
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        let line = &r.problems[0];
        assert!(
            line.starts_with(
                "c.yaml: Cluster/fdb: metadata.annotations[kubeblocks.io/restore-from-backup]: "
            ),
            "{line}"
        );
        assert!(line.contains("volumeRestorPolicy"), "{line}");
    }

    #[test]
    fn deprecated_annotation_warns_with_equivalent_spec_restore_that_validates() {
        let c = CLUSTER.replace(
            "  namespace: demo\n",
            "  namespace: demo\n  annotations:\n    kubeblocks.io/restore-from-backup: '{\"falkordb\":{\"name\":\"bk\",\"volumeRestorePolicy\":\"Serial\"}}'\n",
        );
        let r = validate("c.yaml", &c);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let w = &r.warnings[0];
        assert!(w.starts_with("c.yaml: Cluster/fdb: warning: annotation kubeblocks.io/restore-from-backup is deprecated"), "{w}");

        // The printed snippet, pasted into the Cluster instead of the annotation, is valid.
        let snippet = w
            .split_once("spec.restore:\n")
            .map(|(_, s)| s)
            .expect("a snippet");
        let snippet: String = snippet
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
            .collect();
        let restore: Value = serde_yaml::from_str(&snippet).expect("snippet is YAML");
        let mut cluster: Value = serde_yaml::from_str(CLUSTER).expect("yaml");
        cluster["spec"]["restore"] = restore["spec"]["restore"].clone();
        assert_eq!(cluster["spec"]["restore"]["source"]["name"], "bk");
        assert_eq!(
            cluster["spec"]["restore"]["parameters"]["dataprotection.kubeblocks.io/volume-restore-policy"],
            "Serial"
        );
        let violations = schema_check::check(&cluster, None).expect("a Cluster");
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn annotation_together_with_spec_restore_is_a_problem() {
        let c = CLUSTER
            .replace(
                "  namespace: demo\n",
                "  namespace: demo\n  annotations:\n    kubeblocks.io/restore-from-backup: '{\"falkordb\":{\"name\":\"bk\"}}'\n",
            )
            .replace(
                "spec:\n",
                "spec:\n  restore:\n    source: {apiGroup: dataprotection.kubeblocks.io, kind: Backup, name: bk}\n",
            );
        let r = validate("c.yaml", &c);
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(
            r.problems[0].starts_with(
                "c.yaml: Cluster/fdb: metadata.annotations[kubeblocks.io/restore-from-backup]: is set together with spec.restore"
            ),
            "{}",
            r.problems[0]
        );
    }

    #[test]
    fn annotation_without_equivalent_still_warns() {
        let c = CLUSTER.replace(
            "  namespace: demo\n",
            "  namespace: demo\n  annotations:\n    kubeblocks.io/restore-from-backup: '{\"a\":{\"name\":\"x\"},\"b\":{\"name\":\"y\"}}'\n",
        );
        let r = validate("c.yaml", &c);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.warnings.len(), 1);
        assert!(
            r.warnings[0].contains("no single spec.restore is equivalent"),
            "{}",
            r.warnings[0]
        );
    }
}
