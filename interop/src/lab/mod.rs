//! Labs: a Calico-style cluster in network namespaces. One namespace per node running
//! tern (or BIRD configured as Calico's confd configures it) with a generated
//! `tern.yaml` and a shared `cluster.yaml`; a switch namespace whose bridge is the
//! nodes' LAN (and a router to a second subnet, for nodes without layer-2 reachability);
//! a top-of-rack router (BIRD, FRR or GoBGP) or a BIRD route reflector; and per node
//! "pods": namespaces with a veth to the node, an address from a block, and the routes
//! Calico sets up (169.254.1.1 as default gateway, answered by proxy ARP on the host
//! side; the host side's link-local address for IPv6).
//!
//! [`Lab::up`] builds it, [`Lab::wait_converged`] waits until every node's kernel FIB
//! holds what it must, [`Lab::ping_matrix`] sends packets between every pair of pods.
//! Everything is torn down when the [`Lab`] drops, unless [`Lab::detach`] hands it to
//! `tern-lab down` (see [`state`]).

pub mod kdd;
pub mod kube;
pub mod migrate;
pub mod peerconf;
pub mod plan;
pub mod probe;
pub mod resources;
pub mod route_watch;
pub mod state;
pub mod wine;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use plan::{LabDatastore, LabSpec, NodeKind, NodePlan, PodPlan, Topology};

use crate::netns::Netns;
use crate::peers::{Kind, Peer};
use crate::process::Daemon;
use crate::{Error, Result};

/// A running lab. Fields drop in order: daemons before the namespaces they run in.
#[derive(Debug)]
pub struct Lab {
    spec: LabSpec,
    nodes: Vec<NodePlan>,
    /// tern of each node (None: a BIRD node, or stopped).
    terns: Vec<Option<Daemon>>,
    /// BIRD of each Calico-style BIRD node, by node index.
    bird_nodes: BTreeMap<usize, Peer>,
    tor: Option<Peer>,
    reflector: Option<Peer>,
    /// The Kubernetes API server stand-in (Kubernetes datastore).
    kube: Option<kube::KubeApi>,
    namespaces: BTreeMap<String, Netns>,
    started: Instant,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Spawn {
        command: what,
        source,
    }
}

/// Sets sysctls inside a namespace.
fn sysctl(ns: &Netns, settings: &[String]) -> Result<()> {
    let mut args = vec!["-qw"];
    args.extend(settings.iter().map(String::as_str));
    ns.exec("sysctl", &args).map(|_| ())
}

impl Lab {
    /// Builds the lab and starts every daemon; returns at once (see
    /// [`Lab::wait_converged`]). On error, whatever was made is removed.
    pub fn up(spec: LabSpec) -> Result<Lab> {
        spec.check()?;
        if let Some(kind) = spec.tor {
            for p in kind.programs() {
                if !crate::have_program(p) {
                    return Err(Error::Spec(format!(
                        "--tor {}: {p} is not installed",
                        kind.name()
                    )));
                }
            }
        }
        if (spec.bird_nodes > 0 || spec.topology == Topology::BirdReflector)
            && !crate::have_program("bird")
        {
            return Err(Error::Spec("BIRD is not installed (bird2)".into()));
        }
        if !spec.tern.is_file() {
            return Err(Error::Spec(format!(
                "tern binary {} not found (build it: cargo build --release)",
                spec.tern.display()
            )));
        }
        std::fs::create_dir_all(&spec.dir).map_err(io(format!("mkdir {}", spec.dir.display())))?;
        if let Some(pw) = &spec.tor_password {
            let f = spec.tor_password_file();
            std::fs::write(&f, format!("{pw}\n")).map_err(io(format!("write {}", f.display())))?;
        }
        std::fs::write(spec.cluster_file(), plan::cluster_yaml(&spec))
            .map_err(io(format!("write {}", spec.cluster_file().display())))?;
        let nodes = spec.node_plans();
        let mut lab = Lab {
            terns: nodes.iter().map(|_| None).collect(),
            spec,
            nodes,
            bird_nodes: BTreeMap::new(),
            tor: None,
            reflector: None,
            kube: None,
            namespaces: BTreeMap::new(),
            started: Instant::now(),
        };
        lab.build_network()?;
        if let plan::LabDatastore::Kubernetes { separate_process } = lab.spec.datastore {
            let objects = kube::objects(&lab.spec)?;
            let sw = lab.ns(&lab.spec.switch_ns())?;
            lab.kube = Some(kube::start(&lab.spec, sw, objects, separate_process)?);
        }
        lab.start_daemons()?;
        Ok(lab)
    }

