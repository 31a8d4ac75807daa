//! `cargo xtask testbed up|down|status|env|images|e2e`: the local single-node Kubernetes.
//!
//! System-level steps live in commented shell scripts under `testbed/scripts` (they are what an
//! engineer re-runs by hand while debugging); this module orders them, makes `up` idempotent,
//! waits for each component with a deadline and prints where the time went. Versions, addresses
//! and paths are defined once, in `testbed/scripts/common.sh`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::paths::{cache_dir, workspace_root};
use crate::run::{stage, status};

#[derive(Args)]
pub struct TestbedArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Install, build and start every component; a no-op on a running bed.
    Up,
    /// Stop every component and remove its processes, mounts and interfaces.
    Down,
    /// Report each component's state; exits non-zero unless the bed is ready.
    Status,
    /// Print the KUBECONFIG line for a shell or a test.
    Env,
    /// Rebuild the project's images and import them into containerd.
    Images,
    /// Run the end-to-end smoke suite (crates/lifeboat-e2e) against the running bed.
    E2e,
}

pub fn run(args: TestbedArgs) -> Result<()> {
    match args.action {
        Action::Up => up(),
        Action::Down => down(),
        Action::Status => {
            if print_status()? {
                Ok(())
            } else {
                bail!("the test bed is not ready; `cargo xtask testbed up` starts it")
            }
        }
        Action::Env => {
            println!("KUBECONFIG={}", kubeconfig_path().display());
            Ok(())
        }
        Action::Images => images(),
        Action::E2e => crate::e2e::run(crate::e2e::E2eArgs {
            tiers: vec!["smoke".into()],
            ..Default::default()
        }),
    }
}

/// Names as in `testbed/scripts/common.sh`.
const NODE_NAME: &str = "lifeboat-node";
const MINIO_ADDR: &str = "10.200.0.1:9000";
const IMG_DEBIAN: &str = "localhost/lifeboat/debian:bookworm";
const IMG_PAUSE: &str = "localhost/lifeboat/pause:1.0";
const IMG_FALKORDB: &str = "localhost/lifeboat/falkordb:4.16.3";
const IMG_OPERATOR: &str = concat!("localhost/lifeboat/operator:", env!("CARGO_PKG_VERSION"));
const IMG_MOVER: &str = concat!("localhost/lifeboat/mover:", env!("CARGO_PKG_VERSION"));

/// Components in start order; `down.sh` stops them in its own order.
const COMPONENTS: &[&str] = &[
    "containerd",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "coredns",
    "local-path-provisioner",
    "minio",
];

/// Cluster state (etcd, kubelet, containerd, certificates, logs); deleted by `down` except logs.
pub fn state_dir() -> PathBuf {
    std::env::var_os("LIFEBOAT_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/lifeboat-testbed"))
}

/// Sockets and pid files, on tmpfs so that a reboot leaves none stale.
fn run_dir() -> PathBuf {
    std::env::var_os("LIFEBOAT_RUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/lifeboat-testbed"))
}

/// The cluster-admin kubeconfig that users and the e2e tests read.
pub fn kubeconfig_path() -> PathBuf {
    state_dir().join("pki/admin.kubeconfig")
}

fn scripts_dir() -> PathBuf {
    workspace_root().join("testbed/scripts")
}

fn manifests_dir() -> PathBuf {
    workspace_root().join("testbed/manifests")
}

fn logs_dir() -> PathBuf {
    state_dir().join("logs")
}

pub fn kubectl_bin() -> PathBuf {
    cache_dir().join("bin/kubectl")
}

/// Runs a bed script with the paths this module uses, so both sides agree even when overridden.
pub fn script(name: &str, args: &[&str]) -> Result<()> {
    let mut c = Command::new("bash");
    c.arg(scripts_dir().join(name))
        .args(args)
        .env("LIFEBOAT_CACHE", cache_dir())
        .env("LIFEBOAT_STATE", state_dir())
        .env("LIFEBOAT_RUN", run_dir());
    status(&mut c)
}

