//! The open-file limit (RLIMIT_NOFILE) and what it means for the number of BGP peers.
//! Every session holds a TCP socket, so a large node-to-node mesh runs out of file
//! descriptors long before it runs out of memory: with the usual soft limit of 1,024 a
//! node stops accepting sessions at about 500 peers. tern raises its soft limit to the
//! hard limit at start (the unit's `LimitNOFILE` sets the hard limit), says so on
//! stderr when it cannot, and logs a warning naming both numbers when the configured
//! peers do not fit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Descriptors one peer may hold: its session's socket, and a second one while a
/// connection collision (both sides dialling at once, RFC 4271 6.8) is resolved.
pub const FDS_PER_PEER: u64 = 2;

/// Descriptors tern holds apart from sessions, with room to spare: the BGP listeners
/// (one per family and address), netlink sockets (routes, links, neighbours), the
/// datastore's connections and watches (etcd, the Kubernetes API), the control socket
/// and its clients, the metrics listener and its scrapers, the runtime's epoll and
/// event descriptors, standard streams and files being read.
pub const RESERVED_FDS: u64 = 256;

/// The limit before and after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    /// The soft limit tern started with.
    pub before: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit (the ceiling an unprivileged process may raise the soft one to).
    pub hard: u64,
}

/// How many peers fit in `limit` open files (0 when not even the reserve fits).
pub fn peers_within(limit: u64) -> u64 {
    limit.saturating_sub(RESERVED_FDS) / FDS_PER_PEER
}

/// The open files `peers` sessions need.
pub fn files_for(peers: u64) -> u64 {
    peers
        .saturating_mul(FDS_PER_PEER)
        .saturating_add(RESERVED_FDS)
}

/// Raises the soft RLIMIT_NOFILE to the hard limit and remembers the result for
/// [`check_peers`]. Runs before logging is set up (`tern run` reads its file first), so
/// the caller prints the error. `Err` names the limits and the reason.
#[cfg(target_os = "linux")]
pub fn raise() -> Result<NofileLimit, String> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the open-file limit (RLIMIT_NOFILE): {e}"))?;
    // An unlimited hard limit is not a valid soft RLIMIT_NOFILE on Linux (the kernel
    // caps it at fs.nr_open); stay at the soft limit rather than guess that number.
    let target = if hard == RLIM_INFINITY { soft } else { hard };
    let mut limit = NofileLimit {
        before: soft,
        soft,
        hard,
    };
    if target > soft {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            let _ = LIMIT.set(limit);
            RAISE_FAILED.store(true, Ordering::Relaxed);
            return Err(format!(
                "cannot raise the open-file limit (RLIMIT_NOFILE) from {soft} to the hard limit {hard}: {e}; \
                 it stays at {soft}, room for about {} BGP peers",
                peers_within(soft)
            ));
        }
        limit.soft = target;
    }
    let _ = LIMIT.set(limit);
    Ok(limit)
}

/// What [`raise`] left; unset until it ran (no check then, as on Windows).
static LIMIT: OnceLock<NofileLimit> = OnceLock::new();
/// Whether [`raise`] could not raise the soft limit.
static RAISE_FAILED: AtomicBool = AtomicBool::new(false);
/// The peer count last checked, so a reload with the same peers says nothing new.
static CHECKED: AtomicU64 = AtomicU64::new(u64::MAX);

/// Checks the configured number of peers against the open-file limit, with each
/// accepted configuration: the first time it logs the limit (info), and whenever the
/// peer count changes to one that does not fit it warns with both numbers.
pub fn check_peers(peers: usize) {
    let Some(limit) = LIMIT.get() else {
        return;
    };
    let peers = u64::try_from(peers).unwrap_or(u64::MAX);
    let last = CHECKED.swap(peers, Ordering::Relaxed);
    if last == peers {
        return;
    }
    if last == u64::MAX {
        let line = format!(
            "open-file limit (RLIMIT_NOFILE): soft {} (was {} at start), hard {}: room for about {} BGP peers",
            limit.soft,
            limit.before,
            limit.hard,
            peers_within(limit.soft)
        );
        // Raising failed (said on stderr at start, before logging): a warning.
        if RAISE_FAILED.load(Ordering::Relaxed) {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }
    if let Some(msg) = too_few_files(limit.soft, peers) {
        tracing::warn!("{msg}");
    }
}

/// The warning for `peers` under a soft limit of `soft`, when they do not fit.
pub fn too_few_files(soft: u64, peers: u64) -> Option<String> {
    let need = files_for(peers);
    (soft > 0 && need > soft).then(|| {
        format!(
            "the open-file limit (RLIMIT_NOFILE) is {soft}, room for about {} BGP peers, but {peers} are configured \
             (they need about {need}): sessions beyond it fail with 'Too many open files'; raise LimitNOFILE in \
             tern.service (or the hard limit of whatever starts tern)",
            peers_within(soft)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arithmetic_of_peers_and_files() {
        // The unit's LimitNOFILE=65536 holds a dual-stack 5,000-node mesh (9,998
        // sessions) with room to spare; the usual 1,024 holds a few hundred.
        assert!(peers_within(65_536) >= 2 * 4_999);
        assert_eq!(peers_within(1_024), 384);
        assert_eq!(peers_within(100), 0);
        assert_eq!(files_for(384), 1_024);
        assert_eq!(files_for(u64::MAX), u64::MAX);
    }

    #[test]
    fn a_mesh_too_large_for_the_limit_is_named_with_both_numbers() {
        assert_eq!(too_few_files(65_536, 9_998), None);
        assert_eq!(too_few_files(0, 9_998), None, "no limit known: no claim");
        let msg = too_few_files(1_024, 9_998).unwrap_or_default();
        assert!(
            msg.contains("is 1024, room for about 384 BGP peers"),
            "{msg}"
        );
        assert!(msg.contains("9998 are configured"), "{msg}");
        assert!(msg.contains("LimitNOFILE"), "{msg}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn raise_leaves_the_soft_limit_at_the_hard_one() {
        use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
        let l = raise().unwrap_or_else(|e| panic!("{e}"));
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((l.soft, l.hard), (soft, hard));
        assert!(l.soft >= l.before);
        if hard != RLIM_INFINITY {
            assert_eq!(soft, hard);
        }
    }
}
