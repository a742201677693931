//! The plan of a lab: every name, address and block derived from a [`LabSpec`], and the
//! per-node `tern.yaml`; the Calico resources (`cluster.yaml`) that describe it are
//! written by [`super::resources`]. Pure functions, so the plan is unit-tested without
//! namespaces.

use std::path::{Path, PathBuf};

pub use super::resources::cluster_yaml;
use crate::peers::Kind;
use crate::{Error, Result};

/// The cluster's AS (Calico's default).
pub const CLUSTER_AS: u32 = 64512;
/// The top-of-rack router's AS.
pub const TOR_AS: u32 = 65001;
/// What the ToR announces to the nodes.
pub const TOR_PREFIX_V4: &str = "198.18.100.0/24";
/// What the ToR announces to the nodes over IPv6.
pub const TOR_PREFIX_V6: &str = "2001:db8:ff00::/48";
/// The ToR's addresses on the nodes' LAN.
pub const TOR_V4: &str = "198.51.100.1";
/// The ToR's IPv6 address.
pub const TOR_V6: &str = "2001:db8:100::1";
/// A BIRD route reflector's addresses (topology [`Topology::BirdReflector`]).
pub const BIRD_RR_V4: &str = "198.51.100.2";
/// The BIRD route reflector's IPv6 address.
pub const BIRD_RR_V6: &str = "2001:db8:100::2";
/// The LAN's router (the switch namespace): every node's default gateway.
pub const GATEWAY_V4: &str = "198.51.100.254";
/// The router's IPv6 address on the nodes' LAN.
pub const GATEWAY_V6: &str = "2001:db8:100::fe";
/// The router's address on the second subnet, where "far" nodes sit.
pub const FAR_GATEWAY_V4: &str = "203.0.113.254";
/// The router's IPv6 address on the second subnet.
pub const FAR_GATEWAY_V6: &str = "2001:db8:200::fe";
/// The IPv4 pool; every node's /26 block is inside it.
pub const POOL_V4: &str = "198.18.0.0/16";
/// The IPv6 pool; every node's /122 block is inside it.
pub const POOL_V6: &str = "2001:db8:4000::/48";
/// Cluster id of tern route reflectors.
pub const RR_CLUSTER_ID: &str = "198.51.100.250";
/// The pod's gateway, answered by proxy ARP on the host side of its veth (Calico's).
pub const POD_GATEWAY_V4: &str = "169.254.1.1";
/// MAC of the host side of every pod veth (Calico's), whose EUI-64 link-local address
/// is the pods' IPv6 gateway.
pub const HOST_VETH_MAC: &str = "ee:ee:ee:ee:ee:ee";
/// The link-local address that [`HOST_VETH_MAC`] gives.
pub const POD_GATEWAY_V6: &str = "fe80::ecee:eeff:feee:eeee";

/// Most nodes a lab can have: blocks are 198.18.N.0/26 below the ToR's 198.18.100.0/24.
pub const MAX_NODES: usize = 99;
/// Most pods (own or borrowed) per node: they share a /26 with room to spare.
pub const MAX_PODS: usize = 30;

/// How the nodes peer with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Calico's node-to-node mesh.
    Mesh,
    /// The first K nodes are tern route reflectors (label `route-reflector: "true"`,
    /// a cluster id); every node peers with them; no mesh.
    RouteReflectors(usize),
    /// A BIRD route reflector (its own namespace) and tern clients; no mesh.
    BirdReflector,
}

/// What runs on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// `tern run`.
    Tern,
    /// BIRD 2 configured the way Calico's confd templates configure it.
    CalicoBird,
}

/// Where the lab's nodes read the cluster from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabDatastore {
    /// `cluster.yaml`, a file every node reads.
    File,
    /// The Kubernetes API server stand-in ([`crate::kubeapi`]) in the switch namespace,
    /// holding the cluster in KDD shapes ([`super::kdd`]). `separate_process`: run it as
    /// `tern-lab kube-apiserver` (a lab that outlives `tern-lab up`), else in the
    /// calling process, where a test can change objects and restart it.
    Kubernetes {
        /// Run the stand-in as its own process.
        separate_process: bool,
    },
}

