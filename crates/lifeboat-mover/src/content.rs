//! Content digests of a server's dataset: what `fingerprint.rs` defines, read from a live or
//! scratch server. Kept apart from `server.rs`, which only talks to the server.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{Error, Result};
use crate::fingerprint::{GraphCounts, SetDigest, VolatileKeys, telemetry_key};
use crate::server::Server;

/// Keys asked for per SCAN round, and the most digested per transaction.
const SCAN_COUNT: usize = 1000;
/// Keys in the first digest transaction; later ones are sized by `next_txn_keys`.
const FIRST_TXN_KEYS: usize = 16;
/// How long one digest transaction may hold the server. While it runs, FalkorDB's query threads
/// cannot take the module lock, so the graph digest on the other connection stalls behind it:
/// measured on 1.1 GiB of 64 KiB values beside a 400,000-node graph, transactions of 1,000 keys
/// (about 60 ms each) made the two take 1.50 s together, against 1.06 s with 16-key ones.
const TXN_BUDGET: Duration = Duration::from_millis(4);
/// Graph entities read per query, by id range; bounds the reply's memory. The reply is held
/// whole, as text and as a tree of values: pages of 50,000 took the backup's peak RSS from about
/// 45 to 70 MiB (a 400,000-node graph of small properties), and pages of 10,000 kept it at 40-47
/// MiB with the graph read as fast.
const ID_PAGE: u64 = 10_000;

pub(crate) struct KeyDigests {
    pub persistent: SetDigest,
    pub volatile: SetDigest,
    first_expiry_ms: Option<i64>,
}

impl KeyDigests {
    pub fn volatile_keys(&self) -> Option<VolatileKeys> {
        let first_expiry_ms = self.first_expiry_ms?;
        (self.volatile.count() > 0).then(|| VolatileKeys {
            keys: self.volatile.count(),
            digest: self.volatile.hex(),
            first_expiry_ms,
        })
    }
}

fn debug_refused(e: &Error) -> bool {
    match e {
        Error::Server { cause, .. } => {
            let c = cause.to_ascii_lowercase();
            c.contains("debug command not allowed")
                || c.contains("unknown command")
                || c.contains("noperm")
        }
        _ => false,
    }
}

impl Server {
    /// Digests the keys of the selected database, or `None` when the server refuses `DEBUG`.
    /// SCAN may return a key twice, so keys are de-duplicated before they are digested; that
    /// costs memory in proportion to the key names.
    pub(crate) fn key_digests(
        &mut self,
        db: u32,
        graphs: &BTreeMap<String, GraphCounts>,
    ) -> Result<Option<KeyDigests>> {
        match self.query::<Value>(
            redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg("lifeboat:digest-probe"),
        ) {
            Ok(_) => {}
            Err(e) if debug_refused(&e) => return Ok(None),
            Err(e) => return Err(e),
        }
        let telemetry: HashSet<Vec<u8>> = graphs
            .keys()
            .map(|g| telemetry_key(g).into_bytes())
            .collect();
        let db_bytes = db.to_le_bytes();
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        let mut out = KeyDigests {
            persistent: SetDigest::default(),
            volatile: SetDigest::default(),
            first_expiry_ms: None,
        };
        let mut cursor: u64 = 0;
        let mut txn_keys = FIRST_TXN_KEYS;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) =
                self.query(redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(SCAN_COUNT))?;
            let fresh: Vec<Vec<u8>> = batch
                .into_iter()
                .filter(|k| seen.insert(k.clone()))
                .collect();
            let planned = self.plan_batch(fresh, &telemetry)?;
            let mut rest = planned.as_slice();
            while !rest.is_empty() {
                let (now, later) = rest.split_at(txn_keys.min(rest.len()));
                let started = Instant::now();
                self.digest_batch(now, &db_bytes, &mut out)?;
                txn_keys = next_txn_keys(txn_keys, started.elapsed());
                rest = later;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(Some(out))
    }

