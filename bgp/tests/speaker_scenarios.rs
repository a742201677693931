//! Scenario tests of the sans-IO speaker core (`tern_bgp::speaker::core::Speaker`), in
//! the manner of holo's conformance tests: each directory under `tests/scenarios/`
//! holds an `input` (the speaker's configuration, then one timed input per line) and
//! an `expected` transcript (each input line followed by the outputs it caused, one per
//! line, sent UPDATEs decoded back into words). The test replays every input against
//! a fresh core and compares; `BLESS=1 cargo test -p tern-bgp --test speaker_scenarios`
//! rewrites the `expected` files instead. The format is described in
//! `tests/scenarios/README.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the test failing

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tern_bgp::fsm::{DownReason, Negotiated};
use tern_bgp::rib::Best;
use tern_bgp::session::SessionEvent;
use tern_bgp::speaker::core::{Control, Input, Output, Speaker, TimerId};
use tern_bgp::speaker::{PeerConfig, RibNews, SpeakerConfig, SpeakerEvent};
use tern_bgp::wire::{
    AsPath, Capability, CodecOptions, Community, Family, GracefulRestart, GracefulRestartFamily,
    Message, MpNextHop, MpReach, MpUnreach, Nlri, Origin, PathAttributes, RefreshSubtype,
    RouteRefresh, Update,
};

/// A scenario being replayed: the core, its start time, each peer's codec options.
struct Run {
    speaker: Speaker,
    start: Instant,
    tx: HashMap<IpAddr, CodecOptions>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("address {s:?}: {e}"))
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse()
        .unwrap_or_else(|e| panic!("IPv4 address {s:?}: {e}"))
}

fn num<T: std::str::FromStr>(s: Option<&&str>, what: &str) -> T {
    s.and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: expected a number, got {s:?}"))
}

fn family(s: &str) -> Family {
    match s {
        "ipv4" => Family::IPV4_UNICAST,
        "ipv6" => Family::IPV6_UNICAST,
        _ => panic!("family {s:?}: ipv4 or ipv6"),
    }
}

fn families(s: &str) -> Vec<Family> {
    s.split(',').map(family).collect()
}

/// `+15s`, `+1500ms`: time since the scenario started.
fn offset(s: &str) -> Duration {
    let s = s
        .strip_prefix('+')
        .unwrap_or_else(|| panic!("time {s:?}: +<n>s"));
    match s.strip_suffix("ms") {
        Some(ms) => Duration::from_millis(ms.parse().unwrap()),
        None => Duration::from_secs(s.strip_suffix('s').unwrap().parse().unwrap()),
    }
}

fn show_offset(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("+{}s", d.as_secs())
    } else {
        format!("+{}ms", d.as_millis())
    }
}

/// `config id <router id> as <asn> [cluster-id <id>] [max-routes <n>] [max-paths <n>]
/// [restarting]`.
fn config(words: &[&str]) -> SpeakerConfig {
    let mut c = SpeakerConfig {
        router_id: Ipv4Addr::UNSPECIFIED,
        local_as: 0,
        listen: None,
        cluster_id: None,
        max_paths: 1,
        peers: Vec::new(),
        restarting: false,
        max_routes: None,
    };
    let mut w = words.iter();
    while let Some(k) = w.next() {
        match *k {
            "id" => c.router_id = v4(w.next().unwrap()),
            "as" => c.local_as = num(w.next(), "as"),
            "cluster-id" => c.cluster_id = Some(v4(w.next().unwrap())),
            "max-routes" => c.max_routes = Some(num(w.next(), "max-routes")),
            "max-paths" => c.max_paths = num(w.next(), "max-paths"),
            "restarting" => c.restarting = true,
            _ => panic!("config: unknown word {k:?}"),
        }
    }
    c
}

