//! The Linux backend against the real kernel, inside namespaces these tests create:
//! every route kind added, replaced and deleted and read back with `ip -j route`;
//! refusals attributed to their prefix; routes of other protocols never touched;
//! reconcile after a crash adopting what is still wanted; interfaces and neighbours.
//! Skips without root; fails under CI=true.

#![cfg(target_os = "linux")]

use std::net::IpAddr;

use futures::StreamExt;
use ipnet::IpNet;
use serde_json::Value;
use tern_fib::diag::{self, FindingKind, NextHopFacts, PeerFacts, Resolution};
use tern_fib::linux::LinuxFib;
use tern_fib::reconcile::reconcile;
use tern_fib::{Fib, NeighbourState, NextHop, Route, RouteChange, RouteKind};
use tern_interop::netns::Netns;

const PROTO: u8 = 201;

fn net(s: &str) -> IpNet {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Two namespaces joined by a veth (so eth0 has carrier), addresses on both ends.
fn lab(prefix: &str) -> Option<(Netns, Netns)> {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(prefix, &reason);
        return None;
    }
    let node = Netns::create(&format!("{prefix}-n")).unwrap_or_else(|e| panic!("{e}"));
    let peer = Netns::create(&format!("{prefix}-p")).unwrap_or_else(|e| panic!("{e}"));
    node.veth_to("eth0", &peer, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    for (ns, v4, v6) in [
        (&node, "198.51.100.1/24", "2001:db8::1/64"),
        (&peer, "198.51.100.2/24", "2001:db8::2/64"),
    ] {
        ns.add_addr("eth0", v4).unwrap_or_else(|e| panic!("{e}"));
        ns.add_addr("eth0", v6).unwrap_or_else(|e| panic!("{e}"));
    }
    Some((node, peer))
}

/// Runs `f` on a thread inside `ns` with a current-thread runtime.
fn in_ns<T: Send, Fut: std::future::Future<Output = T>>(
    ns: &Netns,
    f: impl FnOnce() -> Fut + Send,
) -> T {
    ns.block_on(f).unwrap_or_else(|e| panic!("{e}"))
}

fn ifindex(ns: &Netns, name: &str) -> u32 {
    let out = ns
        .ip(&["-j", "link", "show", name])
        .unwrap_or_else(|e| panic!("{e}"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    v[0]["ifindex"]
        .as_u64()
        .and_then(|i| u32::try_from(i).ok())
        .unwrap_or_else(|| panic!("no ifindex for {name}: {v}"))
}

/// `ip -j route` of one family and protocol, keyed by destination.
fn kernel_routes(ns: &Netns, proto: &str) -> Vec<Value> {
    let mut all = Vec::new();
    for fam in ["-4", "-6"] {
        let out = ns
            .ip(&["-j", fam, "route", "show", "proto", proto])
            .unwrap_or_else(|e| panic!("{e}"));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
        all.extend(v.as_array().cloned().unwrap_or_default());
    }
    all
}

fn find<'a>(routes: &'a [Value], dst: &str) -> &'a Value {
    routes
        .iter()
        .find(|r| r["dst"] == dst)
        .unwrap_or_else(|| panic!("{dst} not in the kernel: {routes:#?}"))
}

fn hop(gw: &str, oif: u32) -> NextHop {
    NextHop {
        gateway: Some(ip(gw)),
        interface: Some(oif),
        onlink: false,
        weight: 1,
    }
}

fn route(prefix: &str, kind: RouteKind) -> Route {
    Route {
        prefix: net(prefix),
        kind,
        metric: 0,
        table: 254,
    }
}

#[test]
fn every_route_kind_is_programmed_and_read_back() {
    let Some((node, _peer)) = lab("tfk-kinds") else {
        return;
    };
    let eth0 = ifindex(&node, "eth0");
    node.ip(&[
        "route",
        "add",
        "198.18.9.0/24",
        "via",
        "198.51.100.2",
        "proto",
        "static",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let wanted = vec![
        route(
            "198.18.1.0/26",
            RouteKind::unicast(vec![hop("198.51.100.2", eth0)]),
        ),
        route(
            "198.18.1.64/26",
            RouteKind::unicast(vec![hop("198.51.100.2", eth0), hop("198.51.100.3", eth0)]),
        ),
        route("198.18.2.0/26", RouteKind::Blackhole),
        route("198.18.2.64/26", RouteKind::Unreachable),
        route(
            "198.18.3.1/32",
            RouteKind::unicast(vec![NextHop {
                gateway: None,
                interface: Some(eth0),
                onlink: false,
                weight: 1,
            }]),
        ),
        route(
            "198.18.3.2/32",
            RouteKind::unicast(vec![NextHop {
                onlink: true,
                ..hop("203.0.113.9", eth0)
            }]),
        ),
        route(
            "198.18.4.0/24",
            RouteKind::unicast(vec![hop("2001:db8::2", eth0)]),
        ),
        Route {
            metric: 512,
            ..route(
                "2001:db8:100::/64",
                RouteKind::unicast(vec![hop("2001:db8::2", eth0)]),
            )
        },
        route(
            "2001:db8:200::/64",
            RouteKind::unicast(vec![hop("2001:db8::2", eth0), hop("2001:db8::3", eth0)]),
        ),
    ];
    let (report, own) = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        let report = fib
            .apply(wanted.iter().cloned().map(RouteChange::Add).collect())
            .await;
        (
            report,
            fib.own_routes().await.unwrap_or_else(|e| panic!("{e}")),
        )
    });
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.applied, wanted.len());
    let k = kernel_routes(&node, "201");
    assert_eq!(find(&k, "198.18.1.0/26")["gateway"], "198.51.100.2");
    let ecmp = find(&k, "198.18.1.64/26")["nexthops"]
        .as_array()
        .map(Vec::len);
    assert_eq!(ecmp, Some(2), "{k:#?}");
    assert_eq!(find(&k, "198.18.2.0/26")["type"], "blackhole");
    assert_eq!(find(&k, "198.18.2.64/26")["type"], "unreachable");
    assert_eq!(find(&k, "198.18.3.1")["scope"], "link");
    assert!(
        find(&k, "198.18.3.2")["flags"]
            .to_string()
            .contains("onlink"),
        "{k:#?}"
    );
    assert_eq!(find(&k, "198.18.4.0/24")["via"]["host"], "2001:db8::2");
    assert_eq!(find(&k, "2001:db8:100::/64")["metric"], 512);
    assert_eq!(
        find(&k, "2001:db8:200::/64")["nexthops"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        k.len(),
        wanted.len(),
        "only tern's routes carry proto 201: {k:#?}"
    );

    // What own_routes reads back is what was installed: reconcile adopts all of it.
    let plan = reconcile(&wanted, &own, true);
    assert_eq!(plan.adopted, wanted.len(), "{own:#?}\n{plan:#?}");
    assert!(plan.changes.is_empty(), "{plan:#?}");

    // Replace, a duplicate add and a delete of a foreign route in one batch: each
    // refusal names its prefix, the rest is applied.
    let report = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        fib.apply(vec![
            RouteChange::Add(route("198.18.2.0/26", RouteKind::Blackhole)),
            RouteChange::Replace(route(
                "198.18.1.0/26",
                RouteKind::unicast(vec![hop("198.51.100.3", eth0)]),
            )),
            RouteChange::Delete {
                prefix: net("198.18.9.0/24"),
                table: 254,
            },
            RouteChange::Delete {
                prefix: net("198.18.2.64/26"),
                table: 254,
            },
        ])
        .await
    });
    assert_eq!(report.applied, 2, "{report:?}");
    let mut failed: Vec<String> = report
        .failed
        .iter()
        .map(|f| format!("{} {}", f.change, f.prefix))
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        ["add 198.18.2.0/26", "delete 198.18.9.0/24"],
        "{report:?}"
    );
    assert!(
        report
            .failed
            .iter()
            .any(|f| f.reason.contains("File exists")),
        "{report:?}"
    );
    let k = kernel_routes(&node, "201");
    assert_eq!(find(&k, "198.18.1.0/26")["gateway"], "198.51.100.3");
    assert!(!k.iter().any(|r| r["dst"] == "198.18.2.64/26"));
    assert_eq!(
        kernel_routes(&node, "static").len(),
        1,
        "the foreign route stays"
    );

    // Delete everything of ours: the foreign route is still there.
    let report = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        let own = fib.own_routes().await.unwrap_or_else(|e| panic!("{e}"));
        fib.apply(
            own.iter()
                .map(|r| RouteChange::Delete {
                    prefix: r.prefix,
                    table: r.table,
                })
                .collect(),
        )
        .await
    });
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(kernel_routes(&node, "201").is_empty());
    assert_eq!(kernel_routes(&node, "static").len(), 1);
}

