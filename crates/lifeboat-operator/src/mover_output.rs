//! The JSON lines `lifeboat-mover` prints on stdout (see docs/mover.md), as the controllers read
//! them from Job logs, and their conversion to the API's fingerprint. Pure.

use std::collections::BTreeMap;

use lifeboat_api::dataprotection::v1alpha1::{
    DatasetFingerprint, GraphFingerprint, RestoreVerification,
};
use serde::Deserialize;

/// The mover's fingerprint: per database, keys and graphs.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Fingerprint {
    #[serde(default)]
    pub databases: BTreeMap<u32, DatabaseFingerprint>,
}

/// One database of a fingerprint.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseFingerprint {
    pub keys: u64,
    #[serde(default)]
    pub graphs: BTreeMap<String, GraphCounts>,
    /// Content digest of the keys without a TTL.
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub volatile: Option<VolatileKeys>,
}

/// The keys with a TTL of one database.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct VolatileKeys {
    pub keys: u64,
}

/// One graph's size.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct GraphCounts {
    pub nodes: u64,
    pub edges: u64,
    #[serde(default)]
    pub digest: Option<String>,
}

impl From<&Fingerprint> for DatasetFingerprint {
    fn from(f: &Fingerprint) -> Self {
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        DatasetFingerprint {
            keys: f
                .databases
                .iter()
                .filter(|(_, d)| d.keys > 0)
                .map(|(db, d)| (db.to_string(), as_i64(d.keys)))
                .collect(),
            graphs: f
                .databases
                .iter()
                .flat_map(|(db, d)| {
                    d.graphs.iter().map(move |(name, g)| GraphFingerprint {
                        db: i64::from(*db),
                        name: name.clone(),
                        nodes: as_i64(g.nodes),
                        edges: as_i64(g.edges),
                        digest: g.digest.clone(),
                    })
                })
                .collect(),
            digests: f
                .databases
                .iter()
                .filter_map(|(db, d)| d.digest.clone().map(|g| (db.to_string(), g)))
                .collect(),
            volatile_keys: f
                .databases
                .iter()
                .filter_map(|(db, d)| {
                    d.volatile
                        .as_ref()
                        .map(|v| (db.to_string(), as_i64(v.keys)))
                })
                .collect(),
        }
    }
}

/// What `lifeboat-mover backup` prints when it completed.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupLine {
    /// The backup's name in the repo.
    pub backup_name: String,
    /// Bytes of data, uncompressed: what a restore volume must hold.
    pub total_size: u64,
    /// Bytes stored in the repo.
    pub stored_size: u64,
    /// Waiting for the server's snapshot (BGSAVE), in seconds; absent from older movers.
    #[serde(default)]
    pub snapshot_seconds: Option<f64>,
    /// Compressing and storing the files, in seconds.
    #[serde(default)]
    pub transfer_seconds: Option<f64>,
    /// What the dataset holds.
    pub fingerprint: Fingerprint,
    /// Objects the backup stored.
    #[serde(default)]
    pub object_count: usize,
    /// Objects found in the repo at their stored size after the manifest was published and read
    /// back unchanged; absent (0) from a mover that does not check.
    #[serde(default)]
    pub checked_objects: usize,
}

/// What `lifeboat-mover verify` prints.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VerifyLine {
    /// The server verified, `HOST:PORT` (a pod's DNS name); absent from older movers.
    #[serde(default)]
    pub server: Option<String>,
    #[serde(rename = "match")]
    pub matches: bool,
    pub expected: Fingerprint,
    pub live: Fingerprint,
    #[serde(default)]
    pub differences: Vec<String>,
}

impl VerifyLine {
    /// The verification as the Restore's status shows it, naming the pod the line is about.
    pub fn to_status(&self) -> RestoreVerification {
        RestoreVerification {
            matched: self.matches,
            expected: (&self.expected).into(),
            observed: Some((&self.live).into()),
            pod: self.pod(),
            time: None,
        }
    }

    /// The pod verified: the first label of the server's DNS name.
    pub fn pod(&self) -> Option<String> {
        self.server
            .as_deref()
            .and_then(|h| h.split(['.', ':']).next())
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
    }
}

/// One of the progress lines the mover prints every two seconds (docs/mover.md).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub stage: String,
    pub bytes_done: u64,
    #[serde(default)]
    pub bytes_total: u64,
    #[serde(default)]
    pub bytes_per_second: u64,
}

