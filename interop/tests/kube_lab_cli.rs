//! `tern-lab up --datastore kubernetes` as a person runs it: the lab comes up on the API
//! server stand-in (its own process in the switch namespace), every pod answers every
//! other pod's pings, and `tern-lab down` stops every process (the stand-in too) and
//! removes the namespaces. Needs the `tern` binary next to `tern-lab` (a workspace
//! build makes both). Skips without root; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

const TERN_LAB: &str = env!("CARGO_BIN_EXE_tern-lab");
const PREFIX: &str = "tkc-";

/// Runs `tern-lab down` when the test ends, however it ends.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new(TERN_LAB)
            .args(["down", "--prefix", PREFIX, "--dir"])
            .arg(&self.0)
            .output();
    }
}

fn run(args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(TERN_LAB)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("tern-lab: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_lab_on_the_kubernetes_datastore_from_the_command_line() {
    let test = "a_lab_on_the_kubernetes_datastore_from_the_command_line";
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return;
    }
    let tern = Path::new(TERN_LAB).with_file_name("tern");
    if !tern.is_file() {
        tern_interop::skip_or_fail(test, &format!("{} is not built", tern.display()));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kube-lab-cli");
    let _ = std::fs::remove_dir_all(&dir);
    let _down = Down(dir.clone());
    let tern = tern.to_string_lossy().to_string();
    let (ok, up) = run(
        &[
            "up",
            "--nodes",
            "2",
            "--pods",
            "1",
            "--borrowed",
            "1",
            "--datastore",
            "kubernetes",
            "--prefix",
            PREFIX,
            "--tern",
            &tern,
        ],
        &dir,
    );
    assert!(ok, "tern-lab up failed:\n{up}");
    assert!(up.contains("converged"), "{up}");
    let yaml = std::fs::read_to_string(dir.join("node-1/tern.yaml")).unwrap_or_default();
    assert!(yaml.contains("type: kubernetes"), "{yaml}");
    let (ok, ping) = run(&["ping"], &dir);
    assert!(ok && ping.contains(" 0 unanswered"), "{ping}");
    let (ok, status) = run(&["status"], &dir);
    assert!(ok && status.contains("Established"), "{status}");
    let (ok, down) = run(&["down"], &dir);
    // Two terns and the API server stand-in.
    assert!(ok && down.contains("stopped 3 processes"), "{down}");
    let left = tern_interop::lab::state::namespaces_with_prefix(PREFIX);
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
