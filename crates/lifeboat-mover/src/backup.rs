//! `lifeboat-mover backup`: a consistent copy of a running server, streamed into the repo.
//!
//! The consistent point is a BGSAVE: the Job mounts the server's data volume on the same node
//! (KubeBlocks' `datafile` method does the same) and reads the RDB the fork wrote. The
//! alternative, acting as a replica and reading the replication stream, would need a RESP
//! replication client that the redis crate does not provide and that we will not hand-write.
//!
//! The fingerprint is taken from the saved file, not from the live server: a scratch server
//! (`scratch.rs`) loads the very file being stored and is fingerprinted, while the upload runs.
//! So a cluster under steady writes backs up like an idle one, and every backup is known to
//! load.

use std::path::{Path as FsPath, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use chrono::Utc;
use serde::Serialize;
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::manifest::{
    self, Compression, Consistency, FORMAT_VERSION, Manifest, OBJECTS_DIR, ObjectEntry, Role,
    Source,
};
use crate::replica;
use crate::repo::{Repo, RepoArgs};
use crate::scratch::{self, Scratch, ScratchSpec};
use crate::server::{Server, ServerArgs};
use crate::stream;

#[derive(clap::Args, Debug, Clone)]
pub struct BackupArgs {
    /// Name of the backup to create; it must not exist yet.
    #[arg(long, env = "LIFEBOAT_BACKUP_NAME")]
    pub backup: String,
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub server: ServerArgs,
    /// The server's data directory as mounted in this container. Defaults to the server's own
    /// `CONFIG GET dir`, which is right when both mount the volume at the same path.
    #[arg(long, env = "LIFEBOAT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// zstd level (1-22). The default, 2, stores about 4% more than level 3 and compresses about
    /// 1.3 times as fast on text-like data: on two cores the backup is compression-bound
    /// (docs/mover.md, "Choosing the level").
    #[arg(long, env = "LIFEBOAT_COMPRESSION_LEVEL", default_value_t = 2,
          value_parser = clap::value_parser!(i32).range(1..=22))]
    pub compression_level: i32,
    /// zstd worker threads; 0 = one per available CPU.
    #[arg(long, env = "LIFEBOAT_COMPRESSION_THREADS", default_value_t = 0)]
    pub compression_threads: u32,
    /// Seconds to wait for BGSAVE to complete (per attempt).
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub bgsave_timeout: u64,
    /// Seconds a replica gets to catch up with what its primary held when the backup started
    /// (a primary or standalone server is backed up at once).
    #[arg(
        long,
        value_name = "SECONDS",
        env = "LIFEBOAT_REPLICA_SYNC_TIMEOUT",
        default_value_t = 300
    )]
    pub replica_sync_timeout: u64,
    /// BGSAVE rounds to try when another save replaces the file before it is opened.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub attempts: u32,
    /// The server binary that loads the saved file to fingerprint it. Defaults to the source
    /// server's own executable when this container has it, else `redis-server` on the PATH.
    #[arg(long, env = "LIFEBOAT_SCRATCH_SERVER")]
    pub scratch_server: Option<PathBuf>,
    /// Seconds the scratch server gets to load the saved file and be fingerprinted.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub scratch_timeout: u64,
}

/// The one JSON line `backup` prints on stdout; the operator parses it from the Job log.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupSummary {
    pub backup_name: String,
    pub repo: String,
    pub total_size: u64,
    pub stored_size: u64,
    pub object_count: usize,
    pub fingerprint: Fingerprint,
    pub duration_seconds: f64,
    /// Part of the duration spent reaching the consistent point (BGSAVE).
    pub snapshot_seconds: f64,
    /// Part of the duration spent compressing and storing objects.
    pub transfer_seconds: f64,
    /// Time the scratch server took to load the saved file and fingerprint it; it runs while
    /// the objects are stored.
    pub fingerprint_seconds: f64,
    pub attempts: u32,
    /// Objects found in the repo at their recorded stored size after the manifest was published
    /// and read back unchanged: `objectCount` when the repo kept everything it acknowledged. The
    /// operator completes a Backup only when the two agree.
    pub checked_objects: usize,
}

struct Snapshot {
    scratch: ScratchSpec,
    attempts: u32,
    source: Source,
    files: Vec<(String, Role, PathBuf, std::fs::File)>,
}