/// `<address> as <asn> [rr-client] [next-hop-self] [max-prefixes <n>] [restart-time <s>]
/// [local <address>] [families ipv4,ipv6]`.
fn peer(words: &[&str]) -> PeerConfig {
    let (Some(a), Some(&"as"), Some(asn)) = (words.first(), words.get(1), words.get(2)) else {
        panic!("peer: <address> as <asn> ..., got {words:?}");
    };
    let mut p = PeerConfig::new(SocketAddr::new(ip(a), 179), num(Some(asn), "as"));
    let mut w = words.iter().skip(3);
    while let Some(k) = w.next() {
        match *k {
            "rr-client" => p.rr_client = true,
            "next-hop-self" => p.next_hop_self = true,
            "max-prefixes" => p.max_prefixes = Some(num(w.next(), "max-prefixes")),
            "restart-time" => p.restart_time = Some(num(w.next(), "restart-time")),
            "local" => p.local_address = Some(ip(w.next().unwrap())),
            "families" => p.families = families(w.next().unwrap()),
            _ => panic!("peer: unknown word {k:?}"),
        }
    }
    p
}

/// `up <address> as <asn> id <id> [families ipv4,ipv6] [gr <secs> [gr-families ..]
/// [nof]] [add-path] [enhanced]`: the session came up with this negotiated.
fn up(words: &[&str]) -> (IpAddr, Negotiated) {
    let peer = ip(words[0]);
    let mut n = Negotiated {
        peer_asn: 0,
        peer_id: Ipv4Addr::UNSPECIFIED,
        hold_time: 90,
        keepalive: 30,
        families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        rx: CodecOptions::modern(),
        tx: CodecOptions::modern(),
        route_refresh: true,
        enhanced_route_refresh: false,
        extended_next_hop_ipv4: false,
        peer_graceful_restart: None,
        add_path_receive: Vec::new(),
        add_path_send: Vec::new(),
    };
    let (mut gr_time, mut gr_families, mut forwarding) = (None, None, true);
    let mut add_path = false;
    let mut w = words.iter().skip(1);
    while let Some(k) = w.next() {
        match *k {
            "as" => n.peer_asn = num(w.next(), "as"),
            "id" => n.peer_id = v4(w.next().unwrap()),
            "families" => n.families = families(w.next().unwrap()),
            "gr" => gr_time = Some(num(w.next(), "gr")),
            "gr-families" => gr_families = Some(families(w.next().unwrap())),
            "nof" => forwarding = false,
            "add-path" => add_path = true,
            "enhanced" => n.enhanced_route_refresh = true,
            _ => panic!("up: unknown word {k:?}"),
        }
    }
    if add_path {
        n.add_path_send = n.families.clone();
        n.add_path_receive = n.families.clone();
        for o in [&mut n.tx, &mut n.rx] {
            o.add_path_ipv4 = n.families.contains(&Family::IPV4_UNICAST);
            o.add_path_ipv6 = n.families.contains(&Family::IPV6_UNICAST);
        }
    }
    n.peer_graceful_restart = gr_time.map(|restart_time| GracefulRestart {
        restart_state: false,
        notification: false,
        restart_time,
        families: gr_families
            .unwrap_or_else(|| n.families.clone())
            .into_iter()
            .map(|family| GracefulRestartFamily {
                family,
                forwarding_preserved: forwarding,
            })
            .collect(),
    });
    (peer, n)
}

