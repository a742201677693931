//! `tern.yaml` as people write it: the documented example, the defaults, and each
//! mistake with the message it must produce.

use super::*;

fn parse(text: &str) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
    DaemonConfig::parse(text, "tern.yaml")
}

fn error(text: &str) -> String {
    match parse(text) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_design_example_parses() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tern.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (c, w) = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.node, "node-a");
    assert_eq!(
        c.datastore,
        Datastore::File {
            path: "cluster.yaml".into()
        }
    );
    assert_eq!(c.control_socket, PathBuf::from("/run/tern/tern.sock"));
    assert_eq!(c.metrics, Some(SocketAddr::from(([127, 0, 0, 1], 9477))));
    assert_eq!(
        c.fib,
        FibConfig {
            enabled: true,
            route_protocol: 201,
            table: 254,
            take_over_bird: true,
        }
    );
    let (off, _) =
        parse("node: n1\nfib:\n  take_over_bird: false\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(!off.fib.take_over_bird && off.fib.enabled);
    assert_eq!(c.log, "info");
    assert_eq!(c.log_format, crate::LogFormat::Text);
    let (c, _) = parse("node: n1\nlog_format: json\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.log_format, crate::LogFormat::Json);
}

#[test]
fn without_an_environment_only_node_is_required() {
    let (c, _) = parse("node: node-b\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::File {
            path: "cluster.yaml".into()
        }
    );
    assert_eq!(c.metrics, None, "metrics are off unless configured");
    assert_eq!(c.fib, FibConfig::default());
    assert_eq!(c.control_socket, default_control_socket());
    assert_eq!(
        error(""),
        "tern.yaml: field `node`: missing: the name of this node's Node resource (set `node`, or NODENAME in the environment)"
    );
}

#[test]
fn etcd_datastore() {
    let (c, _) =
        parse("node: n1\ndatastore:\n  type: etcdv3\n  endpoints: [\"http://127.0.0.1:2379\"]\n")
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::Etcdv3 {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            tls: None,
            auth: None,
        }
    );
    assert!(error("node: n1\ndatastore: {type: etcdv3}\n")
        .contains("`datastore.endpoints`: etcdv3 needs at least one endpoint"));
    assert!(
        error("node: n1\ndatastore: {type: etcdv3, endpoints: [127.0.0.1:2379]}\n")
            .contains("not an http:// or https:// URL")
    );
    assert!(error("node: n1\ndatastore: {type: consul}\n")
        .contains("\"consul\" is not a datastore; use file, etcdv3 or kubernetes"));
}

#[test]
fn mistakes_name_the_field_and_what_is_allowed() {
    let cases = [
        (
            "node: Node_A\n",
            "field `node`: \"Node_A\" is not a Kubernetes node name",
        ),
        (
            "node: n1\nfib: {route_protocol: 2}\n",
            "field `fib.route_protocol`: 2 is not usable: 0-4 are the kernel's own",
        ),
        (
            "node: n1\nfib: {route_protocol: 300}\n",
            "use 5-255 (default 201)",
        ),
        (
            "node: n1\nfib: {table: 0}\n",
            "field `fib.table`: 0 is not a routing table",
        ),
        (
            "node: n1\nmetrics: localhost\n",
            "field `metrics`: \"localhost\" is not an address:port",
        ),
        (
            "node: n1\nmetrics: 127.0.0.1:0\n",
            "field `metrics`: \"127.0.0.1:0\": port 0 is not a port; use 1-65535",
        ),
        (
            "node: n1\nlog: loud\n",
            "field `log`: \"loud\" is not a level",
        ),
        (
            "node: n1\nlog_format: xml\n",
            "field `log_format`: \"xml\" is not a log format (text, json)",
        ),
    ];
    for (text, want) in cases {
        let e = error(text);
        assert!(e.contains(want), "{text:?}: got {e:?}");
    }
}

