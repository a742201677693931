//! `tern check-config` accepts `log_format` (text, json) and names the field when its
//! value is wrong; `tern run` prefixes its lines with their syslog priority when its
//! stderr is the stream `JOURNAL_STREAM` names, and only then.
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

/// `tern run` with a broken tern.yaml logs the error and stops before opening anything;
/// with stderr a file and `JOURNAL_STREAM` naming that file (as systemd names its
/// journal stream), the line starts with `<3>`; naming another stream, it does not.
#[cfg(target_os = "linux")]
#[test]
fn under_journald_lines_carry_their_priority() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tern.yaml");
    std::fs::write(&config, "node: n1\nlog: loud\n").unwrap();
    let run = |journal: &dyn Fn(&std::fs::Metadata) -> String| {
        let path = dir.path().join("stderr");
        let file = std::fs::File::create(&path).unwrap();
        let stream = journal(&file.metadata().unwrap());
        let status = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["run", "--config"])
            .arg(&config)
            .env("JOURNAL_STREAM", stream)
            .env_remove("RUST_LOG")
            .stderr(file)
            .status()
            .expect("run tern");
        assert_eq!(status.code(), Some(2));
        std::fs::read_to_string(&path).unwrap()
    };
    let ours = run(&|m| format!("{}:{}", m.dev(), m.ino()));
    let first = ours.lines().next().unwrap_or_default();
    assert!(first.starts_with("<3>ERROR"), "{ours}");
    assert!(first.contains("log"), "{ours}");
    let other = run(&|m| format!("{}:{}", m.dev(), m.ino() + 1));
    assert!(other.starts_with("ERROR"), "{other}");
}