#[test]
fn restart_adopts_wanted_routes_and_removes_stale_ones_only_after_grace() {
    let Some((node, _peer)) = lab("tfk-rest") else {
        return;
    };
    let eth0 = ifindex(&node, "eth0");
    node.ip(&[
        "route",
        "add",
        "198.18.9.0/24",
        "via",
        "198.51.100.2",
        "proto",
        "bird",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let before: Vec<Route> = (0..200u32)
        .map(|i| {
            route(
                &format!("198.18.{}.{}/32", 10 + i / 100, i % 100),
                RouteKind::unicast(vec![hop("198.51.100.2", eth0)]),
            )
        })
        .collect();
    // The first life: installs 200 routes, then is gone (its netlink socket closes,
    // as when the process is killed; the kernel keeps the routes).
    let report = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        fib.apply(before.iter().cloned().map(RouteChange::Add).collect())
            .await
    });
    assert_eq!(report.applied, 200, "{report:?}");
    // The second life wants 150 of them, one with a new next hop.
    let mut wanted: Vec<Route> = before[..150].to_vec();
    wanted[0].kind = RouteKind::unicast(vec![hop("198.51.100.3", eth0)]);
    let (during, after) = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        let kernel = fib.own_routes().await.unwrap_or_else(|e| panic!("{e}"));
        let plan = reconcile(&wanted, &kernel, false);
        let during = (
            plan.adopted,
            plan.kept_stale.len(),
            fib.apply(plan.changes).await,
        );
        let kernel = fib.own_routes().await.unwrap_or_else(|e| panic!("{e}"));
        let plan = reconcile(&wanted, &kernel, true);
        let after = (
            plan.adopted,
            plan.changes.len(),
            fib.apply(plan.changes).await,
        );
        (during, after)
    });
    assert_eq!(
        (during.0, during.1),
        (149, 50),
        "149 adopted, 50 kept during graceful restart"
    );
    assert_eq!(during.2.applied, 1, "one replace: {:?}", during.2);
    assert_eq!(
        (after.0, after.1),
        (150, 50),
        "then the 50 stale ones are deleted"
    );
    assert!(after.2.failed.is_empty(), "{:?}", after.2);
    let k = kernel_routes(&node, "201");
    assert_eq!(k.len(), 150);
    assert_eq!(find(&k, "198.18.10.0")["gateway"], "198.51.100.3");
    assert_eq!(
        kernel_routes(&node, "bird").len(),
        1,
        "another daemon's route is untouched"
    );
}

