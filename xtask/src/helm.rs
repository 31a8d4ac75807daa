//! `cargo xtask helm render|check`: the Helm chart in deploy/helm and the plain manifest rendered
//! from it.
//!
//! The chart is the source of truth; deploy/lifeboat.yaml is rendered from it and checked in so
//! that users without Helm can `kubectl apply -f` it. The chart's crds/ directory is a copy of
//! deploy/crds made by `render`, because Helm can only install CRDs from inside the chart; `check`
//! fails when either copy drifts.
//!
//! Helm is not a system dependency: it is built from its Go module into the version-keyed cache,
//! the same way as the test bed's Go components (testbed/scripts/build-go.sh).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::paths::{cache_dir, workspace_root};
use crate::run::status;

/// The Helm release built into the cache. v3 because its `template` and `lint` output is what the
/// chart (apiVersion v2) is written and checked against.
const HELM_VERSION: &str = "v3.22.0";
const HELM_MODULE: &str = "helm.sh/helm/v3";

const CHART: &str = "deploy/helm/lifeboat";
const MANIFEST: &str = "deploy/lifeboat.yaml";
const CRDS: &str = "deploy/crds";
const RELEASE: &str = "lifeboat";
const NAMESPACE: &str = "lifeboat-system";

const HEADER: &str = "\
# Generated from deploy/helm/lifeboat by `cargo xtask helm render`. Do not edit.
#
# Installs Lifeboat into the lifeboat-system namespace with the chart's default values:
#   kubectl apply --server-side -f deploy/lifeboat.yaml
";

#[derive(Args)]
pub struct HelmArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Render deploy/lifeboat.yaml from the chart.
    Render,
    /// Fail when deploy/lifeboat.yaml differs from what the chart renders.
    Check,
    /// Have the running bed's API server accept the chart, with default and non-default values.
    DryRun,
}

pub fn run(args: HelmArgs) -> Result<()> {
    match args.action {
        Action::Render => render(),
        Action::Check => check(),
        Action::DryRun => server_dry_run(),
    }
}

/// Renders deploy/lifeboat.yaml from the chart.
pub fn render() -> Result<()> {
    let helm = ensure_helm()?;
    let root = workspace_root();
    let chart = root.join(CHART);
    let chart_crds = chart.join("crds");
    let want = crd_files(&root.join(CRDS))?;
    std::fs::create_dir_all(&chart_crds)
        .with_context(|| format!("creating {}", chart_crds.display()))?;
    // A CRD removed from deploy/crds must disappear from the chart too.
    for (name, _) in crd_files(&chart_crds)? {
        if !want.contains_key(&name) {
            let path = chart_crds.join(&name);
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            eprintln!("removed {}", path.display());
        }
    }
    for (name, yaml) in &want {
        write_if_changed(&chart_crds.join(name), yaml)?;
    }
    let manifest = render_manifest(&helm, &chart)?;
    write_if_changed(&root.join(MANIFEST), &manifest)
}

