//! What the server loads at start, and the AOF it owes afterwards.
//!
//! With `appendonly yes`, Redis 7+ loads only the AOF and ignores `dump.rdb`, and loading the AOF
//! restores no replication identity (`DURABILITY.md` §1). Two volumes need the RDB instead:
//!
//! - **An RDB and no AOF.** `appendonly yes` would start the server empty over the data on the
//!   volume, and its first rewrite or save would then replace that data with nothing.
//! - **An AOF that is the RDB itself**, as a restore leaves it: the AOF's base file is a hard link
//!   of `dump.rdb` and nothing was appended. Loading the RDB instead loads the same dataset, and
//!   with it the replication id and offset the backup's server saved. A restored replica whose
//!   primary loaded the same file then resumes with a partial resynchronization instead of a full
//!   one (a second copy of the whole dataset over the network, then loaded again). This only
//!   helps members of a replicated component, so a standalone server keeps loading its AOF.
//!
//! Such a server starts with `appendonly no`; once it has loaded (and a replica is in sync),
//! the manager turns the AOF on, which writes it from the dataset, and the pod is not ready
//! until it is written: until then a crash would come back to the RDB alone.
//! Pure apart from [`observe`] and [`remove_seed`], which read and change the volume.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, io};

/// What the server's config asks for, as far as what it loads at start goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persistence {
    /// `appendonly`.
    pub appendonly: bool,
    /// `dbfilename`.
    pub dbfilename: String,
    /// `appenddirname`.
    pub appenddirname: String,
    /// `appendfilename`.
    pub appendfilename: String,
}

impl Default for Persistence {
    /// Redis' own defaults.
    fn default() -> Self {
        Self {
            appendonly: false,
            dbfilename: "dump.rdb".into(),
            appenddirname: "appendonlydir".into(),
            appendfilename: "appendonly.aof".into(),
        }
    }
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(v)
}

impl Persistence {
    /// Reads config lines in the order the server reads them: the last line of a name wins.
    pub fn from_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Self {
        let mut p = Self::default();
        for line in lines {
            let line = line.trim();
            let Some((name, value)) = line.split_once(char::is_whitespace) else {
                continue;
            };
            let value = unquote(value);
            match name.to_ascii_lowercase().as_str() {
                "appendonly" => p.appendonly = value.eq_ignore_ascii_case("yes"),
                "dbfilename" => value.clone_into(&mut p.dbfilename),
                "appenddirname" => value.clone_into(&mut p.appenddirname),
                "appendfilename" => value.clone_into(&mut p.appendfilename),
                _ => {}
            }
        }
        p
    }
}

/// A file on the volume: which inode it is, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
}

/// One file the AOF manifest lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The file's name inside the AOF directory.
    pub name: String,
    /// `b` (base), `i` (incremental) or `h` (history, about to be deleted).
    pub kind: String,
    /// The file, when it exists.
    pub file: Option<FileId>,
}

/// What the volume holds, as far as the choice goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Volume {
    /// `dump.rdb`.
    pub rdb: Option<FileId>,
    /// The AOF manifest's entries; `None` when there is no manifest.
    pub manifest: Option<Vec<Listed>>,
    /// An AOF of the single-file kind older Redis versions wrote (`appendfilename` in the data
    /// directory), which Redis would load and convert.
    pub legacy_aof: bool,
}

/// How the server starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boot {
    /// With the config as it is.
    AsConfigured,
    /// From `dump.rdb` with `appendonly no`, the AOF turned on once loaded. `seed` lists the AOF
    /// files (relative to the data directory) to remove first: a restore's AOF that only repeats
    /// the RDB, which would otherwise be taken for a newer one once the RDB is saved again.
    FromRdb { seed: Vec<PathBuf>, why: String },
}

