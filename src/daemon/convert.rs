//! Translations between the crates' types: intent → speaker settings, Loc-RIB entries
//! → kernel routes (and their reshaping when the encapsulation changes) and `tern
//! routes` rows. Pure.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;
use tern_bgp::rib::Best;
use tern_bgp::speaker::{PeerConfig, SpeakerConfig, DEFAULT_CONNECT_RETRY, DEFAULT_HOLD_TIME};
use tern_bgp::wire::{Community, Family, LargeCommunity, Origin, PathAttributes};
use tern_config::cluster::{AddressFamily, NextHopMode};
use tern_config::daemon::Limits;
use tern_config::intent::{Encapsulation, Intent, Origination, PeerIntent};
use tern_config::values;
use tern_fib::{NextHop, Route, RouteKind};

use crate::control::proto::{PathInfo, RouteInfo};

/// The speaker's settings for an intent. Passwords are read from their sources here; a
/// peer whose password cannot be read is left out (its error, naming the peer and the
/// source, is returned) so one bad secret does not stop every other session.
/// `limits` are `tern.yaml`'s route limits.
pub fn speaker_config(
    i: &Intent,
    secrets_dir: &Path,
    limits: &Limits,
) -> (SpeakerConfig, Vec<String>) {
    // bindMode NodeIP binds each node address (IPv4 and IPv6 on a dual-stack node),
    // as confd renders one BIRD per family, each listening on its own address.
    let listen_ip: IpAddr = match i.listen.addresses.first() {
        Some(a) => *a,
        // Dual-stack when the node has IPv6, so one listener takes both families.
        None if i.ipv6.is_some() => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        None => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    };
    let mut peers = Vec::new();
    let mut errors = Vec::new();
    for p in i.peers.values() {
        match peer_config(i, p, secrets_dir, limits) {
            Ok(c) => peers.push(c),
            Err(e) => errors.push(e),
        }
    }
    let cfg = SpeakerConfig {
        router_id: i.router_id,
        local_as: i.asn,
        listen: Some(SocketAddr::new(listen_ip, i.listen.port)),
        extra_listen: i
            .listen
            .addresses
            .iter()
            .skip(1)
            .map(|a| SocketAddr::new(*a, i.listen.port))
            .collect(),
        cluster_id: i.rr_cluster_id,
        max_paths: 8,
        peers,
        restarting: false,
        max_routes: limits.max_routes,
    };
    (cfg, errors)
}

fn secs(d: Option<Duration>) -> Option<u16> {
    d.map(|d| u16::try_from(d.as_secs()).unwrap_or(u16::MAX))
}

/// One peer's speaker settings.
pub fn peer_config(
    i: &Intent,
    p: &PeerIntent,
    secrets_dir: &Path,
    limits: &Limits,
) -> Result<PeerConfig, String> {
    // The snapshot's Kubernetes Secret first, then the mounted secrets directory.
    let password = p
        .resolve_password(secrets_dir)
        .map_err(|e| format!("peer {} ({}): {e}", p.address, p.origin))?
        .map(|s| s.expose().to_string());
    let local_v6 = match i.ipv6 {
        Some((IpAddr::V6(a), _)) => Some(a),
        _ => None,
    };
    let local_v4 = i.ipv4.map(|(a, _)| a);
    Ok(PeerConfig {
        address: SocketAddr::new(p.address, p.port),
        peer_as: p.remote_as,
        local_as: (p.local_as != i.asn).then_some(p.local_as),
        local_address: p.source,
        local_v6,
        local_v4,
        hold_time: secs(p.hold).unwrap_or(DEFAULT_HOLD_TIME),
        keepalive: secs(p.keepalive),
        connect_retry: DEFAULT_CONNECT_RETRY,
        passive: p.passive,
        password,
        ttl_security: p.ttl_security,
        rr_client: p.rr_client,
        next_hop_self: p.next_hop == NextHopMode::SelfHop,
        next_hop_keep: p.next_hop == NextHopMode::Keep,
        allowas_in: u8::try_from(p.allowas_in).unwrap_or(u8::MAX),
        // Validation caps the time at 4095 s, the capability's 12-bit field.
        families: p
            .families
            .iter()
            .map(|f| match f {
                AddressFamily::Ipv4 => Family::IPV4_UNICAST,
                AddressFamily::Ipv6 => Family::IPV6_UNICAST,
            })
            .collect(),
        restart_time: p
            .restart_time
            .map(|t| u16::try_from(t.as_secs()).unwrap_or(4095).min(4095)),
        // Calico has no setting for these: RFC 4271's 240 s and RFC 9687's default.
        open_hold_time: None,
        send_hold_time: None,
        max_prefixes: limits.max_prefixes_per_peer,
        policy: Some(super::policy::compile(i, p)),
    })
}

