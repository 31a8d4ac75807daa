//! `lifeboat-mover restore`: writes a backup into a data directory a server can start on.
//!
//! With `appendonly yes` and no AOF directory, Redis 7+ ignores `dump.rdb`, creates an empty AOF
//! and starts with no data. Restore therefore seeds the AOF directory from the backed-up RDB (the
//! consistent point): `<appenddirname>/<appendfilename>.1.base.rdb` plus a manifest naming it as
//! the only, base, file. The source's live AOF files are not restored (backups no longer hold
//! them; earlier ones do): their increments run past the fingerprinted point.

use std::path::{Path, PathBuf};

use chrono::Utc;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::info;

use crate::progress;

use crate::error::{Error, Result};
use crate::manifest::{self, Role};
use crate::marker::{self, Marker, PARTIAL_SUFFIX, State, TargetState};
use crate::repo::{Repo, RepoArgs};
use crate::stream;

#[derive(clap::Args, Debug, Clone)]
pub struct RestoreArgs {
    /// Backup to restore.
    #[arg(long, env = "LIFEBOAT_BACKUP_NAME")]
    pub backup: String,
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Data directory to restore into; created if missing. Must be empty (a `lost+found`
    /// directory is ignored) or hold an unfinished restore of the same backup.
    #[arg(long, env = "LIFEBOAT_TARGET_DIR")]
    pub target: PathBuf,
    /// RDB file name the target server uses; defaults to the source's.
    #[arg(long)]
    pub dbfilename: Option<String>,
    /// AOF directory name the target server uses; defaults to the source's.
    #[arg(long)]
    pub appenddirname: Option<String>,
    /// AOF base file name the target server uses; defaults to the source's.
    #[arg(long)]
    pub appendfilename: Option<String>,
    /// How the restored bytes are checked besides the stored object's sha256: `frame` (each
    /// zstd frame's content checksum) or `sha256` (also the sha256 of the uncompressed file).
    #[arg(long, value_enum, default_value_t, env = "LIFEBOAT_CONTENT_CHECK")]
    pub content_check: stream::ContentCheck,
    #[command(flatten)]
    pub writes: crate::direct::Writes,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSummary {
    pub backup_name: String,
    pub target: PathBuf,
    pub total_size: u64,
    pub files: Vec<String>,
    pub already_restored: bool,
    pub duration_seconds: f64,
    /// How the files were written (direct or buffered) and why; empty when nothing was.
    pub writes: Vec<String>,
}

fn check_file_name(what: &str, v: &str) -> Result<()> {
    if manifest::is_safe_relative_path(v) && !v.contains('/') {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{what} \"{v}\" must be a plain file name"
        )))
    }
}

fn io(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.to_string();
    let p = p.to_path_buf();
    move |e| Error::local_io(what, p, e)
}