pub async fn run(args: BackupArgs) -> Result<BackupSummary> {
    let t0 = Instant::now();
    let started_at = Utc::now();
    manifest::validate_backup_name(&args.backup)?;
    let repo = Repo::open(&args.repo)?;
    if repo.manifest_exists(&args.backup).await? {
        return Err(Error::BackupExists {
            backup: args.backup.clone(),
            repo: repo.display.clone(),
        });
    }
    let opts = args.server.opts()?;
    let a = args.clone();
    crate::progress::stage("snapshot", 0);
    let snap = tokio::task::spawn_blocking(move || snapshot(&a, &opts))
        .await
        .map_err(|e| Error::Internal(format!("snapshot task failed: {e}")))??;
    let snapshot_seconds = t0.elapsed().as_secs_f64();
    let t_transfer = Instant::now();
    crate::progress::stage(
        "upload",
        snap.files
            .iter()
            .filter_map(|(_, _, _, f)| f.metadata().ok())
            .map(|m| m.len())
            .sum(),
    );
    info!(attempts = snap.attempts, "consistent point taken");

    // The scratch server reads the RDB through this process's descriptor, so the fingerprint
    // runs alongside the upload of the same file.
    let rdb_for_scratch = snap
        .files
        .first()
        .map(|(_, _, path, f)| {
            f.try_clone()
                .map_err(|e| Error::local_io("duplicating RDB descriptor", path, e))
        })
        .transpose()?
        .ok_or_else(|| Error::Internal("snapshot holds no RDB".into()))?;
    let scratch = snap.scratch.clone();
    let backup_name = args.backup.clone();
    let scratch_timeout = Duration::from_secs(args.scratch_timeout);
    let fingerprint_task = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        Scratch::fingerprint(&scratch, &rdb_for_scratch, &backup_name, scratch_timeout)
            .map(|fp| (fp, t.elapsed().as_secs_f64()))
    });

    let workers = match args.compression_threads {
        0 => stream::default_workers(),
        n => n as usize,
    };
    let mut objects = Vec::new();
    for (name, role, path, file) in snap.files {
        let key = format!("{OBJECTS_DIR}/{name}.zst");
        let location = repo.object_path(&args.backup, &key);
        let s = stream::upload(
            &repo,
            &location,
            file,
            &path,
            args.compression_level,
            workers,
        )
        .await?;
        info!(object = %name, size = s.size, stored = s.stored_size, "stored");
        objects.push(ObjectEntry {
            name,
            role,
            key,
            size: s.size,
            sha256: s.sha256,
            stored_size: s.stored_size,
            stored_sha256: s.stored_sha256,
        });
    }
    let transfer_seconds = t_transfer.elapsed().as_secs_f64();
    let (fingerprint, fingerprint_seconds) = fingerprint_task
        .await
        .map_err(|e| Error::Internal(format!("fingerprint task failed: {e}")))??;
    info!(fingerprint = %fingerprint.summary(), seconds = fingerprint_seconds, "saved file fingerprinted");
    let m = Manifest {
        format_version: FORMAT_VERSION,
        backup_name: args.backup.clone(),
        started_at,
        completed_at: Utc::now(),
        source: snap.source,
        compression: Compression {
            algorithm: "zstd".into(),
            level: args.compression_level,
            frame_size: stream::FRAME_SIZE as u64,
        },
        checksum_algorithm: "sha256".into(),
        total_size: objects.iter().map(|o| o.size).sum(),
        stored_size: objects.iter().map(|o| o.stored_size).sum(),
        objects,
        fingerprint,
        consistency: Consistency {
            method: "bgsave".into(),
            attempts: snap.attempts,
        },
    };
    m.validate(&args.backup)?;
    // Re-checked right before publishing: a concurrent backup of the same name must not be
    // silently replaced.
    if repo.manifest_exists(&args.backup).await? {
        return Err(Error::BackupExists {
            backup: args.backup.clone(),
            repo: repo.display.clone(),
        });
    }
    repo.put_manifest(&m).await?;
    let checked_objects = check_published(&repo, &m).await?;
    Ok(BackupSummary {
        backup_name: m.backup_name.clone(),
        repo: repo.display.clone(),
        total_size: m.total_size,
        stored_size: m.stored_size,
        object_count: m.objects.len(),
        fingerprint: m.fingerprint.clone(),
        duration_seconds: t0.elapsed().as_secs_f64(),
        snapshot_seconds,
        transfer_seconds,
        fingerprint_seconds,
        attempts: m.consistency.attempts,
        checked_objects,
    })
}