/// The LOCAL_PREF of our own routes in our RIB: what Calico's export preamble gives
/// them (`BIRD_INT_MAX - priority`, the normal priority 1024), which is also what
/// other nodes' own routes arrive with. With LOCAL_PREF 100 a node's own route (a
/// borrowed anycast /32) would lose to the same prefix learnt from another node.
pub const OWN_LOCAL_PREF: u32 =
    tern_bgp::policy::BIRD_INT_MAX - tern_bgp::policy::DEFAULT_NORMAL_PRIORITY;

/// The attributes of our own routes before communities: ORIGIN IGP, [`OWN_LOCAL_PREF`].
pub fn own_attrs() -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        local_pref: Some(OWN_LOCAL_PREF),
        ..PathAttributes::default()
    }
}

/// BGP attributes of an originated prefix.
pub fn origin_attrs(o: &Origination) -> PathAttributes {
    let mut a = own_attrs();
    for c in &o.communities {
        match c {
            values::Community::Standard(v) => a.communities.push(Community(*v)),
            values::Community::Large(g, l1, l2) => a.large_communities.push(LargeCommunity {
                global: *g,
                local1: *l1,
                local2: *l2,
            }),
        }
    }
    a
}

/// The kernel route for a Loc-RIB entry learned from peers; `None` for our own and for
/// a prefix inside a pool whose routes Felix programs (VXLAN pools, every pool with
/// `programClusterRoutes: Disabled`). A next hop the pool wants reached through IPIP
/// is `onlink` with the interface left open: the FIB task puts it on the tunnel device
/// (it knows the interfaces). The metric is the one v3.32's BIRD gives the route: the
/// import policy's `setPriority` if it set one, else [`Encapsulation::metric`].
pub fn kernel_route(
    prefix: IpNet,
    best: &Best,
    table: u32,
    encap: &Encapsulation,
) -> Option<Route> {
    if best.best.source.local || !encap.programs(&prefix) {
        return None;
    }
    let b = &best.best;
    let metric = kernel_metric(
        &prefix,
        b.attrs
            .kernel_priority
            .unwrap_or_else(|| encap.metric(&prefix, b.attrs.local_pref)),
    );
    let mut hops: Vec<IpAddr> = best.multipath.iter().map(|p| p.next_hop).collect();
    if hops.is_empty() {
        hops.push(best.best.next_hop);
    }
    hops.sort();
    hops.dedup();
    Some(Route {
        prefix,
        kind: RouteKind::Unicast(
            hops.into_iter()
                .map(|h| NextHop {
                    onlink: ipip(prefix, h, encap),
                    ..NextHop::via(h)
                })
                .collect(),
        ),
        metric,
        table,
    })
}

/// A metric as tern-fib holds it: for IPv6 the kernel's default 1024 reads back as
/// 0, so 1024 is written as 0 (the same kernel route) to compare equal.
fn kernel_metric(prefix: &IpNet, metric: u32) -> u32 {
    const IPV6_DEFAULT_METRIC: u32 = 1024;
    match prefix {
        IpNet::V6(_) if metric == IPV6_DEFAULT_METRIC => 0,
        _ => metric,
    }
}

/// Whether the route to `prefix` goes to `next_hop` through IPIP (the pool asks for it).
fn ipip(prefix: IpNet, next_hop: IpAddr, encap: &Encapsulation) -> bool {
    encap.any() && encap.ipip_toward(&prefix, next_hop)
}

/// The host route to a peer through its `reachableBy` gateway. Metric 0: BIRD gives a
/// static route no `krt_metric`, so the kernel's default.
pub fn peer_route(prefix: IpNet, gateway: IpAddr, table: u32) -> Route {
    Route {
        prefix,
        kind: RouteKind::Unicast([NextHop::via(gateway)].into()),
        metric: 0,
        table,
    }
}

/// The blackhole of an own block.
pub fn blackhole(prefix: IpNet, table: u32) -> Route {
    Route {
        prefix,
        kind: RouteKind::Blackhole,
        metric: 0,
        table,
    }
}

/// A Loc-RIB entry as `tern routes` shows it.
pub fn route_info(
    prefix: IpNet,
    best: &Best,
    intent: Option<&Intent>,
    installed: bool,
) -> RouteInfo {
    let b = &best.best;
    let a = &b.attrs;
    let source = if b.source.local {
        intent
            .and_then(|i| i.originated.get(&prefix))
            .map(|o| o.source.as_str())
            .unwrap_or("block")
    } else {
        "bgp"
    };
    let mut next_hops: Vec<String> = best
        .multipath
        .iter()
        .map(|p| p.next_hop.to_string())
        .collect();
    next_hops.dedup();
    if next_hops.is_empty() {
        next_hops.push(b.next_hop.to_string());
    }
    RouteInfo {
        prefix: prefix.to_string(),
        best: path_info(
            a,
            if b.source.local {
                vec!["local".into()]
            } else {
                next_hops
            },
            if b.source.local {
                "local".into()
            } else {
                b.source.address.to_string()
            },
            source,
        ),
        ecmp: best.multipath.len() > 1,
        installed,
        paths: Vec::new(),
    }
}

