//! Reading a scenario's `input`: the configuration lines and the words of each timed
//! input (see `README.md` next to this file).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tern_bgp::fsm::{DownReason, Negotiated};
use tern_bgp::policy::{
    Action, Condition, Decision, Modification, PeerPolicy, PeerType, PrefixOp, Program,
    RouteSource, Statement,
};
use tern_bgp::speaker::{PeerConfig, SpeakerConfig};
use tern_bgp::wire::{
    AsPath, CodecOptions, Community, Family, GracefulRestart, GracefulRestartFamily, MpNextHop,
    MpReach, MpUnreach, Nlri, Origin, PathAttributes, Update,
};

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("address {s:?}: {e}"))
}

pub fn v4(s: &str) -> Ipv4Addr {
    s.parse()
        .unwrap_or_else(|e| panic!("IPv4 address {s:?}: {e}"))
}

pub fn num<T: std::str::FromStr>(s: Option<&&str>, what: &str) -> T {
    s.and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: expected a number, got {s:?}"))
}

pub fn family(s: &str) -> Family {
    match s {
        "ipv4" => Family::IPV4_UNICAST,
        "ipv6" => Family::IPV6_UNICAST,
        _ => panic!("family {s:?}: ipv4 or ipv6"),
    }
}

pub fn families(s: &str) -> Vec<Family> {
    s.split(',').map(family).collect()
}

/// `+15s`, `+1500ms`: time since the scenario started.
pub fn offset(s: &str) -> Duration {
    let s = s
        .strip_prefix('+')
        .unwrap_or_else(|| panic!("time {s:?}: +<n>s"));
    match s.strip_suffix("ms") {
        Some(ms) => Duration::from_millis(ms.parse().unwrap()),
        None => Duration::from_secs(s.strip_suffix('s').unwrap().parse().unwrap()),
    }
}

pub fn show_offset(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("+{}s", d.as_secs())
    } else {
        format!("+{}ms", d.as_millis())
    }
}