/// Reads back what was just published: the manifest must come back byte for byte as written, and
/// every object it lists must be stored at its recorded size. A repo that acknowledged a write it
/// did not keep (a proxy that cut a body short, a bucket with a lifecycle rule, a full volume on
/// an NFS server that reports late) fails the backup here, not at the first restore. The
/// objects' contents were hashed as they were sent; reading them all back would double a
/// backup's transfer, and a drill does exactly that on a schedule. Returns the objects checked.
pub async fn check_published(repo: &Repo, m: &Manifest) -> Result<usize> {
    use object_store::ObjectStoreExt;
    let (_, bytes) = repo.read_manifest(&m.backup_name).await?;
    if bytes != m.to_json()? {
        return Err(Error::BadManifest {
            backup: m.backup_name.clone(),
            cause: format!(
                "the manifest read back from repo {} differs from the one just written",
                repo.display
            ),
        });
    }
    for o in &m.objects {
        let path = repo.object_path(&m.backup_name, &o.key);
        let stored = match repo.store.head(&path).await {
            Ok(meta) => meta.size,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::Integrity {
                    backup: m.backup_name.clone(),
                    object: o.key.clone(),
                    cause: "is missing from the repo right after it was stored".into(),
                });
            }
            Err(e) => return Err(repo.error(&format!("checking object \"{}\"", o.key), &e)),
        };
        if stored != o.stored_size {
            return Err(Error::Integrity {
                backup: m.backup_name.clone(),
                object: o.key.clone(),
                cause: format!(
                    "is stored with {stored} bytes right after {} were written",
                    o.stored_size
                ),
            });
        }
    }
    Ok(m.objects.len())
}

fn open(path: &FsPath, what: &str) -> Result<std::fs::File> {
    std::fs::File::open(path).map_err(|e| Error::local_io(what, path, e))
}

/// Maps a server-side path (from CONFIG GET) into this container's view of the data volume.
fn rebase(p: &str, server_dir: Option<&str>, data_dir: &FsPath) -> PathBuf {
    let path = FsPath::new(p);
    if path.is_relative() {
        // The server chdir()s into its `dir`, so relative paths are relative to it.
        return data_dir.join(path);
    }
    if let Some(sd) = server_dir
        && let Ok(rest) = path.strip_prefix(sd)
    {
        return data_dir.join(rest);
    }
    path.to_path_buf()
}

fn snapshot(args: &BackupArgs, opts: &crate::server::ServerOpts) -> Result<Snapshot> {
    let bgsave_timeout = Duration::from_secs(args.bgsave_timeout);
    let mut srv = Server::connect(opts, Instant::now() + bgsave_timeout)?;
    let redis_version = srv.redis_version()?;
    replica::wait_caught_up(
        &mut srv,
        opts,
        Duration::from_secs(args.replica_sync_timeout),
    )?;
    let server_dir = srv.config_get("dir")?;
    let data_dir = match (&args.data_dir, &server_dir) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => {
            return Err(Error::Usage(
                "--data-dir is required: the server does not allow CONFIG GET dir".into(),
            ));
        }
    };
    let dbfilename = srv
        .config_get("dbfilename")?
        .unwrap_or_else(|| "dump.rdb".into());
    let appenddirname = srv
        .config_get("appenddirname")?
        .unwrap_or_else(|| "appendonlydir".into());
    let appendfilename = srv
        .config_get("appendfilename")?
        .unwrap_or_else(|| "appendonly.aof".into());
    let aclfile = srv.config_get("aclfile")?;
    let source = Source {
        server: srv.addr().to_string(),
        redis_version,
        falkordb_version: srv.graph_module.clone(),
        dbfilename: dbfilename.clone(),
        appenddirname: appenddirname.clone(),
        appendfilename,
    };
    let scratch = ScratchSpec {
        binary: match &args.scratch_server {
            Some(b) => b.clone(),
            None => {
                scratch::default_binary(srv.info("server")?.get("executable").map(String::as_str))
            }
        },
        modules: srv.loaded_modules()?,
    };
    let rdb_path = data_dir.join(&dbfilename);
    for attempt in 1..=args.attempts {
        // Filesystem timestamps may be coarser than the clock; allow for it.
        let save_started = SystemTime::now() - Duration::from_secs(2);
        let save = srv.bgsave(Instant::now() + bgsave_timeout)?;
        // Holding the descriptor pins this save's file even if a later save renames over it.
        let rdb = open(&rdb_path, "opening RDB")?;
        let mtime = rdb
            .metadata()
            .and_then(|m| m.modified())
            .map_err(|e| Error::local_io("reading RDB metadata", &rdb_path, e))?;
        if mtime < save_started {
            return Err(Error::Usage(format!(
                "RDB {} was not written by the BGSAVE just completed on {} (it is older); is --data-dir the server's data directory?",
                rdb_path.display(),
                srv.addr()
            )));
        }
        if srv.current_save()? != save {
            warn!(
                attempt,
                "another save replaced the RDB before it was opened; retrying"
            );
            continue;
        }
        let mut files = vec![(dbfilename.clone(), Role::Rdb, rdb_path.clone(), rdb)];
        files.extend(extra_files(
            &data_dir,
            aclfile.as_deref(),
            server_dir.as_deref(),
        )?);
        return Ok(Snapshot {
            scratch,
            attempts: attempt,
            source,
            files,
        });
    }
    Err(Error::DatasetChanged {
        backup: args.backup.clone(),
        attempts: args.attempts,
        diff: "another save replaced the RDB before it could be opened each time".into(),
    })
}

