//! `lifeboat-mover drill`: proves a backup restorable. The backup is restored from the repo
//! into a private scratch directory, checksums checked as a real restore checks them; the RDB
//! is loaded into a private server with the same modules (a Unix socket in a 0700 directory, no
//! TCP port: [`crate::scratch`]); and what that server holds is compared with the fingerprint
//! the backup recorded, content digests included, by the comparison a real restore's verify step
//! makes. Nothing of the drill is reachable from outside the Job's pod.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::repo::{Repo, RepoArgs};
use crate::restore::{self, RestoreArgs};
use crate::scratch::{Scratch, ScratchSpec};
use crate::stream::ContentCheck;
use crate::verify::{self, VerifyReport};

#[derive(clap::Args, Debug, Clone)]
pub struct DrillArgs {
    /// Backup to drill.
    #[arg(long, env = "LIFEBOAT_BACKUP_NAME")]
    pub backup: String,
    #[command(flatten)]
    pub repo: RepoArgs,
    /// A private, empty directory to restore into (an emptyDir of the Job); it needs room for
    /// the backup's uncompressed data.
    #[arg(long, env = "LIFEBOAT_DRILL_DIR")]
    pub work_dir: PathBuf,
    /// The server binary that loads the restored file.
    #[arg(long, env = "LIFEBOAT_SCRATCH_SERVER", default_value = "redis-server")]
    pub scratch_server: PathBuf,
    /// Modules the server loads, as the source ran them (comma-separated paths).
    #[arg(
        long = "module",
        env = "LIFEBOAT_SCRATCH_MODULES",
        value_delimiter = ','
    )]
    pub modules: Vec<PathBuf>,
    /// Seconds the server gets to load the file and be fingerprinted.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub timeout: u64,
}

/// Restores, loads and compares; the report is a verify report, so the operator reads a
/// drill's result line as it reads a restore's.
pub async fn run(args: DrillArgs) -> Result<VerifyReport> {
    let target = args.work_dir.join("data");
    restore::run(RestoreArgs {
        backup: args.backup.clone(),
        repo: args.repo.clone(),
        target: target.clone(),
        dbfilename: None,
        appenddirname: None,
        appendfilename: None,
        // The drill has the time: the uncompressed bytes are hashed again too.
        content_check: ContentCheck::Sha256,
        writes: crate::direct::Writes::default(),
    })
    .await?;
    crate::progress::stage("verify", 0);
    let (manifest, _) = Repo::open(&args.repo)?.read_manifest(&args.backup).await?;
    let rdb_path = target.join(&manifest.source.dbfilename);
    let rdb = std::fs::File::open(&rdb_path)
        .map_err(|e| Error::local_io("opening the restored RDB", &rdb_path, e))?;
    let spec = ScratchSpec {
        binary: args.scratch_server.clone(),
        modules: args
            .modules
            .iter()
            .filter(|m| !m.as_os_str().is_empty())
            .map(|m| (m.clone(), Vec::new()))
            .collect(),
    };
    let backup = args.backup.clone();
    let timeout = Duration::from_secs(args.timeout);
    let live =
        tokio::task::spawn_blocking(move || Scratch::fingerprint(&spec, &rdb, &backup, timeout))
            .await
            .map_err(|e| Error::Internal(format!("drill task failed: {e}")))??;
    Ok(verify::compare(args.backup, manifest.fingerprint, live))
}
