//! The decision process step by step, and the RIB's bookkeeping: ECMP sets, interning,
//! treat-as-withdraw, ADD-PATH, peers going away and graceful restart's stale paths.

use std::cmp::Ordering;

use super::*;
use crate::wire::{AsPath, Family, MpReach, Origin};

fn source(addr: &str, id: u8, asn: u32, ebgp: bool) -> Arc<PeerSource> {
    Arc::new(PeerSource {
        address: addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")),
        router_id: Ipv4Addr::new(198, 51, 100, id),
        asn,
        ebgp,
        rr_client: false,
        local: false,
    })
}

fn attrs(path: &[u32]) -> PathAttributes {
    PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::from_sequence(path.iter().copied())),
        next_hop: Some(Ipv4Addr::new(198, 51, 100, 1)),
        ..PathAttributes::default()
    }
}

fn path(src: &Arc<PeerSource>, a: PathAttributes) -> Path {
    Path {
        source: Arc::clone(src),
        attrs: Arc::new(a),
        next_hop: src.address,
        path_id: 0,
        igp_cost: None,
        stale: false,
    }
}

fn net(s: &str) -> Nlri {
    Nlri::new(s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
}

fn announce(prefixes: &[&str], a: PathAttributes) -> Update {
    Update {
        attributes: a,
        nlri: prefixes.iter().map(|p| net(p)).collect(),
        ..Update::default()
    }
}

#[test]
fn each_step_of_the_decision_process() {
    let e1 = source("198.51.100.2", 2, 64601, true);
    let e2 = source("198.51.100.3", 3, 64602, true);
    let i1 = source("198.51.100.4", 4, 64512, false);
    let base = attrs(&[64601]);
    let cases: Vec<(Path, Path, Reason)> = vec![
        (
            path(
                &e1,
                PathAttributes {
                    local_pref: Some(200),
                    ..base.clone()
                },
            ),
            path(
                &e2,
                PathAttributes {
                    local_pref: Some(150),
                    ..base.clone()
                },
            ),
            Reason::LocalPref,
        ),
        (
            path(&e1, attrs(&[64601])),
            path(&e2, attrs(&[64602, 64603])),
            Reason::AsPathLength,
        ),
        (
            path(&e1, base.clone()),
            path(
                &e2,
                PathAttributes {
                    origin: Some(Origin::Incomplete),
                    ..base.clone()
                },
            ),
            Reason::Origin,
        ),
        (
            path(
                &e1,
                PathAttributes {
                    med: Some(5),
                    ..base.clone()
                },
            ),
            path(
                &e2,
                PathAttributes {
                    med: Some(50),
                    ..base.clone()
                },
            ),
            Reason::Med,
        ),
        (
            path(&e2, attrs(&[64602])),
            path(&i1, attrs(&[64602])),
            Reason::ExternalOverInternal,
        ),
        (
            Path {
                igp_cost: Some(10),
                ..path(&e2, attrs(&[64602]))
            },
            Path {
                igp_cost: Some(20),
                ..path(&e1, attrs(&[64601]))
            },
            Reason::IgpCost,
        ),
        (
            path(&e1, attrs(&[64601])),
            path(&e2, attrs(&[64602])),
            Reason::RouterId,
        ),
        (
            path(
                &i1,
                PathAttributes {
                    originator_id: Some(Ipv4Addr::new(198, 51, 100, 9)),
                    cluster_list: vec![],
                    ..base.clone()
                },
            ),
            path(
                &i1,
                PathAttributes {
                    originator_id: Some(Ipv4Addr::new(198, 51, 100, 9)),
                    cluster_list: vec![Ipv4Addr::new(1, 1, 1, 1)],
                    ..base.clone()
                },
            ),
            Reason::ClusterListLength,
        ),
    ];
    for (better, worse, why) in cases {
        assert_eq!(compare(&better, &worse), (Ordering::Less, why), "{why:?}");
        assert_eq!(
            compare(&worse, &better),
            (Ordering::Greater, why),
            "{why:?} reversed"
        );
    }
    // MED only counts between paths from the same neighbouring AS.
    let a = path(
        &e1,
        PathAttributes {
            med: Some(50),
            ..attrs(&[64601])
        },
    );
    let b = path(
        &e2,
        PathAttributes {
            med: Some(5),
            ..attrs(&[64602])
        },
    );
    assert_eq!(compare(&a, &b).1, Reason::RouterId);
    // ORIGINATOR_ID stands in for the router id of reflected paths.
    let r = path(
        &i1,
        PathAttributes {
            originator_id: Some(Ipv4Addr::new(198, 51, 100, 1)),
            ..base.clone()
        },
    );
    assert_eq!(
        compare(&r, &path(&e1, base.clone())).1,
        Reason::ExternalOverInternal
    );
    let s = source("198.51.100.5", 5, 64512, false);
    assert_eq!(
        compare(&r, &path(&s, base)),
        (Ordering::Less, Reason::RouterId)
    );
}

#[test]
fn equal_paths_share_traffic_up_to_max_paths() {
    let peers: Vec<_> = (2..6)
        .map(|i| source(&format!("198.51.100.{i}"), i, 64512, false))
        .collect();
    let mut rib = Rib::new(3);
    for p in &peers {
        rib.apply_update(p, &announce(&["198.18.4.0/26"], attrs(&[])));
    }
    let b = rib.best(&"198.18.4.0/26".parse().unwrap_or_default());
    let b = b.unwrap_or_else(|| panic!("no best"));
    assert_eq!(
        b.best.source.address.to_string(),
        "198.51.100.2",
        "lowest router id"
    );
    assert_eq!(b.reason, Reason::RouterId);
    assert_eq!(b.multipath.len(), 3, "capped at max_paths");
    // A path with a longer AS path does not join the set.
    let mut rib = Rib::new(8);
    rib.apply_update(&peers[0], &announce(&["198.18.4.0/26"], attrs(&[64601])));
    rib.apply_update(
        &peers[1],
        &announce(&["198.18.4.0/26"], attrs(&[64601, 64602])),
    );
    assert_eq!(
        rib.best(&"198.18.4.0/26".parse().unwrap_or_default())
            .map(|b| b.multipath.len()),
        Some(1)
    );
}

#[test]
fn attributes_are_interned_and_freed() {
    let a = source("198.51.100.2", 2, 64601, true);
    let b = source("198.51.100.3", 3, 64601, true);
    let mut rib = Rib::new(1);
    rib.apply_update(
        &a,
        &announce(&["198.18.0.0/26", "198.18.0.64/26"], attrs(&[64601])),
    );
    rib.apply_update(&b, &announce(&["198.18.1.0/26"], attrs(&[64601])));
    assert_eq!(
        rib.attr_store().len(),
        1,
        "one set shared by three paths of two peers"
    );
    let p0 = rib.paths(&"198.18.0.0/26".parse().unwrap_or_default())[0]
        .attrs
        .clone();
    let p1 = rib.paths(&"198.18.1.0/26".parse().unwrap_or_default())[0]
        .attrs
        .clone();
    assert!(Arc::ptr_eq(&p0, &p1));
    drop((p0, p1));
    rib.peer_down(a.address);
    rib.peer_down(b.address);
    assert!(rib.is_empty());
    assert_eq!(rib.attr_store().collect_garbage(), 1);
    assert!(rib.attr_store().is_empty());
}

#[test]
fn the_prefixes_of_one_update_share_one_path_also_when_stale() {
    let a = source("198.51.100.2", 2, 64601, true);
    let b = source("198.51.100.3", 3, 64601, true);
    let mut rib = Rib::new(2);
    let (x, y) = (net("198.18.0.0/26").prefix, net("198.18.0.64/26").prefix);
    let first = |rib: &Rib, p: &IpNet| Arc::clone(&rib.paths(p)[0]);
    rib.apply_update(
        &a,
        &announce(&["198.18.0.0/26", "198.18.0.64/26"], attrs(&[64601])),
    );
    assert!(Arc::ptr_eq(&first(&rib, &x), &first(&rib, &y)));
    // A second path makes the prefix hold a list and an ECMP set; its going makes
    // it a single path again, with the same entry as before.
    let alone = rib.best(&x);
    let c = rib.apply_update(&b, &announce(&["198.18.0.0/26"], attrs(&[64601])));
    assert_eq!(rib.paths(&x).len(), 2);
    assert_eq!(c.len(), 1, "two equal paths now share traffic");
    assert_eq!(rib.best(&x).map(|b| b.multipath.len()), Some(2));
    let c = rib.peer_down(b.address);
    assert_eq!(c.len(), 1);
    assert_eq!(rib.best(&x), alone);
    rib.mark_stale(a.address);
    let (sx, sy) = (first(&rib, &x), first(&rib, &y));
    assert!(
        sx.stale && Arc::ptr_eq(&sx, &sy),
        "one stale copy, still shared"
    );
    assert_eq!(rib.paths_from(a.address), 2);
    // Sent again: fresh; the prefix not sent again is swept.
    rib.apply_update(&a, &announce(&["198.18.0.0/26"], attrs(&[64601])));
    assert!(!first(&rib, &x).stale && first(&rib, &y).stale);
    let c = rib.sweep_stale(a.address, None);
    assert_eq!(c.iter().map(|c| c.prefix).collect::<Vec<_>>(), vec![y]);
    assert_eq!((rib.len(), rib.paths_from(a.address)), (1, 1));
}

#[test]
fn withdrawals_treat_as_withdraw_and_changes() {
    let a = source("198.51.100.2", 2, 64601, true);
    let b = source("198.51.100.3", 3, 64602, true);
    let mut rib = Rib::new(1);
    let c = rib.apply_update(&a, &announce(&["198.18.0.0/26"], attrs(&[64601])));
    assert_eq!(c.len(), 1);
    let c = rib.apply_update(&b, &announce(&["198.18.0.0/26"], attrs(&[64602, 64603])));
    assert!(c.is_empty(), "a worse path changes nothing");
    // An UPDATE RFC 7606 says to treat as withdraw removes a's path: b takes over.
    let mut bad = announce(&["198.18.0.0/26"], attrs(&[64601]));
    bad.errors.push(crate::wire::AttributeError {
        code: 1,
        action: crate::wire::ErrorAction::TreatAsWithdraw,
        subcode: 6,
        reason: "test".into(),
        data: bytes::Bytes::new(),
    });
    let c = rib.apply_update(&a, &bad);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0].now.as_ref().map(|b| b.best.source.address),
        Some(b.address)
    );
    // A plain withdrawal of the last path empties the prefix.
    let w = Update {
        withdrawn: vec![net("198.18.0.0/26")],
        ..Update::default()
    };
    let c = rib.apply_update(&b, &w);
    assert_eq!(
        c,
        vec![BestChange {
            prefix: "198.18.0.0/26".parse().unwrap_or_default(),
            now: None
        }]
    );
    assert!(rib.is_empty());
}

