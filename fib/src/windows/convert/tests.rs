//! Row conversion, planning, the record file and neighbour states.

use super::*;

fn net(s: &str) -> IpNet {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn hop(gw: &str, ifindex: u32) -> NextHop {
    NextHop {
        gateway: Some(ip(gw)),
        interface: Some(ifindex),
        onlink: false,
        weight: 1,
    }
}

fn route(prefix: &str, hops: Vec<NextHop>) -> Route {
    Route {
        prefix: net(prefix),
        kind: RouteKind::Unicast(hops),
        metric: 5,
        table: MAIN_TABLE,
    }
}

fn row(prefix: &str, gw: &str, ifindex: u32) -> Row {
    Row {
        prefix: net(prefix),
        next_hop: ip(gw),
        interface: ifindex,
        metric: 5,
    }
}

#[test]
fn ecmp_is_one_row_per_next_hop_and_on_link_is_the_unspecified_gateway() {
    let r = route(
        "198.18.1.0/26",
        vec![hop("198.51.100.2", 4), hop("198.51.100.3", 4)],
    );
    assert_eq!(
        rows_for(&r),
        Ok(vec![
            row("198.18.1.0/26", "198.51.100.2", 4),
            row("198.18.1.0/26", "198.51.100.3", 4)
        ])
    );
    let onlink = route(
        "2001:db8:1::/64",
        vec![NextHop {
            gateway: None,
            interface: Some(7),
            onlink: false,
            weight: 1,
        }],
    );
    assert_eq!(rows_for(&onlink), Ok(vec![row("2001:db8:1::/64", "::", 7)]));
}

#[test]
fn what_windows_cannot_express_is_refused_with_a_reason() {
    let bh = Route {
        kind: RouteKind::Blackhole,
        ..route("198.18.0.0/26", vec![])
    };
    assert!(rows_for(&bh).unwrap_err().contains("no blackhole"));
    let t = Route {
        table: 100,
        ..route("198.18.0.0/26", vec![hop("198.51.100.2", 4)])
    };
    assert!(rows_for(&t).unwrap_err().contains("one routing table"));
    let mixed = route("198.18.0.0/26", vec![hop("2001:db8::2", 4)]);
    assert!(rows_for(&mixed)
        .unwrap_err()
        .contains("other address family"));
    let no_if = route("198.18.0.0/26", vec![NextHop::via(ip("198.51.100.2"))]);
    assert!(rows_for(&no_if).unwrap_err().contains("has no interface"));
}

#[test]
fn replace_deletes_only_the_rows_that_go_and_creates_only_the_new_ones() {
    let ours: BTreeSet<Row> = [
        row("198.18.1.0/26", "198.51.100.2", 4),
        row("198.18.1.0/26", "198.51.100.3", 4),
        row("198.18.2.0/26", "198.51.100.2", 4),
    ]
    .into_iter()
    .collect();
    let change = RouteChange::Replace(route(
        "198.18.1.0/26",
        vec![hop("198.51.100.3", 4), hop("198.51.100.4", 4)],
    ));
    assert_eq!(
        plan(&change, &ours),
        Ok(RowPlan {
            delete: vec![row("198.18.1.0/26", "198.51.100.2", 4)],
            create: vec![row("198.18.1.0/26", "198.51.100.4", 4)]
        })
    );
    let add = RouteChange::Add(route("198.18.2.0/26", vec![hop("198.51.100.2", 4)]));
    assert!(plan(&add, &ours).unwrap_err().contains("already"));
    let del = RouteChange::Delete {
        prefix: net("198.18.2.0/26"),
        table: MAIN_TABLE,
    };
    assert_eq!(
        plan(&del, &ours).map(|p| p.delete),
        Ok(vec![row("198.18.2.0/26", "198.51.100.2", 4)])
    );
    // A prefix tern never installed is not tern's to delete, even if the table has it.
    let foreign = RouteChange::Delete {
        prefix: net("198.18.9.0/24"),
        table: MAIN_TABLE,
    };
    assert!(plan(&foreign, &ours).is_err());
}

#[test]
fn own_routes_are_recorded_rows_still_in_the_table() {
    let record: BTreeSet<Row> = [
        row("198.18.1.0/26", "198.51.100.2", 4),
        row("198.18.1.0/26", "198.51.100.3", 4),
        row("198.18.3.0/26", "198.51.100.2", 4),
    ]
    .into_iter()
    .collect();
    // The table also holds a foreign route; 198.18.3.0/26 was deleted by someone.
    let table = vec![
        row("198.18.1.0/26", "198.51.100.3", 4),
        row("198.18.9.0/24", "198.51.100.9", 4),
        row("198.18.1.0/26", "198.51.100.2", 4),
    ];
    let own = own_routes(&table, &record);
    assert_eq!(
        own,
        vec![route(
            "198.18.1.0/26",
            vec![hop("198.51.100.2", 4), hop("198.51.100.3", 4)]
        )]
    );
}

#[test]
fn the_record_survives_a_round_trip_and_bad_lines_are_named() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("routes.record");
    assert_eq!(
        load_record(&path),
        Ok(BTreeSet::new()),
        "a missing record is empty"
    );
    let record: BTreeSet<Row> = [
        row("198.18.1.0/26", "198.51.100.2", 4),
        row("2001:db8:1::/64", "::", 7),
    ]
    .into_iter()
    .collect();
    save_record(&path, &record).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(load_record(&path), Ok(record));
    std::fs::write(
        &path,
        "198.18.1.0/26 198.51.100.2 4 5\n198.18.1.0/99 x 4 5\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let e = load_record(&path).unwrap_err();
    assert!(
        e.contains("line 2") && e.contains("prefix \"198.18.1.0/99\""),
        "{e}"
    );
}

#[test]
fn neighbour_states_map_to_the_linux_names() {
    assert_eq!(neighbour_state(0), Some(NeighbourState::Failed));
    assert_eq!(neighbour_state(1), Some(NeighbourState::Incomplete));
    assert_eq!(neighbour_state(5), Some(NeighbourState::Reachable));
    assert_eq!(neighbour_state(6), Some(NeighbourState::Permanent));
    assert_eq!(neighbour_state(7), None);
}
