//! Calico v3 resources as `calicoctl get -o yaml` prints them: the serde shapes of
//! `BGPConfiguration`, `BGPPeer`, `Node`, `IPPool`, `BGPFilter`, `BlockAffinity` and
//! `IPAMBlock`, and the Kubernetes `Secret`, `Service` and `EndpointSlice` that the
//! Kubernetes datastore adds (the fields tern reads, in Kubernetes' own shapes).
//!
//! These types only read; they keep addresses and durations as the text the user wrote
//! so that [`crate::cluster`] can reject a bad value naming the document and the field.
//! Fields tern does not use are ignored with a warning (see [`crate::cluster`]), because
//! users paste whole `calicoctl` output, status and all.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::Deserialize;

mod kubernetes;

pub use kubernetes::{
    KubeEndpoint, KubeEndpointConditions, KubeEndpointSlice, KubeIngress, KubeLoadBalancerStatus,
    KubeSecret, KubeService, KubeServiceSpec, KubeServiceStatus,
};

/// `metadata` of any resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Resource name.
    #[serde(default)]
    pub name: String,
    /// Namespace of namespaced Kubernetes kinds (Secret, Service, EndpointSlice).
    #[serde(default)]
    pub namespace: String,
    /// Labels (Nodes are selected by them).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations: tern's own settings on Calico resources live here under the
    /// `tern/` prefix (see [`crate::cluster::extensions`]), where Calico's schemas
    /// leave them be.
    #[serde(default, deserialize_with = "annotation_values")]
    pub annotations: BTreeMap<String, String>,
}

/// Annotations as text. Kubernetes only stores strings, but in a hand-written file
/// `a: 90` or `b: yes` parse as a number or a bool: they are read as their text
/// rather than failing the whole document over an annotation tern may never read.
fn annotation_values<'de, D>(d: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let raw = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            (k, text)
        })
        .collect())
}

/// One resource document: `apiVersion`, `kind`, `metadata`, `spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource<S> {
    /// `projectcalico.org/v3` (or `crd.projectcalico.org/v1` for the IPAM kinds).
    #[serde(default)]
    pub api_version: String,
    /// The kind, e.g. `BGPPeer`.
    #[serde(default)]
    pub kind: String,
    /// Name and labels.
    #[serde(default)]
    pub metadata: Metadata,
    /// The kind's spec.
    pub spec: S,
}

/// The kind and name, read first to choose the spec type.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// API version.
    #[serde(default)]
    pub api_version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Metadata.
    #[serde(default)]
    pub metadata: Metadata,
}

/// An AS number as Calico accepts it: a number or a string (`"64512"`, asdot `"1.10"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum AsNumber {
    /// Plain number.
    Number(u64),
    /// Text: decimal or asdot.
    Text(String),
}

/// Where a BGP password comes from. Calico's `secretKeyRef` names a Kubernetes secret;
/// tern reads it as the file a secret volume mounts (`<secrets dir>/<name>/<key>`).
/// `file` and `env` are tern's older spelling of the `tern/password-file` and
/// `tern/password-env` annotations (deprecated: not Calico's fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PasswordSpec {
    /// Kubernetes secret reference.
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A file holding the password (one line; trailing newline ignored).
    pub file: Option<PathBuf>,
    /// An environment variable holding the password.
    pub env: Option<String>,
}

/// `secretKeyRef`: a secret name and the key inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct SecretKeyRef {
    /// Secret name.
    #[serde(default)]
    pub name: String,
    /// Key in the secret.
    #[serde(default)]
    pub key: String,
}

