use super::*;
use crate::datastore::Document;

fn load(text: &str) -> Result<(Cluster, Vec<Warning>), ConfigErrors> {
    Cluster::from_documents(&[Document {
        origin: "cluster.yaml".into(),
        text: text.into(),
    }])
}

fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

pub(crate) fn example(name: &str) -> String {
    let path = format!(
        "{}/examples/{name}/cluster.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const NODE: &str = "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: node-a}\nspec: {bgp: {ipv4Address: 198.51.100.10/24}}\n";
const POOL: &str = "apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: pods}\nspec: {cidr: 198.18.0.0/16}\n";

#[test]
fn every_example_loads_without_errors_or_warnings() {
    for name in ["tor", "mesh", "route-reflectors", "borrowed"] {
        let (c, w) = load(&example(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(w.is_empty(), "{name}: {w:?}");
        assert!(!c.nodes.is_empty());
    }
}

#[test]
fn the_tor_example_is_read_field_by_field() {
    let (c, _) = load(&example("tor")).unwrap();
    assert_eq!(c.bgp.as_number, 64512);
    assert!(!c.bgp.mesh);
    assert_eq!(
        c.bgp.prefix_advertisements,
        vec![(
            "198.18.0.0/16".parse().unwrap(),
            vec![Community::Standard((64512 << 16) | 100)]
        )]
    );
    let p = &c.peers[0];
    assert_eq!(p.name, "tor-rack-1");
    assert_eq!(
        p.target,
        PeerTarget::Address("198.51.100.1".parse().unwrap(), None)
    );
    assert_eq!(p.as_number, Some(65001));
    assert_eq!(p.hold, Some(Duration::from_secs(30)));
    assert_eq!(p.keepalive, Some(Duration::from_secs(10)));
    assert_eq!(p.ttl_security, Some(1));
    assert_eq!(
        p.password,
        Some(PasswordSource::Env("TERN_TOR_PASSWORD".into()))
    );
    let f = &c.filters["only-pods"];
    assert_eq!(f.export_v4.len(), 2);
    assert_eq!(
        f.export_v4[0].cidr,
        Some(("198.18.0.0/16".parse().unwrap(), MatchOperator::In))
    );
    assert_eq!(f.export_v4[1].action, Action::Reject);
    assert_eq!(c.pools[0].block_size, 26);
    assert_eq!(c.affinities[0].state, AffinityState::Confirmed);
}

#[test]
fn borrowed_allocations_name_their_node() {
    let (c, _) = load(&example("borrowed")).unwrap();
    let b = &c.blocks[0];
    assert_eq!(b.affinity.as_deref(), Some("node-a"));
    assert_eq!(b.allocations.len(), 6);
    assert_eq!(
        b.allocations[5],
        ("198.18.4.5".parse().unwrap(), Some("node-b".to_string()))
    );
}

#[test]
fn an_as_of_zero_is_refused_with_file_line_document_and_field() {
    let text = format!("{NODE}---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {{name: default}}\nspec:\n  asNumber: 0\n");
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("cluster.yaml:10: document 2 (BGPConfiguration default): field `spec.asNumber`: AS 0 is reserved"),
        "{}",
        e[0]
    );
}

#[test]
fn a_yaml_type_error_carries_its_own_line() {
    let text = format!("{POOL}---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {{name: p2}}\nspec:\n  cidr: 198.19.0.0/16\n  blockSize: big\n");
    let e = errors(&text);
    assert!(
        e[0].starts_with("cluster.yaml:11: document 2 (IPPool p2): "),
        "{e:?}"
    );
}

#[test]
fn all_errors_are_reported_together() {
    let text = "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: a}\nspec: {peerIP: tor-a}\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: b}\nspec: {peerIP: 198.51.100.1}\n---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: c}\nspec: {peerIP: 198.51.100.2, asNumber: 65001, filters: [nope], nextHopMode: Sometimes}\n";
    let e = errors(text);
    let joined = e.join("\n");
    assert!(
        joined.contains(
            "document 1 (BGPPeer a): field `spec.peerIP`: \"tor-a\" is not a peer address"
        ),
        "{joined}"
    );
    assert!(
        joined.contains("document 2 (BGPPeer b): field `spec.asNumber`: missing"),
        "{joined}"
    );
    assert!(joined.contains("document 3 (BGPPeer c): field `spec.nextHopMode`: \"Sometimes\": use Auto, Self or Keep"), "{joined}");
}

#[test]
fn a_missing_filter_is_named() {
    let text = "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: c}\nspec: {peerIP: 198.51.100.2, asNumber: 65001, filters: [nope]}\n";
    let e = errors(text);
    assert!(
        e[0].contains("field `spec.filters`: BGPFilter \"nope\" does not exist"),
        "{e:?}"
    );
}

#[test]
fn duplicate_names_overlapping_pools_and_stray_blocks_are_refused() {
    let text = format!("{POOL}---\n{POOL}");
    let e = errors(&text);
    assert!(
        e[0].contains("a second IPPool named \"pods\" (the first is document 1 (IPPool pods))"),
        "{e:?}"
    );

    let text = format!("{POOL}---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {{name: inner}}\nspec: {{cidr: 198.18.4.0/24}}\n");
    let e = errors(&text);
    assert!(
        e[0].contains("198.18.4.0/24 overlaps IPPool pods (198.18.0.0/16)"),
        "{e:?}"
    );

    let text = format!("{POOL}---\napiVersion: projectcalico.org/v3\nkind: BlockAffinity\nmetadata: {{name: x}}\nspec: {{node: node-a, cidr: 198.19.0.0/26, state: confirmed}}\n");
    let e = errors(&text);
    assert!(
        e[0].contains("block 198.19.0.0/26 is outside every IPPool"),
        "{e:?}"
    );
}

#[test]
fn pool_checks() {
    let e = errors("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 198.18.0.1/16}\n");
    assert!(
        e[0].contains("has host bits set; did you mean 198.18.0.0/16?"),
        "{e:?}"
    );
    let e = errors("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 198.18.0.0/24, blockSize: 20}\n");
    assert!(
        e[0].contains(
            "field `spec.blockSize`: 20: must be 20-32 and not shorter than the pool's /24"
        ),
        "{e:?}"
    );
    let e = errors("apiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: \"2001:db8::/48\", ipipMode: Always}\n");
    assert!(e[0].contains("IPIP carries IPv4 only"), "{e:?}");
}

#[test]
fn unknown_kinds_and_fields_are_warnings_and_metadata_is_quiet() {
    let text = format!("{NODE}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: b}}\n---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata:\n  name: pods\n  uid: 1234\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\nspec:\n  cidr: 198.18.0.0/16\n  natOutgoing: true\n  nodeSelector: all()\n");
    let (_, w) = load(&text).unwrap();
    let w: Vec<String> = w.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w[0].contains(
            "document 2 (ConfigMap x): field `kind`: ConfigMap: not a kind tern uses; ignored"
        ),
        "{w:?}"
    );
    assert!(
        w[1].contains(
            "document 3 (IPPool pods): field `spec.natOutgoing`: not used by tern; ignored"
        ),
        "{w:?}"
    );
    assert!(w[2].contains("spec.nodeSelector"), "{w:?}");
}

#[test]
fn a_wrong_api_version_is_refused() {
    let e = errors("apiVersion: projectcalico.org/v2\nkind: Node\nmetadata: {name: n}\nspec: {}\n");
    assert!(
        e[0].contains("field `apiVersion`: \"projectcalico.org/v2\" is not a Calico API version"),
        "{e:?}"
    );
}

#[test]
fn calicoctl_lists_are_unpacked() {
    let text = "apiVersion: projectcalico.org/v3\nkind: NodeList\nitems:\n- apiVersion: projectcalico.org/v3\n  kind: Node\n  metadata: {name: node-a}\n  spec: {bgp: {ipv4Address: 198.51.100.10/24}}\n- apiVersion: projectcalico.org/v3\n  kind: Node\n  metadata: {name: node-b}\n  spec: {bgp: {ipv4Address: 198.51.100.11/24, asNumber: 0}}\n";
    let e = errors(text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("document 2 (Node node-b): field `spec.bgp.asNumber`: AS 0"),
        "{e:?}"
    );
}

#[test]
fn a_syntax_error_names_the_line() {
    let e = errors("apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {name: n\n");
    assert!(e[0].starts_with("cluster.yaml:"), "{e:?}");
}

#[test]
fn selectors_and_passwords_are_checked() {
    let e = errors("apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: p}\nspec: {peerSelector: \"rack ==\", password: {file: /x, env: PW_VAR}}\n");
    let joined = e.join("\n");
    assert!(joined.contains("field `spec.peerSelector`"), "{joined}");
    assert!(
        joined.contains("field `spec.password`: give only one of secretKeyRef, file or env"),
        "{joined}"
    );
}

#[test]
fn passwords_resolve_from_file_and_env_and_never_print() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("bgp")).unwrap();
    std::fs::write(dir.path().join("bgp/tor"), "s3cret\n").unwrap();
    let s = PasswordSource::SecretKeyRef {
        name: "bgp".into(),
        key: "tor".into(),
    }
    .resolve(dir.path())
    .unwrap();
    assert_eq!(s.expose(), "s3cret");
    assert_eq!(format!("{s:?}"), "***");
    let e = PasswordSource::Env("TERN_TEST_SURELY_UNSET_VAR".into())
        .resolve(dir.path())
        .unwrap_err();
    assert!(e.contains("TERN_TEST_SURELY_UNSET_VAR is not set"), "{e}");
}

