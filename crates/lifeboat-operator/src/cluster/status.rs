//! The Cluster's phase and conditions from what was observed. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use lifeboat_api::apps::v1::{ClusterComponentStatus, ClusterPhase, ClusterStatus};
use lifeboat_api::conditions::{
    self, AVAILABLE, READY, REASON_RESTORE_COMPLETED, REASON_RESTORE_FAILED,
    REASON_RESTORE_REFUSED, REASON_RESTORE_RUNNING, RESTORE,
};

/// Where the Cluster's restore stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreState {
    /// No restore was asked for.
    None,
    /// In progress; what it is doing.
    Running(String),
    /// Restored and verified.
    Completed(String),
    /// Failed; why.
    Failed(String),
    /// Asked of a Cluster that already runs, and refused; why. The workload is left as it is.
    Refused(String),
}

/// One component as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComponentObs {
    pub name: String,
    pub replicas: i32,
    pub ready_replicas: i32,
    /// Whether the workload exists.
    pub workload: bool,
    /// What is missing for the component to be healthy, if anything (for example "no primary").
    pub problems: Vec<String>,
}

/// KubeBlocks' condition for whether the Cluster's spec was applied to its workloads.
pub const APPLY_RESOURCES: &str = "ApplyResources";

/// Everything the Cluster's status is computed from.
#[derive(Clone, Debug)]
pub struct StatusInput {
    pub now: Time,
    pub generation: Option<i64>,
    pub previous: ClusterStatus,
    /// Set when the Cluster cannot be built: the field and the message.
    pub invalid: Option<String>,
    /// Set when the latest edit is invalid but a workload built from an earlier valid spec runs:
    /// the field and the message. The status still follows that workload.
    pub rejected_edit: Option<String>,
    pub restore: RestoreState,
    pub components: Vec<ComponentObs>,
    pub deleting: bool,
}

fn component_phase(c: &ComponentObs, restoring: bool) -> (ClusterPhase, BTreeMap<String, String>) {
    let mut msg = BTreeMap::new();
    if !c.workload {
        let why = if restoring {
            "waiting for the restored data before creating the workload"
        } else {
            "workload not created yet"
        };
        msg.insert("workload".into(), why.into());
        return (ClusterPhase::Creating, msg);
    }
    if c.ready_replicas < c.replicas {
        msg.insert(
            "pods".into(),
            format!("{} of {} pods ready", c.ready_replicas, c.replicas),
        );
    }
    for (i, p) in c.problems.iter().enumerate() {
        msg.insert(format!("problem-{i}"), p.clone());
    }
    if msg.is_empty() {
        (ClusterPhase::Running, msg)
    } else {
        (ClusterPhase::Creating, msg)
    }
}

