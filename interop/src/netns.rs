//! Network namespaces owned by one test: created with a per-test name prefix, linked by
//! veth pairs created directly between two namespaces (nothing appears in the host
//! namespace), and deleted when the guard drops.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output};

use crate::{Error, Result};

mod interrupt;
pub use interrupt::clean_up_on_signals;

/// Directory where `ip netns` keeps its named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Runs a command and returns its output, or an error that quotes it.
pub fn run(program: &str, args: &[&str]) -> Result<Output> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// A named network namespace, deleted (with everything in it) on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` with its loopback up. A stale namespace of the same name,
    /// left by a crashed earlier run of the same test, is deleted first.
    pub fn create(name: &str) -> Result<Netns> {
        if std::path::Path::new(NETNS_DIR).join(name).exists() {
            let _ = run("ip", &["netns", "del", name]);
        }
        run("ip", &["netns", "add", name])?;
        interrupt::own(name);
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Adds the bridge `br0`, up: the namespace becomes a LAN switch that nodes join
    /// through veth ports set `master br0`.
    pub fn add_bridge(&self) -> Result<()> {
        self.ip(&["link", "add", "br0", "type", "bridge"])?;
        self.ip(&["link", "set", "br0", "up"])?;
        Ok(())
    }

    /// Adds a stand-in for Calico's IPIP device `tunl0` (a veth pair, up, since test
    /// kernels may lack the ipip module): enough for routes through it to be accepted.
    pub fn add_tunl0_standin(&self) -> Result<()> {
        self.ip(&[
            "link",
            "add",
            "tunl0",
            "type",
            "veth",
            "peer",
            "name",
            "tunl0-peer",
        ])?;
        self.ip(&["link", "set", "tunl0-peer", "up"])?;
        self.ip(&["link", "set", "tunl0", "up"])?;
        Ok(())
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS…` (addresses, links, routes inside the namespace).
    pub fn ip(&self, args: &[&str]) -> Result<Output> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Runs a program inside the namespace and waits for it.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<Output> {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// A `Command` that runs `program` inside the namespace (for long-running daemons:
    /// hand it to [`crate::process::Daemon::spawn`]).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.name.as_str(), program]);
        c
    }

    /// Creates a veth pair with one end `if_here` in this namespace and the other end
    /// `if_there` in `other`, both up.
    pub fn veth_to(&self, if_here: &str, other: &Netns, if_there: &str) -> Result<()> {
        self.ip(&[
            "link",
            "add",
            if_here,
            "type",
            "veth",
            "peer",
            "name",
            if_there,
            "netns",
            other.name(),
        ])?;
        self.ip(&["link", "set", if_here, "up"])?;
        other.ip(&["link", "set", if_there, "up"])?;
        Ok(())
    }

    /// Adds an address (`198.51.100.1/24`, `2001:db8::1/64`) to an interface. IPv6
    /// addresses skip duplicate address detection so they are usable at once.
    pub fn add_addr(&self, ifname: &str, cidr: &str) -> Result<()> {
        check_lab_address(cidr)?;
        if cidr.contains(':') {
            self.ip(&["addr", "add", cidr, "dev", ifname, "nodad"])?;
        } else {
            self.ip(&["addr", "add", cidr, "dev", ifname])?;
        }
        Ok(())
    }

    /// Gives up ownership: the namespace outlives this guard (a lab left running by
    /// `tern-lab up`, removed later by `tern-lab down`). Returns its name.
    pub fn detach(mut self) -> String {
        let name = std::mem::take(&mut self.name);
        std::mem::forget(self);
        interrupt::disown(&name);
        name
    }

    /// Moves the calling *thread* into this namespace (setns affects one thread only), so
    /// that sockets it opens afterwards (netlink, TCP) live in the namespace. Use it on a
    /// thread dedicated to the test.
    pub fn enter_current_thread(&self) -> Result<()> {
        enter_thread(&self.name)
    }

    /// Runs the future `f` makes to completion on a new thread inside this namespace,
    /// on a current-thread tokio runtime: the sockets it opens live in the namespace,
    /// and the calling thread stays where it is. Two namespaces run at once from two
    /// scoped threads, each calling this.
    pub fn block_on<F, Fut>(&self, f: F) -> Result<Fut::Output>
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future,
        Fut::Output: Send,
    {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter_current_thread()?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        Error::Lab(format!("cannot build a runtime in {}: {e}", self.name))
                    })?;
                Ok(rt.block_on(f()))
            })
            .join()
            .map_err(|_| Error::Lab(format!("the thread in namespace {} panicked", self.name)))?
        })
    }
}

/// A LAN: namespace `lan` holding a bridge, and one namespace per `(name, cidr)` in
/// `nodes`, each joined to the bridge by a veth that is `eth0` inside, with `cidr` on
/// it. Returns the bridge's namespace and the nodes', in order.
pub fn lan(lan: &str, nodes: &[(&str, &str)]) -> Result<(Netns, Vec<Netns>)> {
    let bridge = Netns::create(lan)?;
    bridge.add_bridge()?;
    let mut made = Vec::new();
    for (i, (name, cidr)) in nodes.iter().enumerate() {
        let ns = Netns::create(name)?;
        let port = format!("p{i}");
        bridge.veth_to(&port, &ns, "eth0")?;
        bridge.ip(&["link", "set", &port, "master", "br0"])?;
        ns.add_addr("eth0", cidr)?;
        made.push(ns);
    }
    Ok((bridge, made))
}

/// Moves the calling thread into the namespace named `name` (one under /run/netns
/// that a test made), for threads that do not hold its [`Netns`] guard.
pub fn enter_thread(name: &str) -> Result<()> {
    let path = std::path::Path::new(NETNS_DIR).join(name);
    let file = std::fs::File::open(&path).map_err(|e| Error::Enter {
        name: name.to_string(),
        reason: e.to_string(),
    })?;
    nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
        Error::Enter {
            name: name.to_string(),
            reason: e.to_string(),
        }
    })?;
    assert_thread_in_test_netns()
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
        interrupt::disown(&self.name);
    }
}

/// Refuses (with an error) unless the calling thread's network namespace is one of the
/// named namespaces under /run/netns — i.e. one a test made — and not the machine's own.
/// Code that adds addresses or routes through its own sockets calls this first.
pub fn assert_thread_in_test_netns() -> Result<()> {
    let me = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| {
        Error::NotInTestNamespace(format!("cannot read /proc/thread-self/ns/net: {e}"))
    })?;
    let entries = std::fs::read_dir(NETNS_DIR)
        .map_err(|e| Error::NotInTestNamespace(format!("cannot list {NETNS_DIR}: {e}")))?;
    for entry in entries.flatten() {
        if let Ok(m) = std::fs::metadata(entry.path()) {
            if m.ino() == me.ino() && m.dev() == me.dev() {
                return Ok(());
            }
        }
    }
    Err(Error::NotInTestNamespace(format!(
        "this thread's namespace (inode {}) is not under {NETNS_DIR}",
        me.ino()
    )))
}

/// Checks that an address is inside the ranges tests may use: 198.51.100.0/24,
/// 203.0.113.0/24, 198.18.0.0/15, 2001:db8::/32 (and loopback).
pub fn check_lab_address(cidr: &str) -> Result<()> {
    let addr = cidr.split('/').next().unwrap_or(cidr);
    let ok = match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => {
            let o = a.octets();
            a.is_loopback()
                || (o[0] == 198 && o[1] == 51 && o[2] == 100)
                || (o[0] == 203 && o[1] == 0 && o[2] == 113)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
        }
        Ok(std::net::IpAddr::V6(a)) => {
            let s = a.segments();
            a.is_loopback() || (s[0] == 0x2001 && s[1] == 0x0db8)
        }
        Err(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::NotInTestNamespace(format!(
            "address {cidr} is outside the lab ranges (198.51.100.0/24, 203.0.113.0/24, 198.18.0.0/15, 2001:db8::/32)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_ranges_are_enforced() {
        for ok in [
            "198.51.100.7/24",
            "203.0.113.1",
            "198.19.255.1/32",
            "2001:db8::1/64",
            "127.0.0.1",
        ] {
            assert!(check_lab_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "192.0.2.1/24",
            "10.0.0.1",
            "198.20.0.1",
            "fd00::1/64",
            "2001:db9::1",
            "junk",
        ] {
            assert!(check_lab_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn block_on_runs_inside_the_namespace_and_leaves_the_caller_outside() {
        if let Err(reason) = crate::lab_available() {
            return crate::skip_or_fail("netns_block_on", &reason);
        }
        let ns = Netns::create("tbo-block-on").unwrap_or_else(|e| panic!("{e}"));
        let here = || std::fs::metadata("/proc/thread-self/ns/net").map(|m| m.ino());
        let outside = here().unwrap_or_else(|e| panic!("{e}"));
        let inside = ns
            .block_on(|| async { (here(), assert_thread_in_test_netns().is_ok()) })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(inside.0.unwrap_or_else(|e| panic!("{e}")), outside);
        assert!(inside.1, "the future ran outside a test namespace");
        assert_eq!(here().unwrap_or_else(|e| panic!("{e}")), outside);
    }

    #[test]
    fn the_test_runner_itself_is_not_in_a_test_namespace() {
        // The test process starts in the machine's namespace; the guard must say so.
        if std::path::Path::new(NETNS_DIR).exists() {
            assert!(assert_thread_in_test_netns().is_err());
        }
    }
}
