//! The restore marker, `.lifeboat-restore.json` in the target directory. It is written before the
//! first data file (state `inProgress`) and rewritten as the very last step (state `complete`), so
//! its state is the single source of truth for whether a directory holds a finished restore.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;

pub const MARKER_FILE: &str = ".lifeboat-restore.json";
/// Suffix of files being written; never a name the server reads.
pub const PARTIAL_SUFFIX: &str = ".lifeboat-partial";
/// Entries a freshly formatted volume already contains and that do not make it "non-empty".
const IGNORED_ENTRIES: &[&str] = &["lost+found"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    InProgress,
    Complete,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Marker {
    pub format_version: u32,
    pub state: State,
    pub backup_name: String,
    /// sha256 of the manifest bytes: identifies the exact backup, not just its name.
    pub manifest_sha256: String,
    pub repo: String,
    pub started_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    /// Copied from the manifest so that `verify --restored-dir` needs no repo access.
    pub fingerprint: Fingerprint,
}

/// What restore may do with a target directory.
#[derive(Debug, PartialEq)]
pub enum TargetState {
    /// Empty (or only ignorable entries): restore from scratch.
    Empty,
    /// Holds an unfinished restore of the same backup: clear it and start over.
    ResumeOwn,
    /// Holds a completed restore of the same backup: nothing to do.
    AlreadyRestored,
}

pub fn read(dir: &Path) -> Result<Option<Marker>> {
    let p = dir.join(MARKER_FILE);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| Error::Usage(format!("restore marker {} is not valid: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::local_io("reading restore marker", p, e)),
    }
}

/// Lists directory entries other than ignorable ones, sorted, so messages are deterministic.
pub fn entries(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::local_io("listing target", dir, e))?;
    for e in rd {
        let e = e.map_err(|e| Error::local_io("listing target", dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !IGNORED_ENTRIES.contains(&name.as_str()) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Decides whether `dir` may receive backup `backup` (identified by `manifest_sha256`).
pub fn classify_target(dir: &Path, backup: &str, manifest_sha256: &str) -> Result<TargetState> {
    let names = entries(dir)?;
    if names.is_empty() {
        return Ok(TargetState::Empty);
    }
    let marker = if names.iter().any(|n| n == MARKER_FILE) {
        read(dir)?
    } else {
        None
    };
    match marker {
        Some(m) if m.backup_name == backup && m.manifest_sha256 == manifest_sha256 => {
            Ok(match m.state {
                State::InProgress => TargetState::ResumeOwn,
                State::Complete => TargetState::AlreadyRestored,
            })
        }
        other => {
            let mut found: Vec<String> = names.iter().take(5).cloned().collect();
            if names.len() > 5 {
                found.push(format!("and {} more", names.len() - 5));
            }
            let mut found = found.join(", ");
            if let Some(m) = other {
                found.push_str(&format!("; its marker is for backup \"{}\"", m.backup_name));
            }
            Err(Error::TargetNotEmpty {
                path: dir.to_path_buf(),
                found,
                backup: backup.to_string(),
            })
        }
    }
}

/// Writes `bytes` to `dir/name` durably and atomically: temporary name, fsync, rename, fsync dir.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}{PARTIAL_SUFFIX}"));
    let fin = dir.join(name);
    let io = |p: &PathBuf, e| Error::local_io("writing", p.clone(), e);
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| io(&tmp, e))?;
    f.sync_all().map_err(|e| io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &fin).map_err(|e| io(&fin, e))?;
    sync_dir(dir)
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::local_io("syncing directory", dir, e))
}

pub fn write(dir: &Path, m: &Marker) -> Result<()> {
    let mut b = serde_json::to_vec_pretty(m)
        .map_err(|e| Error::Internal(format!("cannot serialise marker: {e}")))?;
    b.push(b'\n');
    write_atomic(dir, MARKER_FILE, &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(backup: &str, sha: &str, state: State) -> Marker {
        Marker {
            format_version: 1,
            state,
            backup_name: backup.into(),
            manifest_sha256: sha.into(),
            repo: "file:///r".into(),
            started_at: Utc::now(),
            completed_at: None,
            fingerprint: Fingerprint::default(),
        }
    }

    #[test]
    fn empty_and_lost_found_are_empty() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            classify_target(d.path(), "b", "s").unwrap(),
            TargetState::Empty
        );
        std::fs::create_dir(d.path().join("lost+found")).unwrap();
        assert_eq!(
            classify_target(d.path(), "b", "s").unwrap(),
            TargetState::Empty
        );
    }

    #[test]
    fn foreign_files_are_refused_with_their_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("dump.rdb"), b"x").unwrap();
        let err = classify_target(d.path(), "b", "s").unwrap_err();
        assert!(err.to_string().contains("dump.rdb"), "{err}");
        assert_eq!(err.exit_code(), crate::error::exit::TARGET_NOT_EMPTY);
    }

    #[test]
    fn own_unfinished_restore_resumes_only_for_same_backup() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &marker("b", "s", State::InProgress)).unwrap();
        std::fs::write(d.path().join("dump.rdb.lifeboat-partial"), b"x").unwrap();
        assert_eq!(
            classify_target(d.path(), "b", "s").unwrap(),
            TargetState::ResumeOwn
        );
        // Same name, different manifest: a re-created backup must not be mixed with the old one.
        assert!(classify_target(d.path(), "b", "other").is_err());
        let err = classify_target(d.path(), "c", "s").unwrap_err();
        assert!(
            err.to_string().contains("marker is for backup \"b\""),
            "{err}"
        );
    }

    #[test]
    fn complete_marker_means_already_restored() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), &marker("b", "s", State::Complete)).unwrap();
        assert_eq!(
            classify_target(d.path(), "b", "s").unwrap(),
            TargetState::AlreadyRestored
        );
        assert!(
            !d.path()
                .join(format!("{MARKER_FILE}{PARTIAL_SUFFIX}"))
                .exists()
        );
    }
}
