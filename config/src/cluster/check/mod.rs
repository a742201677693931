//! Validation of each kind, from serde shapes ([`crate::model`]) to the typed
//! [`super::Cluster`], plus the checks across resources (duplicate names, overlapping
//! pools, blocks outside every pool, filters that do not exist).
//!
//! One file per resource kind; [`fields`] holds the field checks several kinds share.

mod bgp_configuration;
mod felix;
mod fields;
mod filter;
mod ipam;
mod node;
mod peer;
mod pool;

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::extensions as ext;
use super::parse::RawDoc;
use super::{Cluster, ConfigError, Warning};

pub(super) use fields::password;

const API_VERSIONS: &[&str] = &["projectcalico.org/v3", "crd.projectcalico.org/v1"];

/// The kinds tern reads; every other kind is ignored with a warning.
const KINDS: &[&str] = &[
    "BGPConfiguration",
    "BGPPeer",
    "Node",
    "IPPool",
    "BGPFilter",
    "BlockAffinity",
    "IPAMBlock",
    "FelixConfiguration",
];

/// What the first pass over the documents leaves for the checks across resources.
#[derive(Default)]
struct Pending<'a> {
    /// Each BGPPeer with the BGPFilter names it lists.
    peer_filters: Vec<(&'a RawDoc, Vec<String>)>,
    /// Each BlockAffinity and IPAMBlock with its block.
    block_docs: Vec<(&'a RawDoc, IpNet)>,
    /// The `default` BGPConfiguration.
    bgp_default: Option<&'a RawDoc>,
    /// The `node.<name>` BGPConfigurations.
    node_configs: Vec<&'a RawDoc>,
}

/// Builds the cluster, appending every problem to `errors` / `warnings`.
pub(super) fn build(
    raw: &[RawDoc],
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Cluster {
    let mut c = Cluster::default();
    let mut seen: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut pending = Pending::default();
    for d in raw {
        let Some(name) = admit(d, &mut seen, errors, warnings) else {
            continue;
        };
        ext::warn_unknown(d, warnings);
        take(d, name, &mut c, &mut pending, errors, warnings);
    }
    across(c, pending, errors, warnings)
}

/// Checks what every document needs (a kind tern reads, a Calico API version, a name
/// not used by another resource of its kind) and returns the name when it passes.
fn admit(
    d: &RawDoc,
    seen: &mut BTreeMap<(String, String), String>,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Option<String> {
    let kind = d.header.kind.as_str();
    if !KINDS.contains(&kind) {
        let what = if kind.is_empty() { "no kind" } else { kind };
        warnings.push(d.warning("kind", format!("{what}: not a kind tern uses; ignored")));
        return None;
    }
    if !API_VERSIONS.contains(&d.header.api_version.as_str()) {
        errors.push(d.error(
            "apiVersion",
            format!(
                "{:?} is not a Calico API version; use projectcalico.org/v3",
                d.header.api_version
            ),
        ));
        return None;
    }
    let name = d.header.metadata.name.clone();
    if name.is_empty() {
        errors.push(d.error("metadata.name", "missing: every resource needs a name"));
        return None;
    }
    if let Some(first) = seen.insert((kind.to_string(), name.clone()), d.context()) {
        errors.push(d.error(
            "metadata.name",
            format!("a second {kind} named {name:?} (the first is {first})"),
        ));
        return None;
    }
    Some(name)
}

/// Validates one admitted document by its kind and adds it to the cluster (or, for
/// what needs the whole set, to `pending`).
fn take<'a>(
    d: &'a RawDoc,
    name: String,
    c: &mut Cluster,
    pending: &mut Pending<'a>,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) {
    match d.header.kind.as_str() {
        "BGPConfiguration" => {
            if name == "default" {
                pending.bgp_default = Some(d);
            } else if name.starts_with("node.") {
                pending.node_configs.push(d);
            } else {
                warnings.push(d.warning(
                    "metadata.name",
                    "only `default` and `node.<name>` BGPConfigurations apply; ignored",
                ));
            }
        }
        "Node" => {
            if let Some(n) = node::node(d, errors, warnings) {
                c.nodes.insert(n.name.clone(), n);
            }
        }
        "BGPPeer" => {
            if let Some(p) = peer::peer(d, errors, warnings) {
                pending.peer_filters.push((d, p.filters.clone()));
                c.peers.push(p);
            }
        }
        "IPPool" => {
            if let Some(p) = pool::pool(d, errors, warnings) {
                pool::refuse_overlaps(d, &p, &c.pools, errors);
                c.pools.push(p);
            }
        }
        "BGPFilter" => {
            if let Some(f) = filter::filter(d, errors, warnings) {
                c.filters.insert(f.name.clone(), f);
            }
        }
        "BlockAffinity" => {
            if let Some(a) = ipam::affinity(d, errors, warnings) {
                pending.block_docs.push((d, a.cidr));
                c.affinities.push(a);
            }
        }
        "FelixConfiguration" => felix::felix_configuration(d, &name, c, errors, warnings),
        "IPAMBlock" => {
            if let Some(b) = ipam::block(d, errors, warnings) {
                pending.block_docs.push((d, b.cidr));
                c.blocks.push(b);
            }
        }
        _ => {}
    }
}

/// The checks that need every document: the BGP settings with their per-node
/// overrides, the filters peers name, and blocks inside some pool.
fn across(
    mut c: Cluster,
    pending: Pending<'_>,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) -> Cluster {
    if let Some(d) = pending.bgp_default {
        if let Some(s) = bgp_configuration::bgp_settings(d, errors, warnings) {
            c.bgp = s;
        }
    }
    for d in pending.node_configs {
        bgp_configuration::node_override(d, &mut c.bgp, errors, warnings);
    }
    for (d, names) in pending.peer_filters {
        for n in names {
            if !c.filters.contains_key(&n) {
                errors.push(d.error("spec.filters", format!("BGPFilter {n:?} does not exist")));
            }
        }
    }
    for (d, cidr) in pending.block_docs {
        if !c.pools.iter().any(|p| p.cidr.contains(&cidr)) {
            errors.push(d.error(
                "spec.cidr",
                format!("block {cidr} is outside every IPPool; add its pool or remove the block"),
            ));
        }
    }
    c.peers.sort_by(|a, b| a.name.cmp(&b.name));
    c
}
