//! The daemons under test, each configured for the same job: dial every simulated
//! peer, accept all its routes, install them in the kernel (where the daemon can) and
//! export nothing. tern reads Calico resources; BIRD 2, FRR (bgpd with zebra) and
//! GoBGP get the closest native configuration, with graceful restart on as in a
//! Calico cluster. Also the null daemon ([`super::sink::Sink`]). For the RIB-only
//! scenario ([`Dut::start_with`] without the kernel) no daemon touches the kernel: tern
//! with its FIB off, BIRD without kernel protocols, FRR's bgpd without zebra.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::sink::Sink;
use crate::netns::{run, Netns};
use crate::process::Daemon;
use crate::{Error, Result};

/// The daemon under test's IPv4 address (textually above every simulated peer's, so
/// tern's node-to-node mesh dials them all, as every other daemon does).
pub const DUT_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 99);
/// Its IPv6 address (same reason).
pub const DUT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 2);
/// Its AS (Calico's default).
pub const DUT_AS: u32 = 64512;
/// tern's route protocol number (its default, 201; docs/fib.md).
pub const TERN_PROTO: u8 = 201;
/// BIRD's (RTPROT_BIRD).
pub const BIRD_PROTO: u8 = 12;
/// FRR zebra's for BGP routes.
pub const FRR_BGP_PROTO: u8 = 186;

/// Which daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DutKind {
    /// tern (`tern run`).
    Tern,
    /// BIRD 2 with kernel protocols.
    Bird,
    /// FRR: bgpd and zebra.
    Frr,
    /// GoBGP (`gobgpd`; it has no FIB of its own).
    Gobgp,
    /// Nothing but tern's decoder counting prefixes: the injector's ceiling.
    Null,
}

impl DutKind {
    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DutKind::Tern => "tern",
            DutKind::Bird => "bird",
            DutKind::Frr => "frr",
            DutKind::Gobgp => "gobgp",
            DutKind::Null => "null",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<DutKind> {
        [
            DutKind::Tern,
            DutKind::Bird,
            DutKind::Frr,
            DutKind::Gobgp,
            DutKind::Null,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    /// The route protocol its kernel routes carry, if it installs any.
    pub fn fib_protocol(self) -> Option<u8> {
        match self {
            DutKind::Tern => Some(TERN_PROTO),
            DutKind::Bird => Some(BIRD_PROTO),
            DutKind::Frr => Some(FRR_BGP_PROTO),
            DutKind::Gobgp | DutKind::Null => None,
        }
    }

    /// Programs it needs.
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            DutKind::Tern | DutKind::Null => &[],
            DutKind::Bird => &["bird", "birdc"],
            DutKind::Frr => &["/usr/lib/frr/bgpd", "/usr/lib/frr/zebra", "vtysh"],
            DutKind::Gobgp => &["gobgpd", "gobgp"],
        }
    }
}

/// What every daemon is configured with.
#[derive(Debug, Clone)]
pub struct DutSpec {
    /// Which daemon.
    pub kind: DutKind,
    /// Its files.
    pub dir: PathBuf,
    /// The peers: address and AS (the peer AS equal to [`DUT_AS`] means iBGP: tern
    /// sees them as the node-to-node mesh).
    pub peers: Vec<(IpAddr, u32)>,
    /// The tern binary.
    pub tern: PathBuf,
    /// FRR with graceful restart (only for the restart scenario: with it, bgpd
    /// defers best-path selection at start and a first table takes 10 s longer).
    pub frr_graceful_restart: bool,
    /// The daemon as a route reflector, every (iBGP) peer its client.
    pub reflector: bool,
}

/// A running daemon under test.
#[derive(Debug)]
pub struct Dut {
    spec: DutSpec,
    ns_name: String,
    /// Its processes (FRR: zebra first, then bgpd).
    procs: Vec<Daemon>,
    sink: Option<Sink>,
    /// Whether it installs routes in the kernel (false: the RIB-only scenario).
    kernel: bool,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Spawn {
        command: what,
        source,
    }
}

impl Dut {
    /// Writes its configuration and starts it in `ns`. `recovery`: the start after a
    /// restart (BIRD's `-R`, zebra's `-K`: keep the kernel routes for a while).
    pub fn start(ns: &Netns, spec: &DutSpec, recovery: bool) -> Result<Dut> {
        Dut::start_with(ns, spec, recovery, true)
    }

