//! Structure-aware fuzzing of the configuration (issue 23): `arbitrary`-derived
//! descriptions of a Calico cluster snapshot and a `tern.yaml`, rendered both as the
//! cluster file (YAML, as `calicoctl get -o yaml` prints it) and as etcd values (JSON),
//! then checked by [`check_structured`]. Byte-level fuzzing rarely forms a valid
//! resource with an extreme value in the right field (30 minutes of it never reached a
//! keepaliveTime that overflowed); here every field users write is drawn from a table
//! mixing typical, boundary and hostile values (see [`values`]), or is a value of the
//! wrong type, so most inputs are well-formed resources and the fuzzer's effort goes
//! into the validation and intent code.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};

use crate::daemon::limits::DEFAULT_DATASTORE_DOCUMENT_BYTES;
use crate::datastore::etcd::document_for;
use crate::datastore::Document;
use crate::intent::intent;
use crate::tracker::Tracker;
use crate::Cluster;

mod render;
pub mod values;
pub mod yaml;

use values::*;

/// The node whose intent the tracker follows (present in the known-good snapshot).
pub const NODE: &str = "node-a";

/// The snapshot in force before the fuzzed one arrives.
const KNOWN_GOOD: &str = include_str!("../../examples/mesh/cluster.yaml");

/// One fuzz input: a snapshot of Calico resources and a `tern.yaml`.
#[derive(Debug, Clone, Arbitrary)]
pub struct Input {
    /// Start from the known-good resources (so the fuzzed ones are edits of a working
    /// cluster and are often accepted), or from nothing.
    pub on_top_of_known_good: bool,
    /// The resources.
    pub snapshot: Snapshot,
    /// The daemon's file.
    pub tern: TernYaml,
}

/// Lists of each resource kind, in the order they are rendered.
#[derive(Debug, Clone, Default, Arbitrary)]
pub struct Snapshot {
    /// BGPConfiguration (`default`, `node.<name>`).
    pub configurations: Vec<Resource<BgpConfiguration>>,
    /// BGPPeer.
    pub peers: Vec<Resource<BgpPeer>>,
    /// BGPFilter.
    pub filters: Vec<Resource<BgpFilter>>,
    /// IPPool.
    pub pools: Vec<Resource<IpPool>>,
    /// Node.
    pub nodes: Vec<Resource<Node>>,
    /// IPAMBlock.
    pub blocks: Vec<Resource<IpamBlock>>,
    /// BlockAffinity.
    pub affinities: Vec<Resource<BlockAffinity>>,
}

/// The envelope of every resource: name, labels, the spec, and ways to spoil it.
#[derive(Debug, Clone, Arbitrary)]
pub struct Resource<S> {
    /// `metadata.name`.
    pub name: Name,
    /// `metadata.labels` (Nodes are selected by them).
    pub labels: Vec<(Name, Name)>,
    /// The kind's spec.
    pub spec: S,
    /// A field tern does not know, in `spec`.
    pub unknown: Option<(Pick, Wrong)>,
    /// A broken envelope.
    pub mangle: Option<Mangle>,
}

/// Ways to break a resource's envelope.
#[derive(Debug, Clone, Arbitrary)]
pub enum Mangle {
    /// Another `apiVersion` (or none).
    ApiVersion(Pick),
    /// Another `kind`.
    Kind(Pick),
    /// `metadata` of the wrong type.
    Metadata(Wrong),
    /// `spec` of the wrong type.
    Spec(Wrong),
    /// No `spec`.
    NoSpec,
    /// Something unknown at the top level (`status`, as calicoctl prints).
    TopLevel(Pick, Wrong),
}

/// A Go duration field.
type Duration = Option<Pick>;

/// `BGPConfiguration.spec`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct BgpConfiguration {
    pub as_number: Option<Pick>,
    pub mesh_enabled: Option<Pick>,
    pub listen_port: Option<Pick>,
    pub bind_mode: Option<Pick>,
    pub mesh_password: Option<Password>,
    pub mesh_restart: Duration,
    pub mesh_hold: Duration,
    pub mesh_keepalive: Duration,
    pub ignored_interfaces: Option<Many<Pick>>,
    pub communities: Option<Vec<(Name, Pick)>>,
    pub prefix_advertisements: Option<Vec<(Cidr, Vec<Pick>)>>,
    pub service_ips: [Option<Vec<Cidr>>; 3],
}

