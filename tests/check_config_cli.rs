//! `tern check-config` as a user runs it: every example in config/examples/ passes and
//! prints its peers and prefixes; a broken cluster file fails with exit code 1 and one
//! line per mistake naming file, line, document, resource and field.

use std::path::Path;
use std::process::Command;

fn check(config: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["check-config", "--config"])
        .arg(config)
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
