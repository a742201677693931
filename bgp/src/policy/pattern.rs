//! The two kinds of pattern BIRD filters match that are more than a comparison:
//! shell patterns on interface names (`ifname ~ "cali*"`) and AS_PATH prefixes
//! (`bgp_path.first = N`, `bgp_path ~ [= N1 N2 * =]`).

use crate::wire::{AsPath, SegmentType};

/// BIRD's shell pattern match (`patmatch`): `*` stands for any run of characters,
/// `?` for any one character, everything else for itself; the whole name must match.
pub fn interface_matches(pattern: &str, name: &str) -> bool {
    // Evaluated for every route and peer an export filter sees: ASCII names (all of
    // them in practice) are matched as bytes, without copying either string.
    if pattern.is_ascii() && name.is_ascii() {
        return matches(pattern.as_bytes(), name.as_bytes(), b'*', b'?');
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    matches(&p, &n, '*', '?')
}

/// The match itself, over characters or bytes.
fn matches<T: PartialEq>(p: &[T], n: &[T], any_run: T, any_one: T) -> bool {
    // Greedy matching with one backtrack point (the last `*`), which is enough for
    // shell patterns and linear in practice.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some(c) if *c == any_run => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(c) if *c == any_one || Some(c) == n.get(ni) => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|c| *c == any_run))
}

/// Whether the path, after `prepend` (already in path order) is put in front,
/// begins with `asns`. One AS must be the first AS of a leading AS_SEQUENCE (BIRD's
/// `bgp_path.first`); several must each match one position of the path, where an
/// AS_SET is one position that any of its members matches (BIRD's path masks).
pub(super) fn path_starts_with(prepend: &[u32], path: Option<&AsPath>, asns: &[u32]) -> bool {
    let segments = path.map(|p| p.segments.as_slice()).unwrap_or_default();
    // Positions: each AS of a sequence is one, each set is one.
    let mut positions: Vec<&[u32]> = prepend.iter().map(std::slice::from_ref).collect();
    for s in segments {
        match s.kind {
            SegmentType::Sequence | SegmentType::ConfedSequence => {
                positions.extend(s.asns.iter().map(std::slice::from_ref));
            }
            SegmentType::Set | SegmentType::ConfedSet => positions.push(&s.asns),
        }
    }
    match asns {
        [] => true,
        [one] => {
            let first_in_sequence = prepend.first().copied().or_else(|| {
                segments.first().and_then(|s| match s.kind {
                    SegmentType::Sequence => s.asns.first().copied(),
                    _ => None,
                })
            });
            first_in_sequence == Some(*one)
        }
        many => {
            many.len() <= positions.len()
                && many
                    .iter()
                    .zip(&positions)
                    .all(|(want, pos)| pos.contains(want))
        }
    }
}
