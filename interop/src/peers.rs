//! Real BGP peers for tests: BIRD 2, GoBGP and FRR's bgpd started inside a test
//! namespace with their own config, control socket and pid file in a directory of the
//! test's, stopped by PID when dropped, and queried through their own CLIs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::netns::{run, Netns};
use crate::process::Daemon;
use crate::{Error, Result};

/// Which implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// BIRD 2 (`bird`, queried with `birdc`).
    Bird,
    /// GoBGP (`gobgpd`, queried with `gobgp`).
    Gobgp,
    /// FRR's bgpd without zebra (queried with `vtysh`).
    Frr,
}

impl Kind {
    /// The programs this kind needs.
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Kind::Bird => &["bird", "birdc"],
            Kind::Gobgp => &["gobgpd", "gobgp"],
            Kind::Frr => &["/usr/lib/frr/bgpd", "vtysh"],
        }
    }

    /// The kind named `bird`, `gobgp` or `frr`.
    pub fn from_name(name: &str) -> Option<Kind> {
        [Kind::Bird, Kind::Gobgp, Kind::Frr]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// The CLI words that summarise its sessions.
    pub fn summary_command(self) -> &'static [&'static str] {
        match self {
            Kind::Bird => &["show", "protocols"],
            Kind::Gobgp => &["neighbor"],
            Kind::Frr => &["show bgp summary"],
        }
    }

    /// Short name for namespace and file names.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bird => "bird",
            Kind::Gobgp => "gobgp",
            Kind::Frr => "frr",
        }
    }
}

/// BIRD in the foreground in `ns`, with its config, control socket and PID file in
/// `dir` (`bird.conf`, `bird.ctl`, `bird.pid`).
pub fn bird_command(ns: &Netns, dir: &Path) -> std::process::Command {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let mut c = ns.command("bird");
    c.args([
        "-f",
        "-c",
        &p("bird.conf"),
        "-s",
        &p("bird.ctl"),
        "-P",
        &p("bird.pid"),
    ]);
    c
}

/// A running peer daemon.
#[derive(Debug)]
pub struct Peer {
    kind: Kind,
    dir: PathBuf,
    daemon: Daemon,
}

impl Peer {
    /// Starts `kind` in `ns` with `config` (bird.conf, gobgpd.toml or frr.conf text),
    /// keeping its files in `dir`, and waits until its CLI answers.
    pub fn start(kind: Kind, ns: &Netns, dir: &Path, config: &str) -> Result<Peer> {
        Peer::start_with(kind, ns, dir, config, &[])
    }

    /// [`Peer::start`] with `extra` arguments for the daemon (e.g. BIRD's `-R`, which
    /// calico-node passes: graceful-restart recovery after start).
    pub fn start_with(
        kind: Kind,
        ns: &Netns,
        dir: &Path,
        config: &str,
        extra: &[&str],
    ) -> Result<Peer> {
        let io = |what: &str, source: std::io::Error| Error::Spawn {
            command: format!("{what} in {}", dir.display()),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| io("mkdir", e))?;
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let log = dir.join(format!("{}.log", kind.name()));
        let cmd = match kind {
            Kind::Bird => {
                std::fs::write(dir.join("bird.conf"), config)
                    .map_err(|e| io("write bird.conf", e))?;
                bird_command(ns, dir)
            }
            Kind::Gobgp => {
                std::fs::write(dir.join("gobgpd.toml"), config)
                    .map_err(|e| io("write gobgpd.toml", e))?;
                let mut c = ns.command("gobgpd");
                c.args([
                    "-f",
                    &p("gobgpd.toml"),
                    "-p",
                    "--pprof-disable",
                    "--api-hosts",
                    &format!("unix://{}", p("gobgp.sock")),
                ]);
                c
            }
            Kind::Frr => {
                let frr = dir.join("frr");
                std::fs::create_dir_all(&frr).map_err(|e| io("mkdir frr", e))?;
                std::fs::write(frr.join("frr.conf"), config)
                    .map_err(|e| io("write frr.conf", e))?;
                // bgpd drops privileges to frr: it must read its config and write its run dir.
                run("chown", &["-R", "frr:frr", &frr.to_string_lossy()])?;
                run("chmod", &["755", &dir.to_string_lossy()])?;
                let mut c = ns.command("/usr/lib/frr/bgpd");
                c.args([
                    "-Z",
                    "-f",
                    &p("frr/frr.conf"),
                    "-i",
                    &p("frr/bgpd.pid"),
                    "--vty_socket",
                    &p("frr"),
                ]);
                c.args(["-P", "0", "-p", "179", "-u", "frr", "-g", "frr"]);
                c
            }
        };
        let mut cmd = cmd;
        cmd.args(extra);
        let peer = Peer {
            kind,
            dir: dir.to_path_buf(),
            daemon: Daemon::spawn(kind.name(), cmd, &log)?,
        };
        let probe: &[&str] = match kind {
            Kind::Bird => &["show", "status"],
            Kind::Gobgp => &["global"],
            Kind::Frr => &["show bgp summary"],
        };
        wait_for(
            &format!("{} to answer", kind.name()),
            Duration::from_secs(20),
            || peer.cli(probe).is_ok(),
        )?;
        Ok(peer)
    }

