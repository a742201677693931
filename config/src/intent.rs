//! What one node must do, computed from the cluster: a pure function from
//! ([`Cluster`], node name) to [`Intent`] — router id and AS, the peer set as Calico
//! computes it, the originated prefixes, and the export/import policy.
//!
//! The peer rules follow Calico's confd templates for BIRD: the node-to-node mesh skips
//! this node and route reflectors (and a route reflector takes no part in the mesh); in
//! the mesh the side with the higher address waits (`passive`) so each pair dials once;
//! BGPPeers apply to all nodes, one node or a node selector, and peer with an address or
//! with the nodes a peer selector picks; with `reversePeering: Auto` the picked nodes
//! peer back; between nodes, a route reflector treats a node outside its cluster id as
//! its client.

mod kernel;
#[cfg(test)]
mod kernel_tests;
mod peers;
#[cfg(test)]
mod router_id_tests;
pub mod services;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ipnet::IpNet;

use crate::cluster::{
    AffinityState, Cluster, EncapMode, Filter, NextHopMode, NormalPriority, PasswordSource, Pool,
    ServiceKind,
};
use crate::datastore::endpoint_status::LocalWorkload;
use crate::values::Community;

/// The role of a peer, as `tern status` names it (JSON contract: docs/json.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKind {
    /// Node-to-node mesh.
    Mesh,
    /// We are its client.
    RouteReflector,
    /// It is our client.
    RouteReflectorClient,
    /// A BGPPeer for all nodes.
    Global,
    /// A BGPPeer for this node or a node selector.
    NodeSpecific,
    /// A workload on this node that Felix selected for a BGPPeer's
    /// `localWorkloadSelector` (confd's `Local_Workload_` peers).
    LocalWorkload,
}

impl PeerKind {
    /// The name used by `tern status` and `tern peers -o json`.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerKind::Mesh => "node-to-node mesh",
            PeerKind::RouteReflector => "route reflector",
            PeerKind::RouteReflectorClient => "route reflector client",
            PeerKind::Global => "global",
            PeerKind::NodeSpecific => "node specific",
            PeerKind::LocalWorkload => "local workload",
        }
    }
}

impl std::fmt::Display for PeerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One BGP session this node must keep.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerIntent {
    /// Peer address.
    pub address: IpAddr,
    /// Peer port.
    pub port: u16,
    /// Peer AS.
    pub remote_as: u32,
    /// Our AS on this session.
    pub local_as: u32,
    /// Role.
    pub kind: PeerKind,
    /// Wait for the peer to connect.
    pub passive: bool,
    /// Source address (the node's address of the peer's family).
    pub source: Option<IpAddr>,
    /// TCP-MD5 password source.
    pub password: Option<PasswordSource>,
    /// Keepalive interval (None: the speaker's default).
    pub keepalive: Option<Duration>,
    /// Hold time (None: the speaker's default).
    pub hold: Option<Duration>,
    /// Graceful-restart time we honour for this peer.
    pub restart_time: Option<Duration>,
    /// GTSM: maximum hops.
    pub ttl_security: Option<u8>,
    /// allowas-in.
    pub allowas_in: u32,
    /// Next hop handling.
    pub next_hop: NextHopMode,
    /// The peer is our route-reflector client.
    pub rr_client: bool,
    /// Gateway to the peer.
    pub reachable_by: Option<IpAddr>,
    /// BGPFilters in order.
    pub filters: Vec<Filter>,
    /// The Node the peer is, when it is one.
    pub peer_node: Option<String>,
    /// Families the session carries: the address's family unless the BGPPeer names
    /// them (tern's `families`), as Calico configures one BIRD session per family.
    pub families: Vec<crate::cluster::AddressFamily>,
    /// The subnet that Node's address is on (its Node resource's prefix length), so
    /// a layer-2 finding can name both networks.
    pub peer_network: Option<IpNet>,
    /// What configured it: `node-to-node mesh` or `BGPPeer <name>`.
    pub origin: String,
    /// The password as the snapshot's Kubernetes Secret gives it (or why it cannot be
    /// used), when `password` names one; `None` reads `password` from its source. Kept
    /// here so that a rotated Secret changes the intent and the session is
    /// reconfigured; the value prints as `***`.
    pub snapshot_password: Option<Result<crate::cluster::Secret, String>>,
}

impl PeerIntent {
    /// Whether the peer is expected not to share a subnet with this node: multihop by
    /// `ttlSecurity` (2 hops or more), reached through a `reachableBy` gateway, or a
    /// workload reached through its interface (a local workload peer). Layer-2
    /// diagnosis reports such a peer as information, not as a problem.
    pub fn off_link_expected(&self) -> bool {
        self.ttl_security.is_some_and(|t| t > 1)
            || self.reachable_by.is_some()
            || self.kind == PeerKind::LocalWorkload
    }

