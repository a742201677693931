//! The memory kernel refuses what the Linux kernel refuses, with the same words.

use std::net::IpAddr;

use super::*;
use crate::reconcile::reconcile;
use crate::{NeighbourState, NextHop};

fn eth0() -> Interface {
    Interface {
        index: 2,
        name: "eth0".into(),
        up: true,
        addresses: vec![
            "198.51.100.7/24".parse().unwrap_or_else(|e| panic!("{e}")),
            "2001:db8::7/64".parse().unwrap_or_else(|e| panic!("{e}")),
        ],
    }
}

fn tunl0() -> Interface {
    Interface {
        index: 3,
        name: "tunl0".into(),
        up: true,
        addresses: vec![],
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn route(prefix: &str, hop: NextHop) -> Route {
    Route {
        prefix: prefix.parse().unwrap_or_else(|e| panic!("{e}")),
        kind: RouteKind::unicast(vec![hop]),
        metric: 0,
        table: 254,
    }
}

#[test]
fn kernel_rules_and_their_messages() {
    let mut fib = MemoryFib::with_interfaces(vec![eth0(), tunl0()]);
    let ok = route("198.18.1.0/26", NextHop::via(ip("198.51.100.2")));
    let report = fib.apply_now(vec![
        RouteChange::Add(ok.clone()),
        RouteChange::Add(ok.clone()),
        RouteChange::Add(route("198.18.2.0/26", NextHop::via(ip("203.0.113.9")))),
        RouteChange::Add(route(
            "198.18.3.0/26",
            NextHop {
                gateway: Some(ip("203.0.113.9")),
                interface: Some(3),
                onlink: true,
                weight: 1,
            },
        )),
        RouteChange::Add(route("2001:db8:1::/64", NextHop::via(ip("198.51.100.2")))),
        RouteChange::Add(route("198.18.4.0/26", NextHop::via(ip("2001:db8::2")))),
        RouteChange::Delete {
            prefix: "198.18.99.0/26".parse().unwrap_or_else(|e| panic!("{e}")),
            table: 254,
        },
        RouteChange::Add(route(
            "198.18.5.0/26",
            NextHop {
                gateway: None,
                interface: Some(9),
                onlink: false,
                weight: 1,
            },
        )),
    ]);
    assert_eq!(report.applied, 3, "{report:?}");
    let failures: Vec<String> = report.failed.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        failures,
        [
            "add 198.18.1.0/26: File exists",
            "add 198.18.2.0/26: Network is unreachable (gateway 203.0.113.9 is not on a connected subnet)",
            "add 2001:db8:1::/64: Invalid argument (IPv4 gateway for an IPv6 route)",
            "delete 198.18.99.0/26: No such process",
            "add 198.18.5.0/26: No such device",
        ]
    );
    // IPIP-style on-link via tunl0 and an IPv4 route over an IPv6 next hop were accepted.
    assert!(fib
        .route(
            "198.18.3.0/26".parse().unwrap_or_else(|e| panic!("{e}")),
            254
        )
        .is_some());
    assert!(fib
        .route(
            "198.18.4.0/26".parse().unwrap_or_else(|e| panic!("{e}")),
            254
        )
        .is_some());
    assert_eq!(fib.history().len(), 3);
}

#[test]
fn a_down_interface_refuses_routes() {
    let mut down = eth0();
    down.up = false;
    let mut fib = MemoryFib::with_interfaces(vec![down]);
    let hop = NextHop {
        gateway: Some(ip("198.51.100.2")),
        interface: Some(2),
        onlink: false,
        weight: 1,
    };
    let report = fib.apply_now(vec![RouteChange::Replace(route("198.18.1.0/26", hop))]);
    assert_eq!(
        report.failed.first().map(|f| f.reason.as_str()),
        Some("Network is down")
    );
}

#[test]
fn connected_subnets_answer_the_layer2_question() {
    let subnets = connected_subnets(&[eth0(), tunl0()]);
    assert_eq!(
        connected_subnet_for(&subnets, ip("198.51.100.200")).map(|s| s.interface_name.as_str()),
        Some("eth0")
    );
    assert_eq!(
        connected_subnet_for(&subnets, ip("2001:db8::99")).map(|s| s.subnet.to_string()),
        Some("2001:db8::/64".into())
    );
    assert!(
        connected_subnet_for(&subnets, ip("203.0.113.5")).is_none(),
        "another subnet: no layer-2 reachability"
    );
}

#[test]
fn restart_adopts_surviving_routes_without_deleting_any() {
    let wanted = vec![
        route("198.18.1.0/26", NextHop::via(ip("198.51.100.2"))),
        route("198.18.2.0/26", NextHop::via(ip("198.51.100.3"))),
    ];
    let mut fib = MemoryFib::with_interfaces(vec![eth0()]);
    fib.preload(wanted[0].clone());
    fib.preload(route("198.18.9.0/26", NextHop::via(ip("198.51.100.4"))));
    let own = futures::executor::block_on(fib.own_routes()).unwrap_or_default();
    let plan = reconcile(&wanted, &own, false);
    let report = futures::executor::block_on(fib.apply(plan.changes));
    assert!(report.failed.is_empty());
    assert!(
        !fib.history()
            .iter()
            .any(|c| matches!(c, RouteChange::Delete { .. })),
        "no deletion during graceful restart"
    );
    assert_eq!(fib.routes().count(), 3, "stale route still forwarding");
    let own = futures::executor::block_on(fib.own_routes()).unwrap_or_default();
    let report = fib.apply_now(reconcile(&wanted, &own, true).changes);
    assert_eq!(report.applied, 1);
    assert_eq!(fib.routes().count(), 2);
}

#[test]
fn neighbours_are_reported_as_set() {
    let mut fib = MemoryFib::with_interfaces(vec![eth0()]);
    fib.set_neighbours(vec![Neighbour {
        interface: 2,
        address: ip("198.51.100.2"),
        lladdr: None,
        state: NeighbourState::Failed,
    }]);
    let n = futures::executor::block_on(fib.neighbours()).unwrap_or_default();
    assert_eq!(n.first().map(|n| n.state), Some(NeighbourState::Failed));
}
