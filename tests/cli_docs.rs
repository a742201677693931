//! `tern man` and `tern completions`, which the Debian package ships: the pages and
//! scripts come from the command line's own definition, so every command appears, and
//! a closed pipe (`tern completions bash | head`) ends them quietly instead of a panic.
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const COMMANDS: &[&str] = &[
    "run",
    "status",
    "peers",
    "routes",
    "fib",
    "diagnose",
    "health",
    "reload",
    "check-config",
    "decode",
    "completions",
    "man",
];

fn stdout(args: &[&str]) -> String {
    let o = Command::new(TERN).args(args).output().expect("run tern");
    assert!(
        o.status.success(),
        "tern {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8")
}

#[test]
fn the_man_page_names_every_command_and_the_files() {
    let page = stdout(&["man"]);
    assert!(page.contains("\n.TH tern 8 "), "{page}");
    for c in COMMANDS {
        assert!(
            page.contains(&format!("tern\\-{}(8)", c.replace('-', "\\-"))),
            "tern-{c}(8) missing:\n{page}"
        );
    }
    for s in [
        "EXIT STATUS",
        "/etc/tern/tern.yaml",
        "RestartPreventExitStatus=2",
        "NODENAME",
    ] {
        assert!(page.contains(s), "{s} missing:\n{page}");
    }

    let dir = tempfile::tempdir().unwrap();
    stdout(&["man", "--dir", dir.path().to_str().unwrap()]);
    for c in COMMANDS {
        let p = dir.path().join(format!("tern-{c}.8"));
        assert!(p.is_file(), "{} not written", p.display());
    }
    let run = std::fs::read_to_string(dir.path().join("tern-run.8")).unwrap();
    assert!(run.contains("\\-\\-config"), "{run}");
    assert!(
        !dir.path().join("tern-help.8").exists(),
        "a page for clap's help"
    );
}

#[test]
fn completions_cover_every_command_and_survive_a_closed_pipe() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&["completions", shell]);
        for c in COMMANDS {
            assert!(script.contains(c), "{shell}: {c} missing");
        }
    }
    let mut child = Command::new(TERN)
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait for tern");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{:?} {err}",
        o.status
    );
}
