//! tern's routes to and from rtnetlink route messages.
//!
//! Pure, so every route kind is tested without a kernel. Deletes carry only what
//! identifies tern's route (destination, table, protocol): a delete that names a
//! gateway must match the kernel's next hop exactly or the kernel answers ESRCH, and
//! the next hop we last installed is not what we want to depend on.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net};
use rtnetlink::packet_core::Parseable;
use rtnetlink::packet_core::{
    NetlinkHeader, NetlinkMessage, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE,
    NLM_F_REQUEST,
};
use rtnetlink::packet_route::link::LinkMessage;
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteNextHop,
    RouteNextHopFlags, RouteProtocol, RouteScope, RouteType, RouteVia,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::{FailureKind, NextHop, Route, RouteChange, RouteFailure, RouteKind};

/// Size of a netlink message header, which precedes the echoed request.
const NETLINK_HEADER_LEN: usize = 16;
/// Message type of a route deletion.
const RTM_DELROUTE: u16 = 25;

/// The metric the kernel gives an IPv6 route that names none.
const IP6_RT_PRIO_USER: u32 = 1024;

/// The kernel's table number for ids that do not fit the header's byte.
const RT_TABLE_UNSPEC: u8 = 0;

fn family(prefix: &IpNet) -> AddressFamily {
    match prefix {
        IpNet::V4(_) => AddressFamily::Inet,
        IpNet::V6(_) => AddressFamily::Inet6,
    }
}

/// A route message with the fields every request about `prefix` shares.
fn base(prefix: &IpNet, table: u32, protocol: u8) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header.address_family = family(prefix);
    m.header.destination_prefix_length = prefix.prefix_len();
    m.header.protocol = RouteProtocol::from(protocol);
    match u8::try_from(table) {
        Ok(t) => m.header.table = t,
        Err(_) => {
            m.header.table = RT_TABLE_UNSPEC;
            m.attributes.push(RouteAttribute::Table(table));
        }
    }
    if prefix.prefix_len() > 0 {
        m.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(
                prefix.network(),
            )));
    }
    m
}

/// The gateway attribute for a next hop; an IPv4 route through an IPv6 gateway
/// (RFC 8950) needs RTA_VIA instead of RTA_GATEWAY.
fn gateway_attr(prefix: &IpNet, gw: IpAddr) -> RouteAttribute {
    match (prefix, gw) {
        (IpNet::V4(_), IpAddr::V6(v6)) => RouteAttribute::Via(RouteVia::Inet6(v6)),
        (_, gw) => RouteAttribute::Gateway(RouteAddress::from(gw)),
    }
}

/// The netlink message that installs `route` (the request's flags decide add or replace).
pub fn install(route: &Route, protocol: u8) -> Result<RouteMessage, String> {
    let mut m = base(&route.prefix, route.table, protocol);
    m.header.scope = RouteScope::Universe;
    if route.metric != 0 {
        m.attributes.push(RouteAttribute::Priority(route.metric));
    }
    match &route.kind {
        RouteKind::Blackhole => m.header.kind = RouteType::BlackHole,
        RouteKind::Unreachable => m.header.kind = RouteType::Unreachable,
        RouteKind::Unicast(hops) => {
            m.header.kind = RouteType::Unicast;
            for h in hops.iter() {
                if let Some(gw) = h.gateway {
                    if gw.is_ipv4() && route.prefix.addr().is_ipv6() {
                        return Err(format!("IPv6 route with IPv4 next hop {gw}"));
                    }
                }
            }
            match &hops[..] {
                [] => return Err("unicast route without a next hop".into()),
                [h] => {
                    if h.gateway.is_none() {
                        // Straight onto the interface: the destination is on its link.
                        m.header.scope = RouteScope::Link;
                    }
                    if let Some(gw) = h.gateway {
                        m.attributes.push(gateway_attr(&route.prefix, gw));
                    }
                    match h.interface {
                        Some(oif) => m.attributes.push(RouteAttribute::Oif(oif)),
                        None if h.gateway.is_none() => {
                            return Err("next hop has neither a gateway nor an interface".into())
                        }
                        None => {}
                    }
                    if h.onlink {
                        m.header.flags |= RouteFlags::Onlink;
                    }
                }
                hops => {
                    let mut list = Vec::with_capacity(hops.len());
                    for h in hops {
                        let mut nh = RouteNextHop::default();
                        let Some(gw) = h.gateway else {
                            return Err("ECMP next hop without a gateway".into());
                        };
                        nh.attributes.push(gateway_attr(&route.prefix, gw));
                        nh.interface_index = h.interface.unwrap_or(0);
                        nh.hops = h.weight.saturating_sub(1);
                        if h.onlink {
                            nh.flags |= RouteNextHopFlags::Onlink;
                        }
                        list.push(nh);
                    }
                    m.attributes.push(RouteAttribute::MultiPath(list));
                }
            }
        }
    }
    Ok(m)
}

