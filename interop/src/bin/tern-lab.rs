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
    /// Scenarios: prefixes:N (one eBGP peer, N prefixes, then withdrawn), peers:N (N
    /// mesh peers with a block and ten /32s each), restart:N, churn:BASE:FLAP:SECS.
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
mod linux {
    use std::process::ExitCode;
    use std::time::Duration;

    use tern_interop::lab::{self, state, LabSpec, NodeKind, Topology};
    use tern_interop::peers::{self, Kind};

    use super::{Bench, Chart, KubeApiserver, Soak, Store, Tor, Up, Where};

    pub fn kube_apiserver(k: &KubeApiserver) -> ExitCode {
        use tern_interop::kubeapi::{fixtures_dir, ApiServer, ApiServerOptions};
        let run = || -> Result<ApiServer, String> {
            let mut opts = ApiServerOptions::new(k.listen, &k.token);
            if let Some(p) = &k.rbac {
                let text =
                    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
                opts.rbac_yaml = Some(text);
            }
            let server = ApiServer::start(opts).map_err(|e| e.to_string())?;
            let dir = k.fixtures.clone().unwrap_or_else(fixtures_dir);
            let n = server.load_fixtures(&dir).map_err(|e| e.to_string())?;
            if let Some(parent) = k.kubeconfig.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            server
                .write_kubeconfig(&k.kubeconfig, &k.token)
                .map_err(|e| e.to_string())?;
            eprintln!(
                "tern-lab kube-apiserver: {} serving {n} objects from {}",
                server.url(),
                dir.display()
            );
            Ok(server)
        };
        match run() {
            Ok(_server) => {
                println!("{}", k.kubeconfig.display());
                // Serves on its own thread until the process is interrupted.
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            Err(e) => {
                eprintln!("tern-lab kube-apiserver: {e}");
                ExitCode::FAILURE
            }
        }
    }

    pub fn chart(c: &Chart) -> ExitCode {
        use tern_interop::chart;
        let mut files = Vec::new();
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let made = (|| -> Result<(), String> {
            if let Some(path) = &c.bench {
                let doc: serde_json::Value = serde_json::from_str(&read(path)?)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                files.extend(
                    chart::bench::charts(&doc, &c.machine)
                        .map_err(|e| format!("{}: {e}", path.display()))?,
                );
            }
            if let Some(path) = &c.soak {
                let events = path.with_file_name("soak-events.csv");
                let events = if events.exists() {
                    read(&events)?
                } else {
                    String::new()
                };
                files.push((
                    "soak-rss.svg".into(),
                    chart::soak::chart(&read(path)?, &events)?,
                ));
            }
            if c.topology {
                let mut spec = LabSpec::new("tl-", &c.out, std::path::Path::new("tern"), 4);
                spec.tor = Some(Kind::Bird);
                spec.pods = 2;
                spec.borrowed = 1;
                spec.ipv6 = true;
                files.push(("lab-topology.svg".into(), chart::topology::chart(&spec)));
            }
            Ok(())
        })();
        if let Err(e) = made {
            eprintln!("tern-lab chart: {e}");
            return ExitCode::FAILURE;
        }
        if files.is_empty() {
            eprintln!("tern-lab chart: nothing to draw: give a bench JSON file, --soak FILE or --topology");
            return ExitCode::from(2);
        }
        match chart::write(&c.out, &files) {
            Ok(paths) => {
                for p in paths {
                    println!("{p}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tern-lab chart: {}: {e}", c.out.display());
                ExitCode::FAILURE
            }
        }
    }

    pub fn soak(a: Soak) -> ExitCode {
        use tern_interop::soak::{self, SoakOpts};
        let left = state::namespaces_with_prefix(&a.prefix);
        if !left.is_empty() {
            eprintln!(
                "tern-lab soak: namespaces named {}* exist ({}); remove them with `tern-lab down --prefix {}`",
                a.prefix,
                left.join(" "),
                a.prefix
            );
            return ExitCode::FAILURE;
        }
        let (Ok(duration), Ok(sample_every)) = (
            Duration::try_from_secs_f64(a.minutes * 60.0),
            Duration::try_from_secs_f64(a.sample_secs),
        ) else {
            eprintln!("tern-lab soak: --minutes and --sample-secs must be positive numbers");
            return ExitCode::from(2);
        };
        if duration.is_zero() || sample_every.is_zero() {
            eprintln!("tern-lab soak: --minutes and --sample-secs must be positive");
            return ExitCode::from(2);
        }
        let opts = SoakOpts {
            prefix: a.prefix,
            dir: a.dir.clone(),
            tern: a.tern.unwrap_or_else(lab::find_tern),
            nodes: a.nodes,
            duration,
            sample_every,
        };
        eprintln!(
            "tern-lab soak: {} nodes for {} min, tern is {}",
            opts.nodes,
            a.minutes,
            opts.tern.display()
        );
        let report = match soak::run(&opts, |line| eprintln!("  {line}")) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tern-lab soak: {e}");
                return ExitCode::FAILURE;
            }
        };
        print!("{}", report.render());
        println!(
            "every sample: {}, every flap: {} (draw them: tern-lab chart --soak {})",
            a.dir.join("soak.csv").display(),
            a.dir.join("soak-events.csv").display(),
            a.dir.join("soak.csv").display()
        );
        let failures = report.failures();
        if failures.is_empty() {
            println!("soak passed");
            ExitCode::SUCCESS
        } else {
            println!("soak FAILED:\n  {}", failures.join("\n  "));
            ExitCode::FAILURE
        }
    }

