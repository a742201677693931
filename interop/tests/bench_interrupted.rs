//! `tern-lab bench` stopped by SIGTERM in the middle of a run (a CI job cancelled, a
//! person's Ctrl-C) leaves nothing behind: its namespaces are deleted and the daemon it
//! started is gone, and it exits with 128 + 15. Before, the guards' drops never ran and
//! the `tb-d`/`tb-i` namespaces stayed with BIRD still running in them. Needs root and
//! BIRD; skips without them and fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tern_interop::lab::state;

const TERN_LAB: &str = env!("CARGO_BIN_EXE_tern-lab");
const PREFIX: &str = "tbx-";

fn namespaces() -> Vec<String> {
    state::namespaces_with_prefix(PREFIX)
}

/// PIDs of processes whose command line names `dir` (the daemons the bench started).
fn started_in(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = e.file_name().to_string_lossy().to_string();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(dir) && !cmd.contains("tern-lab") {
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// Kills the bench and removes its namespaces with what runs in them (as `tern-lab
/// down` does), if the test ends early.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        state::down(&namespaces());
    }
}

#[test]
fn a_bench_stopped_by_sigterm_removes_its_namespaces_and_daemons() {
    let test = "a_bench_stopped_by_sigterm_removes_its_namespaces_and_daemons";
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail(test, "bird is not installed");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-interrupted");
    let dir_s = dir.to_string_lossy().to_string();
    let child = Command::new(TERN_LAB)
        .args([
            "bench",
            "churn:2000:100:120",
            "--daemons",
            "bird",
            "--reps",
            "1",
        ])
        .args(["--prefix", PREFIX, "--dir", &dir_s])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("tern-lab: {e}"));
    let mut guard = Guard(Some(child));

    // Until the run is under way: both namespaces there and BIRD running.
    let deadline = Instant::now() + Duration::from_secs(60);
    while namespaces().len() < 2 || started_in(&dir_s).is_empty() {
        assert!(Instant::now() < deadline, "the bench never got going");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));

    let Some(child) = guard.0.take() else {
        unreachable!("the child was just stored");
    };
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
        .unwrap_or_else(|e| panic!("kill: {e}"));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM: removing namespaces"), "{stderr}");
    assert!(namespaces().is_empty(), "left: {:?}", namespaces());
    // SIGKILL is delivered at once, but the kernel reaps the orphan a moment later.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !started_in(&dir_s).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(started_in(&dir_s).is_empty(), "{:?}", started_in(&dir_s));
}
