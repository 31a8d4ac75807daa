//! What a dataset holds, in Redis' own terms: the replication histories it has been part of.
//!
//! A replication id names one history of writes; the offset counts the bytes of that history a
//! server has applied. The same id and a larger offset contain the smaller. Ids change when a
//! replica is promoted (the old id is kept as `master_replid2` up to the switch offset), and when a
//! server starts from its AOF (a new random id at offset 0, over the dataset it loaded). Neither
//! change is persisted by Redis in a form that survives an AOF boot, so the instance manager keeps
//! its own record: every id this dataset has carried, with the furthest offset it reached under
//! it. "Dataset A holds everything dataset B held" is then a question about B's newest entry.

use serde::{Deserialize, Serialize};

/// Redis keeps a one-step memory of ids; the record keeps a few more so that a replica that was
/// away through several restarts of its primary is still recognised.
const MAX_ENTRIES: usize = 16;

/// One replication history and how far this dataset got in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The 40-character replication id.
    pub id: String,
    /// The furthest offset this dataset reached under `id`.
    pub offset: u64,
}

/// The histories a dataset has been part of, oldest first; the last entry is the current one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// Entries, oldest first.
    pub entries: Vec<Entry>,
}

/// What `INFO replication` says about the history a running server is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveIdentity {
    /// `master_replid`.
    pub id: String,
    /// `master_repl_offset`.
    pub offset: u64,
    /// `master_replid2`: the id before the last switch (all zeros when none).
    pub id2: String,
    /// `second_repl_offset`: the first offset that is *not* part of `id2` (-1 when none).
    pub second_offset: i64,
}

impl LiveIdentity {
    /// Reads the identity from `INFO replication` text.
    pub fn from_info(info: &str) -> Option<Self> {
        let field = |k: &str| crate::client::info_field(info, k).map(str::to_owned);
        Some(Self {
            id: field("master_replid").filter(|v| v.len() == 40)?,
            offset: field("master_repl_offset")?.parse().ok()?,
            id2: field("master_replid2").unwrap_or_default(),
            second_offset: field("second_repl_offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1),
        })
    }
}

fn is_null_id(id: &str) -> bool {
    id.is_empty() || id.bytes().all(|b| b == b'0')
}

impl Lineage {
    /// The newest entry: what this dataset is known to hold.
    pub fn head(&self) -> Option<&Entry> {
        self.entries.last()
    }

    /// Whether this dataset holds everything up to `offset` of history `id`.
    pub fn contains(&self, e: &Entry) -> bool {
        self.entries
            .iter()
            .any(|mine| mine.id == e.id && mine.offset >= e.offset)
    }

    /// Whether this dataset holds everything `other` is known to hold. An empty record claims
    /// nothing, so it is contained in every lineage.
    pub fn contains_lineage(&self, other: &Lineage) -> bool {
        other.head().is_none_or(|h| self.contains(h))
    }

    /// Records what a running server reports. Returns whether the record changed.
    pub fn observe(&mut self, live: &LiveIdentity) -> bool {
        if let Some(last) = self.entries.last_mut()
            && last.id == live.id
        {
            if live.offset > last.offset {
                last.offset = live.offset;
                return true;
            }
            return false;
        }
        // A switch: the previous id ran up to second_offset - 1. Offsets continue, so the entry
        // for the old id is closed at the switch point, never beyond what was observed.
        if !is_null_id(&live.id2)
            && live.second_offset > 0
            && let Some(prev) = self.entries.iter_mut().rev().find(|e| e.id == live.id2)
        {
            let end = u64::try_from(live.second_offset - 1).unwrap_or(0);
            prev.offset = prev.offset.max(end);
        }
        match self.entries.iter().position(|e| e.id == live.id) {
            // An id seen before (a replica that re-linked to a master it once followed): move it
            // to the head, keeping the furthest offset.
            Some(i) => {
                let mut e = self.entries.remove(i);
                e.offset = e.offset.max(live.offset);
                self.entries.push(e);
            }
            None => self.entries.push(Entry {
                id: live.id.clone(),
                offset: live.offset,
            }),
        }
        if self.entries.len() > MAX_ENTRIES {
            let drop = self.entries.len() - MAX_ENTRIES;
            self.entries.drain(..drop);
        }
        true
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn id(c: char) -> String {
        std::iter::repeat_n(c, 40).collect()
    }

    pub(crate) fn lineage(es: &[(char, u64)]) -> Lineage {
        Lineage {
            entries: es
                .iter()
                .map(|(c, o)| Entry {
                    id: id(*c),
                    offset: *o,
                })
                .collect(),
        }
    }

    fn live(c: char, off: u64, c2: Option<(char, i64)>) -> LiveIdentity {
        LiveIdentity {
            id: id(c),
            offset: off,
            id2: c2.map(|(c, _)| id(c)).unwrap_or_else(|| id('0')),
            second_offset: c2.map(|(_, o)| o).unwrap_or(-1),
        }
    }

    #[test]
    fn same_history_larger_offset_contains_smaller() {
        let a = lineage(&[('a', 1000)]);
        let b = lineage(&[('a', 900)]);
        assert!(a.contains_lineage(&b));
        assert!(!b.contains_lineage(&a));
        assert!(a.contains_lineage(&Lineage::default()));
    }

    #[test]
    fn a_restart_from_aof_keeps_the_old_history() {
        let mut l = lineage(&[('a', 1000)]);
        assert!(l.observe(&live('b', 0, None)));
        assert!(l.observe(&live('b', 50, None)));
        assert!(l.contains(&Entry {
            id: id('a'),
            offset: 1000
        }));
        assert_eq!(l.head().map(|e| e.offset), Some(50));
        assert!(!l.observe(&live('b', 40, None)), "offsets never go back");
    }

    #[test]
    fn a_promotion_closes_the_old_id_at_the_switch_point() {
        let mut l = lineage(&[('a', 990)]);
        l.observe(&live('b', 1010, Some(('a', 1001))));
        assert_eq!(l, lineage(&[('a', 1000), ('b', 1010)]));
    }

    #[test]
    fn parses_info_replication() {
        let info = "# Replication\r\nrole:master\r\nmaster_replid:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:42\r\nsecond_repl_offset:-1\r\n";
        let l = LiveIdentity::from_info(info).expect("parsed");
        assert_eq!(l.offset, 42);
        assert_eq!(l.second_offset, -1);
        assert!(LiveIdentity::from_info("role:master\r\n").is_none());
    }

    #[test]
    fn the_record_stays_bounded() {
        let mut l = Lineage::default();
        for i in 0..40u64 {
            l.observe(&LiveIdentity {
                id: format!("{i:040}"),
                offset: i,
                id2: String::new(),
                second_offset: -1,
            });
        }
        assert_eq!(l.entries.len(), MAX_ENTRIES);
        assert_eq!(l.head().map(|e| e.offset), Some(39));
    }
}
