//! `kubectl lifeboat restore-status`: where a Cluster's restore is, stage by stage, and whether
//! the restored data matched the backup.

use std::fmt::Write;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use lifeboat_api::dataprotection::v1alpha1::{
    DatasetFingerprint, RestoreActionStatus, RestoreStatusAction, RestoreVerification,
};
use lifeboat_api::labels::INSTANCE;
use lifeboat_api::{Cluster, Restore, conditions};

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("cannot connect to the Kubernetes API: {0}")]
    Connect(#[source] kube::Error),
    #[error("cluster {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error(
        "cannot read cluster {namespace}/{name}: the API server does not serve {resource}; install the CRDs with `kubectl lifeboat crds | kubectl apply --server-side -f -`"
    )]
    NotServed {
        namespace: String,
        name: String,
        resource: &'static str,
    },
    #[error("cannot read cluster {namespace}/{name}: {source}")]
    GetCluster {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot list the restores of cluster {namespace}/{name}: {source}")]
    ListRestores {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What `-o json|yaml` prints: the Cluster and its Restores as the API holds them.
#[derive(serde::Serialize)]
pub struct Objects {
    pub cluster: Cluster,
    pub restores: Vec<Restore>,
}

/// Reads the Cluster and its Restores and renders them.
pub async fn fetch(
    client: Client,
    name: &str,
    namespace: &str,
    format: crate::output::Format,
) -> Result<String, crate::Error> {
    let (cluster, list) = read(client, name, namespace).await?;
    let objects = Objects {
        cluster,
        restores: list,
    };
    crate::output::render(format, &objects, || {
        render(&objects.cluster, &objects.restores)
    })
}

/// Reads the Cluster and its Restores.
async fn read(
    client: Client,
    name: &str,
    namespace: &str,
) -> Result<(Cluster, Vec<Restore>), StatusError> {
    let namespace = namespace.to_owned();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &namespace);
    let cluster = clusters
        .get_opt(name)
        .await
        .map_err(|source| match source {
            // A 404 that is not an object's NotFound is the path itself: the CRD is missing.
            kube::Error::Api(status) if status.code == 404 => StatusError::NotServed {
                namespace: namespace.clone(),
                name: name.to_owned(),
                resource: "clusters.apps.kubeblocks.io/v1",
            },
            source => StatusError::GetCluster {
                namespace: namespace.clone(),
                name: name.to_owned(),
                source,
            },
        })?
        .ok_or_else(|| StatusError::NotFound {
            namespace: namespace.clone(),
            name: name.to_owned(),
        })?;
    let restores: Api<Restore> = Api::namespaced(client, &namespace);
    let mut list = restores
        .list(&ListParams::default().labels(&format!("{INSTANCE}={name}")))
        .await
        .map_err(|source| StatusError::ListRestores {
            namespace: namespace.clone(),
            name: name.to_owned(),
            source,
        })?
        .items;
    list.sort_by_key(|r| r.name_any());
    Ok((cluster, list))
}

/// The report for a Cluster and its Restores.
pub fn render(cluster: &Cluster, restores: &[Restore]) -> String {
    let mut out = String::new();
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let status = cluster.status.as_ref();
    let _ = writeln!(out, "Cluster {namespace}/{name}");
    let phase = status.and_then(|s| s.phase).map(|p| format!("{p:?}"));
    let _ = writeln!(out, "  Phase:    {}", phase.as_deref().unwrap_or("-"));
    if let Some(message) = status
        .and_then(|s| s.message.as_deref())
        .filter(|m| !m.is_empty())
    {
        let _ = writeln!(out, "  Message:  {message}");
    }
    let restore_condition =
        status.and_then(|s| conditions::get(&s.conditions, conditions::RESTORE));
    let _ = writeln!(
        out,
        "  Restore:  {}",
        restore_condition
            .map(describe_condition)
            .unwrap_or_else(|| "no Restore condition".to_owned())
    );
    if let Some(source) = cluster.spec.restore.as_ref().map(|r| &r.source) {
        let ns = source.namespace.as_deref().unwrap_or(&namespace);
        let _ = writeln!(out, "  Source:   Backup {ns}/{}", source.name);
    }

    if restores.is_empty() {
        let _ = writeln!(
            out,
            "\nNo Restores labelled {INSTANCE}={name} in namespace {namespace}."
        );
        return out;
    }
    for restore in restores {
        out.push('\n');
        render_restore(&mut out, restore);
    }
    out
}

fn describe_condition(c: &Condition) -> String {
    let mut s = format!(
        "{} ({}) since {}",
        c.status,
        c.reason,
        time(&c.last_transition_time)
    );
    if !c.message.is_empty() {
        let _ = write!(s, ": {}", c.message);
    }
    s
}

fn time(t: &Time) -> String {
    t.0.to_string()
}

fn opt_time(t: Option<&Time>) -> String {
    t.map(time).unwrap_or_else(|| "-".to_owned())
}

fn render_restore(out: &mut String, restore: &Restore) {
    let status = restore.status.clone().unwrap_or_default();
    let backup = &restore.spec.backup;
    let _ = writeln!(out, "Restore {}", restore.name_any());
    let _ = writeln!(out, "  Backup:     {}/{}", backup.namespace, backup.name);
    let phase = status.phase.map(|p| format!("{p:?}"));
    let _ = writeln!(out, "  Phase:      {}", phase.as_deref().unwrap_or("-"));
    let _ = writeln!(
        out,
        "  Started:    {}",
        opt_time(status.start_timestamp.as_ref())
    );
    let _ = writeln!(
        out,
        "  Completed:  {}",
        opt_time(status.completion_timestamp.as_ref())
    );
    let _ = writeln!(
        out,
        "  Duration:   {}",
        status.duration.as_deref().unwrap_or("-")
    );

    let actions = status.actions.unwrap_or_default();
    let stages = [
        ("prepareData", &actions.prepare_data),
        ("postReady", &actions.post_ready),
    ];
    let rows: Vec<Vec<String>> = stages
        .iter()
        .flat_map(|(stage, list)| list.iter().map(move |a| action_row(stage, a)))
        .collect();
    out.push('\n');
    if rows.is_empty() {
        let _ = writeln!(out, "  No stage has started.");
    } else {
        out.push_str(&table(
            "  ",
            &[
                "STAGE", "ACTION", "OBJECT", "STATUS", "START", "END", "MESSAGE",
            ],
            &rows,
        ));
    }

    // Conditions that are not True say which precondition or stage is holding the restore up.
    let pending: Vec<Vec<String>> = status
        .conditions
        .iter()
        .filter(|c| c.status != "True")
        .map(|c| {
            vec![
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            ]
        })
        .collect();
    if !pending.is_empty() {
        out.push('\n');
        out.push_str(&table(
            "  ",
            &["CONDITION", "STATUS", "REASON", "MESSAGE"],
            &pending,
        ));
    }

    out.push('\n');
    match &status.verification {
        None => {
            let _ = writeln!(out, "  Verification: not run yet");
        }
        Some(v) => render_verification(out, v),
    }
}

fn action_row(stage: &str, a: &RestoreStatusAction) -> Vec<String> {
    let status = match a.status {
        RestoreActionStatus::Processing => "Processing",
        RestoreActionStatus::Completed => "Completed",
        RestoreActionStatus::Failed => "Failed",
    };
    vec![
        stage.to_owned(),
        a.name.clone(),
        a.object_key.clone(),
        status.to_owned(),
        opt_time(a.start_time.as_ref()),
        opt_time(a.end_time.as_ref()),
        a.message.clone().unwrap_or_default(),
    ]
}

fn render_verification(out: &mut String, v: &RestoreVerification) {
    let verdict = if v.matched { "MATCHED" } else { "MISMATCH" };
    let mut line = format!("  Verification: {verdict}");
    if let Some(pod) = &v.pod {
        let _ = write!(line, " on pod {pod}");
    }
    if let Some(t) = &v.time {
        let _ = write!(line, " at {}", time(t));
    }
    let _ = writeln!(out, "{line}");
    let rows = fingerprint_rows(&v.expected, v.observed.as_ref());
    if rows.is_empty() {
        let _ = writeln!(out, "  The backup holds no keys.");
    } else {
        out.push_str(&table(
            "  ",
            &["DATASET", "EXPECTED", "OBSERVED", ""],
            &rows,
        ));
    }
}

/// One row per database key count and per graph node and edge count, over the union of what the
/// backup recorded and what the live database holds, so that extra data shows up too.
fn fingerprint_rows(
    expected: &DatasetFingerprint,
    observed: Option<&DatasetFingerprint>,
) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = |what: String, want: Option<i64>, got: Option<i64>| {
        let show = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_else(|| "-".to_owned());
        let mark = match (observed, want == got) {
            (None, _) => "",
            (Some(_), true) => "ok",
            (Some(_), false) => "DIFFERS",
        };
        rows.push(vec![what, show(want), show(got), mark.to_owned()]);
    };

    let mut dbs: Vec<&String> = expected.keys.keys().collect();
    if let Some(o) = observed {
        dbs.extend(o.keys.keys());
    }
    dbs.sort_by_key(|db| (db.parse::<u64>().unwrap_or(u64::MAX), db.to_string()));
    dbs.dedup();
    for db in dbs {
        let want = Some(expected.keys.get(db).copied().unwrap_or(0));
        let got = observed.map(|o| o.keys.get(db).copied().unwrap_or(0));
        row(format!("keys in db {db}"), want, got);
    }

    let mut graphs: Vec<(i64, &str)> = expected
        .graphs
        .iter()
        .map(|g| (g.db, g.name.as_str()))
        .collect();
    if let Some(o) = observed {
        graphs.extend(o.graphs.iter().map(|g| (g.db, g.name.as_str())));
    }
    graphs.sort();
    graphs.dedup();
    for (db, name) in graphs {
        // A graph absent from one side has no nodes and no edges there.
        let counts = |f: &DatasetFingerprint| {
            f.graphs
                .iter()
                .find(|g| g.db == db && g.name == name)
                .map_or((0, 0), |g| (g.nodes, g.edges))
        };
        let want = counts(expected);
        let got = observed.map(counts);
        row(
            format!("graph {name} (db {db}) nodes"),
            Some(want.0),
            got.map(|g| g.0),
        );
        row(
            format!("graph {name} (db {db}) edges"),
            Some(want.1),
            got.map(|g| g.1),
        );
    }
    rows
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
fn table(indent: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = indent.to_owned();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(cell.chars().count())
                    + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use lifeboat_api::dataprotection::v1alpha1::{
        GraphFingerprint, RestoreStatus, RestoreStatusActions,
    };
    use std::collections::BTreeMap;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("in range"))
    }

    fn cluster() -> Cluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kubeblocks.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "fdb-r2", "namespace": "demo"},
            "spec": {
                "terminationPolicy": "WipeOut",
                "componentSpecs": [{"name": "falkordb"}],
                "restore": {"source": {"apiGroup": "dataprotection.kubeblocks.io", "kind": "Backup", "name": "bk"}}
            },
            "status": {
                "phase": "Creating",
                "conditions": [{
                    "type": "Restore", "status": "Unknown", "reason": "RestoreRunning",
                    "message": "verifying", "lastTransitionTime": "2026-12-02T10:00:00Z"
                }]
            }
        }))
        .expect("a Cluster")
    }

    fn restore(verification: Option<RestoreVerification>) -> Restore {
        let mut r: Restore = serde_json::from_value(serde_json::json!({
            "apiVersion": "dataprotection.kubeblocks.io/v1alpha1",
            "kind": "Restore",
            "metadata": {"name": "fdb-r2-falkordb-restore", "namespace": "demo"},
            "spec": {"backup": {"name": "bk", "namespace": "demo"}}
        }))
        .expect("a Restore");
        r.status = Some(RestoreStatus {
            phase: Some(lifeboat_api::RestorePhase::Running),
            start_timestamp: Some(at(1_000)),
            duration: Some("1m12s".into()),
            actions: Some(RestoreStatusActions {
                prepare_data: vec![RestoreStatusAction {
                    name: "restore-data-0".into(),
                    object_key: "Job/fdb-r2-falkordb-prepare-0".into(),
                    status: RestoreActionStatus::Completed,
                    start_time: Some(at(1_000)),
                    end_time: Some(at(1_060)),
                    ..Default::default()
                }],
                post_ready: vec![RestoreStatusAction {
                    name: "verify".into(),
                    object_key: "Pod/fdb-r2-falkordb-0".into(),
                    status: RestoreActionStatus::Processing,
                    message: Some("waiting for the database".into()),
                    start_time: Some(at(1_070)),
                    ..Default::default()
                }],
            }),
            verification,
            ..Default::default()
        });
        r
    }

    fn fingerprint(keys: &[(&str, i64)], graphs: &[(&str, i64, i64)]) -> DatasetFingerprint {
        DatasetFingerprint {
            keys: keys
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect::<BTreeMap<_, _>>(),
            graphs: graphs
                .iter()
                .map(|(n, nodes, edges)| GraphFingerprint {
                    db: 0,
                    name: (*n).into(),
                    nodes: *nodes,
                    edges: *edges,
                    digest: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn report_shows_cluster_stages_and_pending_verification() {
        let text = render(&cluster(), &[restore(None)]);
        println!("{text}");
        assert!(text.contains("Cluster demo/fdb-r2\n"), "{text}");
        assert!(text.contains("  Phase:    Creating\n"), "{text}");
        assert!(
            text.contains(
                "  Restore:  Unknown (RestoreRunning) since 2026-12-02T10:00:00Z: verifying\n"
            ),
            "{text}"
        );
        assert!(text.contains("  Source:   Backup demo/bk\n"), "{text}");
        assert!(text.contains("Restore fdb-r2-falkordb-restore\n"), "{text}");
        assert!(text.contains("  Duration:   1m12s\n"), "{text}");
        assert!(text.contains("  STAGE        ACTION          OBJECT                         STATUS      START                 END                   MESSAGE\n"), "{text}");
        assert!(
            text.contains("  prepareData  restore-data-0  Job/fdb-r2-falkordb-prepare-0  Completed   1970-01-01T00:16:40Z  1970-01-01T00:17:40Z\n"),
            "{text}"
        );
        assert!(text.contains("  postReady    verify          Pod/fdb-r2-falkordb-0          Processing  1970-01-01T00:17:50Z  -                     waiting for the database\n"), "{text}");
        assert!(text.contains("  Verification: not run yet\n"), "{text}");
    }

    #[test]
    fn verification_compares_expected_and_observed() {
        let v = RestoreVerification {
            matched: false,
            expected: fingerprint(&[("0", 100)], &[("social", 10, 20)]),
            observed: Some(fingerprint(&[("0", 100), ("2", 1)], &[("social", 10, 19)])),
            pod: Some("fdb-r2-falkordb-0".into()),
            time: Some(at(2_000)),
        };
        let text = render(&cluster(), &[restore(Some(v))]);
        println!("{text}");
        assert!(
            text.contains(
                "  Verification: MISMATCH on pod fdb-r2-falkordb-0 at 1970-01-01T00:33:20Z\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  keys in db 0               100       100       ok\n"),
            "{text}"
        );
        assert!(
            text.contains("  keys in db 2               0         1         DIFFERS\n"),
            "{text}"
        );
        assert!(
            text.contains("  graph social (db 0) nodes  10        10        ok\n"),
            "{text}"
        );
        assert!(
            text.contains("  graph social (db 0) edges  20        19        DIFFERS\n"),
            "{text}"
        );
    }

    #[test]
    fn cluster_without_restores_says_so() {
        let text = render(&cluster(), &[]);
        assert!(
            text.contains(
                "No Restores labelled app.kubernetes.io/instance=fdb-r2 in namespace demo."
            ),
            "{text}"
        );
    }

    #[test]
    fn table_pads_all_but_the_last_column() {
        let t = table(
            "",
            &["A", "BB", "C"],
            &[vec!["xxx".into(), "y".into(), "".into()]],
        );
        assert_eq!(t, "A    BB  C\nxxx  y\n");
    }
}