/// `BGPPeer.spec`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct BgpPeer {
    pub peer_ip: Option<Addr>,
    pub as_number: Option<Pick>,
    pub local_as_number: Option<Pick>,
    pub node: Option<Name>,
    pub node_selector: Option<Selector>,
    pub peer_selector: Option<Selector>,
    pub password: Option<Password>,
    pub source_address: Option<Pick>,
    pub max_restart_time: Duration,
    pub keepalive_time: Duration,
    pub hold_time: Duration,
    pub families: Option<Vec<Pick>>,
    pub allowed_local_as: Option<Pick>,
    pub ttl_security: Option<Pick>,
    pub reachable_by: Option<Addr>,
    pub filters: Option<Vec<Name>>,
    pub next_hop_mode: Option<Pick>,
    pub keep_original_next_hop: Option<Pick>,
    pub reverse_peering: Option<Pick>,
}

/// `BGPFilter.spec`: rules, each in one of the four lists.
#[derive(Debug, Clone, Arbitrary)]
pub struct BgpFilter {
    /// (list: exportV4, importV4, exportV6, importV6 by the number modulo 4, rule).
    pub rules: Vec<(u8, Rule)>,
}

/// One BGPFilter rule.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the rule's, named as in model.rs
pub struct Rule {
    pub cidr: Option<Cidr>,
    pub match_operator: Option<Pick>,
    pub prefix_length: Option<(Option<Pick>, Option<Pick>)>,
    pub source: Option<Pick>,
    pub interface: Option<Pick>,
    pub peer_type: Option<Pick>,
    pub communities: Option<Vec<Pick>>,
    pub action: Option<Pick>,
}

/// `IPPool.spec`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct IpPool {
    pub cidr: Option<Cidr>,
    pub block_size: Option<Pick>,
    pub disable_bgp_export: Option<Pick>,
    pub ipip_mode: Option<Pick>,
    pub vxlan_mode: Option<Pick>,
    pub disabled: Option<Pick>,
}

/// `Node.spec` (`bgp` absent: the node runs no BGP).
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct Node {
    pub bgp: Option<NodeBgp>,
}

/// `Node.spec.bgp`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct NodeBgp {
    pub ipv4_address: Option<Cidr>,
    pub ipv6_address: Option<Cidr>,
    pub as_number: Option<Pick>,
    pub route_reflector_cluster_id: Option<Addr>,
}

/// `IPAMBlock.spec`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct IpamBlock {
    pub cidr: Option<Cidr>,
    pub affinity: Option<Pick>,
    pub allocations: Option<Many<Option<Pick>>>,
    pub attributes: Vec<(Option<Name>, Option<Name>)>,
    pub deleted: Option<Pick>,
}

/// `BlockAffinity.spec`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the spec's, named as in model.rs
pub struct BlockAffinity {
    pub node: Option<Name>,
    pub cidr: Option<Cidr>,
    pub state: Option<Pick>,
    pub deleted: Option<Pick>,
}

/// A BGP password source.
#[derive(Debug, Clone, Arbitrary)]
pub enum Password {
    /// `secretKeyRef: {name, key}`.
    SecretKeyRef(Option<Name>, Option<Name>),
    /// `file:` (paths that do not exist: nothing outside the process is read).
    File(Pick),
    /// `env:`.
    Env(Name),
    /// All three at once, or of the wrong type.
    Wrong(Wrong),
}

/// `tern.yaml`.
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs)] // the fields are the file's, named as in daemon.rs
pub struct TernYaml {
    pub node: Option<Name>,
    pub datastore: Option<DatastoreSpec>,
    pub control_socket: Option<Pick>,
    pub metrics: Option<Pick>,
    pub fib: Option<(Option<Pick>, Option<Pick>, Option<Pick>)>,
    pub log: Option<Pick>,
    pub limits: Option<[Option<Pick>; 5]>,
    pub unknown: Option<(Pick, Wrong)>,
}

/// `datastore`: type, path, endpoints.
pub type DatastoreSpec = (Option<Pick>, Option<Pick>, Option<Vec<Pick>>);

/// An input's texts: the cluster file, etcd key/values, and `tern.yaml` both ways.
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    /// The multi-document cluster file.
    pub yaml: String,
    /// etcd keys and JSON values (a later value for the same key replaces the earlier,
    /// as a put would).
    pub etcd: BTreeMap<String, String>,
    /// `tern.yaml` as block YAML.
    pub tern_yaml: String,
    /// The same as JSON (which is YAML too).
    pub tern_json: String,
}

/// What the tracker made of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The intent in force now comes from it.
    Accepted,
    /// Rejected for this reason; the old intent stayed.
    Rejected(String),
}

/// The verdicts on the two renderings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The cluster file.
    pub yaml: Verdict,
    /// The etcd snapshot.
    pub etcd: Verdict,
}