/// The stand-in's address: the switch's, every node's default gateway.
pub const KUBE_API_V4: &str = GATEWAY_V4;
/// The stand-in's port (the API server's usual).
pub const KUBE_API_PORT: u16 = 6443;
/// The bearer token of the lab's kubeconfig.
pub const KUBE_TOKEN: &str = "tern-lab-token";

/// What to build.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// Prefix of every namespace name (keeps parallel labs apart).
    pub prefix: String,
    /// Directory for configs, sockets and logs.
    pub dir: PathBuf,
    /// The `tern` binary.
    pub tern: PathBuf,
    /// Number of nodes.
    pub nodes: usize,
    /// How many of the nodes (the last ones) run Calico-style BIRD instead of tern.
    pub bird_nodes: usize,
    /// How many of the nodes (the last tern ones) sit on another subnet (203.0.113.0/24)
    /// behind a router: no layer-2 reachability to the others.
    pub far_nodes: usize,
    /// Peering.
    pub topology: Topology,
    /// A top-of-rack router peering with every node (eBGP, AS 65001).
    pub tor: Option<Kind>,
    /// Pods per node, with addresses from the node's own block.
    pub pods: usize,
    /// Pods per node with an address borrowed from the next node's block.
    pub borrowed: usize,
    /// Dual stack: IPv6 addresses, pool, blocks, pods and sessions too.
    pub ipv6: bool,
    /// Graceful-restart time of the mesh sessions (`nodeMeshMaxRestartTime`), seconds.
    pub restart_time: Option<u32>,
    /// Hold time of the mesh sessions (tern's `tern/node-mesh-hold-time` annotation;
    /// keepalive a third),
    /// seconds.
    pub mesh_hold: Option<u32>,
    /// TCP-MD5 password of the nodes' sessions with the ToR (the BGPPeer's, from a
    /// file in the lab's directory).
    pub tor_password: Option<String>,
    /// The ToR's own password for those sessions (differs to test a mismatch).
    pub tor_peer_password: Option<String>,
    /// GTSM (RFC 5082) on the ToR sessions, both sides: one hop.
    pub tor_ttl_security: bool,
    /// Tag every originated prefix with community 64512:100 and large community
    /// 64512:7:8 (`prefixAdvertisements` on the pools).
    pub communities: bool,
    /// Where the nodes read the cluster from.
    pub datastore: LabDatastore,
    /// BFD between the tern nodes (`bfd:` in each tern.yaml) at this interval, × 3.
    pub bfd_ms: Option<u32>,
}

/// The community the nodes put on their prefixes (with [`LabSpec::communities`]).
pub const NODE_COMMUNITY: &str = "64512:100";
/// The large community the nodes put on their prefixes.
pub const NODE_LARGE_COMMUNITY: &str = "64512:7:8";
/// The community the ToR puts on its prefixes.
pub const TOR_COMMUNITY: &str = "65001:100";
/// The large community the ToR puts on its prefixes.
pub const TOR_LARGE_COMMUNITY: &str = "65001:1:2";

impl LabSpec {
    /// A spec with the defaults: `nodes` tern nodes in a mesh, no ToR, one pod each.
    pub fn new(prefix: &str, dir: &Path, tern: &Path, nodes: usize) -> LabSpec {
        LabSpec {
            prefix: prefix.to_string(),
            dir: dir.to_path_buf(),
            tern: tern.to_path_buf(),
            nodes,
            bird_nodes: 0,
            far_nodes: 0,
            topology: Topology::Mesh,
            tor: None,
            pods: 1,
            borrowed: 0,
            ipv6: false,
            restart_time: None,
            mesh_hold: None,
            tor_password: None,
            tor_peer_password: None,
            tor_ttl_security: false,
            communities: false,
            datastore: LabDatastore::File,
            bfd_ms: None,
        }
    }