/// Computes the Cluster's status.
pub fn compute(input: &StatusInput) -> ClusterStatus {
    let now = &input.now;
    let mut st = input.previous.clone();
    st.observed_generation = input.generation;
    let g = input.generation;
    if let Some(invalid) = &input.invalid {
        st.phase = Some(ClusterPhase::Failed);
        st.message = Some(invalid.clone());
        conditions::set(
            &mut st.conditions,
            READY,
            "False",
            "InvalidSpec",
            invalid,
            g,
            now,
        );
        return st;
    }
    let restoring = matches!(input.restore, RestoreState::Running(_));
    let mut components = BTreeMap::new();
    let mut all_running = true;
    let mut problems = Vec::new();
    for c in &input.components {
        let (phase, message) = component_phase(c, restoring);
        if phase != ClusterPhase::Running {
            all_running = false;
            problems.extend(message.values().map(|m| format!("{}: {m}", c.name)));
        }
        components.insert(
            c.name.clone(),
            ClusterComponentStatus {
                phase: Some(phase),
                message,
                observed_generation: g,
                up_to_date: Some(true),
            },
        );
    }
    st.components = components;
    let was_running = input.previous.phase == Some(ClusterPhase::Running)
        || input.previous.phase == Some(ClusterPhase::Abnormal);
    let (phase, message) = match &input.restore {
        RestoreState::Failed(why) => (ClusterPhase::Failed, Some(format!("restore failed: {why}"))),
        RestoreState::Running(what) => (ClusterPhase::Creating, Some(format!("restoring: {what}"))),
        _ if input.deleting => (ClusterPhase::Deleting, None),
        _ if all_running => (ClusterPhase::Running, None),
        _ if was_running => (ClusterPhase::Abnormal, Some(problems.join("; "))),
        _ => (ClusterPhase::Creating, Some(problems.join("; "))),
    };
    st.phase = Some(phase);
    st.message = message.filter(|m| !m.is_empty());
    match &input.rejected_edit {
        Some(why) => {
            let kept = format!(
                "the latest edit is not applied: {why}; the running workload is kept and followed as it was"
            );
            st.message = Some(match st.message.take() {
                Some(m) => format!("{kept}; {m}"),
                None => kept,
            });
            conditions::set(
                &mut st.conditions,
                APPLY_RESOURCES,
                "False",
                "InvalidSpec",
                why,
                g,
                now,
            );
        }
        None => {
            if conditions::get(&st.conditions, APPLY_RESOURCES).is_some_and(|c| c.status != "True")
            {
                conditions::set(
                    &mut st.conditions,
                    APPLY_RESOURCES,
                    "True",
                    "ApplyResourcesSucceeded",
                    "the spec is applied",
                    g,
                    now,
                );
            }
        }
    }
    match &input.restore {
        RestoreState::None => {}
        RestoreState::Running(m) => conditions::set(
            &mut st.conditions,
            RESTORE,
            "Unknown",
            REASON_RESTORE_RUNNING,
            m,
            g,
            now,
        ),
        RestoreState::Completed(m) => conditions::set(
            &mut st.conditions,
            RESTORE,
            "True",
            REASON_RESTORE_COMPLETED,
            m,
            g,
            now,
        ),
        RestoreState::Failed(m) => conditions::set(
            &mut st.conditions,
            RESTORE,
            "False",
            REASON_RESTORE_FAILED,
            m,
            g,
            now,
        ),
        RestoreState::Refused(m) => conditions::set(
            &mut st.conditions,
            RESTORE,
            "False",
            REASON_RESTORE_REFUSED,
            m,
            g,
            now,
        ),
    }
    if phase == ClusterPhase::Running {
        conditions::set(
            &mut st.conditions,
            READY,
            "True",
            "AllComponentsReady",
            "every component is ready",
            g,
            now,
        );
        conditions::set(
            &mut st.conditions,
            AVAILABLE,
            "True",
            "PrimaryServing",
            "the database serves clients",
            g,
            now,
        );
    } else {
        let why = st.message.clone().unwrap_or_else(|| format!("{phase:?}"));
        conditions::set(
            &mut st.conditions,
            READY,
            "False",
            &format!("{phase:?}"),
            &why,
            g,
            now,
        );
        let serving = input
            .components
            .iter()
            .all(|c| c.workload && c.ready_replicas > 0)
            && !restoring
            && !matches!(input.restore, RestoreState::Failed(_));
        let (s, r) = if serving {
            ("True", "PrimaryServing")
        } else {
            ("False", "NotServing")
        };
        conditions::set(&mut st.conditions, AVAILABLE, s, r, &why, g, now);
    }
    st
}