    /// [`Dut::start`], choosing whether the daemon installs routes in the kernel
    /// (`kernel` false: tern with `fib: {enabled: false}`, BIRD without kernel
    /// protocols, FRR's bgpd alone with `--no_zebra`; GoBGP never does).
    pub fn start_with(ns: &Netns, spec: &DutSpec, recovery: bool, kernel: bool) -> Result<Dut> {
        std::fs::create_dir_all(&spec.dir).map_err(io(format!("mkdir {}", spec.dir.display())))?;
        let p = |f: &str| spec.dir.join(f).to_string_lossy().into_owned();
        let write = |f: &str, text: String| {
            std::fs::write(spec.dir.join(f), text).map_err(io(format!("write {}", p(f))))
        };
        let mut dut = Dut {
            spec: spec.clone(),
            ns_name: ns.name().to_string(),
            procs: Vec::new(),
            sink: None,
            kernel,
        };
        match spec.kind {
            DutKind::Tern => {
                write("cluster.yaml", spec.tern_cluster())?;
                write(
                    "tern.yaml",
                    format!(
                        "node: dut\ndatastore: {{type: file, path: {}}}\ncontrol_socket: {}\nlog: info\nfib: {{enabled: {kernel}}}\n",
                        p("cluster.yaml"),
                        p("tern.sock")
                    ),
                )?;
                let mut c = ns.command(&spec.tern.to_string_lossy());
                c.args(["run", "--config", &p("tern.yaml")]);
                c.env("RUST_LOG", "info");
                dut.procs
                    .push(Daemon::spawn("tern", c, &spec.dir.join("tern.log"))?);
            }
            DutKind::Bird => {
                write("bird.conf", spec.bird_conf_for(kernel))?;
                let mut c = crate::peers::bird_command(ns, &spec.dir);
                if recovery {
                    c.arg("-R");
                }
                dut.procs
                    .push(Daemon::spawn("bird", c, &spec.dir.join("bird.log"))?);
            }
            DutKind::Gobgp => {
                write("gobgpd.toml", spec.gobgp_conf())?;
                let mut c = ns.command("gobgpd");
                c.args([
                    "-f",
                    &p("gobgpd.toml"),
                    "-p",
                    "--pprof-disable",
                    "--api-hosts",
                    &format!("unix://{}", p("gobgp.sock")),
                ]);
                dut.procs
                    .push(Daemon::spawn("gobgpd", c, &spec.dir.join("gobgpd.log"))?);
            }
            DutKind::Frr if kernel => dut.start_frr(ns, recovery)?,
            DutKind::Frr => dut.start_bgpd_alone(ns)?,
            DutKind::Null => {
                let local = vec![IpAddr::V4(DUT_V4), IpAddr::V6(DUT_V6)];
                let peers = spec.peers.iter().map(|p| p.0).collect();
                dut.sink = Some(Sink::start(ns, DUT_AS, DUT_V4, local, peers)?);
            }
        }
        Ok(dut)
    }

    fn start_frr(&mut self, ns: &Netns, recovery: bool) -> Result<()> {
        let run_dir = self.spec.dir.join("frr");
        std::fs::create_dir_all(&run_dir).map_err(io(format!("mkdir {}", run_dir.display())))?;
        let f = |n: &str| run_dir.join(n).to_string_lossy().into_owned();
        std::fs::write(run_dir.join("zebra.conf"), "hostname dut\n")
            .map_err(io(f("zebra.conf")))?;
        std::fs::write(run_dir.join("bgpd.conf"), self.spec.frr_conf())
            .map_err(io(f("bgpd.conf")))?;
        let _ = std::fs::remove_file(run_dir.join("zserv.api"));
        // The daemons drop privileges to frr: they must read and write their run dir.
        run("chown", &["-R", "frr:frr", &run_dir.to_string_lossy()])?;
        run("chmod", &["755", &self.spec.dir.to_string_lossy()])?;
        let args = |c: &mut std::process::Command, conf: &str, pid: &str| {
            c.args([
                "-f",
                &f(conf),
                "-i",
                &f(pid),
                "-z",
                &f("zserv.api"),
                "--vty_socket",
                &f(""),
                "-u",
                "frr",
                "-g",
                "frr",
            ]);
        };
        let mut z = ns.command("/usr/lib/frr/zebra");
        args(&mut z, "zebra.conf", "zebra.pid");
        // -r: leave the routes in the kernel when zebra stops; -K: on the start after
        // a restart, keep the old ones for 120 s (FRR's graceful restart of zebra).
        z.arg("-r");
        if recovery {
            z.args(["-K", "120"]);
        }
        self.procs
            .push(Daemon::spawn("zebra", z, &self.spec.dir.join("zebra.log"))?);
        crate::peers::wait_for("zebra's socket", Duration::from_secs(30), || {
            run_dir.join("zserv.api").exists()
        })?;
        let mut b = ns.command("/usr/lib/frr/bgpd");
        args(&mut b, "bgpd.conf", "bgpd.pid");
        b.args(["-p", "179"]);
        self.procs
            .push(Daemon::spawn("bgpd", b, &self.spec.dir.join("bgpd.log"))?);
        Ok(())
    }

