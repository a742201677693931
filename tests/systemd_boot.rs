//! `tern.service` under a real systemd (PID 1 of a systemd-nspawn container): a node
//! that boots with a broken cluster.yaml must not be killed at the start timeout nor
//! by the watchdog. tern reports READY=1 once it answers, `systemctl status` shows
//! why BGP waits, `tern health --ready` says not ready, and writing a valid file
//! starts BGP in the same process (no restart).
//!
//! The Debian root file system (mmdebstrap, minbase + systemd) is built once and cached
//! as a tarball in `target/tmp/`; each run boots a throw-away copy of it with
//! `--private-network`, so tern sees only the container's loopback and touches no
//! route of this machine. Needs root, mmdebstrap, systemd-nspawn (systemd-container)
//! and nsenter; skips (fails under CI=true) without them.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tern_interop::peers::wait_for;
use tern_interop::process::Daemon;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const UNIT: &str = include_str!("../packaging/systemd/tern.service");
const GOOD_CLUSTER: &str = include_str!("../config/examples/mesh/cluster.yaml");
/// Bump when the package list changes, so a stale cached tarball is not used.
const ROOTFS_NAME: &str = "systemd-boot-rootfs-bookworm-v1.tar";
const SOCKET: &str = "/run/tern/tern.sock";

/// The unit's start timeout and watchdog, shortened: with tern's old behaviour
/// (READY=1 only after a valid configuration) the unit is killed at 10 s and
/// restarted, which the test sees within seconds; a watchdog not fed while waiting
/// shows at 8 s.
const DROP_IN: &str = "[Service]\nTimeoutStartSec=10s\nWatchdogSec=8s\n";

const TERN_YAML: &str = "node: node-a
datastore: {type: file, path: /etc/tern/cluster.yaml}
control_socket: /run/tern/tern.sock
fib: {enabled: true}
";

/// Effective UID 0, read from /proc (keeps this file free of FFI calls).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

fn have(program: &str) -> bool {
    tern_interop::have_program(program)
}

