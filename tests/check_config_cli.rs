//! `tern check-config` as a user runs it: every example in config/examples/ passes and
//! prints its peers and prefixes; a broken cluster file fails with exit code 1 and one
//! line per mistake naming file, line, document, resource and field.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn check(config: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["check-config", "--config"])
        .arg(config)
        // The password source the tor example names, set as on its nodes.
        .env("TERN_TOR_PASSWORD", "example")
        .output()
        .expect("run tern");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples")
}

#[test]
fn every_example_checks_out() {
    let (code, out) = check(&examples().join("tor/tern.yaml"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok: node node-a"), "{out}");
    assert!(
        out.contains("198.51.100.1 65001 node specific yes   BGPPeer tor-rack-1"),
        "{out}"
    );
    assert!(
        out.contains("198.18.4.0/26 block  blackhole   yes        64512:100"),
        "{out}"
    );

    let (code, out) = check(&examples().join("route-reflectors/tern.yaml"));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("route reflector (cluster id 224.0.0.1)"),
        "{out}"
    );
    assert_eq!(out.matches("route reflector client").count(), 2, "{out}");

    for name in ["mesh", "borrowed"] {
        let (code, out) = check(&examples().join(format!("{name}/tern.yaml")));
        assert_eq!(code, 0, "{name}: {out}");
    }
    let (_, out) = check(&examples().join("borrowed/tern.yaml"));
    assert!(out.contains("198.18.4.5/32  borrowed"), "{out}");
}

#[test]
fn a_broken_cluster_lists_every_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(examples().join("tor/cluster.yaml")).unwrap();
    let text = text
        .replace("asNumber: 65001", "asNumber: 0")
        .replace("ipipMode: Never", "ipipMode: Sometimes")
        .replace("cidr: 198.18.4.0/26", "cidr: 198.20.4.0/26");
    std::fs::write(dir.path().join("cluster.yaml"), text).unwrap();
    std::fs::write(dir.path().join("tern.yaml"), "node: node-a\n").unwrap();
    let (code, out) = check(&dir.path().join("tern.yaml"));
    assert_eq!(code, 1, "{out}");
    let errors: Vec<&str> = out.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 3, "{out}");
    assert!(errors[0].contains("cluster.yaml:34: document 3 (BGPPeer tor-rack-1): field `spec.asNumber`: AS 0 is reserved"), "{out}");
    assert!(errors[1].contains("(IPPool default-ipv4): field `spec.ipipMode`: \"Sometimes\": use Never, Always or CrossSubnet"), "{out}");
    assert!(
        errors[2].contains("block 198.20.4.0/26 is outside every IPPool"),
        "{out}"
    );
    assert!(
        out.ends_with("3 errors: the configuration cannot be used\n"),
        "{out}"
    );
}

#[test]
fn a_missing_node_and_a_missing_file_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tern.yaml"),
        "node: node-q\ndatastore: {type: file, path: nowhere.yaml}\n",
    )
    .unwrap();
    let (code, out) = check(&dir.path().join("tern.yaml"));
    assert_eq!(code, 1);
    assert!(
        out.contains("cannot read the cluster file") && out.contains("nowhere.yaml"),
        "{out}"
    );

    let cluster = std::fs::read_to_string(examples().join("mesh/cluster.yaml")).unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), cluster).unwrap();
    std::fs::write(dir.path().join("tern.yaml"), "node: node-q\n").unwrap();
    let (code, out) = check(&dir.path().join("tern.yaml"));
    assert_eq!(code, 1);
    assert!(
        out.contains("error: node node-q: no Node resource named \"node-q\""),
        "{out}"
    );
}

/// Runs check-config with exactly `vars` as the environment (nothing inherited, so a
/// NODENAME or HOSTNAME of the machine running the tests cannot leak in).
fn check_with_env(config: &Path, vars: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["check-config", "--config"])
        .arg(config)
        .env_clear()
        .envs(vars.iter().copied())
        .output()
        .expect("run tern");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The settings block's line for `setting`.
fn setting_line<'a>(out: &'a str, setting: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(setting))
        .unwrap_or_else(|| panic!("no `{setting}` line in:\n{out}"))
}

#[test]
fn calico_node_environment_fills_an_empty_tern_yaml_and_settings_show_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = std::fs::read_to_string(examples().join("mesh/cluster.yaml")).unwrap();
    std::fs::write(dir.path().join("cluster.yaml"), cluster).unwrap();
    std::fs::write(
        dir.path().join("tern.yaml"),
        "# everything comes from calico-node's environment\n",
    )
    .unwrap();
    let (code, out) = check_with_env(
        &dir.path().join("tern.yaml"),
        &[
            ("NODENAME", "node-b"),
            ("CALICO_ROUTER_ID", "198.51.100.99"),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("settings:\n"), "{out}");
    let node = setting_line(&out, "node");
    assert!(
        node.contains("node-b") && node.ends_with("(NODENAME)"),
        "{out}"
    );
    let kind = setting_line(&out, "datastore.type");
    assert!(
        kind.contains(" file ") && kind.ends_with("(default)"),
        "{out}"
    );
    let router_id = setting_line(&out, "router_id");
    assert!(
        router_id.contains("198.51.100.99") && router_id.ends_with("(CALICO_ROUTER_ID)"),
        "{out}"
    );
    assert!(out.contains("ok: node node-b"), "{out}");

    // tern.yaml wins over the environment.
    std::fs::write(dir.path().join("tern.yaml"), "node: node-c\n").unwrap();
    let (code, out) = check_with_env(&dir.path().join("tern.yaml"), &[("NODENAME", "node-b")]);
    assert_eq!(code, 0, "{out}");
    assert!(setting_line(&out, "node").ends_with("(tern.yaml)"), "{out}");
    assert!(out.contains("ok: node node-c"), "{out}");
}

#[test]
fn etcd_settings_from_the_environment_never_show_the_password() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tern.yaml"), "{}\n").unwrap();
    // A port nobody listens on: the read fails, but the settings are shown first.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let (code, out) = check_with_env(
        &dir.path().join("tern.yaml"),
        &[
            ("NODENAME", "node-1"),
            ("DATASTORE_TYPE", "etcdv3"),
            ("ETCD_ENDPOINTS", &endpoint),
            ("ETCD_USERNAME", "calico"),
            ("ETCD_PASSWORD", "hunter2-secret"),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("hunter2"), "the password leaked:\n{out}");
    let line = setting_line(&out, "datastore.password");
    assert!(
        line.contains("(set)") && line.ends_with("(ETCD_PASSWORD)"),
        "{out}"
    );
    assert!(
        setting_line(&out, "datastore.username").ends_with("(ETCD_USERNAME)"),
        "{out}"
    );
    let line = setting_line(&out, "datastore.endpoints");
    assert!(
        line.contains(&endpoint) && line.ends_with("(ETCD_ENDPOINTS)"),
        "{out}"
    );
    assert!(out.contains(&format!("error: etcd at {endpoint}")), "{out}");

    // A wrong variable is an error naming it.
    let (code, out) = check_with_env(
        &dir.path().join("tern.yaml"),
        &[("NODENAME", "node-1"), ("DATASTORE_TYPE", "consul")],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("field `DATASTORE_TYPE`: \"consul\" is not a datastore"),
        "{out}"
    );
}