    /// FRR's bgpd without zebra (`--no_zebra`): the RIB only.
    fn start_bgpd_alone(&mut self, ns: &Netns) -> Result<()> {
        let run_dir = self.spec.dir.join("frr");
        std::fs::create_dir_all(&run_dir).map_err(io(format!("mkdir {}", run_dir.display())))?;
        let f = |n: &str| run_dir.join(n).to_string_lossy().into_owned();
        std::fs::write(run_dir.join("bgpd.conf"), self.spec.frr_conf())
            .map_err(io(f("bgpd.conf")))?;
        run("chown", &["-R", "frr:frr", &run_dir.to_string_lossy()])?;
        run("chmod", &["755", &self.spec.dir.to_string_lossy()])?;
        let mut b = ns.command("/usr/lib/frr/bgpd");
        b.args([
            "-f",
            &f("bgpd.conf"),
            "-i",
            &f("bgpd.pid"),
            "--vty_socket",
            &f(""),
            "-u",
            "frr",
            "-g",
            "frr",
            "-p",
            "179",
            "--no_zebra",
        ]);
        self.procs
            .push(Daemon::spawn("bgpd", b, &self.spec.dir.join("bgpd.log"))?);
        Ok(())
    }

    /// Whether it installs routes in the kernel.
    pub fn kernel(&self) -> bool {
        self.kernel
    }

    /// Pins every thread of its processes to CPU `cpu` (`taskset -a`), as the RIB-only
    /// figures are taken: one core each, so CPU seconds and work time compare.
    pub fn pin(&self, cpu: usize) -> Result<()> {
        for pid in self.pids() {
            run(
                "taskset",
                &["-a", "-cp", &cpu.to_string(), &pid.to_string()],
            )?;
        }
        Ok(())
    }

    /// Its kind.
    pub fn kind(&self) -> DutKind {
        self.spec.kind
    }

