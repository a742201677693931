//! From etcd keys and values to documents: which keys tern reads (Calico's v3
//! resources, IPAM blocks and block affinities), and the conversion of their values
//! into v3 resource documents the model reads.

use serde_json::{Map, Value};
use tracing::{debug, warn};

use super::keyspace::Refused;
use super::{AFFINITIES_PREFIX, API_VERSION, BLOCKS_PREFIX, IGNORED_PLURALS, RESOURCES_PREFIX};
use crate::datastore::Document;

/// The document for one etcd key and value, or `None` when tern does not read that key.
///
/// - `RESOURCES_PREFIX<plural>/<name>` (or `<plural>/<namespace>/<name>`): the value,
///   with `apiVersion`, `kind` and `metadata.name` (`metadata.namespace`) filled from the
///   key when missing. Plurals in [`IGNORED_PLURALS`] and keys of another shape: `None`.
/// - `/calico/ipam/v2/assignment/ipv4/block/198.18.4.0-26`: an `IPAMBlock` named
///   `198-18-4-0-26` whose spec holds the block's `cidr`, `affinity`, `strictAffinity`,
///   `allocations`, `unallocated`, `attributes` and `deleted`.
/// - `/calico/ipam/v2/host/<node>/ipv4/block/198.18.4.0-26`: a `BlockAffinity` named
///   `<node>-198-18-4-0-26` with spec `node`, `cidr`, `state` (empty means `confirmed`)
///   and `deleted` (a string, as in the v3 API).
///
/// A value that is not a JSON object is returned as its raw text (origin = the key),
/// so that the model reports it rather than it being dropped. A value longer than
/// `max_value_bytes` is refused before it is parsed (see [`Refused::Value`]).
pub fn document_for(
    key: &str,
    value: &[u8],
    max_value_bytes: u64,
) -> Option<Result<Document, Refused>> {
    let kind = key_kind(key)?;
    Some(check_value_size(key, value, max_value_bytes).map(|()| convert(key, kind, value)))
}

/// A key tern reads, taken apart. Deciding from the key alone, before the value is
/// looked at, lets the store check a value's size (and the running total) before any
/// parsing, and lets it ignore, unmeasured, the keys it does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind<'a> {
    /// `RESOURCES_PREFIX<plural>/[<namespace>/]<name>`.
    Resource {
        plural: &'a str,
        namespace: Option<&'a str>,
        name: &'a str,
    },
    /// `BLOCKS_PREFIX ipv4/block/<segment>`.
    Block { segment: &'a str },
    /// `AFFINITIES_PREFIX <node>/ipv4/block/<segment>`.
    Affinity { node: &'a str, segment: &'a str },
}

/// What `key` is, or `None` when tern does not read it.
pub(super) fn key_kind(key: &str) -> Option<KeyKind<'_>> {
    if let Some(rest) = key.strip_prefix(RESOURCES_PREFIX) {
        resource_key(key, rest)
    } else if let Some(rest) = key.strip_prefix(BLOCKS_PREFIX) {
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [family, "block", segment] if is_family(family) && !segment.is_empty() => {
                Some(KeyKind::Block { segment })
            }
            _ => None,
        }
    } else if let Some(rest) = key.strip_prefix(AFFINITIES_PREFIX) {
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [node, family, "block", segment]
                if !node.is_empty() && is_family(family) && !segment.is_empty() =>
            {
                Some(KeyKind::Affinity { node, segment })
            }
            _ => None,
        }
    } else {
        None
    }
}

/// The document for a key tern reads (its size already checked).
pub(super) fn convert(key: &str, kind: KeyKind<'_>, value: &[u8]) -> Document {
    match kind {
        KeyKind::Resource {
            plural,
            namespace,
            name,
        } => resource_document(key, plural, namespace, name, value),
        KeyKind::Block { segment } => block_document(key, segment, value),
        KeyKind::Affinity { node, segment } => affinity_document(key, node, segment, value),
    }
}