/// The netlink message that deletes tern's route for `prefix` in `table`.
pub fn delete(prefix: &IpNet, table: u32, protocol: u8) -> RouteMessage {
    let mut m = base(prefix, table, protocol);
    // NOWHERE and UNSPEC match any scope and type, as `ip route del` does.
    m.header.scope = RouteScope::NoWhere;
    m.header.kind = RouteType::Unspec;
    m
}

/// The request (with its flags) for one change; `ack` asks the kernel to confirm
/// success too (it always reports a refusal).
pub fn request(
    change: &RouteChange,
    protocol: u8,
    ack: bool,
) -> Result<NetlinkMessage<RouteNetlinkMessage>, String> {
    let (inner, flags) = match change {
        RouteChange::Add(r) => (
            RouteNetlinkMessage::NewRoute(install(r, protocol)?),
            NLM_F_CREATE | NLM_F_EXCL,
        ),
        RouteChange::Replace(r) => (
            RouteNetlinkMessage::NewRoute(install(r, protocol)?),
            NLM_F_CREATE | NLM_F_REPLACE,
        ),
        RouteChange::Delete { prefix, table } => (
            RouteNetlinkMessage::DelRoute(delete(prefix, *table, protocol)),
            0,
        ),
    };
    let ack = if ack { NLM_F_ACK } else { 0 };
    Ok(with_flags(inner, NLM_F_REQUEST | ack | flags))
}

/// A request the kernel always answers, sent after a batch of unacknowledged route
/// messages: when its answer arrives, the kernel has handled the whole batch.
pub fn barrier() -> NetlinkMessage<RouteNetlinkMessage> {
    let mut link = LinkMessage::default();
    link.header.index = 1; // lo: present in every namespace
    with_flags(RouteNetlinkMessage::GetLink(link), NLM_F_REQUEST)
}

/// Names a refused change from the request the kernel echoes in its error message
/// (its netlink header, then the route message).
pub fn refused(echo: &[u8], code: i32) -> RouteFailure {
    let reason = errno_text(code);
    let failure = failure_kind(code);
    let unknown = |reason: String| RouteFailure {
        prefix: IpNet::V4(Ipv4Net::default()),
        change: "change",
        reason: format!("{reason} (the kernel's answer did not say for which route)"),
        kind: failure,
    };
    let field = |at: usize| {
        echo.get(at..at + 2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
    };
    let (Some(kind), Some(flags), Some(body)) =
        (field(4), field(6), echo.get(NETLINK_HEADER_LEN..))
    else {
        return unknown(reason);
    };
    let Ok(m) = RouteMessage::parse(body) else {
        return unknown(reason);
    };
    let dst = m.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => address(d),
        _ => None,
    });
    let any = match m.header.address_family {
        AddressFamily::Inet6 => IpAddr::V6(0.into()),
        _ => IpAddr::V4(0.into()),
    };
    let Ok(prefix) = IpNet::new(dst.unwrap_or(any), m.header.destination_prefix_length) else {
        return unknown(reason);
    };
    let change = match (kind, flags & NLM_F_REPLACE != 0) {
        (RTM_DELROUTE, _) => "delete",
        (_, true) => "replace",
        _ => "add",
    };
    RouteFailure {
        prefix,
        change,
        reason,
        kind: failure,
    }
}

/// The kernel's error code in words, with its number.
pub fn errno_text(code: i32) -> String {
    let errno = code.saturating_abs();
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)"; keep the words and name the number plainly.
    let words = text.split(" (os error").next().unwrap_or(&text);
    format!("{words} (errno {errno})")
}

/// What the caller does with an error code.
pub fn failure_kind(code: i32) -> FailureKind {
    match code.saturating_abs() {
        libc::EEXIST => FailureKind::Exists,
        libc::ESRCH | libc::ENOENT => FailureKind::NotFound,
        libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENODEV => FailureKind::Unreachable,
        libc::EPERM | libc::EACCES => FailureKind::NotPermitted,
        _ => FailureKind::Other,
    }
}

/// A dump request for routes of one family carrying `protocol` in `table` (the kernel
/// filters with strict checking on).
pub fn dump_routes(v6: bool, table: u32, protocol: u8) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut m = RouteMessage::default();
    m.header.address_family = if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    m.header.protocol = RouteProtocol::from(protocol);
    match u8::try_from(table) {
        Ok(t) => m.header.table = t,
        Err(_) => m.attributes.push(RouteAttribute::Table(table)),
    }
    with_flags(RouteNetlinkMessage::GetRoute(m), NLM_F_REQUEST | NLM_F_DUMP)
}

