//! The cluster as tern understands it: every Calico resource from the datastore,
//! parsed and validated into typed values ([`Cluster`]).
//!
//! Loading collects *all* errors of all documents rather than stopping at the first, so
//! `tern check-config` shows every mistake at once. Each error names the origin (file or
//! etcd key), the line, the document and resource, the field, what is wrong and what is
//! allowed. Things that work but are ignored come back as warnings.

mod check;
pub mod extensions;
mod kubernetes;
pub(crate) mod parse;
mod secrets;
mod services;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

use crate::datastore::Document;
use crate::error::{ConfigError, Warning};
use crate::selector::Selector;
use crate::values::Community;

pub use secrets::Secrets;
pub use services::{EndpointSlice, Service, ServiceType, TrafficPolicy};

/// Where a BGP password comes from. The value itself is read only when a session
/// needs it (see [`PasswordSource::resolve`]) and is never logged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PasswordSource {
    /// A Kubernetes secret: from the snapshot's Secret of that name when the
    /// datastore has one ([`Secrets::lookup`]), else read as the file a secret volume
    /// mounts: `<secrets dir>/<name>/<key>`.
    SecretKeyRef {
        /// Secret name.
        name: String,
        /// Key.
        key: String,
    },
    /// A file holding the password.
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

/// A password read from its source. Debug and Display print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The password, for the socket option only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Default directory of mounted Kubernetes secrets for `secretKeyRef` passwords.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/tern/secrets";

impl PasswordSource {
    /// Reads the password. Errors name the source, never the value.
    pub fn resolve(&self, secrets_dir: &std::path::Path) -> Result<Secret, String> {
        let from_file = |p: &std::path::Path| {
            std::fs::read_to_string(p)
                .map(|s| Secret(s.trim_end_matches(['\r', '\n']).to_string()))
                .map_err(|e| format!("cannot read the BGP password file {}: {e}", p.display()))
        };
        let secret = match self {
            PasswordSource::SecretKeyRef { name, key } => {
                from_file(&secrets_dir.join(name).join(key))?
            }
            PasswordSource::File(p) => from_file(p)?,
            PasswordSource::Env(v) => Secret(std::env::var(v).map_err(|_| {
                format!("the BGP password variable {v} is not set (or not valid UTF-8)")
            })?),
        };
        check_password_length(secret, &self.to_string())
    }
}

/// A TCP-MD5 key is 1-80 bytes; `from` names the source in the error.
fn check_password_length(secret: Secret, from: &str) -> Result<Secret, String> {
    if secret.0.is_empty() || secret.0.len() > 80 {
        return Err(format!(
            "the BGP password from {from} must be 1-80 bytes (the TCP-MD5 key limit)"
        ));
    }
    Ok(secret)
}

impl std::fmt::Display for PasswordSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PasswordSource::SecretKeyRef { name, key } => write!(f, "secret {name}/{key}"),
            PasswordSource::File(p) => write!(f, "file {}", p.display()),
            PasswordSource::Env(v) => write!(f, "environment variable {v}"),
        }
    }
}

/// Global BGP settings (BGPConfiguration `default`, with this node's `node.<name>`
/// override of port and bind mode).
#[derive(Debug, Clone, PartialEq)]
pub struct BgpSettings {
    /// Default AS (Calico's default is 64512).
    pub as_number: u32,
    /// Node-to-node mesh on.
    pub mesh: bool,
    /// Listen port.
    pub listen_port: u16,
    /// Listen only on the node's addresses (`bindMode: NodeIP`).
    pub bind_node_ip: bool,
    /// Mesh password.
    pub mesh_password: Option<PasswordSource>,
    /// Mesh graceful-restart time.
    pub mesh_restart_time: Option<Duration>,
    /// Mesh hold time (tern's `nodeMeshHoldTime`; default 90 s).
    pub mesh_hold: Option<Duration>,
    /// Mesh keepalive (tern's `nodeMeshKeepaliveTime`).
    pub mesh_keepalive: Option<Duration>,
    /// Interface patterns never learned from.
    pub ignored_interfaces: Vec<String>,
    /// Communities per CIDR for originated prefixes (names resolved).
    pub prefix_advertisements: Vec<(IpNet, Vec<Community>)>,
    /// Service ranges to advertise.
    pub services: Vec<(IpNet, ServiceKind)>,
    /// Per-node overrides: node name → (listen port, bind to node IP).
    pub node_overrides: BTreeMap<String, (Option<u16>, Option<bool>)>,
    /// `programClusterRoutes`: true (`Enabled`, v3.32's default) when the routing
    /// daemon programs the routes of IPIP and unencapsulated pools, false (`Disabled`)
    /// when Felix does. VXLAN pools are Felix's either way.
    pub program_cluster_routes: bool,
    /// `ipv4NormalRoutePriority` / `ipv6NormalRoutePriority`: the kernel metric of
    /// learnt routes (default 1024 each).
    pub normal_priority: NormalPriority,
    /// `localWorkloadPeeringIPV4` / `IPV6`: the address Felix gives each workload
    /// selected for a local workload peering, on its interface, for it to dial.
    pub local_workload_peering: (Option<std::net::Ipv4Addr>, Option<std::net::Ipv6Addr>),
}