    /// The session's own settings are equal (everything but where it came from), so a
    /// configuration change that leaves them alone must not reset it.
    pub fn same_session(&self, other: &PeerIntent) -> bool {
        let mut a = self.clone();
        a.origin.clone_from(&other.origin);
        a == *other
    }

    /// eBGP: the ASes differ.
    pub fn is_ebgp(&self) -> bool {
        self.remote_as != self.local_as
    }
}

/// Why a prefix is originated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OriginSource {
    /// An IPAM block affine to this node.
    Block,
    /// An address this node borrowed from another node's block.
    Borrowed,
    /// A service range.
    Service(ServiceKind),
}

impl OriginSource {
    /// The `source` name of `tern routes -o json`.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginSource::Block => "block",
            OriginSource::Borrowed => "borrowed",
            OriginSource::Service(_) => "service",
        }
    }
}

/// One originated prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origination {
    /// Why.
    pub source: OriginSource,
    /// Communities from `prefixAdvertisements`.
    pub communities: Vec<Community>,
    /// Advertised to peers (false when the pool has `disableBGPExport`).
    pub export: bool,
    /// A local blackhole route is installed for it (own blocks), so traffic to unused
    /// addresses of the block is dropped here instead of looping.
    pub blackhole: bool,
}

/// Where and how to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// Port.
    pub port: u16,
    /// Addresses; empty means all.
    pub addresses: Vec<IpAddr>,
}

/// Where the BGP router id comes from when the Node's IPv4 address is not to be used:
/// calico-node's `CALICO_ROUTER_ID` (an IPv4 address, or `hash` of the node name, which
/// lets IPv6-only nodes run). Set in `tern.yaml` (`router_id`) or the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterIdSetting {
    /// A fixed router id.
    Address(Ipv4Addr),
    /// Derived from the node name, as calico-node does for `CALICO_ROUTER_ID=hash`.
    Hash,
}

/// Everything this node must do.
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    /// Node name.
    pub node: String,
    /// BGP router id.
    pub router_id: Ipv4Addr,
    /// AS.
    pub asn: u32,
    /// Node IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// Node IPv6 address and prefix length.
    pub ipv6: Option<(IpAddr, u8)>,
    /// Listener.
    pub listen: Listen,
    /// Route-reflector cluster id, when this node is a reflector.
    pub rr_cluster_id: Option<Ipv4Addr>,
    /// Sessions by peer address.
    pub peers: BTreeMap<IpAddr, PeerIntent>,
    /// Originated prefixes.
    pub originated: BTreeMap<IpNet, Origination>,
    /// Blocks affine to this node: more-specifics inside them are not exported.
    pub own_blocks: Vec<IpNet>,
    /// Pools (export and encapsulation per pool).
    pub pools: Vec<Pool>,
    /// Interface patterns never learned from.
    pub ignored_interfaces: Vec<String>,
    /// BGPConfiguration `prefixAdvertisements`: communities added on export to every
    /// route inside each CIDR, reflected routes too (see [`crate::policy`]).
    pub prefix_advertisements: Vec<(IpNet, Vec<Community>)>,
    /// Workload interface name prefixes (FelixConfiguration `interfacePrefix`).
    pub workload_prefixes: Vec<String>,
    /// BGPConfiguration `programClusterRoutes`: tern programs the routes of IPIP and
    /// unencapsulated pools (true) or leaves them to Felix (false).
    pub program_cluster_routes: bool,
    /// The kernel metric of learnt routes per family.
    pub normal_priority: NormalPriority,
}

/// Why no intent could be computed for this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node {node}: {reason}")]
pub struct IntentError {
    /// The node.
    pub node: String,
    /// What is wrong and what to do.
    pub reason: String,
}

/// Computes the intent of `node` with the router id from its Node's IPv4 address.
/// Warnings say what was merged or overridden.
pub fn intent(cluster: &Cluster, node: &str) -> Result<(Intent, Vec<String>), IntentError> {
    intent_with(cluster, node, None)
}

/// Computes the intent of `node`, the router id chosen as calico-node chooses it:
/// `router_id` (`CALICO_ROUTER_ID`: an address, or `hash` of the node name) when set,
/// else the Node's IPv4 address. An IPv6-only node therefore needs the setting.
pub fn intent_with(
    cluster: &Cluster,
    node: &str,
    router_id: Option<RouterIdSetting>,
) -> Result<(Intent, Vec<String>), IntentError> {
    intent_of(cluster, node, router_id, &[])
}