fn require_root() -> Result<()> {
    let st = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let uid = st
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("");
    if uid != "0" {
        bail!("the test bed needs root (it runs containerd and kubelet and configures networking)");
    }
    Ok(())
}

/// Serialises `up`, `down` and `images` across processes (CI, a demo and a developer may share a
/// machine); held until the returned file is dropped.
fn lock() -> Result<std::fs::File> {
    let path = cache_dir().join("testbed.lock");
    std::fs::create_dir_all(cache_dir())?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if f.try_lock().is_err() {
        eprintln!("another testbed command holds {}; waiting", path.display());
        f.lock()
            .with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(f)
}

/// Boots the bed, or reports that it is already up. Safe to call from `cargo xtask ci`.
pub fn up() -> Result<()> {
    require_root()?;
    let _lock = lock()?;
    if is_ready() {
        eprintln!("test bed already up and ready; nothing to do");
        println!("KUBECONFIG={}", kubeconfig_path().display());
        return Ok(());
    }
    let started = Instant::now();
    // A half-started bed (a crash, a failed earlier `up`) is torn down first, so every `up` that
    // does work starts from a known state.
    if COMPONENTS.iter().any(|c| component_running(c)) || run_dir().exists() {
        stage("clean up a partial bed", down_inner)?;
    }
    rotate_logs()?;

    stage("debian packages and pypi", || {
        script("install-deps.sh", &[])
    })?;
    stage("go components", || script("build-go.sh", &["testbed"]))?;
    stage("base images", || {
        script("images.sh", &["base"])?;
        script("images.sh", &["pause"])?;
        script("images.sh", &["falkordb"])
    })?;
    // The bed serves the project's images but does not need them to run: a workspace that does
    // not build yet must not keep the cluster down, so this stage only warns.
    let project = stage("project images", || {
        if image_built(IMG_OPERATOR) && image_built(IMG_MOVER) {
            eprintln!("project images present; `cargo xtask testbed images` rebuilds them");
            Ok(())
        } else {
            build_project_images()
        }
    });
    if let Err(e) = &project {
        eprintln!(
            "WARNING: the project images were not built ({e:#}); the bed comes up without them. \
             After fixing the build, run `cargo xtask testbed images`."
        );
    }
    stage("certificates", || script("pki.sh", &[]))?;
    stage("network", || script("node-net.sh", &["up"]))?;

    stage("containerd", || {
        start("containerd")?;
        wait_for(
            "containerd",
            Duration::from_secs(60),
            &["containerd"],
            || {
                let out = Command::new("ctr")
                    .arg("--address")
                    .arg(run_dir().join("containerd/containerd.sock"))
                    .arg("version")
                    .output()?;
                Ok(out.status.success())
            },
        )
    })?;
    stage("import images", || {
        let mut images = vec![IMG_PAUSE, IMG_DEBIAN, IMG_FALKORDB];
        images.extend(
            [IMG_OPERATOR, IMG_MOVER]
                .into_iter()
                .filter(|i| image_built(i)),
        );
        import_images(&images)
    })?;

    stage("etcd", || {
        start("etcd")?;
        wait_for("etcd", Duration::from_secs(60), &["etcd"], || {
            Ok(http_get("127.0.0.1:2379", "/health")
                .map(|(code, body)| code == 200 && body.contains("\"health\":\"true\""))
                .unwrap_or(false))
        })
    })?;
    stage("kube-apiserver", || {
        start("kube-apiserver")?;
        wait_for(
            "kube-apiserver /readyz",
            Duration::from_secs(120),
            &["kube-apiserver"],
            || Ok(kubectl_quiet(&["get", "--raw", "/readyz"]).is_ok()),
        )?;
        for m in ["rbac.yaml", "local-path-storage.yaml"] {
            let path = manifests_dir().join(m);
            kubectl(&["apply", "-f", &path.to_string_lossy()])?;
        }
        Ok(())
    })?;
    stage("controllers and scheduler", || {
        start("kube-controller-manager")?;
        start("kube-scheduler")?;
        // Pods cannot be created in a namespace before its default ServiceAccount exists.
        wait_for(
            "the default ServiceAccount",
            Duration::from_secs(90),
            &["kube-controller-manager", "kube-scheduler"],
            || Ok(kubectl_quiet(&["-n", "default", "get", "serviceaccount", "default"]).is_ok()),
        )
    })?;
    stage("kubelet and kube-proxy", || {
        start("kubelet")?;
        start("kube-proxy")?;
        wait_for(
            "node Ready",
            Duration::from_secs(120),
            &["kubelet", "kube-proxy"],
            || Ok(node_ready()),
        )?;
        wait_for(
            "kube-proxy healthz",
            Duration::from_secs(60),
            &["kube-proxy"],
            || {
                Ok(http_get("127.0.0.1:10256", "/healthz")
                    .map(|(c, _)| c == 200)
                    .unwrap_or(false))
            },
        )
    })?;
    stage("coredns and local-path-provisioner", || {
        start("coredns")?;
        start("local-path-provisioner")?;
        wait_for(
            "coredns /ready",
            Duration::from_secs(60),
            &["coredns"],
            || {
                Ok(http_get("127.0.0.1:8181", "/ready")
                    .map(|(c, _)| c == 200)
                    .unwrap_or(false))
            },
        )
    })?;
    stage("minio (the bed's S3 store)", || {
        start("minio")?;
        wait_for(
            "minio /minio/health/ready",
            Duration::from_secs(60),
            &["minio"],
            || {
                Ok(http_get(MINIO_ADDR, "/minio/health/ready")
                    .map(|(c, _)| c == 200)
                    .unwrap_or(false))
            },
        )
    })?;
    if !is_ready() {
        print_status()?;
        bail!("the bed came up but does not report ready; see the status above");
    }
    eprintln!("test bed ready in {:.1}s", started.elapsed().as_secs_f64());
    println!("KUBECONFIG={}", kubeconfig_path().display());
    Ok(())
}

/// Stops the bed and removes its processes, mounts, interfaces and cluster state.
pub fn down() -> Result<()> {
    require_root()?;
    let _lock = lock()?;
    stage("down", down_inner)
}

fn down_inner() -> Result<()> {
    script("down.sh", &[])
}

/// Runs the smoke suite against the running bed with KUBECONFIG set; for `cargo xtask ci`.
/// Fails, printing each component's state, unless the bed is up and its node Ready.
pub fn require_ready() -> Result<()> {
    if !is_ready() {
        print_status()?;
        bail!("the test bed is not ready; run `cargo xtask testbed up` first");
    }
    Ok(())
}

/// Rebuilds the project's images from the current code and imports them into a running bed.
pub fn images() -> Result<()> {
    require_root()?;
    let _lock = lock()?;
    stage("project images", build_project_images)?;
    if component_running("containerd") {
        stage("import project images", || {
            import_images(&[IMG_OPERATOR, IMG_MOVER])
        })?;
    } else {
        eprintln!("containerd is not running; `testbed up` imports the images");
    }
    Ok(())
}

fn build_project_images() -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args([
        "build",
        "--release",
        "-p",
        "lifeboat-operator",
        "-p",
        "lifeboat-mover",
        "-p",
        "lifeboat-instance",
    ])
    .current_dir(workspace_root());
    status(&mut c)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let bins = target.join("release");
    script("images.sh", &["project", &bins.to_string_lossy()])
}

