//! Scenario tests of the sans-IO speaker core (`tern_bgp::speaker::core::Speaker`), in
//! the manner of holo's conformance tests: each directory under `tests/scenarios/`
//! holds an `input` (the speaker's configuration, then one timed input per line) and
//! an `expected` transcript (each input line followed by the outputs it caused, one per
//! line, sent UPDATEs decoded back into words). The test replays every input against
//! a fresh core and compares; `BLESS=1 cargo test -p tern-bgp --test speaker_scenarios`
//! rewrites the `expected` files instead. The format is described in
//! `tests/scenarios/README.md`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the test failing

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tern_bgp::rib::Best;
use tern_bgp::session::SessionEvent;
use tern_bgp::speaker::core::{Control, Input, Output, Speaker, TimerId};
use tern_bgp::speaker::{PeerConfig, RibNews, SpeakerEvent};
use tern_bgp::wire::{
    Capability, CodecOptions, Message, MpNextHop, Nlri, Origin, PathAttributes, RefreshSubtype,
    RouteRefresh, Update,
};

#[path = "scenarios/parse.rs"]
mod parse;
use parse::{
    announce, config, down_reason, family, ip, offset, peer, policy, show_offset, up, withdrawal,
};
use tern_bgp::policy::RouteSource;

/// A scenario being replayed: the core, its start time, each peer's codec options.
struct Run {
    speaker: Speaker,
    start: Instant,
    tx: HashMap<IpAddr, CodecOptions>,
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
            // `refresh <peer> <family> [borr|eorr]`: a request, or a marker of the
            // peer's answer to ours.
            "refresh" => event(SessionEvent::RouteRefresh {
                peer: peer(),
                refresh: RouteRefresh {
                    family: family(args[1]),
                    subtype: match args.get(2) {
                        Some(&"borr") => RefreshSubtype::BeginningOfRibRefresh,
                        Some(&"eorr") => RefreshSubtype::EndOfRibRefresh,
                        _ => RefreshSubtype::Request,
                    },
                },
            }),
            // `originate <prefix> [kernel <interface>]`: a block, or a borrowed address.
            "originate" => Input::Originate {
                prefix: args[0].parse().unwrap(),
                attrs: PathAttributes {
                    origin: Some(Origin::Igp),
                    ..PathAttributes::default()
                },
                source: match args.get(1) {
                    Some(&"kernel") => RouteSource::Kernel,
                    _ => RouteSource::Originated,
                },
                interface: args.get(2).map(|s| s.to_string()),
            },
            "set-policy" => {
                let (p, pol) = policy(args);
                Input::SetPolicy(p, pol)
            }
            "unoriginate" => Input::Withdraw(args[0].parse().unwrap()),
            "add-peer" => Input::AddPeer(peer_of(args)),
            "remove-peer" => Input::RemovePeer(ip(args[0]), args[1..].join(" ")),
            "timer" => match args {
                ["deferral"] => Input::Timer(TimerId::Deferral),
                ["pack"] => Input::Timer(TimerId::Pack),
                ["restart", p, "gen", g] => Input::Timer(TimerId::Restart {
                    peer: ip(p),
                    generation: g.parse().unwrap(),
                }),
                _ => panic!("timer: deferral | pack | restart <peer> gen <n>, got {args:?}"),
            },
            "stalled" => Input::Stalled(ip(args[0])),
            "writable" => Input::Writable(ip(args[0])),
            _ => panic!("unknown input {verb:?}"),
        }
    }

    /// `query routes | routes-of <prefix> | stats | advertised <peer> | received <peer>
    /// [prefix]`: what the driver would answer.
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
                    let _ = write!(
                        out,
                        "  stats {} in {} out {} advertised {} received {}",
                        s.address, s.updates_in, s.updates_out, s.advertised, s.received
                    );
                    if s.rejected_import + s.filtered_export > 0 {
                        let _ = write!(
                            out,
                            " rejected-import {} filtered-export {}",
                            s.rejected_import, s.filtered_export
                        );
                    }
                    out.push('\n');
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
            ["routes-of", p] => {
                let want = p.parse().unwrap();
                for (p, b) in self.speaker.routes_of(want) {
                    let _ = writeln!(out, "  route {p} {}", best(&b));
                }
                for (p, paths) in self.speaker.paths_of(&[want]) {
                    let _ = writeln!(out, "  paths {p} {}", paths.len());
                }
            }
            ["received", p, rest @ ..] => {
                let only = rest.first().map(|w| w.parse().unwrap());
                match self.speaker.received(ip(p), only) {
                    None => out.push_str("  received none\n"),
                    Some(r) => {
                        for (prefix, path, best) in r.accepted {
                            let flag = if best { " best" } else { "" };
                            let _ = writeln!(
                                out,
                                "  received {prefix} nh {} accepted{flag}",
                                path.next_hop
                            );
                        }
                        for (prefix, id, path) in r.rejected.paths {
                            let nh = path.next_hop.map_or("-".into(), |a| a.to_string());
                            let _ = writeln!(
                                out,
                                "  received {prefix} id {id} nh {nh}{} rejected: {}",
                                attrs(&path.attrs),
                                path.reason
                            );
                        }
                        if r.rejected.not_kept > 0 {
                            let _ = writeln!(out, "  received not-kept {}", r.rejected.not_kept);
                        }
                    }
                }
            }
            _ => panic!(
                "query: routes | routes-of <prefix> | stats | advertised <peer> | received <peer> [prefix], got {words:?}"
            ),
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
            Output::Wake(p) => {
                let _ = writeln!(out, "  wake {p}");
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
            // The task, not the core, replays the table; shown should that change.
            Output::Rib(RibNews::Replay(entries)) => {
                let _ = writeln!(out, "  rib replay of {} entries", entries.len());
            }
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
            Output::Packed => out.push_str("  packed\n"),
            Output::Timer { id, at } => {
                let id = match id {
                    TimerId::Deferral => "deferral".to_string(),
                    TimerId::Pack => "pack".to_string(),
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
        SpeakerEvent::Trouble(p, t) => format!("trouble {}: {t:?}", p.ip()),
        SpeakerEvent::Rejected(p, why) => format!("rejected {}: {why}", p.ip()),
        SpeakerEvent::Refused(p) => format!("refused {}", p.ip()),
        SpeakerEvent::PolicyChanged(p, what) => format!("policy {}: {what}", p.ip()),
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
            "policy" => {
                let (a, pol) = policy(&words[1..]);
                let p = peers
                    .iter_mut()
                    .find(|p: &&mut PeerConfig| p.address.ip() == a);
                p.expect("policy: after its peer line").policy = Some(pol);
            }
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
                // `a | b | c`: several inputs taken as one batch.
                let rest: Vec<&str> = line.splitn(2, ' ').skip(1).collect();
                let parts: Vec<&str> = rest.first().map_or(vec![], |r| r.split(" | ").collect());
                let outputs = if parts.len() > 1 {
                    let mut inputs: VecDeque<Input> = parts
                        .iter()
                        .map(|p| r.input(&p.split_whitespace().collect::<Vec<_>>()))
                        .collect();
                    let mut outputs = Vec::new();
                    while !inputs.is_empty() {
                        outputs.extend(r.speaker.handle_batch(now, &mut inputs));
                    }
                    outputs
                } else {
                    let input = r.input(&words[1..]);
                    r.speaker.handle(now, input)
                };
                for o in outputs {
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