    /// Runs the daemon's CLI: `birdc` words, `gobgp` words, or one `vtysh -c` per
    /// argument for FRR. Returns what it printed.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        cli_at(self.kind, &self.dir, args)
    }

    /// The daemon's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}.log", self.kind.name())))
            .unwrap_or_default()
    }

    /// Kills the daemon as a crash would: no NOTIFICATION, the connection just drops.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    /// Leaves the daemon running after this guard is gone; returns its PID.
    pub fn detach(self) -> Option<u32> {
        self.daemon.detach()
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the daemon: a peer that stops answering
    /// without closing its connections.
    pub fn freeze(&self, frozen: bool) {
        let sig = if frozen {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        };
        if let Some(pid) = self.daemon.pid().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The kind of daemon.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Stops the daemon now (it is also stopped on drop).
    pub fn stop(&mut self) {
        self.daemon.stop(Duration::from_secs(5));
    }
}

/// Runs the CLI of a `kind` daemon whose files are in `dir` (as [`Peer::start`] lays
/// them out), whether or not this process started it.
pub fn cli_at(kind: Kind, dir: &Path, args: &[&str]) -> Result<String> {
    let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let out = match kind {
        Kind::Bird => {
            let sock = d("bird.ctl");
            let mut full = vec!["-s", sock.as_str()];
            full.extend_from_slice(args);
            run("birdc", &full)?
        }
        Kind::Gobgp => {
            let target = format!("unix://{}", d("gobgp.sock"));
            let mut full = vec!["--target", target.as_str()];
            full.extend_from_slice(args);
            run("gobgp", &full)?
        }
        Kind::Frr => {
            let sock = d("frr");
            let mut full = vec!["--vty_socket", sock.as_str()];
            for a in args {
                full.push("-c");
                full.push(a);
            }
            run("vtysh", &full)?
        }
    };
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `ok` every 200 ms until it holds or `timeout` passes.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(Error::Command {
        command: format!("wait for {what}"),
        status: "timeout".into(),
        stderr: format!("not reached in {timeout:?}"),
    })
}

/// Starts FRR's bfdd alone in `ns` with `config` (bfdd.conf text: `bfd` with `peer`
/// entries), its files in `dir/frr` beside a bgpd's of [`Peer::start`] (so `vtysh`
/// through [`cli_at`] reaches both), its log in `dir/bfdd.log`. Its zebra socket is
/// a path in `dir` where nothing listens, so it never reaches a zebra outside the
/// test. Returns once its CLI answers.
pub fn start_bfdd(ns: &Netns, dir: &Path, config: &str) -> Result<Daemon> {
    let io = |what: &str, source: std::io::Error| Error::Spawn {
        command: format!("{what} in {}", dir.display()),
        source,
    };
    let frr = dir.join("frr");
    std::fs::create_dir_all(&frr).map_err(|e| io("mkdir frr", e))?;
    std::fs::write(frr.join("bfdd.conf"), config).map_err(|e| io("write bfdd.conf", e))?;
    // bfdd drops privileges to frr: it must read its config and write its run dir.
    run("chown", &["-R", "frr:frr", &frr.to_string_lossy()])?;
    run("chmod", &["755", &dir.to_string_lossy()])?;
    let p = |f: &str| frr.join(f).to_string_lossy().into_owned();
    let mut c = ns.command("/usr/lib/frr/bfdd");
    c.args([
        "-f",
        &p("bfdd.conf"),
        "-i",
        &p("bfdd.pid"),
        "--vty_socket",
        &p(""),
    ]);
    c.args(["-z", &p("zserv.api"), "-u", "frr", "-g", "frr"]);
    let d = Daemon::spawn("bfdd", c, &dir.join("bfdd.log"))?;
    wait_for("bfdd to answer", Duration::from_secs(20), || {
        cli_at(Kind::Frr, dir, &["show bfd peers brief"]).is_ok()
    })?;
    Ok(d)
}
