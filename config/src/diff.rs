//! The difference between two intents, so the daemon reconfigures only what changed: a
//! session whose own settings are the same is never reset by an edit elsewhere.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::intent::{Intent, Origination, PeerIntent};

/// What changed from one intent to the next.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IntentDiff {
    /// Router id, AS or listener changed: every session must restart.
    pub identity_changed: bool,
    /// New sessions.
    pub peers_added: Vec<PeerIntent>,
    /// Sessions to close, by address.
    pub peers_removed: Vec<IpAddr>,
    /// Sessions whose settings changed (close and reopen with the new ones).
    pub peers_changed: Vec<PeerIntent>,
    /// Sessions whose only change is where they came from, their role name or their
    /// BGPFilters; the session itself continues (a filter change swaps the peer's
    /// compiled policy in place: RFC 4271 needs no reset for a policy change).
    pub peers_relabelled: Vec<PeerIntent>,
    /// Prefixes to originate (new, or with new attributes).
    pub originated: BTreeMap<IpNet, Origination>,
    /// Prefixes no longer originated.
    pub withdrawn: Vec<IpNet>,
    /// Host routes to peers (`reachableBy`) to add or change (the gateway), or to
    /// remove (`None`).
    pub peer_routes: Vec<(IpNet, Option<IpAddr>)>,
    /// Pools, ignored interfaces, own blocks, the route priority or the peer routes
    /// changed: export/import decisions and kernel routes must be re-evaluated for
    /// every route.
    pub policy_changed: bool,
}

impl IntentDiff {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == IntentDiff::default()
    }
}

/// Computes what turns `old` into `new`.
pub fn diff(old: &Intent, new: &Intent) -> IntentDiff {
    let mut d = IntentDiff {
        identity_changed: old.router_id != new.router_id
            || old.asn != new.asn
            || old.listen != new.listen
            || old.rr_cluster_id != new.rr_cluster_id,
        ..IntentDiff::default()
    };
    for (addr, p) in &new.peers {
        match old.peers.get(addr) {
            None => d.peers_added.push(p.clone()),
            Some(o) if o == p => {}
            Some(o) if only_labels_differ(o, p) => d.peers_relabelled.push(p.clone()),
            Some(_) => d.peers_changed.push(p.clone()),
        }
    }
    d.peers_removed = old
        .peers
        .keys()
        .filter(|a| !new.peers.contains_key(a))
        .copied()
        .collect();
    for (net, o) in &new.originated {
        if old.originated.get(net) != Some(o) {
            d.originated.insert(*net, o.clone());
        }
    }
    d.withdrawn = old
        .originated
        .keys()
        .filter(|n| !new.originated.contains_key(n))
        .copied()
        .collect();
    let (was, now) = (old.peer_routes(), new.peer_routes());
    for (net, gw) in &now {
        if was.get(net) != Some(gw) {
            d.peer_routes.push((*net, Some(*gw)));
        }
    }
    for net in was.keys().filter(|n| !now.contains_key(n)) {
        d.peer_routes.push((*net, None));
    }
    d.policy_changed = !d.peer_routes.is_empty()
        || old.pools != new.pools
        || old.own_blocks != new.own_blocks
        || old.ignored_interfaces != new.ignored_interfaces
        || old.encapsulation() != new.encapsulation()
        || old.ipv4 != new.ipv4
        || old.ipv6 != new.ipv6;
    d
}

/// Equal except for `origin` and `kind` between labels that behave the same on the
/// wire (global vs node specific vs mesh; reflector roles change behaviour, so they
/// count as a real change through `rr_client`), for `filters`, which the daemon
/// applies to the running session, and for `reachable_by` (a route to the peer, not a
/// session setting).
fn only_labels_differ(a: &PeerIntent, b: &PeerIntent) -> bool {
    let mut x = a.clone();
    x.origin.clone_from(&b.origin);
    x.filters.clone_from(&b.filters);
    x.kind = b.kind;
    // A route to the peer, not a session setting (see `peer_routes`).
    x.reachable_by = b.reachable_by;
    x == *b
}