    fn add_ns(&mut self, name: &str) -> Result<&Netns> {
        let ns = Netns::create(name)?;
        Ok(self.namespaces.entry(name.to_string()).or_insert(ns))
    }

    fn ns(&self, name: &str) -> Result<&Netns> {
        self.namespaces
            .get(name)
            .ok_or_else(|| Error::Lab(format!("no namespace {name}")))
    }

    fn build_network(&mut self) -> Result<()> {
        let s = self.spec.clone();
        let sw = self.add_ns(&s.switch_ns())?;
        sysctl(
            sw,
            &[
                "net.ipv4.ip_forward=1".into(),
                "net.ipv6.conf.all.forwarding=1".into(),
                "net.ipv6.conf.default.accept_dad=0".into(),
            ],
        )?;
        for (br, v4, v6) in [
            ("br0", plan::GATEWAY_V4, plan::GATEWAY_V6),
            ("br1", plan::FAR_GATEWAY_V4, plan::FAR_GATEWAY_V6),
        ] {
            if br == "br1" && s.far_nodes == 0 {
                continue;
            }
            sw.ip(&["link", "add", br, "type", "bridge"])?;
            sw.ip(&["link", "set", br, "up"])?;
            sw.add_addr(br, &format!("{v4}/24"))?;
            if s.ipv6 {
                sw.add_addr(br, &format!("{v6}/64"))?;
            }
        }
        // Routers on the LAN: the ToR and the BIRD reflector.
        let mut routers = Vec::new();
        if s.tor.is_some() {
            routers.push((s.tor_ns(), plan::TOR_V4, plan::TOR_V6));
        }
        if s.topology == Topology::BirdReflector {
            routers.push((s.rr_ns(), plan::BIRD_RR_V4, plan::BIRD_RR_V6));
        }
        for (name, v4, v6) in routers {
            self.add_ns(&name)?;
            self.plug(&name, "br0", v4, s.ipv6.then_some(v6))?;
        }
        for n in self.nodes.clone() {
            self.add_ns(&n.ns)?;
            sysctl(
                self.ns(&n.ns)?,
                &[
                    "net.ipv4.ip_forward=1".into(),
                    "net.ipv6.conf.all.forwarding=1".into(),
                    "net.ipv6.conf.default.accept_dad=0".into(),
                    "net.ipv6.conf.all.accept_dad=0".into(),
                ],
            )?;
            let br = if n.far { "br1" } else { "br0" };
            self.plug(&n.ns, br, &n.v4, n.v6.as_deref())?;
            let node = self.ns(&n.ns)?;
            node.ip(&["route", "add", "default", "via", n.gateway_v4()])?;
            if n.v6.is_some() {
                node.ip(&["-6", "route", "add", "default", "via", n.gateway_v6()])?;
            }
            for pod in &n.pods {
                self.add_pod(&n, pod)?;
            }
        }
        Ok(())
    }

    /// Connects namespace `name` to bridge `br` of the switch with `eth0` and addresses.
    fn plug(&self, name: &str, br: &str, v4: &str, v6: Option<&str>) -> Result<()> {
        let ns = self.ns(name)?;
        let sw = self.ns(&self.spec.switch_ns())?;
        // The switch-side name must be unique in the switch: derive it from the
        // namespace name without the lab prefix.
        let port = format!("p-{}", &name[self.spec.prefix.len()..]);
        ns.veth_to("eth0", sw, &port)?;
        sw.ip(&["link", "set", &port, "master", br])?;
        ns.add_addr("eth0", &format!("{v4}/24"))?;
        if let Some(v6) = v6 {
            ns.add_addr("eth0", &format!("{v6}/64"))?;
        }
        Ok(())
    }

