//! The eBGP next-hop rule: an eBGP peer on a network it shares with this node can use
//! a route only if its NEXT_HOP is on that network too (RFC 4271 §5.1.3; BIRD, FRR and
//! most routers refuse the rest as "not directly reachable"). tern announces the
//! session's own address, which always is; what breaks it is configuration:
//! `nextHopMode: Keep` passing a mesh next hop on, or a session forced to a source
//! address on another interface while the peer accepts it only by multihop.
//!
//! Pure: the daemon names the next hops in each eBGP peer's Adj-RIB-Out, the FIB task
//! adds the interfaces.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{networks, Finding, FindingKind, PeerFacts, Severity};
use crate::{connected_subnets, ConnectedSubnet, Interface};

/// What tern announces to an eBGP peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbgpFacts {
    /// How findings name the peer (`global peer 203.0.113.9`).
    pub subject: String,
    /// The next hops of its Adj-RIB-Out (empty while the session is down).
    pub announced: Vec<AnnouncedNextHop>,
}

/// One next hop tern announces to a peer, and the prefixes that carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnouncedNextHop {
    /// The NEXT_HOP as sent.
    pub next_hop: IpAddr,
    /// One prefix sent with it, to name in the finding.
    pub example_prefix: IpNet,
    /// How many prefixes are sent with it.
    pub prefixes: usize,
}

const FIX: &str = "announce an address on the network shared with the peer: \
set the BGPPeer's sourceAddress: None so the session runs from the interface facing the \
peer (tern announces the session's own address to eBGP peers), or nextHopMode: Self \
instead of Keep so routes passed on carry that address too; if the peer really is \
reached through a router, configure the session as multihop on both sides \
(ttlSecurity with more than 1 hop on the BGPPeer, multihop on the peer)";

/// eBGP peers, not configured for multihop, on a network this node shares with them,
/// to which tern announces a next hop of the peer's family outside every such network.
/// A peer on no shared network is the layer-2 rule's ([`super::layer2`]); next hops
/// of the other family (IPv6 routes over an IPv4 session) are not judged, since the
/// peer's address in that family is not known.
pub fn ebgp_next_hops(peers: &[PeerFacts], interfaces: &[Interface]) -> Vec<Finding> {
    let subnets = connected_subnets(interfaces);
    peers
        .iter()
        .filter(|p| !p.multihop)
        .filter_map(|p| Some((p, p.ebgp.as_ref()?)))
        .filter_map(|(p, e)| finding(p, e, &subnets, interfaces))
        .collect()
}

