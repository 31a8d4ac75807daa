//! `lifeboat-mover verify`: compares a running server's live fingerprint with the one the backup
//! recorded. This is the check that makes a restore's success claim worth believing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::marker::{self, State};
use crate::repo::{Repo, RepoArgs};
use crate::server::{Server, ServerArgs};

#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    /// Backup whose manifest holds the expected fingerprint. Optional with --restored-dir.
    #[arg(long, env = "LIFEBOAT_BACKUP_NAME")]
    pub backup: Option<String>,
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Read the expected fingerprint from the restore marker in this directory instead of the
    /// repo (no repo credentials needed); takes precedence over --repo. The marker must say the
    /// restore completed.
    #[arg(long)]
    pub restored_dir: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
    /// Seconds to wait for the server to accept connections and finish loading its dataset.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
    /// Ask the pod's instance manager on this port for the live fingerprint instead of the
    /// server itself. The content digest needs `DEBUG`, which Lifeboat's data servers allow
    /// over loopback only; the manager is on loopback. The password is its bearer token.
    #[arg(long, env = "LIFEBOAT_MANAGER_PORT")]
    pub manager_port: Option<u16>,
    /// Verify each of these servers instead of --host, all at once (separated by spaces;
    /// `HOST` or `HOST:PORT`, --port by default). Each is compared with the backup on its own;
    /// the command fails if any differs. Each server's digest is computed where it runs, so
    /// checking them together takes about as long as the slowest one.
    #[arg(long, env = "LIFEBOAT_VERIFY_HOSTS", value_delimiter = ' ', num_args = 1..)]
    pub hosts: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    pub backup_name: String,
    /// The server verified, as `HOST:PORT`; absent for a drill's private server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(rename = "match")]
    pub matches: bool,
    pub message: String,
    pub expected: Fingerprint,
    pub live: Fingerprint,
    pub differences: Vec<String>,
}

pub const EMPTY_MESSAGE: &str = "dataset is empty, as the backup recorded";

/// Verifies `--host`, or every server of `--hosts` at once. The reports keep the hosts' order,
/// except that every match comes before any mismatch: the last line printed is the verdict,
/// which is the line the operator reads.
pub async fn run_all(args: VerifyArgs) -> Result<Vec<VerifyReport>> {
    let hosts: Vec<String> = args
        .hosts
        .iter()
        .filter(|h| !h.is_empty())
        .cloned()
        .collect();
    if hosts.is_empty() {
        return Ok(vec![run(args).await?]);
    }
    crate::progress::stage("verify", 0);
    let tasks: Vec<_> = hosts
        .into_iter()
        .map(|h| {
            let mut a = args.clone();
            let (host, port) = host_port(&h, a.server.port);
            a.server.host = host;
            a.server.port = port;
            a.hosts.clear();
            tokio::spawn(run(a))
        })
        .collect();
    let mut reports = Vec::with_capacity(tasks.len());
    for t in tasks {
        reports.push(
            t.await
                .map_err(|e| Error::Internal(format!("verify task failed: {e}")))??,
        );
    }
    Ok(verdict_last(reports))
}

/// `HOST:PORT` split, or `HOST` with the default port. An address with more than one colon (IPv6)
/// is a host alone.
fn host_port(entry: &str, default: u16) -> (String, u16) {
    match entry.split_once(':') {
        Some((h, p)) if !p.contains(':') => match p.parse() {
            Ok(port) => (h.to_owned(), port),
            Err(_) => (entry.to_owned(), default),
        },
        _ => (entry.to_owned(), default),
    }
}

/// Matches first, mismatches last, each group in the order given.
fn verdict_last(mut reports: Vec<VerifyReport>) -> Vec<VerifyReport> {
    reports.sort_by_key(|r| !r.matches);
    reports
}

pub async fn run(args: VerifyArgs) -> Result<VerifyReport> {
    crate::progress::stage("verify", 0);
    let (backup, expected) = match &args.restored_dir {
        Some(dir) => {
            let m = marker::read(dir)?.ok_or_else(|| {
                Error::Usage(format!("{} holds no restore marker", dir.display()))
            })?;
            if m.state != State::Complete {
                return Err(Error::Usage(format!(
                    "restore of backup \"{}\" into {} is not complete",
                    m.backup_name,
                    dir.display()
                )));
            }
            if let Some(b) = &args.backup
                && *b != m.backup_name
            {
                return Err(Error::Usage(format!(
                    "{} holds backup \"{}\", not \"{b}\"",
                    dir.display(),
                    m.backup_name
                )));
            }
            (m.backup_name, m.fingerprint)
        }
        None => {
            let backup = args.backup.clone().ok_or_else(|| {
                Error::Usage("--backup is required unless --restored-dir is given".into())
            })?;
            let repo = Repo::open(&args.repo)?;
            let (m, _) = repo.read_manifest(&backup).await?;
            (backup, m.fingerprint)
        }
    };
    let mut opts = args.server.opts()?;
    let timeout = Duration::from_secs(args.timeout);
    opts.connect_timeout = opts.connect_timeout.max(timeout);
    let live = match args.manager_port {
        Some(port) => from_manager(&opts, port, timeout).await?,
        None => tokio::task::spawn_blocking(move || -> Result<Fingerprint> {
            let mut srv = Server::connect(&opts, Instant::now() + timeout)?;
            srv.fingerprint()
        })
        .await
        .map_err(|e| Error::Internal(format!("verify task failed: {e}")))??,
    };
    let mut report = compare(backup, expected, live);
    let server = format!("{}:{}", args.server.host, args.server.port);
    if !report.matches {
        report.message = format!("{} (server {server})", report.message);
    }
    report.server = Some(server);
    Ok(report)
}

