//! Layer-2 and next-hop diagnostics: kernel facts (interfaces, neighbours, how an
//! address resolves, refused routes) turned into plain findings.
//!
//! Pure: the daemon gathers the facts through [`crate::Fib`] and hands them here, so
//! the CLI, the logs and the metrics render the same [`Finding`]s, and every rule is
//! tested without a kernel. The wording follows Calico's own advice for a BGP mesh
//! without fabric peering ("they are unlikely to be on the same layer 2 network").

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use crate::{
    connected_subnet_for, connected_subnets, FailureKind, Interface, Neighbour, NeighbourState,
    RouteFailure,
};

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// A peer (or a next hop) is not inside any subnet this node is connected to.
    NoLayer2Reachability,
    /// A next hop is reached only through a gateway (recursive resolution).
    RecursiveNextHop,
    /// The kernel has no route at all to a next hop, or the look-up failed.
    UnresolvedNextHop,
    /// The neighbour entry of a next hop is FAILED: it does not answer ARP / NDP.
    NeighbourFailed,
    /// The neighbour entry of a next hop is still INCOMPLETE.
    NeighbourIncomplete,
    /// The kernel dropped TCP segments for a wrong or missing TCP-MD5 signature while a
    /// peer with a password is not up.
    Md5Mismatch,
    /// The kernel refused a route.
    RouteRefused,
    /// A peer's configuration asks for what this platform cannot do (TCP-MD5 or GTSM
    /// on Windows): tern refuses the session rather than run it without.
    PeerUnsupported,
    /// Connect attempts to a peer time out (no SYN-ACK): a firewall dropping TCP 179,
    /// or a wrong address.
    PeerNotAnswering,
    /// A peer answers connect attempts with a reset: BGP is not running there, or
    /// listens on another address or port.
    ConnectionRefused,
    /// A BGP NOTIFICATION was received or sent while the session is down, decoded
    /// (for OPEN errors: what each side expects).
    Notification,
    /// A peer uses this node's router ID.
    DuplicateRouterId,
    /// An interface is down: the peers, next hops and routes behind it are named.
    /// Replaces the layer-2 finding for a peer whose network is on that interface.
    InterfaceDown,
    /// IP forwarding is off (IPv4 or IPv6) while this node advertises routes to its
    /// workloads: traffic arriving for them is dropped.
    ForwardingDisabled,
    /// The NEXT_HOP announced to an eBGP peer is not on a network that peer shares
    /// with this node, so the peer cannot use the routes.
    EbgpNextHopUnreachable,
    /// BFD is on, the BGP session is up, but the peer has never answered BFD: the
    /// session runs without it (RFC 5882 §4.2).
    BfdNotAnswering,
}

impl FindingKind {
    /// Every kind, in the order the docs list them (metrics export each, 0 when
    /// absent).
    pub const ALL: [FindingKind; 16] = [
        FindingKind::PeerNotAnswering,
        FindingKind::ConnectionRefused,
        FindingKind::Notification,
        FindingKind::DuplicateRouterId,
        FindingKind::Md5Mismatch,
        FindingKind::PeerUnsupported,
        FindingKind::InterfaceDown,
        FindingKind::NoLayer2Reachability,
        FindingKind::NeighbourFailed,
        FindingKind::NeighbourIncomplete,
        FindingKind::RecursiveNextHop,
        FindingKind::UnresolvedNextHop,
        FindingKind::EbgpNextHopUnreachable,
        FindingKind::ForwardingDisabled,
        FindingKind::RouteRefused,
        FindingKind::BfdNotAnswering,
    ];

    /// The kind's name as the CLI, the JSON and the metrics show it (kebab-case).
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::NoLayer2Reachability => "no-layer2-reachability",
            FindingKind::RecursiveNextHop => "recursive-next-hop",
            FindingKind::UnresolvedNextHop => "unresolved-next-hop",
            FindingKind::NeighbourFailed => "neighbour-failed",
            FindingKind::NeighbourIncomplete => "neighbour-incomplete",
            FindingKind::Md5Mismatch => "md5-mismatch",
            FindingKind::RouteRefused => "route-refused",
            FindingKind::PeerUnsupported => "peer-unsupported",
            FindingKind::PeerNotAnswering => "peer-not-answering",
            FindingKind::ConnectionRefused => "connection-refused",
            FindingKind::Notification => "notification",
            FindingKind::DuplicateRouterId => "duplicate-router-id",
            FindingKind::InterfaceDown => "interface-down",
            FindingKind::ForwardingDisabled => "forwarding-disabled",
            FindingKind::EbgpNextHopUnreachable => "ebgp-next-hop-unreachable",
            FindingKind::BfdNotAnswering => "bfd-not-answering",
        }
    }
}

