//! The paths a peer sent that did not enter the RIB, each with why: rejected by its
//! import policy (the statement that did it), by the RFC import checks (AS path loop,
//! first AS, next hop is us, reflection loops) or treated as withdrawn for a malformed
//! attribute (RFC 7606). `tern routes --received PEER` shows them beside the paths that
//! were accepted, as BIRD's `import keep filtered` does.
//!
//! Bounded: at most [`KEPT_PER_PEER`] paths per peer are kept, so a peer that sends a
//! full table the policy refuses cannot grow tern's memory; beyond that they are only
//! counted. An entry goes when the peer withdraws the prefix or announces it again and
//! it is accepted, and all of them go with the session. A new import policy judges the
//! kept paths that the old one rejected again, so they can enter the RIB without the
//! peer sending them (a soft reconfiguration inbound for what was kept). Attributes are shared: one
//! `Arc` per UPDATE, one reason text per UPDATE or policy statement.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::rib::import::Rejection;
use crate::wire::{ErrorAction, Family, MpNextHop, MpReach, Nlri, PathAttributes, Update};

use super::policy::Refused;

/// Rejected paths kept per peer; more are counted, not kept.
pub const KEPT_PER_PEER: usize = 10_000;

/// One rejected path as the peer sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedPath {
    /// Its attributes as received (NEXT_HOP included).
    pub attrs: Arc<PathAttributes>,
    /// Its next hop (the MP_REACH one for IPv6), if it had a usable one.
    pub next_hop: Option<IpAddr>,
    /// Why it did not enter the RIB, in words.
    pub reason: Arc<str>,
    /// The import policy rejected it (not an RFC check or a malformed attribute): a
    /// new import policy judges it again.
    pub by_policy: bool,
}

/// What `tern routes --received` reads of one peer's rejected paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectedView {
    /// The kept paths by (prefix, ADD-PATH id), in prefix order.
    pub paths: Vec<(IpNet, u32, RejectedPath)>,
    /// Rejections not kept this session because [`KEPT_PER_PEER`] were kept already
    /// (some of those paths may have been withdrawn since).
    pub not_kept: u64,
}

/// What one peer sent: the paths of it the RIB holds (accepted, attributes as
/// import policy left them) and the rejected ones kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// Accepted paths, in prefix order, each with whether it is its prefix's best.
    pub accepted: Vec<(IpNet, Arc<crate::rib::Path>, bool)>,
    /// Rejected paths.
    pub rejected: RejectedView,
}

/// One peer's rejected paths (this session).
#[derive(Debug, Default)]
pub(super) struct Rejected {
    paths: BTreeMap<(IpNet, u32), RejectedPath>,
    /// Rejections not kept this session (the store was full).
    not_kept: u64,
}

/// The reason text of a policy statement's rejection.
pub(super) fn policy_reason(label: &str) -> String {
    if label == "default" {
        "import policy: no statement accepted it (the policy's default)".into()
    } else {
        format!("import policy: {label}")
    }
}

/// The UPDATE that announces a kept path again: classic NLRI with NEXT_HOP for IPv4,
/// MP_REACH for IPv6; `None` without a usable next hop.
fn announcement(prefix: IpNet, path_id: u32, r: &RejectedPath) -> Option<Update> {
    let nlri = Nlri {
        prefix,
        path_id: (path_id != 0).then_some(path_id),
    };
    match (prefix, r.next_hop?) {
        (IpNet::V4(_), IpAddr::V4(hop)) => Some(Update {
            attributes: PathAttributes {
                next_hop: Some(hop),
                ..(*r.attrs).clone()
            },
            nlri: vec![nlri],
            ..Update::default()
        }),
        (IpNet::V6(_), IpAddr::V6(global)) => Some(Update {
            attributes: PathAttributes {
                next_hop: None,
                ..(*r.attrs).clone()
            },
            mp_reach: Some(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: MpNextHop::V6 {
                    global,
                    link_local: None,
                },
                nlri: vec![nlri],
                unparsed: None,
            }),
            ..Update::default()
        }),
        _ => None,
    }
}

/// What a rejected NLRI of `u` looks like: its next hop.
fn next_hop_of(u: &Update, mp: bool) -> Option<IpAddr> {
    if mp {
        match u.mp_reach.as_ref().map(|m| &m.next_hop) {
            Some(MpNextHop::V4(a)) => Some(IpAddr::V4(*a)),
            Some(MpNextHop::V6 { global, .. }) => Some(IpAddr::V6(*global)),
            _ => None,
        }
    } else {
        u.attributes.next_hop.map(IpAddr::V4)
    }
}

