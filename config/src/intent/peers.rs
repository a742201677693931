//! The peer set of one node: the node-to-node mesh, then every BGPPeer that applies
//! (forward, and reverse for `reversePeering: Auto`), merged by peer address.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::{PeerIntent, PeerKind};
use crate::cluster::{
    AddressFamily, Applies, Cluster, NextHopMode, Node, PasswordSource, PeerResource, PeerTarget,
    Secret,
};

/// All sessions of `me`, keyed by peer address.
pub(super) fn peers(
    cluster: &Cluster,
    me: &Node,
    asn: u32,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<IpAddr, PeerIntent>, String> {
    let mut out: BTreeMap<IpAddr, PeerIntent> = BTreeMap::new();
    if cluster.bgp.mesh && me.rr_cluster_id.is_none() {
        mesh(cluster, me, asn, &mut out);
    }
    for p in &cluster.peers {
        for s in bgp_peer_sessions(cluster, p, me, asn) {
            merge(&mut out, s, warnings)?;
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

/// The sessions one BGPPeer gives `me`: forward (it applies to `me`), and reverse
/// (`reversePeering: Auto`, and its peerSelector selects `me`).
fn bgp_peer_sessions(cluster: &Cluster, p: &PeerResource, me: &Node, asn: u32) -> Vec<PeerIntent> {
    let my_addresses: Vec<IpAddr> = me
        .ipv4
        .map(|(a, _)| IpAddr::V4(a))
        .into_iter()
        .chain(me.ipv6.map(|(a, _)| a))
        .collect();
    let mut found: Vec<PeerIntent> = Vec::new();
    let with_nodes = |select: &dyn Fn(&Node) -> bool, found: &mut Vec<PeerIntent>| {
        for other in cluster.nodes.values() {
            if other.name != me.name && select(other) {
                for (_, theirs) in pairs(me, other) {
                    let mut s = session(cluster, p, me, asn, Some(other), theirs);
                    s.port = port_of(cluster, other);
                    found.push(s);
                }
            }
        }
    };
    if applies(&p.applies, me) {
        match &p.target {
            PeerTarget::Address(a, port) => {
                if !my_addresses.contains(a) {
                    let mut s = session(cluster, p, me, asn, None, *a);
                    s.port = port.unwrap_or(179);
                    found.push(s);
                }
            }
            PeerTarget::Nodes(sel) => with_nodes(&|other| sel.matches(&other.labels), &mut found),
        }
    }
    if let (true, PeerTarget::Nodes(sel)) = (p.reverse_auto, &p.target) {
        if sel.matches(&me.labels) {
            with_nodes(&|other| applies(&p.applies, other), &mut found);
        }
    }
    found
}

/// Adds one session to the set: it replaces a mesh session to the same address, and
/// two BGPPeers reaching one address must agree.
fn merge(
    out: &mut BTreeMap<IpAddr, PeerIntent>,
    s: PeerIntent,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    match out.get(&s.address) {
        None => {
            out.insert(s.address, s);
        }
        Some(existing) if existing.kind == PeerKind::Mesh => {
            warnings.push(format!(
                "{} replaces the node-to-node mesh session with {}",
                s.origin, s.address
            ));
            out.insert(s.address, s);
        }
        // The same resource reached the same peer twice (forward and reverse,
        // as between route reflectors): one session.
        Some(existing) if existing.origin == s.origin => {}
        Some(existing) if existing.same_session(&s) => {
            warnings.push(format!(
                "{} and {} both configure the session with {}; they agree, so one session is kept",
                existing.origin, s.origin, s.address
            ));
        }
        Some(existing) => {
            return Err(format!(
                "{} and {} both configure a session with {} but with different settings; remove or align one",
                existing.origin, s.origin, s.address
            ));
        }
    }
    Ok(())
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
    let (kind, rr_client) = match (node, me.rr_cluster_id) {
        // A reflector's clients are the nodes outside its cluster.
        (Some(n), Some(mine)) if n.rr_cluster_id != Some(mine) => {
            (PeerKind::RouteReflectorClient, true)
        }
        (Some(n), None) if n.rr_cluster_id.is_some() => (PeerKind::RouteReflector, false),
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
