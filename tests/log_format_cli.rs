//! `tern check-config` accepts `log_format` (text, json) and names the field when its
//! value is wrong.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn check_with(extra: &str) -> (i32, String) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/mesh");
    let dir = tempfile::tempdir().unwrap();
    let cluster = examples.join("cluster.yaml");
    let text = format!(
        "node: node-a\ndatastore:\n  type: file\n  path: {}\n{extra}",
        cluster.display()
    );
    let config = dir.path().join("tern.yaml");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .expect("run tern");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn check_config_accepts_log_format() {
    for format in ["text", "json"] {
        let (code, out) = check_with(&format!("log_format: {format}\n"));
        assert_eq!(code, 0, "{format}: {out}");
        assert!(out.contains("ok: node node-a"), "{format}: {out}");
    }
    let (code, out) = check_with("log_format: xml\n");
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("log_format") && out.contains("\"xml\" is not a log format"),
        "{out}"
    );
}
