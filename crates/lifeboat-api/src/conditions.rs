//! Condition types and reasons, and the one way Lifeboat updates a condition list.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Cluster condition: every component is ready.
pub const READY: &str = "Ready";
/// Cluster condition: the database serves clients.
pub const AVAILABLE: &str = "Available";
/// Cluster condition: the state of the Cluster's restore.
pub const RESTORE: &str = "Restore";
/// `Restore` reason while the restore is in progress (status `Unknown`).
pub const REASON_RESTORE_RUNNING: &str = "RestoreRunning";
/// `Restore` reason once the data is restored and verified (status `True`).
pub const REASON_RESTORE_COMPLETED: &str = "RestoreCompleted";
/// `Restore` reason when the restore failed (status `False`).
pub const REASON_RESTORE_FAILED: &str = "RestoreFailed";
/// `Restore` condition reason: a restore was asked of a Cluster that already runs, and refused.
pub const REASON_RESTORE_REFUSED: &str = "RestoreRefused";

/// Restore condition: the spec and its preconditions were checked.
pub const VALIDATION_PASSED: &str = "ValidationPassed";
/// Restore condition: the backup repo was reachable.
pub const CHECK_BACKUP_REPO: &str = "CheckBackupRepo";
/// Restore condition: the prepareData stage.
pub const PREPARE_DATA: &str = "PrepareData";
/// Restore condition: the postReady stage.
pub const POST_READY: &str = "PostReady";

/// Sets `kind` on `conditions`, keeping `lastTransitionTime` when the status did not change so
/// that the time says when the state was entered, not when it was last observed.
pub fn set(
    conditions: &mut Vec<Condition>,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: &Time,
) {
    let next = |last: Time| Condition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation,
        last_transition_time: last,
    };
    match conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(c) => {
            let last = if c.status == status {
                c.last_transition_time.clone()
            } else {
                now.clone()
            };
            *c = next(last);
        }
        None => conditions.push(next(now.clone())),
    }
}

/// Finds a condition by type.
pub fn get<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("in range"))
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut c = Vec::new();
        set(&mut c, READY, "False", "Creating", "a", Some(1), &at(10));
        set(&mut c, READY, "False", "Creating", "b", Some(2), &at(20));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].last_transition_time, at(10));
        assert_eq!(c[0].message, "b");
        set(&mut c, READY, "True", "Ready", "c", Some(2), &at(30));
        assert_eq!(c[0].last_transition_time, at(30));
        assert_eq!(get(&c, READY).map(|c| c.status.as_str()), Some("True"));
    }
}
