//! `tern.exe` under Wine inside a test namespace: the Windows build of the daemon, its
//! pipe CLI and its service, run against real peers on Linux.
//!
//! Wine creates a program's sockets in its *wineserver* (not in the program's own
//! process), so the namespace that matters is the wineserver's. [`WinePrefix::start`]
//! therefore starts a persistent wineserver (`wineserver -p -f`) inside the namespace
//! before any Windows program runs; every later `wine` process of the prefix (the
//! daemon, the CLI, `sc`, the service that `services.exe` starts) then talks BGP from
//! that namespace and meets the others on the prefix's named pipes (`\\.\pipe\tern`).
//! The persistent server also keeps `services.exe` alive between commands: without it
//! Wine shuts the SCM down whenever the last ordinary program exits, and restarts the
//! auto-start service with the next command.
//!
//! Everything is stopped by PID or by `wineserver -k` on the test's own prefix, never
//! by name.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::netns::{self, Netns};
use crate::process::Daemon;
use crate::{Error, Result};

/// The Windows build the lab runs: `$TERN_WINDOWS_EXE` when set, else the debug build
/// of `cargo build -p tern --target x86_64-pc-windows-gnu --bin tern` under `workspace`.
pub fn tern_exe(workspace: &Path) -> PathBuf {
    std::env::var_os("TERN_WINDOWS_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target/x86_64-pc-windows-gnu/debug/tern.exe"))
}

/// A Unix path as Wine's drive `Z:` shows it (`/tmp/x/tern.yaml` → `Z:\tmp\x\tern.yaml`).
pub fn windows_path(path: &Path) -> String {
    format!("Z:{}", path.to_string_lossy().replace('/', "\\"))
}

/// A Wine prefix whose wineserver runs inside one namespace.
#[derive(Debug)]
pub struct WinePrefix {
    prefix: PathBuf,
    ns: String,
    /// `wineserver -p -f`; stopped after `wineserver -k` has ended its programs.
    server: Option<Daemon>,
}