/// Chooses how the server starts. `replicated`: the component has more than one data pod.
pub fn plan(v: &Volume, want: &Persistence, replicated: bool) -> Boot {
    if !want.appendonly || v.rdb.is_none() || v.legacy_aof {
        return Boot::AsConfigured;
    }
    let Some(listed) = &v.manifest else {
        return Boot::FromRdb {
            seed: Vec::new(),
            why: format!(
                "the volume holds {} and no AOF, which appendonly yes would start empty over",
                want.dbfilename
            ),
        };
    };
    if !replicated {
        return Boot::AsConfigured;
    }
    let rdb = v.rdb;
    let same_as_rdb = |f: &Option<FileId>| matches!((f, rdb), (Some(a), Some(r)) if a.dev == r.dev && a.ino == r.ino);
    let empty = |f: &Option<FileId>| matches!(f, Some(a) if a.size == 0);
    let live: Vec<&Listed> = listed.iter().filter(|l| l.kind != "h").collect();
    let bases: Vec<&Listed> = live.iter().copied().filter(|l| l.kind == "b").collect();
    let only_the_rdb = matches!(bases.as_slice(), [b] if same_as_rdb(&b.file))
        && live
            .iter()
            .all(|l| l.kind == "b" || (l.kind == "i" && empty(&l.file)));
    if !only_the_rdb {
        return Boot::AsConfigured;
    }
    let mut seed: Vec<PathBuf> = listed
        .iter()
        .filter(|l| l.file.is_some())
        .map(|l| Path::new(&want.appenddirname).join(&l.name))
        .collect();
    seed.push(Path::new(&want.appenddirname).join(format!("{}.manifest", want.appendfilename)));
    Boot::FromRdb {
        seed,
        why: format!(
            "the AOF is {} itself (a restore's), and the RDB carries the replication identity \
             a replica needs to resume from its primary",
            want.dbfilename
        ),
    }
}

fn file_id(p: &Path) -> Option<FileId> {
    let m = std::fs::symlink_metadata(p).ok().filter(|m| m.is_file())?;
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        size: m.len(),
    })
}

/// Parses an AOF manifest (`file <name> seq <n> type <b|i|h> ...` lines). `None` when a line is
/// not understood: an AOF this code cannot read is never treated as a copy of the RDB.
pub fn parse_manifest(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let value = |k: &str| {
            words
                .chunks(2)
                .find(|kv| kv.first() == Some(&k))
                .and_then(|kv| kv.get(1))
                .map(|v| unquote(v).to_owned())
        };
        let name = value("file")?;
        // Redis names its AOF files inside the directory; a name that reaches anywhere else (the
        // RDB itself as `../dump.rdb`) is not understood, so nothing outside is ever removed.
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return None;
        }
        out.push((name, value("type")?));
    }
    Some(out)
}

/// Reads what the volume holds.
pub fn observe(data: &Path, want: &Persistence) -> Result<Volume> {
    let dir = data.join(&want.appenddirname);
    let manifest_path = dir.join(format!("{}.manifest", want.appendfilename));
    let manifest = match std::fs::read_to_string(&manifest_path) {
        // An unreadable manifest lists nothing: an AOF without a base is never the RDB's copy.
        Ok(text) => Some(
            parse_manifest(&text)
                .unwrap_or_default()
                .into_iter()
                .map(|(name, kind)| Listed {
                    file: file_id(&dir.join(&name)),
                    name,
                    kind,
                })
                .collect(),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(format!("reading {}", manifest_path.display()))(e)),
    };
    Ok(Volume {
        rdb: file_id(&data.join(&want.dbfilename)),
        manifest,
        legacy_aof: data.join(&want.appendfilename).is_file(),
    })
}

/// Removes a restore's AOF that only repeats the RDB, manifest last, after checking again that
/// each file is still the RDB itself or empty: only what the check proves redundant goes.
/// Returns whether it went.
pub fn remove_seed(data: &Path, want: &Persistence, seed: &[PathBuf]) -> Result<bool> {
    let again = observe(data, want)?;
    if !matches!(plan(&again, want, true), Boot::FromRdb { seed: s, .. } if s == seed) {
        return Ok(false);
    }
    for rel in seed {
        let p = data.join(rel);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("removing {}", p.display()))(e)),
        }
    }
    let dir = data.join(&want.appenddirname);
    // Left in place when something else is in it.
    let _ = std::fs::remove_dir(&dir);
    Ok(true)
}

/// Where the AOF a server owes stands, from `INFO persistence`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AofProgress {
    /// On, and written: nothing more is owed.
    Written,
    /// Being written (or waiting for another child process to end first).
    Writing,
    /// The last attempt failed; the server retries.
    Failed(String),
    /// Still off.
    Off,
}

