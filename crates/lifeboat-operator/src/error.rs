//! The operator's errors. Each names the object it concerns; each has a metric label.

/// Why a reconcile step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{verb} {object}: {source}")]
    Kube {
        verb: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    /// An object under this Cluster's names that an earlier Cluster of the same name made; the
    /// pass waits for the garbage collector rather than use it.
    #[error(
        "{object} belongs to an earlier Cluster of this name (uid {owner}); waiting for the garbage collector to delete it"
    )]
    EarlierLife { object: String, owner: String },
    #[error("{object} has no {field}")]
    MissingField { object: String, field: &'static str },
    #[error("serializing {object}: {source}")]
    Serialize {
        object: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{object} is not a valid object: {message}")]
    InvalidObject { object: String, message: String },
}

impl Error {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::EarlierLife { .. } => "earlier_life",
            Error::MissingField { .. } => "missing_field",
            Error::Serialize { .. } => "serialize",
            Error::InvalidObject { .. } => "invalid_object",
        }
    }

    /// Wraps a kube error with what was being done to which object.
    pub fn kube(verb: &'static str, object: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let object = object.into();
        move |source| Error::Kube {
            verb,
            object,
            source,
        }
    }
}

/// The operator's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