/// Whether the computed status must be written: not when the Cluster already shows it. An idle
/// Cluster's every pass computes the status it has (conditions keep their transition times), so
/// following its roles costs no write.
pub fn needs_write(current: Option<&ClusterStatus>, next: &ClusterStatus) -> bool {
    current != Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn comp(name: &str, ready: i32, replicas: i32) -> ComponentObs {
        ComponentObs {
            name: name.into(),
            replicas,
            ready_replicas: ready,
            workload: true,
            problems: vec![],
        }
    }

    fn input(restore: RestoreState, comps: Vec<ComponentObs>) -> StatusInput {
        StatusInput {
            now: Time(Timestamp::from_second(1_800_000_000).expect("t")),
            generation: Some(3),
            previous: ClusterStatus::default(),
            invalid: None,
            rejected_edit: None,
            restore,
            components: comps,
            deleting: false,
        }
    }

    #[test]
    fn never_running_while_the_restore_runs_even_if_pods_are_ready() {
        let s = compute(&input(
            RestoreState::Running("prepareData".into()),
            vec![comp("falkordb", 2, 2), comp("falkordb-sent", 3, 3)],
        ));
        assert_eq!(s.phase, Some(ClusterPhase::Creating));
        let r = conditions::get(&s.conditions, RESTORE).expect("restore condition");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("Unknown", REASON_RESTORE_RUNNING)
        );
        let ready = conditions::get(&s.conditions, READY).expect("ready");
        assert_eq!(ready.status, "False");
    }

    #[test]
    fn failed_restore_fails_the_cluster_with_the_reason() {
        let s = compute(&input(
            RestoreState::Failed("Backup demo/b does not exist".into()),
            vec![],
        ));
        assert_eq!(s.phase, Some(ClusterPhase::Failed));
        assert!(
            s.message
                .as_deref()
                .unwrap_or_default()
                .contains("Backup demo/b does not exist")
        );
        let r = conditions::get(&s.conditions, RESTORE).expect("restore condition");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("False", REASON_RESTORE_FAILED)
        );
    }

    #[test]
    fn running_after_a_verified_restore() {
        let s = compute(&input(
            RestoreState::Completed("verified".into()),
            vec![comp("falkordb", 2, 2), comp("falkordb-sent", 3, 3)],
        ));
        assert_eq!(s.phase, Some(ClusterPhase::Running));
        assert_eq!(s.observed_generation, Some(3));
        let r = conditions::get(&s.conditions, RESTORE).expect("restore condition");
        assert_eq!(r.reason, REASON_RESTORE_COMPLETED);
    }

    #[test]
    fn a_refused_late_restore_leaves_a_running_cluster_running_and_says_so() {
        let s = compute(&input(
            RestoreState::Refused("a restore only applies when a Cluster is created".into()),
            vec![comp("falkordb", 2, 2), comp("falkordb-sent", 3, 3)],
        ));
        assert_eq!(s.phase, Some(ClusterPhase::Running));
        let r = conditions::get(&s.conditions, RESTORE).expect("restore condition");
        assert_eq!(
            (r.status.as_str(), r.reason.as_str()),
            ("False", REASON_RESTORE_REFUSED)
        );
        assert!(r.message.contains("only applies when a Cluster is created"));
    }

    #[test]
    fn unready_component_keeps_a_new_cluster_creating_and_a_running_one_abnormal() {
        let mut c = comp("falkordb", 1, 2);
        c.problems.push("no primary".into());
        let s = compute(&input(RestoreState::None, vec![c.clone()]));
        assert_eq!(s.phase, Some(ClusterPhase::Creating));
        assert!(
            s.components["falkordb"]
                .message
                .values()
                .any(|m| m == "no primary")
        );
        let mut i = input(RestoreState::None, vec![c]);
        i.previous.phase = Some(ClusterPhase::Running);
        assert_eq!(compute(&i).phase, Some(ClusterPhase::Abnormal));
    }

    #[test]
    fn invalid_spec_is_failed_with_the_field() {
        let mut i = input(RestoreState::None, vec![]);
        i.invalid = Some("spec.clusterDef: unknown cluster definition \"x\"".into());
        let s = compute(&i);
        assert_eq!(s.phase, Some(ClusterPhase::Failed));
        assert!(
            s.message
                .as_deref()
                .unwrap_or_default()
                .starts_with("spec.clusterDef")
        );
    }

    #[test]
    fn an_invalid_edit_of_a_running_cluster_keeps_it_running_and_says_so() {
        let mut i = input(RestoreState::None, vec![comp("falkordb", 2, 2)]);
        i.previous.phase = Some(ClusterPhase::Running);
        i.rejected_edit = Some("spec.componentSpecs[0].replicas: must be at least 1".into());
        let s = compute(&i);
        assert_eq!(
            s.phase,
            Some(ClusterPhase::Running),
            "the workload is served"
        );
        let msg = s.message.clone().unwrap_or_default();
        assert!(
            msg.contains("spec.componentSpecs[0].replicas") && msg.contains("not applied"),
            "{msg}"
        );
        let c = conditions::get(&s.conditions, APPLY_RESOURCES).expect("condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "InvalidSpec")
        );
        // Fixed: the condition says so and the message goes.
        let mut j = input(RestoreState::None, vec![comp("falkordb", 2, 2)]);
        j.previous = s;
        let fixed = compute(&j);
        assert_eq!(fixed.message, None);
        let c = conditions::get(&fixed.conditions, APPLY_RESOURCES).expect("condition");
        assert_eq!(c.status, "True");
    }

    #[test]
    fn an_unchanged_cluster_needs_no_status_write_on_later_passes() {
        let comps = vec![comp("falkordb", 2, 2), comp("falkordb-sent", 3, 3)];
        let first = compute(&input(RestoreState::None, comps.clone()));
        assert!(
            needs_write(None, &first),
            "a Cluster without status gets one"
        );
        // A later pass, later in time, over the same observation.
        let mut again = input(RestoreState::None, comps.clone());
        again.previous = first.clone();
        again.now = Time(Timestamp::from_second(1_800_000_600).expect("t"));
        let second = compute(&again);
        assert!(!needs_write(Some(&first), &second), "{first:?}\n{second:?}");
        // Anything observed that changes it is written: a pod no longer ready.
        let mut degraded = again.clone();
        degraded.components = vec![comp("falkordb", 1, 2), comp("falkordb-sent", 3, 3)];
        assert!(needs_write(Some(&first), &compute(&degraded)));
        // So is a new generation.
        let mut edited = again;
        edited.generation = Some(4);
        assert!(needs_write(Some(&first), &compute(&edited)));
    }
}
