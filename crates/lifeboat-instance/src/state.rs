//! The manager's record on the data volume: the dataset's lineage and its last role.
//!
//! Redis keeps no replication identity that survives a start from the AOF, so this record is the
//! only way to compare datasets across a full restart. It lives beside the data, is written
//! atomically (a temporary file renamed over it), and is readable by the owner only.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, io};
use crate::lineage::Lineage;
use crate::report::{Dataset, Role};

const DIR: &str = ".lifeboat";
const FILE: &str = "state.json";

/// The record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// The dataset's lineage.
    pub lineage: Lineage,
    /// The role the server last had.
    pub role: Option<Role>,
}

fn path(data: &Path) -> PathBuf {
    data.join(DIR).join(FILE)
}

/// Reads the record; `None` when the manager never served this volume.
pub fn load(data: &Path) -> Result<Option<State>> {
    let p = path(data);
    match std::fs::read(&p) {
        // A record that does not parse is treated as absent: the dataset then counts as one
        // that no manager saw served, which is never preferred over a recorded one.
        Ok(b) => Ok(serde_json::from_slice(&b).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(format!("reading {}", p.display()))(e)),
    }
}

/// Writes the record atomically.
pub fn save(data: &Path, st: &State) -> Result<()> {
    let text = serde_json::to_string(st).unwrap_or_default();
    crate::conf::write_private(&path(data), &text)
}

/// Whether the volume holds a dataset: an RDB or a non-empty AOF directory.
pub fn has_data(data: &Path) -> bool {
    let rdb = data.join("dump.rdb").is_file();
    let aof = std::fs::read_dir(data.join("appendonlydir"))
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    rdb || aof
}

/// The dataset on the volume, as peers see it.
pub fn dataset(data: &Path) -> Result<Dataset> {
    let present = has_data(data);
    let st = load(data)?;
    Ok(Dataset {
        present,
        // A record without data beside it describes data that is gone.
        lineage: st
            .as_ref()
            .filter(|_| present)
            .map(|s| s.lineage.clone())
            .filter(|l| l.head().is_some()),
        last_role: st.and_then(|s| s.role),
    })
}

/// Moves the dataset aside, under `.lifeboat/set-aside-<unix seconds>`, so that a full resync
/// cannot destroy writes only this volume holds. Returns where it went.
pub fn set_aside(data: &Path, now_unix: u64) -> Result<PathBuf> {
    let dest = data.join(DIR).join(format!("set-aside-{now_unix}"));
    std::fs::create_dir_all(&dest).map_err(io(format!("creating {}", dest.display())))?;
    for name in ["dump.rdb", "appendonlydir"] {
        let from = data.join(name);
        if from.exists() {
            std::fs::rename(&from, dest.join(name))
                .map_err(io(format!("moving {} aside", from.display())))?;
        }
    }
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineage::Entry;

    #[test]
    fn the_record_round_trips_and_a_volume_without_data_claims_no_history() {
        let d = tempfile::tempdir().expect("tempdir");
        assert_eq!(load(d.path()).expect("load"), None);
        let st = State {
            lineage: Lineage {
                entries: vec![Entry {
                    id: "a".repeat(40),
                    offset: 7,
                }],
            },
            role: Some(Role::Primary),
        };
        save(d.path(), &st).expect("save");
        assert_eq!(load(d.path()).expect("load"), Some(st.clone()));
        let ds = dataset(d.path()).expect("dataset");
        assert!(!ds.present);
        assert_eq!(ds.lineage, None, "no data beside the record");
        std::fs::create_dir(d.path().join("appendonlydir")).expect("mkdir");
        std::fs::write(d.path().join("appendonlydir/x.aof"), b"x").expect("write");
        let ds = dataset(d.path()).expect("dataset");
        assert!(ds.present);
        assert_eq!(ds.lineage, Some(st.lineage));
        let aside = set_aside(d.path(), 42).expect("aside");
        assert!(aside.join("appendonlydir/x.aof").is_file());
        assert!(!has_data(d.path()));
    }
}
