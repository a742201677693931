//! The renderers' layouts, pinned line by line where people (and scripts that scrape
//! text) rely on them: the `status` tables, and the key lines of the others.

use std::time::SystemTime;

use super::*;
use crate::control::proto::{DaemonInfo, FindingInfo, PathInfo, RouteInfo};

/// 2026-01-02T10:00:00Z, the "now" of these tests.
fn now() -> SystemTime {
    humantime::parse_rfc3339("2026-01-02T10:00:00Z").unwrap()
}

fn peer(addr: &str, kind: &str, state: &str, since: &str, err: Option<&str>) -> PeerInfo {
    PeerInfo {
        address: addr.into(),
        port: 179,
        asn: 64512,
        local_asn: 64512,
        kind: kind.into(),
        state: state.into(),
        since: since.into(),
        last_error: err.map(String::from),
        ..PeerInfo::default()
    }
}

fn daemon() -> DaemonInfo {
    DaemonInfo {
        version: "0.1.0".into(),
        pid: 1234,
        node: "node-a".into(),
        router_id: "198.51.100.10".into(),
        asn: 64512,
        started: "2026-01-02T09:54:57Z".into(),
        uptime_s: 303,
        datastore: "file /etc/tern/cluster.yaml".into(),
        ..DaemonInfo::default()
    }
}

fn mixed() -> StatusReply {
    StatusReply {
        daemon: daemon(),
        peers: vec![
            peer(
                "198.51.100.11",
                "node-to-node mesh",
                "Established",
                "2026-01-02T09:55:12Z",
                None,
            ),
            peer(
                "203.0.113.1",
                "global",
                "Active",
                "2026-01-01T23:10:00Z",
                Some("Socket: Connection refused"),
            ),
            peer(
                "2001:db8::11",
                "node-to-node mesh",
                "Established",
                "2026-01-02T09:55:13.250Z",
                // An old error is not shown for a session that is up.
                Some("Hold timer expired"),
            ),
        ],
    }
}

#[test]
fn status_has_one_calicoctl_table_per_family() {
    let expected = "\
tern is running: node node-a, router id 198.51.100.10, AS 64512, up 5m 3s (pid 1234)

IPv4 BGP status
+---------------+-------------------+-------+------------+-----------------------------------+
| PEER ADDRESS  |     PEER TYPE     | STATE |   SINCE    |               INFO                |
+---------------+-------------------+-------+------------+-----------------------------------+
| 198.51.100.11 | node-to-node mesh | up    | 09:55:12   | Established                       |
| 203.0.113.1   | global            | start | 2026-01-01 | Active Socket: Connection refused |
+---------------+-------------------+-------+------------+-----------------------------------+

IPv6 BGP status
+--------------+-------------------+-------+----------+-------------+
| PEER ADDRESS |     PEER TYPE     | STATE |  SINCE   |    INFO     |
+--------------+-------------------+-------+----------+-------------+
| 2001:db8::11 | node-to-node mesh | up    | 09:55:13 | Established |
+--------------+-------------------+-------+----------+-------------+
";
    let got = status_at(&mixed(), now());
    assert_eq!(got, expected, "\n{got}");
}

#[test]
fn status_without_peers_says_so_per_family() {
    let got = status_at(
        &StatusReply {
            daemon: daemon(),
            peers: Vec::new(),
        },
        now(),
    );
    let expected = "\
tern is running: node node-a, router id 198.51.100.10, AS 64512, up 5m 3s (pid 1234)

IPv4 BGP status
No IPv4 peers found.

IPv6 BGP status
No IPv6 peers found.
";
    assert_eq!(got, expected, "\n{got}");
}

#[test]
fn status_shows_a_configuration_error_and_only_the_family_present() {
    let mut r = mixed();
    r.daemon.config_error =
        Some("cluster.yaml document 3: BGPPeer peer-a: spec.asNumber: missing".into());
    r.peers.retain(|p| p.address.contains(':'));
    let got = status_at(&r, now());
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines.get(1).copied(),
        Some(
            "configuration error: cluster.yaml document 3: BGPPeer peer-a: spec.asNumber: missing"
        )
    );
    assert!(
        got.contains("IPv4 BGP status\nNo IPv4 peers found.\n\nIPv6 BGP status\n+----"),
        "\n{got}"
    );
}

#[test]
fn status_says_when_the_datastore_is_unreachable() {
    let mut r = mixed();
    r.daemon.datastore_error = Some(
        "since 2026-01-02T09:58:00Z: etcd at http://198.51.100.250:2379: connection refused".into(),
    );
    let got = status_at(&r, now());
    assert_eq!(
        got.lines().nth(1),
        Some("datastore unreachable, the configuration in force stays: since 2026-01-02T09:58:00Z: etcd at http://198.51.100.250:2379: connection refused")
    );
    r.daemon.datastore_error = None;
    assert!(!status_at(&r, now()).contains("datastore"));
}