/// A lookup of the route the kernel would use for `addr` (`ip route get`).
pub fn get_route(addr: IpAddr) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut m = RouteMessage::default();
    let (family, len) = match addr {
        IpAddr::V4(_) => (AddressFamily::Inet, 32),
        IpAddr::V6(_) => (AddressFamily::Inet6, 128),
    };
    m.header.address_family = family;
    m.header.destination_prefix_length = len;
    m.attributes
        .push(RouteAttribute::Destination(RouteAddress::from(addr)));
    with_flags(RouteNetlinkMessage::GetRoute(m), NLM_F_REQUEST)
}

/// Wraps a message with its netlink header flags.
pub fn with_flags(inner: RouteNetlinkMessage, flags: u16) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    let mut m = NetlinkMessage::new(header, inner.into());
    m.finalize();
    m
}

fn table_of(m: &RouteMessage) -> u32 {
    m.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(m.header.table))
}

fn address(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn gateway_in(attrs: &[RouteAttribute]) -> Option<IpAddr> {
    attrs.iter().find_map(|a| match a {
        RouteAttribute::Gateway(g) => address(g),
        RouteAttribute::Via(RouteVia::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        RouteAttribute::Via(RouteVia::Inet(v4)) => Some(IpAddr::V4(*v4)),
        _ => None,
    })
}

/// A route read from the kernel, as tern describes its own; `None` for kinds tern does
/// not install (local, broadcast, multicast...) or a malformed message.
pub fn parse(m: &RouteMessage) -> Option<Route> {
    let len = m.header.destination_prefix_length;
    let dst = m.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => address(d),
        _ => None,
    });
    let prefix = match (m.header.address_family, dst) {
        (_, Some(a)) => IpNet::new(a, len).ok()?,
        (AddressFamily::Inet, None) => IpNet::new(IpAddr::V4(0.into()), len).ok()?,
        (AddressFamily::Inet6, None) => IpNet::new(IpAddr::V6(0.into()), len).ok()?,
        _ => return None,
    };
    let metric = m
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Priority(p) => Some(*p),
            _ => None,
        })
        .unwrap_or(0);
    // The kernel gives an IPv6 route without a metric 1024; tern's 0 means "default".
    let metric = if prefix.addr().is_ipv6() && metric == IP6_RT_PRIO_USER {
        0
    } else {
        metric
    };
    let kind = match m.header.kind {
        RouteType::BlackHole => RouteKind::Blackhole,
        RouteType::Unreachable => RouteKind::Unreachable,
        RouteType::Unicast => {
            let multipath = m.attributes.iter().find_map(|a| match a {
                RouteAttribute::MultiPath(l) => Some(l),
                _ => None,
            });
            let hops = match multipath {
                Some(list) => list
                    .iter()
                    .map(|nh| NextHop {
                        gateway: gateway_in(&nh.attributes),
                        interface: (nh.interface_index != 0).then_some(nh.interface_index),
                        onlink: nh.flags.contains(RouteNextHopFlags::Onlink),
                        weight: nh.hops.saturating_add(1),
                    })
                    .collect(),
                None => vec![NextHop {
                    gateway: gateway_in(&m.attributes),
                    interface: m.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Oif(i) => Some(*i),
                        _ => None,
                    }),
                    onlink: m.header.flags.contains(RouteFlags::Onlink),
                    weight: 1,
                }],
            };
            RouteKind::Unicast(hops.into())
        }
        _ => return None,
    };
    Some(Route {
        prefix,
        kind,
        metric,
        table: table_of(m),
    })
}

