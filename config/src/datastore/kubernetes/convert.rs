//! From Kubernetes API objects (as the JSON the API server returns) to the documents
//! the model reads. Pure functions: the watch tasks call them on every object they
//! receive, and the unit tests call them on fixtures.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use serde_json::{Map, Value};
use tracing::warn;

use super::Kind;
use crate::datastore::Document;

/// The `apiVersion` of the Calico documents produced.
const CALICO_API_VERSION: &str = "projectcalico.org/v3";
/// Annotation prefix passed on to the model (tern's own settings); every other
/// annotation is dropped, since clusters carry large ones (`last-applied-configuration`).
pub const TERN_ANNOTATION_PREFIX: &str = "tern/";
/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Node annotations in which Calico keeps a node's BGP settings in KDD mode (libcalico-go
/// `K8sNodeToCalico`). The tunnel-address annotations (`IPv4IPIPTunnelAddr`,
/// `IPv4VXLANTunnelAddr`, …) are not read: tern does not use them.
pub const NODE_IPV4_ANNOTATION: &str = "projectcalico.org/IPv4Address";
/// See [`NODE_IPV4_ANNOTATION`].
pub const NODE_IPV6_ANNOTATION: &str = "projectcalico.org/IPv6Address";
/// See [`NODE_IPV4_ANNOTATION`].
pub const NODE_ASN_ANNOTATION: &str = "projectcalico.org/ASNumber";
/// See [`NODE_IPV4_ANNOTATION`].
pub const NODE_RR_CLUSTER_ID_ANNOTATION: &str = "projectcalico.org/RouteReflectorClusterID";

/// One converted object: its key within its kind, the document, and what the snapshot
/// assembly needs to decide whether the document is passed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// `name`, or `namespace/name` for namespaced kinds.
    pub key: String,
    /// The document handed to the daemon.
    pub document: Document,
    /// Links to other objects (secret references, service membership).
    pub link: Link,
}

/// What ties an object to others; used to pass on only the Secrets, Services and
/// EndpointSlices that matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// Nothing: always passed on.
    None,
    /// A BGPPeer naming these Secrets (`spec.password.secretKeyRef.name`).
    PeerSecrets(Vec<String>),
    /// A Secret: passed on only when a BGPPeer names it.
    Secret,
    /// A Service: passed on only when it can give a route of its own.
    Service {
        /// A traffic policy is `Local`, or it has external or load-balancer addresses.
        local: bool,
    },
    /// An EndpointSlice of the Service `namespace/name` (none without the label):
    /// passed on only when that Service is.
    Slice {
        /// `namespace/name` of the Service.
        service: Option<String>,
    },
}

/// Why an object could not be converted: it has no name (the API server never sends
/// one without).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unnamed;

/// Converts one object of `kind`, given as its JSON.
pub fn convert(kind: Kind, object: &Value) -> Result<Item, Unnamed> {
    let metadata = object.get("metadata").and_then(Value::as_object);
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or(Unnamed)?;
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let key = match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    let origin = format!("kubernetes {} {key}", kind.kind_name());
    let (value, link) = match kind {
        Kind::BgpFilter | Kind::IpPool | Kind::FelixConfiguration => {
            (calico_resource(kind, name, object), Link::None)
        }
        // The mesh password's Secret (`nodeMeshPassword.secretKeyRef`) is wanted too.
        Kind::BgpConfiguration => (
            calico_resource(kind, name, object),
            Link::PeerSecrets(secret_names(
                object,
                "/spec/nodeMeshPassword/secretKeyRef/name",
            )),
        ),
        Kind::BgpPeer => (
            calico_resource(kind, name, object),
            Link::PeerSecrets(peer_secrets(object)),
        ),
        Kind::IpamBlock => match ipam_block(&origin, name, object) {
            Some(document) => return Ok(item(key, document, Link::None)),
            None => (calico_resource(kind, name, object), Link::None),
        },
        Kind::BlockAffinity => match block_affinity(&origin, object) {
            Some(document) => return Ok(item(key, document, Link::None)),
            None => (calico_resource(kind, name, object), Link::None),
        },
        Kind::Node => (node(&origin, name, object), Link::None),
        Kind::Secret => (secret(name, namespace, object), Link::Secret),
        Kind::Service => service(name, namespace, object),
        Kind::EndpointSlice => endpoint_slice(name, namespace, object),
    };
    Ok(item(
        key,
        Document {
            origin,
            text: value.to_string(),
        },
        link,
    ))
}