/// Reads `INFO persistence`.
pub fn aof_progress(info: &str) -> AofProgress {
    let field = |k: &str| crate::client::info_field(info, k);
    if field("aof_enabled") != Some("1") {
        return AofProgress::Off;
    }
    if field("aof_rewrite_in_progress") == Some("1") || field("aof_rewrite_scheduled") == Some("1")
    {
        return AofProgress::Writing;
    }
    match field("aof_last_bgrewrite_status") {
        Some("ok") => AofProgress::Written,
        other => AofProgress::Failed(format!(
            "the last AOF rewrite reported {}",
            other.unwrap_or("nothing")
        )),
    }
}

/// A request to the server about its AOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AofAsk {
    /// `CONFIG SET appendonly yes`: the server writes its AOF from the dataset, then appends.
    TurnOn,
    /// `BGREWRITEAOF`: write it again after a failed attempt.
    Rewrite,
}

/// What the manager does next about the AOF a server started from its RDB owes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AofStep {
    /// Written: the pod may be ready.
    Done,
    /// Not ready yet, for this reason; with `ask`, ask the server first.
    Wait { ask: Option<AofAsk>, reason: String },
}

/// Whether the AOF a server owes may be written without LZF (`rdbcompression no` for that one
/// write), given the bytes free on its volume and the server's `used_memory`.
///
/// The write is the last step before a restored pod may be ready, and LZF is most of its cost:
/// 1.3 GB of values and graph were written in 5.6 s with LZF and in 1.4 s without, 21% larger
/// (`docs/benchmarks.md`). The uncompressed file is at most about the dataset's size in memory;
/// twice that leaves room for it beside a save or a replica's sync in the same window. A tighter
/// volume keeps LZF, which costs time rather than space.
pub fn aof_without_lzf(free_bytes: u64, used_memory: u64) -> bool {
    used_memory > 0 && free_bytes >= used_memory.saturating_mul(2)
}

