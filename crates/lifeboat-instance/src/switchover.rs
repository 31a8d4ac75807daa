//! Moving the primary role: a planned hand-over before a primary stops, asking the sentinels to
//! fail over, and correcting sentinels that name a pod which does not serve as primary.

use std::time::{Duration, Instant};

use crate::client::{self, Conn};
use crate::decide::{self, Peer, SentinelAnswer};
use crate::error::{Error, Result};
use crate::peers;
use crate::report::{Phase, Role};
use crate::settings::{Members, Settings};

/// How long writes stay paused at most during a hand-over. Sentinels keep pinging a paused
/// server (PING is not a write), so this stays well within their down-after period's reach.
const PAUSE_MS: u64 = 15_000;
/// How long the replicas get to reach the paused primary's offset.
const CATCH_UP: Duration = Duration::from_secs(8);
/// How long the sentinels get to name the new primary.
const ELECT: Duration = Duration::from_secs(15);
/// How long a failover refused for want of a good replica is asked again: a sentinel that learned
/// the primary a moment ago counts a replica only once it has had the replica's own `INFO`,
/// within about a second.
const ASK_NO_GOOD_REPLICA: Duration = Duration::from_secs(3);

/// Sentinel failover settings, set whenever Lifeboat tells a sentinel what to monitor.
const SENTINEL_OPTIONS: [(&str, &str); 3] = [
    ("down-after-milliseconds", "5000"),
    ("failover-timeout", "30000"),
    ("parallel-syncs", "1"),
];

fn not_me<'a>(answers: &'a [SentinelAnswer], me: &str) -> Option<&'a str> {
    let majority = answers.len() / 2 + 1;
    let choice = decide::sentinels_choice(answers)?;
    let votes = answers
        .iter()
        .filter(|a| matches!(a, SentinelAnswer::Master(h) if *h == choice))
        .count();
    (choice != me && votes >= majority).then(|| {
        answers
            .iter()
            .find_map(|a| match a {
                SentinelAnswer::Master(h) if *h == choice => Some(h.as_str()),
                _ => None,
            })
            .unwrap_or_default()
    })
}

