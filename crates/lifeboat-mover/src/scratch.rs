//! A private, throwaway server that loads the RDB a backup just saved, so that the backup's
//! fingerprint describes the saved file itself rather than a live server that keeps changing.
//! It also proves, at backup time, that the file loads with the modules the cluster runs.
//!
//! It listens only on a Unix socket in a private directory (mode 0700) and has no TCP port, so
//! nothing but the mover can reach it; that is what makes enabling `DEBUG` on it harmless. The
//! RDB is not copied: the server reads it through `/proc/<mover>/fd/<n>`, the descriptor the
//! backup holds, which stays this save's file even if a later save renames over the name.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::server::{Server, ServerOpts};

/// What to start: the server binary and the modules (with their arguments) the source runs.
#[derive(Debug, Clone, Default)]
pub struct ScratchSpec {
    pub binary: PathBuf,
    pub modules: Vec<(PathBuf, Vec<String>)>,
}

pub struct Scratch {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Scratch {
    /// Starts a server over `rdb` and returns once it accepts connections on its socket; the
    /// caller's `Server::connect` then waits for the load to finish.
    pub fn start(spec: &ScratchSpec, rdb: &std::fs::File, backup: &str) -> Result<Scratch> {
        let unloadable = |cause: String| Error::Unloadable {
            backup: backup.to_string(),
            cause,
        };
        let dir = tempfile::Builder::new()
            .prefix("lifeboat-scratch-")
            .tempdir()
            .map_err(|e| unloadable(format!("creating its directory: {e}")))?;
        // tempfile creates the directory 0700.
        let fd_path = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            rdb.as_raw_fd()
        ));
        std::os::unix::fs::symlink(&fd_path, dir.path().join("dump.rdb"))
            .map_err(|e| unloadable(format!("linking the saved RDB: {e}")))?;
        let socket = dir.path().join("redis.sock");
        let log = dir.path().join("redis.log");
        let mut cmd = Command::new(&spec.binary);
        cmd.arg("--port")
            .arg("0")
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--unixsocketperm")
            .arg("700")
            .arg("--dir")
            .arg(dir.path())
            .arg("--dbfilename")
            .arg("dump.rdb")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--daemonize")
            .arg("no")
            .arg("--enable-debug-command")
            .arg("local")
            .arg("--logfile")
            .arg(&log);
        for (path, args) in &spec.modules {
            cmd.arg("--loadmodule").arg(path).args(args);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| {
            unloadable(format!(
                "starting {} failed: {e} (set --scratch-server to the server binary)",
                spec.binary.display()
            ))
        })?;
        Ok(Scratch { child, dir, socket })
    }

    pub fn opts(&self, timeout: Duration) -> ServerOpts {
        ServerOpts {
            host: String::new(),
            port: 0,
            unix_socket: Some(self.socket.clone()),
            username: None,
            password: None,
            connect_timeout: timeout,
            command_timeout: Duration::from_secs(600),
        }
    }

    /// The last lines of the server's log, for a failure message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(3).collect();
        lines
            .into_iter()
            .rev()
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// Loads the file and fingerprints it; a server that exits or never finishes loading
    /// fails the backup with its log.
    pub fn fingerprint(
        spec: &ScratchSpec,
        rdb: &std::fs::File,
        backup: &str,
        timeout: Duration,
    ) -> Result<Fingerprint> {
        let mut s = Scratch::start(spec, rdb, backup)?;
        let deadline = Instant::now() + timeout;
        // The socket appears once the server listens, before it loads; a server that exits
        // first (a module missing, a file it cannot read) must fail now, not at the deadline.
        let res = loop {
            if let Ok(Some(st)) = s.child.try_wait() {
                break Err(format!("the server exited ({st})"));
            }
            if s.socket.exists() {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err("the server did not listen before the deadline".to_string());
            }
            std::thread::sleep(crate::server::POLL);
        };
        if let Err(how) = res {
            return Err(Error::Unloadable {
                backup: backup.to_string(),
                cause: format!("{how}; its log: {}", s.log_tail()),
            });
        }
        let mut opts = s.opts(timeout);
        opts.connect_timeout = Duration::from_secs(10);
        let res = Server::connect(&opts, deadline).and_then(|mut srv| srv.fingerprint());
        match res {
            Ok(fp) => Ok(fp),
            Err(e) => {
                let exited = s.child.try_wait().ok().flatten();
                let how = match exited {
                    Some(st) => format!("the server exited ({st})"),
                    None => format!("{e}"),
                };
                Err(Error::Unloadable {
                    backup: backup.to_string(),
                    cause: format!("{how}; its log: {}", s.log_tail()),
                })
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server binary to use when none is given: the source server's own executable when this
/// container has it (the mover image is built on the database image), else `redis-server` on
/// the PATH.
pub fn default_binary(source_executable: Option<&str>) -> PathBuf {
    match source_executable {
        Some(p) if !p.is_empty() && Path::new(p).is_file() => PathBuf::from(p),
        _ => PathBuf::from("redis-server"),
    }
}
