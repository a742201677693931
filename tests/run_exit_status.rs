//! `tern run` exits with status 2 when its own file is missing, unreadable or invalid,
//! before it opens anything: the systemd unit's `RestartPreventExitStatus=2` relies on
//! it to fail at once instead of restarting in a loop (tests/deb_package.rs checks the
//! unit side under systemd). Each case names the file in its message.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `tern run --config PATH`; its exit code and stderr. A tern still running after
/// 20 s (it accepted the file) is killed by its PID and the test fails.
fn run(config: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["run", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for tern") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).expect("read stderr");
            }
            return (status.code(), err);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tern run --config {} did not exit", config.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_bad_tern_yaml_exits_with_status_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let (code, err) = run(&missing);
    assert_eq!(code, Some(2), "missing file: {err}");
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(err.contains("cannot read"), "{err}");

    let cases = [
        ("unknown-field.yaml", "nodee: node-a\n", "unknown field `nodee`"),
        ("broken.yaml", "node: [node-a\n", "broken.yaml"),
        (
            "tls.yaml",
            "node: node-a\ndatastore: {type: etcdv3, endpoints: [https://203.0.113.1:2379], tls: {ca: no-such-ca.pem}}\n",
            "datastore.tls.ca",
        ),
        ("bad-node.yaml", "node: Node_1\n", "Node_1"),
    ];
    for (name, text, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (code, err) = run(&path);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
    }

    // A directory where the file should be: unreadable, also 2.
    let (code, err) = run(dir.path());
    assert_eq!(code, Some(2), "a directory: {err}");
}