    /// Its process ids (none for the null daemon, which runs in this process).
    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().filter_map(Daemon::pid).collect()
    }

    /// Stops it as an administrator would (SIGTERM; FRR's bgpd before zebra).
    pub fn stop(&mut self) {
        while let Some(mut d) = self.procs.pop() {
            d.stop(Duration::from_secs(30));
        }
        self.sink = None;
    }

    /// Kills it at once (SIGKILL, by PID), as a crash would; the kernel routes stay.
    pub fn kill(&mut self) {
        while let Some(mut d) = self.procs.pop() {
            d.kill();
        }
        self.sink = None;
    }

    /// What it was started with.
    pub fn spec(&self) -> &DutSpec {
        &self.spec
    }

    /// Starts it again after [`Dut::stop`], in recovery mode.
    pub fn restart(&mut self, ns: &Netns) -> Result<()> {
        self.stop();
        let fresh = Dut::start_with(ns, &self.spec, true, self.kernel)?;
        *self = fresh;
        Ok(())
    }

    /// Whether all its processes are still running.
    pub fn alive(&mut self) -> bool {
        self.procs.iter_mut().all(Daemon::is_running)
    }

    /// Sessions established, as the daemon reports them (None: cannot tell now).
    pub fn established(&self) -> Option<usize> {
        match self.spec.kind {
            DutKind::Null => self.sink.as_ref().map(Sink::established),
            _ => None,
        }
    }

    /// How many prefixes its RIB holds, from its own CLI: tern's accepted prefixes,
    /// BIRD's networks, the BGP routes in FRR zebra's RIB, GoBGP's destinations (IPv4 plus IPv6).
    pub fn rib_count(&self) -> Result<u64> {
        let d = |f: &str| self.spec.dir.join(f).to_string_lossy().into_owned();
        let out = |program: &str, args: &[&str]| -> Result<String> {
            let o = run(program, args)?;
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        };
        match self.spec.kind {
            // `tern status`: its per-peer counts are kept as paths come and go. (`tern
            // routes --count` walks the RIB: at a million routes, polled every 10 ms,
            // that was 15 times the table's own work.)
            DutKind::Tern => {
                let s = out(
                    &self.spec.tern.to_string_lossy(),
                    &["status", "-o", "json", "--socket", &d("tern.sock")],
                )?;
                let v: serde_json::Value = serde_json::from_str(&s)
                    .map_err(|e| Error::Lab(format!("tern status -o json: {e}")))?;
                Ok(v.get("peers")
                    .and_then(|p| p.as_array())
                    .map(|ps| {
                        ps.iter()
                            .filter_map(|p| p.get("prefixes_accepted").and_then(|n| n.as_u64()))
                            .sum()
                    })
                    .unwrap_or(0))
            }
            DutKind::Bird => {
                let s = out("birdc", &["-s", &d("bird.ctl"), "show", "route", "count"])?;
                Ok(parse_bird_count(&s))
            }
            DutKind::Frr if !self.kernel => {
                // No zebra: bgpd's own count (prefixes parsed, before best path).
                let mut n = 0;
                for cmd in [
                    "show bgp ipv4 unicast summary json",
                    "show bgp ipv6 unicast summary json",
                ] {
                    let s = out(
                        "vtysh",
                        &["--vty_socket", &d("frr"), "-d", "bgpd", "-c", cmd],
                    )?;
                    n += parse_bgpd_rib_count(&s);
                }
                Ok(n)
            }
            DutKind::Frr => {
                // zebra's RIB: bgpd hands a route over once its best path is chosen;
                // bgpd's own `ribCount` counts prefixes as soon as they are parsed.
                let mut n = 0;
                for cmd in ["show ip route summary json", "show ipv6 route summary json"] {
                    let s = out(
                        "vtysh",
                        &["--vty_socket", &d("frr"), "-d", "zebra", "-c", cmd],
                    )?;
                    n += parse_zebra_bgp_count(&s);
                }
                Ok(n)
            }
            DutKind::Gobgp => {
                let target = format!("unix://{}", d("gobgp.sock"));
                let mut n = 0;
                for fam in ["ipv4", "ipv6"] {
                    let s = out(
                        "gobgp",
                        &["--target", &target, "global", "rib", "summary", "-a", fam],
                    )?;
                    n += parse_gobgp_count(&s);
                }
                Ok(n)
            }
            DutKind::Null => Ok(self
                .sink
                .as_ref()
                .map(|s| u64::try_from(s.count()).unwrap_or(0))
                .unwrap_or(0)),
        }
    }

    /// The tail of its logs, for error messages.
    pub fn log_tail(&self) -> String {
        let mut s = String::new();
        for f in [
            "tern.log",
            "bird.log",
            "gobgpd.log",
            "zebra.log",
            "bgpd.log",
        ] {
            if let Ok(t) = std::fs::read_to_string(self.spec.dir.join(f)) {
                let lines: Vec<&str> = t.lines().collect();
                let tail = lines.get(lines.len().saturating_sub(15)..).unwrap_or(&[]);
                let _ = writeln!(s, "--- {f} (last lines)\n{}", tail.join("\n"));
            }
        }
        s
    }

    /// Its namespace's name.
    pub fn namespace(&self) -> &str {
        &self.ns_name
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }
}

/// Sums "… for N networks in table …" lines of `birdc show route count`.
pub fn parse_bird_count(s: &str) -> u64 {
    s.lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(" for ")?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Sums the RIB counts of BGP routes (`ebgp`, `ibgp`) in zebra's `show ip route
/// summary json`.
pub fn parse_zebra_bgp_count(s: &str) -> u64 {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(s) else {
        return 0;
    };
    v.get("routes")
        .and_then(|r| r.as_array())
        .map(|rs| {
            rs.iter()
                .filter(|r| {
                    r.get("type")
                        .and_then(|t| t.as_str())
                        .is_some_and(|t| t.contains("bgp"))
                })
                .filter_map(|r| r.get("rib").and_then(|n| n.as_u64()))
                .sum()
        })
        .unwrap_or(0)
}

/// Reads `ribCount` from bgpd's `show bgp ipv4 unicast summary json` (0 when the
/// family has no peers: bgpd then answers `{}`).
pub fn parse_bgpd_rib_count(s: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(s)
        .ok()
        .and_then(|v| v.get("ribCount").and_then(|n| n.as_u64()))
        .unwrap_or(0)
}

/// Reads "Destination: N" from `gobgp global rib summary`.
pub fn parse_gobgp_count(s: &str) -> u64 {
    s.split("Destination:")
        .nth(1)
        .and_then(|r| {
            r.split(|c: char| c == ',' || c.is_whitespace())
                .find(|w| !w.is_empty())
        })
        .and_then(|w| w.parse().ok())
        .unwrap_or(0)
}

mod conf;
#[cfg(test)]
mod tests;