fn item(key: String, document: Document, link: Link) -> Item {
    Item {
        key,
        document,
        link,
    }
}

/// `metadata` of a produced document: name, labels, `tern/` annotations.
fn calico_metadata(name: &str, object: &Value) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    if let Some(labels) = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    {
        if !labels.is_empty() {
            metadata.insert("labels".into(), Value::Object(labels.clone()));
        }
    }
    let annotations = tern_annotations(object);
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    metadata
}

/// The `tern/` annotations of `object`: its own, and those of the v3 metadata that
/// calicoctl keeps as JSON in the `projectcalico.org/metadata` annotation when it
/// writes a resource into the CRDs (the object's own win).
fn tern_annotations(object: &Value) -> Map<String, Value> {
    let own = object
        .pointer("/metadata/annotations")
        .and_then(Value::as_object);
    let calico: Option<Value> = own
        .and_then(|a| a.get(CALICO_METADATA_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str(text).ok());
    let from_calico = calico
        .as_ref()
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    let mut out = Map::new();
    for all in [from_calico, own].into_iter().flatten() {
        for (k, v) in all {
            if k.starts_with(TERN_ANNOTATION_PREFIX) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// Where calicoctl keeps a v3 resource's own metadata on the CRD object.
const CALICO_METADATA_ANNOTATION: &str = "projectcalico.org/metadata";

/// A `crd.projectcalico.org/v1` object as its `projectcalico.org/v3` document: same
/// kind, reduced metadata, `spec` unchanged (an object without one gets `{}`).
fn calico_resource(kind: Kind, name: &str, object: &Value) -> Value {
    let spec = object
        .get("spec")
        .cloned()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut out = Map::new();
    out.insert("apiVersion".into(), CALICO_API_VERSION.into());
    out.insert("kind".into(), kind.kind_name().into());
    out.insert(
        "metadata".into(),
        Value::Object(calico_metadata(name, object)),
    );
    out.insert("spec".into(), spec);
    Value::Object(out)
}

/// The Secret names a BGPPeer's password refers to.
fn peer_secrets(object: &Value) -> Vec<String> {
    secret_names(object, "/spec/password/secretKeyRef/name")
}

/// The Secret name at `pointer`, if any.
fn secret_names(object: &Value, pointer: &str) -> Vec<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(|n| vec![n.to_string()])
        .unwrap_or_default()
}

/// An IPAMBlock as the etcd store produces it from the same data: the CRD's `spec`
/// holds the fields of libcalico-go's `AllocationBlock`, which is what an etcd value
/// holds, so it is converted by the etcd store's own function, under the key etcd would
/// use. `None` when the object has no `spec` object (then the model rejects it).
fn ipam_block(origin: &str, name: &str, object: &Value) -> Option<Document> {
    let spec = object.get("spec").filter(|s| s.is_object())?;
    // The CIDR from the spec; without one, the name (`198-18-4-0-26`) stands in, which
    // the model then rejects as a CIDR, naming this object.
    let cidr = spec.get("cidr").and_then(Value::as_str).unwrap_or(name);
    let segment = match cidr.rsplit_once('/') {
        Some((address, length)) => format!("{address}-{length}"),
        None => cidr.to_string(),
    };
    let family = if cidr.contains(':') { "ipv6" } else { "ipv4" };
    if segment.is_empty() || segment.contains('/') {
        return None;
    }
    let key = format!("/calico/ipam/v2/assignment/{family}/block/{segment}");
    etcd_document(origin, &key, spec)
}

/// A BlockAffinity as the etcd store produces it (see [`ipam_block`]). The CRD spells
/// `deleted` as a string, which the etcd conversion passes through. `None` when the
/// spec lacks what an etcd key would hold (node, CIDR); the object then goes to the
/// model as it is, to be rejected naming it.
fn block_affinity(origin: &str, object: &Value) -> Option<Document> {
    let spec = object.get("spec").filter(|s| s.is_object())?;
    let node = spec
        .get("node")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty() && !n.contains('/'))?;
    let cidr = spec.get("cidr").and_then(Value::as_str)?;
    let (address, length) = cidr.rsplit_once('/')?;
    if address.is_empty() || address.contains('/') || length.is_empty() {
        return None;
    }
    let family = if cidr.contains(':') { "ipv6" } else { "ipv4" };
    let key = format!("/calico/ipam/v2/host/{node}/{family}/block/{address}-{length}");
    etcd_document(origin, &key, spec)
}

/// The etcd store's document for `key` holding `value`, with `origin` instead of the key.
fn etcd_document(origin: &str, key: &str, value: &Value) -> Option<Document> {
    let bytes = serde_json::to_vec(value).ok()?;
    // The size was checked on the whole object already.
    let document = crate::datastore::etcd::document_for(key, &bytes, u64::MAX)?.ok()?;
    Some(Document {
        origin: origin.to_string(),
        text: document.text,
    })
}

/// A Kubernetes Node as a Calico `Node`: labels, `tern/` annotations and `spec.bgp` from
/// Calico's annotations. As libcalico-go does, a value that is not valid is left out
/// (with a warning) rather than failing the node, and a node with none of them has no
/// `spec.bgp`.
fn node(origin: &str, name: &str, object: &Value) -> Value {
    let annotation = |key: &str| {
        object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let mut bgp = Map::new();
    let fields: [(&str, &str, Check); 4] = [
        (NODE_IPV4_ANNOTATION, "ipv4Address", |v| {
            (v.parse::<Ipv4Net>().is_ok() || v.parse::<Ipv4Addr>().is_ok()).then(|| v.into())
        }),
        (NODE_IPV6_ANNOTATION, "ipv6Address", |v| {
            (v.parse::<Ipv6Net>().is_ok() || v.parse::<Ipv6Addr>().is_ok()).then(|| v.into())
        }),
        (NODE_ASN_ANNOTATION, "asNumber", as_number),
        (
            NODE_RR_CLUSTER_ID_ANNOTATION,
            "routeReflectorClusterID",
            |v| v.parse::<Ipv4Addr>().is_ok().then(|| v.into()),
        ),
    ];
    for (annotation_key, field, check) in fields {
        let Some(text) = annotation(annotation_key) else {
            continue;
        };
        match check(text) {
            Some(value) => {
                bgp.insert(field.into(), value);
            }
            None => warn!(
                object = origin,
                annotation = annotation_key,
                value = text,
                "node annotation is not valid; left out, as Calico does"
            ),
        }
    }
    let mut spec = Map::new();
    if !bgp.is_empty() {
        spec.insert("bgp".into(), Value::Object(bgp));
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), CALICO_API_VERSION.into());
    out.insert("kind".into(), "Node".into());
    out.insert(
        "metadata".into(),
        Value::Object(calico_metadata(name, object)),
    );
    out.insert("spec".into(), Value::Object(spec));
    Value::Object(out)
}

/// Validates an annotation's text, giving the value for `spec.bgp`.
type Check = fn(&str) -> Option<Value>;

/// An AS number annotation: plain (`64512`) or asdot (`1.10`), as Calico accepts it.
fn as_number(text: &str) -> Option<Value> {
    if let Ok(n) = text.parse::<u32>() {
        return Some(n.into());
    }
    let (high, low) = text.split_once('.')?;
    (high.parse::<u16>().is_ok() && low.parse::<u16>().is_ok()).then(|| text.into())
}

/// `{apiVersion: v1, kind: Secret, metadata: {name, namespace}, data}` (data stays
/// base64, as the API server sends it).
fn secret(name: &str, namespace: Option<&str>, object: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), "v1".into());
    out.insert("kind".into(), "Secret".into());
    out.insert("metadata".into(), namespaced_metadata(name, namespace));
    out.insert(
        "data".into(),
        object
            .get("data")
            .filter(|d| d.is_object())
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new())),
    );
    Value::Object(out)
}

