//! Routes, changes, interfaces and neighbours as the daemon and every backend see them,
//! plus the connected-subnet question that layer-2 diagnostics ask ("is this next hop
//! on a directly connected subnet, and on which interface?").

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

/// A route of tern's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Route {
    /// Destination.
    pub prefix: IpNet,
    /// What happens to matching packets.
    pub kind: RouteKind,
    /// Route metric (priority); lower wins. 0 is the kernel's default (Linux stores an
    /// IPv6 route's default as 1024 and tern reads that back as 0).
    pub metric: u32,
    /// Routing table.
    pub table: u32,
}

/// What a route does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteKind {
    /// Forward via one next hop, or several (ECMP). Shared: the routes of one peer
    /// mostly have the same next hops, and the FIB task keeps one copy of them
    /// ([`NextHops`]), so a route clone is a counter increment, not an allocation.
    Unicast(NextHops),
    /// Drop silently (a node's own IPAM blocks).
    Blackhole,
    /// Drop with ICMP unreachable.
    Unreachable,
}

impl RouteKind {
    /// A unicast route's kind from its next hops.
    pub fn unicast(hops: Vec<NextHop>) -> RouteKind {
        RouteKind::Unicast(hops.into())
    }
}

/// The next hops of a unicast route, shared between routes.
pub type NextHops = std::sync::Arc<[NextHop]>;

/// One way out for a unicast route.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct NextHop {
    /// Gateway; `None` for a route straight onto the interface.
    pub gateway: Option<IpAddr>,
    /// Outgoing interface index; `None` lets the kernel resolve it from the gateway.
    pub interface: Option<u32>,
    /// The gateway is reachable on the interface even though no address covers it
    /// (IPIP tunnels, Calico's `onlink`).
    pub onlink: bool,
    /// ECMP weight (1 = equal share).
    pub weight: u8,
}

impl NextHop {
    /// A plain gateway next hop.
    pub fn via(gateway: IpAddr) -> NextHop {
        NextHop {
            gateway: Some(gateway),
            interface: None,
            onlink: false,
            weight: 1,
        }
    }
}

/// One change to tern's routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteChange {
    /// Create; fails if tern already has a route for the prefix in the table.
    Add(Route),
    /// Create or overwrite (a best-path change), without a moment with no route.
    Replace(Route),
    /// Remove tern's route for the prefix in the table.
    Delete {
        /// Destination.
        prefix: IpNet,
        /// Routing table.
        table: u32,
    },
}

impl RouteChange {
    /// The prefix it concerns.
    pub fn prefix(&self) -> IpNet {
        match self {
            RouteChange::Add(r) | RouteChange::Replace(r) => r.prefix,
            RouteChange::Delete { prefix, .. } => *prefix,
        }
    }

    /// `add`, `replace` or `delete`.
    pub fn verb(&self) -> &'static str {
        match self {
            RouteChange::Add(_) => "add",
            RouteChange::Replace(_) => "replace",
            RouteChange::Delete { .. } => "delete",
        }
    }
}

/// Why the kernel refused a change, as far as the caller acts on it: a refusal's
/// text is for people, this is for code (nothing matches errno text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// A route with that key exists already (another protocol's: EEXIST).
    Exists,
    /// Nothing to delete or replace (ESRCH, ENOENT).
    NotFound,
    /// The next hop or its interface cannot be reached (ENETUNREACH, EHOSTUNREACH,
    /// ENODEV).
    Unreachable,
    /// tern may not change routes (EPERM, EACCES: no CAP_NET_ADMIN).
    NotPermitted,
    /// tern refused the change itself, before asking the system: the route cannot be
    /// expressed there, or its next hop has no interface (the reason says which). Every
    /// other kind is the system's refusal.
    ByTern,
    /// Anything else.
    Other,
}

/// A change the kernel refused, or tern itself ([`FailureKind::ByTern`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteFailure {
    /// The route's prefix.
    pub prefix: IpNet,
    /// `add`, `replace` or `delete`.
    pub change: &'static str,
    /// The kernel's reason, in its words (errno text).
    pub reason: String,
    /// The reason's kind.
    pub kind: FailureKind,
}

impl RouteFailure {
    /// Whether tern refused the change itself rather than the system.
    pub fn by_tern(&self) -> bool {
        self.kind == FailureKind::ByTern
    }
}

impl std::fmt::Display for RouteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.change, self.prefix, self.reason)
    }
}

/// The outcome of a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// Changes the kernel accepted.
    pub applied: usize,
    /// Changes it refused, each with its prefix.
    pub failed: Vec<RouteFailure>,
}

/// A network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interface {
    /// Kernel index.
    pub index: u32,
    /// Name (`eth0`, `cali1234`, `tunl0`).
    pub name: String,
    /// Administratively and operationally up.
    pub up: bool,
    /// Addresses with their prefix length (`198.51.100.7/24`).
    pub addresses: Vec<IpNet>,
}

/// State of a neighbour entry (RFC 4861 names, as `ip neigh` prints them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NeighbourState {
    /// Confirmed reachable recently.
    Reachable,
    /// Not confirmed lately; used until probed.
    Stale,
    /// Waiting before probing.
    Delay,
    /// Being probed.
    Probe,
    /// Resolution failed: the next hop does not answer ARP / neighbour solicitation.
    Failed,
    /// Resolution in progress.
    Incomplete,
    /// Configured by hand.
    Permanent,
    /// No resolution needed (point-to-point, tunnels).
    Noarp,
}

/// A neighbour (ARP / NDP) entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Neighbour {
    /// Interface index.
    pub interface: u32,
    /// The neighbour's address.
    pub address: IpAddr,
    /// Its link-layer address, when resolved.
    pub lladdr: Option<String>,
    /// Entry state.
    pub state: NeighbourState,
}

/// A subnet the node is directly connected to, through one of its addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectedSubnet {
    /// The subnet (host bits cleared).
    pub subnet: IpNet,
    /// The node's own address in it.
    pub local: IpAddr,
    /// The interface.
    pub interface: u32,
    /// The interface's name.
    pub interface_name: String,
}

/// Subnets directly connected through interfaces that are up.
pub fn connected_subnets(interfaces: &[Interface]) -> Vec<ConnectedSubnet> {
    interfaces
        .iter()
        .filter(|i| i.up)
        .flat_map(|i| {
            i.addresses.iter().map(move |a| ConnectedSubnet {
                subnet: a.trunc(),
                local: a.addr(),
                interface: i.index,
                interface_name: i.name.clone(),
            })
        })
        .collect()
}

/// The most specific connected subnet holding `addr`: where a peer or next hop would
/// be reached without a router in between. `None` means `addr` is not on layer 2 with
/// this node (the seeds' 192.168.171.0/24 vs 172.20.32.0/19 case).
pub fn connected_subnet_for(subnets: &[ConnectedSubnet], addr: IpAddr) -> Option<&ConnectedSubnet> {
    subnets
        .iter()
        .filter(|s| s.subnet.contains(&addr))
        .max_by_key(|s| s.subnet.prefix_len())
}

/// Errors of the observation calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FibError {
    /// The kernel could not be asked.
    #[error("{what}: {reason}")]
    Kernel {
        /// What was being read.
        what: String,
        /// The kernel's or the OS's reason.
        reason: String,
    },
}
