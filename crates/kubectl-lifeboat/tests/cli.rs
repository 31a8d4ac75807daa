//! Runs the built `kubectl-lifeboat` binary the way a user does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../lifeboat-api/tests/fixtures/field-report")
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-lifeboat"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The exit code and both streams, for assertion messages.
fn shown(out: &Output) -> String {
    format!(
        "exit status: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn fixture_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(fixtures())
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    files
}

#[test]
fn field_report_fixtures_are_valid() {
    let files = fixture_files();
    assert!(
        files.len() >= 3,
        "expected the field-report fixtures, found {files:?}"
    );
    let mut args = vec!["validate", "-f"];
    args.extend(files.iter().map(String::as_str));
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    assert!(
        out.stdout.is_empty(),
        "no problem lines expected\n{}",
        shown(&out)
    );
}

#[test]
fn deprecated_annotation_warns_and_prints_spec_restore() {
    let file = fixtures().join("cluster-restore-annotation.yaml");
    let out = run(&["validate", "-f", &file.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    assert!(
        stderr.contains("Cluster/fdb-restored: warning: annotation kubeblocks.io/restore-from-backup is deprecated"),
        "{}",
        shown(&out)
    );
    for expected in [
        "spec:",
        "restore:",
        "apiGroup: dataprotection.kubeblocks.io",
        "kind: Backup",
        "name: fdb-backup-datafile",
        "namespace: demo",
        "dataprotection.kubeblocks.io/volume-restore-policy: Parallel",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?}\n{}",
            shown(&out)
        );
    }
}

#[test]
fn broken_copy_fails_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original =
        std::fs::read_to_string(fixtures().join("cluster-spec-restore.yaml")).expect("fixture");
    let broken = original.replacen(
        "terminationPolicy: WipeOut",
        "terminationPolicy: Wipeout",
        1,
    );
    assert_ne!(
        broken, original,
        "the fixture no longer has the line this test breaks"
    );
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, &broken).expect("write the broken copy");
    let path = path.display().to_string();

    let out = run(&["validate", "-f", &path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let expected =
        format!("{path}: Cluster/fdb-r2: spec.terminationPolicy: unsupported value \"Wipeout\"");
    assert!(
        stdout.lines().any(|l| l.starts_with(&expected)),
        "expected a line starting {expected:?}\n{}",
        shown(&out)
    );

    // One bad file among good ones still fails the whole run.
    let good = fixtures().join("backup.yaml").display().to_string();
    let out = run(&["validate", "-f", &good, "-f", &path]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
}

#[test]
fn broken_annotation_fails_naming_the_annotation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let original = std::fs::read_to_string(fixtures().join("cluster-restore-annotation.yaml"))
        .expect("fixture");
    let broken = original.replacen("\"volumeRestorePolicy\"", "\"volumeRestorPolicy\"", 1);
    assert_ne!(
        broken, original,
        "the fixture no longer has the key this test breaks"
    );
    let path = dir.path().join("annotation.yaml");
    std::fs::write(&path, &broken).expect("write the broken copy");

    let out = run(&["validate", "-f", &path.display().to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        stdout.contains(
            "Cluster/fdb-restored: metadata.annotations[kubeblocks.io/restore-from-backup]: "
        ) && stdout.contains("volumeRestorPolicy"),
        "{}",
        shown(&out)
    );
}

#[test]
fn missing_file_fails() {
    let out = run(&["validate", "-f", "/nonexistent/lifeboat.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/nonexistent/lifeboat.yaml: cannot read"),
        "{}",
        shown(&out)
    );
}

#[test]
fn crds_prints_every_crd_as_in_deploy_crds() {
    let out = run(&["crds"]);
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let mut count = 0;
    for entry in std::fs::read_dir(&deploy).expect("deploy/crds") {
        let yaml = std::fs::read_to_string(entry.expect("entry").path()).expect("crd file");
        assert!(
            stdout.contains(&yaml),
            "a CRD from deploy/crds is missing or differs"
        );
        count += 1;
    }
    assert_eq!(count, 6);
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).expect("each document is YAML"))
        .collect();
    let kinds: Vec<_> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, vec!["CustomResourceDefinition"; 6], "{stdout}");
}

#[test]
fn completions_cover_the_day_two_commands() {
    let out = run(&["completion", "bash"]);
    assert_eq!(out.status.code(), Some(0), "{}", shown(&out));
    let script = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "status", "backups", "restore", "failover", "connect", "logs",
    ] {
        assert!(script.contains(cmd), "bash completion lacks {cmd}");
    }
}

#[test]
fn a_bad_timeout_is_a_usage_error_naming_the_value() {
    let out = run(&["restore", "b1", "--to", "c2", "--wait", "--timeout", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{}", shown(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("\"soon\""),
        "{}",
        shown(&out)
    );
}

/// Scripts tell "the API cannot be reached" (4) from "it failed" (1), for `restore-status` as for
/// every other command that reads a Cluster.
#[test]
fn an_unreachable_api_server_exits_4_for_every_read_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    // Port 1 on loopback: nothing listens, so the connection is refused at once.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: k, cluster: {server: \"http://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: k, user: u, namespace: demo}}]\n",
    )
    .expect("write kubeconfig");
    let path = kubeconfig.to_str().expect("utf-8 path");
    for command in [
        &["restore-status", "fdb"][..],
        &["status", "fdb"],
        &["backups"],
    ] {
        let mut args = command.to_vec();
        args.extend(["--kubeconfig", path]);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(4), "{command:?}: {}", shown(&out));
    }
}