/// The normal route priority per family (BGPConfiguration
/// `ipv4NormalRoutePriority` / `ipv6NormalRoutePriority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NormalPriority {
    /// IPv4.
    pub v4: u32,
    /// IPv6.
    pub v6: u32,
}

impl Default for NormalPriority {
    fn default() -> NormalPriority {
        let p = tern_bgp::policy::DEFAULT_NORMAL_PRIORITY;
        NormalPriority { v4: p, v6: p }
    }
}

impl NormalPriority {
    /// The priority of `net`'s family.
    pub fn of(&self, net: &IpNet) -> u32 {
        match net {
            IpNet::V4(_) => self.v4,
            IpNet::V6(_) => self.v6,
        }
    }
}

/// Felix's default workload interface prefix (FelixConfiguration `interfacePrefix`).
pub const DEFAULT_INTERFACE_PREFIX: &str = "cali";

/// Calico's default AS.
pub const DEFAULT_AS: u32 = 64512;

impl Default for BgpSettings {
    fn default() -> BgpSettings {
        BgpSettings {
            as_number: DEFAULT_AS,
            mesh: true,
            listen_port: 179,
            bind_node_ip: false,
            mesh_password: None,
            mesh_restart_time: None,
            mesh_hold: None,
            mesh_keepalive: None,
            ignored_interfaces: Vec::new(),
            prefix_advertisements: Vec::new(),
            services: Vec::new(),
            node_overrides: BTreeMap::new(),
            program_cluster_routes: true,
            normal_priority: NormalPriority::default(),
            local_workload_peering: (None, None),
        }
    }
}

/// Which service range a prefix comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceKind {
    /// `serviceClusterIPs`.
    ClusterIp,
    /// `serviceExternalIPs`.
    ExternalIp,
    /// `serviceLoadBalancerIPs`.
    LoadBalancerIp,
}

/// A Node with BGP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// IPv6 address and prefix length.
    pub ipv6: Option<(IpAddr, u8)>,
    /// Own AS, when set.
    pub as_number: Option<u32>,
    /// Route-reflector cluster id, on route reflectors.
    pub rr_cluster_id: Option<Ipv4Addr>,
}

impl Node {
    /// The subnet the node's own address `addr` is on (its configured prefix
    /// length), when `addr` is one of the node's addresses.
    pub fn network_of(&self, addr: IpAddr) -> Option<ipnet::IpNet> {
        let (a, len) = match addr {
            IpAddr::V4(_) => self.ipv4.map(|(a, l)| (IpAddr::V4(a), l))?,
            IpAddr::V6(_) => self.ipv6?,
        };
        (a == addr)
            .then(|| ipnet::IpNet::new(a, len).ok().map(|n| n.trunc()))
            .flatten()
    }

    /// The node's address of the family of `like`.
    pub fn address_like(&self, like: IpAddr) -> Option<IpAddr> {
        match like {
            IpAddr::V4(_) => self.ipv4.map(|(a, _)| IpAddr::V4(a)),
            IpAddr::V6(_) => self.ipv6.map(|(a, _)| a),
        }
    }
}

