//! The start decision of a data pod: primary, replica of whom, or wait — chosen by the data the
//! pods hold, never by ordinal alone. Pure: everything it reads is in [`Observation`].
//!
//! The rules, in order:
//! 1. A peer already serving as primary is followed, when it holds everything this pod's dataset
//!    holds. When it does not, this pod's dataset is set aside (never resynced away) and the pod
//!    follows: the running primary is what clients write to.
//! 2. The sentinels naming this pod, which is not running, means it restarted before they noticed.
//!    If a running replica holds this pod's data, the role is handed to it first.
//! 3. Otherwise nobody serves: a cold start. Once every member reported (or, after a grace period,
//!    all but one — a write acknowledged with `WAIT 1` is on at least two pods), the member whose
//!    dataset holds every other member's is chosen. Ties go to the sentinels' choice, then to the
//!    last primary, then to the lowest ordinal. An empty volume is never chosen while a member with
//!    data reports; when no member with data reports in a cluster that has run, nobody starts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::lineage::Lineage;
use crate::report::{Phase, Report, Role};

/// What a sentinel answered to `SENTINEL get-master-addr-by-name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SentinelAnswer {
    /// It did not answer.
    Unreachable,
    /// It monitors no master of this name (a new cluster, or a sentinel whose file was lost).
    NoMaster,
    /// It names this host as the master.
    Master(String),
}

/// A peer data pod, as its manager reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Its manager did not answer; why.
    Unreachable { host: String, why: String },
    /// Its report.
    Reported(Report),
}

/// Everything the decision reads.
#[derive(Clone, Debug)]
pub struct Observation {
    /// This pod's own report (its dataset as found on the volume).
    pub me: Report,
    /// Every other data pod of the component.
    pub peers: Vec<Peer>,
    /// One answer per configured sentinel; empty without sentinels.
    pub sentinels: Vec<SentinelAnswer>,
    /// How long this manager has been deciding.
    pub waited: Duration,
    /// How long to wait for every member before deciding with all but one.
    pub grace: Duration,
    /// Whether a hand-over to a replica was already asked for and refused.
    pub handover_refused: bool,
}

/// What the pod does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start as the primary.
    Primary { why: String },
    /// Start as a replica of `master`. With `set_aside`, this pod's dataset holds writes the
    /// master does not: it is moved aside (kept on the volume) before the server starts.
    Replica {
        master: String,
        set_aside: bool,
        why: String,
    },
    /// Ask the sentinels to give the master role to a running replica, then decide again.
    HandOver { why: String },
    /// Do not start the server yet; observe again.
    Wait { reason: String },
}

fn describe(l: Option<&Lineage>) -> String {
    match l.and_then(Lineage::head) {
        Some(h) => format!("{}:{}", &h.id[..8.min(h.id.len())], h.offset),
        None => "no recorded history".into(),
    }
}

/// The master most sentinels name, when no other host is named as often.
pub fn sentinels_choice(answers: &[SentinelAnswer]) -> Option<String> {
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for a in answers {
        if let SentinelAnswer::Master(h) = a {
            *votes.entry(h).or_default() += 1;
        }
    }
    let best = votes.values().copied().max()?;
    let mut top = votes.iter().filter(|(_, v)| **v == best);
    let first = top.next().map(|(h, _)| (*h).to_owned());
    if top.next().is_some() { None } else { first }
}

