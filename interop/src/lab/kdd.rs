//! The lab's cluster in the shapes a Kubernetes-datastore (KDD) cluster keeps it: the
//! Calico v3 documents of `cluster.yaml` turned into what the API server holds, so the
//! same lab runs on a file or on the Kubernetes API stand-in.
//!
//! - A Calico `Node` becomes a core `v1` Node: its BGP fields become calico-node's
//!   annotations (`projectcalico.org/IPv4Address`, …), its labels the Node's labels.
//! - Every other kind becomes the `crd.projectcalico.org/v1` custom resource of the
//!   same kind and spec (that is how Calico stores v3 resources in KDD);
//!   BlockAffinity gets the CRD's string `deleted: "false"`.
//! - A BGPPeer password read from a file becomes a Secret in the calico-node namespace
//!   and a `secretKeyRef`, as a KDD cluster has it.
//!
//! Pure: the lab and its tests call it without a server.

use serde_json::{json, Map, Value};

use crate::{Error, Result};

/// The namespace the lab's Secrets live in (where calico-node runs in an operator
/// install).
pub const SECRET_NAMESPACE: &str = "calico-system";

/// Converts `cluster_yaml` (multi-document Calico v3) into Kubernetes objects.
/// `read_file` reads a `password.file` (the lab wrote it) so it can become a Secret.
pub fn objects(
    cluster_yaml: &str,
    read_file: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, text) in cluster_yaml.split("\n---").enumerate() {
        let text = text.trim_start_matches("---");
        if text.trim().is_empty() {
            continue;
        }
        let doc: Value = serde_saphyr::from_str(text)
            .map_err(|e| Error::Lab(format!("cluster.yaml document {i}: {e}")))?;
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let mut meta = doc.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let mut spec = doc.get("spec").cloned().unwrap_or_else(|| json!({}));
        match kind.as_str() {
            "Node" => out.push(node(&meta, &spec)),
            _ => {
                if kind == "BlockAffinity" {
                    spec["deleted"] = json!("false");
                }
                if kind == "BGPPeer" {
                    if let Some(secret) = password_secret(&mut meta, &mut spec, read_file)? {
                        out.push(secret);
                    }
                }
                out.push(json!({
                    "apiVersion": "crd.projectcalico.org/v1",
                    "kind": kind,
                    "metadata": meta,
                    "spec": spec,
                }));
            }
        }
    }
    Ok(out)
}

/// A Calico Node as the Kubernetes Node calico-node annotates.
fn node(meta: &Value, spec: &Value) -> Value {
    let mut annotations = Map::new();
    let bgp = &spec["bgp"];
    for (field, annotation) in [
        ("ipv4Address", "projectcalico.org/IPv4Address"),
        ("ipv6Address", "projectcalico.org/IPv6Address"),
        ("asNumber", "projectcalico.org/ASNumber"),
        (
            "routeReflectorClusterID",
            "projectcalico.org/RouteReflectorClusterID",
        ),
    ] {
        match &bgp[field] {
            Value::String(s) => {
                annotations.insert(annotation.into(), json!(s));
            }
            Value::Number(n) => {
                annotations.insert(annotation.into(), json!(n.to_string()));
            }
            _ => {}
        }
    }
    if let Some(Value::Object(extra)) = meta.get("annotations") {
        annotations.extend(extra.clone());
    }
    let name = meta["name"].clone();
    let mut labels = meta
        .get("labels")
        .cloned()
        .unwrap_or_else(|| json!({}))
        .as_object()
        .cloned()
        .unwrap_or_default();
    // What the kubelet puts on every Node.
    if let Value::String(n) = &name {
        labels.insert("kubernetes.io/hostname".into(), json!(n));
    }
    labels.insert("kubernetes.io/os".into(), json!("linux"));
    let address = bgp["ipv4Address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"podCIDR": Value::Null},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64"},
        },
    })
}

/// Replaces a BGPPeer's password file (the `tern/password-file` annotation, or the
/// older `password: {file: F}`) by a `secretKeyRef` to a Secret holding F's content,
/// and returns that Secret.
fn password_secret(
    meta: &mut Value,
    spec: &mut Value,
    read_file: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Value>> {
    // Removed, or tern would read the file instead of the Secret.
    let annotated = meta
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.remove("tern/password-file"))
        .and_then(|v| v.as_str().map(str::to_string));
    let Some(file) = annotated.or_else(|| spec["password"]["file"].as_str().map(str::to_string))
    else {
        return Ok(None);
    };
    let peer = meta["name"].as_str().unwrap_or("peer");
    let password = read_file(&file)
        .ok_or_else(|| Error::Lab(format!("BGPPeer {peer}: cannot read {file}")))?;
    let name = format!("{peer}-bgp-password");
    spec["password"] = json!({"secretKeyRef": {"name": name, "key": "password"}});
    Ok(Some(secret(&name, "password", password.trim_end())))
}

/// A Secret in [`SECRET_NAMESPACE`] with one key.
pub fn secret(name: &str, key: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": SECRET_NAMESPACE},
        "data": {key: base64(value.as_bytes())},
    })
}

/// Standard base64 with padding, as Kubernetes encodes Secret data.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The pool of [`synthetic`] blocks: inside 198.18.0.0/15, apart from the lab's pool.
pub const SCALE_POOL: &str = "198.19.0.0/16";