/// Which nodes a BGPPeer applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applies {
    /// Every node (a global peer).
    Global,
    /// One node by name.
    Node(String),
    /// Nodes matching a selector.
    Selector(Selector),
}

/// Whom a BGPPeer peers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerTarget {
    /// One address, optionally with a port.
    Address(IpAddr, Option<u16>),
    /// Every node matching a selector.
    Nodes(Selector),
    /// This node's workloads that Felix selected for this BGPPeer
    /// (`localWorkloadSelector`: Felix matches the selector and names the BGPPeer in
    /// the workload's endpoint status file; tern reads those files).
    LocalWorkloads(Selector),
}

/// Next-hop handling toward a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NextHopMode {
    /// Self for eBGP, unchanged for iBGP (BIRD's default).
    #[default]
    Auto,
    /// Always self.
    SelfHop,
    /// Never change.
    Keep,
}

/// A validated BGPPeer.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerResource {
    /// Resource name.
    pub name: String,
    /// Which nodes.
    pub applies: Applies,
    /// Whom.
    pub target: PeerTarget,
    /// Peer AS (required with an address; from the node with a selector).
    pub as_number: Option<u32>,
    /// Our AS on the session.
    pub local_as_number: Option<u32>,
    /// Password.
    pub password: Option<PasswordSource>,
    /// Source the session from the node's address (`UseNodeIP`, default).
    pub source_node_ip: bool,
    /// Graceful-restart time.
    pub restart_time: Option<Duration>,
    /// Keepalive interval.
    pub keepalive: Option<Duration>,
    /// Hold time.
    pub hold: Option<Duration>,
    /// allowas-in.
    pub allowas_in: u32,
    /// GTSM hops.
    pub ttl_security: Option<u8>,
    /// Gateway to reach the peer.
    pub reachable_by: Option<IpAddr>,
    /// Filter names in order (all exist).
    pub filters: Vec<String>,
    /// Next hop.
    pub next_hop: NextHopMode,
    /// Selected nodes peer back automatically.
    pub reverse_auto: bool,
    /// Families the session carries (tern's `families`); empty: the address's family.
    pub families: Vec<AddressFamily>,
}

/// An address family a session carries (unicast).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressFamily {
    /// IPv4 unicast.
    Ipv4,
    /// IPv6 unicast.
    Ipv6,
}

impl AddressFamily {
    /// The family of `addr`.
    pub fn of(addr: IpAddr) -> AddressFamily {
        if addr.is_ipv4() {
            AddressFamily::Ipv4
        } else {
            AddressFamily::Ipv6
        }
    }
}

/// How pods in a pool are reached across nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EncapMode {
    /// Native routing.
    #[default]
    Never,
    /// Always encapsulate.
    Always,
    /// Encapsulate only toward nodes on another subnet.
    CrossSubnet,
}

/// A validated IPPool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Resource name.
    pub name: String,
    /// The pool.
    pub cidr: IpNet,
    /// Block prefix length.
    pub block_size: u8,
    /// Blocks and addresses are advertised.
    pub export: bool,
    /// IPIP mode.
    pub ipip: EncapMode,
    /// VXLAN mode.
    pub vxlan: EncapMode,
}

/// BGPFilter rule action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Accept the route.
    Accept,
    /// Reject the route.
    Reject,
}

/// How a rule compares a prefix with its CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchOperator {
    /// The same prefix.
    Equal,
    /// Not the same prefix.
    NotEqual,
    /// Inside (or equal to) the CIDR.
    In,
    /// Not inside the CIDR.
    NotIn,
}

/// A validated BGPFilter rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// CIDR and operator.
    pub cidr: Option<(IpNet, MatchOperator)>,
    /// Prefix length bounds as Calico renders them (`net ~ [cidr{min,max}]`): from
    /// the larger of the CIDR's length and `prefixLength.min`, to the smaller of the
    /// family's maximum and `prefixLength.max`.
    pub prefix_length: Option<(u8, u8)>,
    /// Only routes learned from BGP peers.
    pub remote_peers_only: bool,
    /// Interface pattern (kernel routes).
    pub interface: Option<String>,
    /// Only for eBGP (true) or iBGP (false) peers.
    pub ebgp: Option<bool>,
    /// The community the route must carry (Calico allows one).
    pub communities: Vec<Community>,
    /// The AS_PATH must begin with these ASes (`asPathPrefix`, Calico v3.32).
    pub as_path_prefix: Vec<u32>,
    /// The route's priority (kernel metric) must be this (`priority`, v3.32).
    pub priority: Option<u32>,
    /// Changes made to a route the rule accepts, in order (`operations`, v3.32).
    pub operations: Vec<Operation>,
    /// What to do on a match.
    pub action: Action,
}

