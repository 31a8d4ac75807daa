//! The result line `lifeboat-mover backup` prints, as the Backup controller reads it. Pure.

use lifeboat_api::dataprotection::v1alpha1::DatasetFingerprint;
use serde::Deserialize;

/// The mover's summary of a finished backup.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupResult {
    /// The backup's name in the repo.
    pub backup: String,
    /// Bytes stored (compressed).
    pub total_size: i64,
    /// Bytes of data (uncompressed), what a restore volume must hold.
    #[serde(default)]
    pub data_bytes: i64,
    /// The dataset's fingerprint.
    pub fingerprint: DatasetFingerprint,
    /// The manifest's format version.
    #[serde(default = "one")]
    pub format_version: u32,
}

fn one() -> u32 {
    1
}

/// Parses the result line; `None` when the line is not one.
pub fn parse(line: &str) -> Option<BackupResult> {
    serde_json::from_str(line.trim()).ok()
}
