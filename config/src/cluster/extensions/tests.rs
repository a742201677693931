//! tern's annotations: read, preferred over the deprecated spec spelling (which warns),
//! and checked with errors naming the resource and the annotation.

use std::time::Duration;

use crate::cluster::{AddressFamily, Cluster, ConfigErrors, PasswordSource};
use crate::datastore::Document;
use crate::error::Warning;

const NODE: &str = "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node-a}\nspec: {bgp: {ipv4Address: 198.51.100.10/24}}\n";

fn load(text: &str) -> Result<(Cluster, Vec<String>), ConfigErrors> {
    Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: format!("{text}---\n{NODE}"),
    }])
    .map(|(c, w)| (c, w.iter().map(Warning::to_string).collect()))
}

fn ok(text: &str) -> (Cluster, Vec<String>) {
    load(text).unwrap_or_else(|e| panic!("{e}"))
}

fn errors(text: &str) -> String {
    match load(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// A BGPPeer `tor` with these annotation lines and extra spec lines.
fn peer(annotations: &[&str], spec: &[&str]) -> String {
    let mut t =
        "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata:\n  name: tor\n".to_string();
    if !annotations.is_empty() {
        t.push_str("  annotations:\n");
        for a in annotations {
            t.push_str(&format!("    {a}\n"));
        }
    }
    t.push_str("spec:\n  peerIP: 198.51.100.1\n  asNumber: 65001\n");
    for s in spec {
        t.push_str(&format!("  {s}\n"));
    }
    t
}

/// The default BGPConfiguration with these annotation lines and extra spec lines.
fn bgp_default(annotations: &[&str], spec: &[&str]) -> String {
    let mut t =
        "apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata:\n  name: default\n"
            .to_string();
    if !annotations.is_empty() {
        t.push_str("  annotations:\n");
        for a in annotations {
            t.push_str(&format!("    {a}\n"));
        }
    }
    t.push_str("spec:\n  asNumber: 64512\n");
    for s in spec {
        t.push_str(&format!("  {s}\n"));
    }
    t
}

#[test]
fn peer_annotations_are_read_without_warnings() {
    let (c, w) = ok(&peer(
        &[
            "tern/hold-time: 9s",
            "tern/families: IPv4,IPv6",
            "tern/password-file: /etc/tern/tor-password",
            "kubectl.kubernetes.io/last-applied-configuration: '{}'",
        ],
        &["keepaliveTime: 3s"],
    ));
    assert!(w.is_empty(), "{w:?}");
    let p = &c.peers[0];
    assert_eq!(p.hold, Some(Duration::from_secs(9)));
    assert_eq!(p.keepalive, Some(Duration::from_secs(3)));
    assert_eq!(p.families, vec![AddressFamily::Ipv4, AddressFamily::Ipv6]);
    assert_eq!(
        p.password,
        Some(PasswordSource::File("/etc/tern/tor-password".into()))
    );

    let (c, w) = ok(&peer(&["tern/password-env: TOR_PW"], &[]));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        c.peers[0].password,
        Some(PasswordSource::Env("TOR_PW".into()))
    );
}

#[test]
fn mesh_annotations_are_read_without_warnings() {
    let (c, w) = ok(&bgp_default(
        &[
            "tern/node-mesh-hold-time: 30s",
            "tern/node-mesh-keepalive-time: 10s",
            "tern/node-mesh-password-env: MESH_PW",
        ],
        &[],
    ));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.bgp.mesh_hold, Some(Duration::from_secs(30)));
    assert_eq!(c.bgp.mesh_keepalive, Some(Duration::from_secs(10)));
    assert_eq!(
        c.bgp.mesh_password,
        Some(PasswordSource::Env("MESH_PW".into()))
    );
}

