//! Capability negotiation (RFC 5492): what two OPENs agree on. The intersection drives
//! everything after: how each direction is encoded ([`CodecOptions`] for receive and
//! for send), which families the session carries, the hold and keepalive times, and
//! what the peer said about graceful restart.

use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;

use crate::wire::{Capability, CodecOptions, Family, GracefulRestart, Open};

/// What a session negotiated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Negotiated {
    /// The peer's AS (from its 4-octet AS capability when present).
    pub peer_asn: u32,
    /// The peer's BGP identifier.
    pub peer_id: Ipv4Addr,
    /// Hold time in seconds: the smaller of the two proposals; 0 disables keepalives.
    pub hold_time: u16,
    /// Keepalive interval in seconds (0 when the hold time is 0).
    pub keepalive: u16,
    /// Families both sides enabled.
    pub families: Vec<Family>,
    /// How to decode what the peer sends.
    #[serde(skip)]
    pub rx: CodecOptions,
    /// How to encode what we send.
    #[serde(skip)]
    pub tx: CodecOptions,
    /// Both support route refresh (RFC 2918).
    pub route_refresh: bool,
    /// Both support enhanced route refresh (RFC 7313).
    pub enhanced_route_refresh: bool,
    /// IPv4 NLRI may carry IPv6 next hops (RFC 8950), both sides agreeing.
    pub extended_next_hop_ipv4: bool,
    /// The peer's graceful restart capability, if it sent one.
    pub peer_graceful_restart: Option<GracefulRestart>,
    /// Families on which we receive several paths per prefix (ADD-PATH).
    pub add_path_receive: Vec<Family>,
    /// Families on which we may send several paths per prefix.
    pub add_path_send: Vec<Family>,
    /// Our end of the session's TCP connection, filled in by the driver once the
    /// session is up (the sans-IO machine has no socket: None there): the NEXT_HOP
    /// an eBGP peer gets (RFC 4271 §5.1.3).
    pub local_address: Option<IpAddr>,
    /// Our TCP port on the connection (filled in with `local_address`).
    pub local_port: Option<u16>,
    /// The peer's TCP port on the connection: 179 when we connected, its ephemeral
    /// port when it did.
    pub remote_port: Option<u16>,
}

impl Negotiated {
    /// Capability names as `tern peers` shows them.
    pub fn capability_names(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.rx.four_octet_as {
            v.push("4-octet-as".to_string());
        }
        if self.route_refresh {
            v.push("route-refresh".into());
        }
        if self.enhanced_route_refresh {
            v.push("enhanced-route-refresh".into());
        }
        if self.rx.extended_message {
            v.push("extended-message".into());
        }
        if self.extended_next_hop_ipv4 {
            v.push("extended-next-hop".into());
        }
        if self.peer_graceful_restart.is_some() {
            v.push("graceful-restart".into());
        }
        if !self.add_path_receive.is_empty() || !self.add_path_send.is_empty() {
            v.push("add-path".into());
        }
        v
    }
}

fn families(o: &Open) -> Vec<Family> {
    let v: Vec<Family> = o
        .capabilities
        .iter()
        .filter_map(|c| match c {
            Capability::Multiprotocol(f) => Some(*f),
            _ => None,
        })
        .collect();
    // RFC 4760 §8: a speaker that sends no multiprotocol capability speaks IPv4 unicast.
    if v.is_empty() {
        vec![Family::IPV4_UNICAST]
    } else {
        v
    }
}

fn has(o: &Open, want: &Capability) -> bool {
    o.capabilities.contains(want)
}

/// ADD-PATH families where `sender` may send and `receiver` receives.
fn add_path(sender: &Open, receiver: &Open, families: &[Family]) -> Vec<Family> {
    let dir = |o: &Open, f: Family, send: bool| {
        o.capabilities.iter().any(|c| match c {
            Capability::AddPath(v) => v
                .iter()
                .any(|a| a.family == f && if send { a.send } else { a.receive }),
            _ => false,
        })
    };
    families
        .iter()
        .copied()
        .filter(|f| dir(sender, *f, true) && dir(receiver, *f, false))
        .collect()
}

/// Intersects our OPEN with the peer's. `keepalive` is the configured interval (None:
/// a third of the hold time).
pub fn negotiate(local: &Open, remote: &Open, keepalive: Option<u16>) -> Negotiated {
    let hold_time = local.hold_time.min(remote.hold_time);
    let keepalive = if hold_time == 0 {
        0
    } else {
        keepalive.unwrap_or(hold_time / 3).clamp(1, hold_time / 3)
    };
    let theirs = families(remote);
    let fams: Vec<Family> = families(local)
        .into_iter()
        .filter(|f| theirs.contains(f))
        .collect();
    let four = local.four_octet_as() && remote.four_octet_as();
    let ext = has(local, &Capability::ExtendedMessage) && has(remote, &Capability::ExtendedMessage);
    let add_path_receive = add_path(remote, local, &fams);
    let add_path_send = add_path(local, remote, &fams);
    let codec = |ap: &[Family]| CodecOptions {
        four_octet_as: four,
        extended_message: ext,
        add_path_ipv4: ap.contains(&Family::IPV4_UNICAST),
        add_path_ipv6: ap.contains(&Family::IPV6_UNICAST),
    };
    let enh_v4_v6 = |o: &Open| {
        o.capabilities.iter().any(|c| match c {
            Capability::ExtendedNextHop(v) => v.iter().any(|e| e.family == Family::IPV4_UNICAST),
            _ => false,
        })
    };
    Negotiated {
        peer_asn: remote.asn(),
        peer_id: remote.bgp_id,
        hold_time,
        keepalive,
        rx: codec(&add_path_receive),
        tx: codec(&add_path_send),
        families: fams,
        route_refresh: has(local, &Capability::RouteRefresh)
            && has(remote, &Capability::RouteRefresh),
        enhanced_route_refresh: has(local, &Capability::EnhancedRouteRefresh)
            && has(remote, &Capability::EnhancedRouteRefresh),
        extended_next_hop_ipv4: enh_v4_v6(local) && enh_v4_v6(remote),
        peer_graceful_restart: remote.capabilities.iter().find_map(|c| match c {
            Capability::GracefulRestart(g) => Some(g.clone()),
            _ => None,
        }),
        add_path_receive,
        add_path_send,
        local_address: None,
        local_port: None,
        remote_port: None,
    }
}
