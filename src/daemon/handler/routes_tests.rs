//! The rows of `tern routes`, `--all` and `--count`, and the cost of a 100,000-route
//! answer (`cargo test --release -p tern --lib handler::routes -- --ignored --nocapture`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failure is the verdict

use std::net::Ipv4Addr;
use std::time::Instant;

use tern_bgp::rib::PeerSource;
use tern_bgp::wire::{AsPath, Origin, PathAttributes};

use super::*;

fn source(addr: &str, id: u8, local: bool) -> Arc<PeerSource> {
    Arc::new(PeerSource {
        address: addr.parse().unwrap(),
        router_id: Ipv4Addr::new(198, 51, 100, id),
        asn: 64512,
        ebgp: false,
        rr_client: false,
        local,
    })
}

fn path(src: &Arc<PeerSource>, as_path: &[u32], local_pref: u32) -> Arc<Path> {
    Arc::new(Path {
        source: Arc::clone(src),
        attrs: Arc::new(PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::from_sequence(as_path.iter().copied())),
            local_pref: Some(local_pref),
            ..PathAttributes::default()
        }),
        next_hop: src.address,
        path_id: 0,
        igp_cost: None,
        stale: false,
    })
}

/// `n` host routes in 198.18.0.0/15, each from two peers: 198.51.100.1 wins by the
/// shorter AS path; and one IPv6 route of our own.
/// The Loc-RIB and every path, as the speaker answers them.
type Tables = (Vec<(IpNet, Best)>, Vec<(IpNet, Vec<Arc<Path>>)>);

fn table(n: u32) -> Tables {
    let a = source("198.51.100.1", 1, false);
    let b = source("198.51.100.2", 2, false);
    let own = source("198.51.100.9", 9, true);
    let (mut rib, mut paths) = (Vec::new(), Vec::new());
    for i in 0..n {
        let prefix = IpNet::new(Ipv4Addr::from(0xC612_0000 + i).into(), 32).unwrap();
        let (win, lose) = (path(&a, &[64513], 100), path(&b, &[64514, 64515], 100));
        rib.push((
            prefix,
            Best {
                best: Arc::clone(&win),
                multipath: vec![Arc::clone(&win)].into(),
                reason: Reason::AsPathLength,
            },
        ));
        paths.push((prefix, vec![lose, win]));
    }
    let v6: IpNet = "2001:db8:1::/122".parse().unwrap();
    let mine = path(&own, &[], 100);
    rib.push((
        v6,
        Best {
            best: Arc::clone(&mine),
            multipath: vec![Arc::clone(&mine)].into(),
            reason: Reason::Equal,
        },
    ));
    paths.push((v6, vec![mine]));
    (rib, paths)
}

fn context<'a>(learned: &'a BTreeSet<IpNet>, installed: &'a HashSet<IpNet>) -> Context<'a> {
    Context {
        intent: None,
        kernel_learned: learned,
        installed,
    }
}

#[test]
fn all_paths_say_why_the_best_won_and_the_others_lost() {
    let (rib, paths) = table(3);
    let (learned, installed) = (BTreeSet::new(), HashSet::from([rib[1].0]));
    let cx = context(&learned, &installed);
    let filter = Filter {
        prefix: Some(IpNet::from("198.18.0.1".parse::<IpAddr>().unwrap())),
        ..Filter::default()
    };
    let mut rows = rows(&rib, filter, &cx);
    add_paths(&mut rows, &rib, &paths, &cx);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r.prefix, "198.18.0.1/32");
    assert!(r.installed);
    assert_eq!(r.paths.len(), 2);
    assert!(r.paths[0].best && r.paths[0].multipath);
    assert_eq!(r.paths[0].path.peer, "198.51.100.1");
    assert_eq!(r.paths[0].reason, "as-path-length");
    assert!(!r.paths[1].best && !r.paths[1].multipath);
    assert_eq!(r.paths[1].path.peer, "198.51.100.2");
    assert_eq!(r.paths[1].path.as_path, "64514 64515");
    assert_eq!(r.paths[1].reason, "as-path-length");
    // The JSON shape: path attributes flattened beside the verdict.
    let v = serde_json::to_value(&r.paths[1]).unwrap();
    for key in [
        "next_hops",
        "as_path",
        "peer",
        "source",
        "best",
        "multipath",
        "reason",
    ] {
        assert!(v.get(key).is_some(), "{key} missing from {v}");
    }
}