#[test]
fn the_old_spelling_still_works_with_a_deprecation_warning() {
    let (c, w) = ok(&peer(
        &[],
        &[
            "holdTime: 12s",
            "families: [IPv6]",
            "password: {file: /run/pw}",
        ],
    ));
    let p = &c.peers[0];
    assert_eq!(p.hold, Some(Duration::from_secs(12)));
    assert_eq!(p.families, vec![AddressFamily::Ipv6]);
    assert_eq!(p.password, Some(PasswordSource::File("/run/pw".into())));
    assert_eq!(w.len(), 3, "{w:?}");
    for (field, annotation) in [
        ("spec.holdTime", "tern/hold-time"),
        ("spec.families", "tern/families"),
        ("spec.password.file", "tern/password-file"),
    ] {
        assert!(
            w.iter().any(|w| w.contains("(BGPPeer tor)")
                && w.contains(&format!("field `{field}`: deprecated"))
                && w.contains(&format!("use the annotation `{annotation}` instead"))
                && !w.contains("wins")),
            "{field}: {w:?}"
        );
    }

    let (c, w) = ok(&bgp_default(
        &[],
        &[
            "nodeMeshHoldTime: 6s",
            "nodeMeshKeepaliveTime: 2s",
            "nodeMeshPassword: {env: MESH_PW}",
        ],
    ));
    assert_eq!(c.bgp.mesh_hold, Some(Duration::from_secs(6)));
    assert_eq!(c.bgp.mesh_keepalive, Some(Duration::from_secs(2)));
    assert_eq!(
        c.bgp.mesh_password,
        Some(PasswordSource::Env("MESH_PW".into()))
    );
    assert_eq!(w.len(), 3, "{w:?}");
    for (field, annotation) in [
        ("spec.nodeMeshHoldTime", "tern/node-mesh-hold-time"),
        (
            "spec.nodeMeshKeepaliveTime",
            "tern/node-mesh-keepalive-time",
        ),
        ("spec.nodeMeshPassword.env", "tern/node-mesh-password-env"),
    ] {
        assert!(
            w.iter().any(|w| w.contains("(BGPConfiguration default)")
                && w.contains(&format!("field `{field}`: deprecated"))
                && w.contains(&format!("`{annotation}`"))),
            "{field}: {w:?}"
        );
    }
}

#[test]
fn when_both_are_set_the_annotation_wins_and_the_warning_says_so() {
    let (c, w) = ok(&peer(
        &[
            "tern/hold-time: 9s",
            "tern/families: IPv4",
            "tern/password-env: NEW_PW",
        ],
        &[
            "holdTime: 500s",
            "families: [IPv6]",
            "password: {file: /old}",
        ],
    ));
    let p = &c.peers[0];
    assert_eq!(p.hold, Some(Duration::from_secs(9)));
    assert_eq!(p.families, vec![AddressFamily::Ipv4]);
    assert_eq!(p.password, Some(PasswordSource::Env("NEW_PW".into())));
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w.iter()
            .any(|w| w.contains("field `spec.holdTime`: deprecated")
                && w.contains("the annotation `tern/hold-time` is also set and wins")),
        "{w:?}"
    );
    assert!(
        w.iter().any(|w| w.contains("field `spec.password.file`")
            && w.contains("`tern/password-file`")
            && w.contains("also set and wins")),
        "{w:?}"
    );

    // The old spelling is not validated once the annotation replaces it (a bad old
    // value would otherwise block the fix), the annotation is.
    let (c, _) = ok(&bgp_default(
        &["tern/node-mesh-hold-time: 15s"],
        &["nodeMeshHoldTime: 1s"],
    ));
    assert_eq!(c.bgp.mesh_hold, Some(Duration::from_secs(15)));
}