    /// A pod as Calico wires it: a veth whose host side (`cali*`, MAC ee:ee:ee:ee:ee:ee)
    /// answers ARP for 169.254.1.1 by proxy ARP; a /32 (/128) route to the pod on the
    /// host; in the pod its address on eth0 and a default route via 169.254.1.1 (IPv6:
    /// via the host side's link-local address).
    fn add_pod(&mut self, n: &NodePlan, pod: &PodPlan) -> Result<()> {
        let podns = self.add_ns(&pod.ns)?;
        sysctl(
            podns,
            &[
                "net.ipv6.conf.all.accept_dad=0".into(),
                "net.ipv6.conf.default.accept_dad=0".into(),
            ],
        )?;
        let node = self.ns(&n.ns)?;
        node.ip(&[
            "link",
            "add",
            &pod.host_if,
            "address",
            plan::HOST_VETH_MAC,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pod.ns,
        ])?;
        sysctl(
            node,
            &[
                format!("net.ipv4.conf.{}.proxy_arp=1", pod.host_if),
                format!("net.ipv4.neigh.{}.proxy_delay=0", pod.host_if),
            ],
        )?;
        node.ip(&["link", "set", &pod.host_if, "up"])?;
        let podns = self.ns(&pod.ns)?;
        podns.ip(&["link", "set", "eth0", "up"])?;
        podns.add_addr("eth0", &format!("{}/32", pod.v4))?;
        podns.ip(&[
            "route",
            "add",
            plan::POD_GATEWAY_V4,
            "dev",
            "eth0",
            "scope",
            "link",
        ])?;
        podns.ip(&["route", "add", "default", "via", plan::POD_GATEWAY_V4])?;
        node.ip(&[
            "route",
            "add",
            &format!("{}/32", pod.v4),
            "dev",
            &pod.host_if,
            "scope",
            "link",
        ])?;
        if let Some(v6) = &pod.v6 {
            podns.add_addr("eth0", &format!("{v6}/128"))?;
            podns.ip(&[
                "-6",
                "route",
                "add",
                "default",
                "via",
                plan::POD_GATEWAY_V6,
                "dev",
                "eth0",
            ])?;
            node.ip(&[
                "-6",
                "route",
                "add",
                &format!("{v6}/128"),
                "dev",
                &pod.host_if,
            ])?;
        }
        Ok(())
    }

    fn start_daemons(&mut self) -> Result<()> {
        let s = self.spec.clone();
        self.started = Instant::now();
        for i in 0..self.nodes.len() {
            if self.nodes[i].kind == NodeKind::Tern {
                self.start_tern(i + 1)?;
            }
        }
        for n in self.nodes.clone() {
            if n.kind == NodeKind::CalicoBird {
                let conf = peerconf::calico_bird_config(&s, &n);
                let bird = Peer::start(Kind::Bird, self.ns(&n.ns)?, &n.dir, &conf)?;
                self.bird_nodes.insert(n.index, bird);
            }
        }
        if let Some(kind) = s.tor {
            let conf = peerconf::tor_config(kind, &s);
            let tor = Peer::start(kind, self.ns(&s.tor_ns())?, &s.dir.join("tor"), &conf)?;
            if kind == Kind::Gobgp {
                for words in peerconf::gobgp_announcements(&s) {
                    let w: Vec<&str> = words.iter().map(String::as_str).collect();
                    tor.cli(&w)?;
                }
            }
            self.tor = Some(tor);
        }
        if s.topology == Topology::BirdReflector {
            let conf = peerconf::bird_reflector_config(&s);
            self.reflector = Some(Peer::start(
                Kind::Bird,
                self.ns(&s.rr_ns())?,
                &s.dir.join("rr"),
                &conf,
            )?);
        }
        Ok(())
    }