/// `<prefix>... [nh <addr>] [aspath <asn>...] [lp <n>] [med <n>] [originator <id>]
/// [cluster <id>,...] [community <a:b>,...] [id <path id>]`: an UPDATE announcing them.
fn announce(words: &[&str]) -> Update {
    let keyword = |w: &&str| w.parse::<IpNet>().is_err();
    let mut prefixes: Vec<IpNet> = Vec::new();
    let mut rest = words.iter().peekable();
    while let Some(w) = rest.next_if(|w| !keyword(w)) {
        prefixes.push(w.parse().unwrap());
    }
    let mut a = PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::default()),
        ..PathAttributes::default()
    };
    let (mut nh, mut path_id) = (None, None);
    while let Some(k) = rest.next() {
        match *k {
            "nh" => nh = Some(ip(rest.next().unwrap())),
            "aspath" => {
                let mut asns = Vec::new();
                while let Some(n) = rest.next_if(|w| w.parse::<u32>().is_ok()) {
                    asns.push(n.parse().unwrap());
                }
                a.as_path = Some(AsPath::from_sequence(asns));
            }
            "lp" => a.local_pref = Some(num(rest.next(), "lp")),
            "med" => a.med = Some(num(rest.next(), "med")),
            "originator" => a.originator_id = Some(v4(rest.next().unwrap())),
            "cluster" => a.cluster_list = rest.next().unwrap().split(',').map(v4).collect(),
            "community" => {
                a.communities = rest
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|c| {
                        let (hi, lo) = c.split_once(':').unwrap();
                        Community(hi.parse::<u32>().unwrap() << 16 | lo.parse::<u32>().unwrap())
                    })
                    .collect()
            }
            "id" => path_id = Some(num(rest.next(), "id")),
            _ => panic!("update: unknown word {k:?}"),
        }
    }
    let nlri: Vec<Nlri> = prefixes
        .iter()
        .map(|p| Nlri {
            prefix: *p,
            path_id,
        })
        .collect();
    match nh {
        Some(IpAddr::V6(global)) => Update {
            attributes: a,
            mp_reach: Some(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: MpNextHop::V6 {
                    global,
                    link_local: None,
                },
                nlri,
                unparsed: None,
            }),
            ..Update::default()
        },
        Some(IpAddr::V4(n)) => Update {
            attributes: PathAttributes {
                next_hop: Some(n),
                ..a
            },
            nlri,
            ..Update::default()
        },
        None => panic!("update: no nh"),
    }
}

/// `<prefix>... [id <path id>]`: an UPDATE withdrawing them.
fn withdrawal(words: &[&str]) -> Update {
    let path_id = words
        .iter()
        .position(|w| *w == "id")
        .map(|i| num(words.get(i + 1), "id"));
    let (mut v4s, mut v6s) = (Vec::new(), Vec::new());
    for w in words.iter().take_while(|w| **w != "id") {
        let prefix: IpNet = w.parse().unwrap();
        let n = Nlri { prefix, path_id };
        if prefix.addr().is_ipv4() {
            v4s.push(n);
        } else {
            v6s.push(n);
        }
    }
    Update {
        withdrawn: v4s,
        mp_unreach: (!v6s.is_empty()).then(|| MpUnreach {
            family: Family::IPV6_UNICAST,
            withdrawn: v6s,
            unparsed: None,
        }),
        ..Update::default()
    }
}

fn down_reason(w: &str) -> DownReason {
    match w {
        "connection-lost" => DownReason::ConnectionLost,
        "stopped" => DownReason::Stopped,
        "notification" => DownReason::NotificationReceived("Cease / Administrative Reset".into()),
        _ => panic!("down: connection-lost, stopped or notification, got {w:?}"),
    }
}