/// The live fingerprint as the pod's instance manager computes it over loopback.
async fn from_manager(
    opts: &crate::server::ServerOpts,
    port: u16,
    timeout: Duration,
) -> Result<Fingerprint> {
    let url = format!("http://{}:{port}/fingerprint", opts.host);
    let unreachable = |cause: String| Error::ServerUnreachable {
        addr: format!("{}:{port} (instance manager)", opts.host),
        cause,
    };
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| Error::Internal(format!("building the HTTP client: {e}")))?;
    let mut req = client.get(&url);
    if let Some(p) = &opts.password {
        req = req.bearer_auth(p);
    }
    let resp = req.send().await.map_err(|e| unreachable(e.to_string()))?;
    let status = resp.status();
    let body = resp.text().await.map_err(|e| unreachable(e.to_string()))?;
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Err(Error::ServerAuth {
            addr: url,
            cause: body,
        });
    }
    if !status.is_success() {
        return Err(Error::Server {
            addr: url,
            cause: format!("answered {status}: {body}"),
        });
    }
    serde_json::from_str(&body).map_err(|e| Error::Server {
        addr: url,
        cause: format!("unreadable fingerprint: {e}"),
    })
}

pub fn compare(backup_name: String, expected: Fingerprint, live: Fingerprint) -> VerifyReport {
    let differences = expected.differences(&live, chrono::Utc::now().timestamp_millis());
    let matches = differences.is_empty();
    let message = if !matches {
        format!(
            "live dataset differs from backup \"{backup_name}\": {}",
            differences.join("; ")
        )
    } else if expected.is_empty() {
        EMPTY_MESSAGE.to_string()
    } else {
        format!(
            "live dataset matches backup \"{backup_name}\": {} keys, {} graphs",
            expected.total_keys(),
            expected.graph_count()
        )
    };
    VerifyReport {
        backup_name,
        server: None,
        matches,
        message,
        expected,
        live,
        differences,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::DatabaseFingerprint;

    /// A fingerprint of `keys` keys in database 0.
    fn keys_in_db0(keys: u64) -> Fingerprint {
        let mut f = Fingerprint::default();
        f.databases.insert(
            0,
            DatabaseFingerprint {
                keys,
                ..Default::default()
            },
        );
        f
    }

    #[test]
    fn hosts_take_their_own_port_or_the_default() {
        assert_eq!(host_port("fdb-0.h", 6379), ("fdb-0.h".into(), 6379));
        assert_eq!(
            host_port("127.0.0.1:7001", 6379),
            ("127.0.0.1".into(), 7001)
        );
        assert_eq!(host_port("::1", 6379), ("::1".into(), 6379));
    }

    #[test]
    fn a_mismatch_is_the_last_report_whatever_its_host_order() {
        let differ = keys_in_db0(1);
        let mut bad = compare("b".into(), differ, Fingerprint::default());
        bad.server = Some("fdb-0".into());
        let mut good = compare("b".into(), Fingerprint::default(), Fingerprint::default());
        good.server = Some("fdb-1".into());
        let mut good2 = compare("b".into(), Fingerprint::default(), Fingerprint::default());
        good2.server = Some("fdb-2".into());
        let order: Vec<_> = verdict_last(vec![bad, good, good2])
            .into_iter()
            .map(|r| (r.server.unwrap_or_default(), r.matches))
            .collect();
        assert_eq!(
            order,
            [
                ("fdb-1".to_string(), true),
                ("fdb-2".to_string(), true),
                ("fdb-0".to_string(), false)
            ]
        );
    }

    #[test]
    fn empty_backup_and_empty_server_match_with_the_empty_message() {
        let r = compare("b".into(), Fingerprint::default(), Fingerprint::default());
        assert!(r.matches);
        assert_eq!(r.message, EMPTY_MESSAGE);
    }

    #[test]
    fn empty_server_for_non_empty_backup_is_a_mismatch() {
        let want = keys_in_db0(2);
        let r = compare("b".into(), want, Fingerprint::default());
        assert!(!r.matches);
        assert!(
            r.message.contains("db 0: 2 keys in backup, 0 live"),
            "{}",
            r.message
        );
    }
}
