//! A lab left running by `tern-lab up`: what it made (namespaces, processes by PID) and
//! what `status` and `ping` need (nodes, sockets, pods), kept as `lab.json` in the lab's
//! directory; and `down`, which stops those processes by PID and deletes those
//! namespaces — nothing else.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid as NixPid;
use serde::{Deserialize, Serialize};

use super::plan::{LabSpec, NodeKind, NodePlan, PodPlan};
use crate::netns::{run, NETNS_DIR};
use crate::{Error, Result};

/// File name of the state, inside the lab's directory.
pub const FILE: &str = "lab.json";

/// A process the lab started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pid {
    /// Process id.
    pub pid: u32,
    /// What it is, for messages.
    pub what: String,
}

/// One node, as status needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// `tern` or `bird`.
    pub runs: String,
    /// Its IPv4 address.
    pub v4: String,
    /// tern's control socket, or BIRD's.
    pub socket: PathBuf,
}

/// One pod, as ping needs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pod {
    /// Pod name.
    pub name: String,
    /// Its namespace.
    pub ns: String,
    /// Node it runs on.
    pub node: usize,
    /// Node whose block its address is from.
    pub owner: usize,
    /// IPv4 address.
    pub v4: String,
    /// IPv6 address.
    pub v6: Option<String>,
}

/// The state file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// Namespace prefix.
    pub prefix: String,
    /// The tern binary the lab runs.
    pub tern: PathBuf,
    /// Dual stack.
    pub ipv6: bool,
    /// The ToR's kind and its directory, when there is one.
    pub tor: Option<(String, PathBuf)>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// Namespaces the lab made.
    pub namespaces: Vec<String>,
    /// Processes the lab started.
    pub pids: Vec<Pid>,
}

impl State {
    /// The state of a lab built from `spec` (namespaces and PIDs are added by
    /// [`super::Lab::detach`]).
    pub fn new(spec: &LabSpec, nodes: &[NodePlan]) -> State {
        State {
            prefix: spec.prefix.clone(),
            tern: spec.tern.clone(),
            ipv6: spec.ipv6,
            tor: spec
                .tor
                .map(|k| (k.name().to_string(), spec.dir.join("tor"))),
            nodes: nodes
                .iter()
                .map(|n| Node {
                    name: n.name.clone(),
                    runs: match n.kind {
                        NodeKind::Tern => "tern".into(),
                        NodeKind::CalicoBird => "bird".into(),
                    },
                    v4: n.v4.clone(),
                    socket: match n.kind {
                        NodeKind::Tern => n.socket(),
                        NodeKind::CalicoBird => n.dir.join("bird.ctl"),
                    },
                })
                .collect(),
            pods: nodes
                .iter()
                .flat_map(|n| n.pods.iter())
                .map(|p| Pod {
                    name: p.name.clone(),
                    ns: p.ns.clone(),
                    node: p.node,
                    owner: p.owner,
                    v4: p.v4.clone(),
                    v6: p.v6.clone(),
                })
                .collect(),
            namespaces: Vec::new(),
            pids: Vec::new(),
        }
    }

    /// The pods as the probe wants them.
    pub fn pod_plans(&self) -> Vec<PodPlan> {
        self.pods
            .iter()
            .map(|p| PodPlan {
                name: p.name.clone(),
                ns: p.ns.clone(),
                host_if: String::new(),
                node: p.node,
                owner: p.owner,
                ordinal: 0,
                v4: p.v4.clone(),
                v6: p.v6.clone(),
            })
            .collect()
    }

    /// Writes `dir/lab.json`; returns its path.
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(FILE);
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Lab(format!("cannot encode the lab state: {e}")))?;
        std::fs::write(&path, text).map_err(|source| Error::Spawn {
            command: format!("write {}", path.display()),
            source,
        })?;
        Ok(path)
    }

    /// Reads `dir/lab.json`.
    pub fn load(dir: &Path) -> Result<State> {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::Lab(format!(
                "no lab at {} ({e}): start one with `tern-lab up`",
                path.display()
            ))
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Lab(format!("{}: not a lab state file: {e}", path.display())))
    }
}

/// Whether process `pid` is gone (or a zombie waiting for its parent).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state letter follows the command name's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Stops processes by PID: SIGTERM, up to 5 s, then SIGKILL.
fn stop_pids(pids: &[u32]) {
    for &pid in pids {
        if let Ok(p) = i32::try_from(pid) {
            let _ = kill(NixPid::from_raw(p), Signal::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && !pids.iter().all(|p| gone(*p)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &pid in pids.iter().filter(|p| !gone(**p)) {
        if let Ok(p) = i32::try_from(pid) {
            let _ = kill(NixPid::from_raw(p), Signal::SIGKILL);
        }
    }
}

/// The PIDs of the processes running inside namespace `ns`.
fn pids_in(ns: &str) -> Vec<u32> {
    run("ip", &["netns", "pids", ns])
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Namespaces whose names start with `prefix` (a lab whose state file is lost).
pub fn namespaces_with_prefix(prefix: &str) -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// Removes a lab: stops every process inside its namespaces (by PID: every process the
/// lab started runs in one of them, and a recorded PID that is no longer in one may
/// since belong to someone else), then deletes the namespaces. Returns (processes
/// stopped, namespaces deleted).
pub fn down(namespaces: &[String]) -> (usize, usize) {
    let mut all: Vec<u32> = Vec::new();
    for ns in namespaces {
        all.extend(pids_in(ns));
    }
    all.sort_unstable();
    all.dedup();
    stop_pids(&all);
    let mut deleted = 0;
    for ns in namespaces {
        if run("ip", &["netns", "del", ns]).is_ok() {
            deleted += 1;
        }
    }
    (all.len(), deleted)
}