/// The protocol number a kernel route carries.
pub fn protocol_of(header: &RouteHeader) -> u8 {
    u8::from(header.protocol)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(route: Route) {
        let m = install(&route, 201).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(protocol_of(&m.header), 201);
        let back = parse(&m).unwrap_or_else(|| panic!("parse {route:?}"));
        assert_eq!(back, route);
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_route_kind_survives_the_message() {
        let hop = |gw: &str, oif: Option<u32>| NextHop {
            gateway: Some(ip(gw)),
            interface: oif,
            onlink: false,
            weight: 1,
        };
        round_trip(Route {
            prefix: net("198.18.1.0/26"),
            kind: RouteKind::unicast(vec![hop("198.51.100.2", Some(3))]),
            metric: 0,
            table: 254,
        });
        round_trip(Route {
            prefix: net("198.18.1.0/26"),
            kind: RouteKind::unicast(vec![
                hop("198.51.100.2", Some(3)),
                NextHop {
                    weight: 3,
                    ..hop("198.51.100.3", Some(4))
                },
            ]),
            metric: 20,
            table: 1000,
        });
        round_trip(Route {
            prefix: net("198.18.2.7/32"),
            kind: RouteKind::unicast(vec![NextHop {
                onlink: true,
                ..hop("203.0.113.9", Some(7))
            }]),
            metric: 0,
            table: 254,
        });
        round_trip(Route {
            prefix: net("198.18.3.0/24"),
            kind: RouteKind::unicast(vec![hop("2001:db8::2", Some(2))]),
            metric: 0,
            table: 254,
        });
        round_trip(Route {
            prefix: net("2001:db8:1::/64"),
            kind: RouteKind::unicast(vec![hop("2001:db8::2", None), hop("2001:db8::3", None)]),
            metric: 100,
            table: 254,
        });
        for kind in [RouteKind::Blackhole, RouteKind::Unreachable] {
            round_trip(Route {
                prefix: net("198.18.0.0/26"),
                kind,
                metric: 0,
                table: 254,
            });
        }
        round_trip(Route {
            prefix: net("0.0.0.0/0"),
            kind: RouteKind::unicast(vec![NextHop {
                gateway: None,
                interface: Some(5),
                onlink: false,
                weight: 1,
            }]),
            metric: 0,
            table: 254,
        });
    }

    #[test]
    fn device_routes_are_link_scoped_and_bad_routes_are_refused() {
        let dev = Route {
            prefix: net("198.18.4.1/32"),
            kind: RouteKind::unicast(vec![NextHop {
                gateway: None,
                interface: Some(9),
                onlink: false,
                weight: 1,
            }]),
            metric: 0,
            table: 254,
        };
        let m = install(&dev, 201).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.header.scope, RouteScope::Link);
        let bad = |kind| Route {
            prefix: net("2001:db8:9::/48"),
            kind,
            metric: 0,
            table: 254,
        };
        assert!(install(&bad(RouteKind::unicast(vec![])), 201).is_err());
        assert!(install(
            &bad(RouteKind::unicast(vec![NextHop::via(ip("198.51.100.1"))])),
            201
        )
        .unwrap_err()
        .contains("IPv4 next hop"));
        let none = NextHop {
            gateway: None,
            interface: None,
            onlink: false,
            weight: 1,
        };
        assert!(install(&bad(RouteKind::unicast(vec![none])), 201).is_err());
    }

    #[test]
    fn deletes_name_only_prefix_table_and_protocol() {
        let m = delete(&net("198.18.5.0/26"), 254, 201);
        assert_eq!(m.header.scope, RouteScope::NoWhere);
        assert_eq!(m.header.kind, RouteType::Unspec);
        assert_eq!(protocol_of(&m.header), 201);
        assert_eq!(m.attributes.len(), 1, "{:?}", m.attributes);
        let m = delete(&net("2001:db8::/32"), 300, 201);
        assert_eq!(table_of(&m), 300);
    }

    #[test]
    fn a_refusal_names_the_route_it_echoes() {
        let echo = |change: &RouteChange| {
            let m = request(change, 201, false).unwrap_or_else(|e| panic!("{e}"));
            let mut buf = vec![0; m.buffer_len()];
            m.serialize(&mut buf);
            buf
        };
        let replace = RouteChange::Replace(Route {
            prefix: net("2001:db8:5::/64"),
            kind: RouteKind::Blackhole,
            metric: 0,
            table: 254,
        });
        let f = refused(&echo(&replace), -libc::EEXIST);
        assert_eq!(f.kind, FailureKind::Exists);
        assert!(f.reason.contains("(errno 17)"), "{}", f.reason);
        assert_eq!((f.prefix, f.change), (net("2001:db8:5::/64"), "replace"));
        let add = RouteChange::Add(Route {
            prefix: net("198.18.6.0/26"),
            kind: RouteKind::Unreachable,
            metric: 0,
            table: 254,
        });
        assert_eq!(refused(&echo(&add), -libc::ENETUNREACH).change, "add");
        assert_eq!(
            refused(&echo(&add), -libc::ENETUNREACH).kind,
            FailureKind::Unreachable
        );
        let del = RouteChange::Delete {
            prefix: net("198.18.5.0/26"),
            table: 254,
        };
        let f = refused(&echo(&del), -libc::ESRCH);
        assert_eq!(f.kind, FailureKind::NotFound);
        assert_eq!((f.prefix, f.change), (net("198.18.5.0/26"), "delete"));
        assert_eq!(f.reason, "No such process (errno 3)");
        let f = refused(&echo(&del)[..10], -libc::EINVAL);
        assert!(f.reason.contains("did not say"), "{f:?}");
    }
}