impl Run {
    /// One timed input line (without its time).
    fn input(&mut self, words: &[&str]) -> Input {
        let sock = |w: &str| SocketAddr::new(ip(w), 179);
        let (verb, args) = words.split_first().expect("an input after the time");
        let peer = || sock(args[0]);
        let event = |e| Input::Session(e);
        match *verb {
            "up" => {
                let (p, n) = up(args);
                self.tx.insert(p, n.tx);
                event(SessionEvent::Up {
                    peer: sock(&p.to_string()),
                    negotiated: Box::new(n),
                })
            }
            "down" => event(SessionEvent::Down {
                peer: peer(),
                reason: down_reason(args[1]),
            }),
            "update" => event(SessionEvent::Update {
                peer: peer(),
                update: Box::new(announce(&args[1..])),
            }),
            "withdraw" => event(SessionEvent::Update {
                peer: peer(),
                update: Box::new(withdrawal(&args[1..])),
            }),
            "eor" => event(SessionEvent::Update {
                peer: peer(),
                update: Box::new(Update::end_of_rib(family(args[1]))),
            }),
            "refresh" => event(SessionEvent::RouteRefresh {
                peer: peer(),
                refresh: RouteRefresh {
                    family: family(args[1]),
                    subtype: RefreshSubtype::Request,
                },
            }),
            "originate" => Input::Originate {
                prefix: args[0].parse().unwrap(),
                attrs: PathAttributes {
                    origin: Some(Origin::Igp),
                    ..PathAttributes::default()
                },
            },
            "unoriginate" => Input::Withdraw(args[0].parse().unwrap()),
            "add-peer" => Input::AddPeer(peer_of(args)),
            "remove-peer" => Input::RemovePeer(ip(args[0]), args[1..].join(" ")),
            "timer" => match args {
                ["deferral"] => Input::Timer(TimerId::Deferral),
                ["restart", p, "gen", g] => Input::Timer(TimerId::Restart {
                    peer: ip(p),
                    generation: g.parse().unwrap(),
                }),
                _ => panic!("timer: deferral | restart <peer> gen <n>, got {args:?}"),
            },
            "stalled" => Input::Stalled(ip(args[0])),
            "writable" => Input::Writable(ip(args[0])),
            _ => panic!("unknown input {verb:?}"),
        }
    }

    /// `query routes | stats | advertised <peer>`: what the driver would answer.
    fn query(&self, words: &[&str], out: &mut String) {
        match words {
            ["routes"] => {
                for (p, b) in self.speaker.routes() {
                    let _ = writeln!(out, "  route {p} {}", best(&b));
                }
            }
            ["stats"] => {
                let mut stats = self.speaker.peer_stats();
                stats.sort_by_key(|s| s.address);
                for s in stats {
                    let _ = writeln!(
                        out,
                        "  stats {} in {} out {} advertised {} received {}",
                        s.address, s.updates_in, s.updates_out, s.advertised, s.received
                    );
                }
            }
            ["advertised", p] => match self.speaker.advertised(ip(p)) {
                None => out.push_str("  advertised none\n"),
                Some(mut v) => {
                    v.sort_by_key(|(p, _)| *p);
                    for (p, e) in v {
                        let _ =
                            writeln!(out, "  advertised {p} nh {}{}", e.next_hop, attrs(&e.attrs));
                    }
                }
            },
            _ => panic!("query: routes | stats | advertised <peer>, got {words:?}"),
        }
    }

    fn output(&self, o: &Output, out: &mut String) {
        match o {
            Output::Send(p, msgs) => {
                let opts = self.tx.get(p).copied().unwrap_or_else(CodecOptions::modern);
                for m in msgs {
                    let _ = writeln!(out, "  send {p} {}", message(m.clone(), &opts));
                }
            }
            Output::Control(p, Control::Stop(t)) => {
                let _ = writeln!(out, "  stop {p} {t:?}");
            }
            Output::Control(p, Control::Reset(n, hold)) => {
                let _ = writeln!(out, "  reset {p} {n} hold {}s", hold.as_secs());
            }
            Output::Control(p, Control::SetCapabilities(caps)) => {
                let _ = writeln!(out, "  set-capabilities {p} {}", gr_caps(caps));
            }
            Output::StartSession(dc) => {
                let _ = writeln!(
                    out,
                    "  start-session {} as {} local-as {} {}",
                    dc.peer.ip(),
                    dc.fsm.peer_as,
                    dc.fsm.local_as,
                    gr_caps(&dc.fsm.capabilities)
                );
            }
            Output::DropSession(p, text) => {
                let _ = writeln!(out, "  drop-session {p} {text:?}");
            }
            Output::Rib(RibNews::Converged) => out.push_str("  rib converged\n"),
            Output::Rib(RibNews::Changes(changes)) => {
                for c in changes {
                    let _ = match &c.now {
                        Some(b) => writeln!(out, "  rib + {} {}", c.prefix, best(b)),
                        None => writeln!(out, "  rib - {}", c.prefix),
                    };
                }
            }
            Output::Event(e) => {
                let _ = writeln!(out, "  event {}", event(e));
            }
            Output::Timer { id, at } => {
                let id = match id {
                    TimerId::Deferral => "deferral".to_string(),
                    TimerId::Restart { peer, generation } => {
                        format!("restart {peer} gen {generation}")
                    }
                };
                let _ = match at {
                    Some(at) => writeln!(
                        out,
                        "  timer {id} at {}",
                        show_offset(at.duration_since(self.start))
                    ),
                    None => writeln!(out, "  timer {id} cancel"),
                };
            }
        }
    }
}