/// Every NLRI `u` announces, each with whether it came in MP_REACH.
fn announced(u: &Update) -> impl Iterator<Item = (&Nlri, bool)> {
    let mp = u
        .mp_reach
        .iter()
        .flat_map(|m| m.nlri.iter().map(|n| (n, true)));
    u.nlri.iter().map(|n| (n, false)).chain(mp)
}

impl Rejected {
    /// After `u` was imported: what it withdrew or announced is no longer rejected,
    /// unless it was again. `check` is the RFC check that failed for the whole UPDATE,
    /// `refused` the prefixes the import policy rejected.
    pub fn after_update(&mut self, u: &Update, check: Option<&Rejection>, refused: &[Refused]) {
        if !self.paths.is_empty() {
            let withdrawn = u
                .withdrawn
                .iter()
                .chain(u.mp_unreach.iter().flat_map(|m| &m.withdrawn));
            for n in withdrawn.chain(announced(u).map(|(n, _)| n)) {
                self.paths.remove(&(n.prefix, n.path_id.unwrap_or(0)));
            }
        }
        let whole: Option<String> = if u.treat_as_withdraw() {
            // The reasons only: the bytes are in the log line of the first one.
            let errors: Vec<&str> = u
                .errors
                .iter()
                .filter(|e| e.action == ErrorAction::TreatAsWithdraw)
                .map(|e| e.reason.as_str())
                .collect();
            Some(format!(
                "malformed UPDATE, treated as withdrawn (RFC 7606): {}",
                errors.join("; ")
            ))
        } else {
            check.map(ToString::to_string)
        };
        if whole.is_none() && refused.is_empty() {
            return;
        }
        let attrs = Arc::new(u.attributes.clone());
        if let Some(text) = whole {
            let reason: Arc<str> = text.into();
            for (n, mp) in announced(u) {
                self.keep(n.prefix, n.path_id.unwrap_or(0), || RejectedPath {
                    attrs: Arc::clone(&attrs),
                    next_hop: next_hop_of(u, mp),
                    reason: Arc::clone(&reason),
                    by_policy: false,
                });
            }
            return;
        }
        // One reason text per statement, not per prefix.
        let mut reasons: BTreeMap<&str, Arc<str>> = BTreeMap::new();
        for r in refused {
            let reason = reasons
                .entry(r.label.as_str())
                .or_insert_with(|| policy_reason(&r.label).into());
            // IPv4 comes in MP_REACH only from a peer that sends no NEXT_HOP.
            let mp = !r.prefix.addr().is_ipv4() || u.attributes.next_hop.is_none();
            let path = RejectedPath {
                attrs: Arc::clone(&attrs),
                next_hop: next_hop_of(u, mp),
                reason: Arc::clone(reason),
                by_policy: true,
            };
            self.keep(r.prefix, r.path_id, || path);
        }
    }

    /// Keeps one rejected path (replacing an earlier one of the same prefix and path
    /// id), or counts it when the store is full.
    pub fn keep(&mut self, prefix: IpNet, path_id: u32, path: impl FnOnce() -> RejectedPath) {
        let key = (prefix, path_id);
        if self.paths.len() < KEPT_PER_PEER || self.paths.contains_key(&key) {
            self.paths.insert(key, path());
        } else {
            self.not_kept += 1;
        }
    }

    /// The kept paths the import policy rejected, as the UPDATEs that announce them
    /// again (one each), for a new import policy to judge without the peer sending
    /// anything; and how many rejections were not kept (those need the peer).
    pub fn policy_rejected(&self) -> (Vec<Update>, u64) {
        let again = self
            .paths
            .iter()
            .filter(|(_, r)| r.by_policy)
            .filter_map(|((prefix, id), r)| announcement(*prefix, *id, r))
            .collect();
        (again, self.not_kept)
    }

    /// Forgets every path (the session went down).
    pub fn clear(&mut self) {
        self.paths.clear();
        self.not_kept = 0;
    }

    /// A copy for `tern routes --received`, only `prefix` if given.
    pub fn view(&self, prefix: Option<IpNet>) -> RejectedView {
        let paths = self
            .paths
            .iter()
            .filter(|((p, _), _)| prefix.is_none_or(|w| *p == w))
            .map(|((p, id), r)| (*p, *id, r.clone()))
            .collect();
        RejectedView {
            paths,
            not_kept: self.not_kept,
        }
    }
}

#[cfg(test)]
#[path = "rejected_tests.rs"]
mod tests;
