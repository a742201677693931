//! What waits for a session whose peer stopped reading: the numbers of the prefixes
//! whose Loc-RIB changes it could not take (numbered as what peers are sent, see
//! `rib::export::sent`), or "everything" after a new export policy. Only prefixes are
//! kept, never UPDATEs, and the UPDATEs are built from the Loc-RIB of the moment the
//! session takes commands again.
//!
//! The prefixes themselves, in a `BTreeSet` per peer, were most of a reflector's
//! memory while its clients read slowly: a thousand clients each noting the 11,000
//! prefixes of the round (270 MB). A number is 4 bytes, and repeats are dropped
//! whenever the list has doubled.

/// The prefixes waiting for one peer.
#[derive(Debug, Default)]
pub struct Deferred {
    ids: Vec<u32>,
    /// Length of `ids` after repeats were last dropped.
    unique: usize,
    all: bool,
}

/// What a session that takes commands again is sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Nothing.
    Nothing,
    /// The changes of the prefixes of these numbers, sorted.
    Prefixes(Vec<u32>),
    /// The whole Loc-RIB.
    Everything,
}

impl Deferred {
    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        !self.all && self.ids.is_empty()
    }

    /// Notes changed prefixes by number.
    pub fn note(&mut self, ids: impl IntoIterator<Item = u32>) {
        if self.all {
            return;
        }
        self.ids.extend(ids);
        if self.ids.len() >= 2 * self.unique.max(512) {
            self.ids.sort_unstable();
            self.ids.dedup();
            self.unique = self.ids.len();
        }
    }

    /// Everything waits (a new export policy).
    pub fn everything(&mut self) {
        self.clear();
        self.all = true;
    }

    /// Forgets what waits.
    pub fn clear(&mut self) {
        self.ids = Vec::new();
        self.unique = 0;
        self.all = false;
    }

    /// Marks the numbers waiting: they must not be freed or given to other prefixes
    /// meanwhile.
    pub fn mark(&self, held: &mut [bool]) {
        for id in &self.ids {
            if let Some(h) = held.get_mut(*id as usize) {
                *h = true;
            }
        }
    }

    /// What waits, which then no longer does.
    pub fn take(&mut self) -> Waiting {
        let all = self.all;
        let mut ids = std::mem::take(&mut self.ids);
        self.clear();
        if all {
            Waiting::Everything
        } else if ids.is_empty() {
            Waiting::Nothing
        } else {
            ids.sort_unstable();
            ids.dedup();
            Waiting::Prefixes(ids)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_noted_once_and_everything_after_a_policy_change() {
        let mut d = Deferred::default();
        assert!(d.is_empty());
        assert_eq!(d.take(), Waiting::Nothing);
        d.note([7, 3, 7]);
        assert!(!d.is_empty());
        assert_eq!(d.take(), Waiting::Prefixes(vec![3, 7]));
        assert!(d.is_empty());

        // The same prefixes changing again and again take no more room.
        for _ in 0..100 {
            d.note(0..1000);
        }
        assert!(d.ids.len() < 2 * 1000, "{}", d.ids.len());
        let mut held = vec![false; 1001];
        d.mark(&mut held);
        assert_eq!(held.iter().filter(|h| **h).count(), 1000);
        assert!(matches!(d.take(), Waiting::Prefixes(v) if v.len() == 1000));

        d.note([1]);
        d.everything();
        d.note([2]);
        assert_eq!(d.take(), Waiting::Everything);
        d.everything();
        d.clear();
        assert!(d.is_empty());
    }
}
