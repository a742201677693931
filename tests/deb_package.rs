//! The Debian package as an operator meets it, on a clean Debian machine (a booted
//! systemd-nspawn container, `support/nspawn.rs`): `scripts/build-deb.sh` packs this
//! build's tern (twice: the bytes must be the same), `dpkg -i` installs it, and then
//! the unit is neither enabled nor started, `systemd-analyze verify` finds nothing to
//! say about it, the shipped tern.yaml passes `tern check-config` once the step its
//! header names is done, the man page and completions are there and work, the unit
//! starts tern with its open-file limit raised, an upgrade restarts it, a broken
//! tern.yaml fails the unit without restarts (exit status 2), and `dpkg -r` then
//! `dpkg -P` leave nothing.
//! Skips (fails under CI=true) without root, dpkg-deb, systemd-nspawn or mmdebstrap.

#![cfg(target_os = "linux")]

#[path = "support/nspawn.rs"]
mod nspawn;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nspawn::{write, Container};
use tern_interop::peers::wait_for;

const TERN: &str = env!("CARGO_BIN_EXE_tern");
const UNIT: &str = "/lib/systemd/system/tern.service";
const CONFFILE: &str = "/etc/tern/tern.yaml";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `scripts/build-deb.sh` on this build's binary; the package's path.
fn build_deb(out: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-deb.sh");
    let o = Command::new(&script)
        .args(["--binary", TERN, "--compression", "none", "--out"])
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(o.status.success(), "build-deb.sh: {}", text(&o));
    let deb = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(deb.is_file(), "build-deb.sh printed {deb:?}, no such file");
    deb
}

