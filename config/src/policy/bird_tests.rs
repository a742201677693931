//! BIRD itself as the oracle: programs (Calico's compiled ones, and random ones) are
//! rendered as BIRD filters, static routes carrying communities and AS paths go
//! through them in a BIRD run inside a network namespace of its own, and the routes
//! BIRD keeps must be exactly those `Program::evaluate` accepts.
//!
//! Needs root and `bird` (BIRD 2) on the PATH; skips with a message otherwise. The
//! static routes are blackholes in BIRD's own tables: no kernel protocol, so nothing
//! reaches any routing table of the machine, and the namespace is deleted afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a bug

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipnet::{IpNet, Ipv4Net};
use tern_bgp::policy::{
    Action, Condition, Decision, IpFamily, Modification, PeerType, PrefixOp, Program, RouteFacts,
    RouteSource, Statement,
};
use tern_bgp::wire::{AsPath, Community, LargeCommunity, PathAttributes};

use super::tests::node_a;

/// One static route and its attributes.
struct Route {
    prefix: Ipv4Net,
    attrs: PathAttributes,
}

fn render_condition(c: &Condition) -> Option<String> {
    Some(match c {
        Condition::Family(IpFamily::V4) => "(net.type = NET_IP4)".into(),
        Condition::Family(IpFamily::V6) => "(net.type = NET_IP6)".into(),
        Condition::Prefix { cidr, op } => format!("(net {op} {})", cidr.trunc()),
        Condition::PrefixRange {
            cidr,
            min,
            max,
            negate,
        } => format!(
            "(net {} [ {}{{{min},{max}}} ])",
            if *negate { "!~" } else { "~" },
            cidr.trunc()
        ),
        Condition::Source(RouteSource::Bgp) => "(source = RTS_BGP)".into(),
        Condition::Source(RouteSource::Originated) => "(source = RTS_STATIC)".into(),
        Condition::Source(RouteSource::Kernel) => "(source = RTS_INHERIT)".into(),
        Condition::Interface(p) => format!("(defined(ifname) && ifname ~ \"{p}\")"),
        Condition::Community(c) => format!("(({}, {}) ~ bgp_community)", c.0 >> 16, c.0 & 0xffff),
        Condition::LargeCommunity(l) => format!(
            "(({}, {}, {}) ~ bgp_large_community)",
            l.global, l.local1, l.local2
        ),
        Condition::AsPathPrefix(asns) => match asns.as_slice() {
            [one] => format!("(bgp_path.first = {one})"),
            many => format!(
                "(bgp_path ~ [= {} * =])",
                many.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        },
        // Not rendered: neither program here uses them.
        Condition::Priority(_) | Condition::PeerType(_) => return None,
    })
}

fn render_modification(m: &Modification) -> Option<String> {
    match m {
        Modification::AddCommunity(c) => Some(format!(
            "bgp_community.add(({}, {}));",
            c.0 >> 16,
            c.0 & 0xffff
        )),
        Modification::AddLargeCommunity(l) => Some(format!(
            "bgp_large_community.add(({}, {}, {}));",
            l.global, l.local1, l.local2
        )),
        // Priority and AS path changes do not take part in these programs' decisions.
        _ => None,
    }
}

/// The program as the body of a BIRD filter.
fn render(p: &Program) -> String {
    let mut out = String::new();
    for s in &p.statements {
        let conds: Vec<String> = s.conditions.iter().filter_map(render_condition).collect();
        assert_eq!(conds.len(), s.conditions.len(), "unrenderable: {s:?}");
        let mut body: Vec<String> = s
            .modifications
            .iter()
            .filter_map(render_modification)
            .collect();
        match s.action {
            Action::Accept => body.push("accept;".into()),
            Action::Reject => body.push("reject;".into()),
            Action::Continue => {}
        }
        if body.is_empty() {
            continue;
        }
        if conds.is_empty() {
            let _ = writeln!(out, "    {}", body.join(" "));
        } else {
            let _ = writeln!(
                out,
                "    if ({}) then {{ {} }}",
                conds.join(" && "),
                body.join(" ")
            );
        }
    }
    let _ = writeln!(
        out,
        "    {}",
        if p.default == Decision::Accept {
            "accept;"
        } else {
            "reject;"
        }
    );
    out
}

fn render_route(r: &Route) -> String {
    let mut body = String::new();
    for c in &r.attrs.communities {
        let _ = write!(
            body,
            " bgp_community.add(({}, {}));",
            c.0 >> 16,
            c.0 & 0xffff
        );
    }
    for l in &r.attrs.large_communities {
        let _ = write!(
            body,
            " bgp_large_community.add(({}, {}, {}));",
            l.global, l.local1, l.local2
        );
    }
    let asns: Vec<u32> = r
        .attrs
        .as_path
        .iter()
        .flat_map(|p| p.segments.iter().flat_map(|s| s.asns.iter().copied()))
        .collect();
    for a in asns.iter().rev() {
        let _ = write!(body, " bgp_path.prepend({a});");
    }
    format!("  route {} blackhole {{{body} }};\n", r.prefix)
}

fn config(programs: &[Program], routes: &[Route]) -> String {
    let mut c = String::from("router id 198.51.100.1;\nprotocol device {}\n");
    for (k, p) in programs.iter().enumerate() {
        let _ = write!(
            c,
            "ipv4 table t{k};\nprotocol static p{k} {{\n  ipv4 {{ table t{k}; import filter {{\n{}  }}; }};\n",
            render(p)
        );
        for r in routes {
            c.push_str(&render_route(r));
        }
        c.push_str("}\n");
    }
    c
}

/// A small deterministic generator (xorshift), so that a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
}

