//! `tern.yaml` as people write it: the documented example, the defaults, and each
//! mistake with the message it must produce.

use super::*;
use crate::intent::RouterIdSetting;

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
            table: 254
        }
    );
    assert_eq!(c.log, "info");
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
    assert_eq!(e.to_string(), "tern.yaml:4: unknown field `route_protcol`, expected one of enabled, route_protocol, table");
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

// --- datastore settings and calico-node's environment ----------------------------------

fn parse_env(text: &str, vars: &[(&str, &str)]) -> Result<DaemonConfig, ConfigError> {
    DaemonConfig::parse_with(
        text,
        "tern.yaml",
        &env::MapEnvironment::new(vars.iter().copied()),
    )
    .map(|(c, _)| c)
}

fn env_error(text: &str, vars: &[(&str, &str)]) -> String {
    match parse_env(text, vars) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn kubernetes_datastore_from_the_file() {
    let c = parse_env(
        "node: n1\ndatastore: {type: kubernetes, kubeconfig: /etc/tern/kubeconfig, namespace: calico-system}\n",
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::Kubernetes {
            kubeconfig: Some("/etc/tern/kubeconfig".into()),
            namespace: Some("calico-system".into()),
        }
    );
    let c = parse_env("node: n1\ndatastore: {type: kubernetes}\n", &[])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::Kubernetes {
            kubeconfig: None,
            namespace: None
        }
    );
    assert!(env_error(
        "node: n1\ndatastore: {type: kubernetes, endpoints: [http://a:1]}\n",
        &[]
    )
    .contains("field `datastore.endpoints`: only for type etcdv3, not kubernetes"));
    assert!(env_error(
        "node: n1\ndatastore: {type: kubernetes, namespace: Calico_System}\n",
        &[]
    )
    .contains("field `datastore.namespace`: \"Calico_System\" is not a namespace name"));
    assert!(
        env_error("node: n1\ndatastore: {type: file, kubeconfig: k}\n", &[])
            .contains("field `datastore.kubeconfig`: only for type kubernetes, not file")
    );
}

#[test]
fn etcd_tls_and_auth_from_the_file() {
    let c = parse_env(
        "node: n1\ndatastore:\n  type: etcdv3\n  endpoints: [https://203.0.113.1:2379, https://203.0.113.2:2379]\n  tls: {ca: ca.pem, cert: cert.pem, key: key.pem}\n  username: tern\n  password_file: pw\n",
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::Etcdv3 {
            endpoints: vec![
                "https://203.0.113.1:2379".into(),
                "https://203.0.113.2:2379".into()
            ],
            tls: Some(EtcdTls {
                ca: "ca.pem".into(),
                cert: Some("cert.pem".into()),
                key: Some("key.pem".into()),
            }),
            auth: Some(EtcdAuth {
                username: "tern".into(),
                password: EtcdPassword::File("pw".into()),
            }),
        }
    );
    // A CA alone is enough for server-authenticated TLS.
    let c = parse_env(
        "node: n1\ndatastore: {type: etcdv3, endpoints: [https://203.0.113.1:2379], tls: {ca: ca.pem}}\n",
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        c.datastore,
        Datastore::Etcdv3 {
            tls: Some(EtcdTls {
                cert: None,
                key: None,
                ..
            }),
            ..
        }
    ));
}