/// The paths the package holds (`dpkg-deb -c`), as the container sees them.
fn package_paths(deb: &Path) -> Vec<String> {
    let o = Command::new("dpkg-deb")
        .arg("-c")
        .arg(deb)
        .output()
        .unwrap_or_else(|e| panic!("cannot run dpkg-deb: {e}"));
    assert!(o.status.success(), "dpkg-deb -c: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

#[test]
fn the_debian_package_installs_checks_out_and_purges_clean() {
    let t0 = Instant::now();
    if !tern_interop::have_program("dpkg-deb") {
        tern_interop::skip_or_fail("deb_package", "dpkg-deb is not installed (package dpkg)");
        return;
    }
    let tarball = match nspawn::prerequisites() {
        Ok(t) => t,
        Err(why) => {
            tern_interop::skip_or_fail("deb_package", &why);
            return;
        }
    };
    // Declared before the container: removed after it has stopped.
    let (work, root) = nspawn::unpack(&tarball, "deb-package-");

    // Built twice with the same binary and commit: the same bytes.
    let first = build_deb(&work.path().join("first"));
    let deb = build_deb(&work.path().join("second"));
    let (a, b) = (
        std::fs::read(&first).unwrap_or_else(|e| panic!("{e}")),
        std::fs::read(&deb).unwrap_or_else(|e| panic!("{e}")),
    );
    assert!(
        a == b,
        "two builds of the package differ: {first:?} {deb:?}"
    );
    drop((a, b));
    std::fs::remove_file(&first).unwrap_or_else(|e| panic!("{e}"));
    let paths = package_paths(&deb);
    for p in [
        "/usr/sbin/tern",
        UNIT,
        CONFFILE,
        "/usr/share/man/man8/tern.8.gz",
    ] {
        assert!(
            paths.iter().any(|x| x == p),
            "{p} not in the package: {paths:?}"
        );
    }
    // Not /tmp: the booted system mounts a tmpfs over it.
    std::fs::copy(&deb, root.join("root/tern.deb")).unwrap_or_else(|e| panic!("{e}"));

    let c = Container::boot(&root, &work.path().join("console.log"), "tern-deb");
    let ok = |args: &[&str]| {
        let o = c.run(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        text(&o)
    };

    // 1. Install: nothing enabled, nothing started.
    let t = Instant::now();
    ok(&["dpkg", "-i", "/root/tern.deb"]);
    eprintln!(
        "deb_package: dpkg -i took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        c.text(&["systemctl", "is-enabled", "tern.service"]).trim(),
        "disabled"
    );
    assert_eq!(c.prop("ActiveState"), "inactive", "{}", c.diagnose());
    assert_eq!(c.prop("FragmentPath"), UNIT);
    assert_eq!(c.prop("LimitNOFILE"), "65536");
    assert_eq!(c.prop("RestartPreventExitStatus"), "2");

    // 2. The unit as installed: systemd-analyze has nothing to say.
    let o = c.run(&["systemd-analyze", "verify", UNIT]);
    assert!(
        o.status.success() && text(&o).trim().is_empty(),
        "systemd-analyze verify {UNIT}: {}",
        text(&o)
    );

    // 3. The shipped tern.yaml: without cluster.yaml check-config names the missing
    //    file (its header's step 2); with the cluster's resources there it passes.
    let o = c.run_env(&["tern", "check-config"], &[("NODENAME", "node-a")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("/etc/tern/cluster.yaml"), "{}", text(&o));
    ok(&[
        "cp",
        "/usr/share/doc/tern/examples/mesh/cluster.yaml",
        "/etc/tern/cluster.yaml",
    ]);
    let o = c.run_env(
        &["tern", "check-config", "--config", CONFFILE],
        &[("NODENAME", "node-a")],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("ok: node node-a"), "{}", text(&o));

    // 4. Man page and completions.
    ok(&["test", "-s", "/usr/share/man/man8/tern.8.gz"]);
    ok(&["test", "-s", "/usr/share/man/man8/tern-run.8.gz"]);
    let page = ok(&["zcat", "/usr/share/man/man8/tern.8.gz"]);
    assert!(page.contains(".TH tern 8"), "{page}");
    assert!(
        page.contains("EXIT STATUS") && page.contains("/etc/tern/tern.yaml"),
        "{page}"
    );
    let complete = ok(&[
        "bash",
        "-c",
        ". /usr/share/bash-completion/completions/tern && complete -p tern",
    ]);
    assert!(complete.contains("_tern"), "{complete}");
    ok(&["test", "-s", "/usr/share/zsh/vendor-completions/_tern"]);
    ok(&[
        "test",
        "-s",
        "/usr/share/fish/vendor_completions.d/tern.fish",
    ]);

    // 5. Started by hand (NODENAME from a drop-in, as the header says). The drop-in also
    //    lowers the limits so that the mesh example's 4 peers do not fit: tern raises
    //    its soft limit to the hard one and warns with both numbers. (The unit's own
    //    65536 cannot be seen in here: the container's systemd has a lower hard limit.)
    write(
        &root,
        "/etc/systemd/system/tern.service.d/node.conf",
        "[Service]\nEnvironment=NODENAME=node-a\nLimitNOFILE=256:262\n",
    );
    ok(&["systemctl", "daemon-reload"]);
    ok(&["systemctl", "start", "tern.service"]);
    let journal = || c.text(&["journalctl", "--no-pager", "-u", "tern.service"]);
    wait_for(
        "tern to check its open-file limit",
        Duration::from_secs(30),
        || journal().contains("but 4 are configured"),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", c.diagnose()));
    let j = journal();
    assert!(
        j.contains("open-file limit (RLIMIT_NOFILE): soft 262 (was 256 at start), hard 262: room for about 3 BGP peers"),
        "{j}"
    );
    assert!(
        j.contains("the open-file limit (RLIMIT_NOFILE) is 262, room for about 3 BGP peers, but 4 are configured"),
        "{j}"
    );
    let limits = ok(&["cat", &format!("/proc/{}/limits", c.prop("MainPID"))]);
    assert!(
        limits.lines().any(|l| l.starts_with("Max open files")
            && l.split_whitespace().filter(|w| *w == "262").count() == 2),
        "{limits}"
    );

    // 6. An upgrade (the same package again) restarts the running tern on the new
    //    binary: try-restart, which would start nothing that was stopped.
    let pid = c.prop("MainPID");
    ok(&["dpkg", "-i", "/root/tern.deb"]);
    wait_for(
        "tern restarted by the upgrade",
        Duration::from_secs(30),
        || c.prop("ActiveState") == "active" && c.prop("MainPID") != pid,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", c.diagnose()));

    // 7. A broken tern.yaml: exit status 2 and no restart loop.
    let pid = c.prop("MainPID");
    write(&root, CONFFILE, "nodee: node-a\n");
    let _ = c.run(&["systemctl", "restart", "tern.service"]);
    wait_for("the unit to fail", Duration::from_secs(30), || {
        c.prop("ActiveState") == "failed"
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", c.diagnose()));
    assert_ne!(c.prop("MainPID"), pid);
    assert_eq!(c.prop("ExecMainStatus"), "2", "{}", c.diagnose());
    // Longer than RestartSec=2: a restart would have happened by now.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(c.prop("ActiveState"), "failed", "{}", c.diagnose());
    assert_eq!(c.prop("NRestarts"), "0", "{}", c.diagnose());
    assert!(journal().contains("unknown field `nodee`"), "{}", journal());

    // 8. Remove, then purge: the operator's files go first (the test added them).
    ok(&[
        "rm",
        "-r",
        "/etc/systemd/system/tern.service.d",
        "/etc/tern/cluster.yaml",
    ]);
    ok(&["systemctl", "reset-failed", "tern.service"]);
    ok(&["dpkg", "-r", "tern"]);
    let status = c.text(&["dpkg-query", "-W", "-f=${Status}", "tern"]);
    assert_eq!(status.trim(), "deinstall ok config-files");
    assert!(!root.join("usr/sbin/tern").exists());
    assert!(
        root.join("etc/tern/tern.yaml").exists(),
        "remove must keep the conffile"
    );
    ok(&["dpkg", "-P", "tern"]);
    let o = c.run(&["dpkg-query", "-W", "tern"]);
    assert!(
        !o.status.success(),
        "tern still known to dpkg: {}",
        text(&o)
    );
    let left: Vec<&String> = paths
        .iter()
        .filter(|p| !is_shared_dir(p))
        .filter(|p| {
            root.join(p.trim_start_matches('/'))
                .symlink_metadata()
                .is_ok()
        })
        .collect();
    assert!(left.is_empty(), "left after dpkg -P: {left:?}");
    assert!(
        !root.join("etc/tern").exists(),
        "/etc/tern left after dpkg -P"
    );

    drop(c);
    eprintln!(
        "deb_package: whole test {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Directories other packages own too (`/usr`, `/usr/share/man/man8`, ...): they stay.
fn is_shared_dir(p: &str) -> bool {
    !p.contains("tern")
}