#[test]
fn mesh_timers_are_read_and_checked() {
    let ok = format!("apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {{name: default, annotations: {{tern/node-mesh-hold-time: 6s, tern/node-mesh-keepalive-time: 2s}}}}\nspec: {{asNumber: 64512}}\n---\n{NODE}");
    let (c, w) = load(&ok).unwrap_or_else(|e| panic!("{e}"));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.bgp.mesh_hold, Some(std::time::Duration::from_secs(6)));
    assert_eq!(
        c.bgp.mesh_keepalive,
        Some(std::time::Duration::from_secs(2))
    );
    let bad = "apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default, annotations: {tern/node-mesh-hold-time: 2s, tern/node-mesh-keepalive-time: 5s}}\nspec: {asNumber: 64512}\n";
    let e = errors(bad).join("\n");
    assert!(
        e.contains("(BGPConfiguration default): field `metadata.annotations.tern/node-mesh-hold-time`: 2s: a hold time is 0 or at least 3s"),
        "{e}"
    );
    assert!(
        e.contains("field `metadata.annotations.tern/node-mesh-keepalive-time`: 5s is not shorter than the hold time 2s"),
        "{e}"
    );
}

#[test]
fn peer_families_are_read_and_checked() {
    let ok = format!("apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: tor, annotations: {{tern/families: \"IPv6, IPv4,ipv4\"}}}}\nspec: {{peerIP: 198.51.100.1, asNumber: 65001}}\n---\n{NODE}");
    let (c, w) = load(&ok).unwrap_or_else(|e| panic!("{e}"));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        c.peers[0].families,
        vec![AddressFamily::Ipv4, AddressFamily::Ipv6]
    );
    let bad = "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: tor, annotations: {tern/families: \"IPv4,L2VPN\"}}\nspec: {peerIP: 198.51.100.1, asNumber: 65001}\n";
    let e = errors(bad).join("\n");
    assert!(
        e.contains("(BGPPeer tor): field `metadata.annotations.tern/families`: \"L2VPN\" in \"IPv4,L2VPN\": use IPv4 or IPv6"),
        "{e}"
    );
    // The deprecated spelling is still checked the same way.
    let old = "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: tor}\nspec: {peerIP: 198.51.100.1, asNumber: 65001, families: [IPv4, L2VPN]}\n";
    let e = errors(old).join("\n");
    assert!(
        e.contains("field `spec.families[1]`: \"L2VPN\": use IPv4 or IPv6"),
        "{e}"
    );
}

