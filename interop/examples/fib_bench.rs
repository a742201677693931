//! FIB install benchmark: how fast routes reach the kernel and leave it again, for
//! tern's Linux backend and, in the same run, `ip -batch`, BIRD's kernel protocol and
//! FRR's zebra. Every contender gets a fresh pair of namespaces (node + gateway on a
//! veth) and installs N IPv4 /32s from 198.18.0.0/15 via one gateway; contenders
//! alternate within each repetition.
//!
//! Timing: tern and `ip -batch` until the last ACK; BIRD from `birdc enable` of a
//! static protocol until a netlink listener in the namespace has seen the N-th route
//! notification with BIRD's protocol (the benchmark's `FibWatch`, which reads its
//! socket in bursts every 2 ms: a listener woken for each notification slowed the
//! kernel's installs by a fifth). zebra gets its routes from bgpd, fed over BGP by
//! BIRD (staticd needs minutes to read 10k static routes, and sharpd is not packaged in
//! Debian), and is timed from its first route notification to the N-th, which leaves
//! BIRD's and bgpd's part out as far as it can be.
//!
//! `cargo run --release -p tern-interop --example fib_bench -- [ROUTES] [RUNS]`
//! (root; default 100000 routes, 3 runs).

#[cfg(target_os = "linux")]
fn main() {
    if let Err(e) = bench::main() {
        eprintln!("fib_bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("fib_bench: Linux only");
}

#[cfg(target_os = "linux")]
mod bench {
    use std::net::{IpAddr, Ipv4Addr};
    use std::path::Path;
    use std::process::Command;
    use std::time::{Duration, Instant};

    use ipnet::IpNet;
    use tern_fib::linux::LinuxFib;
    use tern_fib::{Fib, NextHop, Route, RouteChange, RouteKind};
    use tern_interop::bench::measure::FibWatch;
    use tern_interop::netns::Netns;
    use tern_interop::process::Daemon;

    type Res<T> = Result<T, String>;

    const TERN_PROTO: u8 = 201;
    const BIRD_PROTO: u8 = 12;
    const FRR_BGP_PROTO: u8 = 186;
    const GW: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

    fn prefix(i: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + i)
    }

    /// A node namespace and a gateway namespace joined by a veth; keep both alive
    /// while measuring (dropping the gateway's takes the link down).
    fn lab(tag: &str) -> Res<(Netns, Netns)> {
        let node = Netns::create(&format!("tfb-{tag}-n")).map_err(|e| e.to_string())?;
        let gw = Netns::create(&format!("tfb-{tag}-g")).map_err(|e| e.to_string())?;
        node.veth_to("eth0", &gw, "eth0")
            .map_err(|e| e.to_string())?;
        node.add_addr("eth0", "198.51.100.1/24")
            .map_err(|e| e.to_string())?;
        gw.add_addr("eth0", "198.51.100.2/24")
            .map_err(|e| e.to_string())?;
        Ok((node, gw))
    }

    fn cleanup(tag: &str) {
        for suffix in ["n", "g"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("tfb-{tag}-{suffix}")])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    /// Runs `f` on a thread inside `ns`, with a runtime.
    fn in_ns<T: Send, Fut: std::future::Future<Output = Res<T>>>(
        ns: &Netns,
        f: impl FnOnce() -> Fut + Send,
    ) -> Res<T> {
        ns.block_on(f).map_err(|e| e.to_string())?
    }

    /// Starts `start` and returns the seconds until `n` notifications of routes with
    /// `protocol` were seen (added, or removed when `removing`), and the seconds from
    /// the first of them to the last. Counted by the benchmark's own watcher
    /// ([`FibWatch`]), which reads in bursts so that it does not slow the kernel.
    fn time_until(
        ns: &Netns,
        protocol: u8,
        n: usize,
        removing: bool,
        start: impl FnOnce() -> Res<()> + Send,
    ) -> Res<(f64, f64)> {
        let watch = FibWatch::start(ns, protocol).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        start()?;
        loop {
            let c = watch.get();
            if c.lost {
                return Err("notifications lost (overrun)".into());
            }
            let seen = if removing { c.removed } else { c.added };
            if seen >= n as u64 {
                let (Some(first), Some(last)) = (c.first, c.last) else {
                    return Err("route notifications without a time".into());
                };
                return Ok(((last - t0).as_secs_f64(), (last - first).as_secs_f64()));
            }
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(format!("only {seen} of {n} route notifications in 120 s"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn count(ns: &Netns, protocol: u8) -> Res<usize> {
        in_ns(ns, async || {
            let mut fib = LinuxFib::new(protocol, 254).map_err(|e| e.to_string())?;
            Ok(fib.own_routes().await.map_err(|e| e.to_string())?.len())
        })
    }

    fn expect(ns: &Netns, protocol: u8, n: usize, who: &str) -> Res<()> {
        let c = count(ns, protocol)?;
        if c == n {
            Ok(())
        } else {
            Err(format!("{who}: {c} routes in the kernel, expected {n}"))
        }
    }

    fn tern(n: u32) -> Res<(f64, f64)> {
        let (ns, _gw) = lab("tern")?;
        let result = in_ns(&ns, async || {
            let mut fib = LinuxFib::new(TERN_PROTO, 254).map_err(|e| e.to_string())?;
            // The daemon knows the way out from next-hop resolution, and naming it
            // spares the kernel a lookup per route.
            let eth0 = fib
                .interfaces()
                .await
                .map_err(|e| e.to_string())?
                .iter()
                .find(|i| i.name == "eth0")
                .map(|i| i.index);
            let mut adds = Vec::with_capacity(n as usize);
            for i in 0..n {
                adds.push(RouteChange::Add(Route {
                    prefix: IpNet::new(IpAddr::V4(prefix(i)), 32).map_err(|e| e.to_string())?,
                    kind: RouteKind::unicast(vec![NextHop {
                        interface: eth0,
                        ..NextHop::via(IpAddr::V4(GW))
                    }]),
                    metric: 0,
                    table: 254,
                }));
            }
            let dels: Vec<RouteChange> = adds
                .iter()
                .map(|c| RouteChange::Delete {
                    prefix: c.prefix(),
                    table: 254,
                })
                .collect();
            let t = Instant::now();
            let r = fib.apply(adds).await;
            let add = t.elapsed().as_secs_f64();
            if !r.failed.is_empty() || r.applied != n as usize {
                return Err(format!(
                    "tern add: {} applied, {} failed, first: {:?}",
                    r.applied,
                    r.failed.len(),
                    r.failed.first()
                ));
            }
            let in_kernel = fib.own_routes().await.map_err(|e| e.to_string())?.len();
            if in_kernel != n as usize {
                return Err(format!(
                    "tern: {in_kernel} routes in the kernel, expected {n}"
                ));
            }
            let t = Instant::now();
            let r = fib.apply(dels).await;
            let del = t.elapsed().as_secs_f64();
            if !r.failed.is_empty() {
                return Err(format!("tern delete: {} failed", r.failed.len()));
            }
            Ok((add, del))
        });
        drop(ns);
        cleanup("tern");
        result
    }

    fn ip_batch(n: u32, dir: &Path) -> Res<(f64, f64)> {
        let (ns, _gw) = lab("ipb")?;
        let add = dir.join("add.batch");
        let del = dir.join("del.batch");
        let mut a = String::new();
        let mut d = String::new();
        for i in 0..n {
            a.push_str(&format!(
                "route add {}/32 via {GW} proto {TERN_PROTO}\n",
                prefix(i)
            ));
            d.push_str(&format!("route del {}/32 proto {TERN_PROTO}\n", prefix(i)));
        }
        std::fs::write(&add, a).map_err(|e| e.to_string())?;
        std::fs::write(&del, d).map_err(|e| e.to_string())?;
        let run = |file: &Path| -> Res<f64> {
            let t = Instant::now();
            let out = Command::new("ip")
                .args(["-n", ns.name(), "-batch"])
                .arg(file)
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "ip -batch: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(t.elapsed().as_secs_f64())
        };
        let result = (|| {
            let a = run(&add)?;
            expect(&ns, TERN_PROTO, n as usize, "ip -batch")?;
            let d = run(&del)?;
            expect(&ns, TERN_PROTO, 0, "ip -batch")?;
            Ok((a, d))
        })();
        drop(ns);
        cleanup("ipb");
        result
    }

    fn bird(n: u32, dir: &Path) -> Res<(f64, f64)> {
        let (ns, _gw) = lab("bird")?;
        let mut conf = String::from(
            "router id 198.51.100.1;\nprotocol device { }\nprotocol kernel { ipv4 { export all; }; }\nprotocol static s1 {\n  disabled;\n  ipv4;\n",
        );
        for i in 0..n {
            conf.push_str(&format!("  route {}/32 via {GW};\n", prefix(i)));
        }
        conf.push_str("}\n");
        std::fs::write(dir.join("bird.conf"), conf).map_err(|e| e.to_string())?;
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let cmd = tern_interop::peers::bird_command(&ns, dir);
        let mut daemon =
            Daemon::spawn("bird", cmd, &dir.join("bird.log")).map_err(|e| e.to_string())?;
        let birdc = |words: &[&str]| -> Res<()> {
            let out = Command::new("birdc")
                .arg("-s")
                .arg(p("bird.ctl"))
                .args(words)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "birdc {words:?}: {}",
                    String::from_utf8_lossy(&out.stdout)
                ))
            }
        };
        let result = (|| {
            tern_interop::peers::wait_for("bird to answer", Duration::from_secs(60), || {
                birdc(&["show", "status"]).is_ok()
            })
            .map_err(|e| e.to_string())?;
            let (a, _) = time_until(&ns, BIRD_PROTO, n as usize, false, || {
                birdc(&["enable", "s1"])
            })?;
            expect(&ns, BIRD_PROTO, n as usize, "BIRD")?;
            let (d, _) = time_until(&ns, BIRD_PROTO, n as usize, true, || {
                birdc(&["disable", "s1"])
            })?;
            expect(&ns, BIRD_PROTO, 0, "BIRD")?;
            Ok((a, d))
        })();
        daemon.stop(Duration::from_secs(5));
        drop(ns);
        cleanup("bird");
        result
    }

    /// FRR: zebra with bgpd in the node namespace, fed over BGP by BIRD in the gateway
    /// namespace (staticd cannot be used: it needs minutes to read 10k static routes).
    /// Reported is zebra's install window, from its first route notification to the
    /// N-th, so BIRD's and bgpd's share of the time is left out as far as possible.
    fn zebra(n: u32, dir: &Path) -> Res<(f64, f64)> {
        let (ns, gw) = lab("zebra")?;
        let run = dir.join("frr");
        std::fs::create_dir_all(&run).map_err(|e| e.to_string())?;
        std::fs::write(run.join("zebra.conf"), "hostname tfb-zebra\n")
            .map_err(|e| e.to_string())?;
        std::fs::write(
            run.join("bgpd.conf"),
            "frr defaults traditional\nhostname tfb-bgpd\nrouter bgp 64512\n bgp router-id 198.51.100.1\n \
             no bgp ebgp-requires-policy\n timers bgp 3 9\n neighbor 198.51.100.2 remote-as 64513\n \
             neighbor 198.51.100.2 timers connect 1\n",
        )
        .map_err(|e| e.to_string())?;
        let chown = Command::new("chown")
            .args(["-R", "frr:frr"])
            .arg(&run)
            .status()
            .map_err(|e| e.to_string())?;
        if !chown.success() {
            return Err("chown frr:frr failed".into());
        }
        let _ = Command::new("chmod").arg("755").arg(dir).status();
        let p = |f: &str| run.join(f).to_string_lossy().into_owned();
        let frr_args = |c: &mut Command, conf: &str, pid: &str| {
            c.args([
                "-f",
                &p(conf),
                "-i",
                &p(pid),
                "-z",
                &p("zserv.api"),
                "--vty_socket",
                &p(""),
                "-P",
                "0",
                "-u",
                "frr",
                "-g",
                "frr",
            ]);
        };
        let mut zc = ns.command("/usr/lib/frr/zebra");
        frr_args(&mut zc, "zebra.conf", "zebra.pid");
        let mut zebra =
            Daemon::spawn("zebra", zc, &dir.join("zebra.log")).map_err(|e| e.to_string())?;
        let mut bgpd = None;
        let mut feeder = None;
        let result = (|| {
            tern_interop::peers::wait_for("zebra's socket", Duration::from_secs(30), || {
                run.join("zserv.api").exists()
            })
            .map_err(|e| e.to_string())?;
            let mut bc = ns.command("/usr/lib/frr/bgpd");
            frr_args(&mut bc, "bgpd.conf", "bgpd.pid");
            bc.args(["-p", "179"]);
            bgpd =
                Some(Daemon::spawn("bgpd", bc, &dir.join("bgpd.log")).map_err(|e| e.to_string())?);
            let mut conf = String::from(
                "router id 198.51.100.2;\nprotocol device { }\nprotocol static s1 {\n  disabled;\n  ipv4;\n",
            );
            for i in 0..n {
                conf.push_str(&format!("  route {}/32 blackhole;\n", prefix(i)));
            }
            conf.push_str(
                "}\nprotocol bgp frr {\n  local as 64513; neighbor 198.51.100.1 as 64512;\n  \
                 hold time 9; keepalive time 3; connect retry time 1;\n  \
                 ipv4 { import none; export where source = RTS_STATIC; };\n}\n",
            );
            let bird_dir = dir.join("feeder");
            let bird = tern_interop::peers::Peer::start(
                tern_interop::peers::Kind::Bird,
                &gw,
                &bird_dir,
                &conf,
            )
            .map_err(|e| e.to_string())?;
            tern_interop::peers::wait_for(
                "BIRD and bgpd to establish",
                Duration::from_secs(60),
                || {
                    bird.cli(&["show", "protocols", "frr"])
                        .is_ok_and(|o| o.contains("Established"))
                },
            )
            .map_err(|e| e.to_string())?;
            let (_, a) = time_until(&ns, FRR_BGP_PROTO, n as usize, false, || {
                bird.cli(&["enable", "s1"])
                    .map(drop)
                    .map_err(|e| e.to_string())
            })?;
            expect(&ns, FRR_BGP_PROTO, n as usize, "zebra")?;
            let (_, d) = time_until(&ns, FRR_BGP_PROTO, n as usize, true, || {
                bird.cli(&["disable", "s1"])
                    .map(drop)
                    .map_err(|e| e.to_string())
            })?;
            expect(&ns, FRR_BGP_PROTO, 0, "zebra")?;
            feeder = Some(bird);
            Ok((a, d))
        })();
        drop(feeder);
        if let Some(mut b) = bgpd {
            b.stop(Duration::from_secs(5));
        }
        zebra.stop(Duration::from_secs(5));
        drop(ns);
        drop(gw);
        cleanup("zebra");
        result.map_err(|e: String| {
            let log = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            format!(
                "{e}\nzebra.log:\n{}\nbgpd.log:\n{}",
                log("zebra.log"),
                log("bgpd.log")
            )
        })
    }

    fn stats(xs: &[f64]) -> (f64, f64, f64) {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let med = v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
        (
            med,
            v.first().copied().unwrap_or(f64::NAN),
            v.last().copied().unwrap_or(f64::NAN),
        )
    }

    pub fn main() -> Res<()> {
        let mut args = std::env::args().skip(1);
        let n: u32 = args
            .next()
            .map(|a| a.parse().map_err(|e| format!("ROUTES {a:?}: {e}")))
            .transpose()?
            .unwrap_or(100_000);
        let runs: usize = args
            .next()
            .map(|a| a.parse().map_err(|e| format!("RUNS {a:?}: {e}")))
            .transpose()?
            .unwrap_or(3);
        if n == 0 || n > 131_072 {
            return Err("ROUTES must be 1..=131072 (IPv4 /32s inside 198.18.0.0/15)".into());
        }
        tern_interop::lab_available()?;
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        // FRR's daemons drop privileges to `frr`, which must reach their files.
        let _ = Command::new("chmod").arg("755").arg(tmp.path()).status();
        type Contender = (&'static str, Box<dyn Fn(u32, &Path) -> Res<(f64, f64)>>);
        let mut contenders: Vec<Contender> = vec![
            ("tern (rtnetlink, batched)", Box::new(|n, _| tern(n))),
            ("ip -batch", Box::new(ip_batch)),
        ];
        if tern_interop::have_program("bird") {
            contenders.push(("BIRD 2 kernel protocol", Box::new(bird)));
        } else {
            eprintln!("SKIP BIRD: not installed");
        }
        if tern_interop::have_program("/usr/lib/frr/zebra") && tern_interop::have_program("bird") {
            contenders.push(("FRR zebra (fed by bgpd)", Box::new(zebra)));
        } else {
            eprintln!("SKIP FRR: zebra, bgpd or the BIRD feeder not installed");
        }
        let mut results: Vec<(Vec<f64>, Vec<f64>)> =
            vec![(Vec::new(), Vec::new()); contenders.len()];
        for run in 0..runs {
            for (i, (name, f)) in contenders.iter().enumerate() {
                let dir = tmp.path().join(format!("{run}-{i}"));
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let (a, d) = f(n, &dir).map_err(|e| format!("{name}: {e}"))?;
                eprintln!("run {run}: {name}: add {a:.3} s, delete {d:.3} s");
                if let Some(r) = results.get_mut(i) {
                    r.0.push(n as f64 / a);
                    r.1.push(n as f64 / d);
                }
            }
        }
        let tern_add = results.first().map(|r| stats(&r.0).0).unwrap_or(f64::NAN);
        let tern_del = results.first().map(|r| stats(&r.1).0).unwrap_or(f64::NAN);
        println!("{n} IPv4 /32 routes via one gateway, {runs} runs, median (min-max) routes/s");
        println!(
            "{:<28} {:>26} {:>26} {:>10} {:>10}",
            "", "add", "delete", "tern/x add", "tern/x del"
        );
        for ((name, _), (a, d)) in contenders.iter().zip(&results) {
            let (am, amin, amax) = stats(a);
            let (dm, dmin, dmax) = stats(d);
            println!(
                "{name:<28} {:>26} {:>26} {:>10.2} {:>10.2}",
                format!("{:.0}k ({:.0}-{:.0}k)", am / 1e3, amin / 1e3, amax / 1e3),
                format!("{:.0}k ({:.0}-{:.0}k)", dm / 1e3, dmin / 1e3, dmax / 1e3),
                tern_add / am,
                tern_del / dm
            );
        }
        Ok(())
    }
}