const NETS: [&str; 8] = [
    "198.18.0.0/15",
    "198.18.0.0/16",
    "198.18.4.0/24",
    "198.18.4.0/26",
    "198.19.0.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "0.0.0.0/0",
];

fn communities() -> [Community; 2] {
    [Community((65000 << 16) | 1), Community((65000 << 16) | 2)]
}

const LARGE: LargeCommunity = LargeCommunity {
    global: 65000,
    local1: 1,
    local2: 2,
};

fn random_condition(rng: &mut Rng) -> Condition {
    let cidr: IpNet = rng.pick(&NETS).parse().unwrap();
    match rng.below(7) {
        0 | 1 => Condition::Prefix {
            cidr,
            op: rng.pick(&[
                PrefixOp::Equal,
                PrefixOp::NotEqual,
                PrefixOp::In,
                PrefixOp::NotIn,
            ]),
        },
        2 => {
            // As confd clamps it: never shorter than the CIDR, never empty.
            let min = cidr.prefix_len() + rng.below(33 - usize::from(cidr.prefix_len())) as u8;
            let max = min + rng.below(33 - usize::from(min)) as u8;
            Condition::PrefixRange {
                cidr,
                min,
                max,
                negate: rng.below(2) == 1,
            }
        }
        3 => Condition::Community(rng.pick(&communities())),
        4 => Condition::LargeCommunity(LARGE),
        5 if rng.below(4) == 0 => Condition::Interface(rng.pick(&["*", "cali*", "?*"]).into()),
        5 => Condition::AsPathPrefix(rng.pick(&[vec![65001], vec![65002], vec![65001, 65002]])),
        _ => Condition::Source(rng.pick(&[RouteSource::Originated, RouteSource::Bgp])),
    }
}

fn random_program(rng: &mut Rng) -> Program {
    let statements = (0..1 + rng.below(6))
        .map(|i| {
            let action = rng.pick(&[Action::Accept, Action::Reject, Action::Continue]);
            Statement {
                label: format!("s{i}"),
                conditions: (0..rng.below(3)).map(|_| random_condition(rng)).collect(),
                modifications: match action {
                    Action::Continue => vec![Modification::AddCommunity(rng.pick(&communities()))],
                    _ => Vec::new(),
                },
                action,
            }
        })
        .collect();
    Program {
        statements,
        default: rng.pick(&[Decision::Accept, Decision::Reject]),
    }
}

fn random_routes(rng: &mut Rng) -> Vec<Route> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for _ in 0..40 {
        // Documentation ranges only (the last entry, 0.0.0.0/0, is added as such).
        let base: Ipv4Net = rng.pick(&NETS[..NETS.len() - 1]).parse().unwrap();
        let len = base.prefix_len() + rng.below(33 - usize::from(base.prefix_len())) as u8;
        let offset = u32::try_from(rng.next() & 0xffff_ffff).unwrap() & !base.netmask().to_bits();
        let addr = std::net::Ipv4Addr::from(base.network().to_bits() | offset);
        let prefix = Ipv4Net::new(addr, len).unwrap().trunc();
        if !seen.insert(prefix) {
            continue;
        }
        let comms = communities();
        let attrs = PathAttributes {
            communities: comms
                .iter()
                .copied()
                .filter(|_| rng.below(3) == 0)
                .collect(),
            large_communities: if rng.below(4) == 0 {
                vec![LARGE]
            } else {
                Vec::new()
            },
            as_path: match rng.below(4) {
                0 => None,
                1 => Some(AsPath::from_sequence([65001])),
                2 => Some(AsPath::from_sequence([65001, 65002])),
                _ => Some(AsPath::from_sequence([65002, 65001])),
            },
            ..PathAttributes::default()
        };
        out.push(Route { prefix, attrs });
    }
    out
}

