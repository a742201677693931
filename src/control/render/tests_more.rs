//! Layouts added for the operator's toolbox: `status -o wide`, `peers ADDR`,
//! `routes --all` and `routes --count`.

use std::time::SystemTime;

use super::session::status_wide_at;
use super::*;
use crate::control::proto::{
    DaemonInfo, FamilyCount, MessageCounts, PeerCount, RouteInfo, RoutePath,
};

fn now() -> SystemTime {
    humantime::parse_rfc3339("2026-01-02T10:00:00Z").unwrap()
}

fn up_peer() -> PeerInfo {
    PeerInfo {
        address: "198.51.100.11".into(),
        port: 179,
        asn: 64513,
        local_asn: 64512,
        kind: "global".into(),
        state: "Established".into(),
        since: "2026-01-02T09:55:00Z".into(),
        uptime_s: 300,
        prefixes_received: 12,
        prefixes_advertised: 3,
        messages_received: MessageCounts {
            open: 1,
            update: 4,
            keepalive: 10,
            ..MessageCounts::default()
        },
        messages_sent: MessageCounts {
            open: 1,
            update: 2,
            keepalive: 11,
            notification: 1,
            route_refresh: 1,
        },
        hold_time: Some(90),
        keepalive: Some(30),
        remote_router_id: Some("198.51.100.11".into()),
        local_address: Some("198.51.100.10".into()),
        local_port: Some(40123),
        remote_port: Some(179),
        last_notification_sent: Some("Cease / Administrative Reset".into()),
        graceful_restart: Some(
            "peer restart time 120s, forwarding preserved for ipv4-unicast".into(),
        ),
        md5: true,
        gtsm_hops: Some(1),
        filters: vec!["only-pods".into()],
        ..PeerInfo::default()
    }
}

#[test]
fn status_wide_has_vtysh_columns() {
    let down = PeerInfo {
        address: "198.51.100.12".into(),
        kind: "global".into(),
        asn: 64514,
        state: "Active".into(),
        since: "2026-01-02T09:59:00Z".into(),
        last_error: Some("connection refused".into()),
        ..PeerInfo::default()
    };
    let r = StatusReply {
        daemon: DaemonInfo {
            node: "node-a".into(),
            ..DaemonInfo::default()
        },
        peers: vec![up_peer(), down],
    };
    let got = status_wide_at(&r, now());
    let lines: Vec<&str> = got.lines().collect();
    assert!(
        lines[0].starts_with("tern is running: node node-a"),
        "{got}"
    );
    let header = lines
        .iter()
        .find(|l| l.contains("PEER ADDRESS"))
        .expect("a header");
    for col in ["AS", "UP/DOWN", "PFXRCD", "PFXSNT", "MSGRCVD", "MSGSENT"] {
        assert!(header.contains(col), "{col} missing: {header}");
    }
    let up = lines
        .iter()
        .find(|l| l.contains("198.51.100.11"))
        .expect("the up peer");
    let cells: Vec<&str> = up.split('|').map(str::trim).collect();
    assert_eq!(
        cells,
        [
            "",
            "198.51.100.11",
            "global",
            "64513",
            "Established",
            "5m 0s",
            "12",
            "3",
            "15",
            "16",
            "-",
            ""
        ]
    );
    let down = lines
        .iter()
        .find(|l| l.contains("198.51.100.12"))
        .expect("the down peer");
    // Down for a minute (since 09:59), with its last error.
    assert!(
        down.contains("| 1m 0s ") && down.contains("connection refused"),
        "{down}"
    );
    assert!(got.contains("No IPv6 peers found."), "{got}");
}

#[test]
fn one_peer_in_detail() {
    let r = PeersReply {
        peers: vec![up_peer()],
    };
    let plain = peers(&r);
    assert!(!plain.contains("timers"), "{plain}");
    let got = peers_with(&r, true);
    for line in [
        "  timers        hold 90s, keepalive 30s (negotiated)",
        "  router id     198.51.100.11",
        "  connection    local 198.51.100.10 port 40123, remote 198.51.100.11 port 179",
        "  received      15 total: 1 open, 4 update, 0 notification, 10 keepalive, 0 route-refresh",
        "  sent          16 total: 1 open, 2 update, 1 notification, 11 keepalive, 1 route-refresh",
        "  notif. in     -",
        "  notif. out    Cease / Administrative Reset",
        "  graceful      peer restart time 120s, forwarding preserved for ipv4-unicast",
        "  security      TCP-MD5 on, GTSM on (1 hops)",
        "  filters       only-pods",
    ] {
        assert!(got.lines().any(|l| l == line), "{line:?} missing:\n{got}");
    }
}

fn path(peer: &str, as_path: &str, best: bool, reason: &str) -> RoutePath {
    RoutePath {
        path: PathInfo {
            next_hops: vec![peer.into()],
            as_path: as_path.into(),
            local_pref: Some(100),
            peer: peer.into(),
            source: "bgp".into(),
            ..PathInfo::default()
        },
        best,
        multipath: best,
        stale: false,
        reason: reason.into(),
    }
}