#[test]
fn ipv6_and_add_path_paths_from_one_peer() {
    let a = source("2001:db8::2", 2, 64601, true);
    let mut rib = Rib::new(4);
    let mut nlri = vec![net("2001:db8:4::/64"), net("2001:db8:4::/64")];
    nlri[0].path_id = Some(1);
    nlri[1].path_id = Some(2);
    let u = Update {
        attributes: PathAttributes {
            next_hop: None,
            ..attrs(&[64601])
        },
        mp_reach: Some(MpReach {
            family: Family::IPV6_UNICAST,
            next_hop: MpNextHop::V6 {
                global: "2001:db8::2"
                    .parse()
                    .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
                link_local: None,
            },
            nlri,
            unparsed: None,
        }),
        ..Update::default()
    };
    rib.apply_update(&a, &u);
    let p: IpNet = "2001:db8:4::/64".parse().unwrap_or_default();
    assert_eq!(rib.paths(&p).len(), 2, "two ADD-PATH paths kept apart");
    assert_eq!(
        rib.best(&p).map(|b| (b.best.path_id, b.reason)),
        Some((1, Reason::PathId))
    );
    assert_eq!(
        rib.best(&p).map(|b| b.best.next_hop.to_string()),
        Some("2001:db8::2".into())
    );
    assert_eq!(
        rib.prefixes_by_family(),
        (0, 1),
        "one IPv6 prefix, two paths"
    );
    rib.peer_down(a.address);
    assert_eq!(rib.prefixes_by_family(), (0, 0));
}