pub async fn run(args: RestoreArgs) -> Result<RestoreSummary> {
    let t0 = std::time::Instant::now();
    manifest::validate_backup_name(&args.backup)?;
    let repo = Repo::open(&args.repo)?;
    let (m, raw) = repo.read_manifest(&args.backup).await?;
    let manifest_sha = hex::encode(Sha256::digest(&raw));
    let dbfilename = args
        .dbfilename
        .clone()
        .unwrap_or_else(|| m.source.dbfilename.clone());
    let appenddirname = args
        .appenddirname
        .clone()
        .unwrap_or_else(|| m.source.appenddirname.clone());
    let appendfilename = args
        .appendfilename
        .clone()
        .unwrap_or_else(|| m.source.appendfilename.clone());
    check_file_name("dbfilename", &dbfilename)?;
    check_file_name("appenddirname", &appenddirname)?;
    check_file_name("appendfilename", &appendfilename)?;

    let target = &args.target;
    std::fs::create_dir_all(target).map_err(io("creating target", target))?;
    match marker::classify_target(target, &args.backup, &manifest_sha)? {
        TargetState::AlreadyRestored => {
            info!(target = %target.display(), "target already holds the completed restore of this backup");
            return Ok(RestoreSummary {
                backup_name: args.backup.clone(),
                target: target.clone(),
                total_size: 0,
                files: Vec::new(),
                already_restored: true,
                duration_seconds: t0.elapsed().as_secs_f64(),
                writes: Vec::new(),
            });
        }
        TargetState::ResumeOwn => {
            info!(target = %target.display(), "clearing an unfinished restore of this backup");
            clear_except_marker(target)?;
        }
        TargetState::Empty => {}
    }
    let mut mk = Marker {
        format_version: 1,
        state: State::InProgress,
        backup_name: args.backup.clone(),
        manifest_sha256: manifest_sha,
        repo: repo.display.clone(),
        started_at: Utc::now(),
        completed_at: None,
        fingerprint: m.fingerprint.clone(),
    };
    // Written before any data: from here on the directory is recognisably ours and unfinished.
    marker::write(target, &mk)?;

    let mut files = Vec::new();
    let mut total = 0u64;
    let mut staged = Vec::new();
    let mut writes: Vec<String> = Vec::new();
    progress::stage(
        "download",
        m.objects
            .iter()
            .filter(|o| o.role != Role::Aof)
            .map(|o| o.size)
            .sum(),
    );
    for o in m.objects.iter().filter(|o| o.role != Role::Aof) {
        let rel = if o.role == Role::Rdb {
            dbfilename.clone()
        } else {
            o.name.clone()
        };
        let fin = target.join(&rel);
        if let Some(parent) = fin.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating directory", parent))?;
        }
        let tmp = PathBuf::from(format!("{}{PARTIAL_SUFFIX}", fin.display()));
        let how = stream::download(
            &repo,
            &args.backup,
            o,
            m.compression.frame_size,
            &tmp,
            args.content_check,
            args.writes,
        )
        .await?;
        if !writes.contains(&how.why) {
            writes.push(how.why);
        }
        info!(file = %rel, size = o.size, "downloaded and checked");
        staged.push((tmp, fin));
        files.push(rel);
        total += o.size;
    }
    // Final names appear only once every object has passed its checks, so a failed restore
    // leaves nothing a server would load.
    for (tmp, fin) in &staged {
        std::fs::rename(tmp, fin).map_err(io("renaming", fin))?;
    }

    seed_aof(target, &dbfilename, &appenddirname, &appendfilename)?;
    files.push(format!("{appenddirname}/{appendfilename}.1.base.rdb"));
    files.push(format!("{appenddirname}/{appendfilename}.manifest"));
    marker::sync_dir(target)?;

    mk.state = State::Complete;
    mk.completed_at = Some(Utc::now());
    // The last write: only now does the directory count as restored.
    marker::write(target, &mk)?;
    Ok(RestoreSummary {
        backup_name: args.backup.clone(),
        target: target.clone(),
        total_size: total,
        files,
        already_restored: false,
        duration_seconds: t0.elapsed().as_secs_f64(),
        writes,
    })
}

/// Creates the AOF directory with the restored RDB as its base file. A hard link costs no space
/// or time and is safe because Redis never modifies an RDB or AOF base file in place, it only
/// replaces them by rename.
pub fn seed_aof(
    target: &Path,
    dbfilename: &str,
    appenddirname: &str,
    appendfilename: &str,
) -> Result<()> {
    let dir = target.join(appenddirname);
    std::fs::create_dir_all(&dir).map_err(io("creating AOF directory", &dir))?;
    let base_name = format!("{appendfilename}.1.base.rdb");
    let base = dir.join(&base_name);
    let tmp = dir.join(format!("{base_name}{PARTIAL_SUFFIX}"));
    let rdb = target.join(dbfilename);
    let _ = std::fs::remove_file(&tmp);
    if std::fs::hard_link(&rdb, &tmp).is_err() {
        std::fs::copy(&rdb, &tmp).map_err(io("copying RDB to", &tmp))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io("syncing", &tmp))?;
    }
    std::fs::rename(&tmp, &base).map_err(io("renaming", &base))?;
    let manifest_line = format!("file {base_name} seq 1 type b\n");
    marker::write_atomic(
        &dir,
        &format!("{appendfilename}.manifest"),
        manifest_line.as_bytes(),
    )?;
    marker::sync_dir(&dir)
}

fn clear_except_marker(dir: &Path) -> Result<()> {
    for name in marker::entries(dir)? {
        if name == marker::MARKER_FILE {
            continue;
        }
        let p = dir.join(&name);
        let r = if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(io("removing leftover", &p))?;
    }
    marker::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aof_seed_names_the_rdb_as_the_only_base_file() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("dump.rdb"), b"REDIS0012...").unwrap();
        seed_aof(d.path(), "dump.rdb", "appendonlydir", "appendonly.aof").unwrap();
        let m = std::fs::read_to_string(d.path().join("appendonlydir/appendonly.aof.manifest"))
            .unwrap();
        assert_eq!(m, "file appendonly.aof.1.base.rdb seq 1 type b\n");
        let base = std::fs::read(d.path().join("appendonlydir/appendonly.aof.1.base.rdb")).unwrap();
        assert_eq!(base, b"REDIS0012...");
        let left: Vec<_> = std::fs::read_dir(d.path().join("appendonlydir"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 2, "no temporary files may remain");
    }

    #[test]
    fn file_name_overrides_cannot_escape() {
        assert!(check_file_name("dbfilename", "dump.rdb").is_ok());
        assert!(check_file_name("dbfilename", "../x").is_err());
        assert!(check_file_name("dbfilename", "a/b").is_err());
    }
}