/// How much it matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; traffic flows.
    Info,
    /// Traffic may not flow as intended.
    Warning,
    /// Traffic to some destinations does not flow.
    Error,
}

/// One diagnosis, the same for the CLI, the logs and the metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// The peer, next hop or prefix concerned.
    pub subject: String,
    /// The facts that show it.
    pub evidence: String,
    /// What to do about it.
    pub suggestion: String,
    /// How much it matters.
    pub severity: Severity,
}

/// A BGP peer as diagnostics see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFacts {
    /// Its address.
    pub address: IpAddr,
    /// How to name it (`node-to-node mesh peer node-b`, `global peer tor-1`).
    pub name: String,
    /// Its own network when known (a Calico Node's `bgp.ipv4Address` carries the mask).
    pub network: Option<IpNet>,
    /// Configured for multihop (eBGP multihop or iBGP with recursive next hops): not
    /// being on this node's subnet is then expected.
    pub multihop: bool,
    /// For an eBGP peer: what tern announces to it (None for iBGP peers).
    pub ebgp: Option<EbgpFacts>,
}

/// How the kernel reaches an address (what `ip route get` answers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// The gateway in between, when the address is not on a connected link.
    pub gateway: Option<IpAddr>,
    /// The interface the packets leave by.
    pub interface: String,
}

/// A next hop tern installs routes through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHopFacts {
    /// The next hop.
    pub address: IpAddr,
    /// One prefix that uses it, to name in the finding.
    pub example_prefix: IpNet,
    /// How many prefixes use it.
    pub prefixes: usize,
    /// The kernel's answer for it; `Ok(None)`: no route at all; `Err`: the look-up
    /// failed, so nothing is known.
    pub resolution: Result<Option<Resolution>, String>,
}