#[test]
fn family_peer_and_covering_address_filters() {
    let (rib, _) = table(3);
    let (learned, installed) = (BTreeSet::new(), HashSet::new());
    let cx = context(&learned, &installed);
    let v6 = Filter {
        v6: Some(true),
        ..Filter::default()
    };
    let got = rows(&rib, v6, &cx);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].prefix, "2001:db8:1::/122");
    assert_eq!(got[0].best.peer, "local");
    // An address with no route of its own: the routes covering it.
    let covering = Filter {
        prefix: Some(IpNet::from("2001:db8:1::5".parse::<IpAddr>().unwrap())),
        ..Filter::default()
    };
    assert_eq!(rows(&rib, covering, &cx).len(), 1);
    let by_peer = Filter {
        peer: Some("198.51.100.1".parse().unwrap()),
        v6: Some(false),
        ..Filter::default()
    };
    assert_eq!(rows(&rib, by_peer, &cx).len(), 3);
    let loser = Filter {
        peer: Some("198.51.100.2".parse().unwrap()),
        ..Filter::default()
    };
    assert!(rows(&rib, loser, &cx).is_empty());
    assert!(parse_family("ipv5").unwrap_err().contains("ipv4 or ipv6"));
}

#[test]
fn counts_per_family_and_per_peer() {
    let (rib, paths) = table(5);
    let c = count(&rib, &paths, None);
    let fam: Vec<(&str, u64, u64)> = c
        .families
        .iter()
        .map(|f| (f.family.as_str(), f.prefixes, f.paths))
        .collect();
    assert_eq!(fam, [("ipv4", 5, 10), ("ipv6", 1, 1)]);
    let peers: Vec<(&str, &str, u64, u64)> = c
        .peers
        .iter()
        .map(|p| (p.peer.as_str(), p.family.as_str(), p.paths, p.best))
        .collect();
    assert_eq!(
        peers,
        [
            ("198.51.100.1", "ipv4", 5, 5),
            ("198.51.100.2", "ipv4", 5, 0),
            ("local", "ipv6", 1, 1)
        ]
    );
    let only_v6 = count(&rib, &paths, Some(true));
    assert_eq!(only_v6.families.len(), 1);
    assert_eq!(only_v6.peers.len(), 1);
}

/// The daemon's part of `tern routes` on a 100,000-route node: the rows, then the
/// table it sends for the CLI's text output (`--all` too), or the JSON document
/// (`-o json`). Run in release for the figure; `TERN_ROUTES_N=1000000` for 1M routes
/// (only numbers in memory: nothing is installed).
#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture"]
fn a_100k_route_table_answers_quickly() {
    use crate::control::proto::RoutesReply;
    use crate::control::render;
    let n: u32 = std::env::var("TERN_ROUTES_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let (rib, paths) = table(n);
    let installed: HashSet<IpNet> = rib.iter().map(|(p, _)| *p).collect();
    let learned = BTreeSet::new();
    let cx = context(&learned, &installed);
    let t = Instant::now();
    let reply = RoutesReply {
        routes: rows(&rib, Filter::default(), &cx),
    };
    let built = t.elapsed();
    let t = Instant::now();
    let shown = render::routes(&reply);
    let table_time = t.elapsed();
    let t = Instant::now();
    let json = serde_json::to_string(&reply).unwrap();
    let json_time = t.elapsed();
    let t = Instant::now();
    let mut all = super::rows(&rib, Filter::default(), &cx);
    add_paths(&mut all, &rib, &paths, &cx);
    let all = RoutesReply { routes: all };
    let all_built = t.elapsed();
    let t = Instant::now();
    let all_shown = render::routes(&all);
    let all_table = t.elapsed();
    let t = Instant::now();
    let counted = count(&rib, &paths, None);
    let count_time = t.elapsed();
    eprintln!(
        "{n} routes: rows {built:?}, table {table_time:?} ({} KB), JSON {json_time:?} ({} KB); \
         --all: rows {all_built:?}, table {all_table:?} ({} KB); --count {count_time:?}",
        shown.len() / 1024,
        json.len() / 1024,
        all_shown.len() / 1024
    );
    // The header, its rules and one line per route.
    let n = n as usize;
    assert_eq!(shown.lines().count(), n + 1 + 4);
    assert_eq!(all_shown.lines().count(), 2 * n + 1 + 4);
    assert!(reply.routes.iter().all(|r| r.installed));
    assert_eq!(counted.families[0].paths, 2 * n as u64);
}
