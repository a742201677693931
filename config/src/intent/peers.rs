//! The peer set of one node: the node-to-node mesh, then every BGPPeer that applies
//! (forward, and reverse for `reversePeering: Auto`), merged by peer address the way
//! confd's `updatePeersV1` merges them: global peerings first, then node-specific
//! ones, then reverse peerings; the first peering to an address wins and a later one
//! that differs is dropped with a warning naming both resources.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::{PeerIntent, PeerKind};
use crate::cluster::{
    AddressFamily, Applies, Cluster, NextHopMode, Node, PasswordSource, PeerResource, PeerTarget,
    Secret,
};
use crate::datastore::endpoint_status::LocalWorkload;

/// confd's passes over the BGPPeers, in the order it emits them (`updatePeersV1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// BGPPeers without `node`/`nodeSelector`.
    Global,
    /// BGPPeers with `node` or `nodeSelector`.
    NodeSpecific,
    /// The reverse peerings that keep Calico nodes symmetric.
    Reverse,
}

/// All sessions of `me`, keyed by peer address.
pub(super) fn peers(
    cluster: &Cluster,
    me: &Node,
    asn: u32,
    local: &[LocalWorkload],
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<IpAddr, PeerIntent>, String> {
    let mut out: BTreeMap<IpAddr, PeerIntent> = BTreeMap::new();
    if cluster.bgp.mesh && me.rr_cluster_id.is_none() {
        mesh(cluster, me, asn, &mut out);
    }
    // Which pass each BGPPeer session came from, to say why a duplicate lost.
    let mut passes: BTreeMap<IpAddr, Pass> = BTreeMap::new();
    for pass in [Pass::Global, Pass::NodeSpecific, Pass::Reverse] {
        // `cluster.peers` is sorted by name: within a pass the first name wins
        // (confd walks a Go map there, in no fixed order).
        for p in &cluster.peers {
            for s in bgp_peer_sessions(cluster, p, me, (asn, local), pass) {
                merge(&mut out, &mut passes, (s, pass), warnings);
            }
        }
    }
    Ok(out)
}
/// The port `n` listens on: its own BGPConfiguration's, else the cluster's.
fn port_of(cluster: &Cluster, n: &Node) -> u16 {
    cluster
        .bgp
        .node_overrides
        .get(&n.name)
        .and_then(|(p, _)| *p)
        .unwrap_or(cluster.bgp.listen_port)
}

/// The node-to-node mesh: a session with every other node that is not a route
/// reflector, per address family both have.
fn mesh(cluster: &Cluster, me: &Node, asn: u32, out: &mut BTreeMap<IpAddr, PeerIntent>) {
    for other in cluster.nodes.values() {
        if other.name == me.name || other.rr_cluster_id.is_some() {
            continue;
        }
        for (mine, theirs) in pairs(me, other) {
            out.insert(
                theirs,
                PeerIntent {
                    address: theirs,
                    port: port_of(cluster, other),
                    remote_as: other.as_number.unwrap_or(cluster.bgp.as_number),
                    local_as: asn,
                    kind: PeerKind::Mesh,
                    // One side waits so each pair opens one connection: we wait
                    // for a peer whose address is greater *as text*, exactly as
                    // Calico's confd template compares them ("10.0.0.5" >
                    // "10.0.0.10"), so a tern node and a Calico BIRD node in one
                    // mesh never both wait.
                    passive: theirs.to_string() > mine.to_string(),
                    source: Some(mine),
                    password: cluster.bgp.mesh_password.clone(),
                    snapshot_password: snapshot_password(
                        cluster,
                        cluster.bgp.mesh_password.as_ref(),
                    ),
                    keepalive: cluster.bgp.mesh_keepalive,
                    hold: cluster.bgp.mesh_hold,
                    restart_time: cluster.bgp.mesh_restart_time,
                    ttl_security: None,
                    allowas_in: 0,
                    next_hop: NextHopMode::Auto,
                    rr_client: false,
                    reachable_by: None,
                    filters: Vec::new(),
                    peer_node: Some(other.name.clone()),
                    peer_network: other.network_of(theirs),
                    families: vec![AddressFamily::of(theirs)],
                    origin: "node-to-node mesh".into(),
                },
            );
        }
    }
}

/// The sessions one BGPPeer gives `me` in `pass`: forward (it applies to `me`; a
/// global or a node-specific pass by its node side), and reverse (`reversePeering:
/// Auto`, and its peer side is `me`: its peerSelector selects `me`, or its peerIP is
/// one of my addresses and its asNumber my AS).
fn bgp_peer_sessions(
    cluster: &Cluster,
    p: &PeerResource,
    me: &Node,
    (asn, local): (u32, &[LocalWorkload]),
    pass: Pass,
) -> Vec<PeerIntent> {
    let global = matches!(p.applies, Applies::Global);
    match pass {
        Pass::Global if global => forward(cluster, p, me, asn, local),
        Pass::NodeSpecific if !global => forward(cluster, p, me, asn, local),
        Pass::Reverse if p.reverse_auto => reverse(cluster, p, me, asn),
        _ => Vec::new(),
    }
}

/// The sessions of a BGPPeer that applies to `me`, toward its peer side.
fn forward(
    cluster: &Cluster,
    p: &PeerResource,
    me: &Node,
    asn: u32,
    local: &[LocalWorkload],
) -> Vec<PeerIntent> {
    if !applies(&p.applies, me) {
        return Vec::new();
    }
    match &p.target {
        PeerTarget::Address(a, port) => {
            if node_addresses(me).contains(a) {
                return Vec::new();
            }
            let mut s = session(cluster, p, me, asn, None, *a);
            // A peerIP without a port that is a Calico node of that AS: its listenPort.
            s.port = port.unwrap_or_else(|| {
                nodes_at(cluster, *a, p.as_number, None)
                    .first()
                    .map_or(179, |n| port_of(cluster, n))
            });
            // confd's `calico_node` flag: a global peering with a Calico node
            // gets the mesh's rule, the greater address (as text) waits.
            if matches!(p.applies, Applies::Global) && is_node_address(cluster, *a) {
                if let Some(mine) = me.address_like(*a) {
                    s.passive = a.to_string() > mine.to_string();
                }
            }
            vec![s]
        }
        PeerTarget::Nodes(sel) => {
            with_nodes(cluster, p, me, asn, |other| sel.matches(&other.labels))
        }
        PeerTarget::LocalWorkloads(_) => workload_sessions(cluster, p, me, asn, local),
    }
}

/// The sessions with this node's workloads that Felix selected for BGPPeer `p`: one
/// per address family the workload has, as confd's `Local_Workload_` peers are
/// (`processPeersFromPath`): the BGPPeer's AS, local AS and filters; passive (the
/// workload dials the peering address Felix gave its interface); no source address;
/// multihop, without TTL security. The session settings confd's local peer data does
/// not carry (password, timers, next-hop mode) are left at their defaults.
fn workload_sessions(
    cluster: &Cluster,
    p: &PeerResource,
    me: &Node,
    asn: u32,
    local: &[LocalWorkload],
) -> Vec<PeerIntent> {
    let mut out = Vec::new();
    for w in local.iter().filter(|w| w.bgp_peer == p.name) {
        let addresses = w
            .ipv4
            .map(IpAddr::V4)
            .into_iter()
            .chain(w.ipv6.map(IpAddr::V6));
        for address in addresses {
            let mut s = session(cluster, p, me, asn, None, address);
            if s.kind != PeerKind::RouteReflectorClient {
                s.kind = PeerKind::LocalWorkload;
            }
            s.passive = true;
            s.source = None;
            s.password = None;
            s.snapshot_password = None;
            s.keepalive = None;
            s.hold = None;
            s.restart_time = None;
            s.ttl_security = None;
            s.next_hop = NextHopMode::Auto;
            s.families = vec![AddressFamily::of(address)];
            s.origin = format!("BGPPeer {} (workload {})", p.name, w.interface);
            out.push(s);
        }
    }
    out
}

/// The reverse sessions of a BGPPeer whose peer side is `me`, toward the nodes of its
/// node side (every node when it is global). A peerIP reverses only in its family.
fn reverse(cluster: &Cluster, p: &PeerResource, me: &Node, asn: u32) -> Vec<PeerIntent> {
    let family = match &p.target {
        PeerTarget::Nodes(sel) if sel.matches(&me.labels) => None,
        PeerTarget::Address(a, port)
            if nodes_at(cluster, *a, p.as_number, *port)
                .iter()
                .any(|n| n.name == me.name) =>
        {
            Some(AddressFamily::of(*a))
        }
        _ => return Vec::new(),
    };
    let mut found = with_nodes(cluster, p, me, asn, |other| applies(&p.applies, other));
    found.retain(|s| family.is_none_or(|f| AddressFamily::of(s.address) == f));
    for s in &mut found {
        // The peer is the other node: its AS, not the one the BGPPeer gives for me.
        s.remote_as = s
            .peer_node
            .as_ref()
            .and_then(|n| cluster.nodes.get(n))
            .and_then(|n| n.as_number)
            .unwrap_or(cluster.bgp.as_number);
        s.kind = reverse_kind(s.kind);
    }
    found
}

/// A reverse peering is node-specific on `me` (confd emits it under the node's key).
fn reverse_kind(k: PeerKind) -> PeerKind {
    match k {
        PeerKind::Global => PeerKind::NodeSpecific,
        other => other,
    }
}

/// Sessions from a BGPPeer with every other node `select` picks, per shared family.
fn with_nodes(
    cluster: &Cluster,
    p: &PeerResource,
    me: &Node,
    asn: u32,
    select: impl Fn(&Node) -> bool,
) -> Vec<PeerIntent> {
    let mut found = Vec::new();
    for other in cluster.nodes.values() {
        if other.name != me.name && select(other) {
            for (_, theirs) in pairs(me, other) {
                let mut s = session(cluster, p, me, asn, Some(other), theirs);
                s.port = port_of(cluster, other);
                found.push(s);
            }
        }
    }
    found
}

/// A node's addresses.
fn node_addresses(n: &Node) -> Vec<IpAddr> {
    n.ipv4
        .map(|(a, _)| IpAddr::V4(a))
        .into_iter()
        .chain(n.ipv6.map(|(a, _)| a))
        .collect()
}

/// Whether `a` is some Calico node's address (confd's `nodeIPs`).
fn is_node_address(cluster: &Cluster, a: IpAddr) -> bool {
    cluster
        .nodes
        .values()
        .any(|n| node_addresses(n).contains(&a))
}

/// The nodes a peerIP names (confd's `nodesWithIPPortAndAS`): the address is theirs,
/// their AS (else the cluster's) is the BGPPeer's, and a port, when given, is theirs.
fn nodes_at(cluster: &Cluster, a: IpAddr, asn: Option<u32>, port: Option<u16>) -> Vec<&Node> {
    let want = asn.unwrap_or(cluster.bgp.as_number);
    cluster
        .nodes
        .values()
        .filter(|n| node_addresses(n).contains(&a))
        .filter(|n| n.as_number.unwrap_or(cluster.bgp.as_number) == want)
        .filter(|n| port.is_none_or(|p| p == port_of(cluster, n)))
        .collect()
}

/// Adds one session to the set: it replaces a mesh session to the same address; of two
/// BGPPeers reaching one address the first (by pass, then name) wins, as in confd.
fn merge(
    out: &mut BTreeMap<IpAddr, PeerIntent>,
    passes: &mut BTreeMap<IpAddr, Pass>,
    (s, pass): (PeerIntent, Pass),
    warnings: &mut Vec<String>,
) {
    match out.get(&s.address) {
        Some(existing) if existing.kind == PeerKind::Mesh => {
            warnings.push(format!(
                "{} replaces the node-to-node mesh session with {}",
                s.origin, s.address
            ));
        }
        None => {}
        // The same resource reached the same peer twice (forward and reverse,
        // as between route reflectors): one session.
        Some(existing) if existing.origin == s.origin => return,
        Some(existing) if existing.same_session(&s) => {
            warnings.push(format!(
                "{} and {} both configure the session with {}; they agree, so one session is kept",
                existing.origin, s.origin, s.address
            ));
            return;
        }
        Some(existing) => {
            let why = match (passes.get(&s.address), pass) {
                (Some(Pass::Global), Pass::NodeSpecific | Pass::Reverse) => {
                    "a global peering wins over a node-specific one"
                }
                (Some(Pass::NodeSpecific), Pass::Reverse) => {
                    "an explicit peering wins over a reverse one"
                }
                _ => "of two peerings of one kind the first by name wins",
            };
            warnings.push(format!(
                "{} and {} both configure a session with {} with different settings; {} \
                 is used and {} is ignored for this peer ({why}, as Calico's confd does)",
                existing.origin, s.origin, s.address, existing.origin, s.origin
            ));
            return;
        }
    }
    passes.insert(s.address, pass);
    out.insert(s.address, s);
}

/// Whether a BGPPeer's node side selects `n`.
fn applies(a: &Applies, n: &Node) -> bool {
    match a {
        Applies::Global => true,
        Applies::Node(name) => *name == n.name,
        Applies::Selector(s) => s.matches(&n.labels),
    }
}

/// (my address, their address) for each family both nodes have.
fn pairs(me: &Node, other: &Node) -> Vec<(IpAddr, IpAddr)> {
    let mut v = Vec::new();
    if let (Some((a, _)), Some((b, _))) = (me.ipv4, other.ipv4) {
        v.push((IpAddr::V4(a), IpAddr::V4(b)));
    }
    if let (Some((a, _)), Some((b, _))) = (me.ipv6, other.ipv6) {
        v.push((a, b));
    }
    v
}

/// The password from the snapshot's Secrets, when `source` names one of them.
fn snapshot_password(
    cluster: &Cluster,
    source: Option<&PasswordSource>,
) -> Option<Result<Secret, String>> {
    source.and_then(|s| cluster.secrets.lookup(s))
}

impl PeerIntent {
    /// The session's password: the snapshot's Secret when it had one, else read from
    /// its source (the mounted secrets directory, a file, a variable). Errors name the
    /// source, never the value.
    pub fn resolve_password(&self, secrets_dir: &Path) -> Result<Option<Secret>, String> {
        match (&self.snapshot_password, &self.password) {
            (Some(from_snapshot), _) => from_snapshot.clone().map(Some),
            (None, Some(source)) => source.resolve(secrets_dir).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// A session from a BGPPeer toward `address` (a node's, when `node` is given).
fn session(
    cluster: &Cluster,
    p: &PeerResource,
    me: &Node,
    asn: u32,
    node: Option<&Node>,
    address: IpAddr,
) -> PeerIntent {
    let remote_as = p
        .as_number
        .or_else(|| node.and_then(|n| n.as_number))
        .unwrap_or(cluster.bgp.as_number);
    // Reflection is iBGP only (confd: the peer's AS is the node's effective AS).
    let ibgp = remote_as == p.local_as_number.unwrap_or(asn);
    let (kind, rr_client) = match (node, me.rr_cluster_id) {
        // A reflector's clients are the iBGP nodes outside its cluster.
        (Some(n), Some(mine)) if ibgp && n.rr_cluster_id != Some(mine) => {
            (PeerKind::RouteReflectorClient, true)
        }
        (Some(n), None) if n.rr_cluster_id.is_some() => (PeerKind::RouteReflector, false),
        // confd gives a peerIP peering no cluster id, so on a reflector every iBGP
        // peerIP peer is a client (`buildPeerFromData`), a Calico node's address too.
        (None, Some(_)) if ibgp => (PeerKind::RouteReflectorClient, true),
        _ => match p.applies {
            Applies::Global => (PeerKind::Global, false),
            _ => (PeerKind::NodeSpecific, false),
        },
    };
    PeerIntent {
        address,
        port: 179,
        remote_as,
        local_as: p.local_as_number.unwrap_or(asn),
        kind,
        passive: false,
        source: if p.source_node_ip {
            me.address_like(address)
        } else {
            None
        },
        password: p.password.clone(),
        snapshot_password: snapshot_password(cluster, p.password.as_ref()),
        keepalive: p.keepalive,
        hold: p.hold,
        restart_time: p.restart_time,
        ttl_security: p.ttl_security,
        allowas_in: p.allowas_in,
        next_hop: p.next_hop,
        rr_client,
        reachable_by: p.reachable_by,
        filters: p
            .filters
            .iter()
            .filter_map(|f| cluster.filters.get(f).cloned())
            .collect(),
        peer_node: node.map(|n| n.name.clone()),
        peer_network: node.and_then(|n| n.network_of(address)),
        families: if p.families.is_empty() {
            vec![AddressFamily::of(address)]
        } else {
            p.families.clone()
        },
        origin: format!("BGPPeer {}", p.name),
    }
}

#[cfg(test)]
#[path = "peers_tests.rs"]
mod tests;