/// How long an unanswered request to write the AOF stands before it is sent again.
pub const ASK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Decides the next step. `in_sync`: a primary, or a replica whose link is up and not syncing
/// (an AOF written during a full sync would be thrown away with the dataset it holds);
/// `since_asked`: how long ago the last request went out, if any did.
pub fn aof_step(
    progress: &AofProgress,
    in_sync: bool,
    since_asked: Option<std::time::Duration>,
) -> AofStep {
    let due = since_asked.is_none_or(|d| d >= ASK_AGAIN_AFTER);
    match progress {
        AofProgress::Written => AofStep::Done,
        _ if !in_sync => AofStep::Wait {
            ask: None,
            reason: "started from its RDB; its AOF is written once the replica is in sync".into(),
        },
        AofProgress::Off => AofStep::Wait {
            ask: due.then_some(AofAsk::TurnOn),
            reason: "started from its RDB; turning its AOF on".into(),
        },
        AofProgress::Writing => AofStep::Wait {
            ask: None,
            reason: "started from its RDB; writing its AOF".into(),
        },
        AofProgress::Failed(why) => AofStep::Wait {
            ask: due.then_some(AofAsk::Rewrite),
            reason: format!("started from its RDB; its AOF could not be written yet: {why}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want() -> Persistence {
        Persistence::from_lines(["appendonly yes", "appenddirname appendonlydir"])
    }

    const RDB: FileId = FileId {
        dev: 1,
        ino: 10,
        size: 1000,
    };

    fn listed(name: &str, kind: &str, file: Option<FileId>) -> Listed {
        Listed {
            name: name.into(),
            kind: kind.into(),
            file,
        }
    }

    fn restored() -> Volume {
        Volume {
            rdb: Some(RDB),
            manifest: Some(vec![listed("appendonly.aof.1.base.rdb", "b", Some(RDB))]),
            legacy_aof: false,
        }
    }

    #[test]
    fn the_last_line_of_a_name_wins_and_quotes_are_read() {
        let p = Persistence::from_lines([
            "include /etc/lifeboat/redis.conf",
            "appendonly no",
            "dbfilename \"x.rdb\"",
            "APPENDONLY yes",
            "appendfilename 'a.aof'",
        ]);
        assert!(p.appendonly);
        assert_eq!(p.dbfilename, "x.rdb");
        assert_eq!(p.appendfilename, "a.aof");
        assert_eq!(p.appenddirname, "appendonlydir");
        assert!(!Persistence::from_lines([]).appendonly, "Redis' default");
    }

    #[test]
    fn a_restored_replicated_member_boots_from_the_rdb_and_removes_only_the_seed() {
        let Boot::FromRdb { seed, why } = plan(&restored(), &want(), true) else {
            panic!("expected a boot from the RDB");
        };
        assert_eq!(
            seed,
            vec![
                PathBuf::from("appendonlydir/appendonly.aof.1.base.rdb"),
                PathBuf::from("appendonlydir/appendonly.aof.manifest"),
            ]
        );
        assert!(why.contains("replication identity"), "{why}");
    }

    #[test]
    fn a_standalone_restore_keeps_loading_its_aof() {
        assert_eq!(plan(&restored(), &want(), false), Boot::AsConfigured);
    }

    #[test]
    fn an_rdb_without_an_aof_is_never_started_empty() {
        let v = Volume {
            rdb: Some(RDB),
            manifest: None,
            legacy_aof: false,
        };
        for replicated in [false, true] {
            match plan(&v, &want(), replicated) {
                Boot::FromRdb { seed, why } => {
                    assert!(seed.is_empty());
                    assert!(why.contains("start empty"), "{why}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_aof_holding_anything_beyond_the_rdb_is_loaded() {
        let other = FileId { ino: 11, ..RDB };
        let written = FileId {
            ino: 12,
            size: 5,
            ..RDB
        };
        let empty = FileId {
            ino: 13,
            size: 0,
            ..RDB
        };
        let cases = [
            // The server rewrote its base: a file of its own, whatever its size.
            vec![listed("a.2.base.rdb", "b", Some(other))],
            // Writes appended after the restore.
            vec![
                listed("a.1.base.rdb", "b", Some(RDB)),
                listed("a.1.incr.aof", "i", Some(written)),
            ],
            // A listed file that is gone: the AOF is not understood, so it is not replaced.
            vec![
                listed("a.1.base.rdb", "b", Some(RDB)),
                listed("a.1.incr.aof", "i", None),
            ],
            vec![listed("a.1.base.rdb", "b", None)],
            // No base at all.
            vec![listed("a.1.incr.aof", "i", Some(empty))],
        ];
        for manifest in cases {
            let v = Volume {
                manifest: Some(manifest.clone()),
                ..restored()
            };
            assert_eq!(plan(&v, &want(), true), Boot::AsConfigured, "{manifest:?}");
        }
        // An empty incremental file adds nothing; a history entry is not part of the AOF.
        let v = Volume {
            manifest: Some(vec![
                listed("a.0.base.rdb", "h", Some(other)),
                listed("a.1.base.rdb", "b", Some(RDB)),
                listed("a.1.incr.aof", "i", Some(empty)),
            ]),
            ..restored()
        };
        assert!(matches!(plan(&v, &want(), true), Boot::FromRdb { .. }));
    }

    #[test]
    fn nothing_changes_without_appendonly_an_rdb_or_with_a_legacy_aof() {
        let off = Persistence::default();
        assert_eq!(plan(&restored(), &off, true), Boot::AsConfigured);
        let empty = Volume::default();
        assert_eq!(plan(&empty, &want(), true), Boot::AsConfigured);
        let legacy = Volume {
            manifest: None,
            legacy_aof: true,
            ..restored()
        };
        assert_eq!(plan(&legacy, &want(), true), Boot::AsConfigured);
    }

    #[test]
    fn manifests_parse_and_an_unknown_line_makes_them_unreadable() {
        let m = "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i startoffset 32879\n";
        assert_eq!(
            parse_manifest(m),
            Some(vec![
                ("appendonly.aof.1.base.rdb".into(), "b".into()),
                ("appendonly.aof.1.incr.aof".into(), "i".into()),
            ])
        );
        assert_eq!(parse_manifest("seq 1 type b\n"), None);
        assert_eq!(parse_manifest("file ../dump.rdb seq 1 type b\n"), None);
        assert_eq!(parse_manifest("file .. seq 1 type b\n"), None);
    }

    #[test]
    fn the_seed_goes_only_while_it_is_still_the_rdb() {
        let d = tempfile::tempdir().expect("tempdir");
        let w = want();
        std::fs::write(d.path().join("dump.rdb"), b"REDIS0011...").expect("rdb");
        std::fs::create_dir(d.path().join("appendonlydir")).expect("mkdir");
        std::fs::hard_link(
            d.path().join("dump.rdb"),
            d.path().join("appendonlydir/appendonly.aof.1.base.rdb"),
        )
        .expect("link");
        std::fs::write(
            d.path().join("appendonlydir/appendonly.aof.manifest"),
            "file appendonly.aof.1.base.rdb seq 1 type b\n",
        )
        .expect("manifest");
        let Boot::FromRdb { seed, .. } = plan(&observe(d.path(), &w).expect("observe"), &w, true)
        else {
            panic!("expected a boot from the RDB");
        };
        // The RDB replaced by a save in between: the base is now the only copy of what it holds.
        std::fs::write(d.path().join("dump.rdb.new"), b"REDIS0011 newer").expect("rdb");
        std::fs::rename(d.path().join("dump.rdb.new"), d.path().join("dump.rdb")).expect("mv");
        assert!(!remove_seed(d.path(), &w, &seed).expect("remove"));
        assert!(
            d.path()
                .join("appendonlydir/appendonly.aof.1.base.rdb")
                .is_file()
        );
        // Linked again: now it goes, with its directory.
        std::fs::remove_file(d.path().join("dump.rdb")).expect("rm");
        std::fs::hard_link(
            d.path().join("appendonlydir/appendonly.aof.1.base.rdb"),
            d.path().join("dump.rdb"),
        )
        .expect("link");
        assert!(remove_seed(d.path(), &w, &seed).expect("remove"));
        assert!(!d.path().join("appendonlydir").exists());
        assert!(d.path().join("dump.rdb").is_file());
        assert_eq!(
            plan(&observe(d.path(), &w).expect("observe"), &w, true),
            Boot::FromRdb {
                seed: Vec::new(),
                why: "the volume holds dump.rdb and no AOF, which appendonly yes would start empty over".into()
            }
        );
    }

    #[test]
    fn the_aof_is_asked_for_once_in_sync_and_again_only_after_a_while() {
        use std::time::Duration;
        let wait_without_asking = |step: AofStep| matches!(step, AofStep::Wait { ask: None, .. });
        assert!(wait_without_asking(aof_step(
            &AofProgress::Off,
            false,
            None
        )));
        assert_eq!(
            aof_step(&AofProgress::Off, true, None),
            AofStep::Wait {
                ask: Some(AofAsk::TurnOn),
                reason: "started from its RDB; turning its AOF on".into()
            }
        );
        assert!(wait_without_asking(aof_step(
            &AofProgress::Off,
            true,
            Some(Duration::from_secs(1))
        )));
        assert!(wait_without_asking(aof_step(
            &AofProgress::Writing,
            true,
            None
        )));
        let failed = AofProgress::Failed("the last AOF rewrite reported err".into());
        assert!(matches!(
            aof_step(&failed, true, Some(ASK_AGAIN_AFTER)),
            AofStep::Wait { ask: Some(AofAsk::Rewrite), reason } if reason.contains("reported err")
        ));
        assert!(wait_without_asking(aof_step(
            &failed,
            true,
            Some(Duration::ZERO)
        )));
        assert_eq!(aof_step(&AofProgress::Written, false, None), AofStep::Done);
    }

    #[test]
    fn the_aof_is_written_without_lzf_only_where_the_volume_has_room_for_it() {
        const GIB: u64 = 1 << 30;
        assert!(aof_without_lzf(10 * GIB, 4 * GIB));
        assert!(aof_without_lzf(8 * GIB, 4 * GIB));
        assert!(!aof_without_lzf(8 * GIB - 1, 4 * GIB));
        assert!(!aof_without_lzf(GIB, 4 * GIB));
        // A server that reports no memory gives no bound to trust.
        assert!(!aof_without_lzf(10 * GIB, 0));
        assert!(!aof_without_lzf(u64::MAX - 1, u64::MAX));
    }

    #[test]
    fn aof_progress_reads_info_persistence() {
        let info = |enabled, inprog, sched, status: &str| {
            format!(
                "# Persistence\r\naof_enabled:{enabled}\r\naof_rewrite_in_progress:{inprog}\r\naof_rewrite_scheduled:{sched}\r\naof_last_bgrewrite_status:{status}\r\n"
            )
        };
        assert_eq!(aof_progress(&info(0, 0, 0, "ok")), AofProgress::Off);
        assert_eq!(aof_progress(&info(1, 1, 0, "ok")), AofProgress::Writing);
        assert_eq!(aof_progress(&info(1, 0, 1, "ok")), AofProgress::Writing);
        assert_eq!(aof_progress(&info(1, 0, 0, "ok")), AofProgress::Written);
        assert!(matches!(
            aof_progress(&info(1, 0, 0, "err")),
            AofProgress::Failed(m) if m.contains("err")
        ));
    }
}
