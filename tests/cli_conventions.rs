//! The CLI's conventions that need no daemon: `-o` and `--socket` before or after the
//! command, `-o yaml`, `tern check-config -o json|yaml`, and check-config refusing a
//! password source it cannot read (as the daemon refuses that peer).
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn tern(args: &[&str], password: Option<&str>) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    c.args(args).env_remove("TERN_TOR_PASSWORD");
    if let Some(p) = password {
        c.env("TERN_TOR_PASSWORD", p);
    }
    let out = c.output().expect("run tern");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tor() -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/tor/tern.yaml");
    p.to_str().unwrap().to_string()
}

#[test]
fn check_config_json_and_yaml_carry_the_same_document() {
    let config = tor();
    let (code, out, err) = tern(&["check-config", "-c", &config, "-o", "json"], Some("x"));
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["ok"], true);
    assert_eq!(v["intent"]["node"], "node-a");
    let peer = &v["intent"]["peers"][0];
    assert_eq!(peer["address"], "198.51.100.1");
    assert_eq!(peer["password"], true, "{peer}");
    assert!(
        out.find("\"x\"").is_none(),
        "the password's value must not show: {out}"
    );
    assert_eq!(v["intent"]["originated"][0]["prefix"], "198.18.4.0/26");

    // -o before the command, as YAML: the same document.
    let (code, out, err) = tern(&["-o", "yaml", "check-config", "-c", &config], Some("x"));
    assert_eq!(code, 0, "{out}{err}");
    let y: serde_json::Value = serde_saphyr::from_str(&out).expect("YAML");
    assert_eq!(y, v, "{out}");
}

#[test]
fn check_config_refuses_an_unreadable_password_source() {
    let config = tor();
    let (code, out, _) = tern(&["check-config", "-c", &config], None);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("error: peer 198.51.100.1 (BGPPeer tor-rack-1): the BGP password variable TERN_TOR_PASSWORD is not set"),
        "{out}"
    );
    let (code, out, _) = tern(&["check-config", "-c", &config, "-o", "json"], None);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["ok"], false);
    assert!(
        v["errors"][0]
            .as_str()
            .unwrap()
            .contains("TERN_TOR_PASSWORD"),
        "{v}"
    );
}

#[test]
fn socket_and_output_go_before_or_after_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let sock = sock.to_str().unwrap();
    for args in [
        vec!["--socket", sock, "-o", "json", "status"],
        vec!["status", "--socket", sock, "-o", "yaml"],
        vec!["-o", "wide", "routes", "--all", "--socket", sock],
    ] {
        let (code, _, err) = tern(&args, None);
        // Accepted, then nobody listens there: "not running" (3), naming the socket.
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(err.contains(sock), "{args:?}: {err}");
    }
    let (code, _, err) = tern(&["routes", "--family", "ipv5"], None);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = tern(&["routes", "--all", "--count"], None);
    assert_eq!(code, 2, "{err}");
}