fn networks(interfaces: &[Interface], family_v4: bool) -> String {
    let list: Vec<String> = connected_subnets(interfaces)
        .iter()
        .filter(|s| s.subnet.addr().is_ipv4() == family_v4 && !s.local.is_loopback())
        .filter(|s| !matches!(s.local, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
        .map(|s| format!("{} on {}", s.subnet, s.interface_name))
        .collect();
    if list.is_empty() {
        "no connected network of that family".into()
    } else {
        list.join(", ")
    }
}

const L2_REMEDIES: &str = "peer with the fabric (the top-of-rack router) instead of \
relying on the node-to-node mesh, or enable IPIP or VXLAN encapsulation on the IP pool, \
or configure the peer as multihop with a next hop that resolves recursively";

/// Peers that are not on any subnet this node is directly connected to.
pub fn layer2(peers: &[PeerFacts], interfaces: &[Interface]) -> Vec<Finding> {
    let subnets = connected_subnets(interfaces);
    peers
        .iter()
        .filter(|p| connected_subnet_for(&subnets, p.address).is_none())
        .map(|p| {
            let theirs = match p.network {
                Some(n) => format!("{} is in {}", p.address, n.trunc()),
                None => format!("{} is in none of them", p.address),
            };
            let (severity, suggestion) = if p.multihop {
                (Severity::Info, "expected for a multihop peer; check that its routes' next hops resolve".to_string())
            } else {
                (Severity::Warning, L2_REMEDIES.to_string())
            };
            Finding {
                kind: FindingKind::NoLayer2Reachability,
                subject: p.name.clone(),
                evidence: format!(
                    "this node is on {}; {theirs}: they are unlikely to be on the same layer 2 network",
                    networks(interfaces, p.address.is_ipv4())
                ),
                suggestion,
                severity,
            }
        })
        .collect()
}

/// Next hops that do not resolve, resolve only through a gateway, or whose neighbour
/// entry failed.
pub fn next_hops(
    hops: &[NextHopFacts],
    interfaces: &[Interface],
    neighbours: &[Neighbour],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let subnets = connected_subnets(interfaces);
    for h in hops {
        let subject = format!("next hop {}", h.address);
        let used = match h.prefixes {
            1 => format!("used by {}", h.example_prefix),
            n => format!("used by {n} prefixes such as {}", h.example_prefix),
        };
        match &h.resolution {
            Err(e) => out.push(Finding {
                kind: FindingKind::UnresolvedNextHop,
                subject: subject.clone(),
                evidence: format!("look-up failed: {e} ({used}; how the system reaches {} is unknown)", h.address),
                suggestion: "the look-up itself failed, which says nothing about the route: see the error; `tern fib` shows whether the routes were installed".into(),
                severity: Severity::Warning,
            }),
            Ok(None) => out.push(Finding {
                kind: FindingKind::UnresolvedNextHop,
                subject: subject.clone(),
                evidence: format!("the kernel has no route to {} ({used})", h.address),
                suggestion: "traffic to those prefixes is dropped: add a route to the next hop, or have the peer advertise a next hop on this node's network (next-hop-self)".into(),
                severity: Severity::Error,
            }),
            Ok(Some(Resolution { gateway: Some(gw), interface })) => out.push(Finding {
                kind: FindingKind::RecursiveNextHop,
                subject: subject.clone(),
                evidence: format!(
                    "{} is not on a connected network ({}); the kernel reaches it through {gw} on {interface} ({used})",
                    h.address,
                    networks(interfaces, h.address.is_ipv4())
                ),
                suggestion: if connected_subnet_for(&subnets, *gw).is_some() {
                    "fine for multihop designs; for a node-to-node mesh enable IPIP/VXLAN or peer with the fabric".into()
                } else {
                    "the gateway itself is not on a connected network either: check the node's routing".into()
                },
                severity: Severity::Info,
            }),
            Ok(Some(_)) => {}
        }
        for n in neighbours.iter().filter(|n| n.address == h.address) {
            let (kind, what, severity) = match n.state {
                NeighbourState::Failed => (
                    FindingKind::NeighbourFailed,
                    "FAILED: it did not answer",
                    Severity::Error,
                ),
                NeighbourState::Incomplete => (
                    FindingKind::NeighbourIncomplete,
                    "INCOMPLETE: no answer yet",
                    Severity::Warning,
                ),
                _ => continue,
            };
            let iface = interfaces
                .iter()
                .find(|i| i.index == n.interface)
                .map(|i| i.name.clone())
                .unwrap_or_else(|| format!("interface {}", n.interface));
            let proto = if h.address.is_ipv4() {
                "ARP"
            } else {
                "neighbour solicitation"
            };
            out.push(Finding {
                kind,
                subject: subject.clone(),
                evidence: format!("the neighbour entry for {} on {iface} is {what} {proto} ({used})", h.address),
                suggestion: "check that the next hop is up and on the same layer 2 network (VLAN, cabling, firewall dropping ARP/NDP)".into(),
                severity,
            });
        }
    }
    out
}

/// The kernel's TCP-MD5 counters (Linux `/proc/net/netstat`, `TcpExt:` line):
/// segments dropped because a signature was expected and missing, present and not
/// expected, or wrong.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Md5Counters {
    /// `TCPMD5NotFound`: we expected a signature, the segment had none.
    pub not_found: u64,
    /// `TCPMD5Unexpected`: the segment had one, we expected none.
    pub unexpected: u64,
    /// `TCPMD5Failure`: the signature was wrong (another password).
    pub failure: u64,
}

impl Md5Counters {
    /// Reads them from the text of `/proc/net/netstat` (a header line of names, then a
    /// line of values, per group); None when the kernel has no such counters.
    pub fn parse(netstat: &str) -> Option<Md5Counters> {
        let mut lines = netstat.lines();
        while let Some(names) = lines.next() {
            let values = lines.next()?;
            if !names.starts_with("TcpExt:") {
                continue;
            }
            let mut c = Md5Counters::default();
            let mut seen = false;
            for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
                let slot = match n {
                    "TCPMD5NotFound" => &mut c.not_found,
                    "TCPMD5Unexpected" => &mut c.unexpected,
                    "TCPMD5Failure" => &mut c.failure,
                    _ => continue,
                };
                *slot = v.parse().unwrap_or(0);
                seen = true;
            }
            return seen.then_some(c);
        }
        None
    }
}

