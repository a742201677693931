//! Turns a structured input into JSON values (one per resource, as the v3 API holds
//! them), then into the two texts tern reads: block YAML for the cluster file and etcd
//! key/values. Both come from the same values, so a finding in either can be compared
//! with the other rendering of the same snapshot.

use serde_json::{json, Map, Value};

use crate::datastore::etcd::RESOURCES_PREFIX;

use super::values::*;
use super::TernYaml;
use super::{BgpConfiguration, BgpFilter, BgpPeer};
use super::{BlockAffinity, Input, IpPool, IpamBlock, Mangle, Node, Password, Resource};

/// Resources per kind at most: more only repeat the same checks at a higher cost.
const MAX_PER_KIND: usize = 16;

/// The resources of `input`, the known-good ones first if it builds on them.
pub(super) fn documents(input: &Input) -> Vec<Value> {
    let mut docs = if input.on_top_of_known_good {
        known_good_json()
    } else {
        Vec::new()
    };
    let s = &input.snapshot;
    add(
        &mut docs,
        "BGPConfiguration",
        &s.configurations,
        configuration,
    );
    add(&mut docs, "BGPPeer", &s.peers, peer);
    add(&mut docs, "BGPFilter", &s.filters, filter);
    add(&mut docs, "IPPool", &s.pools, pool);
    add(&mut docs, "Node", &s.nodes, node);
    add(&mut docs, "IPAMBlock", &s.blocks, block);
    add(&mut docs, "BlockAffinity", &s.affinities, affinity);
    docs
}

fn add<S>(docs: &mut Vec<Value>, kind: &str, list: &[Resource<S>], spec: fn(&S) -> Value) {
    for r in list.iter().take(MAX_PER_KIND) {
        let mut spec = spec(&r.spec);
        if let (Some((key, value)), Value::Object(m)) = (&r.unknown, &mut spec) {
            m.insert(text(key.value(UNKNOWN_KEYS)), value.value());
        }
        let labels: Map<String, Value> = r
            .labels
            .iter()
            .map(|(k, v)| (k.text(), v.value()))
            .collect();
        let mut metadata = json!({"name": r.name.value()});
        if !labels.is_empty() {
            metadata["labels"] = Value::Object(labels);
        }
        // tern's settings go to annotations for about half the resources (by the
        // name's length, so the input format stays as it is): both spellings are fuzzed.
        if metadata["name"].as_str().is_some_and(|n| n.len() % 2 == 1) {
            to_annotations(kind, &mut spec, &mut metadata);
        }
        let mut doc = json!({"apiVersion": "projectcalico.org/v3", "kind": kind,
                             "metadata": metadata, "spec": spec});
        match &r.mangle {
            None => {}
            Some(Mangle::ApiVersion(p)) => doc["apiVersion"] = p.value(API_VERSIONS),
            Some(Mangle::Kind(p)) => doc["kind"] = p.value(KINDS),
            Some(Mangle::Metadata(w)) => doc["metadata"] = w.value(),
            Some(Mangle::Spec(w)) => doc["spec"] = w.value(),
            Some(Mangle::NoSpec) => {
                if let Value::Object(m) = &mut doc {
                    m.remove("spec");
                }
            }
            Some(Mangle::TopLevel(k, w)) => doc[text(k.value(UNKNOWN_KEYS))] = w.value(),
        }
        docs.push(doc);
    }
}

