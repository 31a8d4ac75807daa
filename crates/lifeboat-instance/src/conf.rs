//! The server's rendered config. The password goes into a file only the server's user can read,
//! never onto a command line, where any process in the pod (and `ps`) would see it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, io};

/// Quotes a config value the way redis-server's config parser reads it.
pub fn quote(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            '\n' => s.push_str("\\n"),
            _ => s.push(c),
        }
    }
    s.push('"');
    s
}

/// `--name value` pairs as config lines.
pub fn args_as_lines(args: &[String]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let Some(name) = a.strip_prefix("--") else {
            continue;
        };
        let mut line = name.to_owned();
        while let Some(v) = it.next_if(|v| !v.starts_with("--")) {
            line.push(' ');
            line.push_str(v);
        }
        lines.push(line);
    }
    lines
}

/// Writes `text` to `path`, readable by the owner only.
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(format!("writing {}", tmp.display())))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("renaming {}", tmp.display())))
}

/// What the data server's config says beyond the operator's base file.
pub struct DataConf<'a> {
    pub base: &'a Path,
    pub port: u16,
    pub password: &'a str,
    pub announce: &'a str,
    pub server_args: &'a [String],
    pub replica_of: Option<(&'a str, u16)>,
    pub bind: Option<&'a str>,
    /// Start with `appendonly no` whatever the base file says: the server loads `dump.rdb`, and
    /// the manager turns the AOF on once it has (`boot.rs`).
    pub from_rdb: bool,
}

/// Renders the data server's config.
pub fn data_conf(c: &DataConf<'_>) -> String {
    let mut lines = Vec::new();
    if c.base.exists() {
        lines.push(format!("include {}", c.base.display()));
    }
    lines.push(format!("port {}", c.port));
    if let Some(b) = c.bind {
        lines.push(format!("bind {b}"));
    }
    lines.push(format!("requirepass {}", quote(c.password)));
    lines.push(format!("masterauth {}", quote(c.password)));
    lines.push(format!("replica-announce-ip {}", c.announce));
    // The manager computes a restore's content digest with DEBUG DIGEST-VALUE over loopback;
    // nothing else in the cluster can use DEBUG.
    lines.push("enable-debug-command local".to_owned());
    lines.extend(args_as_lines(c.server_args));
    if let Some((h, p)) = c.replica_of {
        lines.push(format!("replicaof {h} {p}"));
    }
    // Last, so that it overrides the base file and the server arguments.
    if c.from_rdb {
        lines.push("appendonly no".to_owned());
    }
    lines.push(String::new());
    lines.join("\n")
}

/// Where the rendered data config goes.
pub fn data_conf_path(run_dir: &Path) -> PathBuf {
    run_dir.join("redis.conf")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_args_become_lines_and_the_password_is_quoted() {
        let args = vec![
            "--loadmodule".to_owned(),
            "/usr/local/lib/falkordb.so".to_owned(),
        ];
        let text = data_conf(&DataConf {
            base: Path::new("/nonexistent"),
            port: 6379,
            password: "p\"w",
            announce: "fdb-0.h",
            server_args: &args,
            replica_of: Some(("fdb-1.h", 6379)),
            bind: None,
            from_rdb: true,
        });
        assert!(
            text.contains("loadmodule /usr/local/lib/falkordb.so\n"),
            "{text}"
        );
        assert!(text.contains("requirepass \"p\\\"w\"\n"), "{text}");
        assert!(text.contains("replicaof fdb-1.h 6379\n"), "{text}");
        assert!(!text.contains("include"), "{text}");
        assert!(text.ends_with("appendonly no\n"), "{text}");
    }

    #[test]
    fn private_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("run/redis.conf");
        write_private(&p, "x").expect("write");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