/// `config id <router id> as <asn> [cluster-id <id>] [max-routes <n>] [max-paths <n>]
/// [restarting]`.
pub fn config(words: &[&str]) -> SpeakerConfig {
    let mut c = SpeakerConfig {
        router_id: Ipv4Addr::UNSPECIFIED,
        local_as: 0,
        listen: None,
        extra_listen: Vec::new(),
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

/// `<address> as <asn> [rr-client] [next-hop-self] [next-hop-keep] [max-prefixes <n>] [restart-time <s>]
/// [local <address>] [local-v4 <address>] [families ipv4,ipv6]`.
pub fn peer(words: &[&str]) -> PeerConfig {
    let (Some(a), Some(&"as"), Some(asn)) = (words.first(), words.get(1), words.get(2)) else {
        panic!("peer: <address> as <asn> ..., got {words:?}");
    };
    let mut p = PeerConfig::new(SocketAddr::new(ip(a), 179), num(Some(asn), "as"));
    let mut w = words.iter().skip(3);
    while let Some(k) = w.next() {
        match *k {
            "rr-client" => p.rr_client = true,
            "next-hop-self" => p.next_hop_self = true,
            "next-hop-keep" => p.next_hop_keep = true,
            "max-prefixes" => p.max_prefixes = Some(num(w.next(), "max-prefixes")),
            "restart-time" => p.restart_time = Some(num(w.next(), "restart-time")),
            "local" => p.local_address = Some(ip(w.next().unwrap())),
            "local-v4" => p.local_v4 = Some(v4(w.next().unwrap())),
            "families" => p.families = families(w.next().unwrap()),
            _ => panic!("peer: unknown word {k:?}"),
        }
    }
    p
}

/// `up <address> as <asn> id <id> [families ipv4,ipv6] [gr <secs> [gr-families ..]
/// [nof]] [add-path] [enhanced] [local <address>]`: the session came up with this
/// negotiated (`local`: our end of its TCP connection).
pub fn up(words: &[&str]) -> (IpAddr, Negotiated) {
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
        local_address: None,
        local_port: None,
        remote_port: None,
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
            "no-refresh" => n.route_refresh = false,
            "local" => n.local_address = Some(ip(w.next().unwrap())),
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
pub fn announce(words: &[&str]) -> Update {
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
pub fn withdrawal(words: &[&str]) -> Update {
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

pub fn down_reason(w: &str) -> DownReason {
    match w {
        "connection-lost" => DownReason::ConnectionLost,
        "stopped" => DownReason::Stopped,
        "notification" => DownReason::NotificationReceived("Cease / Administrative Reset".into()),
        _ => panic!("down: connection-lost, stopped or notification, got {w:?}"),
    }
}

/// `a:b`: a standard community.
fn community(s: &str) -> Community {
    let (hi, lo) = s
        .split_once(':')
        .unwrap_or_else(|| panic!("community {s:?}: a:b"));
    Community(hi.parse::<u32>().unwrap() << 16 | lo.parse::<u32>().unwrap())
}

/// One program: `[<label> if <condition>... then [community a:b]... accept|reject|continue ;]...
/// default accept|reject`. Conditions: `prefix <cidr>` (equal), `in <cidr>` (inside),
/// `source bgp|originated|kernel`, `peer-type internal|external`, `iface <pattern>`,
/// `community a:b`. In a label, `_` stands for a space.
fn program(words: &[&str]) -> Program {
    let parts: Vec<&[&str]> = words.split(|w| *w == ";").collect();
    let (last, stmts) = parts.split_last().expect("a program");
    let default = match last {
        ["default", "accept"] => Decision::Accept,
        ["default", "reject"] => Decision::Reject,
        _ => panic!("program: ends with default accept|reject, got {last:?}"),
    };
    let statements = stmts.iter().map(|s| statement(s)).collect();
    Program {
        statements,
        default,
    }
}

fn statement(words: &[&str]) -> Statement {
    let [label, "if", rest @ ..] = words else {
        panic!("statement: <label> if ... then ..., got {words:?}");
    };
    let then = rest
        .iter()
        .position(|w| *w == "then")
        .expect("statement: a then");
    let mut conditions = Vec::new();
    let mut w = rest[..then].iter();
    while let Some(k) = w.next() {
        let arg = *w
            .next()
            .unwrap_or_else(|| panic!("condition {k}: an argument"));
        conditions.push(match *k {
            "prefix" => Condition::Prefix {
                cidr: arg.parse().unwrap(),
                op: PrefixOp::Equal,
            },
            "in" => Condition::Prefix {
                cidr: arg.parse().unwrap(),
                op: PrefixOp::In,
            },
            "source" => Condition::Source(match arg {
                "bgp" => RouteSource::Bgp,
                "originated" => RouteSource::Originated,
                "kernel" => RouteSource::Kernel,
                _ => panic!("source {arg:?}"),
            }),
            "peer-type" => Condition::PeerType(match arg {
                "internal" => PeerType::Internal,
                "external" => PeerType::External,
                _ => panic!("peer-type {arg:?}"),
            }),
            "iface" => Condition::Interface(arg.to_string()),
            "community" => Condition::Community(community(arg)),
            _ => panic!("condition {k:?}"),
        });
    }
    let mut modifications = Vec::new();
    let mut action = None;
    let mut w = rest[then + 1..].iter();
    while let Some(k) = w.next() {
        match *k {
            "community" => modifications.push(Modification::AddCommunity(community(
                w.next().expect("community a:b"),
            ))),
            "accept" => action = Some(Action::Accept),
            "reject" => action = Some(Action::Reject),
            "continue" => action = Some(Action::Continue),
            _ => panic!("then: unknown word {k:?}"),
        }
    }
    Statement {
        label: label.replace('_', " "),
        conditions,
        modifications,
        action: action.expect("then: accept, reject or continue"),
    }
}

/// `<peer> import <program> export <program>` (either may be left out: accept all).
pub fn policy(words: &[&str]) -> (IpAddr, Arc<PeerPolicy>) {
    let peer = ip(words[0]);
    let rest = &words[1..];
    let at = |k: &str| rest.iter().position(|w| *w == k);
    let accept_all = || Program::default_only(Decision::Accept);
    let (import, export) = match (at("import"), at("export")) {
        (Some(i), Some(e)) if i < e => (program(&rest[i + 1..e]), program(&rest[e + 1..])),
        (Some(i), None) => (program(&rest[i + 1..]), accept_all()),
        (None, Some(e)) => (accept_all(), program(&rest[e + 1..])),
        _ => panic!("policy: <peer> [import <program>] [export <program>], got {words:?}"),
    };
    (peer, Arc::new(PeerPolicy { import, export }))
}