/// A key's text; keys of the wrong type become `fuzz`.
fn text(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

fn opt(p: &Option<Pick>, table: &[Lit]) -> Option<Value> {
    p.as_ref().map(|p| p.value(table))
}

fn list<T>(l: &Option<Vec<T>>, f: impl Fn(&T) -> Value) -> Option<Value> {
    l.as_ref().map(|l| l.iter().map(f).collect())
}

fn password(p: &Password) -> Value {
    match p {
        Password::SecretKeyRef(name, key) => json!({"secretKeyRef": object([
            ("name", name.as_ref().map(Name::value)),
            ("key", key.as_ref().map(Name::value)),
        ])}),
        Password::File(p) => json!({"file": p.value(PATHS)}),
        Password::Env(n) => json!({"env": n.value()}),
        Password::Wrong(w) => w.value(),
    }
}

/// Moves tern's own fields of a BGPPeer or BGPConfiguration spec to their `tern/`
/// annotations (see `cluster::extensions`), as text as annotations are.
fn to_annotations(kind: &str, spec: &mut Value, metadata: &mut Value) {
    use crate::cluster::extensions as ext;
    let (plain, password, keys): (&[(&str, &str)], &str, (&str, &str)) = match kind {
        "BGPPeer" => (
            &[("holdTime", ext::HOLD_TIME), ("families", ext::FAMILIES)],
            "password",
            (ext::PASSWORD_FILE, ext::PASSWORD_ENV),
        ),
        "BGPConfiguration" => (
            &[
                ("nodeMeshHoldTime", ext::NODE_MESH_HOLD_TIME),
                ("nodeMeshKeepaliveTime", ext::NODE_MESH_KEEPALIVE_TIME),
            ],
            "nodeMeshPassword",
            (ext::NODE_MESH_PASSWORD_FILE, ext::NODE_MESH_PASSWORD_ENV),
        ),
        _ => return,
    };
    let as_text = |v: Value| match v {
        Value::String(s) => s,
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    };
    let Value::Object(spec) = spec else { return };
    let mut annotations = Map::new();
    for (field, key) in plain {
        if let Some(v) = spec.remove(*field) {
            annotations.insert((*key).to_string(), Value::String(as_text(v)));
        }
    }
    let mut emptied = false;
    if let Some(Value::Object(pw)) = spec.get_mut(password) {
        for (field, key) in [("file", keys.0), ("env", keys.1)] {
            if let Some(v) = pw.remove(field) {
                annotations.insert(key.to_string(), Value::String(as_text(v)));
            }
        }
        emptied = pw.is_empty();
    }
    if emptied {
        spec.remove(password);
    }
    if !annotations.is_empty() {
        metadata["annotations"] = Value::Object(annotations);
    }
}

fn configuration(c: &BgpConfiguration) -> Value {
    let cidrs = |l: &Option<Vec<Cidr>>| list(l, |c| json!({"cidr": c.value()}));
    let [cluster, external, lb] = &c.service_ips;
    object([
        ("asNumber", opt(&c.as_number, ASNS)),
        ("nodeToNodeMeshEnabled", opt(&c.mesh_enabled, BOOLS)),
        ("listenPort", opt(&c.listen_port, PORTS)),
        ("bindMode", opt(&c.bind_mode, KEYWORDS)),
        ("nodeMeshPassword", c.mesh_password.as_ref().map(password)),
        ("nodeMeshMaxRestartTime", opt(&c.mesh_restart, DURATIONS)),
        ("nodeMeshHoldTime", opt(&c.mesh_hold, DURATIONS)),
        ("nodeMeshKeepaliveTime", opt(&c.mesh_keepalive, DURATIONS)),
        (
            "ignoredInterfaces",
            c.ignored_interfaces
                .as_ref()
                .map(|m| m.value(|p| p.value(KEYWORDS))),
        ),
        (
            "communities",
            list(
                &c.communities,
                |(n, v)| json!({"name": n.value(), "value": v.value(COMMUNITIES)}),
            ),
        ),
        (
            "prefixAdvertisements",
            list(
                &c.prefix_advertisements,
                |(cidr, cs)| json!({"cidr": cidr.value(), "communities": cs.iter().map(|p| p.value(COMMUNITIES)).collect::<Value>()}),
            ),
        ),
        ("serviceClusterIPs", cidrs(cluster)),
        ("serviceExternalIPs", cidrs(external)),
        ("serviceLoadBalancerIPs", cidrs(lb)),
    ])
}

fn peer(p: &BgpPeer) -> Value {
    object([
        ("peerIP", p.peer_ip.as_ref().map(Addr::value)),
        ("asNumber", opt(&p.as_number, ASNS)),
        ("localASNumber", opt(&p.local_as_number, ASNS)),
        ("node", p.node.as_ref().map(Name::value)),
        (
            "nodeSelector",
            p.node_selector.as_ref().map(Selector::value),
        ),
        (
            "peerSelector",
            p.peer_selector.as_ref().map(Selector::value),
        ),
        ("password", p.password.as_ref().map(password)),
        ("sourceAddress", opt(&p.source_address, KEYWORDS)),
        ("maxRestartTime", opt(&p.max_restart_time, DURATIONS)),
        ("keepaliveTime", opt(&p.keepalive_time, DURATIONS)),
        ("holdTime", opt(&p.hold_time, DURATIONS)),
        ("families", list(&p.families, |f| f.value(KEYWORDS))),
        ("numAllowedLocalASNumbers", opt(&p.allowed_local_as, COUNTS)),
        ("ttlSecurity", opt(&p.ttl_security, COUNTS)),
        ("reachableBy", p.reachable_by.as_ref().map(Addr::value)),
        ("filters", list(&p.filters, Name::value)),
        ("nextHopMode", opt(&p.next_hop_mode, KEYWORDS)),
        ("keepOriginalNextHop", opt(&p.keep_original_next_hop, BOOLS)),
        ("reversePeering", opt(&p.reverse_peering, KEYWORDS)),
    ])
}

fn filter(f: &BgpFilter) -> Value {
    let mut lists: [Vec<Value>; 4] = Default::default();
    for (which, r) in &f.rules {
        let rule = object([
            ("cidr", r.cidr.as_ref().map(Cidr::value)),
            ("matchOperator", opt(&r.match_operator, KEYWORDS)),
            (
                "prefixLength",
                r.prefix_length.as_ref().map(|(min, max)| {
                    object([("min", opt(min, COUNTS)), ("max", opt(max, COUNTS))])
                }),
            ),
            ("source", opt(&r.source, KEYWORDS)),
            ("interface", opt(&r.interface, KEYWORDS)),
            ("peerType", opt(&r.peer_type, KEYWORDS)),
            (
                "communities",
                list(&r.communities, |c| c.value(COMMUNITIES)).map(|v| json!({"values": v})),
            ),
            ("action", opt(&r.action, KEYWORDS)),
        ]);
        lists[usize::from(which % 4)].push(rule);
    }
    let [e4, i4, e6, i6] = lists.map(|l| (!l.is_empty()).then_some(Value::Array(l)));
    object([
        ("exportV4", e4),
        ("importV4", i4),
        ("exportV6", e6),
        ("importV6", i6),
    ])
}

fn pool(p: &IpPool) -> Value {
    object([
        ("cidr", p.cidr.as_ref().map(Cidr::value)),
        ("blockSize", opt(&p.block_size, COUNTS)),
        ("disableBGPExport", opt(&p.disable_bgp_export, BOOLS)),
        ("ipipMode", opt(&p.ipip_mode, KEYWORDS)),
        ("vxlanMode", opt(&p.vxlan_mode, KEYWORDS)),
        ("disabled", opt(&p.disabled, BOOLS)),
    ])
}

fn node(n: &Node) -> Value {
    object([(
        "bgp",
        n.bgp.as_ref().map(|b| {
            object([
                ("ipv4Address", b.ipv4_address.as_ref().map(Cidr::value)),
                ("ipv6Address", b.ipv6_address.as_ref().map(Cidr::value)),
                ("asNumber", opt(&b.as_number, ASNS)),
                (
                    "routeReflectorClusterID",
                    b.route_reflector_cluster_id.as_ref().map(Addr::value),
                ),
            ])
        }),
    )])
}

fn block(b: &IpamBlock) -> Value {
    object([
        ("cidr", b.cidr.as_ref().map(Cidr::value)),
        ("affinity", opt(&b.affinity, KEYWORDS)),
        (
            "allocations",
            b.allocations
                .as_ref()
                .map(|m| m.value(|a| a.as_ref().map_or(Value::Null, |p| p.value(COUNTS)))),
        ),
        (
            "attributes",
            Some(
                b.attributes
                    .iter()
                    .map(|(handle, node)| {
                        object([
                            ("handle_id", handle.as_ref().map(Name::value)),
                            (
                                "secondary",
                                node.as_ref().map(|n| json!({"node": n.value()})),
                            ),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("deleted", opt(&b.deleted, BOOLS)),
    ])
}

fn affinity(a: &BlockAffinity) -> Value {
    object([
        ("node", a.node.as_ref().map(Name::value)),
        ("cidr", a.cidr.as_ref().map(Cidr::value)),
        ("state", opt(&a.state, KEYWORDS)),
        ("deleted", opt(&a.deleted, BOOLS)),
    ])
}

/// The etcd key and value of a resource, in Calico's layout: v3 resources under their
/// plural and name; IPAM blocks and affinities in libcalico-go's own shapes, keyed by
/// CIDR (and node). `None` when the resource has no key (a spoiled envelope).
pub(super) fn etcd_entry(doc: &Value) -> Option<(String, Value)> {
    let kind = doc.get("kind")?.as_str()?;
    let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
    let field = |name: &str| {
        spec.get(name)
            .and_then(Value::as_str)
            .unwrap_or("fuzz")
            .to_string()
    };
    let cidr = field("cidr");
    let family = if cidr.contains(':') { "ipv6" } else { "ipv4" };
    // libcalico-go writes 198.18.4.0/26 as 198.18.4.0-26 in keys.
    let segment = cidr.replace('/', "-");
    match kind {
        "IPAMBlock" => Some((
            format!("/calico/ipam/v2/assignment/{family}/block/{segment}"),
            spec,
        )),
        "BlockAffinity" => {
            let node = field("node");
            let value = object([
                ("state", spec.get("state").cloned()),
                ("deleted", spec.get("deleted").cloned()),
            ]);
            Some((
                format!("/calico/ipam/v2/host/{node}/{family}/block/{segment}"),
                value,
            ))
        }
        _ => {
            let name = doc.get("metadata")?.get("name")?.as_str()?;
            Some((format!("{}/{name}", plural(kind)), doc.clone()))
        }
    }
}

/// `tern.yaml` as a JSON value.
pub(super) fn tern(t: &TernYaml) -> Value {
    let limits = t.limits.as_ref().map(|l| {
        let names = [
            "max_prefixes_per_peer",
            "max_routes",
            "control_request_bytes",
            "control_requests_per_second",
            "datastore_document_bytes",
        ];
        object(names.into_iter().zip(l.iter().map(|p| opt(p, NUMBERS))))
    });
    let mut v = object([
        ("node", t.node.as_ref().map(Name::value)),
        (
            "datastore",
            t.datastore.as_ref().map(|(kind, path, endpoints)| {
                object([
                    ("type", opt(kind, TERN_WORDS)),
                    ("path", opt(path, PATHS)),
                    ("endpoints", list(endpoints, |e| e.value(TERN_WORDS))),
                ])
            }),
        ),
        ("control_socket", opt(&t.control_socket, PATHS)),
        ("metrics", opt(&t.metrics, TERN_WORDS)),
        (
            "fib",
            t.fib.as_ref().map(|(enabled, protocol, table)| {
                object([
                    ("enabled", opt(enabled, BOOLS)),
                    ("route_protocol", opt(protocol, NUMBERS)),
                    ("table", opt(table, NUMBERS)),
                ])
            }),
        ),
        ("log", opt(&t.log, TERN_WORDS)),
        ("limits", limits),
    ]);
    if let (Some((key, value)), Value::Object(m)) = (&t.unknown, &mut v) {
        m.insert(text(key.value(UNKNOWN_KEYS)), value.value());
    }
    v
}

/// The known-good resources as JSON, for inputs built on top of them: the same as
/// `examples/mesh/cluster.yaml`, so both renderings can carry them.
pub(super) fn known_good_json() -> Vec<Value> {
    let v3 = "projectcalico.org/v3";
    let node = |name: &str, last: u8| {
        json!({"apiVersion": v3, "kind": "Node", "metadata": {"name": name},
               "spec": {"bgp": {"ipv4Address": format!("198.51.100.{last}/24"),
                                "ipv6Address": format!("2001:db8:100::{last}/64")}}})
    };
    let pool = |name: &str, cidr: &str, size: u8| {
        json!({"apiVersion": v3, "kind": "IPPool", "metadata": {"name": name},
               "spec": {"cidr": cidr, "blockSize": size}})
    };
    let affinity = |node: &str, cidr: &str| {
        json!({"apiVersion": v3, "kind": "BlockAffinity",
               "metadata": {"name": format!("{node}-{}", cidr.replace(['.', ':', '/'], "-"))},
               "spec": {"node": node, "cidr": cidr, "state": "confirmed"}})
    };
    vec![
        json!({"apiVersion": v3, "kind": "BGPConfiguration", "metadata": {"name": "default"},
               "spec": {"asNumber": 64512, "nodeToNodeMeshEnabled": true,
                        "nodeMeshMaxRestartTime": "120s"}}),
        node("node-a", 10),
        node("node-b", 11),
        node("node-c", 12),
        pool("pods-v4", "198.18.0.0/16", 26),
        pool("pods-v6", "2001:db8:4000::/48", 122),
        affinity("node-a", "198.18.4.0/26"),
        affinity("node-a", "2001:db8:4000::/122"),
        affinity("node-b", "198.18.4.64/26"),
        affinity("node-c", "198.18.4.128/26"),
    ]
}

/// The plural under which etcd stores a kind.
fn plural(kind: &str) -> String {
    format!("{RESOURCES_PREFIX}{}s", kind.to_ascii_lowercase())
}

/// A JSON object from pairs, skipping absent values.
fn object(fields: impl IntoIterator<Item = (&'static str, Option<Value>)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect::<Map<String, Value>>(),
    )
}
