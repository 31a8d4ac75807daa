//! The operator's requests, as the bed's API server audits them (`testbed/scripts/services.sh`
//! audits every request of the `lifeboat-system` service accounts, metadata only). Tests read
//! what the operator really sent, which no object's state can show: an apply that changed
//! nothing leaves no trace on the object, but it is a request all the same.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::Deserialize;

const OPERATOR_USERS: &str = "system:serviceaccount:lifeboat-system:";

/// The bed's audit log.
pub fn log_path() -> PathBuf {
    crate::s3::state_dir().join("logs").join("audit.log")
}

/// Where the audit log ends now; [`since`] reads from here.
pub fn mark() -> Result<u64> {
    let path = log_path();
    Ok(std::fs::metadata(&path)
        .with_context(|| {
            format!(
                "reading {}: the bed audits the operator there",
                path.display()
            )
        })?
        .len())
}

/// One request of the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i32,
}

impl Request {
    /// Whether the request asked for a change (a create, update, patch or delete).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sub = if self.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", self.subresource)
        };
        write!(
            f,
            "{} {}{sub} {}/{} ({})",
            self.verb, self.resource, self.namespace, self.name, self.code
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    stage: String,
    verb: String,
    user: User,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
}

#[derive(Deserialize)]
struct User {
    username: String,
}

#[derive(Deserialize, Default)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: i32,
}

/// The operator's completed requests in `namespace` audited since `from` (a [`mark`]).
pub fn since(from: u64, namespace: &str) -> Result<Vec<Request>> {
    let path = log_path();
    let mut file =
        std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    file.seek(SeekFrom::Start(from))?;
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line?;
        // A line being written right now is incomplete; it is read on the next call.
        let Ok(e) = serde_json::from_str::<Entry>(&line) else {
            continue;
        };
        if e.stage != "ResponseComplete" || !e.user.username.starts_with(OPERATOR_USERS) {
            continue;
        }
        let o = e.object_ref.unwrap_or_default();
        if o.namespace != namespace {
            continue;
        }
        out.push(Request {
            verb: e.verb,
            resource: o.resource,
            subresource: o.subresource,
            namespace: o.namespace,
            name: o.name,
            code: e.response_status.map_or(0, |s| s.code),
        });
    }
    Ok(out)
}
