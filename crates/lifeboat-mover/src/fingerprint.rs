//! The dataset fingerprint: what a backup claims to contain, in a form a restored server can be
//! checked against without trusting the restore that produced it.
//!
//! It counts, per logical database, the keys a faithful restore must reproduce, and for FalkorDB
//! the node and edge count of every graph. FalkorDB's `telemetry{<graph>}` streams are left out of
//! the key count: FalkorDB creates them as a side effect of running queries (including the
//! fingerprint's own count queries), so whether one exists says nothing about the data.
//!
//! Counts alone let two datasets with different values match, so each database also carries a
//! content digest (format 1 manifests written before it have none, and are compared by counts):
//!
//! - Every key's name, type and value go into an order-independent digest: per key, the SHA-256
//!   of the database index, the name and the server's `DEBUG DIGEST-VALUE` (which covers type and
//!   value), XOR-ed together. Keys are unique per database, so nothing cancels.
//! - Keys with a TTL are digested apart. One that expires between backup and verification must
//!   not fail a good restore, so they are compared exactly only while none of them can have
//!   expired (before `firstExpiryMs`), and afterwards only as "no more than the backup had".
//!   Keys without a TTL are always compared exactly, count and digest, so expiry opens no hole
//!   for them.
//! - FalkorDB does not give graphs a `DEBUG DIGEST` (every graph digests alike whatever it holds),
//!   so each graph gets its own digest from its contents: every node's id, labels and properties,
//!   and every edge's id, type, endpoints and properties, read in pages of ids.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fingerprint {
    /// Keyed by database index. Databases without data are absent, as in `INFO keyspace`.
    pub databases: BTreeMap<u32, DatabaseFingerprint>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseFingerprint {
    /// Keys in the database, graphs and keys with a TTL included, FalkorDB telemetry streams
    /// excluded.
    pub keys: u64,
    /// Graphs by name; empty when the server has no graph module.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub graphs: BTreeMap<String, GraphCounts>,
    /// Content digest (64 hex digits) of the keys without a TTL. Absent in manifests written
    /// before digests existed, and from servers that do not allow `DEBUG`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The keys with a TTL, digested apart; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volatile: Option<VolatileKeys>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolatileKeys {
    /// How many keys carry a TTL (they are part of `keys` too).
    pub keys: u64,
    /// Their content digest.
    pub digest: String,
    /// The earliest absolute expiry among them, in Unix milliseconds: before it, none can have
    /// expired and they are compared exactly.
    pub first_expiry_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphCounts {
    pub nodes: u64,
    pub edges: u64,
    /// Digest of the graph's nodes and edges with their labels, types and properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// FalkorDB's per-graph query telemetry stream; see the module documentation for why it is not
/// part of the fingerprint.
pub fn telemetry_key(graph: &str) -> String {
    format!("telemetry{{{graph}}}")
}

/// Expiry times are compared with a clock that may differ from the one that recorded them; a
/// TTL key is only trusted not to have expired this long before its recorded expiry.
pub const CLOCK_SLACK_MS: i64 = 5_000;

/// An order-independent digest of a set of items: the XOR of each item's SHA-256. Items must be
/// unique (keys in a database, entities by id), or equal pairs cancel out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetDigest {
    acc: [u8; 32],
    count: u64,
}

impl SetDigest {
    /// Adds one item, given as the parts that make it up; parts are length-prefixed so that
    /// `("ab", "c")` and `("a", "bc")` differ.
    pub fn add(&mut self, parts: &[&[u8]]) {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        let d = h.finalize();
        for (a, b) in self.acc.iter_mut().zip(d.iter()) {
            *a ^= b;
        }
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn hex(&self) -> String {
        hex::encode(self.acc)
    }
}

/// The first characters of a digest, enough to tell two apart in a message.
fn short(d: &str) -> &str {
    d.get(..16).unwrap_or(d)
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
    /// phrased so that a single line names the database, graph and both values. `now_ms` (Unix
    /// milliseconds) decides whether keys with a TTL can have expired since the backup.
    pub fn differences(&self, live: &Fingerprint, now_ms: i64) -> Vec<String> {
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
            database_differences(db, want, got, now_ms, &mut out);
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
                        match (&w.digest, &l.digest) {
                            (Some(wd), Some(ld)) if wd != ld => out.push(format!(
                                "db {db} graph \"{g}\": content digest {} in backup, {} live",
                                short(wd),
                                short(ld)
                            )),
                            (Some(_), None) => out.push(format!(
                                "db {db} graph \"{g}\": the backup records a content digest, the live server gave none"
                            )),
                            _ => {}
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

/// Keys of one database. A backup without a digest (written before digests existed) is compared
/// by its key count, as it was then.
fn database_differences(
    db: u32,
    want: &DatabaseFingerprint,
    got: &DatabaseFingerprint,
    now_ms: i64,
    out: &mut Vec<String>,
) {
    let Some(want_digest) = &want.digest else {
        if want.keys != got.keys {
            out.push(format!(
                "db {db}: {} keys in backup, {} live",
                want.keys, got.keys
            ));
        }
        return;
    };
    let want_vol = want.volatile.as_ref();
    let got_vol = got.volatile.as_ref();
    let want_persistent = want.keys - want_vol.map_or(0, |v| v.keys).min(want.keys);
    let got_persistent = got.keys - got_vol.map_or(0, |v| v.keys).min(got.keys);
    if want_persistent != got_persistent {
        out.push(if want_vol.is_none() && got_vol.is_none() {
            format!("db {db}: {want_persistent} keys in backup, {got_persistent} live")
        } else {
            format!(
                "db {db}: {want_persistent} keys without a TTL in backup, {got_persistent} live"
            )
        });
    }
    match &got.digest {
        Some(d) if d != want_digest => out.push(format!(
            "db {db}: content digest of the keys without a TTL is {} in backup, {} live",
            short(want_digest),
            short(d)
        )),
        Some(_) => {}
        None if want_persistent == 0 && got_persistent == 0 => {}
        None => out.push(format!(
            "db {db}: the backup records a content digest, the live server gave none (is DEBUG allowed locally?)"
        )),
    }
    let want_vkeys = want_vol.map_or(0, |v| v.keys);
    let got_vkeys = got_vol.map_or(0, |v| v.keys);
    let none_expired = want_vol.is_none_or(|v| now_ms < v.first_expiry_ms - CLOCK_SLACK_MS);
    if none_expired {
        if want_vkeys != got_vkeys {
            out.push(format!(
                "db {db}: {want_vkeys} keys with a TTL in backup, {got_vkeys} live, and none can have expired yet"
            ));
        } else if let (Some(w), Some(g)) = (want_vol, got_vol)
            && w.digest != g.digest
        {
            out.push(format!(
                "db {db}: content digest of the keys with a TTL is {} in backup, {} live",
                short(&w.digest),
                short(&g.digest)
            ));
        }
    } else if got_vkeys > want_vkeys {
        out.push(format!(
            "db {db}: {got_vkeys} keys with a TTL live, more than the {want_vkeys} in backup"
        ));
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
                ..Default::default()
            };
            for (g, n, e) in graphs.iter() {
                d.graphs.insert(
                    g.to_string(),
                    GraphCounts {
                        nodes: *n,
                        edges: *e,
                        digest: None,
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
        assert!(a.differences(&a.clone(), 0).is_empty());
    }

    #[test]
    fn key_and_graph_differences_are_named() {
        let want = fp(&[(0, 3, &[("g", 2, 1), ("h", 5, 0)]), (1, 4, &[])]);
        let live = fp(&[(0, 2, &[("g", 2, 7)]), (2, 1, &[])]);
        let d = want.differences(&live, 0);
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
        assert!(empty.differences(&Fingerprint::default(), 0).is_empty());
        assert_eq!(empty.differences(&fp(&[(0, 1, &[])]), 0).len(), 1);
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

    fn digested(keys: u64, digest: &str, volatile: Option<(u64, &str, i64)>) -> Fingerprint {
        let mut f = Fingerprint::default();
        f.databases.insert(
            0,
            DatabaseFingerprint {
                keys,
                digest: Some(digest.repeat(64 / digest.len())),
                volatile: volatile.map(|(keys, d, first_expiry_ms)| VolatileKeys {
                    keys,
                    digest: d.repeat(64 / d.len()),
                    first_expiry_ms,
                }),
                ..Default::default()
            },
        );
        f
    }

    #[test]
    fn same_counts_with_different_values_differ_by_digest_naming_both() {
        let want = digested(3, "a", None);
        let live = digested(3, "b", None);
        assert_eq!(
            want.differences(&live, 0),
            vec![
                "db 0: content digest of the keys without a TTL is aaaaaaaaaaaaaaaa in backup, bbbbbbbbbbbbbbbb live"
            ]
        );
    }

    #[test]
    fn ttl_keys_that_expired_after_their_first_expiry_are_no_failure() {
        // 2 persistent keys and 3 with a TTL; after the first expiry one of them is gone.
        let want = digested(5, "a", Some((3, "c", 10_000)));
        let live = digested(4, "a", Some((2, "d", 10_000)));
        let later = 10_000 + CLOCK_SLACK_MS;
        assert!(want.differences(&live, later).is_empty());
        // Every TTL key gone is fine too.
        let none_left = digested(2, "a", None);
        assert!(want.differences(&none_left, later).is_empty());
    }

    #[test]
    fn ttl_keys_are_exact_while_none_can_have_expired() {
        let want = digested(5, "a", Some((3, "c", 1_000_000)));
        let lost_one = digested(4, "a", Some((2, "c", 1_000_000)));
        assert_eq!(
            want.differences(&lost_one, 0),
            vec!["db 0: 3 keys with a TTL in backup, 2 live, and none can have expired yet"]
        );
        let changed = digested(5, "a", Some((3, "e", 1_000_000)));
        assert_eq!(
            want.differences(&changed, 0),
            vec![
                "db 0: content digest of the keys with a TTL is cccccccccccccccc in backup, eeeeeeeeeeeeeeee live"
            ]
        );
    }

    #[test]
    fn expiry_opens_no_hole_for_keys_without_a_ttl() {
        let want = digested(5, "a", Some((3, "c", 10_000)));
        let later = 1_000_000;
        // A persistent key changed while TTL keys expired.
        let changed = digested(4, "b", Some((2, "c", 10_000)));
        assert_eq!(
            want.differences(&changed, later),
            vec![
                "db 0: content digest of the keys without a TTL is aaaaaaaaaaaaaaaa in backup, bbbbbbbbbbbbbbbb live"
            ]
        );
        // A persistent key lost, hidden behind fewer TTL keys: the persistent count says so.
        let lost = digested(3, "a", Some((2, "c", 10_000)));
        assert_eq!(
            want.differences(&lost, later),
            vec!["db 0: 2 keys without a TTL in backup, 1 live"]
        );
        // A persistent key that gained a TTL moves between the sets and is caught.
        let moved = digested(5, "f", Some((4, "c", 10_000)));
        let d = want.differences(&moved, later);
        assert!(d.iter().any(|l| l.contains("1 live")), "{d:?}");
        assert!(d.iter().any(|l| l.contains("more than the 3")), "{d:?}");
    }

    #[test]
    fn a_live_server_without_a_digest_fails_a_digested_backup() {
        let want = digested(2, "a", None);
        let mut live = want.clone();
        if let Some(d) = live.databases.get_mut(&0) {
            d.digest = None;
        }
        let d = want.differences(&live, 0);
        assert_eq!(d.len(), 1);
        assert!(d[0].contains("the live server gave none"), "{d:?}");
    }

    #[test]
    fn graph_contents_are_compared_by_digest() {
        let mut want = fp(&[(0, 1, &[("g", 2, 1)])]);
        let mut live = want.clone();
        for (f, d) in [(&mut want, "1"), (&mut live, "2")] {
            if let Some(g) = f
                .databases
                .get_mut(&0)
                .and_then(|db| db.graphs.get_mut("g"))
            {
                g.digest = Some(d.repeat(64));
            }
        }
        assert_eq!(
            want.differences(&live, 0),
            vec![
                "db 0 graph \"g\": content digest 1111111111111111 in backup, 2222222222222222 live"
            ]
        );
    }

    #[test]
    fn set_digest_is_order_independent_and_length_prefixed() {
        let mut a = SetDigest::default();
        a.add(&[b"k1", b"v1"]);
        a.add(&[b"k2", b"v2"]);
        let mut b = SetDigest::default();
        b.add(&[b"k2", b"v2"]);
        b.add(&[b"k1", b"v1"]);
        assert_eq!(a, b);
        let mut c = SetDigest::default();
        c.add(&[b"k", b"1v1"]);
        c.add(&[b"k2", b"v2"]);
        assert_ne!(a.hex(), c.hex());
        assert_eq!(a.count(), 2);
    }

    #[test]
    fn telemetry_key_matches_falkordb_naming() {
        assert_eq!(telemetry_key("social"), "telemetry{social}");
    }
}
