//! The manifests in `examples/` are what the user guide tells people to apply, so each is checked
//! the ways a user meets it: offline by `kubectl lifeboat validate`, and by the API server itself
//! through `kubectl apply --dry-run=server`, which runs the installed CRDs' schemas and CEL rules
//! and stores nothing.
//!
//! The offline tests need no cluster. The server test needs KUBECONFIG with Lifeboat's CRDs
//! installed, and a kubectl: `KUBECTL`, which `cargo xtask` sets to the bed's, or the first on
//! PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail, ensure};
use lifeboat_api::schema_check::yaml_to_json;
use lifeboat_e2e::in_namespace;
use serde_json::Value;

/// The files the documentation walks through; renaming one must fail here, not in a reader's
/// terminal.
const EXPECTED: &[&str] = &[
    "falkordb-replication.yaml",
    "redis-standalone.yaml",
    "backuprepo-s3.yaml",
    "backuprepo-pvc.yaml",
    "backup.yaml",
    "restore-spec.yaml",
    "restore-annotation.yaml",
    "backupschedule.yaml",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.yaml` file in `examples/`, sorted, and at least the expected ones.
fn example_files() -> Result<Vec<PathBuf>> {
    let dir = root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|x| x == "yaml"));
    files.sort();
    let names: Vec<String> = files.iter().map(|p| file_name(p.as_path())).collect();
    let missing: Vec<&&str> = EXPECTED
        .iter()
        .filter(|e| !names.iter().any(|n| n == **e))
        .collect();
    ensure!(
        missing.is_empty(),
        "examples/ lacks {missing:?}; it holds {names:?}"
    );
    Ok(files)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The objects of a multi-document YAML file, as JSON. Documents are separated by `---` lines,
/// as in every file of `examples/`; a document of comments only is no object.
fn objects_of(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(doc) = docs.last_mut() {
            doc.push_str(line);
            doc.push('\n');
        }
    }
    let mut out = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let v = yaml_to_json(doc)
            .with_context(|| format!("{}: document {} is not YAML", path.display(), i + 1))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

fn describe(v: &Value) -> String {
    format!(
        "{}/{}",
        v["kind"].as_str().unwrap_or("?"),
        v["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The exit status and both streams of a command, for failure messages.
fn shown(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Each file says what it is and what to change before its first object, and names no
/// namespace: the headers tell the reader to choose one with `-n`, which kubectl refuses for an
/// object that names another.
#[test]
fn every_example_explains_itself_and_leaves_the_namespace_to_the_reader() -> Result<()> {
    let mut problems = Vec::new();
    for path in example_files()? {
        let name = file_name(&path);
        let text = std::fs::read_to_string(&path)?;
        let header = text.lines().take_while(|l| l.starts_with('#')).count();
        if header < 3 {
            problems.push(format!(
                "{name}: starts with {header} comment lines; a header says what the file is and what to change"
            ));
        }
        let objects = objects_of(&path)?;
        if objects.is_empty() {
            problems.push(format!("{name}: holds no object"));
        }
        for o in &objects {
            if let Some(ns) = o["metadata"].get("namespace") {
                problems.push(format!(
                    "{name}: {} names namespace {ns}; leave it to `kubectl apply -n`",
                    describe(o)
                ));
            }
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// Every `examples/…yaml` the documentation names exists, so no command in a guide points at a
/// file that is not there.
#[test]
fn every_example_the_docs_name_exists() -> Result<()> {
    let mut docs: Vec<PathBuf> = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let mut missing = Vec::new();
    let mut named = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc)?;
        for (at, _) in text.match_indices("examples/") {
            let rest = &text[at + "examples/".len()..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'))
                .unwrap_or(rest.len());
            // A name that ends a sentence keeps its full stop out.
            let file = rest[..len].trim_end_matches('.');
            if !file.ends_with(".yaml") {
                continue;
            }
            named += 1;
            if !root().join("examples").join(file).is_file() {
                missing.push(format!("{} names examples/{file}", file_name(doc)));
            }
        }
    }
    ensure!(missing.is_empty(), "{}", missing.join("\n"));
    ensure!(
        named > 0,
        "no document names a file of examples/; the user guide should"
    );
    Ok(())
}

/// This workspace's `kubectl-lifeboat`, built (or found up to date) by cargo once per test run.
/// Another package's binary has no `CARGO_BIN_EXE_` variable here, and a copy on PATH may be
/// older than the code under test.
fn plugin() -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_plugin().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build_plugin() -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(&cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .args([
            "-p",
            "kubectl-lifeboat",
            "--bin",
            "kubectl-lifeboat",
            "--message-format=json-render-diagnostics",
        ])
        .output()
        .context("running cargo build -p kubectl-lifeboat")?;
    ensure!(
        out.status.success(),
        "{}",
        shown("cargo build -p kubectl-lifeboat", &out)
    );
    // One JSON message per line; the binary's artifact names its path.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "kubectl-lifeboat")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo build -p kubectl-lifeboat reported no executable")
}

/// `kubectl lifeboat validate` accepts every example: no problem line, exit 0. The Secret beside
/// the S3 repo is skipped as not Lifeboat's, and the deprecated annotation is accepted with its
/// warning.
#[test]
fn kubectl_lifeboat_validate_accepts_every_example() -> Result<()> {
    let files = example_files()?;
    let mut cmd = Command::new(plugin()?);
    cmd.arg("validate");
    for f in &files {
        cmd.arg("-f").arg(f);
    }
    let out = cmd.output().context("running kubectl-lifeboat validate")?;
    let what = "kubectl lifeboat validate -f examples/*.yaml";
    ensure!(out.status.code() == Some(0), "{}", shown(what, &out));
    ensure!(
        out.stdout.is_empty(),
        "problem lines on standard output\n{}",
        shown(what, &out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "Secret/s3-credentials: warning: skipped",
        "Cluster/fdb-restored-legacy: warning: annotation kubeblocks.io/restore-from-backup is deprecated",
    ] {
        ensure!(
            stderr.contains(expected),
            "missing {expected:?}\n{}",
            shown(what, &out)
        );
    }
    Ok(())
}

/// The kubectl the server test runs: `KUBECTL` when set, else the first on PATH.
fn kubectl() -> PathBuf {
    std::env::var_os("KUBECTL")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("kubectl"), PathBuf::from)
}

/// The API server accepts every example as written: `kubectl apply --dry-run=server` into a
/// namespace of the test's own reports each object, and refuses none.
#[tokio::test]
async fn the_api_server_accepts_every_example() -> Result<()> {
    let files = example_files()?;
    in_namespace("examples", |ns| async move {
        let kubectl = kubectl();
        let mut refused = Vec::new();
        for f in &files {
            let objects = objects_of(f)?;
            let out = tokio::process::Command::new(&kubectl)
                .args(["apply", "--dry-run=server", "-n", ns.name.as_str(), "-f"])
                .arg(f)
                .output()
                .await
                .with_context(|| {
                    format!(
                        "running {} (set KUBECTL to a kubectl binary)",
                        kubectl.display()
                    )
                })?;
            let what = format!(
                "kubectl apply --dry-run=server -f examples/{}",
                file_name(f)
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let applied = stdout
                .lines()
                .filter(|l| l.contains("(server dry run)"))
                .count();
            if !out.status.success() {
                refused.push(shown(&what, &out));
            } else if applied != objects.len() {
                let names: Vec<String> = objects.iter().map(describe).collect();
                refused.push(format!(
                    "{} reported {applied} objects, the file holds {names:?}",
                    shown(&what, &out)
                ));
            } else {
                eprintln!("{what}: {}", stdout.trim().replace('\n', "; "));
            }
        }
        if !refused.is_empty() {
            bail!("{}", refused.join("\n"));
        }
        Ok(())
    })
    .await
}

/// Runs `kubectl apply -n NAMESPACE -f -` on `manifest`, failing with kubectl's output.
async fn kubectl_apply(namespace: &str, what: &str, manifest: &str) -> Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(kubectl())
        .args(["apply", "-n", namespace, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {} (set KUBECTL)", kubectl().display()))?;
    let mut stdin = child.stdin.take().context("kubectl's stdin")?;
    stdin.write_all(manifest.as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    ensure!(
        out.status.success(),
        "{}",
        shown(&format!("kubectl apply -n {namespace} -f {what}"), &out)
    );
    eprintln!(
        "kubectl apply -n {namespace} -f {what}: {}",
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .replace('\n', "; ")
    );
    Ok(())
}

fn example(name: &str) -> Result<String> {
    let path = root().join("examples").join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// The S3 repo example with its placeholders filled in for the bed's MinIO, as the user guide
/// tells a reader to fill them in for their store.
fn s3_example_for_the_bed() -> Result<String> {
    let creds = lifeboat_e2e::s3::bed_credentials()?;
    let text = example("backuprepo-s3.yaml")?;
    for placeholder in [
        "PLACEHOLDER-ACCESS-KEY-ID",
        "PLACEHOLDER-SECRET-ACCESS-KEY",
        "bucket: my-backups",
        "endpoint: https://s3.eu-west-1.amazonaws.com",
        "region: eu-west-1",
    ] {
        ensure!(
            text.contains(placeholder),
            "examples/backuprepo-s3.yaml no longer holds {placeholder:?}; update this test with it"
        );
    }
    Ok(text
        .replace("PLACEHOLDER-ACCESS-KEY-ID", &creds.access_key_id)
        .replace("PLACEHOLDER-SECRET-ACCESS-KEY", &creds.secret_access_key)
        .replace(
            "bucket: my-backups",
            &format!("bucket: {}", lifeboat_e2e::s3::BED_BUCKET),
        )
        .replace(
            "endpoint: https://s3.eu-west-1.amazonaws.com",
            &format!("endpoint: {}", lifeboat_e2e::s3::BED_ENDPOINT),
        )
        .replace("region: eu-west-1", "region: us-east-1"))
}

/// The user guide's path, with the example files as they are: a FalkorDB Cluster and a Redis
/// one run; the S3 repo (the default one) becomes Ready; `backup.yaml` backs the Cluster up; the
/// schedule is accepted; with the source gone, `restore-spec.yaml` and `restore-annotation.yaml`
/// each bring the data back, verified, replicas included.
#[tokio::test]
async fn the_examples_run_back_up_and_restore_as_the_user_guide_says() -> Result<()> {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use kube::Api;
    use kube::api::DeleteParams;
    use lifeboat_api::dataprotection::v1alpha1::{BackupPhase, BackupRepoPhase, BackupSchedule};
    use lifeboat_api::{Cluster, ClusterPhase};
    use lifeboat_e2e::lifeboat::{CLUSTER_TIMEOUT, redis_cli, wait_phase};
    use lifeboat_e2e::{poll, s3, scenario};
    use std::time::Duration;

    const OPERATOR_NS: &str = "lifeboat-system";
    let client = lifeboat_e2e::client().await?;
    let defaults = scenario::default_repos(&client).await?;
    ensure!(
        defaults.is_empty(),
        "the bed already has default BackupRepos {defaults:?}; the S3 example is marked default, and two defaults are ambiguous"
    );
    let s3_file = s3_example_for_the_bed()?;
    let body = |ns: lifeboat_e2e::TestNamespace| async move {
        let n = ns.name.as_str();
        kubectl_apply(
            OPERATOR_NS,
            "examples/backuprepo-s3.yaml (bed endpoint and credentials)",
            &s3_file,
        )
        .await?;
        kubectl_apply(
            n,
            "examples/falkordb-replication.yaml",
            &example("falkordb-replication.yaml")?,
        )
        .await?;
        kubectl_apply(
            n,
            "examples/redis-standalone.yaml",
            &example("redis-standalone.yaml")?,
        )
        .await?;
        s3::wait_repo(
            &ns.client,
            "s3-backups",
            BackupRepoPhase::Ready,
            Duration::from_secs(90),
        )
        .await?;
        wait_phase(&ns, "fdb", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;
        wait_phase(&ns, "cache", ClusterPhase::Running, CLUSTER_TIMEOUT).await?;

        let pods: Api<Pod> = ns.api();
        redis_cli(&pods, "cache-redis-0", "SET example:key served").await?;
        let got = redis_cli(&pods, "cache-redis-0", "GET example:key").await?;
        ensure!(
            got.trim() == "served",
            "the Redis example does not serve: GET returned {got:?}"
        );

        let written = scenario::write_dataset(&ns, "fdb", 300, 64).await?;
        kubectl_apply(n, "examples/backup.yaml", &example("backup.yaml")?).await?;
        let backup = scenario::wait_backup(
            &ns,
            "fdb-backup-1",
            BackupPhase::Completed,
            Duration::from_secs(300),
        )
        .await?;
        scenario::ensure_backup_holds(&backup, &written)?;
        let repo = backup
            .status
            .as_ref()
            .and_then(|s| s.backup_repo_name.clone());
        ensure!(
            repo.as_deref() == Some("s3-backups"),
            "fdb-backup-1 went to {repo:?}, not the default repo s3-backups"
        );

        kubectl_apply(
            n,
            "examples/backupschedule.yaml",
            &example("backupschedule.yaml")?,
        )
        .await?;
        let schedules: Api<BackupSchedule> = ns.api();
        poll(
            "BackupSchedule fdb-nightly to be Available with its next time",
            Duration::from_secs(60),
            || async {
                let st = schedules
                    .get("fdb-nightly")
                    .await?
                    .status
                    .unwrap_or_default();
                let next = st
                    .schedules
                    .get("nightly")
                    .and_then(|s| s.next_schedule_time.clone());
                Ok(match (st.phase, next) {
                    (
                        Some(
                            lifeboat_api::dataprotection::v1alpha1::BackupSchedulePhase::Available,
                        ),
                        Some(t),
                    ) => Ok(t),
                    (p, t) => Err(format!(
                        "phase {p:?}, next {t:?}, reason {:?}",
                        st.failure_reason
                    )),
                })
            },
        )
        .await?;

        // The source goes first: the restores need only the Backup, and the bed's two cores
        // need the room.
        let clusters: Api<Cluster> = ns.api();
        for c in ["fdb", "cache"] {
            clusters.delete(c, &DeleteParams::default()).await?;
        }
        for c in ["fdb", "cache"] {
            poll(
                &format!("Cluster {c} to be gone"),
                Duration::from_secs(180),
                || async {
                    Ok(match clusters.get_opt(c).await? {
                        None => Ok(()),
                        Some(_) => Err("still there".to_string()),
                    })
                },
            )
            .await?;
        }
        kubectl_apply(
            n,
            "examples/restore-spec.yaml",
            &example("restore-spec.yaml")?,
        )
        .await?;
        kubectl_apply(
            n,
            "examples/restore-annotation.yaml",
            &example("restore-annotation.yaml")?,
        )
        .await?;
        for c in ["fdb-restored", "fdb-restored-legacy"] {
            wait_phase(&ns, c, ClusterPhase::Running, scenario::RESTORE_TIMEOUT).await?;
            scenario::assert_restored(&ns, c, &written).await?;
            scenario::assert_verification(&ns, c).await?;
            println!("{c}: {}", scenario::restore_report(&ns, c).await?);
        }
        // The Backup's data goes with it while the repo is still there.
        let backups: Api<lifeboat_api::dataprotection::v1alpha1::Backup> = ns.api();
        backups
            .delete("fdb-backup-1", &DeleteParams::default())
            .await?;
        scenario::wait_backup_gone(&ns, "fdb-backup-1", Duration::from_secs(180)).await
    };
    let result = in_namespace("examples-live", body).await;
    // The repo is cluster-scoped and its Secret lives in the operator's namespace: neither goes
    // with the test's namespace, and a default repo left behind would change other tests.
    let repo = s3::delete_repo(&client, "s3-backups").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NS);
    let secret = match secrets
        .delete("s3-credentials", &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => {
            Err(anyhow::Error::from(e).context("deleting Secret lifeboat-system/s3-credentials"))
        }
    };
    result.and(repo).and(secret)
}