/// `BGPConfiguration.spec` (the one named `default` is global; `node.<name>` is per node).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpConfigurationSpec {
    /// Default AS of nodes without their own.
    pub as_number: Option<AsNumber>,
    /// Full iBGP mesh between all nodes (default true).
    pub node_to_node_mesh_enabled: Option<bool>,
    /// BGP port (default 179).
    pub listen_port: Option<u16>,
    /// `None` (listen on all addresses) or `NodeIP`.
    pub bind_mode: Option<String>,
    /// Calico's log level for BIRD; tern's own comes from `tern.yaml`.
    pub log_severity_screen: Option<String>,
    /// Password of the mesh sessions.
    pub node_mesh_password: Option<PasswordSpec>,
    /// Graceful-restart time of the mesh sessions (Go duration, e.g. `120s`).
    pub node_mesh_max_restart_time: Option<String>,
    /// Deprecated spelling of the `tern/node-mesh-hold-time` annotation (not Calico's
    /// field, so calicoctl and the CRD schema refuse or drop it).
    pub node_mesh_hold_time: Option<String>,
    /// Deprecated spelling of the `tern/node-mesh-keepalive-time` annotation.
    pub node_mesh_keepalive_time: Option<String>,
    /// Interface name patterns whose routes are never learned from the kernel.
    #[serde(default)]
    pub ignored_interfaces: Vec<String>,
    /// Named communities for `prefixAdvertisements`.
    #[serde(default)]
    pub communities: Vec<CommunityDef>,
    /// Communities attached to originated prefixes inside a CIDR.
    #[serde(default)]
    pub prefix_advertisements: Vec<PrefixAdvertisement>,
    /// Service cluster IP ranges to advertise.
    #[serde(default, rename = "serviceClusterIPs")]
    pub service_cluster_ips: Vec<CidrEntry>,
    /// Service external IP ranges to advertise.
    #[serde(default, rename = "serviceExternalIPs")]
    pub service_external_ips: Vec<CidrEntry>,
    /// Service LoadBalancer IP ranges to advertise.
    #[serde(default, rename = "serviceLoadBalancerIPs")]
    pub service_load_balancer_ips: Vec<CidrEntry>,
    /// Whether the routing daemon programs the cluster routes of IPIP and unencapsulated
    /// pools (`Enabled`, the default in v3.32) or Felix does (`Disabled`).
    pub program_cluster_routes: Option<String>,
    /// Kernel metric of IPv4 routes learnt by BGP (default 1024).
    #[serde(rename = "ipv4NormalRoutePriority")]
    pub ipv4_normal_route_priority: Option<i64>,
    /// Kernel metric of IPv6 routes learnt by BGP (default 1024).
    #[serde(rename = "ipv6NormalRoutePriority")]
    pub ipv6_normal_route_priority: Option<i64>,
    /// The address Felix puts on the workload interface of each workload selected for
    /// a local workload peering, which the workload dials (IPv4).
    #[serde(rename = "localWorkloadPeeringIPV4")]
    pub local_workload_peering_ipv4: Option<String>,
    /// The same for IPv6.
    #[serde(rename = "localWorkloadPeeringIPV6")]
    pub local_workload_peering_ipv6: Option<String>,
}

/// `FelixConfiguration.spec`: only what tern needs of Felix's settings; the rest is
/// Felix's and kept aside without a warning.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FelixConfigurationSpec {
    /// Workload interface name prefixes, comma-separated (Felix's default `cali`).
    pub interface_prefix: Option<String>,
    /// Every other field: Felix's own settings.
    #[serde(flatten)]
    pub other: std::collections::BTreeMap<String, serde_json::Value>,
}

/// `{name, value}` of a named community.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CommunityDef {
    /// Name used in `prefixAdvertisements`.
    #[serde(default)]
    pub name: String,
    /// `aa:nn` or large `aa:bb:cc`.
    #[serde(default)]
    pub value: String,
}

/// `{cidr, communities}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PrefixAdvertisement {
    /// Prefixes inside this CIDR get the communities.
    pub cidr: IpNet,
    /// Community names or literal values.
    #[serde(default)]
    pub communities: Vec<String>,
}

/// `{cidr}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CidrEntry {
    /// The range.
    pub cidr: IpNet,
}

