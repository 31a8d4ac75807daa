//! The mover's error type. Every variant names the object it is about, because the operator shows
//! the last line of a failed Job's log to the user and that line has to be enough to act on.

use std::path::PathBuf;

/// Process exit codes, one per failure class, so that the operator can react to a class (retry an
/// unreachable server, never retry a corrupt backup) without parsing messages.
pub mod exit {
    pub const OK: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const SERVER_UNREACHABLE: i32 = 3;
    pub const SERVER_AUTH: i32 = 4;
    pub const SERVER: i32 = 5;
    pub const REPO: i32 = 6;
    pub const BACKUP_NOT_FOUND: i32 = 7;
    pub const INTEGRITY: i32 = 8;
    pub const NO_SPACE: i32 = 9;
    pub const TARGET_NOT_EMPTY: i32 = 10;
    pub const VERIFY_MISMATCH: i32 = 11;
    pub const DATASET_CHANGED: i32 = 12;
    pub const BACKUP_EXISTS: i32 = 13;
    pub const LOCAL_IO: i32 = 14;
    pub const REPLICA_BEHIND: i32 = 15;
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid arguments: {0}")]
    Usage(String),

    #[error("server {addr} is unreachable: {cause}")]
    ServerUnreachable { addr: String, cause: String },

    #[error("server {addr} rejected the credentials: {cause}")]
    ServerAuth { addr: String, cause: String },

    #[error("server {addr}: {cause}")]
    Server { addr: String, cause: String },

    #[error("repo {repo} is unreachable: {cause}")]
    RepoUnreachable { repo: String, cause: String },

    #[error("repo {repo}: {cause}")]
    Repo { repo: String, cause: String },

    #[error("backup \"{backup}\" not found in repo {repo} (no manifest at {manifest})")]
    BackupNotFound {
        backup: String,
        repo: String,
        manifest: String,
    },

    #[error("backup \"{backup}\" already exists in repo {repo}; backups are never overwritten")]
    BackupExists { backup: String, repo: String },

    #[error("backup \"{backup}\": object \"{object}\" {cause}")]
    Integrity {
        backup: String,
        object: String,
        cause: String,
    },

    #[error("backup \"{backup}\": manifest is unusable: {cause}")]
    BadManifest { backup: String, cause: String },

    #[error("{what}: no space left on device")]
    NoSpace { what: String },

    #[error(
        "target {path} is not empty (found {found}) and holds no unfinished restore of backup \"{backup}\""
    )]
    TargetNotEmpty {
        path: PathBuf,
        found: String,
        backup: String,
    },

    #[error("verify of backup \"{backup}\" failed: live dataset differs from the backup: {diff}")]
    VerifyMismatch { backup: String, diff: String },

    #[error(
        "backup \"{backup}\": dataset changed during backup in each of {attempts} attempts ({diff}); no consistent point could be proven"
    )]
    DatasetChanged {
        backup: String,
        attempts: u32,
        diff: String,
    },

    #[error("backup \"{backup}\": the saved RDB did not load into a scratch server: {cause}")]
    Unloadable { backup: String, cause: String },

    #[error("replica {replica} has not caught up with its primary {primary}: {cause}")]
    ReplicaBehind {
        replica: String,
        primary: String,
        cause: String,
    },

    #[error("{what} {path}: {source}")]
    LocalIo {
        what: String,
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::ServerUnreachable { .. } => exit::SERVER_UNREACHABLE,
            Error::ServerAuth { .. } => exit::SERVER_AUTH,
            Error::Server { .. } => exit::SERVER,
            Error::RepoUnreachable { .. } | Error::Repo { .. } => exit::REPO,
            Error::BackupNotFound { .. } => exit::BACKUP_NOT_FOUND,
            Error::BackupExists { .. } => exit::BACKUP_EXISTS,
            Error::Integrity { .. } | Error::BadManifest { .. } | Error::Unloadable { .. } => {
                exit::INTEGRITY
            }
            Error::NoSpace { .. } => exit::NO_SPACE,
            Error::TargetNotEmpty { .. } => exit::TARGET_NOT_EMPTY,
            Error::VerifyMismatch { .. } => exit::VERIFY_MISMATCH,
            Error::DatasetChanged { .. } => exit::DATASET_CHANGED,
            Error::LocalIo { .. } => exit::LOCAL_IO,
            Error::ReplicaBehind { .. } => exit::REPLICA_BEHIND,
            Error::Internal(_) => exit::INTERNAL,
        }
    }

    /// Classifies a local I/O failure; a full disk gets its own class because the fix (a bigger
    /// volume) differs from every other I/O failure.
    pub fn local_io(
        what: impl Into<String>,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        let what = what.into();
        let path = path.into();
        if is_no_space(&source) {
            Error::NoSpace {
                what: format!("{what} {}", path.display()),
            }
        } else {
            Error::LocalIo { what, path, source }
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub fn is_no_space(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::StorageFull || err.raw_os_error() == Some(28)
}

/// Finds a full disk anywhere in an error's source chain: object_store wraps the `io::Error` of a
/// local write several layers deep.
pub fn chain_has_no_space(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && is_no_space(io)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Flattens an error and its sources into one line, because the operator reads exactly one line.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out.replace(['\n', '\r'], " ")
}