/// Fails when deploy/lifeboat.yaml or the chart's crds/ is stale, or the chart does not lint.
pub fn check() -> Result<()> {
    let helm = ensure_helm()?;
    let root = workspace_root();
    let chart = root.join(CHART);
    let mut stale = Vec::new();

    let want = crd_files(&root.join(CRDS))?;
    let have = crd_files(&chart.join("crds"))?;
    if want != have {
        stale.push(format!("{CHART}/crds"));
    }

    // Render from a copy whose crds/ is current, so that a stale crds/ is reported once, as
    // itself, rather than also as a difference in the manifest.
    let scratch = std::env::temp_dir().join(format!("lifeboat-helm-check-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(scratch.clone());
    let copy = scratch.join("lifeboat");
    copy_dir(&chart, &copy, Path::new("crds"))?;
    std::fs::create_dir_all(copy.join("crds"))?;
    for (name, yaml) in &want {
        std::fs::write(copy.join("crds").join(name), yaml)?;
    }
    let rendered = render_manifest(&helm, &copy)?;
    let on_disk = std::fs::read_to_string(root.join(MANIFEST)).unwrap_or_default();
    if rendered != on_disk {
        stale.push(MANIFEST.to_owned());
    }

    let uncommented = uncommented_rules(&chart.join("templates"))?;
    if !uncommented.is_empty() {
        bail!(
            "RBAC rules without a comment saying why they are needed: {}",
            uncommented.join(", ")
        );
    }

    let mut lint = Command::new(&helm);
    lint.args(["lint", "--strict", "--namespace", NAMESPACE])
        .arg(&chart);
    helm_env(&mut lint);
    status(&mut lint).context("helm lint found problems in the chart")?;

    if !stale.is_empty() {
        bail!("stale: {}; run `cargo xtask helm render`", stale.join(", "));
    }
    Ok(())
}

/// Values unlike the defaults in every way the templates branch on, for [`server_dry_run`].
const NON_DEFAULT_VALUES: &str = "deploy/helm/lifeboat/ci/non-default-values.yaml";

/// `helm template`, with the default values and with [`NON_DEFAULT_VALUES`], applied to the
/// running bed with `kubectl apply --dry-run=server`: the API server validates every object
/// (schemas, CEL, admission) without keeping any.
pub fn server_dry_run() -> Result<()> {
    let helm = ensure_helm()?;
    install_monitoring_crds()?;
    let root = workspace_root();
    let chart = root.join(CHART);
    for values in [None, Some(root.join(NON_DEFAULT_VALUES))] {
        let mut c = Command::new(&helm);
        c.args(["template", RELEASE]).arg(&chart).args([
            "--namespace",
            NAMESPACE,
            "--include-crds",
        ]);
        if let Some(v) = &values {
            c.arg("--values").arg(v);
        }
        helm_env(&mut c);
        let out = c.output().context("running helm template")?;
        if !out.status.success() {
            bail!(
                "helm template ({}): {}",
                values
                    .as_ref()
                    .map_or("default values".into(), |v| v.display().to_string()),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let which = values
            .as_ref()
            .map_or("default values".to_owned(), |v| v.display().to_string());
        let mut apply = crate::testbed::kubectl_command(&[
            "apply",
            "--dry-run=server",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
        ]);
        apply
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = apply.spawn().context("running kubectl apply")?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            stdin.write_all(&out.stdout)?;
        }
        let done = child.wait_with_output()?;
        if !done.status.success() {
            bail!(
                "kubectl apply --dry-run=server of the chart with {which}: {}",
                String::from_utf8_lossy(&done.stderr).trim()
            );
        }
        let objects = String::from_utf8_lossy(&done.stdout).lines().count();
        eprintln!(
            "helm template with {which}: {objects} objects accepted by the API server (dry run)"
        );
    }
    Ok(())
}

/// The Prometheus Operator version whose CRDs the bed carries, as `build-go.sh` pins it.
const PROMETHEUS_OPERATOR_VERSION: &str = "v0.94.0";

/// Installs the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs on the bed (from
/// its Go module, through `build-go.sh monitoring-crds`), so that the chart's optional
/// monitoring objects are validated against their real schemas. The operator itself never
/// touches them.
fn install_monitoring_crds() -> Result<()> {
    crate::testbed::script("build-go.sh", &["monitoring-crds"])?;
    let dir = cache_dir()
        .join("crds")
        .join(format!("prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"));
    for crd in ["servicemonitors", "prometheusrules"] {
        let file = dir.join(format!("monitoring.coreos.com_{crd}.yaml"));
        let file = file.to_string_lossy();
        let out = crate::testbed::kubectl_command(&["apply", "--server-side", "-f", &file])
            .output()
            .context("running kubectl apply")?;
        if !out.status.success() {
            bail!(
                "installing {file}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let name = format!("crd/{crd}.monitoring.coreos.com");
        let out = crate::testbed::kubectl_command(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &name,
        ])
        .output()
        .context("running kubectl wait")?;
        if !out.status.success() {
            bail!(
                "{name} not Established: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

/// `helm template` output with the header and the Namespace it installs into prepended; the chart
/// itself creates no Namespace because `helm install --create-namespace` owns that.
fn render_manifest(helm: &Path, chart: &Path) -> Result<String> {
    let mut c = Command::new(helm);
    c.args(["template", RELEASE])
        .arg(chart)
        .args(["--namespace", NAMESPACE, "--include-crds"]);
    helm_env(&mut c);
    let line = format!("{c:?}");
    eprintln!("+ {line}");
    let out = c
        .output()
        .with_context(|| format!("could not start {line}"))?;
    if !out.status.success() {
        bail!(
            "command failed ({}): {line}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let body = String::from_utf8(out.stdout).context("helm template printed non-UTF-8 output")?;
    let namespace = format!(
        "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n  labels:\n    \
         app.kubernetes.io/name: lifeboat\n    app.kubernetes.io/part-of: lifeboat\n"
    );
    Ok(format!("{HEADER}{namespace}{body}"))
}

/// Keeps Helm's cache, config and plugin directories out of the user's home.
fn helm_env(c: &mut Command) {
    let base = cache_dir().join("helm");
    c.env("HELM_CACHE_HOME", base.join("cache"))
        .env("HELM_CONFIG_HOME", base.join("config"))
        .env("HELM_DATA_HOME", base.join("data"));
}

/// Builds Helm into the cache unless the cached binary already has [`HELM_VERSION`].
fn ensure_helm() -> Result<PathBuf> {
    let cache = cache_dir();
    let bin_dir = cache.join("bin");
    let bin = bin_dir.join("helm");
    let stamp = bin_dir.join("helm.version");
    let cached = std::fs::read_to_string(&stamp).unwrap_or_default();
    if bin.is_file() && cached.trim() == HELM_VERSION {
        return Ok(bin);
    }
    let started = Instant::now();
    eprintln!(
        "building helm {HELM_VERSION} into {} (cached afterwards)",
        bin.display()
    );
    let src = cache.join("src").join(format!("helm-{HELM_VERSION}"));
    for dir in [&bin_dir, &src] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let go = |args: &[&str]| -> Command {
        // Niced so that a build on a small machine does not starve the test bed or an editor.
        let mut c = Command::new("nice");
        c.args(["-n", "10", "go"]).args(args).current_dir(&src);
        c.env("GOMODCACHE", cache.join("go/mod"))
            .env("GOCACHE", cache.join("go/build"))
            .env("GOFLAGS", "-mod=mod")
            .env("GOTOOLCHAIN", "local")
            .env("CGO_ENABLED", "0");
        c
    };

    // A wrapper module rather than `go install helm.sh/helm/v3/cmd/helm@version`, because `go
    // install` refuses modules whose go.mod has replace lines; those are copied in instead.
    let go_mod = src.join("go.mod");
    let prepared = std::fs::read_to_string(&go_mod)
        .is_ok_and(|m| m.contains(&format!("{HELM_MODULE} {HELM_VERSION}")));
    if !prepared {
        for f in ["go.mod", "go.sum", "tools.go"] {
            let _ = std::fs::remove_file(src.join(f));
        }
        status(&mut go(&["mod", "init", "lifeboat.local/helm-wrapper"]))?;
        status(&mut go(&[
            "mod",
            "download",
            &format!("{HELM_MODULE}@{HELM_VERSION}"),
        ]))?;
        let upstream = cache
            .join("go/mod/cache/download")
            .join(HELM_MODULE)
            .join("@v")
            .join(format!("{HELM_VERSION}.mod"));
        let upstream = std::fs::read_to_string(&upstream)
            .with_context(|| format!("reading helm's go.mod at {}", upstream.display()))?;
        let mut wrapper = std::fs::read_to_string(&go_mod)?;
        wrapper.push_str(&format!("\nrequire {HELM_MODULE} {HELM_VERSION}\n"));
        for r in replace_lines(&upstream) {
            wrapper.push_str(&r);
            wrapper.push('\n');
        }
        std::fs::write(&go_mod, wrapper)?;
        std::fs::write(
            src.join("tools.go"),
            "//go:build tools\n\npackage tools\n\nimport _ \"helm.sh/helm/v3/cmd/helm\"\n",
        )?;
        status(&mut go(&["mod", "tidy", "-e"]))?;
    }

    // What Helm's Makefile stamps in: its own version, and the Kubernetes version that
    // `helm template` and `helm lint` assume, taken from the client-go it was built with.
    let mut ldflags = format!("-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}");
    let client_go = go(&["list", "-m", "-f", "{{.Version}}", "k8s.io/client-go"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let Some(minor) = client_go.as_deref().and_then(|v| v.split('.').nth(1)) {
        for pkg in [
            "helm.sh/helm/v3/pkg/lint/rules",
            "helm.sh/helm/v3/pkg/chartutil",
        ] {
            ldflags.push_str(&format!(
                " -X {pkg}.k8sVersionMajor=1 -X {pkg}.k8sVersionMinor={minor}"
            ));
        }
    }
    let tmp = bin_dir.join("helm.tmp");
    let tmp_str = tmp.to_str().context("cache path is not UTF-8")?;
    status(&mut go(&[
        "build",
        "-trimpath",
        "-ldflags",
        &ldflags,
        "-o",
        tmp_str,
        "helm.sh/helm/v3/cmd/helm",
    ]))?;
    std::fs::rename(&tmp, &bin).with_context(|| format!("moving helm to {}", bin.display()))?;
    std::fs::write(&stamp, format!("{HELM_VERSION}\n"))?;
    eprintln!(
        "built helm {HELM_VERSION} in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(bin)
}

/// The `replace` directives of a go.mod, each as a single-line directive, whether written one per
/// line or in a `replace ( ... )` block.
fn replace_lines(go_mod: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in go_mod.lines().map(str::trim) {
        if in_block {
            if line == ")" {
                in_block = false;
            } else if !line.is_empty() && !line.starts_with("//") {
                out.push(format!("replace {line}"));
            }
        } else if line.starts_with("replace (") {
            in_block = true;
        } else if line.starts_with("replace ") {
            out.push(line.to_owned());
        }
    }
    out
}

/// `file:line` of every RBAC rule in the chart's templates not directly preceded by a comment:
/// each permission the operator holds has to say why it needs it.
fn uncommented_rules(templates: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (name, text) in crd_files(templates)? {
        if !text.contains("rbac.authorization.k8s.io") {
            continue;
        }
        let mut in_rules = false;
        // The indentation of the rules' own list items, so that nested lists (resourceNames)
        // are not taken for rules.
        let mut item_indent = None;
        let mut previous = "";
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            let indent = line.len() - line.trim_start().len();
            if indent == 0 && !line.starts_with('#') && !trimmed.is_empty() {
                in_rules = line.starts_with("rules:");
                item_indent = None;
            } else if in_rules && trimmed.starts_with("- ") {
                let rule_indent = *item_indent.get_or_insert(indent);
                if indent == rule_indent && !previous.starts_with('#') {
                    out.push(format!("{CHART}/templates/{name}:{}", i + 1));
                }
            }
            if !trimmed.is_empty() {
                previous = trimmed;
            }
        }
    }
    Ok(out)
}

/// The `*.yaml` files of a directory by name; an absent directory has none.
fn crd_files(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.ends_with(".yaml") {
            let yaml = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            out.insert(name.to_owned(), yaml);
        }
    }
    Ok(out)
}

fn write_if_changed(path: &Path, content: &str) -> Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(());
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Copies a directory tree, leaving out `skip` (relative to `from`).
fn copy_dir(from: &Path, to: &Path, skip: &Path) -> Result<()> {
    fn walk(root: &Path, dir: &Path, to: &Path, skip: &Path) -> Result<()> {
        std::fs::create_dir_all(to.join(dir.strip_prefix(root)?))?;
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let rel = path.strip_prefix(root)?;
            if rel == skip {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, to, skip)?;
            } else {
                std::fs::copy(&path, to.join(rel))
                    .with_context(|| format!("copying {}", path.display()))?;
            }
        }
        Ok(())
    }
    walk(from, from, to, skip)
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_needs_a_comment() {
        let dir = std::env::temp_dir().join(format!("lifeboat-helm-rules-{}", std::process::id()));
        let _cleanup = RemoveOnDrop(dir.clone());
        std::fs::create_dir_all(&dir).expect("temp dir");
        let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nrules:\n  # why\n  - apiGroups: [a]\n    verbs: [get]\n  - apiGroups: [b]\n    resourceNames:\n      - x\n    verbs: [get]\n";
        std::fs::write(dir.join("role.yaml"), role).expect("write");
        assert_eq!(
            uncommented_rules(&dir).expect("readable"),
            vec![format!("{CHART}/templates/role.yaml:7")]
        );
    }

    #[test]
    fn replace_lines_reads_single_and_block_forms() {
        let m = "module x\n\nreplace a => b v1\n\nreplace (\n\tc => d v2\n\t// note\n\te v1 => ./f\n)\n";
        assert_eq!(
            replace_lines(m),
            vec![
                "replace a => b v1",
                "replace c => d v2",
                "replace e v1 => ./f"
            ]
        );
    }
}
