//! The decision process (RFC 4271 §9.1.2.2, RFC 4456 §9, plus the usual eBGP/iBGP and
//! IGP-cost steps) as a chain of small comparisons. Each step says which path wins and
//! why, so `tern routes` can print the reason a path is best, and the steps that decide
//! multipath (ECMP) are the same code.

use std::cmp::Ordering;
use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;

use super::Path;

/// LOCAL_PREF assumed for paths that carry none (eBGP-learned).
pub const DEFAULT_LOCAL_PREF: u32 = 100;

/// The step that decided between two paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Higher LOCAL_PREF.
    LocalPref,
    /// Shorter AS_PATH.
    AsPathLength,
    /// Lower ORIGIN (IGP < EGP < INCOMPLETE).
    Origin,
    /// Lower MED between paths from the same neighbouring AS.
    Med,
    /// eBGP-learned over iBGP-learned.
    ExternalOverInternal,
    /// Lower IGP cost to the next hop.
    IgpCost,
    /// Lower BGP identifier (ORIGINATOR_ID when reflected).
    RouterId,
    /// Shorter CLUSTER_LIST.
    ClusterListLength,
    /// Lower peer address.
    PeerAddress,
    /// Lower ADD-PATH identifier from the same peer (a final tie-break).
    PathId,
    /// Nothing tells them apart.
    Equal,
}

impl Reason {
    /// Its name as in the JSON (`local-pref`, `as-path-length`, ...), without a
    /// serializer: `tern routes --all` names one per path.
    pub fn name(self) -> &'static str {
        match self {
            Reason::LocalPref => "local-pref",
            Reason::AsPathLength => "as-path-length",
            Reason::Origin => "origin",
            Reason::Med => "med",
            Reason::ExternalOverInternal => "external-over-internal",
            Reason::IgpCost => "igp-cost",
            Reason::RouterId => "router-id",
            Reason::ClusterListLength => "cluster-list-length",
            Reason::PeerAddress => "peer-address",
            Reason::PathId => "path-id",
            Reason::Equal => "equal",
        }
    }
}

type Step = fn(&Path, &Path) -> Ordering;

/// Lower is better for every step (so "higher LOCAL_PREF" compares reversed).
const STEPS: &[(Reason, Step)] = &[
    (Reason::LocalPref, |a, b| local_pref(b).cmp(&local_pref(a))),
    (Reason::AsPathLength, |a, b| {
        as_path_len(a).cmp(&as_path_len(b))
    }),
    (Reason::Origin, |a, b| a.attrs.origin.cmp(&b.attrs.origin)),
    (Reason::Med, |a, b| {
        if neighbour_as(a) == neighbour_as(b) {
            a.attrs.med.unwrap_or(0).cmp(&b.attrs.med.unwrap_or(0))
        } else {
            Ordering::Equal
        }
    }),
    (Reason::ExternalOverInternal, |a, b| {
        b.source.ebgp.cmp(&a.source.ebgp)
    }),
    (Reason::IgpCost, |a, b| match (a.igp_cost, b.igp_cost) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => Ordering::Equal,
    }),
    (Reason::RouterId, |a, b| router_id(a).cmp(&router_id(b))),
    (Reason::ClusterListLength, |a, b| {
        a.attrs.cluster_list.len().cmp(&b.attrs.cluster_list.len())
    }),
    (Reason::PeerAddress, |a, b| {
        peer_addr_key(a.source.address).cmp(&peer_addr_key(b.source.address))
    }),
    (Reason::PathId, |a, b| a.path_id.cmp(&b.path_id)),
];

/// The steps through which paths must tie to share traffic (multipath): everything up
/// to and including the IGP cost.
const MULTIPATH_STEPS: usize = 6;

fn local_pref(p: &Path) -> u32 {
    p.attrs.local_pref.unwrap_or(DEFAULT_LOCAL_PREF)
}

fn as_path_len(p: &Path) -> usize {
    p.attrs.as_path.as_ref().map_or(0, |a| a.path_len())
}

fn neighbour_as(p: &Path) -> Option<u32> {
    p.attrs.as_path.as_ref().and_then(|a| a.first_as())
}

fn router_id(p: &Path) -> Ipv4Addr {
    p.attrs.originator_id.unwrap_or(p.source.router_id)
}

/// IPv4 peers sort before IPv6 ones, each numerically.
fn peer_addr_key(a: IpAddr) -> (u8, u128) {
    match a {
        IpAddr::V4(v4) => (4, u128::from(u32::from(v4))),
        IpAddr::V6(v6) => (6, u128::from(v6)),
    }
}

/// Compares two paths: `Less` means `a` is better; the reason names the deciding step.
pub fn compare(a: &Path, b: &Path) -> (Ordering, Reason) {
    for (reason, step) in STEPS {
        let o = step(a, b);
        if o != Ordering::Equal {
            return (o, *reason);
        }
    }
    (Ordering::Equal, Reason::Equal)
}

/// Whether two paths may share traffic: equal through the IGP cost step.
pub fn multipath_equal(a: &Path, b: &Path) -> bool {
    STEPS
        .iter()
        .take(MULTIPATH_STEPS)
        .all(|(_, step)| step(a, b) == Ordering::Equal)
}
