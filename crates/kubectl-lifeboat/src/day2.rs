//! `logs`, `connect` and `failover`: the day-2 commands that act on a Cluster's pods.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams};
use kube::{Client, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::human_duration;
use lifeboat_api::labels::{INSTANCE, ROLE};
use lifeboat_api::{Backup, Cluster};

use crate::Error;
use crate::connect::KubeArgs;

/// The mover Jobs of a Backup (its backup and drill Jobs) or of a Cluster (its restore's
/// prepareData and verify Jobs), by Lifeboat's names for them.
pub fn mover_jobs<'a>(target: &str, is_backup: bool, jobs: &'a [Job]) -> Vec<&'a Job> {
    let mut v: Vec<&Job> = jobs
        .iter()
        .filter(|j| {
            let n = j.name_any();
            if is_backup {
                n == format!("{target}-backup") || n == format!("{target}-drill")
            } else {
                n.strip_prefix(&format!("{target}-")).is_some_and(|rest| {
                    rest.ends_with("-verify")
                        || rest
                            .rsplit_once("-prepare-")
                            .is_some_and(|(_, i)| i.parse::<u32>().is_ok())
                })
            }
        })
        .collect();
    v.sort_by_key(|j| j.name_any());
    v
}

/// Prints the logs of the mover Jobs of a Backup or a Cluster named `target`.
pub async fn logs(client: &Client, ns: &str, target: &str, tail: Option<i64>) -> Result<(), Error> {
    let is_backup = Api::<Backup>::namespaced(client.clone(), ns)
        .get_opt(target)
        .await
        .map_err(|e| Error::api(format!("reading Backup {ns}/{target}"), e))?
        .is_some();
    if !is_backup
        && Api::<Cluster>::namespaced(client.clone(), ns)
            .get_opt(target)
            .await
            .map_err(|e| Error::api(format!("reading Cluster {ns}/{target}"), e))?
            .is_none()
    {
        return Err(Error::NotFound(format!(
            "a Backup or Cluster named {target} in namespace {ns}"
        )));
    }
    let jobs = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::api(format!("listing the Jobs of namespace {ns}"), e))?
        .items;
    let ours = mover_jobs(target, is_backup, &jobs);
    if ours.is_empty() {
        return Err(Error::NotFound(format!(
            "mover Jobs of {} {ns}/{target} (they are kept an hour after they end)",
            if is_backup { "Backup" } else { "Cluster" }
        )));
    }
    let pods_api = Api::<Pod>::namespaced(client.clone(), ns);
    for j in ours {
        let jn = j.name_any();
        let pods = pods_api
            .list(&ListParams::default().labels(&format!("job-name={jn}")))
            .await
            .map_err(|e| Error::api(format!("listing the pods of Job {ns}/{jn}"), e))?
            .items;
        if pods.is_empty() {
            println!("==> Job/{jn}: no pod (yet) <==");
        }
        for p in pods {
            let pn = p.name_any();
            println!("==> Job/{jn} pod/{pn} <==");
            let lp = LogParams {
                tail_lines: tail,
                ..Default::default()
            };
            match pods_api.logs(&pn, &lp).await {
                Ok(text) => print!("{text}"),
                Err(e) => println!("(cannot read the log: {e})"),
            }
        }
    }
    Ok(())
}

/// The data pods of a Cluster (sentinels left out).
async fn data_pods(client: &Client, ns: &str, cluster: &str) -> Result<Vec<Pod>, Error> {
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{INSTANCE}={cluster}")))
        .await
        .map_err(|e| Error::api(format!("listing the pods of Cluster {ns}/{cluster}"), e))?
        .items
        .into_iter()
        .filter(|p| {
            p.labels()
                .get(ROLE)
                .is_some_and(|r| r == "primary" || r == "secondary")
        })
        .collect())
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn primary(pods: &[Pod]) -> Option<&Pod> {
    pods.iter()
        .find(|p| p.labels().get(ROLE).is_some_and(|r| r == "primary"))
}

