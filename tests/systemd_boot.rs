//! `tern.service` under a real systemd (PID 1 of a systemd-nspawn container): a node
//! that boots with a broken cluster.yaml must not be killed at the start timeout nor
//! by the watchdog. tern reports READY=1 once it answers, `systemctl status` shows
//! why BGP waits, `tern health --ready` says not ready, and writing a valid file
//! starts BGP in the same process (no restart).
//!
//! The container (`support/nspawn.rs`) boots a throw-away copy of a cached Debian root
//! file system with `--private-network`, so tern sees only the container's loopback and
//! touches no route of this machine. Needs root, mmdebstrap, systemd-nspawn
//! (systemd-container) and nsenter; skips (fails under CI=true) without them.

#![cfg(target_os = "linux")]

#[path = "support/nspawn.rs"]
mod nspawn;

use std::time::{Duration, Instant};

use nspawn::{replace, write, Container};
use tern_interop::peers::wait_for;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const UNIT: &str = include_str!("../packaging/systemd/tern.service");
const GOOD_CLUSTER: &str = include_str!("../config/examples/mesh/cluster.yaml");
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

#[test]
fn tern_service_boots_without_a_valid_configuration_and_starts_bgp_when_fixed() {
    let t0 = Instant::now();
    let tarball = match nspawn::prerequisites() {
        Ok(t) => t,
        Err(why) => {
            tern_interop::skip_or_fail("systemd_boot", &why);
            return;
        }
    };
    // Declared before the container: removed after it has stopped.
    let (work, root) = nspawn::unpack(&tarball, "systemd-boot-");

    // tern, its unit (as shipped) enabled, the test's drop-in, a broken cluster.yaml.
    let bin = root.join("usr/sbin/tern");
    std::fs::create_dir_all(root.join("usr/sbin")).unwrap_or_else(|e| panic!("{e}"));
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

    let c = Container::boot(&root, &work.path().join("console.log"), "tern-sdboot");

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
    let health = c.run(&["/usr/sbin/tern", "health", "--ready", "--socket", SOCKET]);
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
    let tern_status = || c.text(&["/usr/sbin/tern", "status", "--socket", SOCKET]);
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