fn peer_of(args: &[&str]) -> PeerConfig {
    peer(args)
}

fn best(b: &Best) -> String {
    let via: Vec<String> = if b.multipath.is_empty() {
        vec![b.best.next_hop.to_string()]
    } else {
        b.multipath.iter().map(|p| p.next_hop.to_string()).collect()
    };
    let from = &b.best.source;
    let stale = if b.best.stale { " stale" } else { "" };
    if from.local {
        format!("via {} local{stale}", via.join(","))
    } else {
        format!("via {} from {}{stale}", via.join(","), from.address)
    }
}

fn gr_caps(caps: &[Capability]) -> String {
    caps.iter()
        .find_map(|c| match c {
            Capability::GracefulRestart(g) => Some(format!(
                "gr r={} f={} time {}",
                u8::from(g.restart_state),
                u8::from(g.families.iter().all(|f| f.forwarding_preserved)),
                g.restart_time
            )),
            _ => None,
        })
        .unwrap_or_else(|| "no gr".into())
}

fn event(e: &SpeakerEvent) -> String {
    match e {
        SpeakerEvent::Routes(c) => format!("routes {}", c.len()),
        SpeakerEvent::PeerUp(p, _) => format!("up {}", p.ip()),
        SpeakerEvent::PeerDown(p, why) => format!("down {}: {why}", p.ip()),
        SpeakerEvent::Rejected(p, why) => format!("rejected {}: {why}", p.ip()),
        SpeakerEvent::Refused(p) => format!("refused {}", p.ip()),
        SpeakerEvent::PeerState(p, s) => format!("state {} {s:?}", p.ip()),
        SpeakerEvent::RestartComplete { peers, by_timer } => {
            let by = if *by_timer { "timer" } else { "end-of-rib" };
            format!("restart-complete peers {peers} by {by}")
        }
    }
}

fn nlri(list: &[Nlri]) -> String {
    let v: Vec<String> = list
        .iter()
        .map(|n| match n.path_id {
            Some(id) => format!("{}#{id}", n.prefix),
            None => n.prefix.to_string(),
        })
        .collect();
    v.join(" ")
}

fn attrs(a: &PathAttributes) -> String {
    let mut s = String::new();
    match &a.as_path {
        Some(p) if !p.segments.is_empty() => {
            let _ = write!(s, " aspath {p}");
        }
        Some(_) => s.push_str(" aspath -"),
        None => {}
    }
    if let Some(lp) = a.local_pref {
        let _ = write!(s, " lp {lp}");
    }
    if let Some(med) = a.med {
        let _ = write!(s, " med {med}");
    }
    if let Some(o) = a.originator_id {
        let _ = write!(s, " originator {o}");
    }
    if !a.cluster_list.is_empty() {
        let c: Vec<String> = a.cluster_list.iter().map(Ipv4Addr::to_string).collect();
        let _ = write!(s, " cluster {}", c.join(","));
    }
    if !a.communities.is_empty() {
        let c: Vec<String> = a
            .communities
            .iter()
            .map(|c| format!("{}:{}", c.0 >> 16, c.0 & 0xffff))
            .collect();
        let _ = write!(s, " community {}", c.join(","));
    }
    s
}