/// Decides how a data pod starts.
pub fn decide(o: &Observation) -> Decision {
    if o.sentinels.is_empty() && o.peers.is_empty() {
        return Decision::Primary {
            why: "standalone: the only data pod".into(),
        };
    }
    let named = sentinels_choice(&o.sentinels);
    let reports: Vec<&Report> = o
        .peers
        .iter()
        .filter_map(|p| match p {
            Peer::Reported(r) => Some(r),
            Peer::Unreachable { .. } => None,
        })
        .collect();

    // 1. Follow a running primary.
    let masters: Vec<&Report> = reports
        .iter()
        .copied()
        .filter(|r| {
            matches!(
                r.phase,
                Phase::Running {
                    role: Role::Primary,
                    ..
                }
            )
        })
        .collect();
    let target = match masters.as_slice() {
        [] => None,
        [one] => Some(*one),
        many => match many.iter().find(|r| Some(&r.host) == named.as_ref()) {
            Some(r) => Some(*r),
            None => {
                let hosts: Vec<&str> = many.iter().map(|r| r.host.as_str()).collect();
                return Decision::Wait {
                    reason: format!(
                        "more than one data pod serves as primary ({}) and the sentinels name none of them",
                        hosts.join(", ")
                    ),
                };
            }
        },
    };
    if let Some(m) = target {
        let mine = o.me.dataset.lineage.as_ref();
        let held = m.holds().cloned().unwrap_or_default();
        let set_aside = o.me.dataset.present && mine.is_some_and(|l| !held.contains_lineage(l));
        let why = if set_aside {
            format!(
                "{} serves as primary but does not hold this pod's data (this pod reached {}, the primary holds {}); the dataset is kept aside on the volume",
                m.host,
                describe(mine),
                describe(Some(&held))
            )
        } else {
            format!("{} serves as primary", m.host)
        };
        return Decision::Replica {
            master: m.host.clone(),
            set_aside,
            why,
        };
    }

    // 2. The sentinels still give this pod the role it lost when it stopped.
    if named.as_deref() == Some(o.me.host.as_str()) && !o.handover_refused {
        let mine = o.me.dataset.lineage.clone().unwrap_or_default();
        let heir = reports.iter().find(|r| {
            matches!(
                r.phase,
                Phase::Running {
                    role: Role::Replica,
                    ..
                }
            ) && r.holds().is_some_and(|h| h.contains_lineage(&mine))
        });
        if let Some(h) = heir {
            return Decision::HandOver {
                why: format!(
                    "the sentinels still name this pod as primary, and {} serves and holds its data",
                    h.host
                ),
            };
        }
    }

    // 3. Cold start.
    let members = o.peers.len() + 1;
    let missing: Vec<String> = o
        .peers
        .iter()
        .filter_map(|p| match p {
            Peer::Unreachable { host, why } => Some(format!("{host} ({why})")),
            Peer::Reported(_) => None,
        })
        .collect();
    let reported = members - missing.len();
    if !missing.is_empty() && o.waited < o.grace {
        return Decision::Wait {
            reason: format!(
                "no data pod serves; waiting for every data pod to report before choosing the primary: {}",
                missing.join(", ")
            ),
        };
    }
    // A write acknowledged by the primary and one replica is on two pods: hearing from all but
    // one member guarantees hearing from a pod that holds it.
    let quorum = members.saturating_sub(1).max(1);
    if reported < quorum {
        return Decision::Wait {
            reason: format!(
                "only {reported} of {members} data pods report, and a replicated write may be on the others: {}",
                missing.join(", ")
            ),
        };
    }
    let mut all: Vec<&Report> = reports.clone();
    all.push(&o.me);
    let with_history: Vec<&Report> = all
        .iter()
        .copied()
        .filter(|r| r.dataset.present || r.lineage.is_some())
        .filter(|r| r.holds().and_then(Lineage::head).is_some())
        .collect();
    let initialized = o
        .sentinels
        .iter()
        .any(|a| matches!(a, SentinelAnswer::Master(_)));
    // Restored data that no manager saw served: every copy is the same backup.
    let restored = with_history.is_empty();
    let chosen: &Report = if restored {
        let with_data: Vec<&Report> = all.iter().copied().filter(|r| r.dataset.present).collect();
        if with_data.is_empty() {
            if initialized || !missing.is_empty() {
                let mut reason = String::from(
                    "every data pod that reports has an empty volume, and this cluster has run before",
                );
                if let Some(n) = &named {
                    let _ = write!(reason, " (the sentinels name {n} as primary)");
                }
                if !missing.is_empty() {
                    let _ = write!(reason, "; not reporting: {}", missing.join(", "));
                }
                reason.push_str("; not starting over an empty dataset");
                return Decision::Wait { reason };
            }
            // Every volume empty looks the same in a new cluster and in one that lost them all;
            // only the sentinels remember a cluster that ran. Until most of them answer, nobody
            // starts over empty volumes.
            let answered = o
                .sentinels
                .iter()
                .filter(|a| !matches!(a, SentinelAnswer::Unreachable))
                .count();
            if answered < o.sentinels.len() / 2 + 1 {
                return Decision::Wait {
                    reason: format!(
                        "every data pod has an empty volume; waiting for most sentinels to answer \
                         ({answered} of {} did) to tell a new cluster from one whose volumes were all lost",
                        o.sentinels.len()
                    ),
                };
            }
            // A new cluster: ordinal 0 starts, the others follow it once it serves.
            if o.me.ordinal == 0 {
                return Decision::Primary {
                    why: "a new cluster: no pod holds data and no sentinel knows a primary".into(),
                };
            }
            return Decision::Wait {
                reason: "a new cluster: waiting for ordinal 0 to serve as primary".into(),
            };
        }
        pick(&with_data, named.as_deref())
    } else {
        let dominant: Vec<&Report> = with_history
            .iter()
            .copied()
            .filter(|c| {
                let held = c.holds().cloned().unwrap_or_default();
                with_history
                    .iter()
                    .all(|other| other.holds().is_none_or(|l| held.contains_lineage(l)))
            })
            .collect();
        if dominant.is_empty() {
            match with_history
                .iter()
                .find(|r| Some(&r.host) == named.as_ref())
            {
                Some(r) => r,
                None => {
                    let heads: Vec<String> = with_history
                        .iter()
                        .map(|r| format!("{} at {}", r.host, describe(r.holds())))
                        .collect();
                    return Decision::Wait {
                        reason: format!(
                            "the data pods' datasets have diverged and no sentinel names one of them: {}",
                            heads.join(", ")
                        ),
                    };
                }
            }
        } else {
            pick(&dominant, named.as_deref())
        }
    };
    if chosen.host == o.me.host {
        Decision::Primary {
            why: format!(
                "cold start: this pod holds every reporting pod's data ({})",
                describe(chosen.holds())
            ),
        }
    } else if restored {
        // Nothing was ever acknowledged here, so there is nothing to lose by following now; and a
        // replica that loads its own copy while the primary loads the same one resumes from it
        // (the RDB carries the backup's replication identity) instead of loading after it.
        Decision::Replica {
            master: chosen.host.clone(),
            set_aside: false,
            why: format!(
                "restored data that no pod has served: loading this pod's copy while {} loads the same backup as primary",
                chosen.host
            ),
        }
    } else {
        Decision::Wait {
            reason: format!(
                "cold start: waiting for {} to serve as primary; it holds the newest data ({})",
                chosen.host,
                describe(chosen.holds())
            ),
        }
    }
}