    /// Starts (or restarts) tern on node `index` (1-based).
    pub fn start_tern(&mut self, index: usize) -> Result<()> {
        let n = self.node(index)?.clone();
        if n.kind != NodeKind::Tern {
            return Err(Error::Lab(format!("{} runs BIRD, not tern", n.name)));
        }
        std::fs::create_dir_all(&n.dir).map_err(io(format!("mkdir {}", n.dir.display())))?;
        let yaml = n.dir.join("tern.yaml");
        std::fs::write(&yaml, n.tern_yaml(&self.spec))
            .map_err(io(format!("write {}", yaml.display())))?;
        let mut c = self.ns(&n.ns)?.command(&self.spec.tern.to_string_lossy());
        c.args(["run", "--config"]).arg(&yaml);
        c.env("RUST_LOG", "info");
        let d = Daemon::spawn(&n.name, c, &n.dir.join("tern.log"))?;
        if let Some(slot) = self.terns.get_mut(index - 1) {
            *slot = Some(d);
        }
        Ok(())
    }

    /// Kills tern on node `index` with SIGKILL, as a crash would.
    pub fn kill_tern(&mut self, index: usize) {
        if let Some(Some(d)) = self.terns.get_mut(index.wrapping_sub(1)) {
            d.kill();
        }
    }

    /// The process id of node `index`'s tern, while it runs.
    pub fn tern_pid(&self, index: usize) -> Option<u32> {
        self.terns
            .get(index.wrapping_sub(1))
            .and_then(|t| t.as_ref())
            .and_then(Daemon::pid)
    }