/// One path's attributes as the CLI shows them (`tern routes`, `--advertised`): the one
/// place they are turned into text.
pub fn path_info(
    a: &PathAttributes,
    next_hops: Vec<String>,
    peer: String,
    source: &str,
) -> PathInfo {
    PathInfo {
        next_hops,
        as_path: a
            .as_path
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        origin: match a.origin {
            Some(Origin::Igp) | None => "igp",
            Some(Origin::Egp) => "egp",
            Some(_) => "incomplete",
        }
        .into(),
        local_pref: a.local_pref,
        med: a.med,
        communities: a
            .communities
            .iter()
            .map(|c| format!("{}:{}", c.0 >> 16, c.0 & 0xffff))
            .collect(),
        large_communities: a
            .large_communities
            .iter()
            .map(|c| format!("{}:{}:{}", c.global, c.local1, c.local2))
            .collect(),
        peer,
        source: source.into(),
    }
}

#[cfg(test)]
mod password_tests {
    //! The speaker gets the snapshot's Secret value first, the mounted file otherwise.

    use super::*;
    use tern_config::cluster::Cluster;
    use tern_config::datastore::Document;

    const CLUSTER: &str = "apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-a}
spec: {bgp: {ipv4Address: 198.51.100.10/24}}
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {peerIP: 198.51.100.1, asNumber: 64513, password: {secretKeyRef: {name: bgp, key: tor}}}
";

    fn password(text: &str, secrets_dir: &Path) -> Result<Option<String>, String> {
        let (c, _) = Cluster::from_documents(&[Document {
            origin: "cluster.yaml".into(),
            text: text.into(),
        }])
        .unwrap();
        let (i, _) = tern_config::intent::intent(&c, "node-a").unwrap();
        let p = i.peers.values().next().unwrap();
        peer_config(&i, p, secrets_dir, &Limits::default()).map(|c| c.password)
    }

    #[test]
    fn the_snapshot_secret_comes_before_the_mounted_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bgp")).unwrap();
        std::fs::write(dir.path().join("bgp/tor"), "from-file\n").unwrap();
        assert_eq!(
            password(CLUSTER, dir.path()).unwrap().as_deref(),
            Some("from-file")
        );
        // "from-secret" in base64.
        let with_secret = format!(
            "{CLUSTER}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: bgp, namespace: calico-system}}\ndata: {{tor: ZnJvbS1zZWNyZXQ=}}\n"
        );
        assert_eq!(
            password(&with_secret, dir.path()).unwrap().as_deref(),
            Some("from-secret")
        );
        let e = password(&with_secret.replace("tor: ", "other: "), dir.path()).unwrap_err();
        assert!(
            e.contains("peer 198.51.100.1 (BGPPeer tor): secret calico-system/bgp key tor"),
            "{e}"
        );
    }

    /// IPv4 routes over an IPv6 session carry the node's IPv4 address as next hop,
    /// never the router id (with CALICO_ROUTER_ID=hash, not an address of ours); an
    /// IPv6-only node has none to offer.
    #[test]
    fn the_ipv4_next_hop_is_the_node_address_not_the_router_id() {
        let cluster = |node: &str| {
            let text = format!(
                "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {{name: node-a}}\nspec: {{bgp: {node}}}\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: tor, annotations: {{tern/families: \"IPv4,IPv6\"}}}}\nspec: {{peerIP: \"2001:db8:100::1\", asNumber: 64513}}\n"
            );
            Cluster::from_documents(&[Document {
                origin: "cluster.yaml".into(),
                text,
            }])
            .unwrap()
            .0
        };
        let dir = tempfile::tempdir().unwrap();
        let hash = Some(tern_config::intent::RouterIdSetting::Hash);
        for (node, want) in [
            (
                "{ipv4Address: 198.51.100.10/24, ipv6Address: \"2001:db8:100::10/64\"}",
                Some("198.51.100.10".parse().unwrap()),
            ),
            ("{ipv6Address: \"2001:db8:100::10/64\"}", None),
        ] {
            let (i, _) = tern_config::intent::intent_with(&cluster(node), "node-a", hash).unwrap();
            assert_ne!(Some(i.router_id), want);
            let p = i.peers.values().next().unwrap();
            let c = peer_config(&i, p, dir.path(), &Limits::default()).unwrap();
            assert_eq!(c.local_v4, want, "{node}");
        }
    }
}