    /// The keys of a batch that still exist, with their types; telemetry streams left out.
    fn plan_batch(
        &mut self,
        keys: Vec<Vec<u8>>,
        telemetry: &HashSet<Vec<u8>>,
    ) -> Result<Vec<(Vec<u8>, String)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::pipe();
        for k in &keys {
            p.cmd("TYPE").arg(k);
        }
        let types: Vec<String> = self.query_pipe(&p)?;
        Ok(keys
            .into_iter()
            .zip(types)
            .filter(|(k, t)| t != "none" && !(t == "stream" && telemetry.contains(k)))
            .collect())
    }

    /// Digests a batch in one transaction, so that a key's type, expiry and value are read at
    /// one instant. The server digests each value (`DEBUG DIGEST-VALUE`, type and value):
    /// measured faster than reading the values and hashing them here.
    fn digest_batch(
        &mut self,
        batch: &[(Vec<u8>, String)],
        db_bytes: &[u8],
        out: &mut KeyDigests,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut p = redis::pipe();
        p.atomic();
        for (k, _) in batch {
            p.cmd("TYPE").arg(k);
            p.cmd("PEXPIRETIME").arg(k);
        }
        p.cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(batch.iter().map(|(k, _)| k).collect::<Vec<_>>());
        let replies: Vec<Value> = self.query_pipe(&p)?;
        let digests = match replies.last() {
            Some(Value::Array(d))
                if d.len() == batch.len() && replies.len() == 2 * batch.len() + 1 =>
            {
                d
            }
            other => {
                return Err(
                    self.server_err(format!("unexpected reply to DEBUG DIGEST-VALUE: {other:?}"))
                );
            }
        };
        for (i, (k, kind)) in batch.iter().enumerate() {
            let t = value_text(&replies[2 * i]);
            // Gone since SCAN named it: expired or deleted.
            if t == "none" {
                continue;
            }
            if t != *kind {
                return Err(self.server_err(format!(
                    "key {:?} changed type from {kind} to {t} while the dataset was digested",
                    String::from_utf8_lossy(k)
                )));
            }
            let expiry = match &replies[2 * i + 1] {
                Value::Int(n) => *n,
                other => {
                    return Err(
                        self.server_err(format!("unexpected reply to PEXPIRETIME: {other:?}"))
                    );
                }
            };
            if expiry == -2 {
                continue;
            }
            let d = value_text(&digests[i]);
            if expiry >= 0 {
                out.volatile.add(&[db_bytes, k, d.as_bytes()]);
                out.first_expiry_ms = Some(out.first_expiry_ms.map_or(expiry, |f| f.min(expiry)));
            } else {
                out.persistent.add(&[db_bytes, k, d.as_bytes()]);
            }
        }
        Ok(())
    }

    /// Digests a graph's contents: nodes with their labels and properties, and edges with their
    /// type, endpoints and properties, read in pages of node ids (FalkorDB seeks ids directly,
    /// so each page costs its own size; checked with GRAPH.EXPLAIN: `NodeByIdSeek`).
    pub(crate) fn graph_digest(&mut self, graph: &str) -> Result<String> {
        let mut set = SetDigest::default();
        let max_rows = self.graph_rows(graph, "MATCH (n) RETURN max(id(n))")?;
        let max_id = max_rows
            .first()
            .and_then(|r| match r {
                Value::Array(cols) => cols.first(),
                _ => None,
            })
            .and_then(crate::server::value_to_u64);
        let Some(max_id) = max_id else {
            return Ok(set.hex());
        };
        let mut lo = 0u64;
        while lo <= max_id {
            let hi = lo.saturating_add(ID_PAGE);
            let nodes = self.graph_rows(
                graph,
                &format!(
                    "CYPHER lo={lo} hi={hi} MATCH (n) WHERE id(n) >= $lo AND id(n) < $hi \
                     RETURN id(n), labels(n), properties(n)"
                ),
            )?;
            for row in &nodes {
                let mut buf = Vec::new();
                render(row, &mut buf);
                set.add(&[b"node", &buf]);
            }
            let edges = self.graph_rows(
                graph,
                &format!(
                    "CYPHER lo={lo} hi={hi} MATCH (a)-[r]->(b) WHERE id(a) >= $lo AND id(a) < $hi \
                     RETURN id(r), type(r), id(a), id(b), properties(r)"
                ),
            )?;
            for row in &edges {
                let mut buf = Vec::new();
                render(row, &mut buf);
                set.add(&[b"edge", &buf]);
            }
            lo = hi;
        }
        Ok(set.hex())
    }

    /// The rows of a read query. Projected (not `--compact`) rows: measured, the compact
    /// replies cost the client more to parse than they save the server.
    fn graph_rows(&mut self, graph: &str, q: &str) -> Result<Vec<Value>> {
        let v: Value = self.query(redis::cmd("GRAPH.RO_QUERY").arg(graph).arg(q))?;
        // Reply shape: [header, rows, statistics].
        match v {
            Value::Array(mut parts) if parts.len() >= 2 => match parts.swap_remove(1) {
                Value::Array(rows) => Ok(rows),
                other => Err(self.server_err(format!(
                    "graph \"{graph}\": unexpected rows in reply to \"{q}\": {other:?}"
                ))),
            },
            other => Err(self.server_err(format!(
                "graph \"{graph}\": unexpected reply to \"{q}\": {other:?}"
            ))),
        }
    }
}