/// Peers with a TCP-MD5 password that are not up, while the kernel counts segments it
/// dropped for their signatures: the passwords (or who uses one) differ.
pub fn md5(counters: Md5Counters, peers_down: &[String]) -> Vec<Finding> {
    let total = counters.not_found + counters.unexpected + counters.failure;
    if total == 0 {
        return Vec::new();
    }
    peers_down
        .iter()
        .map(|p| Finding {
            kind: FindingKind::Md5Mismatch,
            subject: p.clone(),
            evidence: format!(
                "the session is configured with a TCP-MD5 password and is not up, and the kernel dropped TCP segments for their signatures: {} with a wrong signature, {} without the expected one, {} with an unexpected one (TcpExt TCPMD5Failure / NotFound / Unexpected)",
                counters.failure, counters.not_found, counters.unexpected
            ),
            suggestion: "check that both sides use the same password (tern: the BGPPeer's or BGPConfiguration's password; the peer: its neighbour password), and that the peer has one at all".into(),
            severity: Severity::Error,
        })
        .collect()
}

/// Peers refused because this platform cannot honour their configuration: each
/// `(peer, why)`, `why` naming what is missing.
pub fn unsupported(peers: &[(String, String)]) -> Vec<Finding> {
    peers
        .iter()
        .map(|(peer, why)| Finding {
            kind: FindingKind::PeerUnsupported,
            subject: peer.clone(),
            evidence: format!("the session is refused: {why}"),
            suggestion: "run this node on Linux, or remove the peer's password / ttlSecurity on both sides (the session then runs without that protection)".into(),
            severity: Severity::Error,
        })
        .collect()
}

/// Peers (their subjects, with how long their BGP session has been up) that never
/// answered BFD: information, since BGP runs without it, but a silent failure of such
/// a peer is noticed only by the hold timer.
pub fn bfd_not_answering(peers: &[(String, u64)]) -> Vec<Finding> {
    peers
        .iter()
        .map(|(peer, up_s)| Finding {
            kind: FindingKind::BfdNotAnswering,
            subject: peer.clone(),
            evidence: format!(
                "the BGP session has been Established for {up_s} s, but the peer has not answered BFD (its BFD session is Down): a silent failure of this peer is noticed only by the hold timer"
            ),
            suggestion: "turn BFD on for this session at the peer (BIRD: `bfd on` in the bgp protocol and a `protocol bfd`; FRR: `neighbor ADDR bfd`), or leave it: BGP runs without BFD".into(),
            severity: Severity::Info,
        })
        .collect()
}

/// Routes the kernel (or tern itself) refused.
pub fn refused(failures: &[RouteFailure]) -> Vec<Finding> {
    failures
        .iter()
        .map(|f| Finding {
            kind: FindingKind::RouteRefused,
            subject: f.prefix.to_string(),
            evidence: if f.by_tern() {
                format!("tern did not {} the route: {}", f.change, f.reason)
            } else {
                format!("the kernel refused to {} the route: {}", f.change, f.reason)
            },
            suggestion: suggestion_for(f.kind).into(),
            severity: Severity::Error,
        })
        .collect()
}

fn suggestion_for(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Unreachable => {
            "the interface or the next hop's network is missing or down: check the link and its addresses"
        }
        FailureKind::Exists => {
            "another route for the prefix already exists (another daemon or a static route with the same metric)"
        }
        FailureKind::NotPermitted => "tern lacks CAP_NET_ADMIN",
        FailureKind::ByTern => {
            "tern's reason says what is missing; the route is tried again when interfaces or addresses change"
        }
        FailureKind::NotFound | FailureKind::Other => {
            "see the kernel's reason; `ip route` shows what is installed"
        }
    }
}

mod host;
pub use host::{forwarding_disabled, interfaces_down, DownReport};

mod ebgp;
pub use ebgp::{ebgp_next_hops, AnnouncedNextHop, EbgpFacts};

#[cfg(test)]
mod tests;
