//! Which data pod is the primary: asked of the servers (`ROLE`) and the sentinels, decided by a
//! pure function, and written to the `kubeblocks.io/role` label that the client Service selects.

use std::collections::BTreeMap;
use std::time::Duration;

/// What one data server said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerRole {
    /// It is a master with this many connected replicas.
    Master { connected_replicas: usize },
    /// It is a replica; whether its link to the master is up.
    Replica { link_up: bool },
    /// It did not answer.
    Unknown(String),
}

/// The roles decided for a component.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Roles {
    /// The primary pod, if one is known.
    pub primary: Option<String>,
    /// Role label per pod: `primary` or `secondary`.
    pub labels: BTreeMap<String, &'static str>,
    /// What keeps the component from being healthy.
    pub problems: Vec<String>,
}

/// Decides roles. `servers` maps pod name to (its FQDN, what it said); `sentinel_masters` are the
/// masters the sentinels named (FQDNs), one per sentinel that answered.
pub fn decide(
    servers: &BTreeMap<String, (String, ServerRole)>,
    sentinel_masters: &[String],
    sentinels: usize,
) -> Roles {
    let mut r = Roles::default();
    let masters: Vec<&String> = servers
        .iter()
        .filter(|(_, (_, role))| matches!(role, ServerRole::Master { .. }))
        .map(|(pod, _)| pod)
        .collect();
    // Sentinels are the authority after a failover; the servers' own view decides when there
    // are no sentinels (standalone) or they do not agree yet.
    let agreed = sentinel_masters.first().filter(|m| {
        sentinel_masters.iter().all(|x| x == *m) && sentinel_masters.len() == sentinels
    });
    if sentinels > 0 && agreed.is_none() {
        r.problems.push(format!(
            "sentinels do not agree on the master yet ({} of {sentinels} answered: {})",
            sentinel_masters.len(),
            sentinel_masters.join(", ")
        ));
    }
    let primary = match agreed {
        Some(fqdn) => servers
            .iter()
            .find(|(_, (f, role))| f == fqdn && matches!(role, ServerRole::Master { .. }))
            .map(|(p, _)| p.clone()),
        None if masters.len() == 1 => masters.first().map(|p| (*p).clone()),
        None => None,
    };
    if masters.len() > 1 {
        let names: Vec<&str> = masters.iter().map(|s| s.as_str()).collect();
        r.problems.push(format!(
            "more than one server claims to be master: {}",
            names.join(", ")
        ));
    }
    match &primary {
        None => r.problems.push("no primary".into()),
        Some(p) => {
            if let Some((_, ServerRole::Master { connected_replicas })) = servers.get(p) {
                let want = servers.len().saturating_sub(1);
                if *connected_replicas < want {
                    r.problems.push(format!(
                        "primary {p} has {connected_replicas} of {want} replicas connected"
                    ));
                }
            }
        }
    }
    for (pod, (_, role)) in servers {
        let label = if Some(pod) == primary.as_ref() {
            "primary"
        } else {
            "secondary"
        };
        if let ServerRole::Unknown(why) = role {
            r.problems.push(format!("{pod} did not answer: {why}"));
        }
        r.labels.insert(pod.clone(), label);
    }
    r.primary = primary;
    r
}

const TIMEOUT: Duration = Duration::from_secs(2);

async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    match tokio::time::timeout(TIMEOUT, client.get_multiplexed_async_connection()).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

/// Asks a data server for its role.
pub async fn server_role(ip: &str, port: i32, password: &str) -> ServerRole {
    let url = format!("redis://:{password}@{ip}:{port}/");
    let mut conn = match connect(&url).await {
        Ok(c) => c,
        Err(e) => return ServerRole::Unknown(e),
    };
    let info: Result<String, _> = tokio::time::timeout(
        TIMEOUT,
        redis::cmd("INFO").arg("replication").query_async(&mut conn),
    )
    .await
    .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out"))));
    match info {
        Ok(text) => parse_replication_info(&text),
        Err(e) => ServerRole::Unknown(e.to_string()),
    }
}

/// Reads `INFO replication`.
pub fn parse_replication_info(text: &str) -> ServerRole {
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(k).and_then(|v| v.strip_prefix(':')))
            .map(str::to_owned)
    };
    match field("role").as_deref() {
        Some("master") => ServerRole::Master {
            connected_replicas: field("connected_slaves")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        },
        Some("slave") => ServerRole::Replica {
            link_up: field("master_link_status").as_deref() == Some("up"),
        },
        other => ServerRole::Unknown(format!("unexpected role {other:?}")),
    }
}

