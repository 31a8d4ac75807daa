//! The backup manifest (`manifest.json`). Its presence is what makes a backup exist: it is written
//! only after every object has been stored, so a reader never sees a half-written backup.
//! The schema is documented in `docs/repo-format.md`; bump [`FORMAT_VERSION`] on any change a
//! reader of the previous version would misinterpret.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;

pub const FORMAT_VERSION: u32 = 1;
pub const MANIFEST_FILE: &str = "manifest.json";
pub const OBJECTS_DIR: &str = "objects";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format_version: u32,
    pub backup_name: String,
    pub started_at: DateTime<Utc>,
    pub completed_at: DateTime<Utc>,
    pub source: Source,
    pub compression: Compression,
    pub checksum_algorithm: String,
    /// Sum of the uncompressed object sizes, in bytes.
    pub total_size: u64,
    /// Sum of the stored (compressed) object sizes, in bytes.
    pub stored_size: u64,
    pub objects: Vec<ObjectEntry>,
    pub fingerprint: Fingerprint,
    pub consistency: Consistency,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// `host:port` the backup was taken from.
    pub server: String,
    pub redis_version: String,
    /// FalkorDB module version as reported by `MODULE LIST`, absent for plain Redis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub falkordb_version: Option<String>,
    pub dbfilename: String,
    pub appenddirname: String,
    pub appendfilename: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Compression {
    pub algorithm: String,
    pub level: i32,
    /// Upper bound of the uncompressed size of each zstd frame of an object (every frame
    /// declares its content size); lets a reader decompress frames in parallel with bounded
    /// memory.
    pub frame_size: u64,
}

/// Largest `frameSize` a reader accepts, bounding its memory use.
pub const MAX_FRAME_SIZE: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Consistency {
    /// Always `bgsave` in format version 1.
    pub method: String,
    /// How many BGSAVE rounds were needed before the fingerprint was stable across one.
    pub attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// The RDB snapshot taken at the consistent point; restore uses it.
    Rdb,
    /// A file of the server's AOF directory at backup time, which earlier movers archived;
    /// never restored (see docs/mover.md for why restore seeds the AOF directory from the RDB).
    Aof,
    /// The ACL file; restored.
    Acl,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectEntry {
    /// Path relative to the server's data directory, e.g. `dump.rdb`.
    pub name: String,
    pub role: Role,
    /// Path of the stored object relative to the backup's directory, e.g. `objects/dump.rdb.zst`.
    pub key: String,
    /// Uncompressed size in bytes.
    pub size: u64,
    /// Lowercase hex sha256 of the uncompressed bytes.
    pub sha256: String,
    /// Stored (compressed) size in bytes.
    pub stored_size: u64,
    /// Lowercase hex sha256 of the stored (compressed) bytes.
    pub stored_sha256: String,
}

/// Backup names become a path segment in the repo and appear in Kubernetes object names, so they
/// follow the DNS-label-like rules of the latter.
pub fn validate_backup_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.' || b == b'_'
        })
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "backup name \"{name}\" is invalid: use 1-253 characters from a-z, 0-9, '-', '.', '_', starting with a letter or digit"
        )))
    }
}