// --- Extreme values: refused naming the field, never a panic ---------------------------

const BGP_DEFAULT: &str =
    "apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\n";

fn peer_with(extra: &str) -> String {
    format!("apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: tor}}\nspec: {{peerIP: 198.51.100.1, asNumber: 65001, {extra}}}\n---\n{NODE}")
}

#[test]
fn a_duration_past_gos_limit_is_refused_naming_the_field() {
    // Issue 23: this panicked with "overflow when adding durations".
    let e = errors(&peer_with(
        "keepaliveTime: \"10000000000000000000s10000000000000000000s\"",
    ))
    .join("\n");
    assert!(
        e.contains("field `spec.keepaliveTime`: \"10000000000000000000s10000000000000000000s\" is longer than the largest duration accepted (2562047h47m16.854775807s"),
        "{e}"
    );
    for field in ["holdTime", "maxRestartTime"] {
        let e = errors(&peer_with(&format!("{field}: 2562047h2562047h"))).join("\n");
        assert!(
            e.contains(&format!("field `spec.{field}`: \"2562047h2562047h\" is longer than the largest duration accepted")),
            "{e}"
        );
    }
    for field in [
        "nodeMeshHoldTime",
        "nodeMeshKeepaliveTime",
        "nodeMeshMaxRestartTime",
    ] {
        let e = errors(&format!(
            "{BGP_DEFAULT}spec: {{{field}: 9999999999999999999999h}}\n"
        ))
        .join("\n");
        assert!(
            e.contains(&format!("field `spec.{field}`: \"9999999999999999999999h\" is longer than the largest duration accepted")),
            "{e}"
        );
    }
}

