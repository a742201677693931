//! The resources the stand-in serves, and the discovery documents (`/api`, `/api/v1`,
//! `/apis`, `/apis/{group}/{version}`) that describe them to kubectl and kube.

use serde_json::{json, Value};

/// One resource type, as the API server's discovery describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// API group; `""` is the core group.
    pub group: &'static str,
    /// Version within the group.
    pub version: &'static str,
    /// The plural name in URLs (`nodes`).
    pub plural: &'static str,
    /// The singular name (`node`).
    pub singular: &'static str,
    /// The object kind (`Node`).
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// kubectl's short names (`no`).
    pub short_names: &'static [&'static str],
}

impl Resource {
    /// `v1` or `group/version`, as objects' `apiVersion` spells it.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these (`NodeList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

const CALICO: &str = "crd.projectcalico.org";

const fn calico(plural: &'static str, singular: &'static str, kind: &'static str) -> Resource {
    Resource {
        group: CALICO,
        version: "v1",
        plural,
        singular,
        kind,
        namespaced: false,
        short_names: &[],
    }
}

/// Everything served. Calico's CRDs are cluster-scoped, as in Calico's manifests.
pub const RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
    },
    Resource {
        group: "discovery.k8s.io",
        version: "v1",
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        short_names: &[],
    },
    calico("bgpconfigurations", "bgpconfiguration", "BGPConfiguration"),
    calico("bgppeers", "bgppeer", "BGPPeer"),
    calico("bgpfilters", "bgpfilter", "BGPFilter"),
    calico("ippools", "ippool", "IPPool"),
    calico("ipamblocks", "ipamblock", "IPAMBlock"),
    calico("blockaffinities", "blockaffinity", "BlockAffinity"),
    calico(
        "felixconfigurations",
        "felixconfiguration",
        "FelixConfiguration",
    ),
];

/// The verbs every served resource allows (PATCH is answered 405).
const VERBS: &[&str] = &["create", "delete", "get", "list", "update", "watch"];

/// The resource served at `group`/`version`/`plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource whose objects have this `apiVersion` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

/// The groups other than core, in a stable order.
fn groups() -> Vec<&'static str> {
    let mut g: Vec<&str> = RESOURCES
        .iter()
        .map(|r| r.group)
        .filter(|g| !g.is_empty())
        .collect();
    g.dedup();
    g
}

/// `/api`: the core group's versions.
pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

fn group_doc(group: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `/apis`: every named group.
pub fn group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(group_doc).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if served.
pub fn group(group: &str) -> Option<Value> {
    groups().contains(&group).then(|| {
        let mut g = group_doc(group);
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        g
    })
}

/// `/api/v1` or `/apis/{group}/{version}`: the APIResourceList, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let list: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .map(|r| {
            json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": VERBS,
                "shortNames": r.short_names,
            })
        })
        .collect();
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": list,
    }))
}

/// `/openapi/v2`: an OpenAPI document with no definitions, in the protobuf encoding
/// kubectl asks for (gnostic's `openapi_v2.Document`: swagger = 1, info = 2 with title = 1
/// and version = 2, paths = 8). kubectl validates objects against it before it sends
/// them, and skips kinds it has no schema for: so `create -f` works without
/// `--validate=false`, and the server, not kubectl, judges the objects.
pub fn openapi_v2_protobuf() -> Vec<u8> {
    fn field(tag: u8, body: &[u8]) -> Vec<u8> {
        // Every part here is shorter than 128 bytes: a one-byte length varint.
        let mut out = vec![tag, body.len() as u8];
        out.extend_from_slice(body);
        out
    }
    let info = [
        field(0x0a, b"tern-lab kube-apiserver"),
        field(0x12, b"v1.33.0"),
    ]
    .concat();
    [field(0x0a, b"2.0"), field(0x12, &info), field(0x42, b"")].concat()
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-tern-lab",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_has_a_resource_list() {
        assert!(resource_list("", "v1").is_some());
        for g in groups() {
            assert!(resource_list(g, "v1").is_some(), "{g}");
            assert!(group(g).is_some(), "{g}");
        }
        assert!(resource_list("apps", "v1").is_none());
        assert_eq!(
            find(CALICO, "v1", "bgppeers").map(|r| r.kind),
            Some("BGPPeer")
        );
        assert_eq!(by_kind("v1", "Secret").map(|r| r.plural), Some("secrets"));
    }
}