/// The ACL file, when present. The AOF directory is not archived: its increments run past the
/// snapshot that was fingerprinted, so restore could never use them, and archiving them doubled
/// what every backup compressed and stored (docs/mover.md).
fn extra_files(
    data_dir: &FsPath,
    aclfile: Option<&str>,
    server_dir: Option<&str>,
) -> Result<Vec<(String, Role, PathBuf, std::fs::File)>> {
    let mut out = Vec::new();
    let acl_path = match aclfile {
        Some(a) => rebase(a, server_dir, data_dir),
        None => data_dir.join("users.acl"),
    };
    if acl_path.is_file() {
        let name = acl_path
            .strip_prefix(data_dir)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|s| manifest::is_safe_relative_path(s))
            .unwrap_or_else(|| "users.acl".into());
        let f = open(&acl_path, "opening ACL file")?;
        out.push((name, Role::Acl, acl_path, f));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    async fn published(dir: &FsPath) -> (Repo, Manifest) {
        let repo = Repo::local(dir);
        let m = crate::manifest::tests::sample();
        for o in &m.objects {
            repo.store
                .put(
                    &repo.object_path(&m.backup_name, &o.key),
                    vec![7u8; usize::try_from(o.stored_size).expect("size")].into(),
                )
                .await
                .expect("object");
        }
        repo.put_manifest(&m).await.expect("manifest");
        (repo, m)
    }

    #[tokio::test]
    async fn a_published_backup_is_read_back_before_it_is_reported() {
        let dir = tempfile::tempdir().expect("tmp");
        let (repo, m) = published(dir.path()).await;
        assert_eq!(check_published(&repo, &m).await.expect("intact"), 1);

        // An object the repo kept short.
        let key = &m.objects[0].key;
        let path = repo.object_path(&m.backup_name, key);
        repo.store
            .put(&path, vec![7u8; 10].into())
            .await
            .expect("short");
        let e = check_published(&repo, &m).await.expect_err("short object");
        assert!(
            e.to_string().contains(key) && e.to_string().contains("10 bytes"),
            "{e}"
        );
        repo.store.delete(&path).await.expect("gone");
        let e = check_published(&repo, &m)
            .await
            .expect_err("missing object");
        assert!(e.to_string().contains("missing"), "{e}");

        // A manifest that came back other than written.
        let dir = tempfile::tempdir().expect("tmp");
        let (repo, m) = published(dir.path()).await;
        let mut other = m.clone();
        other.total_size += 1;
        let e = check_published(&repo, &other)
            .await
            .expect_err("manifest differs");
        assert!(e.to_string().contains("differs"), "{e}");
    }

    #[test]
    fn server_paths_are_rebased_onto_the_mount() {
        let d = FsPath::new("/mnt/data");
        assert_eq!(
            rebase("users.acl", Some("/data"), d),
            PathBuf::from("/mnt/data/users.acl")
        );
        assert_eq!(
            rebase("/data/etc/users.acl", Some("/data"), d),
            PathBuf::from("/mnt/data/etc/users.acl")
        );
        assert_eq!(
            rebase("/etc/users.acl", Some("/data"), d),
            PathBuf::from("/etc/users.acl")
        );
    }
}