    /// The in-process Kubernetes API server stand-in, when the lab has one.
    pub fn kube(&mut self) -> Option<&mut crate::kubeapi::ApiServer> {
        match &mut self.kube {
            Some(kube::KubeApi::InProcess(s)) => Some(s),
            _ => None,
        }
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &LabSpec {
        &self.spec
    }

    /// Every node.
    pub fn nodes(&self) -> &[NodePlan] {
        &self.nodes
    }

    /// Node `index` (1-based).
    pub fn node(&self, index: usize) -> Result<&NodePlan> {
        self.nodes
            .get(index.wrapping_sub(1))
            .ok_or_else(|| Error::Lab(format!("no node {index}")))
    }

    /// Every pod of every node.
    pub fn pods(&self) -> Vec<PodPlan> {
        self.nodes.iter().flat_map(|n| n.pods.clone()).collect()
    }

    /// The ToR, when there is one.
    pub fn tor(&self) -> Option<&Peer> {
        self.tor.as_ref()
    }

    /// The BIRD route reflector, when there is one.
    pub fn reflector(&self) -> Option<&Peer> {
        self.reflector.as_ref()
    }

    /// The BIRD of a Calico-style BIRD node.
    pub fn bird_node(&self, index: usize) -> Option<&Peer> {
        self.bird_nodes.get(&index)
    }

    /// Time since the daemons were started.
    pub fn since_start(&self) -> Duration {
        self.started.elapsed()
    }

    /// The log of node `index`'s tern.
    pub fn tern_log(&self, index: usize) -> String {
        self.node(index)
            .map(|n| std::fs::read_to_string(n.dir.join("tern.log")).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The last `lines` lines of every node's tern log, each under a `--- node log
    /// (last lines) ---` header: what a failed lab test shows.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let log = self.tern_log(n.index);
            let tail: Vec<&str> = log.lines().rev().take(lines).collect();
            out.push_str(&format!("--- {} log (last lines) ---\n", n.name));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Runs `tern ARGS --socket <node's socket>`; (exit code, stdout + stderr).
    pub fn tern_cli(&self, index: usize, args: &[&str]) -> (i32, String) {
        match self.node(index) {
            Ok(n) => probe::tern_cli(&self.spec.tern, &n.socket(), args),
            Err(e) => (-1, e.to_string()),
        }
    }

    /// Node `index`'s kernel routes (main table, both families).
    pub fn routes(&self, index: usize) -> Result<probe::Routes> {
        let n = self.node(index)?;
        probe::Routes::read(self.ns(&n.ns)?)
    }

    /// Runs a program inside node `index`'s namespace.
    pub fn exec_on_node(&self, index: usize, program: &str, args: &[&str]) -> Result<String> {
        let n = self.node(index)?;
        let out = self.ns(&n.ns)?.exec(program, args)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until every node's FIB holds the routes it must (see
    /// [`probe::missing_routes`]) and every tern session is Established; returns the time
    /// since the daemons started. On timeout the error lists what is still missing.
    pub fn wait_converged(&self, timeout: Duration) -> Result<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            let missing = self.not_converged();
            if missing.is_empty() {
                return Ok(self.since_start());
            }
            if Instant::now() >= deadline {
                return Err(Error::Lab(format!(
                    "not converged after {:.1} s:\n  {}",
                    self.since_start().as_secs_f64(),
                    missing.join("\n  ")
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What is still missing for convergence, in words (empty: converged).
    pub fn not_converged(&self) -> Vec<String> {
        let mut out = Vec::new();
        for n in &self.nodes {
            match self.routes(n.index) {
                Ok(r) => {
                    for m in probe::missing_routes(&self.spec, &self.nodes, n, &r) {
                        out.push(format!("{}: {m}", n.name));
                    }
                }
                Err(e) => out.push(format!("{}: {e}", n.name)),
            }
            if n.kind == NodeKind::Tern && self.terns[n.index - 1].is_some() {
                if let Some(why) = probe::sessions_down(&self.spec.tern, &n.socket()) {
                    out.push(format!("{}: {why}", n.name));
                }
            }
        }
        out
    }

    /// Pings every pod from every other pod (IPv4, and IPv6 when dual stack).
    pub fn ping_matrix(&self) -> Result<probe::Matrix> {
        probe::ping_matrix(&self.pods(), self.spec.ipv6)
    }

    /// Leaves the lab running after this value is gone and records it for
    /// `tern-lab status | ping | down`. Returns the state file.
    pub fn detach(mut self) -> Result<PathBuf> {
        if let Some(kube::KubeApi::InProcess(_)) = self.kube {
            return Err(Error::Lab(
                "a lab whose API server runs in this process cannot outlive it (use LabDatastore::Kubernetes { separate_process: true })".into(),
            ));
        }
        let mut st = state::State::new(&self.spec, &self.nodes);
        for (i, t) in std::mem::take(&mut self.terns).into_iter().enumerate() {
            if let Some(pid) = t.and_then(Daemon::detach) {
                st.pids.push(state::Pid {
                    pid,
                    what: format!("tern on node-{}", i + 1),
                });
            }
        }
        for (i, b) in std::mem::take(&mut self.bird_nodes) {
            if let Some(pid) = b.detach() {
                st.pids.push(state::Pid {
                    pid,
                    what: format!("bird on node-{i}"),
                });
            }
        }
        for (what, p) in [
            ("tor", self.tor.take()),
            ("reflector", self.reflector.take()),
        ] {
            if let Some(pid) = p.and_then(Peer::detach) {
                st.pids.push(state::Pid {
                    pid,
                    what: what.into(),
                });
            }
        }
        match self.kube.take() {
            Some(kube::KubeApi::Process(d)) => {
                if let Some(pid) = d.detach() {
                    st.pids.push(state::Pid {
                        pid,
                        what: "kube-apiserver".into(),
                    });
                }
            }
            Some(kube::KubeApi::InProcess(_)) | None => {}
        }
        for (_, ns) in std::mem::take(&mut self.namespaces) {
            st.namespaces.push(ns.detach());
        }
        st.save(&self.spec.dir)
    }
}

/// Where `tern` is: next to the running executable (cargo puts `tern` and `tern-lab` in
/// one directory), else on PATH.
pub fn find_tern() -> PathBuf {
    if let Ok(me) = std::env::current_exe() {
        let sibling = me.with_file_name("tern");
        if sibling.is_file() {
            return sibling;
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if d.join("tern").is_file() {
                return d.join("tern");
            }
        }
    }
    Path::new("tern").to_path_buf()
}
