//! The manager's errors. Each names what it was doing.

/// An instance-manager error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("setting {name} {why}")]
    Setting { name: &'static str, why: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Redis {
        what: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("{what} timed out")]
    Timeout { what: String },
    #[error("redis-server exited: {0}")]
    ServerExited(String),
}

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps an I/O error with what was being done.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