/// Sizes the next digest transaction from how long the last one took: values range from bytes
/// to megabytes, so a fixed key count either holds the server too long or pays a round trip per
/// handful of tiny keys.
fn next_txn_keys(keys: usize, took: Duration) -> usize {
    if took < TXN_BUDGET / 4 {
        (keys * 2).min(SCAN_COUNT)
    } else if took > TXN_BUDGET {
        (keys / 2).max(1)
    } else {
        keys
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
}

/// A canonical byte rendering of a reply value: tagged and length-prefixed, so that distinct
/// values never render alike.
fn render(v: &Value, out: &mut Vec<u8>) {
    fn bytes(tag: u8, b: &[u8], out: &mut Vec<u8>) {
        out.push(tag);
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    }
    match v {
        Value::Nil => out.push(b'_'),
        Value::Int(i) => bytes(b':', &i.to_le_bytes(), out),
        Value::BulkString(b) => bytes(b'$', b, out),
        Value::SimpleString(s) => bytes(b'+', s.as_bytes(), out),
        Value::VerbatimString { text, .. } => bytes(b'=', text.as_bytes(), out),
        Value::Double(d) => bytes(b',', &d.to_bits().to_le_bytes(), out),
        Value::Boolean(b) => bytes(b'#', &[u8::from(*b)], out),
        Value::Array(items) | Value::Set(items) => {
            bytes(b'*', &(items.len() as u64).to_le_bytes(), out);
            for i in items {
                render(i, out);
            }
        }
        Value::Map(kv) => {
            bytes(b'%', &(kv.len() as u64).to_le_bytes(), out);
            for (k, v) in kv {
                render(k, out);
                render(v, out);
            }
        }
        other => bytes(b'?', format!("{other:?}").as_bytes(), out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_transactions_grow_on_small_values_and_shrink_on_large_ones() {
        let mut n = FIRST_TXN_KEYS;
        for _ in 0..20 {
            n = next_txn_keys(n, Duration::from_micros(100));
        }
        assert_eq!(n, SCAN_COUNT, "tiny values grow to a full SCAN round");
        for _ in 0..20 {
            n = next_txn_keys(n, Duration::from_millis(60));
        }
        assert_eq!(
            n, 1,
            "huge values shrink to one key per transaction, never none"
        );
        assert_eq!(
            next_txn_keys(40, Duration::from_millis(2)),
            40,
            "in budget: kept"
        );
    }

    #[test]
    fn renderings_of_distinct_values_differ() {
        let a = Value::Array(vec![
            Value::BulkString(b"ab".to_vec()),
            Value::BulkString(b"c".to_vec()),
        ]);
        let b = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"bc".to_vec()),
        ]);
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        render(&a, &mut ra);
        render(&b, &mut rb);
        assert_ne!(ra, rb);
        let mut rc = Vec::new();
        render(&Value::Int(1), &mut rc);
        let mut rd = Vec::new();
        render(&Value::BulkString(b"1".to_vec()), &mut rd);
        assert_ne!(rc, rd);
    }
}
