//! The dataset fingerprint: what a backup claims to contain, in a form a restored server can be
//! checked against without trusting the restore that produced it.
//!
//! It counts, per logical database, the keys a faithful restore must reproduce, and for FalkorDB
//! the node and edge count of every graph. FalkorDB's `telemetry{<graph>}` streams are left out of
//! the key count: FalkorDB creates them as a side effect of running queries (including the
//! fingerprint's own count queries), so whether one exists says nothing about the data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fingerprint {
    /// Keyed by database index. Databases without data are absent, as in `INFO keyspace`.
    pub databases: BTreeMap<u32, DatabaseFingerprint>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseFingerprint {
    /// Keys in the database, graphs included, FalkorDB telemetry streams excluded.
    pub keys: u64,
    /// Graphs by name; empty when the server has no graph module.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub graphs: BTreeMap<String, GraphCounts>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphCounts {
    pub nodes: u64,
    pub edges: u64,
}

/// FalkorDB's per-graph query telemetry stream; see the module documentation for why it is not
/// part of the fingerprint.
pub fn telemetry_key(graph: &str) -> String {
    format!("telemetry{{{graph}}}")
}

impl Fingerprint {
    pub fn is_empty(&self) -> bool {
        self.databases.is_empty()
    }

    pub fn total_keys(&self) -> u64 {
        self.databases.values().map(|d| d.keys).sum()
    }

    pub fn graph_count(&self) -> usize {
        self.databases.values().map(|d| d.graphs.len()).sum()
    }

    /// Every difference between `self` (what the backup recorded) and `live`, in a stable order,
    /// phrased so that a single line names the database, graph and both values.
    pub fn differences(&self, live: &Fingerprint) -> Vec<String> {
        let mut out = Vec::new();
        let dbs: std::collections::BTreeSet<u32> = self
            .databases
            .keys()
            .chain(live.databases.keys())
            .copied()
            .collect();
        let empty = DatabaseFingerprint::default();
        for db in dbs {
            let want = self.databases.get(&db).unwrap_or(&empty);
            let got = live.databases.get(&db).unwrap_or(&empty);
            if want.keys != got.keys {
                out.push(format!(
                    "db {db}: {} keys in backup, {} live",
                    want.keys, got.keys
                ));
            }
            let graphs: std::collections::BTreeSet<&String> =
                want.graphs.keys().chain(got.graphs.keys()).collect();
            for g in graphs {
                match (want.graphs.get(g), got.graphs.get(g)) {
                    (Some(w), Some(l)) => {
                        if w.nodes != l.nodes {
                            out.push(format!(
                                "db {db} graph \"{g}\": {} nodes in backup, {} live",
                                w.nodes, l.nodes
                            ));
                        }
                        if w.edges != l.edges {
                            out.push(format!(
                                "db {db} graph \"{g}\": {} edges in backup, {} live",
                                w.edges, l.edges
                            ));
                        }
                    }
                    (Some(_), None) => {
                        out.push(format!("db {db} graph \"{g}\": in backup, missing live"))
                    }
                    (None, Some(_)) => {
                        out.push(format!("db {db} graph \"{g}\": live, not in backup"))
                    }
                    (None, None) => {}
                }
            }
        }
        out
    }

    /// A compact one-line rendering for logs and error messages.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "empty".to_string();
        }
        let parts: Vec<String> = self
            .databases
            .iter()
            .map(|(db, d)| {
                let mut s = format!("db{db}: {} keys", d.keys);
                for (g, c) in &d.graphs {
                    s.push_str(&format!(", graph \"{g}\" {}n/{}e", c.nodes, c.edges));
                }
                s
            })
            .collect();
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Graphs<'a> = &'a [(&'a str, u64, u64)];

    fn fp(entries: &[(u32, u64, Graphs)]) -> Fingerprint {
        let mut f = Fingerprint::default();
        for (db, keys, graphs) in entries {
            let mut d = DatabaseFingerprint {
                keys: *keys,
                graphs: BTreeMap::new(),
            };
            for (g, n, e) in graphs.iter() {
                d.graphs.insert(
                    g.to_string(),
                    GraphCounts {
                        nodes: *n,
                        edges: *e,
                    },
                );
            }
            f.databases.insert(*db, d);
        }
        f
    }

    #[test]
    fn identical_fingerprints_have_no_differences() {
        let a = fp(&[(0, 3, &[("g", 2, 1)]), (3, 10, &[])]);
        assert!(a.differences(&a.clone()).is_empty());
    }

    #[test]
    fn key_and_graph_differences_are_named() {
        let want = fp(&[(0, 3, &[("g", 2, 1), ("h", 5, 0)]), (1, 4, &[])]);
        let live = fp(&[(0, 2, &[("g", 2, 7)]), (2, 1, &[])]);
        let d = want.differences(&live);
        assert_eq!(
            d,
            vec![
                "db 0: 3 keys in backup, 2 live",
                "db 0 graph \"g\": 1 edges in backup, 7 live",
                "db 0 graph \"h\": in backup, missing live",
                "db 1: 4 keys in backup, 0 live",
                "db 2: 0 keys in backup, 1 live",
            ]
        );
    }

    #[test]
    fn empty_matches_only_empty() {
        let empty = Fingerprint::default();
        assert!(empty.differences(&Fingerprint::default()).is_empty());
        assert_eq!(empty.differences(&fp(&[(0, 1, &[])])).len(), 1);
        assert_eq!(empty.summary(), "empty");
    }

    #[test]
    fn json_uses_database_numbers_as_keys() {
        let a = fp(&[(0, 3, &[("g", 2, 1)]), (5, 1, &[])]);
        let s = serde_json::to_string(&a).unwrap();
        assert_eq!(
            s,
            r#"{"databases":{"0":{"keys":3,"graphs":{"g":{"nodes":2,"edges":1}}},"5":{"keys":1}}}"#
        );
        let back: Fingerprint = serde_json::from_str(&s).unwrap();
        assert_eq!(back, a);
    }

    #[test]
    fn telemetry_key_matches_falkordb_naming() {
        assert_eq!(telemetry_key("social"), "telemetry{social}");
    }
}
