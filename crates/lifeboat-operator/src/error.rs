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

    /// Whether the API server refused a write because the object's namespace is being deleted:
    /// the Cluster goes with it, so the pass is not a failure worth a warning.
    pub fn namespace_terminating(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. }
            if s.code == 403 && s.message.contains("because it is being terminated"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> Error {
        Error::Kube {
            verb: "applying",
            object: "ConfigMap/c-redis-config in namespace ns".into(),
            source: kube::Error::Api(
                kube::core::Status::failure(message, "Forbidden")
                    .with_code(code)
                    .boxed(),
            ),
        }
    }

    #[test]
    fn a_write_refused_in_a_namespace_being_deleted_is_told_apart() {
        let gone = "configmaps \"c-redis-config\" is forbidden: unable to create new content in namespace ns because it is being terminated";
        assert!(api(403, gone).namespace_terminating());
        assert!(!api(403, "configmaps is forbidden: User cannot create").namespace_terminating());
        assert!(!api(409, gone).namespace_terminating());
    }
}