    /// The kubeconfig every node's tern reads (Kubernetes datastore).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Refuses specs the address plan cannot hold, naming the option.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Spec(what));
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return bad(format!("--nodes {}: between 1 and {MAX_NODES}", self.nodes));
        }
        if self.pods > MAX_PODS || self.borrowed > MAX_PODS {
            return bad(format!(
                "--pods {} / --borrowed {}: at most {MAX_PODS} each",
                self.pods, self.borrowed
            ));
        }
        if self.borrowed > 0 && self.nodes < 2 {
            return bad("--borrowed needs at least 2 nodes (an address is borrowed from another node's block)".into());
        }
        if self.bird_nodes + self.far_nodes >= self.nodes {
            return bad("at least one node must be a tern node on the main subnet".into());
        }
        if let Topology::RouteReflectors(k) = self.topology {
            if k == 0 || k >= self.nodes || k > self.nodes - self.bird_nodes {
                return bad(format!(
                    "--route-reflectors {k}: between 1 and the number of tern nodes minus one"
                ));
            }
        }
        if self.bird_nodes > 0 && self.topology == Topology::BirdReflector {
            return bad(
                "Calico-style BIRD nodes join a mesh or tern route reflectors, not a BIRD reflector"
                    .into(),
            );
        }
        if self.prefix.is_empty()
            || self.prefix.len() > 8
            || !self
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return bad(format!(
                "--prefix {:?}: 1 to 8 letters, digits or '-'",
                self.prefix
            ));
        }
        Ok(())
    }

    /// The switch namespace (bridges, and the router between the two subnets).
    pub fn switch_ns(&self) -> String {
        format!("{}sw", self.prefix)
    }

    /// The ToR's namespace.
    pub fn tor_ns(&self) -> String {
        format!("{}tor", self.prefix)
    }

    /// The BIRD route reflector's namespace.
    pub fn rr_ns(&self) -> String {
        format!("{}rr", self.prefix)
    }

    /// The file holding the nodes' ToR password.
    pub fn tor_password_file(&self) -> PathBuf {
        self.dir.join("tor.password")
    }

    /// The shared `cluster.yaml`.
    pub fn cluster_file(&self) -> PathBuf {
        self.dir.join("cluster.yaml")
    }

    /// Every node's plan, in order.
    pub fn node_plans(&self) -> Vec<NodePlan> {
        (1..=self.nodes).map(|i| self.node_plan(i)).collect()
    }

    fn node_plan(&self, i: usize) -> NodePlan {
        let n = self.nodes;
        let kind = if i > n - self.bird_nodes {
            NodeKind::CalicoBird
        } else {
            NodeKind::Tern
        };
        let far = kind == NodeKind::Tern && i > n - self.bird_nodes - self.far_nodes;
        let (net4, net6) = if far {
            ("203.0.113", "2001:db8:200")
        } else {
            ("198.51.100", "2001:db8:100")
        };
        let mut pods = Vec::new();
        for j in 1..=self.pods {
            pods.push(self.pod(i, i, j, j, 'p'));
        }
        // Borrowed addresses come from the next node's block (the last node borrows
        // from the first), above the own pods' range.
        let owner = i % n + 1;
        if kind == NodeKind::Tern && owner != i {
            for k in 1..=self.borrowed {
                pods.push(self.pod(i, owner, k, 32 + k, 'b'));
            }
        }
        NodePlan {
            index: i,
            name: format!("node-{i}"),
            ns: format!("{}n{i}", self.prefix),
            kind,
            far,
            v4: format!("{net4}.{}", 10 + i),
            v6: self.ipv6.then(|| format!("{net6}::{}", 10 + i)),
            block_v4: format!("198.18.{i}.0/26"),
            block_v6: self.ipv6.then(|| format!("2001:db8:4000:{i:x}::/122")),
            reflector: matches!(self.topology, Topology::RouteReflectors(k) if i <= k),
            dir: self.dir.join(format!("node-{i}")),
            pods,
        }
    }

    fn pod(&self, node: usize, owner: usize, j: usize, ordinal: usize, tag: char) -> PodPlan {
        PodPlan {
            name: format!(
                "node-{node}/{}{j}",
                if tag == 'p' { "pod-" } else { "borrowed-" }
            ),
            ns: format!("{}n{node}{tag}{j}", self.prefix),
            host_if: format!("cali{node}{tag}{j}"),
            node,
            owner,
            ordinal,
            v4: format!("198.18.{owner}.{ordinal}"),
            v6: self
                .ipv6
                .then(|| format!("2001:db8:4000:{owner:x}::{ordinal:x}")),
        }
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlan {
    /// 1-based index.
    pub index: usize,
    /// Its Node resource name (`node-3`).
    pub name: String,
    /// Its namespace.
    pub ns: String,
    /// What runs on it.
    pub kind: NodeKind,
    /// On the second subnet, behind the router.
    pub far: bool,
    /// Its IPv4 address (a /24 on its subnet).
    pub v4: String,
    /// Its IPv6 address (a /64), when dual stack.
    pub v6: Option<String>,
    /// Its IPv4 block.
    pub block_v4: String,
    /// Its IPv6 block.
    pub block_v6: Option<String>,
    /// A tern route reflector.
    pub reflector: bool,
    /// Its directory (tern.yaml, socket, log).
    pub dir: PathBuf,
    /// Its pods, own then borrowed.
    pub pods: Vec<PodPlan>,
}

impl NodePlan {
    /// The control socket of its tern.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("tern.sock")
    }

    /// Its `tern.yaml`.
    pub fn tern_yaml(&self, spec: &LabSpec) -> String {
        let datastore = match spec.datastore {
            LabDatastore::File => {
                format!("{{type: file, path: {}}}", spec.cluster_file().display())
            }
            LabDatastore::Kubernetes { .. } => format!(
                "{{type: kubernetes, kubeconfig: {}, namespace: {}}}",
                spec.kubeconfig().display(),
                super::kdd::SECRET_NAMESPACE
            ),
        };
        let bfd = spec.bfd_ms.map_or_else(String::new, |ms| {
            format!("bfd: {{enabled: true, interval: {ms}ms, multiplier: 3}}\n")
        });
        format!(
            "node: {}\ndatastore: {datastore}\ncontrol_socket: {}\nmetrics: 127.0.0.1:9477\nlog: info\n{bfd}",
            self.name,
            self.socket().display()
        )
    }

    /// The gateway of its subnet.
    pub fn gateway_v4(&self) -> &'static str {
        if self.far {
            FAR_GATEWAY_V4
        } else {
            GATEWAY_V4
        }
    }

    /// The IPv6 gateway of its subnet.
    pub fn gateway_v6(&self) -> &'static str {
        if self.far {
            FAR_GATEWAY_V6
        } else {
            GATEWAY_V6
        }
    }
}

/// One pod: a namespace with a veth to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    /// `node-2/pod-1`, `node-2/borrowed-1`.
    pub name: String,
    /// Its namespace.
    pub ns: String,
    /// The host side of its veth, in the node's namespace (`cali*`, as Calico names them).
    pub host_if: String,
    /// The node it runs on.
    pub node: usize,
    /// The node whose block its address comes from (≠ `node` when borrowed).
    pub owner: usize,
    /// Its ordinal in the owner's block.
    pub ordinal: usize,
    /// Its IPv4 address.
    pub v4: String,
    /// Its IPv6 address.
    pub v6: Option<String>,
}

impl PodPlan {
    /// Whether its address is borrowed from another node's block.
    pub fn borrowed(&self) -> bool {
        self.owner != self.node
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