fn finding(
    p: &PeerFacts,
    e: &EbgpFacts,
    subnets: &[ConnectedSubnet],
    interfaces: &[Interface],
) -> Option<Finding> {
    let shared: Vec<&ConnectedSubnet> = subnets
        .iter()
        .filter(|s| s.subnet.contains(&p.address))
        .collect();
    if shared.is_empty() {
        return None;
    }
    let bad: Vec<&AnnouncedNextHop> = e
        .announced
        .iter()
        .filter(|h| h.next_hop.is_ipv4() == p.address.is_ipv4())
        .filter(|h| !shared.iter().any(|s| s.subnet.contains(&h.next_hop)))
        .collect();
    let first = bad.first()?;
    let prefixes: usize = bad.iter().map(|h| h.prefixes).sum();
    let hops: Vec<String> = bad.iter().take(3).map(|h| h.next_hop.to_string()).collect();
    let more = match bad.len() {
        0..=3 => String::new(),
        n => format!(" and {} more", n - 3),
    };
    let carried = match prefixes {
        1 => format!("for {}", first.example_prefix),
        n => format!("for {n} prefixes such as {}", first.example_prefix),
    };
    let shared_text: Vec<String> = shared
        .iter()
        .map(|s| {
            format!(
                "{} on {} (this node's address there: {})",
                s.subnet, s.interface_name, s.local
            )
        })
        .collect();
    Some(Finding {
        kind: FindingKind::EbgpNextHopUnreachable,
        subject: e.subject.clone(),
        evidence: format!(
            "tern announces next hop {}{more} {carried} to eBGP peer {}, which shares only {} with this node, and the next hop is not on it (this node's networks: {}); the peer cannot reach the next hop directly and refuses or cannot use the routes",
            hops.join(", "),
            p.address,
            shared_text.join(", "),
            networks(interfaces, p.address.is_ipv4()),
        ),
        suggestion: FIX.into(),
        severity: Severity::Error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(index: u32, name: &str, up: bool, addrs: &[&str]) -> Interface {
        Interface {
            index,
            name: name.into(),
            up,
            addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    /// The node IP on eth0, the ToR's network on eth1.
    fn node() -> Vec<Interface> {
        vec![
            iface(1, "lo", true, &["127.0.0.1/8"]),
            iface(2, "eth0", true, &["198.51.100.11/24", "2001:db8:1::11/64"]),
            iface(3, "eth1", true, &["203.0.113.2/24"]),
        ]
    }

    fn hop(next_hop: &str, prefix: &str, prefixes: usize) -> AnnouncedNextHop {
        AnnouncedNextHop {
            next_hop: next_hop.parse().unwrap(),
            example_prefix: prefix.parse().unwrap(),
            prefixes,
        }
    }

    fn tor(multihop: bool, announced: Vec<AnnouncedNextHop>) -> PeerFacts {
        PeerFacts {
            address: "203.0.113.1".parse().unwrap(),
            name: "global peer (BGPPeer tor)".into(),
            network: None,
            multihop,
            ebgp: Some(EbgpFacts {
                subject: "global peer 203.0.113.1".into(),
                announced,
            }),
        }
    }

    #[test]
    fn the_node_ip_announced_to_a_tor_on_another_interface_is_an_error() {
        let peers = [tor(false, vec![hop("198.51.100.11", "198.18.1.0/26", 2)])];
        let f = ebgp_next_hops(&peers, &node());
        assert_eq!(f.len(), 1, "{f:?}");
        let f = &f[0];
        assert_eq!(f.kind, FindingKind::EbgpNextHopUnreachable);
        assert_eq!(f.severity, Severity::Error);
        assert_eq!(f.subject, "global peer 203.0.113.1");
        for part in [
            "next hop 198.51.100.11",
            "2 prefixes such as 198.18.1.0/26",
            "eBGP peer 203.0.113.1",
            "203.0.113.0/24 on eth1",
            "198.51.100.0/24 on eth0",
        ] {
            assert!(f.evidence.contains(part), "{part:?} not in {}", f.evidence);
        }
        for part in ["sourceAddress: None", "nextHopMode: Self", "multihop"] {
            assert!(
                f.suggestion.contains(part),
                "{part:?} not in {}",
                f.suggestion
            );
        }
    }

    #[test]
    fn the_sessions_own_address_is_fine() {
        let peers = [tor(false, vec![hop("203.0.113.2", "198.18.1.0/26", 1)])];
        assert!(ebgp_next_hops(&peers, &node()).is_empty());
    }

    #[test]
    fn keep_passing_a_mesh_next_hop_on_is_named_with_the_others() {
        let announced = vec![
            hop("198.51.100.12", "198.18.2.0/26", 1),
            hop("198.51.100.13", "198.18.3.0/26", 1),
            hop("203.0.113.2", "198.18.1.0/26", 1),
        ];
        let f = ebgp_next_hops(&[tor(false, announced)], &node());
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].evidence
                .contains("198.51.100.12, 198.51.100.13 for 2 prefixes such as 198.18.2.0/26"),
            "{}",
            f[0].evidence
        );
        assert!(
            !f[0].evidence.contains("next hop 203.0.113.2"),
            "{}",
            f[0].evidence
        );
    }

    #[test]
    fn multihop_ibgp_unshared_and_other_family_peers_are_not_judged() {
        let bad = || vec![hop("198.51.100.11", "198.18.1.0/26", 1)];
        // Multihop: the peer resolves the next hop through its routing.
        assert!(ebgp_next_hops(&[tor(true, bad())], &node()).is_empty());
        // iBGP: no eBGP facts.
        let mut ibgp = tor(false, bad());
        ibgp.ebgp = None;
        assert!(ebgp_next_hops(&[ibgp], &node()).is_empty());
        // On no shared network: the layer-2 rule's finding.
        let mut far = tor(false, bad());
        far.address = "192.0.2.1".parse().unwrap();
        assert!(ebgp_next_hops(&[far], &node()).is_empty());
        // An IPv6 next hop over the IPv4 session: not judged.
        let v6 = tor(false, vec![hop("2001:db8:1::11", "2001:db8:4000::/122", 1)]);
        assert!(ebgp_next_hops(&[v6], &node()).is_empty());
        // Nothing announced (session down): nothing to say.
        assert!(ebgp_next_hops(&[tor(false, Vec::new())], &node()).is_empty());
    }

    #[test]
    fn a_shared_network_on_a_down_interface_does_not_count() {
        let mut ifs = node();
        ifs[2].up = false;
        // eth1 down: the peer is on no network that is up; the interface-down and
        // layer-2 rules speak for it.
        let peers = [tor(false, vec![hop("198.51.100.11", "198.18.1.0/26", 1)])];
        assert!(ebgp_next_hops(&peers, &ifs).is_empty());
    }
}