/// Kills BIRD and deletes the namespace, whatever happens to the test.
struct Lab {
    ns: String,
    bird: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut b) = self.bird.take() {
            let _ = b.kill();
            let _ = b.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

fn birdc(sock: &str, args: &[&str]) -> String {
    let out = Command::new("birdc")
        .arg("-s")
        .arg(sock)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The prefixes BIRD kept in each table, after running `programs` on `routes`.
fn bird_accepts(programs: &[Program], routes: &[Route]) -> Option<Vec<BTreeSet<Ipv4Net>>> {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let have_bird = Command::new("bird").arg("--version").output().is_ok();
    if !root || !have_bird {
        eprintln!("skipped: needs root and BIRD 2 (`bird`, `birdc`) on the PATH");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("bird.conf");
    let sock = dir.path().join("bird.ctl").display().to_string();
    std::fs::write(&conf, config(programs, routes)).unwrap();
    let parse = Command::new("bird")
        .arg("-p")
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    assert!(
        parse.status.success(),
        "BIRD refuses the rendered configuration: {}\n{}",
        String::from_utf8_lossy(&parse.stderr),
        config(programs, routes)
    );
    let ns = format!("tern-policy-{}", std::process::id());
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    let mut lab = Lab { ns, bird: None };
    lab.bird = Some(
        Command::new("ip")
            .args(["netns", "exec", &lab.ns, "bird", "-f", "-c"])
            .arg(&conf)
            .args(["-s", &sock])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let last = format!("p{}", programs.len() - 1);
    loop {
        let protocols = birdc(&sock, &["show", "protocols"]);
        if protocols
            .lines()
            .any(|l| l.starts_with(&last) && l.contains(" up "))
        {
            break;
        }
        assert!(Instant::now() < deadline, "BIRD did not start: {protocols}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let tables = (0..programs.len())
        .map(|k| {
            birdc(&sock, &["show", "route", "table", &format!("t{k}")])
                .lines()
                .filter_map(|l| l.split_whitespace().next()?.parse::<Ipv4Net>().ok())
                .collect()
        })
        .collect();
    drop(lab);
    Some(tables)
}

fn tern_accepts(p: &Program, routes: &[Route]) -> BTreeSet<Ipv4Net> {
    routes
        .iter()
        .filter(|r| {
            p.evaluate(&RouteFacts {
                prefix: IpNet::V4(r.prefix),
                source: RouteSource::Originated,
                interface: None,
                attrs: &r.attrs,
                kernel_metric: None,
                peer: PeerType::External,
            })
            .accepted()
        })
        .map(|r| r.prefix)
        .collect()
}

#[test]
fn bird_keeps_exactly_the_routes_the_programs_accept() {
    let mut rng = Rng(0x7e4e_5eed_0000_0001);
    let i = node_a();
    let mut programs: Vec<Program> = ["198.51.100.1", "198.51.100.2", "198.51.100.11"]
        .iter()
        .map(|peer| {
            let mut p = i
                .peer_policy(&i.peers[&peer.parse::<IpAddr>().unwrap()])
                .export;
            // The priority preamble takes no part in these decisions.
            p.statements.retain(|s| {
                !matches!(
                    s.modifications.first(),
                    Some(Modification::DerivePriority { .. })
                )
            });
            p
        })
        .collect();
    // BIRD's `ifname` of a blackhole is defined and empty.
    for pattern in ["*", "cali*"] {
        programs.push(Program {
            statements: vec![Statement {
                label: format!("interface {pattern}"),
                conditions: vec![Condition::Interface(pattern.into())],
                modifications: Vec::new(),
                action: Action::Accept,
            }],
            default: Decision::Reject,
        });
    }
    programs.extend((0..80).map(|_| random_program(&mut rng)));
    let mut routes = random_routes(&mut rng);
    // The cluster's own prefixes, so Calico's statements are all reached.
    for p in [
        "198.18.4.0/26",
        "198.18.4.7/32",
        "198.19.0.0/26",
        "198.18.12.0/26",
        "203.0.113.128/25",
        "203.0.113.0/24",
        "0.0.0.0/0",
    ] {
        let prefix: Ipv4Net = p.parse().unwrap();
        if routes.iter().all(|r| r.prefix != prefix) {
            routes.push(Route {
                prefix,
                attrs: PathAttributes::default(),
            });
        }
    }
    let Some(bird) = bird_accepts(&programs, &routes) else {
        return;
    };
    // Not vacuous: BIRD kept some routes and dropped others.
    let kept: usize = bird.iter().map(BTreeSet::len).sum();
    assert!(
        kept > 0 && kept < programs.len() * routes.len(),
        "BIRD kept {kept} of {} routes",
        programs.len() * routes.len()
    );
    let mut failures = Vec::new();
    for (k, (p, kept)) in programs.iter().zip(&bird).enumerate() {
        let ours = tern_accepts(p, &routes);
        if &ours != kept {
            failures.push(format!(
                "program {k}:\n{}only tern accepts: {:?}\nonly BIRD accepts: {:?}",
                render(p),
                ours.difference(kept).collect::<Vec<_>>(),
                kept.difference(&ours).collect::<Vec<_>>()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