/// [`intent_with`], with the workloads Felix selected for local workload peerings
/// (its endpoint status files, see [`crate::datastore::endpoint_status`]).
pub fn intent_of(
    cluster: &Cluster,
    node: &str,
    router_id: Option<RouterIdSetting>,
    local: &[LocalWorkload],
) -> Result<(Intent, Vec<String>), IntentError> {
    let err = |reason: String| IntentError {
        node: node.to_string(),
        reason,
    };
    let me = cluster.nodes.get(node).ok_or_else(|| {
        err(format!(
            "no Node resource named {node:?} in the datastore ({} nodes known); check `node` in tern.yaml",
            cluster.nodes.len()
        ))
    })?;
    if me.ipv4.is_none() && me.ipv6.is_none() {
        return Err(err(
            "the Node has no spec.bgp.ipv4Address or ipv6Address, so it cannot speak BGP".into(),
        ));
    }
    let router_id = match router_id {
        Some(RouterIdSetting::Address(a)) if a.is_unspecified() => {
            return Err(err(
                "the router id 0.0.0.0 set by CALICO_ROUTER_ID is not valid in BGP; give another IPv4 address or `hash`".into(),
            ))
        }
        Some(RouterIdSetting::Address(a)) => a,
        Some(RouterIdSetting::Hash) => hashed_router_id(node),
        None => me.ipv4.map(|(a, _)| a).ok_or_else(|| {
            err("the router id cannot be derived: the Node has no spec.bgp.ipv4Address, which tern (like Calico) uses as the router id; on an IPv6-only node set CALICO_ROUTER_ID (the environment variable, or router_id in tern.yaml) to an IPv4 address or to `hash`".into())
        })?,
    };
    let asn = me.as_number.unwrap_or(cluster.bgp.as_number);
    let (port_override, bind_override) = cluster
        .bgp
        .node_overrides
        .get(node)
        .copied()
        .unwrap_or_default();
    let bind = bind_override.unwrap_or(cluster.bgp.bind_node_ip);
    let listen = Listen {
        port: port_override.unwrap_or(cluster.bgp.listen_port),
        addresses: if bind {
            me.ipv4
                .map(|(a, _)| IpAddr::V4(a))
                .into_iter()
                .chain(me.ipv6.map(|(a, _)| a))
                .collect()
        } else {
            Vec::new()
        },
    };
    let mut warnings = Vec::new();
    let peers = peers::peers(cluster, me, asn, local, &mut warnings).map_err(err)?;
    let (originated, own_blocks) = originated(cluster, node);
    Ok((
        Intent {
            node: node.to_string(),
            router_id,
            asn,
            ipv4: me.ipv4,
            ipv6: me.ipv6,
            listen,
            rr_cluster_id: me.rr_cluster_id,
            peers,
            originated,
            own_blocks,
            pools: cluster.pools.clone(),
            ignored_interfaces: cluster.bgp.ignored_interfaces.clone(),
            prefix_advertisements: cluster.bgp.prefix_advertisements.clone(),
            workload_prefixes: kernel::workload_prefixes(&cluster.interface_prefixes),
            program_cluster_routes: cluster.bgp.program_cluster_routes,
            normal_priority: cluster.bgp.normal_priority,
        },
        warnings,
    ))
}

/// The router id calico-node uses with `CALICO_ROUTER_ID=hash` (confd's `hashToIPv4`):
/// the first four bytes of the SHA-256 of the node name, the first lowered by 32 when
/// above 223 so that the id is never a multicast or reserved (224-255) address.
pub fn hashed_router_id(node: &str) -> Ipv4Addr {
    let digest = ring::digest::digest(&ring::digest::SHA256, node.as_bytes());
    let mut octets = [0u8; 4];
    for (o, b) in octets.iter_mut().zip(digest.as_ref()) {
        *o = *b;
    }
    if octets[0] > 223 {
        octets[0] -= 32;
    }
    Ipv4Addr::from(octets)
}