fn import_images(images: &[&str]) -> Result<()> {
    let mut args = vec!["import"];
    args.extend_from_slice(images);
    script("images.sh", &args)
}

fn image_built(image: &str) -> bool {
    Command::new("buildah")
        .args(["inspect", "--type", "image", image])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn start(component: &str) -> Result<()> {
    script("services.sh", &["start", component])
}

fn component_running(component: &str) -> bool {
    Command::new("bash")
        .arg(scripts_dir().join("services.sh"))
        .args(["running", component])
        .env("LIFEBOAT_STATE", state_dir())
        .env("LIFEBOAT_RUN", run_dir())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn component_pid(component: &str) -> Option<String> {
    std::fs::read_to_string(run_dir().join("pids").join(format!("{component}.pid")))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Polls `check` until it holds or the deadline passes. Fails at once, with the log's tail, when
/// one of `watch` exits meanwhile, since waiting longer could not help.
fn wait_for(
    what: &str,
    timeout: Duration,
    watch: &[&str],
    mut check: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let t = Instant::now();
    let mut last_err = None;
    loop {
        match check() {
            Ok(true) => {
                eprintln!("    {what}: ok after {:.1}s", t.elapsed().as_secs_f64());
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        for c in watch {
            if !component_running(c) {
                bail!(
                    "{c} exited while waiting for {what}; last log lines:\n{}",
                    log_tail(c, 30)
                );
            }
        }
        if t.elapsed() > timeout {
            let tails: Vec<String> = watch
                .iter()
                .map(|c| format!("--- {c}:\n{}", log_tail(c, 30)))
                .collect();
            bail!(
                "timed out after {}s waiting for {what} (last error: {}); last log lines:\n{}",
                timeout.as_secs(),
                last_err
                    .map(|e| format!("{e:#}"))
                    .unwrap_or_else(|| "none".into()),
                tails.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn log_tail(component: &str, lines: usize) -> String {
    let path = logs_dir().join(format!("{component}.log"));
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let all: Vec<&str> = s.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Keeps the previous run's logs for one more round, so a failed `up` can be compared.
fn rotate_logs() -> Result<()> {
    let logs = logs_dir();
    if logs.exists() {
        let prev = state_dir().join("logs.previous");
        if prev.exists() {
            std::fs::remove_dir_all(&prev)?;
        }
        std::fs::rename(&logs, &prev)?;
    }
    Ok(())
}

/// A kubectl command against the bed.
pub fn kubectl_command(args: &[&str]) -> Command {
    let mut c = Command::new(kubectl_bin());
    c.arg("--kubeconfig").arg(kubeconfig_path()).args(args);
    c
}

fn kubectl(args: &[&str]) -> Result<()> {
    status(&mut kubectl_command(args))
}

/// Runs kubectl for a check: output is captured and returned, nothing is echoed.
pub fn kubectl_quiet(args: &[&str]) -> Result<String> {
    let out = kubectl_command(args).output().context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn node_ready() -> bool {
    kubectl_quiet(&[
        "get",
        "node",
        NODE_NAME,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ])
    .map(|s| s.trim() == "True")
    .unwrap_or(false)
}

/// A minimal HTTP/1.0 GET for the plain-HTTP health endpoints of etcd, kube-proxy and CoreDNS.
fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    let sock = addr
        .parse()
        .with_context(|| format!("bad address {addr}"))?;
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status from {addr}{path}"))?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

fn is_ready() -> bool {
    kubeconfig_path().exists()
        && COMPONENTS.iter().all(|c| component_running(c))
        && kubectl_quiet(&["get", "--raw", "/readyz"]).is_ok()
        && node_ready()
}

/// Prints one line per component and the cluster's health; returns whether the bed is ready.
fn print_status() -> Result<bool> {
    println!("state dir: {}", state_dir().display());
    println!("logs:      {}", logs_dir().display());
    for c in COMPONENTS {
        let (state, pid) = if component_running(c) {
            ("running", component_pid(c).unwrap_or_default())
        } else {
            ("stopped", String::new())
        };
        println!("  {c:<26} {state:<8} {pid}");
    }
    let api = kubeconfig_path().exists() && kubectl_quiet(&["get", "--raw", "/readyz"]).is_ok();
    println!(
        "  {:<26} {}",
        "apiserver /readyz",
        if api { "ok" } else { "failing" }
    );
    let node = api && node_ready();
    println!(
        "  {:<26} {}",
        format!("node {NODE_NAME}"),
        if node { "Ready" } else { "not Ready" }
    );
    let ready = is_ready();
    println!("test bed: {}", if ready { "ready" } else { "NOT ready" });
    if ready {
        println!("KUBECONFIG={}", kubeconfig_path().display());
    }
    Ok(ready)
}