#[test]
fn interfaces_and_a_failed_neighbour_are_seen() {
    let Some((node, _peer)) = lab("tfk-obs") else {
        return;
    };
    node.ip(&[
        "neigh",
        "replace",
        "198.51.100.77",
        "dev",
        "eth0",
        "nud",
        "failed",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // Resolved for real: the peer answers ARP.
    node.exec("ping", &["-c", "1", "-W", "2", "198.51.100.2"])
        .unwrap_or_else(|e| panic!("{e}"));
    let (ifaces, neigh) = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        (
            fib.interfaces().await.unwrap_or_else(|e| panic!("{e}")),
            fib.neighbours().await.unwrap_or_else(|e| panic!("{e}")),
        )
    });
    let eth0 = ifaces
        .iter()
        .find(|i| i.name == "eth0")
        .unwrap_or_else(|| panic!("{ifaces:?}"));
    assert!(eth0.up);
    assert!(eth0.addresses.contains(&net("198.51.100.1/24")), "{eth0:?}");
    assert!(eth0.addresses.contains(&net("2001:db8::1/64")), "{eth0:?}");
    let lo = ifaces
        .iter()
        .find(|i| i.name == "lo")
        .unwrap_or_else(|| panic!("{ifaces:?}"));
    assert!(lo.addresses.contains(&net("127.0.0.1/8")), "{lo:?}");
    let state = |a: &str| neigh.iter().find(|n| n.address == ip(a)).map(|n| n.state);
    assert_eq!(
        state("198.51.100.77"),
        Some(NeighbourState::Failed),
        "{neigh:?}"
    );
    assert!(
        matches!(
            state("198.51.100.2"),
            Some(NeighbourState::Reachable | NeighbourState::Stale | NeighbourState::Delay)
        ),
        "{neigh:?}"
    );
    let peer = neigh.iter().find(|n| n.address == ip("198.51.100.2"));
    assert!(
        peer.and_then(|n| n.lladdr.as_ref())
            .is_some_and(|l| l.len() == 17),
        "{neigh:?}"
    );
}