/// The `kubectl exec` that runs `redis-cli` on `pod`, the password taken from the container's
/// own environment so that it never appears on a command line.
pub fn connect_argv(
    kube: &KubeArgs,
    ns: &str,
    pod: &str,
    container: &str,
    args: &[String],
) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(k) = &kube.kubeconfig {
        v.push(format!("--kubeconfig={}", k.display()));
    }
    if let Some(c) = &kube.context {
        v.push(format!("--context={c}"));
    }
    v.extend([
        "exec".into(),
        "-n".into(),
        ns.into(),
        "-c".into(),
        container.into(),
    ]);
    // Interactive only without a command: a command's output goes to a script.
    v.push(if args.is_empty() {
        "-it".into()
    } else {
        "-i".into()
    });
    v.extend([pod.into(), "--".into(), "sh".into(), "-c".into()]);
    v.push(r#"REDISCLI_AUTH="$REDIS_PASSWORD" exec redis-cli "$@""#.into());
    v.push("redis-cli".into());
    v.extend(args.iter().cloned());
    v
}

/// Runs `redis-cli` on the Cluster's primary through kubectl; returns its exit code.
pub async fn connect(
    client: &Client,
    kube: &KubeArgs,
    ns: &str,
    cluster: &str,
    args: &[String],
) -> Result<u8, Error> {
    let pods = data_pods(client, ns, cluster).await?;
    let p = primary(&pods).ok_or_else(|| {
        Error::NotFound(format!(
            "a primary pod of Cluster {ns}/{cluster} (no data pod carries {ROLE}=primary)"
        ))
    })?;
    let container = p
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let status = std::process::Command::new(&kubectl)
        .args(connect_argv(kube, ns, &p.name_any(), &container, args))
        .status()
        .map_err(|e| {
            Error::Usage(format!(
                "cannot run {kubectl} (set KUBECTL to its path): {e}"
            ))
        })?;
    Ok(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1))
}

/// Which pod will be primary after a planned hand-over, or why `--to` cannot be honoured: the
/// sentinels elect among the replicas, so a named target is honoured only when it is the one
/// ready replica.
pub fn failover_target(pods: &[Pod], to: Option<&str>) -> Result<(String, Option<String>), Error> {
    let old = primary(pods)
        .ok_or_else(|| Error::Failed("no data pod is primary now; nothing to hand over".into()))?
        .name_any();
    let replicas: Vec<String> = pods
        .iter()
        .filter(|p| p.name_any() != old && ready(p))
        .map(ResourceExt::name_any)
        .collect();
    if replicas.is_empty() {
        return Err(Error::Failed(format!(
            "no ready replica to take over from {old}: a hand-over now would leave the Cluster without a primary"
        )));
    }
    match to {
        None => Ok((old, None)),
        Some(t) if t == old => Err(Error::Usage(format!("{t} is already the primary"))),
        Some(t) if !replicas.iter().any(|r| r == t) => Err(Error::Usage(format!(
            "{t} is not a ready replica of this Cluster (ready replicas: {})",
            replicas.join(", ")
        ))),
        Some(t) if replicas.len() > 1 => Err(Error::Usage(format!(
            "--to {t}: the sentinels elect among the ready replicas ({}), and Lifeboat does not steer their choice; run without --to",
            replicas.join(", ")
        ))),
        Some(t) => Ok((old, Some(t.to_owned()))),
    }
}

