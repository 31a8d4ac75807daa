//! What `status` asks the servers themselves: each data pod's replication role, link and offset
//! (`INFO replication`), and which address each sentinel names as primary. Read through `exec`
//! with the pod's own password, so the plugin never holds it.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use serde::Serialize;
use tokio::io::AsyncReadExt;

/// One data server's replication, as it reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replication {
    /// `master` or `slave`, as the server says.
    pub role: String,
    /// A replica's link to its primary: `up` or `down`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The replication offset the server has reached.
    pub offset: i64,
    /// Seconds since a replica last heard from its primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_io_seconds: Option<i64>,
}

/// Parses `INFO replication`.
pub fn parse(info: &str) -> Option<Replication> {
    let kv: HashMap<&str, &str> = info
        .lines()
        .filter_map(|l| l.trim_end().split_once(':'))
        .collect();
    let role = (*kv.get("role")?).to_owned();
    let num = |k: &str| kv.get(k).and_then(|v| v.parse::<i64>().ok());
    let replica = role == "slave";
    Some(Replication {
        link: replica
            .then(|| kv.get("master_link_status").map(|s| (*s).to_owned()))
            .flatten(),
        offset: if replica {
            num("slave_repl_offset").unwrap_or(0)
        } else {
            num("master_repl_offset").unwrap_or(0)
        },
        last_io_seconds: replica.then(|| num("master_last_io_seconds_ago")).flatten(),
        role,
    })
}

/// The bytes a replica is behind, from the primary's and its own offsets (read moments apart,
/// so an estimate; never negative).
pub fn lag(primary_offset: i64, replica: &Replication) -> Option<i64> {
    (replica.role == "slave").then(|| (primary_offset - replica.offset).max(0))
}

/// Runs a shell line in a pod's first container and returns its stdout; `None` when the pod
/// cannot be reached (not running, exec refused), which `status` shows as unknown.
pub async fn sh(pods: &Api<Pod>, pod: &str, container: &str, line: &str) -> Option<String> {
    let run = async {
        let ap = AttachParams::default()
            .container(container)
            .stdin(false)
            .stdout(true)
            .stderr(false);
        let mut proc = pods.exec(pod, ["sh", "-c", line], &ap).await.ok()?;
        let mut out = proc.stdout()?;
        let mut s = String::new();
        out.read_to_string(&mut s).await.ok()?;
        let _ = proc.join().await;
        Some(s)
    };
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .ok()
        .flatten()
}

/// `INFO replication` of a data pod.
pub async fn of_data_pod(pods: &Api<Pod>, pod: &str, container: &str) -> Option<Replication> {
    let out = sh(
        pods,
        pod,
        container,
        r#"REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli --no-auth-warning INFO replication"#,
    )
    .await?;
    parse(&out)
}

/// The primary's address as one sentinel names it. A sentinel may not require the password,
/// so it is asked again without one when it refuses AUTH.
pub async fn sentinel_master(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    master: &str,
) -> Option<String> {
    let ask = |auth: bool| {
        format!(
            "{}redis-cli -p 26379 SENTINEL get-master-addr-by-name {master}",
            if auth {
                r#"REDISCLI_AUTH="$REDIS_PASSWORD" "#
            } else {
                ""
            }
        )
    };
    let mut out = sh(pods, pod, container, &ask(true)).await?;
    if out.to_ascii_uppercase().contains("AUTH") {
        out = sh(pods, pod, container, &ask(false)).await?;
    }
    let lines: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [host, port] => Some(format!("{host}:{port}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_and_a_replica_read_as_the_server_reports_them() {
        let p = parse(
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmaster_repl_offset:5000\r\n",
        )
        .expect("parses");
        assert_eq!(
            (p.role.as_str(), p.offset, p.link.as_deref()),
            ("master", 5000, None)
        );
        let r = parse(
            "role:slave\r\nmaster_host:fdb-falkordb-0\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:1\r\nslave_repl_offset:4200\r\n",
        )
        .expect("parses");
        assert_eq!(r.link.as_deref(), Some("up"));
        assert_eq!(r.last_io_seconds, Some(1));
        assert_eq!(lag(p.offset, &r), Some(800));
        assert_eq!(lag(p.offset, &p), None, "a primary has no lag");
        assert_eq!(
            lag(4000, &r),
            Some(0),
            "offsets read apart never make a negative lag"
        );
        assert_eq!(parse("ERR NOAUTH"), None);
    }
}