/// Renders `input` both ways (see [`Rendered`]).
pub fn render(input: &Input) -> Rendered {
    let docs = render::documents(input);
    let mut etcd = BTreeMap::new();
    let mut yaml = String::from("# rendered by tern_config::fuzzing::structured\n");
    for doc in &docs {
        yaml.push_str("---\n");
        yaml::yaml(doc, 0, &mut yaml);
        if let Some((key, value)) = render::etcd_entry(doc) {
            etcd.insert(key, value.to_string());
        }
    }
    let tern = render::tern(&input.tern);
    let mut tern_yaml = String::new();
    yaml::yaml(&tern, 0, &mut tern_yaml);
    Rendered {
        yaml,
        etcd,
        tern_yaml,
        tern_json: tern.to_string(),
    }
}

/// The invariant: no panic, and the fuzzed snapshot (either rendering) is accepted
/// whole, the tracker's intent then being what [`intent`] computes from the same
/// validated cluster, or rejected with the intent and revision in force before kept.
/// The texts also go through the byte-level targets' checks. Panics when broken.
pub fn check_structured(input: &Input) -> Outcome {
    let r = render(input);
    let yaml_docs = [Document {
        origin: "cluster.yaml".into(),
        text: r.yaml.clone(),
    }];
    let yaml = check_tracker(&yaml_docs, "cluster.yaml");
    super::check_cluster(r.yaml.as_bytes());

    let mut etcd_docs = Vec::new();
    for (key, value) in &r.etcd {
        match document_for(key, value.as_bytes(), DEFAULT_DATASTORE_DOCUMENT_BYTES) {
            Some(Ok(d)) => etcd_docs.push(d),
            Some(Err(refused)) => assert!(refused.to_string().contains(key.as_str())),
            None => {} // a key tern does not read (a name with a '/', say)
        }
    }
    // Each value alone gets the per-document checks (errors name their key); a few
    // suffice, as the cost is a parse each and the snapshot check covers them all.
    for d in etcd_docs.iter().rev().take(3) {
        super::check_documents(std::slice::from_ref(d), &d.origin);
    }
    let etcd = check_tracker(&etcd_docs, "etcd");

    super::check_daemon(r.tern_yaml.as_bytes());
    super::check_daemon(r.tern_json.as_bytes());
    Outcome { yaml, etcd }
}

/// [`check_structured`] on raw bytes, as the fuzz target receives them.
pub fn check_bytes(data: &[u8]) {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        check_structured(&input);
    }
}

/// A tracker for [`NODE`] with the known-good snapshot applied at revision 1, built
/// once (cloning it is cheaper than parsing the snapshot for every input).
fn known_good_tracker() -> &'static Tracker {
    static TRACKER: OnceLock<Tracker> = OnceLock::new();
    TRACKER.get_or_init(|| {
        let mut t = Tracker::new(NODE);
        let docs = [Document {
            origin: "cluster.yaml".into(),
            text: KNOWN_GOOD.into(),
        }];
        if let Err(e) = t.apply(&docs, 1) {
            panic!("the known-good snapshot (examples/mesh) is rejected: {e}");
        }
        t
    })
}

fn check_tracker(docs: &[Document], what: &str) -> Verdict {
    let mut t = known_good_tracker().clone();
    let before = t.current().cloned();
    assert!(before.is_some(), "no intent after the known-good snapshot");
    match t.apply(docs, 2) {
        Err(e) => {
            assert_eq!(
                t.current(),
                before.as_ref(),
                "{what}: rejected ({e}), yet the intent changed"
            );
            assert_eq!(
                t.revision(),
                Some(1),
                "{what}: rejected ({e}), yet the revision moved"
            );
            Verdict::Rejected(e.to_string())
        }
        Ok(accepted) => {
            let direct = match Cluster::from_documents(docs) {
                Ok((cluster, _)) => intent(&cluster, NODE),
                Err(e) => {
                    panic!("{what}: the tracker accepted a snapshot that does not validate: {e}")
                }
            };
            match direct {
                Ok((direct, _)) => assert_eq!(
                    t.current(),
                    Some(&direct),
                    "{what}: the tracker's intent is not the one computed from the snapshot"
                ),
                Err(e) => panic!("{what}: the tracker accepted a snapshot with no intent: {e}"),
            }
            assert_eq!(
                t.revision(),
                Some(2),
                "{what}: accepted, but the revision stayed"
            );
            // An unchanged intent must not make the daemon reconfigure anything.
            if t.current() == before.as_ref() {
                assert!(
                    accepted.diff.is_empty(),
                    "{what}: same intent, yet a diff {:?}",
                    accepted.diff
                );
            }
            Verdict::Accepted
        }
    }
}

#[cfg(test)]
mod tests;
