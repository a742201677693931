//! Prefix limits (RFC 4486 Cease / Maximum Number of Prefixes Reached), pure: given
//! how many paths one peer and all peers hold after an UPDATE, whether that peer's
//! session ends, with what limit and in which words. The core resets the session and
//! drops the peer's routes at once; the session stays down [`LIMIT_HOLD_DOWN`] or longer.

use super::LIMIT_HOLD_DOWN;

/// A limit was passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    /// The limit to put into the NOTIFICATION (RFC 4486's data field).
    pub limit: u32,
    /// Why, in plain words, with what happens next.
    pub why: String,
}

/// After an UPDATE: the peer holds `held` paths (limit `per_peer`), all peers together
/// `total` (limit `all_peers`). The peer's own limit is named first when both are passed.
pub fn check(
    held: u64,
    total: u64,
    per_peer: Option<u32>,
    all_peers: Option<u64>,
) -> Option<Breach> {
    let (limit, why) = match (per_peer, all_peers) {
        (Some(max), _) if held > u64::from(max) => (
            max,
            format!("it sent {held} paths, more than its limit of {max}"),
        ),
        (_, Some(max)) if total > max => (
            u32::try_from(max).unwrap_or(u32::MAX),
            format!(
                "the table holds {total} paths from all peers, more than the limit of {max} (this peer sent {held})"
            ),
        ),
        _ => return None,
    };
    Some(Breach {
        limit,
        why: format!(
            "{why}; its routes are dropped and the session stays down for at least {} s",
            LIMIT_HOLD_DOWN.as_secs()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_limit_is_fine_one_more_is_not() {
        assert_eq!(check(2, 2, Some(2), Some(2)), None);
        let b = check(3, 3, Some(2), None).unwrap();
        assert_eq!(b.limit, 2);
        assert!(b
            .why
            .starts_with("it sent 3 paths, more than its limit of 2"));
        let t = check(1, 5, Some(2), Some(4)).unwrap();
        assert_eq!(t.limit, 4);
        assert!(t.why.contains("the table holds 5 paths"));
        assert_eq!(check(u64::MAX, u64::MAX, None, None), None);
    }

    #[test]
    fn a_huge_total_limit_saturates_in_the_notification() {
        let b = check(1, u64::MAX, None, Some(u64::MAX - 1)).unwrap();
        assert_eq!(b.limit, u32::MAX);
    }
}
