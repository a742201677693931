//! Diagnostics rules on hand-made kernel facts, including the seeds' example of a Linux
//! node on 192.168.171.0/24 and a Windows node on 172.20.32.0/19. (Those addresses
//! appear only as data here; nothing is configured with them.)

use super::*;

fn net(s: &str) -> IpNet {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn node(addrs: &[&str]) -> Vec<Interface> {
    vec![
        Interface {
            index: 1,
            name: "lo".into(),
            up: true,
            addresses: vec![net("127.0.0.1/8")],
        },
        Interface {
            index: 2,
            name: "eth0".into(),
            up: true,
            addresses: addrs.iter().map(|a| net(a)).collect(),
        },
    ]
}

fn peer(addr: &str, network: Option<&str>, multihop: bool) -> PeerFacts {
    PeerFacts {
        address: ip(addr),
        name: format!("node-to-node mesh peer {addr}"),
        network: network.map(net),
        multihop,
        ebgp: None,
    }
}

#[test]
fn the_seeds_example_is_reported_with_both_networks() {
    let f = layer2(
        &[peer("172.20.41.103", Some("172.20.41.103/19"), false)],
        &node(&["192.168.171.136/24"]),
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::NoLayer2Reachability);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].evidence,
        "this node is on 192.168.171.0/24 on eth0; 172.20.41.103 is in 172.20.32.0/19: \
         they are unlikely to be on the same layer 2 network"
    );
    assert!(
        f[0].suggestion.contains("IPIP or VXLAN"),
        "{}",
        f[0].suggestion
    );
}

#[test]
fn a_peer_on_a_shared_subnet_is_fine_and_multihop_is_only_info() {
    let ifs = node(&["198.51.100.1/24", "2001:db8::1/64"]);
    assert!(layer2(
        &[
            peer("198.51.100.7", None, false),
            peer("2001:db8::9", None, false)
        ],
        &ifs
    )
    .is_empty());
    let f = layer2(
        &[
            peer("203.0.113.5", None, true),
            peer("2001:db8:1::5", None, false),
        ],
        &ifs,
    );
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].severity, Severity::Info);
    assert!(
        f[0].evidence.contains("203.0.113.5 is in none of them"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[1].evidence
            .starts_with("this node is on 2001:db8::/64 on eth0"),
        "{}",
        f[1].evidence
    );
}

#[test]
fn a_down_interface_does_not_count_as_connected() {
    let mut ifs = node(&["198.51.100.1/24"]);
    ifs[1].up = false;
    let f = layer2(&[peer("198.51.100.7", None, false)], &ifs);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].evidence.contains("no connected network"),
        "{}",
        f[0].evidence
    );
}

