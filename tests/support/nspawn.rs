//! A throw-away Debian machine booted with systemd as PID 1 (systemd-nspawn), for the
//! tests that need a real systemd: `tests/systemd_boot.rs` (the unit's start-up) and
//! `tests/deb_package.rs` (the Debian package). Included with `#[path]`.
//!
//! The root file system (mmdebstrap, minbase + systemd) is built once and cached as a
//! tarball in `target/tmp/`; each test unpacks a copy and boots it with
//! `--private-network`, so nothing in it sees or touches this machine's routes. Needs
//! root, mmdebstrap (or the cached tarball), systemd-nspawn (systemd-container), tar
//! and nsenter; [`prerequisites`] says what is missing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tern_interop::peers::wait_for;
use tern_interop::process::Daemon;

/// Bump when the package list changes, so a stale cached tarball is not used.
const ROOTFS_NAME: &str = "systemd-boot-rootfs-bookworm-v1.tar";

/// Effective UID 0, read from /proc (keeps this file free of FFI calls).
pub fn is_root() -> bool {
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

/// Why a container cannot be booted here, if it cannot (the caller skips with it).
pub fn prerequisites() -> Result<PathBuf, String> {
    if !is_root() {
        return Err("not root: systemd-nspawn needs root".into());
    }
    for p in ["systemd-nspawn", "nsenter", "tar"] {
        if !have(p) {
            return Err(format!(
                "{p} is not installed (scripts/setup.sh installs systemd-container)"
            ));
        }
    }
    rootfs_tarball().map_err(|why| format!("cannot build the Debian root file system: {why}"))
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
    // mmdebstrap picks the output format from the name's extension; the PID keeps two
    // tests building at once from writing the same file.
    let partial = dir.join(format!("{ROOTFS_NAME}.{}.partial.tar", std::process::id()));
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
        "nspawn: built the root file system {} in {:.1} s",
        tar.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(tar)
}

/// A fresh copy of the root file system in a new directory under `target/tmp`
/// (removed when the returned directory is dropped: declare it before the container).
pub fn unpack(tarball: &Path, prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
    let t = Instant::now();
    let out = Command::new("tar")
        .args(["--numeric-owner", "-xpf"])
        .arg(tarball)
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
        "nspawn: unpacked the root file system in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    (work, root)
}

/// Writes a file inside the root file system (`path` is the container's).
pub fn write(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
    }
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// Replaces a file the way an editor or `kubectl`-style tool would: a new file renamed
/// over the old one.
pub fn replace(root: &Path, path: &str, text: &str) {
    let p = root.join(path.trim_start_matches('/'));
    let tmp = p.with_extension("yaml.new");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, &p).unwrap_or_else(|e| panic!("rename to {}: {e}", p.display()));
}

/// The booted container: nspawn and its init, stopped by PID when dropped.
pub struct Container {
    nspawn: Daemon,
    init: Option<i32>,
    log: PathBuf,
}

impl Container {
    /// Boots `root` and waits until its systemd answers. `log` gets the console.
    /// --keep-unit and --register=no: no machined or host systemd needed.
    /// --link-journal=no: linking the journal needs the host's machine ID, which a
    /// freshly built machine (an empty /etc/machine-id) does not have ("Failed to
    /// retrieve machine ID: No medium found").
    pub fn boot(root: &Path, log: &Path, name: &str) -> Container {
        let mut cmd = Command::new("systemd-nspawn");
        cmd.args([
            "--boot",
            "--private-network",
            "--register=no",
            "--keep-unit",
            "--link-journal=no",
            "--quiet",
        ])
        .arg(format!("--machine={name}-{}", std::process::id()))
        .arg("-D")
        .arg(root)
        .env("SYSTEMD_COLORS", "0");
        let t_boot = Instant::now();
        let nspawn = Daemon::spawn("systemd-nspawn", cmd, log).unwrap_or_else(|e| panic!("{e}"));
        let nspawn_pid = nspawn
            .pid()
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or_else(|| panic!("systemd-nspawn has no PID"));
        let mut c = Container {
            nspawn,
            init: None,
            log: log.to_path_buf(),
        };
        let console = || std::fs::read_to_string(log).unwrap_or_default();
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
            "nspawn: container systemd answering {:.1} s after nspawn started",
            t_boot.elapsed().as_secs_f64()
        );
        c
    }

    /// Runs a command inside the container's namespaces.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    /// [`Container::run`] with extra environment variables.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
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
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter: {e}"))
    }

    /// Standard output and error of a command, together.
    pub fn text(&self, args: &[&str]) -> String {
        let o = self.run(args);
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }

    /// One property of tern.service (`systemctl show -p NAME --value`).
    pub fn prop(&self, name: &str) -> String {
        let o = self.run(&["systemctl", "show", "-p", name, "--value", "tern.service"]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// What a person would look at when the test fails.
    pub fn diagnose(&self) -> String {
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