/// `n` more Nodes, each holding one /29 block of [`SCALE_POOL`] with two allocated
/// addresses, as a large cluster's API server holds them: for scale runs, where the
/// lab's own nodes must read and validate them all. These Nodes carry no BGP
/// annotations (they do not run BGP), so the lab's sessions stay the same; a
/// thousands-node mesh is a benchmark of its own. At most 8,192 (the pool's /29s).
pub fn synthetic(n: usize) -> Vec<Value> {
    let mut out = vec![json!({
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "IPPool",
        "metadata": {"name": "scale"},
        "spec": {"cidr": SCALE_POOL, "blockSize": 29, "ipipMode": "Never", "natOutgoing": true, "nodeSelector": "all()"},
    })];
    for i in 0..n.min(8192) {
        let name = format!("scale-{i}");
        let cidr = format!("198.19.{}.{}/29", i / 32, (i % 32) * 8);
        let mut allocations = vec![Value::Null; 8];
        allocations[0] = json!(0);
        allocations[1] = json!(1);
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": format!("zone-{}", i % 3)},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "spec": {"podCIDR": Value::Null},
            "status": {
                "addresses": [{"type": "Hostname", "address": name}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.0"},
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            },
        }));
        let block = cidr.replace(['.', '/'], "-");
        out.push(json!({
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "IPAMBlock",
            "metadata": {"name": block},
            "spec": {
                "cidr": cidr,
                "affinity": format!("host:{name}"),
                "allocations": allocations,
                "unallocated": [2, 3, 4, 5, 6, 7],
                "attributes": [
                    {"handle_id": format!("k8s-pod-network.{i}a"), "secondary": {"namespace": "default", "node": name, "pod": format!("web-{i}-a")}},
                    {"handle_id": format!("k8s-pod-network.{i}b"), "secondary": {"namespace": "default", "node": name, "pod": format!("web-{i}-b")}},
                ],
                "strictAffinity": false,
                "deleted": false,
            },
        }));
        out.push(json!({
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "BlockAffinity",
            "metadata": {"name": format!("{name}-{block}")},
            "spec": {"node": name, "cidr": cidr, "state": "confirmed", "deleted": "false"},
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_become_annotated_kubernetes_nodes_and_the_rest_crds() {
        let yaml = "---\napiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node-1, labels: {route-reflector: \"true\"}}\nspec:\n  bgp:\n    ipv4Address: 198.51.100.11/24\n    ipv6Address: \"2001:db8:100::11/64\"\n    routeReflectorClusterID: 198.51.100.250\n---\napiVersion: projectcalico.org/v3\nkind: BlockAffinity\nmetadata: {name: node-1-v4}\nspec:\n  node: node-1\n  cidr: \"198.18.1.0/26\"\n  state: confirmed\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: tor}\nspec:\n  peerIP: \"198.51.100.1\"\n  asNumber: 65001\n  password: {file: /lab/pw}\n";
        let objs = objects(yaml, &|f| (f == "/lab/pw").then(|| "s3cret\n".into())).unwrap();
        assert_eq!(objs.len(), 4, "{objs:#?}");
        let node = &objs[0];
        assert_eq!(node["kind"], "Node");
        assert_eq!(node["apiVersion"], "v1");
        let a = &node["metadata"]["annotations"];
        assert_eq!(a["projectcalico.org/IPv4Address"], "198.51.100.11/24");
        assert_eq!(a["projectcalico.org/IPv6Address"], "2001:db8:100::11/64");
        assert_eq!(
            a["projectcalico.org/RouteReflectorClusterID"],
            "198.51.100.250"
        );
        assert_eq!(node["metadata"]["labels"]["route-reflector"], "true");
        assert_eq!(objs[1]["apiVersion"], "crd.projectcalico.org/v1");
        assert_eq!(objs[1]["spec"]["deleted"], "false");
        assert_eq!(objs[2]["kind"], "Secret");
        assert_eq!(objs[2]["data"]["password"], "czNjcmV0");
        assert_eq!(objs[3]["kind"], "BGPPeer");
        assert_eq!(
            objs[3]["spec"]["password"]["secretKeyRef"]["name"],
            "tor-bgp-password"
        );
    }

    #[test]
    fn synthetic_blocks_are_distinct_and_inside_the_scale_pool() {
        let objs = synthetic(5000);
        assert_eq!(objs.len(), 1 + 3 * 5000);
        let pool: ipnet::IpNet = SCALE_POOL.parse().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for o in objs.iter().filter(|o| o["kind"] == "IPAMBlock") {
            let net: ipnet::IpNet = o["spec"]["cidr"].as_str().unwrap().parse().unwrap();
            assert!(pool.contains(&net) && net.prefix_len() == 29, "{net}");
            assert!(seen.insert(net), "{net} twice");
        }
    }

    #[test]
    fn an_unreadable_password_file_names_the_peer() {
        let yaml = "---\nkind: BGPPeer\nmetadata: {name: tor}\nspec: {peerIP: 198.51.100.1, asNumber: 65001, password: {file: /nope}}\n";
        let e = objects(yaml, &|_| None).unwrap_err().to_string();
        assert!(e.contains("BGPPeer tor") && e.contains("/nope"), "{e}");
    }

    #[test]
    fn a_password_file_annotation_becomes_a_secret_and_is_removed() {
        let yaml = "---\nkind: BGPPeer\nmetadata: {name: tor, annotations: {tern/hold-time: 9s, tern/password-file: /lab/pw}}\nspec: {peerIP: 198.51.100.1, asNumber: 65001}\n";
        let objs = objects(yaml, &|f| (f == "/lab/pw").then(|| "s3cret\n".to_string())).unwrap();
        let peer = objs.iter().find(|o| o["kind"] == "BGPPeer").unwrap();
        assert_eq!(
            peer["spec"]["password"]["secretKeyRef"]["name"],
            "tor-bgp-password"
        );
        assert_eq!(
            peer["metadata"]["annotations"],
            json!({"tern/hold-time": "9s"})
        );
        assert!(objs.iter().any(|o| o["kind"] == "Secret"));
    }
}