#[test]
fn next_hops_unresolved_recursive_and_failed_neighbours() {
    let ifs = node(&["198.51.100.1/24"]);
    let hop = |a: &str, r: Option<Resolution>| NextHopFacts {
        address: ip(a),
        example_prefix: net("198.18.0.0/26"),
        prefixes: 3,
        resolution: Ok(r),
    };
    let onlink = Some(Resolution {
        gateway: None,
        interface: "eth0".into(),
    });
    let neighbours = vec![
        Neighbour {
            interface: 2,
            address: ip("198.51.100.9"),
            lladdr: None,
            state: NeighbourState::Failed,
        },
        Neighbour {
            interface: 2,
            address: ip("198.51.100.10"),
            lladdr: None,
            state: NeighbourState::Incomplete,
        },
        Neighbour {
            interface: 2,
            address: ip("198.51.100.11"),
            lladdr: Some("02:00:00:00:00:01".into()),
            state: NeighbourState::Reachable,
        },
    ];
    let f = next_hops(
        &[
            hop("203.0.113.50", None),
            hop(
                "203.0.113.60",
                Some(Resolution {
                    gateway: Some(ip("198.51.100.254")),
                    interface: "eth0".into(),
                }),
            ),
            hop("198.51.100.9", onlink.clone()),
            hop("198.51.100.10", onlink.clone()),
            hop("198.51.100.11", onlink),
        ],
        &ifs,
        &neighbours,
    );
    let kinds: Vec<FindingKind> = f.iter().map(|x| x.kind).collect();
    assert_eq!(
        kinds,
        [
            FindingKind::UnresolvedNextHop,
            FindingKind::RecursiveNextHop,
            FindingKind::NeighbourFailed,
            FindingKind::NeighbourIncomplete
        ]
    );
    assert!(
        f[0].evidence
            .contains("used by 3 prefixes such as 198.18.0.0/26"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[1].evidence.contains("through 198.51.100.254 on eth0"),
        "{}",
        f[1].evidence
    );
    assert_eq!(
        f[2].evidence,
        "the neighbour entry for 198.51.100.9 on eth0 is FAILED: it did not answer ARP (used by 3 prefixes such as 198.18.0.0/26)"
    );
    assert_eq!(f[2].severity, Severity::Error);
}

#[test]
fn refused_routes_keep_the_kernels_words_and_get_a_fix() {
    let f = refused(&[
        RouteFailure {
            prefix: net("198.18.3.0/26"),
            change: "add",
            reason: "No such device (errno 19)".into(),
            kind: FailureKind::Unreachable,
        },
        RouteFailure {
            prefix: net("198.18.4.0/26"),
            change: "replace",
            reason: "File exists (errno 17)".into(),
            kind: FailureKind::Exists,
        },
    ]);
    assert_eq!(f[0].subject, "198.18.3.0/26");
    assert_eq!(
        f[0].evidence,
        "the kernel refused to add the route: No such device (errno 19)"
    );
    assert!(f[0].suggestion.contains("interface"), "{}", f[0].suggestion);
    assert!(
        f[1].suggestion.contains("already exists"),
        "{}",
        f[1].suggestion
    );
}

#[test]
fn a_route_tern_held_back_is_not_called_the_kernels_refusal() {
    let f = refused(&[RouteFailure {
        prefix: net("198.19.1.0/24"),
        change: "add",
        reason:
            "next hop 203.0.113.1 is on no connected subnet and GetBestRoute2 found no route to it"
                .into(),
        kind: FailureKind::ByTern,
    }]);
    assert!(
        f[0].evidence
            .starts_with("tern did not add the route: next hop 203.0.113.1"),
        "{}",
        f[0].evidence
    );
    assert!(!f[0].evidence.contains("kernel"), "{}", f[0].evidence);
}

#[test]
fn findings_serialise_with_the_documented_field_names() {
    let f = refused(&[RouteFailure {
        prefix: net("198.18.3.0/26"),
        change: "add",
        reason: "x".into(),
        kind: FailureKind::Other,
    }]);
    let v = serde_json::to_value(&f[0]).unwrap_or_else(|e| panic!("{e}"));
    for key in ["kind", "subject", "evidence", "suggestion", "severity"] {
        assert!(v.get(key).is_some(), "{key} missing in {v}");
    }
    assert_eq!(v["kind"], "route-refused");
    assert_eq!(v["severity"], "error");
}

#[test]
fn md5_counters_are_read_from_netstat_and_name_the_peers_down() {
    let text = "TcpExt: SyncookiesSent TCPMD5NotFound TCPMD5Unexpected TCPMD5Failure TCPAckSkippedSeq\nTcpExt: 0 2 0 7 1\nIpExt: InNoRoutes\nIpExt: 0\n";
    let c = Md5Counters::parse(text).unwrap_or_else(|| panic!("not parsed"));
    assert_eq!(
        c,
        Md5Counters {
            not_found: 2,
            unexpected: 0,
            failure: 7
        }
    );
    assert_eq!(Md5Counters::parse("IpExt: A\nIpExt: 1\n"), None);
    let f = md5(c, &["global peer 198.51.100.1".to_string()]);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::Md5Mismatch);
    assert!(
        f[0].evidence.contains("7 with a wrong signature"),
        "{}",
        f[0].evidence
    );
    assert!(md5(Md5Counters::default(), &["x".into()]).is_empty());
}