/// Asks a sentinel which server it considers the master. Sentinels require the account password.
pub async fn sentinel_master(
    ip: &str,
    port: i32,
    master_name: &str,
    password: &str,
) -> Option<String> {
    let url = format!("redis://:{password}@{ip}:{port}/");
    let mut conn = connect(&url).await.ok()?;
    let r: Result<Vec<String>, _> = tokio::time::timeout(
        TIMEOUT,
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master_name)
            .query_async(&mut conn),
    )
    .await
    .ok()?;
    r.ok().and_then(|v| v.into_iter().next())
}

/// What a data pod's instance manager says when its server does not run: it is still deciding,
/// or it waits (and why). Only the fields the operator shows are read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct ManagerReport {
    /// `deciding`, `waiting`, `running` or `stopping`.
    pub phase: String,
    /// Why it waits.
    pub reason: Option<String>,
}

/// Reads a data pod's manager report (`GET /report` on the manager port).
pub async fn manager_report(ip: &str, port: i32) -> Option<ManagerReport> {
    let client = reqwest::Client::builder().timeout(TIMEOUT).build().ok()?;
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    let resp = client
        .get(format!("http://{host}:{port}/report"))
        .send()
        .await
        .ok()?;
    let body = resp.bytes().await.ok()?;
    serde_json::from_slice(&body).ok()
}

/// The problem a waiting manager's report amounts to, if any.
pub fn waiting_problem(pod: &str, r: &ManagerReport) -> Option<String> {
    match r.phase.as_str() {
        "waiting" => Some(format!(
            "{pod} does not start its server: {}",
            r.reason.as_deref().unwrap_or("no reason given")
        )),
        "deciding" => Some(format!("{pod} is choosing its role")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(roles: &[(&str, ServerRole)]) -> BTreeMap<String, (String, ServerRole)> {
        roles
            .iter()
            .map(|(p, r)| {
                (
                    p.to_string(),
                    (format!("{p}.h.ns.svc.cluster.local"), r.clone()),
                )
            })
            .collect()
    }

    #[test]
    fn healthy_pair_with_agreeing_sentinels() {
        let s = servers(&[
            (
                "fdb-falkordb-0",
                ServerRole::Master {
                    connected_replicas: 1,
                },
            ),
            ("fdb-falkordb-1", ServerRole::Replica { link_up: true }),
        ]);
        let m = vec!["fdb-falkordb-0.h.ns.svc.cluster.local".to_string(); 3];
        let r = decide(&s, &m, 3);
        assert_eq!(r.primary.as_deref(), Some("fdb-falkordb-0"));
        assert_eq!(r.labels["fdb-falkordb-1"], "secondary");
        assert!(r.problems.is_empty(), "{:?}", r.problems);
    }

    #[test]
    fn after_failover_the_sentinels_choice_wins_over_a_stale_master() {
        let s = servers(&[
            (
                "fdb-falkordb-0",
                ServerRole::Master {
                    connected_replicas: 0,
                },
            ),
            (
                "fdb-falkordb-1",
                ServerRole::Master {
                    connected_replicas: 0,
                },
            ),
        ]);
        let m = vec!["fdb-falkordb-1.h.ns.svc.cluster.local".to_string(); 3];
        let r = decide(&s, &m, 3);
        assert_eq!(r.primary.as_deref(), Some("fdb-falkordb-1"));
        assert_eq!(r.labels["fdb-falkordb-0"], "secondary");
        assert!(r.problems.iter().any(|p| p.contains("more than one")));
    }

    #[test]
    fn disagreeing_sentinels_are_a_problem() {
        let s = servers(&[(
            "fdb-falkordb-0",
            ServerRole::Master {
                connected_replicas: 1,
            },
        )]);
        let r = decide(&s, &["a".into(), "b".into()], 3);
        assert!(r.problems.iter().any(|p| p.contains("do not agree")));
    }

    #[test]
    fn a_waiting_manager_is_a_problem_that_names_the_pod_and_the_reason() {
        let r: ManagerReport = serde_json::from_str(
            r#"{"host":"h","ordinal":0,"phase":"waiting","reason":"every data pod that reports has an empty volume"}"#,
        )
        .expect("parsed");
        let p = waiting_problem("fdb-falkordb-0", &r).expect("problem");
        assert!(
            p.contains("fdb-falkordb-0") && p.contains("empty volume"),
            "{p}"
        );
        let running: ManagerReport =
            serde_json::from_str(r#"{"phase":"running","role":"primary"}"#).expect("parsed");
        assert_eq!(waiting_problem("x", &running), None);
    }

    #[test]
    fn parses_info_replication() {
        let t = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n";
        assert_eq!(
            parse_replication_info(t),
            ServerRole::Master {
                connected_replicas: 2
            }
        );
        let t = "role:slave\r\nmaster_host:x\r\nmaster_link_status:down\r\n";
        assert_eq!(
            parse_replication_info(t),
            ServerRole::Replica { link_up: false }
        );
    }
}