/// `BGPPeer.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerSpec {
    /// Peer address, optionally with a port: `198.51.100.1`, `198.51.100.1:1790`,
    /// `[2001:db8::1]:1790`.
    #[serde(rename = "peerIP")]
    pub peer_ip: Option<String>,
    /// Peer AS.
    pub as_number: Option<AsNumber>,
    /// Our AS on this session (default: the node's).
    #[serde(rename = "localASNumber")]
    pub local_as_number: Option<AsNumber>,
    /// The one node this peering applies to.
    pub node: Option<String>,
    /// Nodes this peering applies to.
    pub node_selector: Option<String>,
    /// Nodes to peer with (instead of `peerIP`).
    pub peer_selector: Option<String>,
    /// Session password.
    pub password: Option<PasswordSpec>,
    /// `UseNodeIP` (default) or `None`.
    pub source_address: Option<String>,
    /// Graceful-restart time (Go duration).
    pub max_restart_time: Option<String>,
    /// Deprecated spelling of the `tern/families` annotation (not Calico's field).
    #[serde(default)]
    pub families: Vec<String>,
    /// Keepalive interval (Go duration).
    pub keepalive_time: Option<String>,
    /// Deprecated spelling of the `tern/hold-time` annotation (not Calico's field).
    pub hold_time: Option<String>,
    /// allowas-in count.
    #[serde(rename = "numAllowedLocalASNumbers")]
    pub num_allowed_local_as_numbers: Option<u32>,
    /// GTSM: the peer is at most this many hops away.
    pub ttl_security: Option<u8>,
    /// Gateway through which the peer is reachable.
    pub reachable_by: Option<String>,
    /// BGPFilter names, applied in order.
    #[serde(default)]
    pub filters: Vec<String>,
    /// `Auto`, `Self` or `Keep`.
    pub next_hop_mode: Option<String>,
    /// Older spelling of `nextHopMode: Keep`.
    pub keep_original_next_hop: Option<bool>,
    /// `Auto` (selected nodes peer back) or `Manual`.
    pub reverse_peering: Option<String>,
    /// Calico's Local_Workload peers: sessions with this node's own workloads, which
    /// Felix reports in endpoint status files tern does not read. Parsed so that such a
    /// BGPPeer is skipped with a warning instead of failing the snapshot.
    pub local_workload_selector: Option<String>,
}

/// `Node.spec`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// BGP settings; a node without them does not run BGP.
    pub bgp: Option<NodeBgpSpec>,
}

/// `Node.spec.bgp`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeBgpSpec {
    /// IPv4 address with prefix length (`198.51.100.10/24`).
    pub ipv4_address: Option<String>,
    /// IPv6 address with prefix length.
    pub ipv6_address: Option<String>,
    /// The node's AS (default: BGPConfiguration's).
    pub as_number: Option<AsNumber>,
    /// Set on route reflectors.
    #[serde(rename = "routeReflectorClusterID")]
    pub route_reflector_cluster_id: Option<String>,
}

/// `IPPool.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpPoolSpec {
    /// The pool.
    pub cidr: IpNet,
    /// Block prefix length (default 26 / 122).
    pub block_size: Option<u8>,
    /// Do not advertise this pool's blocks and addresses.
    #[serde(rename = "disableBGPExport", default)]
    pub disable_bgp_export: bool,
    /// `Never`, `Always`, `CrossSubnet`.
    pub ipip_mode: Option<String>,
    /// `Never`, `Always`, `CrossSubnet`.
    pub vxlan_mode: Option<String>,
    /// Disabled pools hand out no new addresses; existing blocks still route.
    #[serde(default)]
    pub disabled: bool,
}

/// `BGPFilter.spec`: rule lists per direction and family.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BgpFilterSpec {
    /// Export rules for IPv4.
    #[serde(default, rename = "exportV4")]
    pub export_v4: Vec<FilterRuleSpec>,
    /// Import rules for IPv4.
    #[serde(default, rename = "importV4")]
    pub import_v4: Vec<FilterRuleSpec>,
    /// Export rules for IPv6.
    #[serde(default, rename = "exportV6")]
    pub export_v6: Vec<FilterRuleSpec>,
    /// Import rules for IPv6.
    #[serde(default, rename = "importV6")]
    pub import_v6: Vec<FilterRuleSpec>,
}