    pub fn bench(b: Bench) -> ExitCode {
        use tern_interop::bench::{self, dut::DutKind, report, BenchOpts, Scenario};
        let scenarios = match b.scenarios.iter().map(|s| Scenario::parse(s)).collect() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tern-lab bench: {e}");
                return ExitCode::from(2);
            }
        };
        let mut daemons = Vec::new();
        for d in &b.daemons {
            let Some(k) = DutKind::from_name(d) else {
                eprintln!("tern-lab bench: unknown daemon {d:?} (tern, bird, frr, gobgp, null)");
                return ExitCode::from(2);
            };
            if let Some(p) = k.programs().iter().find(|p| !tern_interop::have_program(p)) {
                eprintln!("tern-lab bench: {d} needs {p}, which is not installed (scripts/setup.sh --lab)");
                return ExitCode::from(2);
            }
            daemons.push(k);
        }
        let left = state::namespaces_with_prefix(&b.prefix);
        if !left.is_empty() {
            eprintln!(
                "tern-lab bench: namespaces named {}* exist ({}); is another bench running?",
                b.prefix,
                left.join(" ")
            );
            return ExitCode::FAILURE;
        }
        let opts = BenchOpts {
            scenarios,
            daemons,
            reps: b.reps.max(1),
            dir: b.dir.clone(),
            tern: b.tern.unwrap_or_else(lab::find_tern),
            prefix: b.prefix,
            poll: Duration::from_millis(b.poll_ms.max(1)),
            timeout: Duration::from_secs(b.timeout),
            loss_percent: b.loss,
            rto_min_ms: b.rto_min_ms,
        };
        eprintln!(
            "tern-lab bench: {} scenario(s) × {} daemon(s) × {} rep(s); tern is {}",
            opts.scenarios.len(),
            opts.daemons.len(),
            opts.reps,
            opts.tern.display()
        );
        let runs = bench::run_all(&opts, |r| {
            let figures: Vec<String> = r
                .metrics
                .iter()
                .map(|(k, v)| format!("{k}={v:.3}"))
                .collect();
            match &r.error {
                None => eprintln!(
                    "  {} {} #{}: {}",
                    r.scenario,
                    r.daemon,
                    r.rep,
                    figures.join(" ")
                ),
                Some(e) => eprintln!("  {} {} #{}: FAILED: {e}", r.scenario, r.daemon, r.rep),
            }
        });
        let summary = report::summarise(&runs);
        print!("{}", report::table(&summary, &runs));
        if let Some(path) = &b.json {
            let doc = serde_json::json!({"runs": runs, "summary": summary});
            if let Err(e) = std::fs::write(path, format!("{doc:#}\n")) {
                eprintln!("tern-lab bench: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        if runs.iter().any(|r| r.error.is_some()) {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }

    pub fn up(a: Up) -> ExitCode {
        let w = &a.place;
        if w.dir.join(state::FILE).exists() {
            eprintln!(
                "tern-lab up: a lab is already up in {} (remove it with `tern-lab down`)",
                w.dir.display()
            );
            return ExitCode::FAILURE;
        }
        let left = state::namespaces_with_prefix(&w.prefix);
        if !left.is_empty() {
            eprintln!(
                "tern-lab up: namespaces named {}* exist ({}); remove them with `tern-lab down --prefix {}`",
                w.prefix,
                left.join(" "),
                w.prefix
            );
            return ExitCode::FAILURE;
        }
        let mut spec = LabSpec::new(
            &w.prefix,
            &w.dir,
            &a.tern.unwrap_or_else(lab::find_tern),
            a.nodes,
        );
        spec.topology = match (a.route_reflectors, a.bird_reflector) {
            (Some(k), _) => Topology::RouteReflectors(k),
            (None, true) => Topology::BirdReflector,
            (None, false) => Topology::Mesh,
        };
        spec.tor = a.tor.map(|t| match t {
            Tor::Bird => Kind::Bird,
            Tor::Frr => Kind::Frr,
            Tor::Gobgp => Kind::Gobgp,
        });
        spec.pods = a.pods;
        spec.borrowed = a.borrowed;
        spec.ipv6 = a.ipv6;
        spec.bird_nodes = a.bird_nodes;
        spec.far_nodes = a.far_nodes;
        spec.restart_time = a.restart_time;
        spec.mesh_hold = a.mesh_hold;
        if a.datastore == Store::Kubernetes {
            // A process of its own: the lab outlives this command.
            spec.datastore = lab::LabDatastore::Kubernetes {
                separate_process: true,
            };
        }
        let lab = match lab::Lab::up(spec) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tern-lab up: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("{}", describe(&lab));
        let converged = lab.wait_converged(Duration::from_secs(a.timeout));
        match &converged {
            Ok(t) => println!(
                "converged {:.1} s after start: every node's FIB holds every other node's blocks{}",
                t.as_secs_f64(),
                if lab.spec().tor.is_some() {
                    " and the ToR's prefix"
                } else {
                    ""
                }
            ),
            Err(e) => eprintln!("tern-lab up: {e}"),
        }
        match lab.detach() {
            Ok(path) => println!(
                "lab state: {}\nnext: tern-lab status | tern-lab ping | tern-lab down   (logs in {})",
                path.display(),
                w.dir.display()
            ),
            Err(e) => {
                eprintln!("tern-lab up: {e}");
                return ExitCode::FAILURE;
            }
        }
        if converged.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    fn describe(lab: &lab::Lab) -> String {
        let s = lab.spec();
        let mut out = format!(
            "lab {}: {} nodes ({}), AS {}, pools {}{}{}\n",
            s.prefix,
            s.nodes,
            match s.topology {
                Topology::Mesh => "node-to-node mesh".to_string(),
                Topology::RouteReflectors(k) => format!("{k} tern route reflectors"),
                Topology::BirdReflector => "BIRD route reflector".to_string(),
            },
            lab::plan::CLUSTER_AS,
            lab::plan::POOL_V4,
            if s.ipv6 {
                format!(", {}", lab::plan::POOL_V6)
            } else {
                String::new()
            },
            match s.tor {
                Some(k) => format!(
                    ", ToR {} at {} (AS {})",
                    k.name(),
                    lab::plan::TOR_V4,
                    lab::plan::TOR_AS
                ),
                None => String::new(),
            }
        );
        for n in lab.nodes() {
            out.push_str(&format!(
                "  {:<8} {:<5} {:<15} block {}{}{}  pods {}\n",
                n.name,
                match n.kind {
                    NodeKind::Tern => "tern",
                    NodeKind::CalicoBird => "bird",
                },
                n.v4,
                n.block_v4,
                n.block_v6
                    .as_ref()
                    .map(|b| format!(" {b}"))
                    .unwrap_or_default(),
                if n.reflector { " (reflector)" } else { "" },
                n.pods
                    .iter()
                    .map(|p| if p.borrowed() {
                        format!("{}*", p.v4)
                    } else {
                        p.v4.clone()
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        if s.borrowed > 0 {
            out.push_str("  (* borrowed from the next node's block)\n");
        }
        out
    }

    fn load(w: &Where) -> Result<state::State, ExitCode> {
        state::State::load(&w.dir).map_err(|e| {
            eprintln!("tern-lab: {e}");
            ExitCode::FAILURE
        })
    }

    pub fn status(w: &Where) -> ExitCode {
        let st = match load(w) {
            Ok(s) => s,
            Err(c) => return c,
        };
        let mut ok = true;
        for n in &st.nodes {
            println!("== {} ({}, {}) ==", n.name, n.runs, n.v4);
            if n.runs == "tern" {
                let (code, out) = lab::probe::tern_cli(&st.tern, &n.socket, &["status"]);
                ok &= code == 0;
                println!("{}", out.trim_end());
            } else if let Some(dir) = n.socket.parent() {
                match peers::cli_at(Kind::Bird, dir, Kind::Bird.summary_command()) {
                    Ok(out) => println!("{}", out.trim_end()),
                    Err(e) => {
                        ok = false;
                        println!("{e}");
                    }
                }
            }
            println!();
        }
        if let Some((kind, dir)) = &st.tor {
            if let Some(k) = Kind::from_name(kind) {
                println!("== ToR ({kind}) ==");
                match peers::cli_at(k, dir, k.summary_command()) {
                    Ok(out) => println!("{}", out.trim_end()),
                    Err(e) => {
                        ok = false;
                        println!("{e}");
                    }
                }
            }
        }
        if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    pub fn ping(w: &Where) -> ExitCode {
        let st = match load(w) {
            Ok(s) => s,
            Err(c) => return c,
        };
        match lab::probe::ping_matrix(&st.pod_plans(), st.ipv6) {
            Ok(m) => {
                print!("{}", m.render());
                if m.failures().is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("tern-lab ping: {e}");
                ExitCode::FAILURE
            }
        }
    }

    pub fn down(w: &Where) -> ExitCode {
        let namespaces = match state::State::load(&w.dir) {
            Ok(st) => st.namespaces,
            Err(_) => state::namespaces_with_prefix(&w.prefix),
        };
        if namespaces.is_empty() {
            println!(
                "no lab in {} and no namespace named {}*",
                w.dir.display(),
                w.prefix
            );
            return ExitCode::SUCCESS;
        }
        let (stopped, deleted) = state::down(&namespaces);
        let _ = std::fs::remove_file(w.dir.join(state::FILE));
        println!("stopped {stopped} processes, deleted {deleted} namespaces");
        ExitCode::SUCCESS
    }

    pub fn capture(out: &std::path::Path, prefix: &str) -> ExitCode {
        match tern_interop::capture::capture_fixtures(out, prefix) {
            Ok(files) => {
                for f in files {
                    println!("{}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tern-lab capture: {e}");
                ExitCode::FAILURE
            }
        }
    }
}