#[test]
fn graceful_restart_keeps_stale_paths_until_swept() {
    let a = source("198.51.100.2", 2, 64601, true);
    let mut rib = Rib::new(1);
    rib.apply_update(
        &a,
        &announce(&["198.18.0.0/26", "198.18.0.64/26"], attrs(&[64601])),
    );
    rib.mark_stale(a.address);
    assert_eq!(rib.len(), 2, "stale paths keep forwarding");
    assert!(
        rib.iter().all(|(_, b)| b.best.stale),
        "the Loc-RIB shows them stale"
    );
    // After the restart the peer sends one of the two again.
    rib.apply_update(&a, &announce(&["198.18.0.0/26"], attrs(&[64601])));
    let c = rib.sweep_stale(a.address, None);
    assert_eq!(
        c.iter()
            .map(|c| (c.prefix.to_string(), c.now.is_none()))
            .collect::<Vec<_>>(),
        [("198.18.0.64/26".to_string(), true)]
    );
    assert_eq!(rib.len(), 1);
    assert!(rib
        .paths(&"198.18.0.0/26".parse().unwrap_or_default())
        .iter()
        .all(|p| !p.stale));
}

#[test]
fn a_peer_going_down_hands_over_to_the_next_best() {
    let a = source("198.51.100.2", 2, 64601, true);
    let b = source("198.51.100.3", 3, 64602, true);
    let mut rib = Rib::new(1);
    rib.apply_update(&a, &announce(&["198.18.0.0/26"], attrs(&[64601])));
    rib.apply_update(
        &b,
        &announce(&["198.18.0.0/26", "198.18.9.0/26"], attrs(&[64602])),
    );
    let c = rib.peer_down(a.address);
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0].now.as_ref().map(|x| x.best.source.address),
        Some(b.address)
    );
    assert_eq!(rib.len(), 2);
}

