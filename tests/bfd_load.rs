//! The cost of BFD at scale (issue 22): tern's BFD driver with 1,000 single-hop IPv6
//! sessions at 100 ms × 3 against FRR's bfdd, in two network namespaces. Prints the
//! time for all to come Up and the CPU of tern's driver thread and of bfdd over 20 s
//! of steady state, side by side.
//!
//! Long (about a minute) and a measurement, not a check: it runs only with
//! `TERN_BFD_LOAD=1` (`./test.sh --lab-bench` sets it). It fails only if the sessions
//! do not come Up.

#![cfg(target_os = "linux")]

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use tern_bfd::driver::{Command, Views};
use tern_bfd::session::Config;
use tern_bfd::State;
use tern_interop::netns;
use tern_interop::process::Daemon;

const SESSIONS: u16 = 1000;
const STEADY: Duration = Duration::from_secs(20);

/// Session `i`'s peer address, at bfdd.
fn peer(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xbf, 1, 0, 0, 0, i + 1)
}

/// Session `i`'s address at tern: bfdd keys its sessions by the peer's address, so
/// each needs its own, which a route with `src` makes the kernel choose for packets to
/// `peer(i)` (tern's driver does not bind a source per session).
fn local(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xbf, 2, 0, 0, 0, i + 1)
}

/// user + system CPU seconds of a process, from /proc.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state field.
    (ticks(11) + ticks(12)) / 100.0
}

/// user + system CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .map(|u| {
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

#[test]
fn bfd_cost_of_1000_sessions_against_frr_bfdd() {
    if std::env::var_os("TERN_BFD_LOAD").is_none() {
        eprintln!("bfd_load: set TERN_BFD_LOAD=1 to measure (about a minute)");
        return;
    }
    if let Err(reason) = tern_interop::lab_available() {
        return tern_interop::skip_or_fail("bfd_load", &reason);
    }
    if !tern_interop::have_program("/usr/lib/frr/bfdd") {
        return tern_interop::skip_or_fail("bfd_load", "FRR's bfdd is not installed");
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let (_lan, mut nodes) = netns::lan(
        "tbl-lan",
        &[("tbl-a", "198.51.100.10/24"), ("tbl-b", "198.51.100.11/24")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (Some(b_ns), Some(a_ns)) = (nodes.pop(), nodes.pop()) else {
        panic!("two namespaces");
    };
    // The neighbour table is shared by every namespace and holds 1,024 entries at most
    // by default: with one per address, 2,000 would overflow it. So every address is
    // reached through the other side's one link address: two neighbour entries in all.
    let mut a_batch = String::from("addr add 2001:db8:bf::10/64 dev eth0 nodad\n");
    let mut b_batch = String::from("addr add 2001:db8:bf::11/64 dev eth0 nodad\n");
    let mut conf = String::from("log stdout\nbfd\n");
    for i in 0..SESSIONS {
        a_batch += &format!("addr add {}/128 dev eth0 nodad\n", local(i));
        a_batch += &format!(
            "route add {}/128 via 2001:db8:bf::11 src {}\n",
            peer(i),
            local(i)
        );
        b_batch += &format!("addr add {}/128 dev eth0 nodad\n", peer(i));
        conf += &format!(
            " peer {} local-address {}\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n !\n",
            local(i),
            peer(i)
        );
    }
    b_batch += "route add 2001:db8:bf:2::/64 via 2001:db8:bf::10\n";
    conf += "!\n";
    for (ns, name, text) in [(&a_ns, "a.batch", a_batch), (&b_ns, "b.batch", b_batch)] {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
        ns.ip(&["-6", "-batch", &dir.join(name).to_string_lossy()])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let frr = dir.join("frr");
    std::fs::create_dir_all(&frr).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(frr.join("bfdd.conf"), conf).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::process::Command::new("chown")
        .args(["-R", "frr:frr"])
        .arg(&frr)
        .status();
    let _ = std::process::Command::new("chmod")
        .arg("755")
        .arg(dir)
        .status();
    let p = |f: &str| frr.join(f).to_string_lossy().into_owned();
    let mut c = b_ns.command("/usr/lib/frr/bfdd");
    c.args([
        "-f",
        &p("bfdd.conf"),
        "-i",
        &p("bfdd.pid"),
        "--vty_socket",
        &p(""),
        "-z",
        &p("zserv.api"),
        "-u",
        "frr",
        "-g",
        "frr",
    ]);
    let bfdd = Daemon::spawn("bfdd", c, &dir.join("bfdd.log")).unwrap_or_else(|e| panic!("{e}"));
    let bfdd_pid = bfdd.pid().unwrap_or(0);

    let figures = a_ns
        .block_on(|| async move {
            let (tx, rx) = tokio::sync::mpsc::channel(4096);
            let (etx, mut erx) = tokio::sync::mpsc::channel(4096);
            let views = Views::default();
            let driver = tokio::spawn(tern_bfd::driver::run(rx, etx, views.clone()));
            tokio::spawn(async move { while erx.recv().await.is_some() {} });
            let cfg = Config {
                desired_min_tx: Duration::from_millis(100),
                required_min_rx: Duration::from_millis(100),
                detect_mult: 3,
            };
            let t0 = Instant::now();
            for i in 0..SESSIONS {
                let add = Command::Add {
                    peer: IpAddr::V6(peer(i)),
                    cfg,
                    multihop: false,
                };
                let _ = tx.send(add).await;
            }
            let count_up = || {
                views
                    .lock()
                    .map(|v| v.values().filter(|s| s.state == State::Up).count())
                    .unwrap_or(0)
            };
            while count_up() < usize::from(SESSIONS) && t0.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let all_up = t0.elapsed();
            let up = count_up();
            let (cpu0, bfdd0, w0) = (thread_cpu(), process_cpu(bfdd_pid), Instant::now());
            tokio::time::sleep(STEADY).await;
            let (cpu1, bfdd1, wall) = (thread_cpu(), process_cpu(bfdd_pid), w0.elapsed());
            let still_up = count_up();
            drop(tx);
            let _ = driver.await;
            (up, all_up, still_up, cpu1 - cpu0, bfdd1 - bfdd0, wall)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let (up, all_up, still_up, tern_cpu, bfdd_cpu, wall) = figures;
    let log = std::fs::read_to_string(dir.join("bfdd.log")).unwrap_or_default()
        + &tern_interop::peers::cli_at(
            tern_interop::peers::Kind::Frr,
            dir,
            &["show bfd peers brief"],
        )
        .unwrap_or_else(|e| e.to_string());
    assert_eq!(
        up,
        usize::from(SESSIONS),
        "only {up} of {SESSIONS} sessions came Up in {all_up:?}; bfdd log:\n{}",
        log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    let pct = |cpu: f64| 100.0 * cpu / wall.as_secs_f64();
    eprintln!(
        "bfd_load: {SESSIONS} sessions at 100 ms x 3, all Up in {all_up:.1?}, {still_up} still Up after {wall:.1?}\n  \
         tern's BFD thread: {tern_cpu:.2} CPU-s = {:.1}% of a core\n  \
         FRR bfdd:          {bfdd_cpu:.2} CPU-s = {:.1}% of a core\n  \
         ratio tern/bfdd:   {:.2}",
        pct(tern_cpu),
        pct(bfdd_cpu),
        if bfdd_cpu > 0.0 { tern_cpu / bfdd_cpu } else { f64::NAN }
    );
}