/// The cached root file system tarball, built on first use.
fn rootfs_tarball() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let tar = dir.join(ROOTFS_NAME);
    if tar.is_file() {
        return Ok(tar);
    }
    if !have("mmdebstrap") {
        return Err(
            "mmdebstrap is not installed (scripts/setup.sh installs it) and no cached root file system"
                .into(),
        );
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // mmdebstrap picks the output format from the name's extension.
    let partial = dir.join(format!("{ROOTFS_NAME}.partial.tar"));
    let started = Instant::now();
    let out = Command::new("mmdebstrap")
        .args([
            "--variant=minbase",
            "--include=systemd,systemd-sysv,dbus,iproute2",
            "bookworm",
        ])
        .arg(&partial)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run mmdebstrap: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&partial);
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(format!(
            "mmdebstrap failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    std::fs::rename(&partial, &tar)
        .map_err(|e| format!("cannot rename {}: {e}", partial.display()))?;
    eprintln!(
        "systemd_boot: built the root file system {} in {:.1} s",
        tar.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(tar)
}

fn write(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
    }
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// Replaces a file the way an editor or `kubectl`-style tool would: a new file renamed
/// over the old one.
fn replace(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    let tmp = p.with_extension("yaml.new");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, &p).unwrap_or_else(|e| panic!("rename to {}: {e}", p.display()));
}

/// The booted container: nspawn and its init, stopped by PID when dropped.
struct Container {
    nspawn: Daemon,
    init: Option<i32>,
    log: PathBuf,
}

impl Container {
    /// Runs a command inside the container's namespaces.
    fn run(&self, args: &[&str]) -> Output {
        let init = self
            .init
            .unwrap_or_else(|| panic!("the container has no init yet"));
        Command::new("nsenter")
            .arg(format!("--target={init}"))
            // --root and --wd: the container init's own root. Entering its mount
            // namespace alone resets the root to that namespace's root mount, which is
            // the container only where nspawn was not itself started in a chroot.
            .args([
                "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--",
            ])
            .args(args)
            .env("SYSTEMD_PAGER", "")
            .env("SYSTEMD_COLORS", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter: {e}"))
    }

    fn text(&self, args: &[&str]) -> String {
        let o = self.run(args);
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }

    /// One property of tern.service (`systemctl show -p NAME --value`).
    fn prop(&self, name: &str) -> String {
        let o = self.run(&["systemctl", "show", "-p", name, "--value", "tern.service"]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// What a person would look at when the test fails.
    fn diagnose(&self) -> String {
        let console = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = console.lines().rev().take(30).collect();
        format!(
            "--- systemctl status tern\n{}\n--- journalctl -u tern\n{}\n--- container console (last lines)\n{}",
            self.text(&["systemctl", "status", "--no-pager", "-l", "tern.service"]),
            self.text(&["journalctl", "--no-pager", "-u", "tern.service", "-n", "40"]),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGTERM to nspawn shuts the container down cleanly (a few seconds).
        self.nspawn.stop(Duration::from_secs(30));
        // Should nspawn have been killed before its init: init is PID 1 of the
        // container's PID namespace, and killing it ends every process in there.
        if let Some(pid) = self.init.filter(|p| is_container_init(*p)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// `(pid, ppid)` of every process.
fn processes() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        let ppid: i32 = after.split_whitespace().nth(1)?.parse().ok()?;
        Some((pid, ppid))
    })
    .collect()
}

/// Whether `pid` is PID 1 of its own PID namespace (the container's systemd).
fn is_container_init(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("NSpid:")).map(|l| {
                l.split_whitespace().last() == Some("1") && l.split_whitespace().count() > 2
            })
        })
        .unwrap_or(false)
}

#[test]
fn tern_service_boots_without_a_valid_configuration_and_starts_bgp_when_fixed() {
    let t0 = Instant::now();
    if !is_root() {
        tern_interop::skip_or_fail("systemd_boot", "not root: systemd-nspawn needs root");
        return;
    }
    for p in ["systemd-nspawn", "nsenter", "tar"] {
        if !have(p) {
            tern_interop::skip_or_fail(
                "systemd_boot",
                &format!("{p} is not installed (scripts/setup.sh installs systemd-container)"),
            );
            return;
        }
    }
    let tarball = match rootfs_tarball() {
        Ok(t) => t,
        Err(why) => {
            tern_interop::skip_or_fail(
                "systemd_boot",
                &format!("cannot build the Debian root file system: {why}"),
            );
            return;
        }
    };

    // Declared before the container: removed after it has stopped.
    let work = tempfile::Builder::new()
        .prefix("systemd-boot-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let out = Command::new("tar")
        .args(["--numeric-owner", "-xpf"])
        .arg(&tarball)
        .arg("-C")
        .arg(&root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tar: {e}"));
    assert!(
        out.status.success(),
        "tar -x {}: {}",
        tarball.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "systemd_boot: unpacked the root file system in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // tern, its unit (as shipped) enabled, the test's drop-in, a broken cluster.yaml.
    let bin = root.join("usr/local/bin/tern");
    std::fs::create_dir_all(root.join("usr/local/bin")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(TERN, &bin).unwrap_or_else(|e| panic!("copy {TERN}: {e}"));
    write(&root, "/etc/systemd/system/tern.service", UNIT);
    write(
        &root,
        "/etc/systemd/system/tern.service.d/test.conf",
        DROP_IN,
    );
    let wants = root.join("etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(
        "/etc/systemd/system/tern.service",
        wants.join("tern.service"),
    )
    .unwrap_or_else(|e| panic!("enable tern.service: {e}"));
    write(&root, "/etc/tern/tern.yaml", TERN_YAML);
    let broken = GOOD_CLUSTER.replace("asNumber: 64512", "asNumber: 0");
    assert_ne!(
        broken, GOOD_CLUSTER,
        "the example no longer has asNumber: 64512"
    );
    write(&root, "/etc/tern/cluster.yaml", &broken);

    // Boot. --keep-unit and --register=no: no machined or host systemd needed.
    // --link-journal=no: linking the journal needs the host's machine ID, which a
    // freshly built machine (an empty /etc/machine-id) does not have ("Failed to
    // retrieve machine ID: No medium found").
    let log = work.path().join("console.log");
    let mut cmd = Command::new("systemd-nspawn");
    cmd.args([
        "--boot",
        "--private-network",
        "--register=no",
        "--keep-unit",
        "--link-journal=no",
        "--quiet",
    ])
    .arg(format!("--machine=tern-sdboot-{}", std::process::id()))
    .arg("-D")
    .arg(&root)
    .env("SYSTEMD_COLORS", "0");
    let t_boot = Instant::now();
    let nspawn = Daemon::spawn("systemd-nspawn", cmd, &log).unwrap_or_else(|e| panic!("{e}"));
    let nspawn_pid = nspawn
        .pid()
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or_else(|| panic!("systemd-nspawn has no PID"));
    let mut c = Container {
        nspawn,
        init: None,
        log: log.clone(),
    };
    let console = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the container's init", Duration::from_secs(60), || {
        c.init = processes()
            .into_iter()
            .find(|(pid, ppid)| *ppid == nspawn_pid && is_container_init(*pid))
            .map(|(pid, _)| pid);
        c.init.is_some()
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", console()));
    let mut last = String::new();
    wait_for(
        "systemd in the container to answer",
        Duration::from_secs(120),
        || {
            let o = c.run(&["systemctl", "is-system-running"]);
            let s = String::from_utf8_lossy(&o.stdout).into_owned();
            last = format!("{s}{}", String::from_utf8_lossy(&o.stderr));
            ["running", "degraded", "starting", "initializing"]
                .iter()
                .any(|w| s.trim() == *w)
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nlast `systemctl is-system-running` in the container: {last}\n{}",
            console()
        )
    });
    eprintln!(
        "systemd_boot: container systemd answering {:.1} s after nspawn started",
        t_boot.elapsed().as_secs_f64()
    );

    // 1. Broken configuration: READY anyway (active), and it stays so well past the
    //    start timeout and the watchdog interval, with no restart.
    let t = Instant::now();
    wait_for(
        "tern.service to become active",
        Duration::from_secs(60),
        || c.prop("ActiveState") == "active",
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}: READY=1 never came with a broken configuration (NRestarts={})\n{}",
            c.prop("NRestarts"),
            c.diagnose()
        )
    });
    eprintln!(
        "systemd_boot: tern.service active {:.1} s after systemd answered",
        t.elapsed().as_secs_f64()
    );
    let main_pid = c.prop("MainPID");
    // A minimum, not a window: longer than TimeoutStartSec (10 s) and twice WatchdogSec.
    std::thread::sleep(Duration::from_secs(20));
    let state = c.prop("ActiveState");
    let restarts = c.prop("NRestarts");
    let pid_now = c.prop("MainPID");
    assert!(
        state == "active" && restarts == "0" && pid_now == main_pid,
        "after 20 s: ActiveState={state} NRestarts={restarts} MainPID {main_pid} -> {pid_now}\n{}",
        c.diagnose()
    );
    let status_text = c.prop("StatusText");
    assert!(
        status_text.starts_with("waiting for a valid configuration:")
            && status_text.contains("AS 0 is reserved"),
        "StatusText={status_text:?}\n{}",
        c.diagnose()
    );
    eprintln!("systemd_boot: while waiting, STATUS={status_text:?}");
    let status = c.text(&["systemctl", "status", "--no-pager", "-l", "tern.service"]);
    assert!(
        status.contains("Status: \"waiting for a valid configuration:"),
        "systemctl status does not show why tern waits:\n{status}"
    );
    let health = c.run(&[
        "/usr/local/bin/tern",
        "health",
        "--ready",
        "--socket",
        SOCKET,
    ]);
    let health_text = format!(
        "{}{}",
        String::from_utf8_lossy(&health.stdout),
        String::from_utf8_lossy(&health.stderr)
    );
    assert_eq!(
        health.status.code(),
        Some(1),
        "tern health --ready before any valid configuration: {health_text}"
    );
    assert!(
        health_text.contains("no valid configuration has been applied yet"),
        "{health_text}"
    );

    // 2. Fix the file: BGP starts in the same process.
    let t = Instant::now();
    replace(&root, "/etc/tern/cluster.yaml", GOOD_CLUSTER);
    let tern_status = || c.text(&["/usr/local/bin/tern", "status", "--socket", SOCKET]);
    wait_for(
        "the fixed configuration applied",
        Duration::from_secs(60),
        || {
            tern_status().contains("router id 198.51.100.10")
                && c.prop("StatusText").starts_with("running:")
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n--- tern status\n{}\nStatusText={:?}\n{}",
            tern_status(),
            c.prop("StatusText"),
            c.diagnose()
        )
    });
    eprintln!(
        "systemd_boot: fixed configuration applied {:.1} s after the file was replaced",
        t.elapsed().as_secs_f64()
    );
    eprintln!(
        "systemd_boot: after the fix, STATUS={:?}",
        c.prop("StatusText")
    );
    let state = c.prop("ActiveState");
    let restarts = c.prop("NRestarts");
    let pid_now = c.prop("MainPID");
    assert!(
        state == "active" && restarts == "0" && pid_now == main_pid,
        "after the fix: ActiveState={state} NRestarts={restarts} MainPID {main_pid} -> {pid_now}\n{}",
        c.diagnose()
    );

    let t = Instant::now();
    drop(c);
    eprintln!(
        "systemd_boot: container stopped in {:.1} s; whole test {:.1} s",
        t.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}
