//! The datastore settings (file, etcd with TLS and auth, Kubernetes) and calico-node's
//! environment: each mistake's message, precedence, provenance, and the files checked
//! at load time. The environment is always an injected one, never the test process's.

use super::*;
use crate::intent::RouterIdSetting;

fn error(text: &str) -> String {
    match DaemonConfig::parse(text, "tern.yaml") {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
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