#[test]
fn etcd_tls_mistakes_name_the_field() {
    let etcd = |rest: &str| format!("node: n1\ndatastore:\n  type: etcdv3\n{rest}");
    let cases = [
        (
            etcd("  endpoints: [https://203.0.113.1:2379]\n"),
            "field `datastore.tls`: datastore.endpoints[0] is https://203.0.113.1:2379 but datastore.tls.ca is not set",
        ),
        (
            etcd("  endpoints: [http://203.0.113.1:2379]\n  tls: {ca: ca.pem}\n"),
            "field `datastore.tls`: TLS files are set but datastore.endpoints[0] is http://203.0.113.1:2379",
        ),
        (
            etcd("  endpoints: [https://203.0.113.1:2379]\n  tls: {ca: ca.pem, cert: c.pem}\n"),
            "field `datastore.tls.cert`: a client certificate needs its key",
        ),
        (
            etcd("  endpoints: [https://203.0.113.1:2379]\n  tls: {ca: ca.pem, key: k.pem}\n"),
            "field `datastore.tls.key`: a client key needs its certificate",
        ),
        (
            etcd("  endpoints: [https://203.0.113.1:2379]\n  tls: {cert: c.pem, key: k.pem}\n"),
            "datastore.tls.ca is not set",
        ),
        (
            etcd("  endpoints: [http://203.0.113.1:2379, https://203.0.113.2:2379]\n"),
            "field `datastore.endpoints`: mixes http:// and https://",
        ),
        (
            etcd("  endpoints: [http://203.0.113.1:2379]\n  username: tern\n"),
            "field `datastore.username`: a user needs a password",
        ),
        (
            etcd("  endpoints: [http://203.0.113.1:2379]\n  password_file: pw\n"),
            "field `datastore.password_file`: a password needs a user",
        ),
        (
            etcd("  endpoints: [http://203.0.113.1:2379]\n  tls: {ca: ca.pem, crt: x}\n"),
            "unknown field `crt`",
        ),
    ];
    for (text, want) in cases {
        let e = env_error(&text, &[]);
        assert!(e.contains(want), "{text:?}: got {e:?}");
    }
}

/// A calico-node DaemonSet's `env:` block for an etcd cluster with TLS and a user.
const CALICO_ETCD_ENV: &[(&str, &str)] = &[
    ("NODENAME", "node-1"),
    ("DATASTORE_TYPE", "etcdv3"),
    (
        "ETCD_ENDPOINTS",
        "https://203.0.113.1:2379, https://203.0.113.2:2379",
    ),
    ("ETCD_CA_CERT_FILE", "/calico-secrets/etcd-ca"),
    ("ETCD_CERT_FILE", "/calico-secrets/etcd-cert"),
    ("ETCD_KEY_FILE", "/calico-secrets/etcd-key"),
    ("ETCD_USERNAME", "calico"),
    ("ETCD_PASSWORD", "hunter2"),
    ("CALICO_ROUTER_ID", "hash"),
    // Set by calico-node manifests, meaningless to tern: ignored.
    ("CALICO_NETWORKING_BACKEND", "bird"),
    ("IP", "autodetect"),
];

#[test]
fn calico_node_environment_supplies_everything() {
    for text in ["", "{}\n", "# only a comment\n", "---\n# nothing\n"] {
        let c = parse_env(text, CALICO_ETCD_ENV).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(c.node, "node-1");
        assert_eq!(
            c.datastore,
            Datastore::Etcdv3 {
                endpoints: vec![
                    "https://203.0.113.1:2379".into(),
                    "https://203.0.113.2:2379".into()
                ],
                tls: Some(EtcdTls {
                    ca: "/calico-secrets/etcd-ca".into(),
                    cert: Some("/calico-secrets/etcd-cert".into()),
                    key: Some("/calico-secrets/etcd-key".into()),
                }),
                auth: Some(EtcdAuth {
                    username: "calico".into(),
                    password: EtcdPassword::Value(Password::new("hunter2")),
                }),
            }
        );
        assert_eq!(c.router_id, Some(RouterIdSetting::Hash));
        assert_eq!(c.source("node"), Some(Source::Env("NODENAME")));
        assert_eq!(
            c.source("datastore.type"),
            Some(Source::Env("DATASTORE_TYPE"))
        );
        assert_eq!(
            c.source("datastore.tls.key"),
            Some(Source::Env("ETCD_KEY_FILE"))
        );
        assert_eq!(
            c.source("datastore.password"),
            Some(Source::Env("ETCD_PASSWORD"))
        );
        assert_eq!(c.source("router_id"), Some(Source::Env("CALICO_ROUTER_ID")));
    }
    // The password never shows in Debug.
    let c = parse_env("", CALICO_ETCD_ENV).unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("***"), "{debug}");
}