impl WinePrefix {
    /// Prepares the prefix `prefix` with `scripts/wine-prefix.sh` of `workspace` (a
    /// first run takes about 10 s; later runs reuse it), ends any wineserver left on it,
    /// and starts a persistent one inside `ns`, logging to `log`.
    pub fn start(workspace: &Path, prefix: &Path, ns: &Netns, log: &Path) -> Result<WinePrefix> {
        let script = workspace.join("scripts/wine-prefix.sh");
        let prefix_arg = prefix.to_string_lossy().into_owned();
        let out = ns
            .command("bash")
            .arg(&script)
            .arg(&prefix_arg)
            .current_dir(workspace)
            .output()
            .map_err(|source| Error::Spawn {
                command: format!("{} {prefix_arg}", script.display()),
                source,
            })?;
        if !out.status.success() {
            return Err(Error::Command {
                command: format!("{} {prefix_arg}", script.display()),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let mut me = WinePrefix {
            prefix: prefix.to_path_buf(),
            ns: ns.name().to_string(),
            server: None,
        };
        // A server left by an earlier run lives in a namespace that is gone.
        me.kill_server();
        let mut cmd = ns.command("wineserver");
        cmd.args(["-p", "-f"]).env("WINEPREFIX", prefix);
        me.server = Some(Daemon::spawn("wineserver", cmd, log)?);
        // The first program starts Wine's own (services.exe, winedevice, ...), which
        // inherit its stdout and stderr and never exit: with pipes there, every later
        // `output()` would wait for them. So the first one gets no pipes at all.
        crate::peers::wait_for("Wine to boot the prefix", Duration::from_secs(60), || {
            me.command(&["cmd", "/c", "exit"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })?;
        Ok(me)
    }

    /// The prefix directory.
    pub fn path(&self) -> &Path {
        &self.prefix
    }

    /// `ip netns exec NS wine ARGS…` with this prefix and Wine's own chatter off.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns.as_str(), "wine"])
            .args(args)
            .env("WINEPREFIX", &self.prefix)
            .env("WINEDEBUG", "-all")
            .stdin(Stdio::null());
        c
    }

    /// Runs `wine ARGS…` to the end and returns its output, whatever its exit status.
    pub fn wine(&self, args: &[&str]) -> Result<Output> {
        self.command(args).output().map_err(|source| Error::Spawn {
            command: format!("wine {}", args.join(" ")),
            source,
        })
    }

    /// Runs `wine ARGS…` and returns its stdout; a non-zero exit is an error that quotes
    /// both streams.
    pub fn wine_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.wine(args)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(Error::Command {
                command: format!("wine {}", args.join(" ")),
                status: out.status.to_string(),
                stderr: format!("{}{}", stdout, String::from_utf8_lossy(&out.stderr)),
            });
        }
        Ok(stdout)
    }

    /// Starts `wine ARGS…` in the background, stdout and stderr appended to `log`.
    pub fn spawn(&self, args: &[&str], log: &Path) -> Result<WineProcess> {
        let command = format!("wine {}", args.join(" "));
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
        };
        let spawn_err = |source| Error::Spawn {
            command: command.clone(),
            source,
        };
        let (out, err) = (open().map_err(spawn_err)?, open().map_err(spawn_err)?);
        let child = self
            .command(args)
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(spawn_err)?;
        Ok(WineProcess {
            command,
            child: Some(child),
        })
    }

    /// `wineserver -k` on this prefix: ends every Windows program of it (the daemon, the
    /// SCM and its service) and the server.
    fn kill_server(&mut self) {
        let _ = Command::new("wineserver")
            .arg("-k")
            .env("WINEPREFIX", &self.prefix)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for WinePrefix {
    fn drop(&mut self) {
        self.kill_server();
        if let Some(mut server) = self.server.take() {
            server.stop(Duration::from_secs(3));
        }
    }
}

/// A Windows program running under Wine (`ip netns exec` and the `wine` script both
/// exec, so the child's PID is the program's own process). Killed on drop.
#[derive(Debug)]
pub struct WineProcess {
    command: String,
    child: Option<Child>,
}

impl WineProcess {
    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends SIGINT, which Wine delivers to a console program as Ctrl-C, and waits up to
    /// `timeout` for it to exit. Returns its exit status; an error (and a kill) when it
    /// is still running then.
    pub fn ctrl_c(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            return Err(Error::Lab(format!("{} was already stopped", self.command)));
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        Err(Error::Lab(format!(
            "{} did not exit within {timeout:?} of Ctrl-C (SIGINT); killed",
            self.command
        )))
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for WineProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The established BGP connections in `ns` (where a wineserver made them): peer address
/// → whether this side dialled it (its own port is not 179), from `ss`.
pub fn bgp_connections(ns: &Netns) -> Result<BTreeMap<String, bool>> {
    let out = ns.exec("ss", &["-Htn", "state", "established"])?;
    let split = |a: &str| {
        a.rsplit_once(':')
            .map(|(host, port)| (host.trim_matches(['[', ']']).to_string(), port == "179"))
    };
    let mut conns = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [.., local, peer] = fields.as_slice() else {
            continue;
        };
        if let (Some((_, local_179)), Some((addr, peer_179))) = (split(local), split(peer)) {
            if local_179 || peer_179 {
                conns.insert(addr, !local_179);
            }
        }
    }
    Ok(conns)
}

/// `GET path` over HTTP/1.0 to `addr` from inside `ns` (a thread that enters it), for
/// servers a Wine program opened there; returns the whole answer, headers included.
pub fn http_get(ns: &Netns, addr: &str, path: &str) -> Result<String> {
    let (name, addr, path) = (ns.name().to_string(), addr.to_string(), path.to_string());
    let fail = |e: std::io::Error| Error::Lab(format!("GET http://{addr}{path}: {e}"));
    std::thread::scope(|s| {
        s.spawn(|| {
            netns::enter_thread(&name)?;
            let mut conn = std::net::TcpStream::connect(&addr).map_err(fail)?;
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .map_err(fail)?;
            conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
                .map_err(fail)?;
            let mut text = String::new();
            conn.read_to_string(&mut text).map_err(fail)?;
            Ok(text)
        })
        .join()
        .map_err(|_| Error::Lab(format!("the thread in namespace {name} panicked")))?
    })
}