/// A change a BGPFilter rule makes to a route it accepts (Calico v3.32).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `addCommunity`: add a standard or large community.
    AddCommunity(Community),
    /// `prependASPath`: put these ASes in front of the AS_PATH, in this order.
    PrependAsPath(Vec<u32>),
    /// `setPriority`: set the route's priority (kernel metric).
    SetPriority(u32),
}

/// A validated BGPFilter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Name.
    pub name: String,
    /// IPv4 export rules.
    pub export_v4: Vec<Rule>,
    /// IPv4 import rules.
    pub import_v4: Vec<Rule>,
    /// IPv6 export rules.
    pub export_v6: Vec<Rule>,
    /// IPv6 import rules.
    pub import_v6: Vec<Rule>,
}

/// State of a block affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AffinityState {
    /// The node holds the block.
    Confirmed,
    /// Being claimed.
    Pending,
    /// Being released.
    PendingDeletion,
}

/// A validated BlockAffinity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    /// The node.
    pub node: String,
    /// The block.
    pub cidr: IpNet,
    /// State.
    pub state: AffinityState,
    /// Marked deleted.
    pub deleted: bool,
}

/// A validated IPAMBlock: who the block is affine to and who each address went to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The block.
    pub cidr: IpNet,
    /// The affine node.
    pub affinity: Option<String>,
    /// Allocated addresses and the node each was allocated to, when recorded.
    pub allocations: Vec<(IpAddr, Option<String>)>,
    /// Marked deleted.
    pub deleted: bool,
}

/// Every resource, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cluster {
    /// Global BGP settings.
    pub bgp: BgpSettings,
    /// Nodes by name.
    pub nodes: BTreeMap<String, Node>,
    /// BGPPeers, by name order.
    pub peers: Vec<PeerResource>,
    /// IPPools.
    pub pools: Vec<Pool>,
    /// BGPFilters by name.
    pub filters: BTreeMap<String, Filter>,
    /// BlockAffinities.
    pub affinities: Vec<Affinity>,
    /// IPAMBlocks.
    pub blocks: Vec<Block>,
    /// Kubernetes Secrets (passwords of `secretKeyRef`).
    pub secrets: Secrets,
    /// Kubernetes Services, in document order.
    pub services: Vec<Service>,
    /// Kubernetes EndpointSlices, in document order.
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Workload interface name prefixes: FelixConfiguration `default`'s
    /// `interfacePrefix`, split at commas (empty: Felix's default, `cali`).
    pub interface_prefixes: Vec<String>,
}

/// Every error found while loading, in document order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl Cluster {
    /// Parses and validates every document. All errors are returned together; a
    /// cluster is returned only when there are none.
    pub fn from_documents(docs: &[Document]) -> Result<(Cluster, Vec<Warning>), ConfigErrors> {
        let mut raw = Vec::new();
        let mut errors = Vec::new();
        for d in docs {
            match parse::documents(&d.origin, &d.text) {
                Ok(mut r) => raw.append(&mut r),
                Err(e) => errors.push(e),
            }
        }
        let mut warnings = Vec::new();
        // Kubernetes' own kinds are read apart: they follow Kubernetes' conventions
        // (namespaces, no warnings about fields) rather than Calico's.
        let (kube, raw): (Vec<_>, Vec<_>) = raw.into_iter().partition(kubernetes::is_kubernetes);
        let mut cluster = check::build(&raw, &mut errors, &mut warnings);
        kubernetes::build(&kube, &mut cluster, &mut errors);
        if errors.is_empty() {
            Ok((cluster, warnings))
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// The pool containing `net`, if any.
    pub fn pool_of(&self, net: &IpNet) -> Option<&Pool> {
        self.pools.iter().find(|p| p.cidr.contains(net))
    }
}
