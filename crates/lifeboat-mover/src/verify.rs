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

/// How often a manager that does not serve its dataset yet is asked again.
const ASK_MANAGER_EVERY: Duration = Duration::from_secs(1);

/// One answer of the instance manager, as far as what to do next goes.
#[derive(Debug)]
enum ManagerAnswer {
    /// The fingerprint, as JSON.
    Fingerprint(String),
    /// Not yet, for this reason: the manager is not up, the server is still loading or the
    /// replica is not in sync (the manager says so with `Retry-After`). Asked again.
    NotYet(String),
    /// Refused for good.
    Refused(Error),
}

/// Reads one answer; `retry_after` is whether the answer carried a `Retry-After` header.
fn manager_answer(url: &str, status: u16, retry_after: bool, body: String) -> ManagerAnswer {
    match status {
        200..=299 => ManagerAnswer::Fingerprint(body),
        401 => ManagerAnswer::Refused(Error::ServerAuth {
            addr: url.to_owned(),
            cause: body,
        }),
        503 if retry_after => ManagerAnswer::NotYet(body),
        _ => ManagerAnswer::Refused(Error::Server {
            addr: url.to_owned(),
            cause: format!("answered {status}: {body}"),
        }),
    }
}

/// The live fingerprint as the pod's instance manager computes it over loopback. The Job may
/// start before the server has loaded its dataset (a restore verifies while the servers write
/// their AOF), so a manager that is not up yet, or says the server does not serve its dataset
/// yet, is asked again until `timeout`.
async fn from_manager(
    opts: &crate::server::ServerOpts,
    port: u16,
    timeout: Duration,
) -> Result<Fingerprint> {
    let url = format!("http://{}:{port}/fingerprint", opts.host);
    let addr = format!("{}:{port} (instance manager)", opts.host);
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| Error::Internal(format!("building the HTTP client: {e}")))?;
    let deadline = Instant::now() + timeout;
    let mut waiting_for = String::new();
    loop {
        let mut req = client
            .get(&url)
            .timeout(deadline.saturating_duration_since(Instant::now()));
        if let Some(p) = &opts.password {
            req = req.bearer_auth(p);
        }
        let answer = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp.headers().contains_key(reqwest::header::RETRY_AFTER);
                match resp.text().await {
                    Ok(body) => manager_answer(&url, status, retry_after, body),
                    Err(e) => ManagerAnswer::NotYet(e.to_string()),
                }
            }
            Err(e) => ManagerAnswer::NotYet(e.to_string()),
        };
        let why = match answer {
            ManagerAnswer::Fingerprint(body) => {
                return serde_json::from_str(&body).map_err(|e| Error::Server {
                    addr: url,
                    cause: format!("unreadable fingerprint: {e}"),
                });
            }
            ManagerAnswer::Refused(e) => return Err(e),
            ManagerAnswer::NotYet(why) => why,
        };
        if Instant::now() + ASK_MANAGER_EVERY >= deadline {
            return Err(Error::ServerUnreachable {
                addr,
                cause: format!(
                    "did not serve its dataset within {}s: {why}",
                    timeout.as_secs()
                ),
            });
        }
        if why != waiting_for {
            tracing::info!(server = %addr, reason = %why, "waiting for the server to serve its dataset");
            waiting_for = why;
        }
        tokio::time::sleep(ASK_MANAGER_EVERY).await;
    }
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
    fn a_manager_that_says_not_yet_is_asked_again_and_any_other_refusal_ends_the_verify() {
        let url = "http://fdb-1.h:8000/fingerprint";
        assert!(matches!(
            manager_answer(url, 200, false, "{}".into()),
            ManagerAnswer::Fingerprint(b) if b == "{}"
        ));
        assert!(matches!(
            manager_answer(url, 503, true, "loading".into()),
            ManagerAnswer::NotYet(b) if b == "loading"
        ));
        // Without Retry-After, a 503 is the digest failing on a server that serves: asking again
        // would only hide it until the deadline.
        let failed = manager_answer(url, 503, false, "ERR digest".into());
        assert!(
            matches!(&failed, ManagerAnswer::Refused(Error::Server { addr, cause })
                if addr == url && cause == "answered 503: ERR digest"),
            "{failed:?}"
        );
        assert!(matches!(
            manager_answer(url, 401, true, "token".into()),
            ManagerAnswer::Refused(Error::ServerAuth { .. })
        ));
        assert!(matches!(
            manager_answer(url, 404, false, "not a data pod".into()),
            ManagerAnswer::Refused(Error::Server { .. })
        ));
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