#[test]
fn a_route_failing_import_checks_replaces_the_earlier_one_as_a_withdrawal() {
    let a = source("198.51.100.2", 2, 64601, true);
    let policy = import::ImportPolicy {
        local_as: 64512,
        allowas_in: 0,
        ebgp: true,
        peer_as: 64601,
        router_id: Ipv4Addr::new(198, 51, 100, 1),
        cluster_id: None,
        own: vec![std::net::IpAddr::V4(Ipv4Addr::new(198, 51, 100, 250))].into(),
    };
    let mut rib = Rib::new(1);
    let (c, r) = rib.import_update(&a, &announce(&["198.18.0.0/26"], attrs(&[64601])), &policy);
    assert_eq!((c.len(), r), (1, None));
    let (c, r) = rib.import_update(
        &a,
        &announce(&["198.18.0.0/26"], attrs(&[64601, 64512])),
        &policy,
    );
    assert_eq!(
        r,
        Some(import::Rejection::AsPathLoop {
            count: 1,
            allowed: 0
        })
    );
    assert_eq!(
        c.first().map(|c| c.now.is_none()),
        Some(true),
        "the earlier path is gone"
    );
    assert!(rib.is_empty());
}

#[test]
fn paths_are_counted_per_peer_as_they_come_and_go() {
    let a = source("198.51.100.2", 2, 64601, true);
    let b = source("198.51.100.3", 3, 64602, true);
    let mut rib = Rib::new(4);
    let three = ["198.18.0.0/26", "198.18.0.64/26", "198.18.0.128/26"];
    rib.apply_update(&a, &announce(&three, attrs(&[64601])));
    rib.apply_update(&b, &announce(&three[..1], attrs(&[64602])));
    assert_eq!(
        (rib.paths_from(a.address), rib.paths_from(b.address)),
        (3, 1)
    );
    assert_eq!(rib.paths_total(), 4);
    // Announcing a prefix again replaces the path: no double count.
    rib.apply_update(&a, &announce(&three[..2], attrs(&[64601, 64601])));
    assert_eq!(rib.paths_from(a.address), 3);
    let w = Update {
        withdrawn: vec![net("198.18.0.64/26"), net("198.18.1.0/26")],
        ..Update::default()
    };
    rib.apply_update(&a, &w);
    assert_eq!(
        rib.paths_from(a.address),
        2,
        "an unknown withdrawal counts nothing"
    );
    rib.mark_stale(a.address);
    assert_eq!(rib.paths_from(a.address), 2, "stale paths are still held");
    rib.sweep_stale(a.address, None);
    rib.peer_down(b.address);
    assert_eq!(
        (rib.paths_from(a.address), rib.paths_from(b.address)),
        (0, 0)
    );
    assert_eq!(rib.paths_total(), 0);
    // The counts agree with a walk of the table.
    rib.apply_update(&a, &announce(&three, attrs(&[64601])));
    let walked = three
        .iter()
        .map(|p| rib.paths(&net(p).prefix).len())
        .sum::<usize>();
    assert_eq!(rib.paths_from(a.address), walked as u64);
    assert_eq!(rib.paths_total(), walked as u64);
    assert_eq!(rib.prefixes_by_family(), (3, 0));
}