/// One sent message in words, decoded from its bytes.
fn message(bytes: bytes::Bytes, opts: &CodecOptions) -> String {
    match Message::decode(bytes, opts) {
        Ok(Message::Update(u)) => {
            if let Some(f) = u.end_of_rib_family() {
                return format!("eor {f}");
            }
            let mut parts = Vec::new();
            let mut withdrawn = u.withdrawn.clone();
            if let Some(m) = &u.mp_unreach {
                withdrawn.extend(m.withdrawn.iter().copied());
            }
            if !withdrawn.is_empty() {
                parts.push(format!("withdraw {}", nlri(&withdrawn)));
            }
            if !u.nlri.is_empty() {
                let nh = u.attributes.next_hop.map_or("-".into(), |n| n.to_string());
                parts.push(format!(
                    "update {} nh {nh}{}",
                    nlri(&u.nlri),
                    attrs(&u.attributes)
                ));
            }
            if let Some(m) = &u.mp_reach {
                let nh = match &m.next_hop {
                    MpNextHop::V4(a) => a.to_string(),
                    MpNextHop::V6 { global, .. } => global.to_string(),
                    MpNextHop::Other(b) => format!("{b:?}"),
                };
                parts.push(format!(
                    "update {} nh {nh}{}",
                    nlri(&m.nlri),
                    attrs(&u.attributes)
                ));
            }
            parts.join("; ")
        }
        Ok(Message::RouteRefresh(r)) => match r.subtype {
            RefreshSubtype::BeginningOfRibRefresh => format!("borr {}", r.family),
            RefreshSubtype::EndOfRibRefresh => format!("eorr {}", r.family),
            s => format!("route-refresh {} {s:?}", r.family),
        },
        Ok(m) => format!("{m:?}"),
        Err(e) => format!("undecodable: {e}"),
    }
}

/// Replays one scenario's input; returns the transcript.
fn replay(input: &str) -> String {
    let mut cfg = None;
    let mut peers = Vec::new();
    let mut run: Option<Run> = None;
    let mut out = String::new();
    for line in input.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[0] {
            "config" => cfg = Some(config(&words[1..])),
            "peer" => peers.push(peer(&words[1..])),
            t => {
                let r = run.get_or_insert_with(|| {
                    let mut c = cfg.take().expect("a config line before the first input");
                    c.peers = std::mem::take(&mut peers);
                    let start = Instant::now();
                    let (speaker, outputs) = Speaker::new(c, start);
                    let r = Run {
                        speaker,
                        start,
                        tx: HashMap::new(),
                    };
                    out.push_str("start\n");
                    for o in &outputs {
                        r.output(o, &mut out);
                    }
                    r
                });
                let _ = writeln!(out, "{line}");
                if words.get(1) == Some(&"query") {
                    r.query(&words[2..], &mut out);
                    continue;
                }
                let now = r.start + offset(t);
                let input = r.input(&words[1..]);
                for o in r.speaker.handle(now, input) {
                    r.output(&o, &mut out);
                }
            }
        }
    }
    out
}

/// A line diff of `expected` and `actual` (longest common subsequence).
fn diff(expected: &str, actual: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, "  {}", a[i]);
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "- {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "+ {}", b[j]);
            j += 1;
        }
    }
    out
}

fn scenarios() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("input").is_file())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn speaker_scenarios() {
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let dirs = scenarios();
    assert!(dirs.len() >= 8, "scenarios missing: {dirs:?}");
    let mut failed = Vec::new();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let input = std::fs::read_to_string(dir.join("input")).unwrap();
        let actual = replay(&input);
        // Twice: the core must be deterministic for its transcript to mean anything.
        assert_eq!(actual, replay(&input), "{name}: two replays differ");
        let path = dir.join("expected");
        if bless {
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if expected != actual {
            failed.push(format!(
                "scenario {name} ({}): - expected, + actual\n{}",
                path.display(),
                diff(&expected, &actual)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{}\n(BLESS=1 rewrites the expected files)",
        failed.join("\n")
    );
}

#[test]
fn the_diff_shows_what_changed() {
    let d = diff("a\nb\nc\n", "a\nx\nc\n");
    assert_eq!(d, "  a\n- b\n+ x\n  c\n");
}