#[test]
fn a_sub_second_hold_time_is_refused_not_read_as_zero() {
    // As whole seconds 500ms is 0, which would have turned the hold timer off.
    let e = errors(&peer_with("holdTime: 500ms")).join("\n");
    assert!(
        e.contains("field `spec.holdTime`: 500ms: a hold time is 0 or at least 3s (RFC 4271)"),
        "{e}"
    );
    let e = errors(&format!("{BGP_DEFAULT}spec: {{nodeMeshHoldTime: 2.5s}}\n")).join("\n");
    assert!(
        e.contains("field `spec.nodeMeshHoldTime`: 2.5s: a hold time is 0 or at least 3s"),
        "{e}"
    );
    // 0 still means "no hold timer", and 3 s is the least RFC 4271 allows.
    for hold in ["\"0\"", "0s", "3s"] {
        load(&peer_with(&format!("holdTime: {hold}, keepaliveTime: 1s")))
            .unwrap_or_else(|e| panic!("{hold}: {e}"));
    }
}

#[test]
fn the_mesh_restart_time_is_capped_like_a_peers() {
    // The capability holds 12 bits; this used to be clamped to 4095 s silently.
    let e = errors(&format!(
        "{BGP_DEFAULT}spec: {{nodeMeshMaxRestartTime: 4096s}}\n"
    ))
    .join("\n");
    assert!(
        e.contains("field `spec.nodeMeshMaxRestartTime`: 4096s: the graceful-restart time field holds at most 4095s"),
        "{e}"
    );
    let (c, _) = load(&format!(
        "{BGP_DEFAULT}spec: {{nodeMeshMaxRestartTime: 4095s}}\n---\n{NODE}"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.bgp.mesh_restart_time,
        Some(std::time::Duration::from_secs(4095))
    );
}

#[test]
fn a_per_node_listen_port_of_zero_is_refused() {
    let doc = "apiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: node.node-a}\nspec: {listenPort: 0}\n";
    let e = errors(doc).join("\n");
    assert!(
        e.contains(
            "BGPConfiguration node.node-a): field `spec.listenPort`: 0 is not a port; use 1-65535"
        ),
        "{e}"
    );
    let doc = doc.replace("listenPort: 0", "listenPort: 1790");
    let (c, _) = load(&doc).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.bgp.node_overrides.get("node-a"),
        Some(&(Some(1790), None))
    );
    // Out of the u16 range is the parser's to refuse, also naming the document.
    let e = errors(&doc.replace("1790", "65536")).join("\n");
    assert!(e.contains("node.node-a"), "{e}");
}

#[test]
fn deeply_nested_yaml_is_an_error_not_a_stack_overflow() {
    for (open, close) in [("[", "]"), ("{a: ", "}")] {
        let deep = format!(
            "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: tor}}\nspec: {}1{}\n",
            open.repeat(100_000),
            close.repeat(100_000)
        );
        let e = errors(&deep);
        assert!(!e.is_empty());
    }
}
