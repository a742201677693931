//! Rows, plans, read-back, and the OS value conversions.

use super::*;
use crate::windows::fixtures::*;

#[test]
fn ecmp_is_one_row_per_next_hop_and_no_gateway_is_the_unspecified_address() {
    let r = route(P1, vec![hop("198.51.100.2", 4), hop("198.51.100.3", 5)], 20);
    assert_eq!(
        rows_for(&r),
        Ok(vec![
            want(key(P1, "198.51.100.2", 4), 20),
            want(key(P1, "198.51.100.3", 5), 20)
        ])
    );
    let direct = NextHop {
        gateway: None,
        interface: Some(7),
        onlink: true,
        weight: 1,
    };
    let r6 = route("2001:db8:1::/64", vec![direct], 0);
    let row = WantedRow {
        key: key("2001:db8:1::/64", "::", 7),
        metric: 0,
        onlink: true,
    };
    assert_eq!(rows_for(&r6), Ok(vec![row]));
}

#[test]
fn what_windows_cannot_express_is_refused_with_a_reason() {
    let base = route(P1, vec![hop("198.51.100.2", 4)], 0);
    let refused = |r: Route, why: &str| {
        let e = rows_for(&r).expect_err(why);
        assert!(e.contains(why), "{e:?} should say {why:?}");
    };
    refused(
        Route {
            kind: RouteKind::Blackhole,
            ..base.clone()
        },
        "no blackhole",
    );
    refused(
        Route {
            kind: RouteKind::Unreachable,
            ..base.clone()
        },
        "no unreachable",
    );
    refused(
        Route {
            table: 100,
            ..base.clone()
        },
        "table 100 is not supported",
    );
    refused(route(P1, vec![], 0), "no next hop");
    refused(
        route("198.18.1.5/26", vec![hop("198.51.100.2", 4)], 0),
        "host bits",
    );
    refused(
        route(P1, vec![hop("2001:db8::2", 4)], 0),
        "other address family",
    );
    refused(route(P1, vec![hop("0.0.0.0", 4)], 0), "next hop 0.0.0.0");
    refused(
        route(P1, vec![NextHop::via(ip("198.51.100.2"))], 0),
        "has no interface",
    );
    let heavy = NextHop {
        weight: 3,
        ..hop("198.51.100.3", 4)
    };
    refused(
        route(P1, vec![hop("198.51.100.2", 4), heavy], 0),
        "unequal weights",
    );
    refused(
        route(P1, vec![hop("198.51.100.2", 4), hop("198.51.100.2", 4)], 0),
        "via 198.51.100.2 on interface 4 is listed twice",
    );
}

#[test]
fn add_creates_every_row_and_refuses_when_tern_already_has_the_prefix() {
    let table: Table = [live(key(P1, "198.51.100.2", 4), 5)].into_iter().collect();
    let record = record_of(&[mine(key(P1, "198.51.100.2", 4))]);
    let add = RouteChange::Add(route(P1, vec![hop("198.51.100.3", 4)], 5));
    let e = plan(&add, &table, &record).expect_err("tern has the prefix");
    assert!(e.starts_with("File exists"), "{e}");
    // A recorded row that someone deleted does not block an add; it is forgotten.
    let plan = plan(&add, &Table::default(), &record);
    assert_eq!(
        plan,
        Ok(RowPlan {
            create: vec![want(key(P1, "198.51.100.3", 4), 5)],
            forget: vec![key(P1, "198.51.100.2", 4)],
            ..RowPlan::default()
        })
    );
}

#[test]
fn a_row_tern_did_not_create_is_never_taken_over() {
    // An administrator's row: same identity as the one tern wants, not in the record.
    let theirs = live(key(P1, "198.51.100.2", 4), 1);
    let other = live(key(P1, "198.51.100.9", 4), 1);
    let table: Table = [theirs, other].into_iter().collect();
    for change in [
        RouteChange::Add(route(P1, vec![hop("198.51.100.2", 4)], 5)),
        RouteChange::Replace(route(P1, vec![hop("198.51.100.2", 4)], 5)),
    ] {
        let e = plan(&change, &table, &Record::default()).expect_err("foreign row");
        assert!(
            e.contains("tern did not create") && e.contains("via 198.51.100.2"),
            "{e}"
        );
    }
    // A different next hop coexists with their rows; theirs are not deleted.
    let replace = RouteChange::Replace(route(P1, vec![hop("198.51.100.3", 4)], 5));
    let p = plan(&replace, &table, &Record::default()).expect("no conflict");
    assert_eq!(p.create, vec![want(key(P1, "198.51.100.3", 4), 5)]);
    assert!(p.delete.is_empty(), "{p:?}");
    let delete = RouteChange::Delete {
        prefix: net(P1),
        table: MAIN_TABLE,
    };
    let e = plan(&delete, &table, &Record::default()).expect_err("not tern's");
    assert!(e.starts_with("No such route"), "{e}");
}