#[derive(Deserialize)]
struct ProgressLine {
    progress: Progress,
}

/// The newest progress line in `logs`.
pub fn last_progress(logs: &str) -> Option<Progress> {
    last::<ProgressLine>(logs).map(|l| l.progress)
}

/// The last line of `logs` that parses as `T`.
pub fn last<T: serde::de::DeserializeOwned>(logs: &str) -> Option<T> {
    logs.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_newest_progress_line_and_no_result_line_as_progress() {
        let logs = "{\"progress\":{\"stage\":\"download\",\"bytesDone\":1,\"bytesTotal\":10,\"elapsedSeconds\":2.0,\"bytesPerSecond\":1}}\n\
            2026-12-05T05:00:00Z  INFO downloaded and checked\n\
            {\"progress\":{\"stage\":\"download\",\"bytesDone\":6,\"bytesTotal\":10,\"elapsedSeconds\":4.0,\"bytesPerSecond\":2}}\n";
        let p = last_progress(logs).expect("a progress line");
        assert_eq!(
            (p.bytes_done, p.bytes_total, p.bytes_per_second),
            (6, 10, 2)
        );
        assert_eq!(
            last_progress("{\"backupName\":\"b\",\"matches\":true}\n"),
            None
        );
    }

    #[test]
    fn reads_the_documented_backup_line() {
        let logs = "{\"level\":\"INFO\",\"fields\":{\"message\":\"backup complete\"}}\n\
            {\"backupName\":\"nightly-1\",\"repo\":\"s3://b/p\",\"totalSize\":1192377825,\"storedSize\":330412031,\"objectCount\":1,\
            \"fingerprint\":{\"databases\":{\"0\":{\"keys\":13,\"graphs\":{\"social\":{\"nodes\":3,\"edges\":2,\"digest\":\"abababababababababababababababababababababababababababababababab\"}},\
            \"digest\":\"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd\",\"volatile\":{\"keys\":4,\"digest\":\"ef\",\"firstExpiryMs\":1}},\"2\":{\"keys\":0}}},\
            \"durationSeconds\":6.94,\"snapshotSeconds\":1.78,\"transferSeconds\":5.16,\"attempts\":1}\n";
        let b: BackupLine = last(logs).expect("parses");
        assert_eq!(b.backup_name, "nightly-1");
        assert_eq!(
            (b.snapshot_seconds, b.transfer_seconds),
            (Some(1.78), Some(5.16))
        );
        assert_eq!(b.stored_size, 330412031);
        let f: DatasetFingerprint = (&b.fingerprint).into();
        assert_eq!(f.keys.get("0"), Some(&13));
        assert!(!f.keys.contains_key("2"), "empty databases are omitted");
        assert_eq!(
            f.graphs,
            vec![GraphFingerprint {
                db: 0,
                name: "social".into(),
                nodes: 3,
                edges: 2,
                digest: Some("ab".repeat(32)),
            }]
        );
        assert_eq!(
            f.digests.get("0").map(String::as_str),
            Some("cd".repeat(32).as_str())
        );
        assert_eq!(f.volatile_keys.get("0"), Some(&4));
    }

    #[test]
    fn a_verify_line_of_an_older_mover_names_no_pod() {
        let line = r#"{"backupName":"b","match":true,"message":"m","expected":{"databases":{}},"live":{"databases":{}}}"#;
        let v: VerifyLine = last(line).expect("parses");
        assert_eq!(v.to_status().pod, None);
    }

    #[test]
    fn reads_a_verify_mismatch() {
        let line = r#"{"backupName":"b","server":"fdb-falkordb-1.fdb-falkordb-headless.ns.svc.cluster.local:6379","match":false,"message":"m","expected":{"databases":{"0":{"keys":10}}},"live":{"databases":{}},"differences":["db0: 10 keys in the backup, 0 live"]}"#;
        let v: VerifyLine = last(line).expect("parses");
        let s = v.to_status();
        assert_eq!(s.pod.as_deref(), Some("fdb-falkordb-1"));
        assert!(!s.matched);
        assert_eq!(s.expected.keys.get("0"), Some(&10));
        assert_eq!(s.observed.map(|o| o.keys.len()), Some(0));
    }
}
