//! Known bugs, planted one at a time by the simulation (`crates/lifeboat-sim`) to show that its
//! invariants catch them. The switches exist only with the `mutations` feature, which only the
//! simulation enables; without it [`active`] is a constant `false` and the operator is the
//! operator.

/// A planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Open the data pods' readiness gates as soon as the verify Job exists, before its result.
    OpenGatesBeforeVerify,
    /// Take any object under this Cluster's names as its own, whatever UID owns it.
    SkipUidCheck,
    /// Complete the restore when the verify Job succeeds, without reading its result line.
    CompleteWithoutResult,
    /// Write the Restore's status only after the pass's creates succeeded: a create that keeps
    /// failing then loses the start time every pass, and no deadline ever comes.
    StatusAfterCreates,
    /// Start a backup whatever the Cluster's restore says.
    BackupIgnoresRestore,
    /// Complete a Backup on any result line its Job prints, whoever it names and whatever was
    /// read back.
    CompleteUncheckedBackup,
    /// Release a deleted Backup at once, its backup Job still running.
    ReleaseWhileJobRuns,
    /// End a restore or backup as soon as the scheduler says a claim is not found, without
    /// asking the API server.
    TrustCachedClaimLoss,
    /// Fail a Backup without suspending its Job first.
    FailWithoutSuspending,
    /// Leave a failed restore's unfinished Jobs running (or pending for good).
    FailWithoutStoppingJobs,
}

impl Mutation {
    pub const ALL: [Mutation; 10] = [
        Mutation::OpenGatesBeforeVerify,
        Mutation::SkipUidCheck,
        Mutation::CompleteWithoutResult,
        Mutation::StatusAfterCreates,
        Mutation::BackupIgnoresRestore,
        Mutation::CompleteUncheckedBackup,
        Mutation::ReleaseWhileJobRuns,
        Mutation::TrustCachedClaimLoss,
        Mutation::FailWithoutSuspending,
        Mutation::FailWithoutStoppingJobs,
    ];
}

#[cfg(feature = "mutations")]
static ACTIVE: std::sync::Mutex<Option<Mutation>> = std::sync::Mutex::new(None);

/// Plants `m` (or none). Process-wide: one mutation at a time.
#[cfg(feature = "mutations")]
pub fn set(m: Option<Mutation>) {
    *ACTIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = m;
}

/// Whether `m` is planted.
pub fn active(m: Mutation) -> bool {
    #[cfg(feature = "mutations")]
    {
        *ACTIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            == Some(m)
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = m;
        false
    }
}