fn namespaced_metadata(name: &str, namespace: Option<&str>) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        metadata.insert("namespace".into(), ns.into());
    }
    Value::Object(metadata)
}

/// Copies the fields `names` of `from` that are present into a new object.
fn pick(from: Option<&Value>, names: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(from) = from.and_then(Value::as_object) {
        for name in names {
            if let Some(value) = from.get(*name).filter(|v| !v.is_null()) {
                out.insert((*name).to_string(), value.clone());
            }
        }
    }
    out
}

/// A compact Service: the fields that decide its routes, under Kubernetes' own names.
fn service(name: &str, namespace: Option<&str>, object: &Value) -> (Value, Link) {
    let spec = pick(
        object.get("spec"),
        &[
            "type",
            "clusterIP",
            "clusterIPs",
            "externalIPs",
            "externalTrafficPolicy",
            "internalTrafficPolicy",
        ],
    );
    let local = ["externalTrafficPolicy", "internalTrafficPolicy"]
        .iter()
        .any(|p| spec.get(*p).and_then(Value::as_str) == Some("Local"));
    // A Cluster-policy service matters too when it has external or load-balancer
    // addresses: those get a /32 (/128) when a configured range is that one address.
    let external = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let ingress: Vec<Value> = object
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|i| i.get("ip").filter(|ip| ip.is_string()))
                .map(|ip| serde_json::json!({ "ip": ip }))
                .collect()
        })
        .unwrap_or_default();
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": namespaced_metadata(name, namespace),
        "spec": spec,
        "status": { "loadBalancer": { "ingress": ingress } },
    });
    let local = local || external || !ingress.is_empty();
    (value, Link::Service { local })
}