#[test]
fn tern_yaml_wins_over_the_environment() {
    let c = parse_env(
        "node: node-9\nrouter_id: 198.51.100.7\ndatastore:\n  endpoints: [http://127.0.0.1:2379]\n  tls: null\n",
        &[
            ("NODENAME", "node-1"),
            ("DATASTORE_TYPE", "etcdv3"),
            ("ETCD_ENDPOINTS", "http://203.0.113.1:2379"),
            ("CALICO_ROUTER_ID", "hash"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.node, "node-9");
    assert_eq!(c.source("node"), Some(Source::File));
    assert_eq!(
        c.source("datastore.type"),
        Some(Source::Env("DATASTORE_TYPE"))
    );
    assert_eq!(c.source("datastore.endpoints"), Some(Source::File));
    assert!(
        matches!(&c.datastore, Datastore::Etcdv3 { endpoints, .. } if endpoints == &["http://127.0.0.1:2379"])
    );
    assert_eq!(
        c.router_id,
        Some(RouterIdSetting::Address(
            "198.51.100.7".parse().unwrap_or_else(|e| panic!("{e}"))
        ))
    );
    // tern.yaml's type wins too: the etcd variables are then not consulted.
    let c = parse_env("node: n1\ndatastore: {type: file}\n", CALICO_ETCD_ENV)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::File {
            path: "cluster.yaml".into()
        }
    );
    assert_eq!(c.source("datastore.type"), Some(Source::File));
    assert_eq!(c.source("datastore.path"), Some(Source::Default));
}

#[test]
fn kubernetes_from_the_environment_and_empty_variables_are_unset() {
    let c = parse_env(
        "",
        &[
            ("NODENAME", "node-2"),
            ("DATASTORE_TYPE", "kubernetes"),
            ("KUBECONFIG", "/host/etc/cni/net.d/calico-kubeconfig"),
            ("NAMESPACE", "calico-system"),
            // Calico's etcd manifests fill these from ConfigMap keys that are often "".
            ("ETCD_CA_CERT_FILE", ""),
            ("CALICO_ROUTER_ID", ""),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.datastore,
        Datastore::Kubernetes {
            kubeconfig: Some("/host/etc/cni/net.d/calico-kubeconfig".into()),
            namespace: Some("calico-system".into()),
        }
    );
    assert_eq!(c.router_id, None);
    assert_eq!(
        c.source("datastore.namespace"),
        Some(Source::Env("NAMESPACE"))
    );
}

#[test]
fn node_name_falls_back_like_calico_node() {
    let mut env = env::MapEnvironment::new([("HOSTNAME", " Worker-7.Example ")]);
    env.host_name = Some("ignored".into());
    let (c, _) = DaemonConfig::parse_with("", "tern.yaml", &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.node, "worker-7.example");
    assert_eq!(c.source("node"), Some(Source::Env("HOSTNAME")));

    let mut env = env::MapEnvironment::new([]);
    env.host_name = Some("Rack3-Node4\n".into());
    let (c, _) = DaemonConfig::parse_with("", "tern.yaml", &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.node, "rack3-node4");
    assert_eq!(c.source("node"), Some(Source::HostName));

    // NODENAME is taken as given (trimmed, not lower-cased), so a bad one is an error
    // naming the variable.
    assert!(env_error("", &[("NODENAME", "Node_1")])
        .contains("field `node (from NODENAME)`: \"Node_1\" is not a Kubernetes node name"));
}

#[test]
fn environment_mistakes_name_the_variable() {
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("NODENAME", "n1"), ("DATASTORE_TYPE", "consul")],
            "field `DATASTORE_TYPE`: \"consul\" is not a datastore",
        ),
        (
            &[("NODENAME", "n1"), ("DATASTORE_TYPE", "etcdv3")],
            "field `datastore.endpoints`: etcdv3 needs at least one endpoint",
        ),
        (
            &[("NODENAME", "n1"), ("DATASTORE_TYPE", "etcdv3"), ("ETCD_ENDPOINTS", "203.0.113.1:2379")],
            "field `datastore.endpoints (from ETCD_ENDPOINTS)`: \"203.0.113.1:2379\" is not an http:// or https:// URL",
        ),
        (
            &[("NODENAME", "n1"), ("CALICO_ROUTER_ID", "auto")],
            "field `router_id (from CALICO_ROUTER_ID)`: \"auto\" is not an IPv4 address or `hash`",
        ),
        (
            &[
                ("NODENAME", "n1"),
                ("DATASTORE_TYPE", "etcdv3"),
                ("ETCD_ENDPOINTS", "http://203.0.113.1:2379"),
                ("ETCD_CERT_FILE", "/c"),
            ],
            "field `datastore.tls (from ETCD_CERT_FILE)`: TLS files are set but",
        ),
    ];
    for (vars, want) in cases {
        let e = env_error("", vars);
        assert!(e.contains(want), "{vars:?}: got {e:?}");
    }
    assert!(error("router_id: 2001:db8::1\nnode: n1\n")
        .contains("field `router_id`: \"2001:db8::1\" is not an IPv4 address or `hash`"));
}