#[test]
fn since_is_the_utc_time_today_else_the_date() {
    assert_eq!(since("2026-01-02T09:55:12Z", "2026-01-02"), "09:55:12");
    assert_eq!(
        since("2026-01-02T09:55:12.999999Z", "2026-01-02"),
        "09:55:12"
    );
    assert_eq!(since("2026-01-01T23:59:59Z", "2026-01-02"), "2026-01-01");
    // Not RFC 3339: shown as it came rather than hidden.
    assert_eq!(since("yesterday", "2026-01-02"), "yesterday");
}

#[test]
fn durations_use_two_units() {
    assert_eq!(duration(0), "0s");
    assert_eq!(duration(59), "59s");
    assert_eq!(duration(303), "5m 3s");
    assert_eq!(duration(7322), "2h 2m");
    assert_eq!(duration(90_061), "1d 1h");
}

#[test]
fn peers_are_blocks_with_the_key_facts() {
    let mut up = peer(
        "198.51.100.11",
        "node-to-node mesh",
        "Established",
        "2026-01-02T09:55:12Z",
        None,
    );
    up.uptime_s = 288;
    up.families = vec!["ipv4-unicast".into(), "ipv6-unicast".into()];
    up.capabilities = vec![
        "4-octet-as".into(),
        "route-refresh".into(),
        "graceful-restart".into(),
    ];
    up.prefixes_received = 12;
    up.prefixes_accepted = 11;
    up.prefixes_advertised = 3;
    let mut down = peer(
        "203.0.113.1",
        "global",
        "Active",
        "2026-01-01T23:10:00Z",
        Some("Socket: Connection refused"),
    );
    down.asn = 64600;
    down.port = 1179;
    down.flaps = 2;
    down.updates_in = 5;
    down.updates_out = 7;
    down.policy_rejected_in = 4;
    down.policy_filtered_out = 9;
    let got = peers(&PeersReply {
        peers: vec![up, down],
    });
    let expected = "\
198.51.100.11 (node-to-node mesh), AS 64512 (local AS 64512)
  state         Established since 2026-01-02T09:55:12Z, up 4m 48s, 0 flaps
  families      ipv4-unicast, ipv6-unicast
  capabilities  4-octet-as, route-refresh, graceful-restart
  prefixes      12 received, 11 accepted, 3 advertised
  updates       0 received, 0 sent
  policy        0 rejected on import, 0 kept back on export

203.0.113.1 port 1179 (global), AS 64600 (local AS 64512)
  state         Active since 2026-01-01T23:10:00Z, 2 flaps
  families      -
  capabilities  -
  prefixes      0 received, 0 accepted, 0 advertised
  updates       5 received, 7 sent
  policy        4 rejected on import, 9 kept back on export
  last error    Socket: Connection refused
";
    assert_eq!(got, expected, "\n{got}");
    assert_eq!(peers(&PeersReply::default()), "No peers configured.\n");
}

#[test]
fn routes_table_has_flags_and_sources() {
    let learned = RouteInfo {
        prefix: "198.18.4.64/26".into(),
        best: PathInfo {
            next_hops: vec!["198.51.100.11".into(), "198.51.100.12".into()],
            as_path: "64513 64514".into(),
            origin: "igp".into(),
            communities: vec!["64512:100".into()],
            large_communities: vec!["64512:1:2".into()],
            peer: "198.51.100.11".into(),
            source: "bgp".into(),
            ..PathInfo::default()
        },
        ecmp: true,
        installed: true,
        paths: Vec::new(),
    };
    let own = RouteInfo {
        prefix: "198.18.4.0/26".into(),
        best: PathInfo {
            origin: "igp".into(),
            peer: "local".into(),
            source: "block".into(),
            ..PathInfo::default()
        },
        ecmp: false,
        installed: false,
        paths: Vec::new(),
    };
    let got = routes(&RoutesReply {
        routes: vec![own, learned],
    });
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines.get(1).copied(),
        Some("|     PREFIX     |         NEXT HOP(S)         |   AS PATH   |     COMMUNITIES     |      SOURCE       |        FLAGS        |"),
        "\n{got}"
    );
    assert_eq!(
        lines.get(3).copied(),
        Some("| 198.18.4.0/26  | -                           | -           | -                   | block             | best                |"),
        "\n{got}"
    );
    assert_eq!(
        lines.get(4).copied(),
        Some("| 198.18.4.64/26 | 198.51.100.11 198.51.100.12 | 64513 64514 | 64512:100 64512:1:2 | bgp 198.51.100.11 | best,ecmp,installed |"),
        "\n{got}"
    );
    assert_eq!(routes(&RoutesReply::default()), "No routes.\n");
}

#[test]
fn fib_in_sync_says_so() {
    let ok = FibReply {
        installed: vec![FibRoute::default(); 3],
        ..FibReply::default()
    };
    assert_eq!(
        fib(&ok),
        "3 installed, 0 missing, 0 unexpected, 0 refused by the kernel\nFIB matches what tern wants (3 routes).\n"
    );
}

