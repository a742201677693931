//! The subcommands that build labs in network namespaces (Linux only): up, status,
//! ping, down, bench, soak, capture, chart and the API server stand-in.

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
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            opts.rbac_yaml = Some(text);
        }
        let server = ApiServer::start(opts).map_err(|e| e.to_string())?;
        let dir = k.fixtures.clone().unwrap_or_else(fixtures_dir);
        let n = server.load_fixtures(&dir).map_err(|e| e.to_string())?;
        if let Some(parent) = k.kubeconfig.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
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
        eprintln!(
            "tern-lab chart: nothing to draw: give a bench JSON file, --soak FILE or --topology"
        );
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
            eprintln!(
                "tern-lab bench: {d} needs {p}, which is not installed (scripts/setup.sh --lab)"
            );
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
    spec.bfd_ms = a.bfd;
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