#[test]
fn load_resolves_tls_files_next_to_the_file_and_checks_them() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    std::fs::create_dir(dir.path().join("etcd")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("etcd/ca.pem"), pem).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("etcd/password"), "pw\n").unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("tern.yaml");
    let text = "node: n1\ndatastore:\n  type: etcdv3\n  endpoints: [https://203.0.113.1:2379]\n  tls: {ca: etcd/ca.pem}\n  username: tern\n  password_file: etcd/password\n";
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let (c, _) =
        DaemonConfig::load_with(&path, &env::NoEnvironment).unwrap_or_else(|e| panic!("{e}"));
    let Datastore::Etcdv3 {
        tls: Some(tls),
        auth: Some(auth),
        ..
    } = &c.datastore
    else {
        panic!("{c:?}");
    };
    assert_eq!(tls.ca, dir.path().join("etcd/ca.pem"));
    assert_eq!(
        auth.password,
        EtcdPassword::File(dir.path().join("etcd/password"))
    );
    assert_eq!(
        auth.password.read().map(|p| p.expose().to_string()),
        Ok("pw".to_string())
    );

    // A missing file is named, with the setting, at load time.
    std::fs::write(&path, text.replace("etcd/ca.pem", "etcd/missing.pem"))
        .unwrap_or_else(|e| panic!("{e}"));
    let e = DaemonConfig::load_with(&path, &env::NoEnvironment)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("field `datastore.tls.ca`: cannot read the CA certificate")
            && e.contains("etcd/missing.pem"),
        "{e}"
    );
    // Not PEM.
    std::fs::write(&path, text.replace("etcd/ca.pem", "etcd/password"))
        .unwrap_or_else(|e| panic!("{e}"));
    let e = DaemonConfig::load_with(&path, &env::NoEnvironment)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("is not PEM"), "{e}");
    // Paths from the environment stay as given (relative to the working directory).
    std::fs::write(&path, "{}\n").unwrap_or_else(|e| panic!("{e}"));
    let env = env::MapEnvironment::new([
        ("NODENAME", "n1"),
        ("DATASTORE_TYPE", "kubernetes"),
        ("KUBECONFIG", "no/such/kubeconfig"),
    ]);
    let e = DaemonConfig::load_with(&path, &env)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("field `datastore.kubeconfig (from KUBECONFIG)`: cannot read the kubeconfig no/such/kubeconfig"),
        "{e}"
    );
}