#[test]
fn fib_counts_terns_refusals_apart_from_the_kernels() {
    let r = FibReply {
        failures: vec![
            "add 198.18.4.64/26: The object already exists. (Win32 error 5010)".into(),
            "add 198.19.1.0/24: next hop 203.0.113.1 is on no connected subnet and GetBestRoute2 found no route to it".into(),
            "add 198.19.2.0/24: Windows has no blackhole routes; the prefix is left unrouted".into(),
        ],
        refused_by_system: 1,
        refused_by_tern: 2,
        ..FibReply::default()
    };
    let got = fib(&r);
    assert_eq!(
        got.lines().next(),
        Some("0 installed, 0 missing, 0 unexpected, 1 refused by the kernel, 2 refused by tern")
    );
    let kernel = got.find("Refused by the kernel:\n  add 198.18.4.64/26");
    let tern = got.find("Refused by tern (not sent to the kernel):\n  add 198.19.1.0/24");
    assert!(kernel.is_some() && tern.is_some(), "\n{got}");
    assert!(kernel < tern, "\n{got}");
    assert!(!got[..tern.unwrap_or(0)].contains("198.19.2.0"), "\n{got}");
}

#[test]
fn fib_off_says_so_and_counts_nothing() {
    let off = FibReply {
        disabled: true,
        ..FibReply::default()
    };
    let got = fib(&off);
    assert!(got.starts_with("The FIB is off"), "{got}");
    assert!(!got.contains("refused"), "{got}");
}

#[test]
fn fib_differences_are_listed_with_the_kernels_reason() {
    let bad = FibReply {
        installed: vec![FibRoute::default(); 2],
        missing: vec![FibRoute {
            prefix: "198.18.4.64/26".into(),
            kind: "unicast".into(),
            next_hops: vec!["198.51.100.11".into()],
            table: 254,
        }],
        unexpected: vec![FibRoute {
            prefix: "2001:db8:4::/64".into(),
            kind: "blackhole".into(),
            next_hops: Vec::new(),
            table: 254,
        }],
        failures: vec!["add 198.18.4.64/26 via 198.51.100.11: Network is unreachable".into()],
        ..FibReply::default()
    };
    let got = fib(&bad);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("2 installed, 1 missing, 1 unexpected, 1 refused by the kernel")
    );
    assert!(
        got.contains("Wanted but not in the kernel:\n+----"),
        "\n{got}"
    );
    assert!(
        lines.contains(&"| 198.18.4.64/26 | unicast | 198.51.100.11 | 254   |"),
        "\n{got}"
    );
    assert!(
        lines.contains(&"tern's routes in the kernel that it does not want:"),
        "\n{got}"
    );
    assert!(
        lines.contains(&"| 2001:db8:4::/64 | blackhole | -           | 254   |"),
        "\n{got}"
    );
    assert!(
        got.ends_with("Refused by the kernel:\n  add 198.18.4.64/26 via 198.51.100.11: Network is unreachable\n"),
        "\n{got}"
    );
    assert!(!got.contains("FIB matches"), "\n{got}");
}

#[test]
fn diagnose_shows_each_finding_with_evidence_and_fix() {
    let r = DiagnoseReply {
        findings: vec![
            FindingInfo {
                kind: "peer-not-on-connected-subnet".into(),
                subject: "peer 203.0.113.1".into(),
                evidence: "no address of this node is in a subnet containing 203.0.113.1".into(),
                suggestion:
                    "peer with an address on a shared layer-2 segment, or set up a route to it"
                        .into(),
                severity: "error".into(),
            },
            FindingInfo {
                kind: "neighbour-failed".into(),
                subject: "next hop 198.51.100.12".into(),
                evidence: "neighbour entry on eth0 is FAILED".into(),
                suggestion: "check that 198.51.100.12 is up and on eth0's segment".into(),
                severity: "warning".into(),
            },
        ],
    };
    let expected = "\
[error] peer-not-on-connected-subnet: peer 203.0.113.1
    no address of this node is in a subnet containing 203.0.113.1
    fix: peer with an address on a shared layer-2 segment, or set up a route to it
[warning] neighbour-failed: next hop 198.51.100.12
    neighbour entry on eth0 is FAILED
    fix: check that 198.51.100.12 is up and on eth0's segment
";
    assert_eq!(diagnose(&r), expected);
    assert_eq!(diagnose(&DiagnoseReply::default()), "No problems found.\n");
}

#[test]
fn health_and_reload_are_one_line_each() {
    let h = health(&HealthReply {
        live: true,
        ready: false,
        reason: "1 of 2 BGP peers established".into(),
    });
    assert_eq!(h, "live: yes\nready: no (1 of 2 BGP peers established)\n");
    assert_eq!(
        reload(&ReloadReply {
            accepted: false,
            message: "cluster.yaml: IPPool pool-a: spec.cidr: invalid".into(),
        }),
        "rejected: cluster.yaml: IPPool pool-a: spec.cidr: invalid\n"
    );
}