#[test]
fn reason_names_are_the_json_names() {
    use crate::rib::Reason::*;
    for r in [
        LocalPref,
        AsPathLength,
        Origin,
        Med,
        ExternalOverInternal,
        IgpCost,
        RouterId,
        ClusterListLength,
        PeerAddress,
        PathId,
        Equal,
    ] {
        assert_eq!(serde_json::to_value(r).unwrap(), r.name(), "{r:?}");
    }
}

#[test]
fn the_loc_rib_in_pieces_is_the_whole_table_once_in_order() {
    let e1 = source("198.51.100.2", 2, 64601, true);
    let mut rib = Rib::new(1);
    let prefixes = [
        "198.18.0.0/26",
        "198.18.0.64/26",
        "198.18.1.0/24",
        "198.18.2.0/24",
        "203.0.113.0/24",
    ];
    rib.apply_update(&e1, &announce(&prefixes, attrs(&[64601])));
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let piece = rib.best_after(after, 2);
        assert!(piece.len() <= 2);
        let Some(last) = piece.last() else { break };
        after = Some(last.prefix);
        assert!(piece.iter().all(|c| c.now.is_some()));
        seen.extend(piece.iter().map(|c| c.prefix.to_string()));
    }
    assert_eq!(seen, prefixes);
}

#[test]
fn table_keys_keep_the_prefix_order_and_give_the_prefix_back() {
    let mut nets: Vec<IpNet> = [
        "0.0.0.0/0",
        "198.18.0.0/15",
        "198.18.0.0/26",
        "198.18.0.64/26",
        "198.18.0.1/32",
        "255.255.255.255/32",
        "::/0",
        "2001:db8::/32",
        "2001:db8::/64",
        "2001:db8:8000::/64",
        "2001:db8::1/128",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
    ]
    .iter()
    .map(|s| s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
    .collect();
    nets.reverse();
    let mut keys: Vec<Key> = nets.iter().map(|n| Key::from(*n)).collect();
    nets.sort();
    keys.sort();
    let back: Vec<IpNet> = keys.into_iter().map(Key::net).collect();
    assert_eq!(back, nets);
}

/// Packing rebuilds the table's B-tree: every prefix keeps its paths and its Loc-RIB
/// entry, in order, and the table takes changes as before.
#[test]
fn a_packed_table_holds_the_same_entries_and_takes_changes() {
    let a = source("198.51.100.2", 2, 64601, true);
    let b = source("198.51.100.3", 3, 64602, true);
    let mut rib = Rib::new(1);
    let prefixes: Vec<String> = (0..5000u32)
        .map(|i| format!("198.18.{}.{}/32", i / 256, i % 256))
        .collect();
    let all: Vec<&str> = prefixes.iter().map(String::as_str).collect();
    rib.apply_update(&a, &announce(&all, attrs(&[64601])));
    rib.apply_update(&b, &announce(&all[..10], attrs(&[64602, 1])));
    assert_eq!(rib.unpacked(), 5000);
    let before: Vec<(IpNet, Best)> = rib.iter().collect();
    rib.pack();
    assert_eq!(rib.unpacked(), 0);
    assert_eq!(rib.iter().collect::<Vec<_>>(), before);
    assert_eq!(rib.paths(&net(all[3]).prefix).len(), 2);
    let gone = Update {
        withdrawn: all[9..11].iter().map(|p| net(p)).collect(),
        ..Update::default()
    };
    rib.apply_update(&a, &gone);
    assert_eq!(
        (rib.len(), rib.unpacked()),
        (4999, 1),
        "one prefix kept B's path"
    );
    assert_eq!(
        rib.best(&net(all[9]).prefix).map(|e| e.best.source.asn),
        Some(64602)
    );
}