/// A planned hand-over: deletes the primary's pod, whose instance manager pauses writes, waits
/// for the replicas and has the sentinels fail over before the server stops; then waits for the
/// new primary.
pub async fn failover(
    client: &Client,
    ns: &str,
    cluster: &str,
    to: Option<&str>,
    timeout: Duration,
) -> Result<(), Error> {
    let pods = data_pods(client, ns, cluster).await?;
    let (old, _) = failover_target(&pods, to)?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(&old, &DeleteParams::default())
        .await
        .map_err(|e| Error::api(format!("deleting pod {ns}/{old}"), e))?;
    println!("pod {old} is stopping; its instance manager hands the primary role over first");
    let start = Instant::now();
    loop {
        let pods = data_pods(client, ns, cluster).await?;
        if let Some(p) = primary(&pods).filter(|p| p.name_any() != old && ready(p)) {
            println!(
                "[{:>5}] {} is primary",
                human_duration(start.elapsed().as_secs() as i64),
                p.name_any()
            );
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(Error::Failed(format!(
                "no other pod of Cluster {ns}/{cluster} became a ready primary within {}",
                human_duration(timeout.as_secs() as i64)
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: &str) -> Job {
        serde_json::from_value(serde_json::json!({"metadata": {"name": n}})).expect("a Job")
    }

    fn pod(n: &str, role: &str, ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": n, "labels": {ROLE: role}},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .expect("a Pod")
    }

    #[test]
    fn the_mover_jobs_of_a_backup_and_of_a_cluster_are_told_apart_by_name() {
        let jobs: Vec<Job> = [
            "b1-backup",
            "b1-drill",
            "b10-backup",
            "fdb-falkordb-prepare-0",
            "fdb-falkordb-prepare-1",
            "fdb-falkordb-verify",
            "fdb2-falkordb-verify",
            "fdb-other",
        ]
        .into_iter()
        .map(job)
        .collect();
        let names = |v: Vec<&Job>| v.into_iter().map(|j| j.name_any()).collect::<Vec<_>>();
        assert_eq!(
            names(mover_jobs("b1", true, &jobs)),
            ["b1-backup", "b1-drill"]
        );
        assert_eq!(
            names(mover_jobs("fdb", false, &jobs)),
            [
                "fdb-falkordb-prepare-0",
                "fdb-falkordb-prepare-1",
                "fdb-falkordb-verify"
            ]
        );
    }

    #[test]
    fn connect_takes_the_password_from_the_pod_and_is_interactive_only_without_a_command() {
        let k = KubeArgs {
            context: Some("bed".into()),
            ..Default::default()
        };
        let v = connect_argv(&k, "demo", "fdb-falkordb-0", "falkordb", &[]);
        assert!(
            v.contains(&"-it".to_string()) && v.contains(&"--context=bed".to_string()),
            "{v:?}"
        );
        assert!(
            !v.iter().any(|a| a.contains("-a ")),
            "no password on the command line: {v:?}"
        );
        let v = connect_argv(&k, "demo", "fdb-falkordb-0", "falkordb", &["DBSIZE".into()]);
        assert!(
            v.contains(&"-i".to_string()) && !v.contains(&"-it".to_string()),
            "{v:?}"
        );
        assert_eq!(v.last().map(String::as_str), Some("DBSIZE"));
    }

    #[test]
    fn a_hand_over_needs_a_ready_replica_and_honours_to_only_when_it_is_the_choice() {
        let two = [pod("p0", "primary", true), pod("p1", "secondary", true)];
        assert_eq!(failover_target(&two, None).expect("ok").0, "p0");
        assert_eq!(
            failover_target(&two, Some("p1")).expect("ok").1.as_deref(),
            Some("p1")
        );
        assert!(matches!(
            failover_target(&two, Some("p0")),
            Err(Error::Usage(_))
        ));
        assert!(matches!(
            failover_target(&two, Some("nope")),
            Err(Error::Usage(_))
        ));
        let lagging = [pod("p0", "primary", true), pod("p1", "secondary", false)];
        assert!(matches!(
            failover_target(&lagging, None),
            Err(Error::Failed(_))
        ));
        let three = [
            pod("p0", "primary", true),
            pod("p1", "secondary", true),
            pod("p2", "secondary", true),
        ];
        assert!(matches!(
            failover_target(&three, Some("p2")),
            Err(Error::Usage(_))
        ));
        assert_eq!(failover_target(&three, None).expect("ok").0, "p0");
    }
}
