//! What waits for a session whose peer stopped reading: the numbers of the prefixes
//! whose Loc-RIB changes it could not take (numbered as what peers are sent, see
//! `rib::export::sent`), or "everything" after a new export policy. Only prefixes are
//! kept, never UPDATEs, and the UPDATEs are built from the Loc-RIB of the moment the
//! session takes commands again.
//!
//! The prefixes themselves, in a `BTreeSet` per peer, were most of a reflector's
//! memory while its clients read slowly: a thousand clients each noting the 11,000
//! prefixes of the round (270 MB). A number is 4 bytes, and repeats are dropped
//! whenever the list has doubled; once the list would be larger than a bit per number
//! up to the highest noted, it becomes that bitset (the same thousand clients: 45 MB
//! as lists, 1.4 MB as bitsets).

/// The prefixes waiting for one peer.
#[derive(Debug, Default)]
pub struct Deferred {
    ids: Vec<u32>,
    /// Length of `ids` after repeats were last dropped.
    unique: usize,
    /// Instead of `ids` once that is smaller: bit `id` set for each number noted.
    bits: Vec<u64>,
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
        !self.all && self.ids.is_empty() && self.bits.is_empty()
    }

    /// Notes changed prefixes by number.
    pub fn note(&mut self, ids: impl IntoIterator<Item = u32>) {
        if self.all {
            return;
        }
        if !self.bits.is_empty() {
            ids.into_iter().for_each(|id| set_bit(&mut self.bits, id));
            return;
        }
        self.ids.extend(ids);
        if self.ids.len() >= 2 * self.unique.max(512) {
            self.ids.sort_unstable();
            self.ids.dedup();
            self.unique = self.ids.len();
            // 4 bytes a number listed against a bit for every number up to the last.
            let top = self.ids.last().map_or(0, |id| *id as usize);
            if self.ids.len() * 32 > top + 64 {
                let mut bits = Vec::new();
                self.ids.iter().for_each(|id| set_bit(&mut bits, *id));
                self.ids = Vec::new();
                self.unique = 0;
                self.bits = bits;
            }
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
        self.bits = Vec::new();
        self.all = false;
    }

    /// The numbers noted, repeats included while they are a list.
    fn numbers(&self) -> impl Iterator<Item = u32> + '_ {
        let listed = self.ids.iter().copied();
        let set = self.bits.iter().zip(0u32..).flat_map(|(word, w)| {
            (0..64u32)
                .filter(move |b| word & (1u64 << b) != 0)
                .map(move |b| w * 64 + b)
        });
        listed.chain(set)
    }

    /// Marks the numbers waiting: they must not be freed or given to other prefixes
    /// meanwhile.
    pub fn mark(&self, held: &mut [bool]) {
        for id in self.numbers() {
            if let Some(h) = held.get_mut(id as usize) {
                *h = true;
            }
        }
    }

    /// What waits, at most `n` prefixes (the lowest numbers); the rest still waits.
    /// Called once per piece of a backlog that can be the whole table, so the rest is
    /// left in place, not collected and noted again.
    pub fn take(&mut self, n: usize) -> Waiting {
        if self.all {
            self.clear();
            return Waiting::Everything;
        }
        let ids = if self.bits.is_empty() {
            self.ids.sort_unstable();
            self.ids.dedup();
            let rest = self.ids.split_off(n.min(self.ids.len()));
            self.unique = rest.len();
            std::mem::replace(&mut self.ids, rest)
        } else {
            let ids: Vec<u32> = self.numbers().take(n).collect();
            for id in &ids {
                if let Some(w) = self.bits.get_mut((id / 64) as usize) {
                    *w &= !(1u64 << (id % 64));
                }
            }
            // Taken from the front: once the last word is empty, all are.
            if self.bits.last().is_none_or(|w| *w == 0) {
                self.bits = Vec::new();
            }
            ids
        };
        if ids.is_empty() {
            Waiting::Nothing
        } else {
            Waiting::Prefixes(ids)
        }
    }
}

/// Sets bit `id`, growing `bits` to hold it.
fn set_bit(bits: &mut Vec<u64>, id: u32) {
    let word = (id / 64) as usize;
    if bits.len() <= word {
        bits.resize(word + 1, 0);
    }
    if let Some(w) = bits.get_mut(word) {
        *w |= 1u64 << (id % 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_noted_once_and_everything_after_a_policy_change() {
        let mut d = Deferred::default();
        assert!(d.is_empty());
        assert_eq!(d.take(usize::MAX), Waiting::Nothing);
        d.note([7, 3, 7]);
        assert!(!d.is_empty());
        assert_eq!(d.take(usize::MAX), Waiting::Prefixes(vec![3, 7]));
        assert!(d.is_empty());

        // The same prefixes changing again and again take no more room.
        for _ in 0..100 {
            d.note(0..1000);
        }
        assert!(d.ids.len() < 2 * 1000, "{}", d.ids.len());
        let mut held = vec![false; 1001];
        d.mark(&mut held);
        assert_eq!(held.iter().filter(|h| **h).count(), 1000);
        assert!(matches!(d.take(usize::MAX), Waiting::Prefixes(v) if v.len() == 1000));

        // Many numbers: kept as bits, given back as the same sorted list.
        let many: Vec<u32> = (0..5000).map(|i| i * 3 + 1).collect();
        d.note(many.iter().rev().copied());
        d.note([2, 6, 2]);
        assert!(!d.bits.is_empty() && d.ids.is_empty(), "a bitset by now");
        assert!(d.bits.len() <= 15_001 / 64 + 1);
        let mut held = vec![false; 15_010];
        d.mark(&mut held);
        assert_eq!(held.iter().filter(|h| **h).count(), 5002);
        let mut want = many.clone();
        want.extend([2, 6]);
        want.sort_unstable();
        assert_eq!(d.take(usize::MAX), Waiting::Prefixes(want));
        assert!(d.is_empty());

        // Taken a piece at a time: the lowest numbers first, the rest still waits.
        d.note([9, 2, 5, 2, 7]);
        assert_eq!(d.take(2), Waiting::Prefixes(vec![2, 5]));
        assert_eq!(d.take(2), Waiting::Prefixes(vec![7, 9]));
        assert_eq!(d.take(2), Waiting::Nothing);
        assert!(d.is_empty());

        // The same from a bitset, noting more while it is being taken.
        d.note(many.iter().copied());
        assert!(!d.bits.is_empty(), "a bitset");
        assert_eq!(d.take(2), Waiting::Prefixes(vec![1, 4]));
        d.note([0, 4]);
        assert_eq!(d.take(3), Waiting::Prefixes(vec![0, 4, 7]));
        let mut taken = 5;
        while let Waiting::Prefixes(ids) = d.take(1024) {
            assert!(ids.len() <= 1024);
            taken += ids.len();
        }
        assert_eq!(
            taken,
            5000 + 2,
            "every number once, plus 0 and 4 noted again"
        );
        assert!(d.is_empty());

        // Few numbers spread far apart stay a list.
        d.note((0..600).map(|i| i * 100_000));
        assert!(d.bits.is_empty(), "a list is smaller");

        d.note([1]);
        d.everything();
        d.note([2]);
        assert_eq!(d.take(usize::MAX), Waiting::Everything);
        d.everything();
        d.clear();
        assert!(d.is_empty());
    }
}