/// Object names are joined onto the restore target, so anything that could escape it is refused.
pub fn is_safe_relative_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && p.split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Manifest {
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut v = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::Internal(format!("cannot serialise manifest: {e}")))?;
        v.push(b'\n');
        Ok(v)
    }

    /// Parses and validates a manifest read from the repo for backup `expected_name`.
    pub fn parse(expected_name: &str, bytes: &[u8]) -> Result<Manifest> {
        let bad = |cause: String| Error::BadManifest {
            backup: expected_name.to_string(),
            cause,
        };
        // The version is checked before the full schema so that a newer format yields a clear
        // "unsupported version" rather than a confusing missing-field error.
        let raw: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let version = raw
            .get("formatVersion")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| bad("formatVersion is missing".to_string()))?;
        if version != u64::from(FORMAT_VERSION) {
            return Err(bad(format!(
                "formatVersion {version} is not supported (this mover reads {FORMAT_VERSION})"
            )));
        }
        let m: Manifest =
            serde_json::from_value(raw).map_err(|e| bad(format!("schema violation: {e}")))?;
        m.validate(expected_name)?;
        Ok(m)
    }

    pub fn validate(&self, expected_name: &str) -> Result<()> {
        let bad = |cause: String| Error::BadManifest {
            backup: expected_name.to_string(),
            cause,
        };
        if self.backup_name != expected_name {
            return Err(bad(format!("it names backup \"{}\"", self.backup_name)));
        }
        if self.compression.algorithm != "zstd" {
            return Err(bad(format!(
                "compression \"{}\" is not supported",
                self.compression.algorithm
            )));
        }
        if self.compression.frame_size == 0 || self.compression.frame_size > MAX_FRAME_SIZE {
            return Err(bad(format!(
                "compression frameSize {} is outside 1..={MAX_FRAME_SIZE}",
                self.compression.frame_size
            )));
        }
        if self.checksum_algorithm != "sha256" {
            return Err(bad(format!(
                "checksum algorithm \"{}\" is not supported",
                self.checksum_algorithm
            )));
        }
        let rdbs = self.objects.iter().filter(|o| o.role == Role::Rdb).count();
        if rdbs != 1 {
            return Err(bad(format!(
                "it lists {rdbs} rdb objects, expected exactly 1"
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for o in &self.objects {
            if !is_safe_relative_path(&o.name) || !seen.insert(o.name.as_str()) {
                return Err(bad(format!(
                    "object name \"{}\" is unsafe or duplicated",
                    o.name
                )));
            }
            if !is_safe_relative_path(&o.key) || !o.key.starts_with("objects/") {
                return Err(bad(format!("object key \"{}\" is outside objects/", o.key)));
            }
            if !is_sha256_hex(&o.sha256) || !is_sha256_hex(&o.stored_sha256) {
                return Err(bad(format!(
                    "object \"{}\" has a malformed checksum",
                    o.name
                )));
            }
        }
        // Checked: sizes that overflow when added cannot describe real objects, and a wrapped
        // sum could equal the stated total.
        let sum = |f: fn(&ObjectEntry) -> u64| {
            self.objects
                .iter()
                .try_fold(0u64, |acc, o| acc.checked_add(f(o)))
        };
        if sum(|o| o.size) != Some(self.total_size)
            || sum(|o| o.stored_size) != Some(self.stored_size)
        {
            return Err(bad(
                "totalSize/storedSize disagree with the object list".to_string()
            ));
        }
        Ok(())
    }

    pub fn rdb(&self) -> Option<&ObjectEntry> {
        self.objects.iter().find(|o| o.role == Role::Rdb)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fingerprint::{DatabaseFingerprint, GraphCounts};

    pub(crate) fn sample() -> Manifest {
        let mut fp = Fingerprint::default();
        let mut db = DatabaseFingerprint {
            keys: 3,
            ..Default::default()
        };
        db.graphs.insert(
            "g".into(),
            GraphCounts {
                nodes: 2,
                edges: 1,
                digest: None,
            },
        );
        fp.databases.insert(0, db);
        let t = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        Manifest {
            format_version: FORMAT_VERSION,
            backup_name: "b1".into(),
            started_at: t,
            completed_at: t,
            source: Source {
                server: "127.0.0.1:6379".into(),
                redis_version: "8.2.3".into(),
                falkordb_version: Some("41603".into()),
                dbfilename: "dump.rdb".into(),
                appenddirname: "appendonlydir".into(),
                appendfilename: "appendonly.aof".into(),
            },
            compression: Compression {
                algorithm: "zstd".into(),
                level: 3,
                frame_size: 4 << 20,
            },
            checksum_algorithm: "sha256".into(),
            total_size: 100,
            stored_size: 40,
            objects: vec![ObjectEntry {
                name: "dump.rdb".into(),
                role: Role::Rdb,
                key: "objects/dump.rdb.zst".into(),
                size: 100,
                sha256: "a".repeat(64),
                stored_size: 40,
                stored_sha256: "b".repeat(64),
            }],
            fingerprint: fp,
            consistency: Consistency {
                method: "bgsave".into(),
                attempts: 1,
            },
        }
    }

    #[test]
    fn sizes_whose_sum_wraps_are_refused_not_wrapped() {
        let mut m = sample();
        let mut second = m.objects[0].clone();
        second.name = "users.acl".into();
        second.key = "objects/users.acl.zst".into();
        second.role = Role::Acl;
        // 100 + (2^64 - 1) wraps to 99.
        second.size = u64::MAX;
        m.objects.push(second);
        m.total_size = 99;
        m.stored_size = 80;
        let err = Manifest::parse("b1", &m.to_json().unwrap()).unwrap_err();
        assert!(err.to_string().contains("totalSize"), "{err}");
    }

    #[test]
    fn round_trips_through_json() {
        let m = sample();
        let parsed = Manifest::parse("b1", &m.to_json().unwrap()).unwrap();
        assert_eq!(parsed, m);
    }

    #[test]
    fn json_field_names_are_camel_case() {
        let v: serde_json::Value = serde_json::from_slice(&sample().to_json().unwrap()).unwrap();
        assert_eq!(v["formatVersion"], 1);
        assert_eq!(v["objects"][0]["storedSha256"], "b".repeat(64));
        assert_eq!(v["objects"][0]["role"], "rdb");
        assert_eq!(
            v["fingerprint"]["databases"]["0"]["graphs"]["g"]["edges"],
            1
        );
    }

    #[test]
    fn newer_format_version_is_refused_by_number() {
        let mut v: serde_json::Value =
            serde_json::from_slice(&sample().to_json().unwrap()).unwrap();
        v["formatVersion"] = 2.into();
        let err = Manifest::parse("b1", v.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("formatVersion 2 is not supported"),
            "{err}"
        );
    }

    #[test]
    fn garbage_and_wrong_name_are_refused() {
        assert!(Manifest::parse("b1", b"{\"formatVersion\":1,").is_err());
        let err = Manifest::parse("other", &sample().to_json().unwrap()).unwrap_err();
        assert!(err.to_string().contains("names backup \"b1\""), "{err}");
    }

    #[test]
    fn path_escapes_are_refused() {
        let mut m = sample();
        m.objects[0].name = "../etc/passwd".into();
        assert!(m.validate("b1").is_err());
        m.objects[0].name = "/abs".into();
        assert!(m.validate("b1").is_err());
        assert!(is_safe_relative_path(
            "appendonlydir/appendonly.aof.1.base.rdb"
        ));
    }

    #[test]
    fn sizes_must_add_up() {
        let mut m = sample();
        m.total_size = 99;
        assert!(m.validate("b1").is_err());
    }

    #[test]
    fn backup_names() {
        assert!(validate_backup_name("nightly-2026.01.02").is_ok());
        for bad in ["", "a/b", "..", "-x", "UPPER", "a b"] {
            assert!(validate_backup_name(bad).is_err(), "{bad:?}");
        }
    }
}