#[test]
fn a_recorded_key_now_held_by_another_interface_or_protocol_is_not_terns() {
    let k = key(P1, "198.51.100.2", 4);
    let record = record_of(&[mine(k)]);
    let reused = InstalledRow {
        luid: 77,
        ..live(k, 5)
    };
    let dhcp = InstalledRow {
        protocol: 2,
        ..live(k, 5)
    };
    for row in [reused, dhcp] {
        let table: Table = [row].into_iter().collect();
        assert!(!record.owns(&row));
        assert!(own_routes(&table, &record).is_empty());
        let delete = RouteChange::Delete {
            prefix: net(P1),
            table: MAIN_TABLE,
        };
        let p = plan(&delete, &table, &record).expect("forgets the stale entry");
        assert_eq!((p.delete, p.forget), (vec![], vec![k]));
    }
}

#[test]
fn replace_creates_updates_and_deletes_only_what_differs() {
    let (a, b, c) = (
        key(P1, "198.51.100.2", 4),
        key(P1, "198.51.100.3", 4),
        key(P1, "198.51.100.4", 4),
    );
    let other = key("198.18.2.0/26", "198.51.100.2", 4);
    let table: Table = [live(a, 5), live(b, 5), live(other, 5)]
        .into_iter()
        .collect();
    let record = record_of(&[mine(a), mine(b), mine(other)]);
    let same = RouteChange::Replace(route(
        P1,
        vec![hop("198.51.100.3", 4), hop("198.51.100.2", 4)],
        5,
    ));
    assert_eq!(plan(&same, &table, &record), Ok(RowPlan::default()));
    let change = RouteChange::Replace(route(
        P1,
        vec![hop("198.51.100.3", 4), hop("198.51.100.4", 4)],
        9,
    ));
    assert_eq!(
        plan(&change, &table, &record),
        Ok(RowPlan {
            create: vec![want(c, 9)],
            update: vec![(want(b, 9), 1004)],
            delete: vec![(a, 1004)],
            forget: vec![],
        })
    );
    let onlink = NextHop {
        onlink: true,
        ..hop("198.51.100.2", 4)
    };
    let flag = RouteChange::Replace(route(P1, vec![onlink, hop("198.51.100.3", 4)], 5));
    let p = plan(&flag, &table, &record).expect("plan");
    let flagged = WantedRow {
        onlink: true,
        ..want(a, 5)
    };
    assert_eq!(
        (p.create, p.update, p.delete),
        (vec![], vec![(flagged, 1004)], vec![])
    );
}

#[test]
fn delete_removes_terns_rows_of_the_prefix_and_nothing_else() {
    let (a, b) = (key(P1, "198.51.100.2", 4), key(P1, "198.51.100.3", 4));
    let gone = key(P1, "198.51.100.5", 4);
    let foreign = key(P1, "198.51.100.9", 4);
    let table: Table = [live(a, 5), live(b, 5), live(foreign, 5)]
        .into_iter()
        .collect();
    let record = record_of(&[mine(a), mine(b), mine(gone)]);
    let delete = RouteChange::Delete {
        prefix: net(P1),
        table: MAIN_TABLE,
    };
    assert_eq!(
        plan(&delete, &table, &record),
        Ok(RowPlan {
            delete: vec![(a, 1004), (b, 1004)],
            forget: vec![gone],
            ..RowPlan::default()
        })
    );
    let t100 = RouteChange::Delete {
        prefix: net(P1),
        table: 100,
    };
    assert!(plan(&t100, &table, &record).is_err_and(|e| e.contains("one routing table")));
}

