//! Findings about this node itself rather than one route: an interface that is down
//! with peers or next hops behind it, and IP forwarding switched off.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{Finding, FindingKind, NextHopFacts, PeerFacts, Severity};
use crate::{connected_subnet_for, connected_subnets, Interface};

/// What [`interfaces_down`] found, and what its findings already explain (so the
/// layer-2 and next-hop rules do not report the same cause again).
#[derive(Debug, Default)]
pub struct DownReport {
    /// One finding per down interface with something behind it.
    pub findings: Vec<Finding>,
    /// Peers behind a down interface.
    pub peers: BTreeSet<IpAddr>,
    /// Next hops behind a down interface.
    pub hops: BTreeSet<IpAddr>,
}

/// The networks of a down interface (link-local IPv6 left out: every link has one).
fn networks_of(i: &Interface) -> Vec<IpNet> {
    i.addresses
        .iter()
        .filter(|a| !a.addr().is_loopback())
        .filter(|a| !matches!(a.addr(), IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
        .map(|a| a.trunc())
        .collect()
}

/// Interfaces that are down while peers or next hops tern uses are on their networks
/// (and on no network of an interface that is up).
pub fn interfaces_down(
    peers: &[PeerFacts],
    hops: &[NextHopFacts],
    interfaces: &[Interface],
) -> DownReport {
    let up = connected_subnets(interfaces);
    let mut report = DownReport::default();
    for i in interfaces.iter().filter(|i| !i.up) {
        let nets = networks_of(i);
        let behind = |a: IpAddr| {
            nets.iter().any(|n| n.contains(&a)) && connected_subnet_for(&up, a).is_none()
        };
        let peers_behind: Vec<&PeerFacts> = peers.iter().filter(|p| behind(p.address)).collect();
        let hops_behind: Vec<&NextHopFacts> = hops.iter().filter(|h| behind(h.address)).collect();
        if peers_behind.is_empty() && hops_behind.is_empty() {
            continue;
        }
        let mut parts = Vec::new();
        if !peers_behind.is_empty() {
            let names: Vec<String> = peers_behind.iter().map(|p| p.name.clone()).collect();
            parts.push(format!("peers behind it: {}", names.join(", ")));
        }
        if !hops_behind.is_empty() {
            let prefixes: usize = hops_behind.iter().map(|h| h.prefixes).sum();
            let names: Vec<String> = hops_behind.iter().map(|h| h.address.to_string()).collect();
            let example = hops_behind
                .first()
                .map(|h| format!(" such as {}", h.example_prefix))
                .unwrap_or_default();
            parts.push(format!(
                "next hops behind it: {} (used by {prefixes} route(s){example})",
                names.join(", ")
            ));
        }
        let nets_text: Vec<String> = nets.iter().map(|n| n.to_string()).collect();
        report.findings.push(Finding {
            kind: FindingKind::InterfaceDown,
            subject: format!("interface {}", i.name),
            evidence: format!(
                "{} is down (its networks: {}); {}",
                i.name,
                if nets_text.is_empty() {
                    "none".to_string()
                } else {
                    nets_text.join(", ")
                },
                parts.join("; ")
            ),
            suggestion: format!(
                "bring the link up (`ip link set {} up`; check the cable, the switch port or the VM's NIC): sessions through it stay down and traffic to the routes behind it is dropped until then",
                i.name
            ),
            severity: Severity::Error,
        });
        report.peers.extend(peers_behind.iter().map(|p| p.address));
        report.hops.extend(hops_behind.iter().map(|h| h.address));
    }
    report
}

/// IP forwarding of `family` is off (`key` is the sysctl) while this node advertises
/// `advertised` (its blocks and workload addresses): traffic for them reaches the node
/// and is dropped there.
pub fn forwarding_disabled(family: &str, key: &str, advertised: &[IpNet]) -> Finding {
    let example = advertised
        .first()
        .map(|p| format!(" such as {p}"))
        .unwrap_or_default();
    Finding {
        kind: FindingKind::ForwardingDisabled,
        subject: format!("{family} forwarding"),
        evidence: format!(
            "{key} is 0 while this node advertises {} {family} prefix(es){example}: packets for its workloads arrive and are dropped, although every route is right",
            advertised.len()
        ),
        suggestion: format!(
            "`sysctl -w {key}=1` and make it persistent (/etc/sysctl.d/); calico-node sets it at start, so check what turned it off"
        ),
        severity: Severity::Error,
    }
}