/// Asks the sentinels to fail the master over, and waits until a majority names another pod.
/// With `me` (the stopping primary's own connection), the wait also ends when the sentinels have
/// made it a replica of the new primary.
pub async fn sentinel_failover(
    s: &Settings,
    m: &Members,
    mut me: Option<&mut Conn>,
) -> Result<String> {
    let mut asked = None;
    let mut refusals = Vec::new();
    let ask_until = Instant::now() + ASK_NO_GOOD_REPLICA;
    loop {
        refusals.clear();
        for h in &m.sentinels {
            let Ok(mut c) = client::connect(h, s.sentinel_port, &s.password).await else {
                refusals.push(format!("{h}: unreachable"));
                continue;
            };
            let r: Result<String> = c
                .run(redis::cmd("SENTINEL").arg("FAILOVER").arg(&m.master_name))
                .await;
            match r {
                Ok(_) => {
                    asked = Some(h.clone());
                    break;
                }
                Err(e) if e.to_string().contains("INPROG") => {
                    asked = Some(h.clone());
                    break;
                }
                Err(e) => refusals.push(format!("{h}: {e}")),
            }
        }
        let no_good_replica = refusals.iter().any(|r| r.contains("NOGOODSLAVE"));
        if asked.is_some() || !no_good_replica || Instant::now() > ask_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if asked.is_none() {
        return Err(Error::Timeout {
            what: format!("asking a sentinel to fail over ({})", refusals.join("; ")),
        });
    }
    let deadline = Instant::now() + ELECT;
    loop {
        let answers =
            client::sentinel_masters(&m.sentinels, s.sentinel_port, &s.password, &m.master_name)
                .await;
        if let Some(new) = not_me(&answers, &s.host) {
            return Ok(new.to_owned());
        }
        // The sentinels turn the old primary into a replica of the new one as they finish: that
        // is as good an answer as their own.
        if let Some(c) = me.as_deref_mut()
            && let Ok(rep) = c.replication().await
            && !rep.is_master
            && let Some(new) = rep.master_host
        {
            return Ok(new);
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: format!(
                    "waiting {}s for the sentinels to name a new primary ({answers:?})",
                    ELECT.as_secs()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Hands the primary role over before a planned stop: writes are paused, a replica reaches the
/// primary's offset, the sentinels fail over to it. A write acknowledged before the pause is then
/// on the new primary. On any failure the pause is lifted.
pub async fn hand_over(s: &Settings, m: &Members, me: &mut Conn) -> Result<String> {
    let _: () = me
        .run(redis::cmd("CLIENT").arg("PAUSE").arg(PAUSE_MS).arg("WRITE"))
        .await?;
    let result = async {
        let target = me.replication().await?.offset;
        let deadline = Instant::now() + CATCH_UP;
        let mut alone_since: Option<Instant> = None;
        loop {
            let rep = me.replication().await?;
            // Every replica stopping too (a whole-cluster restart): nobody can take the role.
            if rep.replicas.is_empty() {
                let since = *alone_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(1) {
                    return Err(Error::Timeout {
                        what: "the hand-over: no replica is online".into(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            alone_since = None;
            let behind: Vec<&(String, u64)> =
                rep.replicas.iter().filter(|(_, off)| *off < target).collect();
            // Every online replica caught up: whichever the sentinels promote holds every write.
            if !rep.replicas.is_empty() && behind.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "waiting {}s for the replicas to reach offset {target} (behind: {behind:?})",
                        CATCH_UP.as_secs()
                    ),
                });
            }
            // Replicas acknowledge their offset once a second on their own; ask now.
            let _: Result<i64> = me
                .run(redis::cmd("WAIT").arg(rep.replicas.len().max(1)).arg(100))
                .await;
        }
        sentinel_failover(s, m, Some(&mut *me)).await
    }
    .await;
    if result.is_err() {
        let _: Result<()> = me.run(redis::cmd("CLIENT").arg("UNPAUSE")).await;
    }
    result
}

/// A primary corrects sentinels that name another pod only after serving this long, so that it
/// never interferes with a failover the sentinels are finishing.
pub const SETTLED: Duration = Duration::from_secs(10);

/// Which sentinels a serving primary corrects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Correct {
    /// Those that know no master.
    Unset,
    /// Those too that name a pod which does not serve as primary.
    UnsetAndStale,
}

/// Which sentinels a primary that has served for `serving_for`, with `replicas_online` replicas
/// online, corrects now; `data` lists every data pod of the component, this one included.
///
/// A sentinel that knows no master runs no failover, so telling it cannot interfere with one;
/// but told before the replicas are online, it lists none of them until its next `INFO` of the
/// primary, 10 s later, and a planned stop in that window finds no replica to hand over to. Once
/// every other data pod is an online replica, the sentinel's first `INFO` lists them all, so a
/// new Cluster's sentinels learn its primary as soon as its replicas are in sync rather than
/// [`SETTLED`] later.
pub fn which_to_correct(
    serving_for: Duration,
    replicas_online: usize,
    data: &[String],
) -> Option<Correct> {
    if serving_for >= SETTLED {
        Some(Correct::UnsetAndStale)
    } else if replicas_online >= data.len().saturating_sub(1) {
        Some(Correct::Unset)
    } else {
        None
    }
}

/// Makes every sentinel monitor this pod, the serving primary, when it knows no master or (with
/// [`Correct::UnsetAndStale`]) names a pod that reports it is not serving as primary (a pod that
/// came back empty, or waits). A sentinel naming another serving primary, or a pod that does not
/// answer, is left alone: that is a failover the sentinels run.
pub async fn correct_sentinels(s: &Settings, m: &Members, http: &reqwest::Client, which: Correct) {
    for h in &m.sentinels {
        let answer = client::sentinel_master(h, s.sentinel_port, &s.password, &m.master_name).await;
        let wrong = match &answer {
            SentinelAnswer::Unreachable => continue,
            SentinelAnswer::NoMaster => true,
            SentinelAnswer::Master(named) if *named == s.host => continue,
            SentinelAnswer::Master(_) if which == Correct::Unset => continue,
            SentinelAnswer::Master(named) => {
                match peers::fetch(http, named, s.manager_port).await {
                    Peer::Reported(r) => !matches!(
                        r.phase,
                        Phase::Running {
                            role: Role::Primary,
                            ..
                        }
                    ),
                    Peer::Unreachable { .. } => false,
                }
            }
        };
        if !wrong {
            continue;
        }
        match monitor(s, m, h, &answer).await {
            Ok(()) => {
                tracing::info!(sentinel = %h, was = ?answer, "the sentinel now monitors this primary")
            }
            Err(e) => tracing::warn!(sentinel = %h, error = %e, "could not correct the sentinel"),
        }
    }
}

async fn monitor(s: &Settings, m: &Members, sentinel: &str, was: &SentinelAnswer) -> Result<()> {
    let mut c = client::connect(sentinel, s.sentinel_port, &s.password).await?;
    if matches!(was, SentinelAnswer::Master(_)) {
        let _: () = c
            .run(redis::cmd("SENTINEL").arg("REMOVE").arg(&m.master_name))
            .await?;
    }
    let _: () = c
        .run(
            redis::cmd("SENTINEL")
                .arg("MONITOR")
                .arg(&m.master_name)
                .arg(&s.host)
                .arg(s.port)
                .arg(m.quorum.max(1)),
        )
        .await?;
    let mut set = redis::cmd("SENTINEL");
    set.arg("SET")
        .arg(&m.master_name)
        .arg("auth-pass")
        .arg(&s.password);
    for (k, v) in SENTINEL_OPTIONS {
        set.arg(k).arg(v);
    }
    let _: () = c.run(&set).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_tells_unset_sentinels_once_its_replicas_are_online_and_corrects_others_later() {
        let data: Vec<String> = ["d-0", "d-1", "d-2"].map(String::from).into();
        let now = Duration::ZERO;
        assert_eq!(which_to_correct(now, 1, &data), None);
        assert_eq!(which_to_correct(now, 2, &data), Some(Correct::Unset));
        assert_eq!(
            which_to_correct(SETTLED - Duration::from_millis(1), 2, &data),
            Some(Correct::Unset)
        );
        assert_eq!(
            which_to_correct(SETTLED, 0, &data),
            Some(Correct::UnsetAndStale)
        );
        assert_eq!(
            which_to_correct(SETTLED, 2, &data),
            Some(Correct::UnsetAndStale)
        );
        // A component of one data pod has no replica to wait for.
        assert_eq!(
            which_to_correct(now, 0, &["d-0".to_owned()]),
            Some(Correct::Unset)
        );
    }

    #[test]
    fn a_new_primary_needs_a_majority_naming_it() {
        let m = |h: &str| SentinelAnswer::Master(h.into());
        assert_eq!(not_me(&[m("b"), m("b"), m("a")], "a"), Some("b"));
        assert_eq!(not_me(&[m("b"), m("a"), m("a")], "a"), None);
        assert_eq!(
            not_me(
                &[
                    m("b"),
                    SentinelAnswer::Unreachable,
                    SentinelAnswer::Unreachable
                ],
                "a"
            ),
            None
        );
    }
}
