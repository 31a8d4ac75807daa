//! What the manager is told by its pod: environment set by the operator, and the member list
//! from the component's ConfigMap (read at each decision, so scaling needs no restart).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The members file, written by the operator into the component's ConfigMap.
pub const MEMBERS_FILE: &str = "members.json";

/// Who the members of a replication cluster are.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Members {
    /// The DNS names of every data pod, by ordinal.
    pub data: Vec<String>,
    /// The DNS names of every sentinel.
    #[serde(default)]
    pub sentinels: Vec<String>,
    /// The sentinels' quorum.
    #[serde(default)]
    pub quorum: usize,
    /// The name the sentinels monitor the primary under.
    #[serde(default)]
    pub master_name: String,
}

/// The manager's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// This pod's DNS name.
    pub host: String,
    /// This pod's ordinal.
    pub ordinal: u32,
    /// The data volume.
    pub data_dir: PathBuf,
    /// Where the rendered config (which holds the password) is written: a private directory.
    pub run_dir: PathBuf,
    /// The operator's config directory (the ConfigMap).
    pub config_dir: PathBuf,
    /// The account password, from the Secret through the environment.
    pub password: String,
    /// Extra `redis-server` arguments as `--name value` pairs (a module to load).
    pub server_args: Vec<String>,
    /// The server's port.
    pub port: u16,
    /// The sentinel port.
    pub sentinel_port: u16,
    /// The port the manager answers probes and reports on.
    pub manager_port: u16,
    /// The `redis-server` binary.
    pub server_bin: PathBuf,
    /// The one address to listen on, when not every interface (several members on one host, as
    /// in the manager's own tests).
    pub bind: Option<String>,
    /// How long a cold start waits for every member before deciding with all but one.
    pub grace: std::time::Duration,
}

fn var(name: &'static str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::Setting {
        name,
        why: "is not set".into(),
    })
}

fn port(name: &'static str, default: u16) -> Result<u16> {
    match std::env::var(name) {
        Ok(v) => v.parse().map_err(|_| Error::Setting {
            name,
            why: format!("is not a port: {v:?}"),
        }),
        Err(_) => Ok(default),
    }
}

impl Settings {
    /// Reads the settings from the environment.
    pub fn from_env() -> Result<Self> {
        let pod = var("POD_NAME")?;
        let ordinal = pod
            .rsplit('-')
            .next()
            .and_then(|o| o.parse().ok())
            .ok_or_else(|| Error::Setting {
                name: "POD_NAME",
                why: format!("{pod:?} does not end in an ordinal"),
            })?;
        let host = match std::env::var("POD_HOST") {
            Ok(h) => h,
            Err(_) => format!(
                "{pod}.{}.{}.svc.{}",
                var("HEADLESS_SERVICE")?,
                var("POD_NAMESPACE")?,
                var("CLUSTER_DOMAIN")?
            ),
        };
        Ok(Self {
            host,
            ordinal,
            data_dir: std::env::var("DATA_DIR")
                .unwrap_or_else(|_| "/data".into())
                .into(),
            run_dir: std::env::var("LIFEBOAT_RUN_DIR")
                .unwrap_or_else(|_| "/lifeboat/run".into())
                .into(),
            config_dir: std::env::var("LIFEBOAT_CONFIG_DIR")
                .unwrap_or_else(|_| "/etc/lifeboat".into())
                .into(),
            password: var("REDIS_PASSWORD")?,
            server_args: std::env::var("SERVER_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            port: port("DATA_PORT", 6379)?,
            sentinel_port: port("SENTINEL_PORT", 26379)?,
            manager_port: port("MANAGER_PORT", 8000)?,
            server_bin: std::env::var("REDIS_SERVER")
                .unwrap_or_else(|_| "redis-server".into())
                .into(),
            bind: std::env::var("BIND_ADDR").ok().filter(|b| !b.is_empty()),
            grace: std::time::Duration::from_secs(match std::env::var("LIFEBOAT_DECIDE_GRACE") {
                Ok(v) => v.parse().map_err(|_| Error::Setting {
                    name: "LIFEBOAT_DECIDE_GRACE",
                    why: format!("is not a number of seconds: {v:?}"),
                })?,
                Err(_) => 30,
            }),
        })
    }

    /// Reads the member list; a missing file means a standalone server.
    pub fn members(&self) -> Result<Members> {
        read_members(&self.config_dir.join(MEMBERS_FILE))
    }
}

/// Reads a members file.
pub fn read_members(path: &Path) -> Result<Members> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| Error::Setting {
            name: "members.json",
            why: format!("{}: {e}", path.display()),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Members::default()),
        Err(source) => Err(Error::Io {
            what: format!("reading {}", path.display()),
            source,
        }),
    }
}