#[test]
fn own_routes_are_owned_rows_in_the_table_merged_per_prefix() {
    let (a, b, c) = (
        key(P1, "198.51.100.2", 4),
        key(P1, "198.51.100.3", 5),
        key(P1, "198.51.100.4", 4),
    );
    let direct = key("2001:db8:1::/64", "::", 7);
    let gone = key("198.18.3.0/26", "198.51.100.2", 4);
    let foreign = key("198.18.9.0/24", "198.51.100.9", 4);
    // c's metric was raised by hand: Windows forwards over a and b only.
    let table: Table = [
        live(a, 5),
        live(b, 5),
        live(c, 50),
        live(direct, 3),
        live(foreign, 1),
    ]
    .into_iter()
    .collect();
    let direct_entry = RecordEntry {
        onlink: true,
        ..mine(direct)
    };
    let record = record_of(&[mine(a), mine(b), mine(c), direct_entry, mine(gone)]);
    let on_link = NextHop {
        gateway: None,
        interface: Some(7),
        onlink: true,
        weight: 1,
    };
    assert_eq!(
        own_routes(&table, &record),
        vec![
            route(P1, vec![hop("198.51.100.2", 4), hop("198.51.100.3", 5)], 5),
            route("2001:db8:1::/64", vec![on_link], 3),
        ]
    );
}

#[test]
fn neighbour_states_map_to_the_rfc_4861_names() {
    let all: Vec<Option<NeighbourState>> = (-1..=7).map(neighbour_state).collect();
    use NeighbourState::*;
    let expected = [
        None,
        Some(Failed),
        Some(Incomplete),
        Some(Probe),
        Some(Delay),
        Some(Stale),
        Some(Reachable),
        Some(Permanent),
        None,
    ];
    assert_eq!(all, expected);
}

#[test]
fn link_layer_addresses_and_names_are_read_within_their_buffers() {
    let mut buf = [0u8; 32];
    buf[..6].copy_from_slice(&[0x02, 0x42, 0xac, 0x11, 0x00, 0x0a]);
    assert_eq!(lladdr(&buf, 6).as_deref(), Some("02:42:ac:11:00:0a"));
    assert_eq!(
        lladdr(&buf[..6], 4000).as_deref(),
        Some("02:42:ac:11:00:0a")
    );
    assert_eq!(lladdr(&buf, 0), None);
    assert_eq!(lladdr(&[0; 32], 6), None);
    let mut alias = [0u16; 8];
    alias[..4].copy_from_slice(&[0x45, 0x74, 0x68, 0x30]);
    assert_eq!(wide_name(&alias), "Eth0");
    assert_eq!(wide_name(&[0x77, 0xe9]), "wé");
    assert_eq!(wide_name(&[0xd800, 0]), "\u{fffd}");
}

#[test]
fn addresses_join_their_interfaces() {
    let iface = |index: u32, name: &str| Interface {
        index,
        name: name.into(),
        up: true,
        addresses: vec![],
    };
    let joined = with_addresses(
        vec![iface(9, "Ethernet 2"), iface(4, "Ethernet")],
        [
            (4, ip("198.51.100.7"), 24),
            (4, ip("fe80::1"), 64),
            (5, ip("192.0.2.1"), 24),
            (9, ip("192.0.2.9"), 33),
        ],
    );
    assert_eq!(
        joined,
        vec![
            Interface {
                addresses: vec![net("198.51.100.7/24"), net("fe80::1/64")],
                ..iface(4, "Ethernet")
            },
            iface(9, "Ethernet 2"),
        ]
    );
}

#[test]
fn win32_errors_read_as_call_text_code_and_cause() {
    assert_eq!(
        win32_reason("CreateIpForwardEntry2", 5010, "The object already exists. (os error 5010)"),
        "CreateIpForwardEntry2: The object already exists. (Win32 error 5010: a row with this prefix, next hop and interface exists)"
    );
    assert_eq!(
        win32_reason("SetIpForwardEntry2", 5, ""),
        "SetIpForwardEntry2: Access is denied. (Win32 error 5: tern must run as an administrator or LocalSystem)"
    );
    assert_eq!(
        win32_reason("GetIfTable2", 87, "Wrong"),
        "GetIfTable2: Wrong (Win32 error 87)"
    );
    assert_eq!(
        win32_reason("X", 4242, " "),
        "X: unknown error (Win32 error 4242)"
    );
}