/// One BGPFilter rule.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterRuleSpec {
    /// Prefix to compare with.
    pub cidr: Option<IpNet>,
    /// `Equal`, `NotEqual`, `In`, `NotIn`.
    pub match_operator: Option<String>,
    /// Prefix length bounds (with `In`).
    pub prefix_length: Option<PrefixLengthSpec>,
    /// `RemotePeers`: only routes learned from BGP peers.
    pub source: Option<String>,
    /// Interface name pattern of kernel routes.
    pub interface: Option<String>,
    /// `eBGP` or `iBGP`.
    pub peer_type: Option<String>,
    /// Communities the route must carry.
    pub communities: Option<CommunitiesMatchSpec>,
    /// The AS_PATH must begin with these ASes.
    #[serde(rename = "asPathPrefix")]
    pub as_path_prefix: Option<Vec<AsNumber>>,
    /// The route's priority (kernel metric).
    pub priority: Option<i64>,
    /// Changes made to an accepted route.
    pub operations: Option<Vec<FilterOperationSpec>>,
    /// `Accept` or `Reject`.
    #[serde(default)]
    pub action: String,
}

/// One of a BGPFilter rule's `operations`: exactly one field is set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterOperationSpec {
    /// `addCommunity: {value: "aa:nn"}`.
    pub add_community: Option<ValueSpec<String>>,
    /// `prependASPath: {prefix: [..]}`.
    #[serde(rename = "prependASPath")]
    pub prepend_as_path: Option<PrependSpec>,
    /// `setPriority: {value: n}`.
    pub set_priority: Option<ValueSpec<i64>>,
}

/// `{value: …}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ValueSpec<T> {
    /// The value.
    pub value: T,
}

/// `prependASPath: {prefix: [..]}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PrependSpec {
    /// ASes to prepend, in path order.
    #[serde(default)]
    pub prefix: Vec<AsNumber>,
}

/// `prefixLength: {min, max}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PrefixLengthSpec {
    /// Shortest length matched.
    pub min: Option<u8>,
    /// Longest length matched.
    pub max: Option<u8>,
}

/// `communities: {values: [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CommunitiesMatchSpec {
    /// Standard or large communities, all of which must be present.
    #[serde(default)]
    pub values: Vec<String>,
}

/// `BlockAffinity.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockAffinitySpec {
    /// The node holding the block.
    pub node: String,
    /// The block.
    pub cidr: IpNet,
    /// `confirmed`, `pending` or `pendingDeletion` (empty means confirmed).
    #[serde(default)]
    pub state: String,
    /// `"true"` / `"false"` in the CRD, a bool in etcd.
    #[serde(default)]
    pub deleted: Flag,
}

/// A boolean that Calico writes either as a bool or as the string `"true"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Flag {
    /// A real bool.
    Bool(bool),
    /// `"true"` or `"false"`.
    Text(String),
    /// Absent.
    #[default]
    Unset,
}

impl Flag {
    /// True for `true` and `"true"`.
    pub fn is_true(&self) -> bool {
        match self {
            Flag::Bool(b) => *b,
            Flag::Text(s) => s.eq_ignore_ascii_case("true"),
            Flag::Unset => false,
        }
    }
}

/// `IPAMBlock.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamBlockSpec {
    /// The block.
    pub cidr: IpNet,
    /// `host:<node>` of the affine node, if any.
    pub affinity: Option<String>,
    /// Per address of the block: index into `attributes`, or null when free.
    #[serde(default)]
    pub allocations: Vec<Option<u64>>,
    /// Attributes of allocations.
    #[serde(default)]
    pub attributes: Vec<AllocationAttribute>,
    /// Being deleted.
    #[serde(default)]
    pub deleted: Flag,
    /// Free ordinals (IPAM bookkeeping; tern reads `allocations`).
    #[serde(default)]
    pub unallocated: Option<serde_json::Value>,
    /// IPAM bookkeeping.
    #[serde(default)]
    pub strict_affinity: Option<serde_json::Value>,
    /// IPAM bookkeeping.
    #[serde(default)]
    pub sequence_number: Option<serde_json::Value>,
    /// IPAM bookkeeping.
    #[serde(default)]
    pub sequence_number_for_allocation: Option<serde_json::Value>,
}

/// One allocation attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AllocationAttribute {
    /// IPAM handle.
    #[serde(default)]
    pub handle_id: Option<String>,
    /// Free-form attributes; `node` is the node the address was allocated to.
    #[serde(default)]
    pub secondary: Option<BTreeMap<String, String>>,
}