/// A compact EndpointSlice: address type and, per endpoint, addresses, node and
/// readiness.
fn endpoint_slice(name: &str, namespace: Option<&str>, object: &Value) -> (Value, Link) {
    let service_name = object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        metadata.insert("namespace".into(), ns.into());
    }
    if let Some(service) = service_name {
        metadata.insert(
            "labels".into(),
            serde_json::json!({ SERVICE_NAME_LABEL: service }),
        );
    }
    let endpoints: Vec<Value> = object
        .get("endpoints")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|e| {
                    let mut out = pick(Some(e), &["addresses", "nodeName"]);
                    let conditions = pick(e.get("conditions"), &["ready"]);
                    if !conditions.is_empty() {
                        out.insert("conditions".into(), Value::Object(conditions));
                    }
                    Value::Object(out)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = Map::new();
    out.insert("apiVersion".into(), "discovery.k8s.io/v1".into());
    out.insert("kind".into(), "EndpointSlice".into());
    out.insert("metadata".into(), Value::Object(metadata));
    if let Some(address_type) = object.get("addressType").filter(|v| !v.is_null()) {
        out.insert("addressType".into(), address_type.clone());
    }
    out.insert("endpoints".into(), Value::Array(endpoints));
    let service = match (namespace, service_name) {
        (Some(ns), Some(svc)) => Some(format!("{ns}/{svc}")),
        (None, Some(svc)) => Some(svc.to_string()),
        _ => None,
    };
    (Value::Object(out), Link::Slice { service })
}