#[test]
fn layer2_and_next_hop_findings_from_the_kernel() {
    let Some((node, peer)) = lab("tfk-diag") else {
        return;
    };
    // A second link whose far end is on another subnet, as a peer on another L2
    // network would be.
    let far = Netns::create("tfk-diag-f").unwrap_or_else(|e| panic!("{e}"));
    node.veth_to("eth1", &far, "eth0")
        .unwrap_or_else(|e| panic!("{e}"));
    node.add_addr("eth1", "203.0.113.1/28")
        .unwrap_or_else(|e| panic!("{e}"));
    far.add_addr("eth0", "203.0.113.130/25")
        .unwrap_or_else(|e| panic!("{e}"));
    node.ip(&[
        "route",
        "add",
        "198.18.200.0/24",
        "via",
        "198.51.100.2",
        "proto",
        "static",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    node.ip(&[
        "neigh",
        "replace",
        "198.51.100.77",
        "dev",
        "eth0",
        "nud",
        "failed",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    let _ = &peer;
    let (ifaces, neigh, res) = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        let mut res = Vec::new();
        for a in [
            "198.51.100.2",
            "198.18.200.9",
            "198.51.100.77",
            "2001:db8:ffff::1",
        ] {
            res.push(
                fib.route_to(ip(a))
                    .await
                    .unwrap_or_else(|e| panic!("{a}: {e}")),
            );
        }
        (
            fib.interfaces().await.unwrap_or_else(|e| panic!("{e}")),
            fib.neighbours().await.unwrap_or_else(|e| panic!("{e}")),
            res,
        )
    });
    let peers = [
        PeerFacts {
            address: ip("198.51.100.2"),
            name: "peer on eth0".into(),
            network: Some(net("198.51.100.2/24")),
            multihop: false,
            ebgp: None,
        },
        PeerFacts {
            address: ip("203.0.113.130"),
            name: "peer beyond eth1".into(),
            network: Some(net("203.0.113.130/25")),
            multihop: false,
            ebgp: None,
        },
    ];
    let f = diag::layer2(&peers, &ifaces);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].subject, "peer beyond eth1");
    assert!(
        f[0].evidence
            .starts_with("this node is on 198.51.100.0/24 on eth0, 203.0.113.0/28 on eth1")
            && f[0]
                .evidence
                .contains("203.0.113.130 is in 203.0.113.128/25"),
        "{}",
        f[0].evidence
    );

    assert_eq!(
        res[0],
        Some(Resolution {
            gateway: None,
            interface: "eth0".into()
        })
    );
    assert_eq!(
        res[1],
        Some(Resolution {
            gateway: Some(ip("198.51.100.2")),
            interface: "eth0".into()
        })
    );
    assert_eq!(res[3], None, "no IPv6 route beyond the connected /64");
    let hops: Vec<NextHopFacts> = ["198.18.200.9", "198.51.100.77", "2001:db8:ffff::1"]
        .iter()
        .zip([res[1].clone(), res[2].clone(), res[3].clone()])
        .map(|(a, r)| NextHopFacts {
            address: ip(a),
            example_prefix: net("198.18.0.0/26"),
            prefixes: 1,
            resolution: Ok(r),
        })
        .collect();
    let kinds: Vec<FindingKind> = diag::next_hops(&hops, &ifaces, &neigh)
        .iter()
        .map(|f| f.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            FindingKind::RecursiveNextHop,
            FindingKind::NeighbourFailed,
            FindingKind::UnresolvedNextHop
        ]
    );
}

