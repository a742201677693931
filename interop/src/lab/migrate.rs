//! Moving a lab node from Calico-style BIRD to tern and back, as
//! `docs/migrating-from-bird.md` moves a cluster node, and watching what the rest of
//! the lab sees meanwhile: whether the other nodes' kernels keep the node's block
//! ([`RouteWatch`]) and how many pings across the node are lost ([`PingRun`]).
//!
//! BIRD is stopped with SIGKILL because that is how it ends when its calico-node pod
//! goes: the container's PID 1 is runit's `runsvdir`, which exits at once on SIGTERM
//! without stopping its services, and the kernel then kills the rest of the container's
//! PID namespace. So BIRD sends no NOTIFICATION, and its peers keep its routes by
//! graceful restart. tern is stopped with SIGTERM, as kubelet stops its pod.

use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use super::route_watch::{RouteGaps, RouteWatch};
use super::{peerconf, Lab, NodeKind};
use crate::peers::{Kind, Peer};
use crate::process::Daemon;
use crate::{Error, Result};

impl Lab {
    /// Kills node `index`'s BIRD (SIGKILL, as a calico-node pod's end kills it). Its
    /// kernel routes stay (Calico's `persist`); its peers keep its routes for its
    /// graceful-restart time.
    pub fn kill_bird_node(&mut self, index: usize) -> Result<()> {
        let mut bird = self
            .bird_nodes
            .remove(&index)
            .ok_or_else(|| Error::Lab(format!("node {index} runs no BIRD")))?;
        bird.kill();
        Ok(())
    }

    /// Starts tern on node `index`, whose BIRD is gone: from now on it is a tern node
    /// (convergence checks expect tern's sessions and its blackholes). As the DaemonSet
    /// configures it, tern answers on BIRD's control socket in BIRD's place (the node's
    /// `bird.ctl`, where the killed BIRD left its socket file), so `birdc` against the
    /// node sees tern's sessions.
    pub fn start_tern_in_place_of_bird(&mut self, index: usize) -> Result<()> {
        if self.bird_nodes.contains_key(&index) {
            return Err(Error::Lab(format!(
                "node {index} still runs BIRD: stop it first (both listen on port 179)"
            )));
        }
        let n = self
            .nodes
            .get_mut(index.wrapping_sub(1))
            .ok_or_else(|| Error::Lab(format!("no node {index}")))?;
        n.kind = NodeKind::Tern;
        self.restart_migrated_tern(index)
    }

    /// Starts (or starts again) tern on a node moved from BIRD, with BIRD's control
    /// socket (see [`Lab::start_tern_in_place_of_bird`]).
    pub fn restart_migrated_tern(&mut self, index: usize) -> Result<()> {
        let n = self.node(index)?.clone();
        let yaml = n.dir.join("tern.yaml");
        let text = format!(
            "{}bird_socket: {}\n",
            n.tern_yaml(&self.spec),
            n.dir.join("bird.ctl").display()
        );
        std::fs::write(&yaml, text).map_err(|source| Error::Spawn {
            command: format!("write {}", yaml.display()),
            source,
        })?;
        let mut c = self.ns(&n.ns)?.command(&self.spec.tern.to_string_lossy());
        c.args(["run", "--config"]).arg(&yaml);
        c.env("RUST_LOG", "info");
        let d = Daemon::spawn(&n.name, c, &n.dir.join("tern.log"))?;
        if let Some(slot) = self.terns.get_mut(index - 1) {
            *slot = Some(d);
        }
        Ok(())
    }

    /// Stops node `index`'s tern as kubelet stops its pod: SIGTERM, up to `grace` to
    /// exit, then SIGKILL. Its kernel routes stay.
    pub fn stop_tern(&mut self, index: usize, grace: Duration) {
        if let Some(slot) = self.terns.get_mut(index.wrapping_sub(1)) {
            if let Some(mut d) = slot.take() {
                d.stop(grace);
            }
        }
    }

    /// Starts BIRD with Calico's configuration on node `index` again, once its tern is
    /// stopped: from now on it is a Calico-style BIRD node.
    pub fn start_bird_in_place_of_tern(&mut self, index: usize) -> Result<()> {
        let i = index.wrapping_sub(1);
        if self.terns.get(i).is_some_and(Option::is_some) {
            return Err(Error::Lab(format!(
                "node {index} still runs tern: stop it first (both listen on port 179)"
            )));
        }
        let n = self
            .nodes
            .get_mut(i)
            .ok_or_else(|| Error::Lab(format!("no node {index}")))?;
        n.kind = NodeKind::CalicoBird;
        let n = n.clone();
        let conf = peerconf::calico_bird_config(&self.spec, &n);
        // `-R` as calico-node runs BIRD: it starts in graceful-restart recovery, so its
        // OPEN tells the peers (which kept the node's routes) to hold them until its
        // End-of-RIB instead of flushing them at once (RFC 4724 §4.2).
        let bird = Peer::start_with(Kind::Bird, self.ns(&n.ns)?, &n.dir, &conf, &["-R"])?;
        self.bird_nodes.insert(index, bird);
        Ok(())
    }
}

/// Pings sent and answered by a [`PingRun`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingCount {
    /// Echo requests sent.
    pub sent: u64,
    /// Echo replies received.
    pub answered: u64,
}

impl PingCount {
    /// Requests without a reply.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.answered)
    }
}

/// `ping` from a pod's namespace every 100 ms, running until [`PingRun::finish`].
#[derive(Debug)]
pub struct PingRun {
    child: Option<Child>,
    what: String,
}

impl PingRun {
    /// Starts pinging `to` from namespace `from_ns`.
    pub fn start(from_ns: &str, to: &str) -> Result<PingRun> {
        let what = format!("ip netns exec {from_ns} ping -n -i 0.1 -W 1 {to}");
        // `ip netns exec` execs ping: the child's PID is ping's, which SIGINT ends with
        // its summary line.
        let child = Command::new("ip")
            .args([
                "netns", "exec", from_ns, "ping", "-n", "-i", "0.1", "-W", "1", to,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| Error::Spawn {
                command: what.clone(),
                source,
            })?;
        Ok(PingRun {
            child: Some(child),
            what,
        })
    }

    /// Stops ping (SIGINT) and reads its summary.
    pub fn finish(mut self) -> Result<PingCount> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| Error::Lab(format!("{}: already finished", self.what)))?;
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
        let mut out = String::new();
        if let Some(mut s) = child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        let _ = child.wait();
        parse_ping_summary(&out)
            .ok_or_else(|| Error::Lab(format!("{}: no summary in its output: {out}", self.what)))
    }
}

impl Drop for PingRun {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `N packets transmitted, M received, ...` (iputils ping's summary).
pub fn parse_ping_summary(out: &str) -> Option<PingCount> {
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut numbers = line
        .split(',')
        .filter_map(|part| part.split_whitespace().next()?.parse::<u64>().ok());
    Some(PingCount {
        sent: numbers.next()?,
        answered: numbers.next()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_summaries_are_read() {
        let out = "PING 198.18.4.1 (198.18.4.1) 56(84) bytes of data.\n\n--- 198.18.4.1 ping statistics ---\n\
                   120 packets transmitted, 117 received, +3 errors, 2.5% packet loss, time 12000ms\n";
        let c = parse_ping_summary(out);
        assert_eq!(
            c,
            Some(PingCount {
                sent: 120,
                answered: 117
            })
        );
        assert_eq!(c.map(|c| c.lost()), Some(3));
        assert_eq!(
            parse_ping_summary("ping: connect: Network is unreachable"),
            None
        );
    }
}
