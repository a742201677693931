//! Reading the kernel's interfaces, addresses and neighbour table from netlink dumps
//! into the backend-neutral types that diagnostics use.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use rtnetlink::packet_core::{NetlinkMessage, NLM_F_DUMP, NLM_F_REQUEST};
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState as KernelState,
};
use rtnetlink::packet_route::RouteNetlinkMessage;

use super::message::with_flags;
use crate::{Interface, Neighbour, NeighbourState};

/// Dump request for every link.
pub fn dump_links() -> NetlinkMessage<RouteNetlinkMessage> {
    with_flags(
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        NLM_F_REQUEST | NLM_F_DUMP,
    )
}

/// Dump request for every address of both families.
pub fn dump_addresses() -> NetlinkMessage<RouteNetlinkMessage> {
    with_flags(
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        NLM_F_REQUEST | NLM_F_DUMP,
    )
}

/// Dump request for the neighbour tables of both families.
pub fn dump_neighbours() -> NetlinkMessage<RouteNetlinkMessage> {
    with_flags(
        RouteNetlinkMessage::GetNeighbour(NeighbourMessage::default()),
        NLM_F_REQUEST | NLM_F_DUMP,
    )
}

/// Joins link and address dumps into interfaces, ordered by index.
pub fn interfaces(
    links: &[RouteNetlinkMessage],
    addresses: &[RouteNetlinkMessage],
) -> Vec<Interface> {
    let mut by_index: BTreeMap<u32, Interface> = BTreeMap::new();
    for m in links {
        let RouteNetlinkMessage::NewLink(l) = m else {
            continue;
        };
        let name = l
            .attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            })
            .unwrap_or_else(|| format!("if{}", l.header.index));
        let up = is_up(l);
        by_index.insert(
            l.header.index,
            Interface {
                index: l.header.index,
                name,
                up,
                addresses: Vec::new(),
            },
        );
    }
    for m in addresses {
        let RouteNetlinkMessage::NewAddress(a) = m else {
            continue;
        };
        // IFA_LOCAL is the node's own address on point-to-point links, where
        // IFA_ADDRESS is the far end; elsewhere both are the same.
        let local = a.attributes.iter().find_map(|x| match x {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        });
        let addr = local.or_else(|| {
            a.attributes.iter().find_map(|x| match x {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        });
        let (Some(addr), Some(iface)) = (addr, by_index.get_mut(&a.header.index)) else {
            continue;
        };
        if let Ok(net) = IpNet::new(addr, a.header.prefix_len) {
            iface.addresses.push(net);
        }
    }
    by_index.into_values().collect()
}

fn state(s: KernelState) -> Option<NeighbourState> {
    Some(match s {
        KernelState::Reachable => NeighbourState::Reachable,
        KernelState::Stale => NeighbourState::Stale,
        KernelState::Delay => NeighbourState::Delay,
        KernelState::Probe => NeighbourState::Probe,
        KernelState::Failed => NeighbourState::Failed,
        KernelState::Incomplete => NeighbourState::Incomplete,
        KernelState::Permanent => NeighbourState::Permanent,
        KernelState::Noarp => NeighbourState::Noarp,
        _ => return None,
    })
}

/// Neighbour entries with an IP address and a state tern reports.
pub fn neighbours(answers: &[RouteNetlinkMessage]) -> Vec<Neighbour> {
    answers
        .iter()
        .filter_map(|m| {
            let RouteNetlinkMessage::NewNeighbour(n) = m else {
                return None;
            };
            let address = n.attributes.iter().find_map(|a| match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                    Some(IpAddr::V4(*v4))
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                    Some(IpAddr::V6(*v6))
                }
                _ => None,
            })?;
            let lladdr = n.attributes.iter().find_map(|a| match a {
                NeighbourAttribute::LinkLayerAddress(b) if !b.is_empty() => Some(
                    b.iter()
                        .map(|x| format!("{x:02x}"))
                        .collect::<Vec<_>>()
                        .join(":"),
                ),
                _ => None,
            });
            Some(Neighbour {
                interface: n.header.ifindex,
                address,
                lladdr,
                state: state(n.header.state)?,
            })
        })
        .collect()
}

/// Administratively up and with carrier: what `ip link` shows as UP,LOWER_UP.
pub fn is_up(l: &LinkMessage) -> bool {
    l.header.flags.contains(LinkFlags::Up) && l.header.flags.contains(LinkFlags::LowerUp)
}