/// Own blocks, borrowed addresses and service ranges, with communities attached.
fn originated(cluster: &Cluster, node: &str) -> (BTreeMap<IpNet, Origination>, Vec<IpNet>) {
    let mut out = BTreeMap::new();
    let export_of = |net: &IpNet| cluster.pool_of(net).is_none_or(|p| p.export);
    let mut own: Vec<IpNet> = cluster
        .affinities
        .iter()
        .filter(|a| a.node == node && a.state == AffinityState::Confirmed && !a.deleted)
        .map(|a| a.cidr)
        .collect();
    // A block whose affinity record is missing still belongs to its affine host; one
    // whose record says pending or pendingDeletion does not (yet, or any more).
    for b in &cluster.blocks {
        if b.affinity.as_deref() == Some(node)
            && !b.deleted
            && !cluster
                .affinities
                .iter()
                .any(|a| a.node == node && a.cidr == b.cidr)
        {
            own.push(b.cidr);
        }
    }
    own.sort();
    own.dedup();
    for b in &own {
        out.insert(
            *b,
            Origination {
                source: OriginSource::Block,
                communities: Vec::new(),
                export: export_of(b),
                blackhole: true,
            },
        );
    }
    for b in cluster.blocks.iter().filter(|b| !b.deleted) {
        if b.affinity.as_deref() == Some(node) || own.contains(&b.cidr) {
            continue;
        }
        for (addr, owner) in &b.allocations {
            if owner.as_deref() != Some(node) {
                continue;
            }
            let net = IpNet::from(*addr);
            out.insert(
                net,
                Origination {
                    source: OriginSource::Borrowed,
                    communities: Vec::new(),
                    export: export_of(&net),
                    blackhole: false,
                },
            );
        }
    }
    let host_routes = services::routes(cluster, node);
    // The configured ranges, then this node's host routes for Services.
    let service_routes = cluster
        .bgp
        .services
        .iter()
        .map(|(c, k)| (c, k))
        .chain(&host_routes);
    for (cidr, kind) in service_routes {
        out.entry(*cidr).or_insert(Origination {
            source: OriginSource::Service(*kind),
            communities: Vec::new(),
            export: true,
            blackhole: false,
        });
    }
    for (net, o) in out.iter_mut() {
        for (cidr, comms) in &cluster.bgp.prefix_advertisements {
            if cidr.contains(net) {
                for c in comms {
                    if !o.communities.contains(c) {
                        o.communities.push(*c);
                    }
                }
            }
        }
    }
    (out, own)
}

/// The IP pools that ask for IPIP, and this node's IPv4 subnet (for CrossSubnet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encapsulation {
    pools: Vec<(IpNet, EncapMode)>,
    ipv4: Option<(std::net::Ipv4Addr, u8)>,
    /// Pools whose routes Felix programs (see [`kernel`]).
    felix_pools: Vec<IpNet>,
    /// The node's own subnets, which the kernel's connected routes serve.
    connected: Vec<IpNet>,
    /// Kernel metric of learnt routes.
    priority: NormalPriority,
}

impl Encapsulation {
    /// Whether any pool asks for IPIP at all (most clusters: none).
    pub fn any(&self) -> bool {
        !self.pools.is_empty()
    }

    /// See [`Intent::ipip_toward`]. Calico decides CrossSubnet by the node's own
    /// address and prefix length, as this does, not by the kernel's routes.
    pub fn ipip_toward(&self, net: &IpNet, next_hop: IpAddr) -> bool {
        match self
            .pools
            .iter()
            .find(|(c, _)| c.contains(net))
            .map(|(_, m)| *m)
        {
            Some(EncapMode::Always) => true,
            Some(EncapMode::CrossSubnet) => match (self.ipv4, next_hop) {
                (Some((a, len)), IpAddr::V4(h)) => ipnet::Ipv4Net::new(a, len)
                    .map(|n| !n.contains(&h))
                    .unwrap_or(true),
                _ => false,
            },
            _ => false,
        }
    }
}

impl Intent {
    /// The pool containing `net`.
    pub fn pool_of(&self, net: &IpNet) -> Option<&Pool> {
        self.pools.iter().find(|p| p.cidr.contains(net))
    }

    /// Whether a route toward a node at `next_hop` inside `net` is encapsulated with
    /// IPIP: always, never, or (CrossSubnet) when the next hop is not on this node's
    /// subnet.
    pub fn ipip_toward(&self, net: &IpNet, next_hop: IpAddr) -> bool {
        self.encapsulation().ipip_toward(net, next_hop)
    }

    /// The host routes to peers that BGPPeer `reachableBy` asks for: the peer's
    /// address (/32 or /128) through the gateway, as confd's static protocol has them
    /// (`route <peerIP>/32 via <reachableBy>` in `bird_aggr.cfg.template`).
    pub fn peer_routes(&self) -> BTreeMap<IpNet, IpAddr> {
        self.peers
            .values()
            .filter_map(|p| Some((IpNet::from(p.address), p.reachable_by?)))
            .collect()
    }

    /// What deciding encapsulation needs, copied out so the daemon can decide per route
    /// without holding on to the whole intent.
    pub fn encapsulation(&self) -> Encapsulation {
        Encapsulation {
            pools: self
                .pools
                .iter()
                .filter(|p| p.ipip != EncapMode::Never)
                .map(|p| (p.cidr, p.ipip))
                .collect(),
            ipv4: self.ipv4,
            felix_pools: self.felix_pools(),
            connected: self.connected(),
            priority: self.normal_priority,
        }
    }
}