#[test]
fn a_route_deleted_by_someone_else_is_put_back() {
    let Some((node, _peer)) = lab("tfk-watch") else {
        return;
    };
    let eth0 = ifindex(&node, "eth0");
    let wanted = route(
        "198.18.20.0/26",
        RouteKind::unicast(vec![hop("198.51.100.2", eth0)]),
    );
    let ns = node.name().to_string();
    let (seen, back) = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        let mut events = Box::pin(tern_fib::linux::watch().unwrap_or_else(|e| panic!("{e}")));
        let r = fib.apply(vec![RouteChange::Add(wanted.clone())]).await;
        assert!(r.failed.is_empty(), "{r:?}");
        // Someone else removes it.
        let out = std::process::Command::new("ip")
            .args(["-n", &ns, "route", "del", "198.18.20.0/26", "proto", "201"])
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success(), "{out:?}");
        let mut seen = None;
        while let Ok(Some(e)) =
            tokio::time::timeout(std::time::Duration::from_secs(5), events.next()).await
        {
            if let tern_fib::linux::KernelEvent::RouteRemoved {
                protocol: PROTO,
                route,
            } = e
            {
                seen = Some(route);
                break;
            }
        }
        let removed = seen.clone().unwrap_or_else(|| panic!("no removal event"));
        if let Some(change) = tern_fib::reconcile::repair(Some(&wanted), &removed) {
            let r = fib.apply(vec![change]).await;
            assert!(r.failed.is_empty(), "{r:?}");
        }
        (
            seen,
            fib.own_routes().await.unwrap_or_else(|e| panic!("{e}")),
        )
    });
    assert_eq!(seen.map(|r| r.prefix), Some(net("198.18.20.0/26")));
    assert_eq!(back.len(), 1);
    assert_eq!(
        find(&kernel_routes(&node, "201"), "198.18.20.0/26")["gateway"],
        "198.51.100.2"
    );
}

#[test]
fn the_filtered_watch_skips_own_additions_only() {
    let Some((node, _peer)) = lab("tfk-filt") else {
        return;
    };
    let eth0 = ifindex(&node, "eth0");
    let ours = route(
        "198.18.21.0/26",
        RouteKind::unicast(vec![hop("198.51.100.2", eth0)]),
    );
    let ns = node.name().to_string();
    let events = in_ns(&node, async || {
        let mut fib = LinuxFib::new(PROTO, 254).unwrap_or_else(|e| panic!("{e}"));
        let mut events = Box::pin(
            tern_fib::linux::watch_ignoring_added(PROTO, fib.port_id())
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert_ne!(fib.port_id(), 0);
        // Added and removed by the FIB itself: neither must arrive.
        let other = route(
            "198.18.23.0/26",
            RouteKind::unicast(vec![hop("198.51.100.2", eth0)]),
        );
        let r = fib
            .apply(vec![
                RouteChange::Add(ours.clone()),
                RouteChange::Add(other.clone()),
            ])
            .await;
        assert!(r.failed.is_empty(), "{r:?}");
        let r = fib
            .apply(vec![RouteChange::Delete {
                prefix: other.prefix,
                table: 254,
            }])
            .await;
        assert!(r.failed.is_empty(), "{r:?}");
        for args in [
            // Another protocol's route: must arrive.
            &[
                "route",
                "add",
                "198.18.22.0/26",
                "via",
                "198.51.100.2",
                "proto",
                "static",
            ][..],
            // Ours removed by someone else: must arrive.
            &["route", "del", "198.18.21.0/26", "proto", "201"][..],
        ] {
            let out = std::process::Command::new("ip")
                .args(["-n", &ns])
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(out.status.success(), "{out:?}");
        }
        let mut seen = Vec::new();
        while let Ok(Some(e)) =
            tokio::time::timeout(std::time::Duration::from_secs(2), events.next()).await
        {
            match e {
                tern_fib::linux::KernelEvent::RouteAdded { protocol, route } => {
                    seen.push(format!("add {} proto {protocol}", route.prefix))
                }
                tern_fib::linux::KernelEvent::RouteRemoved { protocol, route } => {
                    seen.push(format!("del {} proto {protocol}", route.prefix))
                }
                _ => {}
            }
        }
        seen
    });
    assert_eq!(
        events,
        vec![
            "add 198.18.22.0/26 proto 4".to_string(),
            "del 198.18.21.0/26 proto 201".to_string()
        ],
        "tern's own additions and its own deletions must be filtered, nothing else"
    );
}