#[test]
fn unsupported_peers_are_errors_that_say_what_is_missing() {
    let f = unsupported(&[(
        "global peer 198.51.100.1".to_string(),
        "not supported on this platform: GTSM (ttlSecurity)".to_string(),
    )]);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::PeerUnsupported);
    assert_eq!(f[0].severity, Severity::Error);
    assert!(f[0].evidence.contains("GTSM"), "{}", f[0].evidence);
    let v = serde_json::to_value(&f[0]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["kind"], "peer-unsupported");
    assert!(unsupported(&[]).is_empty());
}

#[test]
fn a_failed_look_up_is_reported_as_failed_not_as_no_route() {
    let failed = NextHopFacts {
        address: ip("203.0.113.1"),
        example_prefix: net("198.19.1.0/24"),
        prefixes: 1,
        resolution: Err("GetBestRoute2: The parameter is incorrect. (Win32 error 87)".into()),
    };
    let f = next_hops(&[failed], &node(&["198.51.100.1/24"]), &[]);
    let [one] = f.as_slice() else {
        panic!("one finding expected: {f:?}")
    };
    assert!(
        one.evidence.starts_with(
            "look-up failed: GetBestRoute2: The parameter is incorrect. (Win32 error 87)"
        ),
        "{}",
        one.evidence
    );
    assert!(!one.evidence.contains("no route"), "{}", one.evidence);
}

/// A node with eth0 up and eth1 (toward the ToR) down.
fn node_with_eth1_down() -> Vec<Interface> {
    let mut i = node(&["198.51.100.10/24"]);
    i.push(Interface {
        index: 3,
        name: "eth1".into(),
        up: false,
        addresses: vec![net("203.0.113.1/30"), net("fe80::1/64")],
    });
    i
}

#[test]
fn a_down_interface_names_the_peers_and_next_hops_behind_it() {
    let peers = [
        peer("203.0.113.2", None, false),
        peer("198.51.100.11", None, false),
    ];
    let hops = [NextHopFacts {
        address: ip("203.0.113.2"),
        example_prefix: net("198.18.200.0/24"),
        prefixes: 3,
        resolution: Ok(None),
    }];
    let r = interfaces_down(&peers, &hops, &node_with_eth1_down());
    assert_eq!(r.findings.len(), 1);
    let f = &r.findings[0];
    assert_eq!(f.kind, FindingKind::InterfaceDown);
    assert_eq!(f.subject, "interface eth1");
    assert!(f.evidence.contains("203.0.113.0/30"), "{}", f.evidence);
    assert!(!f.evidence.contains("fe80"), "{}", f.evidence);
    assert!(f.evidence.contains("peer 203.0.113.2"), "{}", f.evidence);
    assert!(f.evidence.contains("198.18.200.0/24"), "{}", f.evidence);
    assert!(!f.evidence.contains("198.51.100.11"), "{}", f.evidence);
    assert_eq!(r.peers.iter().collect::<Vec<_>>(), [&ip("203.0.113.2")]);
    assert_eq!(r.hops.iter().collect::<Vec<_>>(), [&ip("203.0.113.2")]);
}

#[test]
fn a_down_interface_with_nothing_behind_it_is_no_finding() {
    let peers = [peer("198.51.100.11", None, false)];
    assert!(interfaces_down(&peers, &[], &node_with_eth1_down())
        .findings
        .is_empty());
}

#[test]
fn forwarding_names_the_sysctl_and_an_advertised_prefix() {
    let f = forwarding_disabled("IPv4", "net.ipv4.ip_forward", &[net("198.18.0.0/26")]);
    assert_eq!(f.kind, FindingKind::ForwardingDisabled);
    assert_eq!(f.severity, Severity::Error);
    assert!(
        f.evidence.contains("net.ipv4.ip_forward is 0"),
        "{}",
        f.evidence
    );
    assert!(f.evidence.contains("198.18.0.0/26"), "{}", f.evidence);
    assert!(f.suggestion.contains("sysctl -w net.ipv4.ip_forward=1"));
}

#[test]
fn every_kind_is_listed_once_under_its_json_name() {
    let mut names: Vec<&str> = FindingKind::ALL.iter().map(|k| k.name()).collect();
    for k in FindingKind::ALL {
        let json = serde_json::to_value(k).unwrap();
        assert_eq!(json.as_str(), Some(k.name()));
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), FindingKind::ALL.len());
}