/// Refuses a value longer than `max_bytes`, unread.
pub(super) fn check_value_size(key: &str, value: &[u8], max_bytes: u64) -> Result<(), Refused> {
    let bytes = u64::try_from(value.len()).unwrap_or(u64::MAX);
    if bytes > max_bytes {
        return Err(Refused::Value {
            key: key.to_string(),
            bytes,
            limit: max_bytes,
        });
    }
    Ok(())
}

/// A v3 resource key: plural, namespace and name, unless the plural is one tern never
/// uses or the key is not in Calico's layout.
pub(super) fn resource_key<'a>(key: &str, rest: &'a str) -> Option<KeyKind<'a>> {
    let parts: Vec<&str> = rest.split('/').collect();
    let (plural, namespace, name) = match parts.as_slice() {
        [plural, name] => (*plural, None, *name),
        [plural, namespace, name] => (*plural, Some(*namespace), *name),
        _ => {
            // Not Calico's layout (libcalico-go would not read it either).
            debug!(key, "ignoring etcd key of unknown shape");
            return None;
        }
    };
    if plural.is_empty() || name.is_empty() || namespace.is_some_and(str::is_empty) {
        debug!(key, "ignoring etcd key with an empty segment");
        return None;
    }
    if IGNORED_PLURALS.contains(&plural) {
        return None;
    }
    Some(KeyKind::Resource {
        plural,
        namespace,
        name,
    })
}

/// A v3 resource: the value passed through, completed from the key.
pub(super) fn resource_document(
    key: &str,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
    value: &[u8],
) -> Document {
    let Some(Value::Object(mut object)) = parse_json(value) else {
        warn!(key, "etcd value is not a JSON object; handing it on as is");
        return raw_document(key, value);
    };
    let mut filled = false;
    if !object.contains_key("apiVersion") {
        object.insert("apiVersion".into(), API_VERSION.into());
        filled = true;
    }
    if !object.contains_key("kind") {
        object.insert("kind".into(), kind_for_plural(plural).into());
        filled = true;
    }
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    // A `metadata` that is not an object is left alone for the model to reject.
    if let Value::Object(metadata) = metadata {
        if !metadata.contains_key("name") {
            metadata.insert("name".into(), name.into());
            filled = true;
        }
        if let Some(namespace) = namespace {
            if !metadata.contains_key("namespace") {
                metadata.insert("namespace".into(), namespace.into());
                filled = true;
            }
        }
    }
    if !filled {
        // Nothing to add: hand on the text exactly as etcd holds it.
        return raw_document(key, value);
    }
    json_document(key, Value::Object(object))
}

/// The v3 kind stored under a plural, as libcalico-go registers them. An unknown plural
/// is used as the kind itself, so the model's unknown-kind warning names something
/// recognisable.
pub(super) fn kind_for_plural(plural: &str) -> String {
    let kind = match plural {
        "bgpconfigurations" => "BGPConfiguration",
        "bgpfilters" => "BGPFilter",
        "bgppeers" => "BGPPeer",
        "felixconfigurations" => "FelixConfiguration",
        "blockaffinities" => "BlockAffinity",
        "ippools" => "IPPool",
        "nodes" => "Node",
        "ipamblocks" => "IPAMBlock",
        other => other,
    };
    kind.to_string()
}

/// An IPAM block key's CIDR segment (`198.18.4.0-26`) and its `AllocationBlock` value.
pub(super) fn block_document(key: &str, segment: &str, value: &[u8]) -> Document {
    let key_cidr = cidr_from_segment(segment);
    let Some(Value::Object(block)) = parse_json(value) else {
        warn!(
            key,
            "IPAM block value is not a JSON object; handing it on as is"
        );
        return raw_document(key, value);
    };
    let field = |name: &str| block.get(name).filter(|v| !v.is_null()).cloned();
    let mut spec = Map::new();
    spec.insert(
        "cidr".into(),
        field("cidr").unwrap_or_else(|| key_cidr.clone().into()),
    );
    // `hostAffinity: <node>` is the deprecated spelling of `affinity: host:<node>`;
    // libcalico-go still reads it, so tern does too.
    let affinity = field("affinity").or_else(|| match block.get("hostAffinity") {
        Some(Value::String(host)) => Some(format!("host:{host}").into()),
        _ => None,
    });
    if let Some(affinity) = affinity {
        spec.insert("affinity".into(), affinity);
    }
    spec.insert(
        "strictAffinity".into(),
        field("strictAffinity").unwrap_or(Value::Bool(false)),
    );
    for list in ["allocations", "unallocated", "attributes"] {
        spec.insert(
            list.into(),
            field(list).unwrap_or_else(|| Value::Array(Vec::new())),
        );
    }
    spec.insert(
        "deleted".into(),
        field("deleted").unwrap_or(Value::Bool(false)),
    );
    json_document(key, resource_json("IPAMBlock", &cidr_name(&key_cidr), spec))
}

