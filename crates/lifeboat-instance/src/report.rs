//! What a data pod's instance manager tells its peers and the operator (`GET /report`).

use serde::{Deserialize, Serialize};

use crate::lineage::Lineage;

/// What is on a data volume, read before the server starts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dataset {
    /// Whether the volume holds a dataset (an RDB or an AOF directory). An empty volume on a pod
    /// of a cluster that has run means the volume was lost.
    pub present: bool,
    /// The histories the dataset has been part of, as recorded by this manager. `None` for a
    /// dataset the manager never saw served (new, or written by a restore).
    pub lineage: Option<Lineage>,
    /// The role the server last had, as recorded.
    pub last_role: Option<Role>,
}

/// A running server's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    Primary,
    Replica,
}

/// Where a data pod's manager is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "phase"
)]
pub enum Phase {
    /// Gathering what it needs to decide; the server is not started.
    Deciding,
    /// It cannot decide safely, and says why; the server is not started.
    Waiting { reason: String },
    /// The server runs.
    Running {
        role: Role,
        /// For a replica: the master it follows.
        master: Option<String>,
        /// For a replica: whether its link to the master is up.
        link_up: bool,
    },
    /// A planned stop: the role is being handed over, or the server is shutting down.
    Stopping,
}

/// The report one data pod's manager serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The pod's stable DNS name, as peers and sentinels know it.
    pub host: String,
    /// The pod's ordinal in its StatefulSet.
    pub ordinal: u32,
    /// The dataset as it was on the volume before the server started.
    pub dataset: Dataset,
    /// The live lineage while the server runs (it grows with the offset).
    pub lineage: Option<Lineage>,
    /// Where the manager is.
    #[serde(flatten)]
    pub phase: Phase,
}

impl Report {
    /// The lineage that describes what this pod holds now: the live one while running, else the
    /// recorded one.
    pub fn holds(&self) -> Option<&Lineage> {
        self.lineage.as_ref().or(self.dataset.lineage.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_through_json() {
        let r = Report {
            host: "fdb-falkordb-0.h".into(),
            ordinal: 0,
            dataset: Dataset {
                present: true,
                lineage: None,
                last_role: Some(Role::Primary),
            },
            lineage: None,
            phase: Phase::Waiting {
                reason: "why".into(),
            },
        };
        let text = serde_json::to_string(&r).expect("json");
        assert!(text.contains("\"phase\":\"waiting\""), "{text}");
        let back: Report = serde_json::from_str(&text).expect("parsed");
        assert_eq!(back, r);
    }
}
