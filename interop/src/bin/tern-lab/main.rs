//! `tern-lab`: builds and drives labs of network namespaces: `up` a Calico-style cluster
//! (tern nodes, pods, a ToR), `status`, `ping` (every pod to every pod), `down`; and
//! `capture`, which records BIRD 2, GoBGP and FRR talking BGP (the codec's fixtures);
//! `bench`, which runs tern, BIRD, FRR and GoBGP side by side on the same load;
//! `soak`, which keeps a lab under churn and flaps for minutes while sampling memory;
//! `chart`, which draws SVG pictures from what `bench` and `soak` wrote;
//! `kube-apiserver`, the Kubernetes API server stand-in, in the foreground.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "tern-lab", version, about = "Network-namespace labs for tern")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Where {
    /// Directory of the lab's configs, logs and state.
    #[arg(long, default_value = "/tmp/tern-lab")]
    dir: PathBuf,
    /// Prefix of the lab's namespace names.
    #[arg(long, default_value = "tl-")]
    prefix: String,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Store {
    File,
    Kubernetes,
}

#[derive(Clone, Copy, ValueEnum)]
enum Tor {
    Bird,
    Frr,
    Gobgp,
}

#[derive(Args)]
struct Up {
    #[command(flatten)]
    place: Where,
    /// Number of nodes.
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Node-to-node mesh (the default).
    #[arg(long, conflicts_with_all = ["route_reflectors", "bird_reflector"])]
    mesh: bool,
    /// The first K nodes are tern route reflectors; the rest are their clients.
    #[arg(long, value_name = "K", conflicts_with = "bird_reflector")]
    route_reflectors: Option<usize>,
    /// A BIRD route reflector with every node as its client.
    #[arg(long)]
    bird_reflector: bool,
    /// A top-of-rack router peering with every node (eBGP).
    #[arg(long)]
    tor: Option<Tor>,
    /// Pods per node.
    #[arg(long, default_value_t = 2)]
    pods: usize,
    /// Pods per node with an address borrowed from the next node's block.
    #[arg(long, default_value_t = 0)]
    borrowed: usize,
    /// Dual stack (IPv6 addresses, pool, sessions and pods too).
    #[arg(long)]
    ipv6: bool,
    /// How many of the nodes (the last ones) run BIRD configured as Calico's confd does.
    #[arg(long, default_value_t = 0)]
    bird_nodes: usize,
    /// How many nodes sit on another subnet behind a router (no layer-2 reachability).
    #[arg(long, default_value_t = 0)]
    far_nodes: usize,
    /// Graceful-restart time of the mesh sessions, seconds.
    #[arg(long)]
    restart_time: Option<u32>,
    /// Hold time of the mesh sessions, seconds (keepalive: a third).
    #[arg(long)]
    mesh_hold: Option<u32>,
    /// BFD between the tern nodes at this interval in milliseconds, × 3 (tern.yaml's
    /// `bfd`): a silent node's routes go in about three intervals.
    #[arg(long, value_name = "MS")]
    bfd: Option<u32>,
    /// Where the nodes read the cluster: `file` (cluster.yaml) or `kubernetes` (the
    /// Kubernetes API server stand-in in the switch namespace, in KDD shapes).
    #[arg(long, value_enum, default_value_t = Store::File)]
    datastore: Store,
    /// The tern binary (default: next to tern-lab, then PATH).
    #[arg(long)]
    tern: Option<PathBuf>,
    /// Seconds to wait for the cluster to converge.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

#[derive(Args)]
struct Bench {
    /// Scenarios: prefixes:N (one eBGP peer, N prefixes, then withdrawn), rib:N (the
    /// same table into the RIB only, no kernel routes, the daemon pinned to one core;
    /// CPU once settled), peers:N (N mesh peers with a block and ten /32s each, up to
    /// 10,000), reflector:N (the same peers as route-reflector clients of the daemon,
    /// RIB only: time until every client holds every other's routes), restart:N,
    /// churn:BASE:FLAP:SECS.
    #[arg(default_values = ["prefixes:100000", "peers:200"])]
    scenarios: Vec<String>,
    /// Daemons to compare, alternated within each repetition (null: the injector's
    /// ceiling, tern's decoder alone).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tern,bird,frr,gobgp,null"
    )]
    daemons: Vec<String>,
    /// Repetitions of each scenario per daemon.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Directory for configs and logs of each run.
    #[arg(long, default_value = "/tmp/tern-bench")]
    dir: PathBuf,
    /// Write every run and the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The tern binary (default: next to tern-lab, then PATH). Use a release build.
    #[arg(long)]
    tern: Option<PathBuf>,
    /// Prefix of the namespace names.
    #[arg(long, default_value = "tb-")]
    prefix: String,
    /// How often each daemon's CLI is asked for its RIB size, in milliseconds.
    #[arg(long, default_value_t = 50)]
    poll_ms: u64,
    /// Longest wait for one phase of a run, in seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Drop this percent of the BGP packets at the daemon under test, each way
    /// (nftables), to see it converge over a lossy session.
    #[arg(long, default_value_t = 0)]
    loss: u8,
    /// TCP's minimum retransmission timeout on the link, ms (default: the kernel's 200).
    #[arg(long)]
    rto_min_ms: Option<u32>,
}