#[test]
fn a_bad_annotation_value_is_an_error_naming_the_resource_and_the_annotation() {
    let e = errors(&peer(&["tern/hold-time: soon"], &[]));
    assert!(
        e.contains("(BGPPeer tor): field `metadata.annotations.tern/hold-time`: \"soon\" is not a duration"),
        "{e}"
    );
    // The line is the annotation's own (line 6 of the file).
    assert!(e.starts_with("cluster.yaml:6: "), "{e}");

    let e = errors(&peer(&["tern/hold-time: 2s"], &[]));
    assert!(
        e.contains(
            "field `metadata.annotations.tern/hold-time`: 2s: a hold time is 0 or at least 3s"
        ),
        "{e}"
    );
    let e = errors(&peer(&["tern/hold-time: 9s"], &["keepaliveTime: 9s"]));
    assert!(
        e.contains("field `spec.keepaliveTime`: 9s is not shorter than the hold time 9s"),
        "{e}"
    );
    let e = errors(&peer(&["tern/families: \"\""], &[]));
    assert!(
        e.contains("field `metadata.annotations.tern/families`: empty"),
        "{e}"
    );
    let e = errors(&peer(
        &["tern/password-file: /a", "tern/password-env: B"],
        &[],
    ));
    assert!(
        e.contains("field `metadata.annotations.tern/password-file`: give only one of the annotations tern/password-file and tern/password-env"),
        "{e}"
    );
    let e = errors(&peer(&["tern/password-env: \" \""], &[]));
    assert!(
        e.contains("field `metadata.annotations.tern/password-env`: empty"),
        "{e}"
    );
    let e = errors(&bgp_default(
        &["tern/node-mesh-keepalive-time: 1fortnight"],
        &[],
    ));
    assert!(
        e.contains("(BGPConfiguration default): field `metadata.annotations.tern/node-mesh-keepalive-time`: \"1fortnight\" is not a duration"),
        "{e}"
    );
}

#[test]
fn a_password_annotation_stands_in_for_calicos_secret() {
    // Calico reads the secret; tern, on a host without Kubernetes, the file.
    let (c, w) = ok(&peer(
        &["tern/password-file: /etc/tern/pw"],
        &["password: {secretKeyRef: {name: bgp, key: tor}}"],
    ));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        c.peers[0].password,
        Some(PasswordSource::File("/etc/tern/pw".into()))
    );
    // Without the annotation the secret is used as before.
    let (c, _) = ok(&peer(
        &[],
        &["password: {secretKeyRef: {name: bgp, key: tor}}"],
    ));
    assert_eq!(
        c.peers[0].password,
        Some(PasswordSource::SecretKeyRef {
            name: "bgp".into(),
            key: "tor".into()
        })
    );
}

#[test]
fn unknown_or_misplaced_tern_annotations_are_warned_about() {
    // `y` and `90` parse as a bool and a number: read as text, not an error.
    let (c, w) = ok(&peer(
        &[
            "tern/holdtime: 9s",
            "other.example/x: y",
            "other.example/n: 90",
        ],
        &[],
    ));
    assert_eq!(c.peers[0].hold, None);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("(BGPPeer tor): field `metadata.annotations.tern/holdtime`: not a tern annotation (tern reads tern/hold-time, tern/families, tern/password-file, tern/password-env here); ignored"),
        "{w:?}"
    );
    let pool = "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: pods\n  annotations: {tern/hold-time: 9s}\nspec: {cidr: 198.18.0.0/16}\n";
    let (_, w) = ok(pool);
    assert!(
        w.iter().any(|w| w.contains("(IPPool pods): field `metadata.annotations.tern/hold-time`: not a tern annotation (tern reads no annotation on a IPPool)")),
        "{w:?}"
    );
    let per_node = "apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata:\n  name: node.node-a\n  annotations: {tern/node-mesh-hold-time: 9s}\nspec: {listenPort: 1790}\n";
    let (c, w) = ok(per_node);
    assert_eq!(c.bgp.mesh_hold, None);
    assert!(
        w.iter().any(|w| w.contains("field `metadata.annotations.tern/node-mesh-hold-time`: the mesh settings apply from the `default` BGPConfiguration only")),
        "{w:?}"
    );
}

#[test]
fn annotations_are_read_from_list_items_and_json() {
    let list = "apiVersion: projectcalico.org/v3\nkind: BGPPeerList\nitems:\n- apiVersion: projectcalico.org/v3\n  kind: BGPPeer\n  metadata: {name: tor, annotations: {tern/hold-time: 21s}}\n  spec: {peerIP: 198.51.100.1, asNumber: 65001}\n";
    let (c, w) = ok(list);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.peers[0].hold, Some(Duration::from_secs(21)));
    let json = r#"{"apiVersion":"projectcalico.org/v3","kind":"BGPPeer","metadata":{"name":"tor","annotations":{"tern/families":"IPv6"}},"spec":{"peerIP":"198.51.100.1","asNumber":65001}}
"#;
    let (c, _) = ok(json);
    assert_eq!(c.peers[0].families, vec![AddressFamily::Ipv6]);
}