#[test]
fn routes_all_lists_each_path_with_why() {
    let r = RoutesReply {
        routes: vec![RouteInfo {
            prefix: "198.18.4.64/26".into(),
            best: path("198.51.100.11", "64513", true, "as-path-length").path,
            ecmp: false,
            installed: true,
            paths: vec![
                path("198.51.100.11", "64513", true, "as-path-length"),
                path("198.51.100.12", "64514 64515", false, "as-path-length"),
            ],
        }],
    };
    let got = routes(&r);
    let lines: Vec<&str> = got.lines().collect();
    assert!(
        lines[1].contains("REASON") && lines[1].contains("LOCAL PREF"),
        "{got}"
    );
    let cells = |l: &str| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
    assert_eq!(
        cells(lines[3]),
        [
            "",
            "198.18.4.64/26",
            "198.51.100.11",
            "64513",
            "100",
            "-",
            "bgp 198.51.100.11",
            "best,installed",
            "won: as-path-length",
            ""
        ]
    );
    assert_eq!(
        cells(lines[4]),
        [
            "",
            "",
            "198.51.100.12",
            "64514 64515",
            "100",
            "-",
            "bgp 198.51.100.12",
            "-",
            "lost: as-path-length",
            ""
        ]
    );
}

#[test]
fn routes_count_has_a_family_and_a_peer_table() {
    let r = RoutesCountReply {
        families: vec![
            FamilyCount {
                family: "ipv4".into(),
                prefixes: 5,
                paths: 10,
            },
            FamilyCount {
                family: "ipv6".into(),
                prefixes: 0,
                paths: 0,
            },
        ],
        peers: vec![PeerCount {
            peer: "198.51.100.11".into(),
            family: "ipv4".into(),
            paths: 5,
            best: 5,
        }],
    };
    let got = routes_count(&r);
    assert!(
        got.contains("| ipv4   |        5 |    10 |") || got.contains("ipv4"),
        "{got}"
    );
    let row = got
        .lines()
        .find(|l| l.contains("198.51.100.11"))
        .expect("the peer row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells, ["", "198.51.100.11", "ipv4", "5", "5", ""]);
    let empty = routes_count(&RoutesCountReply::default());
    assert!(empty.contains("No paths."), "{empty}");
}

#[test]
fn the_long_table_looks_like_comfy_tables() {
    let header = ["PREFIX", "NEXT HOP(S)", "AS PATH", "FLAGS"];
    let rows = vec![
        vec![
            "198.18.4.0/26".to_string(),
            "-".to_string(),
            "".to_string(),
            "best".to_string(),
        ],
        vec![
            "2001:db8:4000::40/122".to_string(),
            "198.51.100.11 198.51.100.12".to_string(),
            "64513 64514 {64515,64516}".to_string(),
            "best,ecmp,installed".to_string(),
        ],
    ];
    assert_eq!(
        long_table(&header, &rows),
        table(&header, rows.clone()).to_string()
    );
    assert_eq!(
        long_table(&["A", "BB"], &[]),
        table(&["A", "BB"], Vec::new()).to_string()
    );
}

/// The JSON names docs/json.md promises for the new fields (a rename breaks scripts).
#[test]
fn json_names_of_the_new_fields() {
    let v = serde_json::to_value(up_peer()).unwrap();
    for key in [
        "messages_received",
        "messages_sent",
        "hold_time",
        "keepalive",
        "remote_router_id",
        "local_address",
        "local_port",
        "remote_port",
        "last_notification_received",
        "last_notification_sent",
        "graceful_restart",
        "md5",
        "gtsm_hops",
        "filters",
    ] {
        assert!(v.get(key).is_some(), "{key} missing: {v}");
    }
    for key in [
        "open",
        "update",
        "notification",
        "keepalive",
        "route_refresh",
    ] {
        assert!(v["messages_sent"].get(key).is_some(), "{key} missing: {v}");
    }
    // An older daemon's answer (without them) still decodes.
    let old: PeerInfo = serde_json::from_value(serde_json::json!({
        "address": "198.51.100.1", "port": 179, "asn": 1, "local_asn": 2, "type": "global",
        "state": "Idle", "since": "", "uptime_s": 0, "families": [], "capabilities": [],
        "prefixes_received": 0, "prefixes_accepted": 0, "prefixes_advertised": 0,
        "last_error": null
    }))
    .unwrap();
    assert_eq!(old.messages_received.total(), 0);
    let count = serde_json::to_value(RoutesCountReply {
        families: vec![FamilyCount::default()],
        peers: vec![PeerCount::default()],
    })
    .unwrap();
    assert_eq!(
        count,
        serde_json::json!({
            "families": [{"family": "", "prefixes": 0, "paths": 0}],
            "peers": [{"peer": "", "family": "", "paths": 0, "best": 0}]
        })
    );
    // Without --all a route has no "paths" key at all.
    let route = serde_json::to_value(RouteInfo::default()).unwrap();
    assert!(route.get("paths").is_none(), "{route}");
}

#[test]
fn monitor_lines_name_time_kind_subject_and_change() {
    use crate::control::proto::MonitorEvent;
    let e = MonitorEvent {
        time: "2026-11-26T23:40:05.003Z".into(),
        kind: "route".into(),
        peer: Some("198.51.100.1".into()),
        prefix: Some("198.18.100.0/24".into()),
        text: "best via 198.51.100.1 (bgp 198.51.100.1)".into(),
    };
    assert_eq!(
        super::monitor_event(&e),
        "2026-11-26T23:40:05.003Z  route    198.18.100.0/24    best via 198.51.100.1 (bgp 198.51.100.1)"
    );
    let s = MonitorEvent {
        kind: "session".into(),
        prefix: None,
        text: "Established".into(),
        ..e
    };
    assert!(super::monitor_event(&s).ends_with("session  198.51.100.1       Established"));
}