#[test]
fn limits_have_defaults_zero_turns_route_limits_off_and_ranges_are_checked() {
    let (c, _) = parse("node: n1\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.limits.max_prefixes_per_peer, Some(2_000_000));
    let (c, _) = parse(
        "node: n1\nlimits:\n  max_prefixes_per_peer: 0\n  max_routes: 500000\n  control_requests_per_second: 5\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.limits.max_prefixes_per_peer, None);
    assert_eq!(c.limits.max_routes, Some(500_000));
    assert_eq!(c.limits.control_requests_per_second, 5);
    assert_eq!(
        c.limits.control_request_bytes,
        limits::DEFAULT_CONTROL_REQUEST_BYTES
    );
    for (text, want) in [
        (
            "limits: {max_prefixes_per_peer: -1}",
            "field `limits.max_prefixes_per_peer`: -1 is out of range; use 0-4294967295 paths (0: no limit)",
        ),
        (
            "limits: {control_request_bytes: 10}",
            "field `limits.control_request_bytes`: 10 is out of range; use 1024-16777216 bytes",
        ),
        (
            "limits: {control_requests_per_second: 0}",
            "field `limits.control_requests_per_second`: 0 is out of range",
        ),
        (
            "limits: {datastore_document_bytes: 2147483648}",
            "field `limits.datastore_document_bytes`: 2147483648 is out of range; use 4096-1073741824 bytes",
        ),
        ("limits: {max_route: 5}", "unknown field `max_route`"),
    ] {
        let e = error(&format!("node: n1\n{text}\n"));
        assert!(e.contains(want), "{text:?}: got {e:?}");
    }
}

#[test]
fn a_typo_is_an_error_with_its_line() {
    let e = parse("node: n1\nfib:\n  enabled: true\n  route_protcol: 201\n").err();
    let e = e.unwrap_or_else(|| panic!("typo accepted"));
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.reason.contains("route_protcol"), "{e}");
    assert_eq!(e.to_string(), "tern.yaml:4: unknown field `route_protcol`, expected one of enabled, route_protocol, table, take_over_bird");
}

#[test]
fn risky_choices_warn() {
    let (_, w) = parse("node: n1\nmetrics: 0.0.0.0:9477\nfib: {route_protocol: 12}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let w: Vec<String> = w.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("`metrics`: 0.0.0.0:9477 is reachable from other hosts"),
        "{w:?}"
    );
    assert!(w[1].contains("12 is the protocol number of bird"), "{w:?}");
    let (_, w) = parse("node: n1\nfib: {route_protocol: 80}\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        w[0].to_string()
            .contains("80 is the protocol number of Felix"),
        "{w:?}"
    );
    let (_, w) = parse("node: n1\nlog: tern=debug,info\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(w.is_empty());
}

#[test]
fn load_resolves_the_datastore_next_to_the_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("tern.yaml");
    std::fs::write(
        &path,
        "node: n1\ndatastore: {type: file, path: state/cluster.yaml}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (c, _) = DaemonConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::File {
            path: dir.path().join("state/cluster.yaml")
        }
    );
    let e = DaemonConfig::load(&dir.path().join("missing.yaml"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("missing.yaml: cannot read"), "{e}");
}

#[test]
fn bird_sockets_are_off_by_default_and_checked() {
    let (c, _) = parse("node: n1\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((c.bird_socket, c.bird6_socket), (None, None));
    let text = "node: n1\nbird_socket: /var/run/calico/bird.ctl\nbird6_socket: /var/run/calico/bird6.ctl\n";
    if cfg!(windows) {
        assert_eq!(
            error(text),
            "tern.yaml: field `bird_socket`: not supported on Windows"
        );
        return;
    }
    let (c, _) = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.bird_socket,
        Some(PathBuf::from("/var/run/calico/bird.ctl"))
    );
    assert_eq!(
        c.bird6_socket,
        Some(PathBuf::from("/var/run/calico/bird6.ctl"))
    );
    for (text, want) in [
        (
            "bird_socket: bird.ctl",
            "field `bird_socket`: bird.ctl is not an absolute path",
        ),
        (
            "bird_socket: /run/tern/tern.sock",
            "field `bird_socket`: /run/tern/tern.sock is the control socket's path",
        ),
        (
            "bird_socket: /run/b.ctl\nbird6_socket: /run/b.ctl",
            "field `bird6_socket`: /run/b.ctl is also bird_socket",
        ),
        ("bird_sockt: /run/b.ctl", "unknown field `bird_sockt`"),
    ] {
        let e = error(&format!("node: n1\n{text}\n"));
        assert!(e.contains(want), "{text:?}: got {e:?}");
    }
}

#[test]
#[cfg(target_os = "linux")]
fn bfd_is_off_by_default_and_read_when_given() {
    let base = "node: n\ndatastore: {type: file, path: c.yaml}\n";
    let (c, _) = parse(base).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.bfd, BfdConfig::default());
    assert!(!c.bfd.enabled);
    let (c, _) = parse(&format!(
        "{base}bfd: {{enabled: true, interval: 100ms, multiplier: 4}}\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.bfd,
        BfdConfig {
            enabled: true,
            interval: std::time::Duration::from_millis(100),
            multiplier: 4,
            overrides: Vec::new(),
        }
    );
    assert_eq!(
        c.bfd.detection_time(),
        std::time::Duration::from_millis(400)
    );
}

#[test]
fn bfd_mistakes_name_the_field() {
    let base = "node: n\ndatastore: {type: file, path: c.yaml}\n";
    for (bfd, field, words) in [
        ("{interval: 5ms}", "bfd.interval", "outside 10ms..60s"),
        ("{interval: 2m}", "bfd.interval", "outside 10ms..60s"),
        ("{interval: fast}", "bfd.interval", "not a duration"),
        ("{multiplier: 0}", "bfd.multiplier", "outside 1..255"),
        ("{multiplier: 256}", "bfd.multiplier", "outside 1..255"),
        ("{enable: true}", "enable", "unknown field"),
    ] {
        let e = error(&format!("{base}bfd: {bfd}\n"));
        assert!(e.contains(field) && e.contains(words), "{bfd}: {e}");
    }
}

#[test]
#[cfg(target_os = "linux")]
fn bfd_overrides_by_address_or_type_first_match_wins() {
    use crate::intent::PeerKind;
    use std::time::Duration;
    let text = "node: n\ndatastore: {type: file, path: c.yaml}\nbfd:\n  enabled: true\n  interval: 100ms\n  peers:\n    - {address: 198.51.100.7, enabled: false}\n    - {type: global, interval: 300ms, multiplier: 5}\n    - {type: mesh, multiplier: 4}\n";
    let (c, _) = parse(text).unwrap_or_else(|e| panic!("{e}"));
    let ip = |s: &str| {
        s.parse::<std::net::IpAddr>()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let b = &c.bfd;
    // The address override comes first: off, whatever its type.
    assert_eq!(b.for_peer(ip("198.51.100.7"), PeerKind::Global), None);
    assert_eq!(
        b.for_peer(ip("198.51.100.8"), PeerKind::Global),
        Some((Duration::from_millis(300), 5))
    );
    assert_eq!(
        b.for_peer(ip("198.51.100.9"), PeerKind::Mesh),
        Some((Duration::from_millis(100), 4))
    );
    assert_eq!(
        b.for_peer(ip("198.51.100.9"), PeerKind::NodeSpecific),
        Some((Duration::from_millis(100), 3))
    );
    // Off by default, on for one type: the driver runs, only for those.
    let text = "node: n\ndatastore: {type: file, path: c.yaml}\nbfd: {peers: [{type: global, enabled: true}]}\n";
    let (c, _) = parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.bfd.any_enabled());
    assert!(c.bfd.for_peer(ip("198.51.100.9"), PeerKind::Mesh).is_none());
    assert!(c
        .bfd
        .for_peer(ip("198.51.100.9"), PeerKind::Global)
        .is_some());
}

#[test]
fn bfd_override_mistakes_name_the_entry() {
    let base = "node: n\ndatastore: {type: file, path: c.yaml}\n";
    for (peers, field, words) in [
        ("[{type: tor}]", "bfd.peers[0].type", "not a peer type"),
        (
            "[{address: nowhere}]",
            "bfd.peers[0].address",
            "not an IP address",
        ),
        (
            "[{type: mesh}, {address: 198.51.100.1, type: mesh}]",
            "bfd.peers[1]",
            "exactly one of",
        ),
        ("[{enabled: false}]", "bfd.peers[0]", "exactly one of"),
        (
            "[{type: mesh, interval: 1ms}]",
            "bfd.peers[0].interval",
            "outside 10ms..60s",
        ),
        (
            "[{type: mesh, multiplier: 0}]",
            "bfd.peers[0].multiplier",
            "outside 1..255",
        ),
    ] {
        let e = error(&format!("{base}bfd: {{enabled: true, peers: {peers}}}\n"));
        assert!(e.contains(field) && e.contains(words), "{peers}: {e}");
    }
}

#[test]
fn bfd_off_everywhere_and_refused_outside_linux() {
    let base = "node: n\ndatastore: {type: file, path: c.yaml}\n";
    let (c, _) = parse(base).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.bfd, BfdConfig::default());
    assert!(!c.bfd.any_enabled());
    for on in [
        "bfd: {enabled: true}",
        "bfd: {peers: [{type: global, enabled: true}]}",
    ] {
        let r = parse(&format!("{base}{on}\n"));
        if cfg!(target_os = "linux") {
            assert!(r.is_ok_and(|(c, _)| c.bfd.any_enabled()), "{on}");
        } else {
            let e = r.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                e.contains("bfd.enabled") && e.contains("Linux only"),
                "{on}: {e}"
            );
        }
    }
}