#[derive(Args)]
struct Soak {
    /// Minutes of churn and flaps.
    #[arg(long, default_value_t = 20.0)]
    minutes: f64,
    /// Nodes (tern, in a node-to-node mesh with a BIRD ToR).
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Seconds between two readings of every tern's RSS and CPU.
    #[arg(long, default_value_t = 5.0)]
    sample_secs: f64,
    /// Directory for configs, logs and soak.csv.
    #[arg(long, default_value = "/tmp/tern-soak")]
    dir: PathBuf,
    /// Prefix of the namespace names.
    #[arg(long, default_value = "soak-")]
    prefix: String,
    /// The tern binary (default: next to tern-lab, then PATH).
    #[arg(long)]
    tern: Option<PathBuf>,
}

#[derive(Args)]
struct Chart {
    /// A `tern-lab bench --json` file: bench-time.svg, bench-cpu.svg, bench-rss.svg
    /// and (with a restart scenario) restart-timeline.svg.
    bench: Option<PathBuf>,
    /// A soak's soak.csv: soak-rss.svg (kill and flap markers from soak-events.csv
    /// beside it).
    #[arg(long)]
    soak: Option<PathBuf>,
    /// lab-topology.svg: the lab `./demo.sh` builds (4 nodes, a BIRD ToR, 2 pods and a
    /// borrowed address per node, dual stack).
    #[arg(long)]
    topology: bool,
    /// One line on the machine, printed under each bench chart's title.
    #[arg(long, default_value = "")]
    machine: String,
    /// Directory to write the SVGs into.
    #[arg(long, default_value = "docs/img")]
    out: PathBuf,
}

#[derive(Args)]
struct KubeApiserver {
    /// Address to listen on (loopback, or a lab address inside a namespace).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: std::net::SocketAddr,
    /// Directory of JSON fixtures to load (default: the crate's own).
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// The bearer token accepted.
    #[arg(long, default_value = "tern-lab-token")]
    token: String,
    /// ClusterRole/Role YAML whose rules are enforced.
    #[arg(long)]
    rbac: Option<PathBuf>,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "/tmp/tern-lab/kubeconfig")]
    kubeconfig: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Kubernetes API server stand-in in the foreground (until interrupted) and
    /// print the path of its kubeconfig; run it in a namespace with `ip netns exec`.
    KubeApiserver(KubeApiserver),
    /// Draw SVG charts from `bench --json` and the soak's CSV, and the lab's topology.
    Chart(Chart),
    /// Keep a lab of N tern nodes under churn and session flaps for minutes, sampling
    /// every tern's RSS and CPU; check every route and pod at the end and that memory
    /// stayed flat (ASCII chart; every sample in soak.csv).
    Soak(Soak),
    /// Run tern and BIRD / FRR / GoBGP on the same scenarios, alternating, and print
    /// median (min–max) figures with tern's ratio against the best of the others.
    Bench(Bench),
    /// Build a cluster in namespaces and start it; it keeps running until `down`.
    Up(Up),
    /// Show every node's `tern status` (and the ToR's sessions).
    Status(Where),
    /// Ping every pod from every other pod and print the matrix.
    Ping(Where),
    /// Stop everything the lab started and delete its namespaces.
    Down(Where),
    /// Run BIRD, GoBGP and FRR in namespaces and capture their BGP messages to a pcap.
    Capture {
        /// Directory to write bird-gobgp-frr.pcap into.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Prefix of the namespace names.
        #[arg(long, default_value = "tlab-")]
        prefix: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(target_os = "linux")]
    {
        if let Command::Chart(c) = cli.command {
            return linux::chart(&c);
        }
        if let Command::KubeApiserver(k) = cli.command {
            return linux::kube_apiserver(&k);
        }
        if let Err(reason) = tern_interop::lab_available() {
            eprintln!("tern-lab: {reason}");
            return ExitCode::from(2);
        }
        tern_interop::netns::clean_up_on_signals();
        match cli.command {
            Command::Up(up) => linux::up(up),
            Command::Status(w) => linux::status(&w),
            Command::Ping(w) => linux::ping(&w),
            Command::Down(w) => linux::down(&w),
            Command::Capture { out, prefix } => linux::capture(&out, &prefix),
            Command::Bench(b) => linux::bench(b),
            Command::Soak(a) => linux::soak(a),
            Command::Chart(c) => linux::chart(&c),
            Command::KubeApiserver(k) => linux::kube_apiserver(&k),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cli;
        eprintln!("tern-lab: network namespaces exist only on Linux");
        ExitCode::from(2)
    }
}

#[cfg(target_os = "linux")]
mod linux;
