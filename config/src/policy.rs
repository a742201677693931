//! Export and import decisions from the intent, as the speaker asks them per route and
//! per peer: Calico's fixed rules (pools with `disableBGPExport`, more-specifics inside
//! this node's own blocks stay home) and then the peer's BGPFilters, rule by rule, in
//! the order the BGPPeer lists them; the first matching rule decides, and a route no
//! rule matches is accepted.

use ipnet::IpNet;

use crate::cluster::{Action, Filter, MatchOperator, Rule};
use crate::intent::{Intent, PeerIntent};
use crate::values::Community;

/// What the policy needs to know about a route.
#[derive(Debug, Clone, Copy)]
pub struct RouteFacts<'a> {
    /// The prefix.
    pub prefix: IpNet,
    /// Learned from a BGP peer (as opposed to originated here).
    pub from_peer: bool,
    /// Interface of a route learned from the kernel.
    pub interface: Option<&'a str>,
    /// Communities the route carries.
    pub communities: &'a [Community],
}

/// Direction of a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Toward the peer.
    Export,
    /// From the peer.
    Import,
}

/// The first matching rule's action across `filters`, or `None` when no rule matches.
pub fn filter_action(
    filters: &[Filter],
    dir: Direction,
    route: &RouteFacts<'_>,
    ebgp: bool,
) -> Option<Action> {
    let v6 = route.prefix.addr().is_ipv6();
    filters
        .iter()
        .flat_map(|f| match (dir, v6) {
            (Direction::Export, false) => &f.export_v4,
            (Direction::Export, true) => &f.export_v6,
            (Direction::Import, false) => &f.import_v4,
            (Direction::Import, true) => &f.import_v6,
        })
        .find(|r| rule_matches(r, route, ebgp))
        .map(|r| r.action)
}

fn rule_matches(r: &Rule, route: &RouteFacts<'_>, ebgp: bool) -> bool {
    let p = route.prefix;
    if let Some((cidr, op)) = r.cidr {
        let hit = match op {
            MatchOperator::Equal => p == cidr,
            MatchOperator::NotEqual => p != cidr,
            MatchOperator::In => cidr.contains(&p),
            MatchOperator::NotIn => !cidr.contains(&p),
        };
        if !hit {
            return false;
        }
    }
    if let Some((min, max)) = r.prefix_length {
        if p.prefix_len() < min || p.prefix_len() > max {
            return false;
        }
    }
    if r.remote_peers_only && !route.from_peer {
        return false;
    }
    if let Some(pattern) = &r.interface {
        match route.interface {
            Some(i) if interface_matches(pattern, i) => {}
            _ => return false,
        }
    }
    if r.ebgp.is_some_and(|want| want != ebgp) {
        return false;
    }
    r.communities.iter().all(|c| route.communities.contains(c))
}

/// Calico interface patterns: a name, or a prefix ending in `*` (`cali*`).
pub fn interface_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl Intent {
    /// Whether `route` may be advertised to `peer`.
    pub fn export_allowed(&self, peer: &PeerIntent, route: &RouteFacts<'_>) -> bool {
        if let Some(o) = self.originated.get(&route.prefix) {
            if !o.export {
                return false;
            }
        } else if self.pool_of(&route.prefix).is_some_and(|p| !p.export) {
            return false;
        }
        // The block's aggregate already covers these; advertising them would only
        // multiply routes (Calico's BIRD filter does the same).
        if self
            .own_blocks
            .iter()
            .any(|b| b.contains(&route.prefix) && route.prefix.prefix_len() > b.prefix_len())
            && !self.originated.contains_key(&route.prefix)
        {
            return false;
        }
        filter_action(&peer.filters, Direction::Export, route, peer.is_ebgp())
            .is_none_or(|a| a == Action::Accept)
    }

    /// Whether `route`, received from `peer`, is accepted.
    pub fn import_allowed(&self, peer: &PeerIntent, route: &RouteFacts<'_>) -> bool {
        filter_action(&peer.filters, Direction::Import, route, peer.is_ebgp())
            .is_none_or(|a| a == Action::Accept)
    }
}