/// A block affinity key's node and CIDR segment (`<node>/ipv4/block/198.18.4.0-26`)
/// and its value.
pub(super) fn affinity_document(key: &str, node: &str, segment: &str, value: &[u8]) -> Document {
    let cidr = cidr_from_segment(segment);
    // Older Calico wrote affinities with an empty value: a confirmed affinity.
    let affinity = if value.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match parse_json(value) {
            Some(Value::Object(affinity)) => affinity,
            _ => {
                warn!(
                    key,
                    "block affinity value is not a JSON object; handing it on as is"
                );
                return raw_document(key, value);
            }
        }
    };
    let state = match affinity.get("state") {
        None | Some(Value::Null) => "confirmed".into(),
        Some(Value::String(s)) if s.is_empty() => "confirmed".into(),
        // Anything else, valid or not, is the model's to judge.
        Some(other) => other.clone(),
    };
    // The v3 BlockAffinity spells `deleted` as a string.
    let deleted = match affinity.get("deleted") {
        None | Some(Value::Null) => "false".into(),
        Some(Value::Bool(b)) => b.to_string().into(),
        Some(other) => other.clone(),
    };
    let mut spec = Map::new();
    spec.insert("node".into(), node.into());
    spec.insert("cidr".into(), cidr.clone().into());
    spec.insert("state".into(), state);
    spec.insert("deleted".into(), deleted);
    let name = format!("{node}-{}", cidr_name(&cidr));
    json_document(key, resource_json("BlockAffinity", &name, spec))
}

/// `ipv4` or `ipv6`, the family segment of IPAM keys.
pub(super) fn is_family(segment: &str) -> bool {
    matches!(segment, "ipv4" | "ipv6")
}

/// The CIDR in an IPAM key segment: libcalico-go writes `198.18.4.0/26` as
/// `198.18.4.0-26` (`2001:db8:1::/122` as `2001:db8:1::-122`). Addresses hold no `-`,
/// so the last one is the slash. A segment without one is returned unchanged for the
/// model to reject as a CIDR.
pub(super) fn cidr_from_segment(segment: &str) -> String {
    match segment.rsplit_once('-') {
        Some((address, length)) => format!("{address}/{length}"),
        None => segment.to_string(),
    }
}

/// The resource name Calico gives a CIDR: `.`, `:` and `/` become `-`.
pub(super) fn cidr_name(cidr: &str) -> String {
    cidr.replace(['.', ':', '/'], "-")
}

/// `{"apiVersion", "kind", "metadata": {"name"}, "spec"}`.
pub(super) fn resource_json(kind: &str, name: &str, spec: Map<String, Value>) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    let mut object = Map::new();
    object.insert("apiVersion".into(), API_VERSION.into());
    object.insert("kind".into(), kind.into());
    object.insert("metadata".into(), Value::Object(metadata));
    object.insert("spec".into(), Value::Object(spec));
    Value::Object(object)
}

/// The value as JSON, or `None` when it is not JSON (or not UTF-8, which JSON must be).
pub(super) fn parse_json(value: &[u8]) -> Option<Value> {
    serde_json::from_slice(value).ok()
}

pub(super) fn json_document(key: &str, value: Value) -> Document {
    Document {
        origin: key.to_string(),
        text: value.to_string(),
    }
}

/// The value's own text, for the model to reject naming the key. Bytes that are not
/// UTF-8 (which no Calico value holds) become U+FFFD.
pub(super) fn raw_document(key: &str, value: &[u8]) -> Document {
    Document {
        origin: key.to_string(),
        text: String::from_utf8_lossy(value).into_owned(),
    }
}