/// Among equals: the sentinels' choice, then the last primary, then the lowest ordinal.
fn pick<'a>(equals: &[&'a Report], named: Option<&str>) -> &'a Report {
    let mut sorted: Vec<&Report> = equals.to_vec();
    sorted.sort_by_key(|r| {
        (
            Some(r.host.as_str()) != named,
            r.dataset.last_role != Some(Role::Primary),
            r.ordinal,
        )
    });
    sorted[0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lineage::tests::lineage;
    use crate::report::Dataset;

    const GRACE: Duration = Duration::from_secs(30);

    fn host(i: u32) -> String {
        format!("fdb-falkordb-{i}.fdb-falkordb-headless.ns.svc.cluster.local")
    }

    /// A pod's report: its ordinal, its recorded history (None: no data; Some(&[]): data that no
    /// manager saw served), its last role and its phase.
    fn pod(i: u32, hist: Option<&[(char, u64)]>, last: Option<Role>, phase: Phase) -> Report {
        let recorded = hist.filter(|h| !h.is_empty()).map(lineage);
        let live = match &phase {
            Phase::Running { .. } => recorded.clone(),
            _ => None,
        };
        Report {
            host: host(i),
            ordinal: i,
            dataset: Dataset {
                present: hist.is_some(),
                lineage: recorded,
                last_role: last,
            },
            lineage: live,
            phase,
        }
    }

    fn deciding(i: u32, hist: Option<&[(char, u64)]>, last: Option<Role>) -> Report {
        pod(i, hist, last, Phase::Deciding)
    }

    fn running(i: u32, hist: &[(char, u64)], role: Role) -> Peer {
        Peer::Reported(pod(
            i,
            Some(hist),
            Some(role),
            Phase::Running {
                role,
                master: None,
                link_up: role == Role::Primary,
            },
        ))
    }

    fn unreachable_peer(i: u32) -> Peer {
        Peer::Unreachable {
            host: host(i),
            why: "connection refused".into(),
        }
    }

    fn names(i: u32) -> Vec<SentinelAnswer> {
        vec![SentinelAnswer::Master(host(i)); 3]
    }

    fn obs(me: Report, peers: Vec<Peer>, sentinels: Vec<SentinelAnswer>) -> Observation {
        Observation {
            me,
            peers,
            sentinels,
            waited: Duration::ZERO,
            grace: GRACE,
            handover_refused: false,
        }
    }

    fn is_primary(d: &Decision) -> bool {
        matches!(d, Decision::Primary { .. })
    }

    fn replica_of(d: &Decision) -> Option<(&str, bool)> {
        match d {
            Decision::Replica {
                master, set_aside, ..
            } => Some((master.as_str(), *set_aside)),
            _ => None,
        }
    }

    fn waits_for(d: &Decision, text: &str) -> bool {
        matches!(d, Decision::Wait { reason } if reason.contains(text))
    }

    const NONE: Vec<SentinelAnswer> = Vec::new();

    fn quiet() -> Vec<SentinelAnswer> {
        vec![SentinelAnswer::NoMaster; 3]
    }

    #[test]
    fn new_cluster_ordinal_zero_starts_and_the_others_wait_for_it() {
        let d0 = decide(&obs(
            deciding(0, None, None),
            vec![Peer::Reported(deciding(1, None, None))],
            quiet(),
        ));
        assert!(is_primary(&d0), "{d0:?}");
        let d1 = decide(&obs(
            deciding(1, None, None),
            vec![Peer::Reported(deciding(0, None, None))],
            quiet(),
        ));
        assert!(waits_for(&d1, "ordinal 0"), "{d1:?}");
        // Once ordinal 0 serves, ordinal 1 follows it.
        let d1 = decide(&obs(
            deciding(1, None, None),
            vec![running(0, &[('a', 0)], Role::Primary)],
            quiet(),
        ));
        assert_eq!(replica_of(&d1), Some((host(0).as_str(), false)));
    }

    #[test]
    fn empty_volumes_never_start_as_a_new_cluster_while_the_sentinels_are_silent() {
        // A full restart after every volume was lost, with the sentinels still starting: the
        // same view as a new cluster, except that the sentinels do not answer yet.
        let silent = vec![SentinelAnswer::Unreachable; 3];
        let d = decide(&obs(
            deciding(0, None, None),
            vec![Peer::Reported(deciding(1, None, None))],
            silent,
        ));
        assert!(waits_for(&d, "most sentinels"), "{d:?}");
        // Once they answer, their memory decides.
        let d = decide(&obs(
            deciding(0, None, None),
            vec![Peer::Reported(deciding(1, None, None))],
            names(0),
        ));
        assert!(waits_for(&d, "not starting over an empty dataset"), "{d:?}");
    }

    #[test]
    fn standalone_starts_as_primary() {
        let d = decide(&obs(deciding(0, Some(&[('a', 5)]), None), vec![], NONE));
        assert!(is_primary(&d));
    }

    #[test]
    fn restart_after_a_failover_follows_the_new_primary() {
        // Ordinal 0 was primary; ordinal 1 was promoted (new id b, a closed at 1000).
        let d = decide(&obs(
            deciding(0, Some(&[('a', 1000)]), Some(Role::Primary)),
            vec![running(1, &[('a', 1000), ('b', 1200)], Role::Primary)],
            names(1),
        ));
        assert_eq!(replica_of(&d), Some((host(1).as_str(), false)), "{d:?}");
    }

    #[test]
    fn primary_volume_lost_then_every_pod_restarts_the_pod_with_data_wins() {
        // Ordinal 0's volume is new and empty; the sentinels' file still names it.
        let d0 = decide(&obs(
            deciding(0, None, None),
            vec![Peer::Reported(deciding(
                1,
                Some(&[('a', 1000)]),
                Some(Role::Replica),
            ))],
            names(0),
        ));
        assert!(waits_for(&d0, &host(1)), "{d0:?}");
        let d1 = decide(&obs(
            deciding(1, Some(&[('a', 1000)]), Some(Role::Replica)),
            vec![Peer::Reported(deciding(0, None, None))],
            names(0),
        ));
        assert!(is_primary(&d1), "{d1:?}");
        // And the empty pod then follows without setting anything aside.
        let d0 = decide(&obs(
            deciding(0, None, None),
            vec![running(1, &[('a', 1000), ('c', 10)], Role::Primary)],
            names(0),
        ));
        assert_eq!(replica_of(&d0), Some((host(1).as_str(), false)));
    }

    #[test]
    fn a_stale_replica_never_becomes_primary_over_newer_data() {
        let me = deciding(1, Some(&[('a', 500)]), Some(Role::Replica));
        let peers = vec![Peer::Reported(deciding(
            0,
            Some(&[('a', 1000)]),
            Some(Role::Primary),
        ))];
        // Even when the sentinels name the stale pod.
        let d = decide(&obs(me.clone(), peers.clone(), names(1)));
        assert!(waits_for(&d, &host(0)), "{d:?}");
        let d0 = decide(&obs(
            deciding(0, Some(&[('a', 1000)]), Some(Role::Primary)),
            vec![Peer::Reported(me)],
            names(1),
        ));
        assert!(is_primary(&d0), "{d0:?}");
    }

    #[test]
    fn a_replica_ahead_of_its_old_primary_is_chosen() {
        // The primary lost its last second of AOF in a crash; the replica received it.
        let d = decide(&obs(
            deciding(1, Some(&[('a', 1010)]), Some(Role::Replica)),
            vec![Peer::Reported(deciding(
                0,
                Some(&[('a', 1000)]),
                Some(Role::Primary),
            ))],
            names(0),
        ));
        assert!(is_primary(&d), "{d:?}");
    }

    #[test]
    fn sentinels_that_disagree_are_outvoted_or_ignored() {
        let split = vec![
            SentinelAnswer::Master(host(1)),
            SentinelAnswer::Master(host(1)),
            SentinelAnswer::Master(host(0)),
        ];
        assert_eq!(sentinels_choice(&split), Some(host(1)));
        let tie = vec![
            SentinelAnswer::Master(host(1)),
            SentinelAnswer::Master(host(0)),
            SentinelAnswer::Unreachable,
        ];
        assert_eq!(sentinels_choice(&tie), None);
        // Equal data, a tie among sentinels: the last primary wins.
        let d = decide(&obs(
            deciding(1, Some(&[('a', 700)]), Some(Role::Primary)),
            vec![Peer::Reported(deciding(
                0,
                Some(&[('a', 700)]),
                Some(Role::Replica),
            ))],
            tie,
        ));
        assert!(is_primary(&d), "{d:?}");
        // Equal data, a majority naming ordinal 0: ordinal 0 wins over the last primary.
        let d = decide(&obs(
            deciding(1, Some(&[('a', 700)]), Some(Role::Primary)),
            vec![Peer::Reported(deciding(
                0,
                Some(&[('a', 700)]),
                Some(Role::Replica),
            ))],
            {
                let mut s = split;
                s.reverse();
                s.iter()
                    .map(|a| match a {
                        SentinelAnswer::Master(h) if *h == host(1) => {
                            SentinelAnswer::Master(host(0))
                        }
                        _ => SentinelAnswer::Master(host(1)),
                    })
                    .collect()
            },
        ));
        assert!(waits_for(&d, &host(0)), "{d:?}");
    }

    #[test]
    fn no_sentinel_reachable_decides_from_the_data_alone() {
        let s = vec![SentinelAnswer::Unreachable; 3];
        let d = decide(&obs(
            deciding(0, Some(&[('a', 300)]), Some(Role::Primary)),
            vec![Peer::Reported(deciding(
                1,
                Some(&[('a', 300)]),
                Some(Role::Replica),
            ))],
            s.clone(),
        ));
        assert!(is_primary(&d), "{d:?}");
        let d = decide(&obs(
            deciding(1, Some(&[('a', 300)]), Some(Role::Replica)),
            vec![Peer::Reported(deciding(
                0,
                Some(&[('a', 300)]),
                Some(Role::Primary),
            ))],
            s,
        ));
        assert!(waits_for(&d, &host(0)), "{d:?}");
    }

    #[test]
    fn all_sentinels_restarted_while_the_data_pods_run_changes_nothing() {
        // A data pod that restarts while fresh sentinels know no master follows the running
        // primary; nothing falls back to ordinal 0.
        let d = decide(&obs(
            deciding(0, Some(&[('a', 900)]), Some(Role::Replica)),
            vec![running(1, &[('a', 950)], Role::Primary)],
            quiet(),
        ));
        assert_eq!(replica_of(&d), Some((host(1).as_str(), false)));
    }

    #[test]
    fn a_peer_unreachable_is_waited_for_then_all_but_one_decide() {
        let me = deciding(0, Some(&[('a', 100)]), Some(Role::Primary));
        let mut o = obs(me, vec![unreachable_peer(1)], names(0));
        let d = decide(&o);
        assert!(waits_for(&d, "waiting for every data pod"), "{d:?}");
        o.waited = GRACE;
        assert!(is_primary(&decide(&o)));
        // With three members, one report of three is not enough even after the grace period.
        let mut o = obs(
            deciding(0, Some(&[('a', 100)]), Some(Role::Primary)),
            vec![unreachable_peer(1), unreachable_peer(2)],
            names(0),
        );
        o.waited = GRACE * 10;
        let d = decide(&o);
        assert!(waits_for(&d, "only 1 of 3"), "{d:?}");
    }

    #[test]
    fn an_empty_pod_never_serves_when_the_pod_with_data_is_unreachable() {
        let mut o = obs(deciding(0, None, None), vec![unreachable_peer(1)], names(0));
        o.waited = GRACE * 2;
        let d = decide(&o);
        assert!(waits_for(&d, "empty volume"), "{d:?}");
        assert!(waits_for(&d, &host(1)), "{d:?}");
    }

    #[test]
    fn every_volume_lost_in_a_cluster_that_ran_is_not_a_new_cluster() {
        let d = decide(&obs(
            deciding(0, None, None),
            vec![Peer::Reported(deciding(1, None, None))],
            names(0),
        ));
        assert!(waits_for(&d, "not starting over an empty dataset"), "{d:?}");
    }

    #[test]
    fn a_restarted_primary_hands_over_to_the_replica_that_holds_its_data() {
        let me = deciding(0, Some(&[('a', 1000)]), Some(Role::Primary));
        let peers = vec![running(1, &[('a', 1000)], Role::Replica)];
        let d = decide(&obs(me.clone(), peers.clone(), names(0)));
        assert!(matches!(d, Decision::HandOver { .. }), "{d:?}");
        // When the hand-over was refused it resumes as the primary it was.
        let mut o = obs(me, peers, names(0));
        o.handover_refused = true;
        assert!(is_primary(&decide(&o)));
        // A replica that lags is not handed the role.
        let d = decide(&obs(
            deciding(0, Some(&[('a', 1000)]), Some(Role::Primary)),
            vec![running(1, &[('a', 400)], Role::Replica)],
            names(0),
        ));
        assert!(is_primary(&d), "{d:?}");
    }

    #[test]
    fn a_pod_ahead_of_the_running_primary_sets_its_data_aside_before_following() {
        let d = decide(&obs(
            deciding(0, Some(&[('a', 1000)]), Some(Role::Primary)),
            vec![running(1, &[('a', 990), ('b', 1500)], Role::Primary)],
            names(1),
        ));
        assert_eq!(replica_of(&d), Some((host(1).as_str(), true)), "{d:?}");
    }

    #[test]
    fn restored_data_never_served_starts_on_the_lowest_ordinal() {
        let d = decide(&obs(
            deciding(0, Some(&[]), None),
            vec![Peer::Reported(deciding(1, Some(&[]), None))],
            quiet(),
        ));
        assert!(is_primary(&d), "{d:?}");
        // The other member does not wait for the primary to serve: it loads its own copy of the
        // same backup at the same time, and follows.
        let d = decide(&obs(
            deciding(1, Some(&[]), None),
            vec![Peer::Reported(deciding(0, Some(&[]), None))],
            quiet(),
        ));
        assert_eq!(replica_of(&d), Some((host(0).as_str(), false)), "{d:?}");
        // Still only once every member reported, or all but one after the grace period.
        let d = decide(&obs(
            deciding(2, Some(&[]), None),
            vec![
                Peer::Reported(deciding(0, Some(&[]), None)),
                unreachable_peer(1),
            ],
            quiet(),
        ));
        assert!(waits_for(&d, &host(1)), "{d:?}");
    }

    #[test]
    fn diverged_datasets_follow_the_sentinels_or_wait() {
        let a = deciding(0, Some(&[('a', 1000)]), Some(Role::Primary));
        let b = deciding(1, Some(&[('b', 1000)]), Some(Role::Primary));
        let d = decide(&obs(a.clone(), vec![Peer::Reported(b.clone())], quiet()));
        assert!(waits_for(&d, "diverged"), "{d:?}");
        let d = decide(&obs(a, vec![Peer::Reported(b)], names(0)));
        assert!(is_primary(&d), "{d:?}");
    }

    #[test]
    fn two_running_primaries_follow_the_sentinels_choice() {
        let d = decide(&obs(
            deciding(2, None, None),
            vec![
                running(0, &[('a', 10)], Role::Primary),
                running(1, &[('b', 20)], Role::Primary),
            ],
            names(1),
        ));
        assert_eq!(replica_of(&d), Some((host(1).as_str(), false)));
        let d = decide(&obs(
            deciding(2, None, None),
            vec![
                running(0, &[('a', 10)], Role::Primary),
                running(1, &[('b', 20)], Role::Primary),
            ],
            quiet(),
        ));
        assert!(waits_for(&d, "more than one"), "{d:?}");
    }

    #[test]
    fn three_members_choose_the_most_advanced() {
        let d = decide(&obs(
            deciding(2, Some(&[('a', 800)]), Some(Role::Replica)),
            vec![
                Peer::Reported(deciding(0, Some(&[('a', 700)]), Some(Role::Primary))),
                Peer::Reported(deciding(1, Some(&[('a', 750)]), Some(Role::Replica))),
            ],
            names(0),
        ));
        assert!(is_primary(&d), "{d:?}");
    }
}
