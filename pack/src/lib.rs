//! Rebuilding a `std::collections::BTreeMap` with full nodes, for tern's tables (the
//! RIB's prefixes, the FIB task's wanted routes).
//!
//! A table that arrives in key order (a peer's table usually does) leaves every node
//! of std's B-tree about half full: a full node splits into 6 and 5 of its 11 entries
//! and only the right one grows again. The RIB's table took 68 bytes per prefix at
//! 100,000 prefixes instead of 36 packed. std builds full nodes only in `from_iter`
//! (which collects and sorts a `Vec` of every entry first) and in `append` (which
//! merges two maps); no crate repacks a std map, and replacing the maps' type would
//! touch every use, so these few lines are written here.
//!
//! Packed *and* given back: packing the whole map through `append` frees each old
//! node as it goes and the allocator hands it straight back for a new one, so live
//! and free nodes alternate and no page is freed. Moving every entry out first
//! (`from_iter`) frees whole pages, but holds a `Vec` of the whole table and the
//! sort's scratch (60 MB at a million prefixes). So [`pack`] moves out and rebuilds
//! a quarter of the map at a time, each from the space its old nodes left, then joins
//! the packed quarters pairwise with `append`: a packed map frees a node for each
//! node the join allocates, so the join keeps them where they are. Quarters, not
//! smaller pieces: each level of joins moves every entry again (a million entries:
//! 46 ms in one piece, 70 in quarters, 166 in pieces of 16,384).

use std::collections::BTreeMap;

/// Entries moved out at a time at least (smaller maps are rebuilt whole).
pub const PIECE_MIN: usize = 16_384;

/// Rebuilds `map` with full nodes (all but the right edge of each level), keeping
/// every entry. Linear in the map's size: about 6 ms at 100,000 entries, 70 ms at a
/// million; 15 bytes per entry held meanwhile (a quarter of the entries, 40 bytes
/// each in the RIB, and the sort's scratch).
pub fn pack<K: Ord + Clone, V>(map: &mut BTreeMap<K, V>) {
    let size = (map.len() / 4 + 1).max(PIECE_MIN);
    let mut rest = std::mem::take(map);
    let mut pieces = Vec::new();
    // From the right, so each cut finds its key in `size` steps.
    while rest.len() > size {
        let Some(cut) = rest.keys().nth_back(size - 1).cloned() else {
            break;
        };
        let mut piece = rest.split_off(&cut);
        rebuild(&mut piece);
        pieces.push(piece);
    }
    rebuild(&mut rest);
    pieces.push(rest);
    // Pairwise, so each entry is moved log2(pieces) times, not once per piece.
    while pieces.len() > 1 {
        let mut joined = Vec::with_capacity(pieces.len().div_ceil(2));
        let mut it = pieces.into_iter();
        while let Some(mut a) = it.next() {
            if let Some(mut b) = it.next() {
                a.append(&mut b);
            }
            joined.push(a);
        }
        pieces = joined;
    }
    *map = pieces.pop().unwrap_or_default();
}

/// Moves every entry out, then builds the map again from them in one go.
fn rebuild<K: Ord, V>(map: &mut BTreeMap<K, V>) {
    let mut entries = Vec::with_capacity(map.len());
    entries.extend(std::mem::take(map));
    *map = entries.into_iter().collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Any map, including one of several pieces and one piece plus a few, keeps
        /// its entries and order, and takes insertions and removals afterwards.
        #[test]
        fn packing_keeps_every_entry(
            keys in proptest::collection::btree_set(any::<u32>(), 0..5 * PIECE_MIN + 7),
            extra in any::<u32>(),
        ) {
            let mut map: BTreeMap<u32, u64> = keys.iter().map(|k| (*k, u64::from(*k) * 3)).collect();
            let copy = map.clone();
            pack(&mut map);
            prop_assert_eq!(&map, &copy);
            prop_assert_eq!(map.len(), copy.len());
            map.insert(extra, 1);
            prop_assert_eq!(map.get(&extra), Some(&1));
            if let Some(first) = keys.iter().next() {
                prop_assert!(map.remove(first).is_some());
            }
        }
    }
}
