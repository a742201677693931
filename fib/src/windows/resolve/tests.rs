//! The resolver's rules: on-link subnet, longest prefix, down interfaces, ties, and
//! the GetBestRoute2 fallback with its two kinds of "no".

use super::*;
use crate::windows::fixtures::ip;

fn ifrow(index: u32, up: bool, v4: bool) -> IfRow {
    IfRow {
        index,
        luid: 1000 + u64::from(index),
        up,
        v4,
    }
}

fn addr(index: u32, a: &str, prefix_len: u8) -> AddrRow {
    AddrRow {
        index,
        address: ip(a),
        prefix_len,
    }
}

fn via(index: u32) -> Via {
    Via {
        index,
        luid: 1000 + u64::from(index),
    }
}

/// Interface 4: 203.0.113.10/24 and 2001:db8:1::10/64; interface 7: 198.51.100.10/24
/// and 198.51.100.130/25 (a longer subnet inside the same range).
fn tables() -> Tables {
    Tables {
        interfaces: vec![
            ifrow(4, true, true),
            ifrow(4, true, false),
            ifrow(7, true, true),
            ifrow(9, true, true),
        ],
        addresses: vec![
            addr(4, "203.0.113.10", 24),
            addr(4, "2001:db8:1::10", 64),
            addr(7, "198.51.100.10", 24),
            addr(9, "198.51.100.130", 25),
        ],
    }
}

/// A look-up that must not be asked.
fn never(a: IpAddr) -> Lookup {
    panic!("GetBestRoute2 asked for {a} although the hop is on a connected subnet")
}

#[test]
fn a_hop_on_a_connected_subnet_takes_that_interface_without_a_look_up() {
    let t = tables();
    assert_eq!(resolve(&t, ip("203.0.113.1"), &mut never), Ok(via(4)));
    assert_eq!(resolve(&t, ip("2001:db8:1::1"), &mut never), Ok(via(4)));
    assert_eq!(resolve(&t, ip("198.51.100.20"), &mut never), Ok(via(7)));
}

#[test]
fn on_link_alone_asks_nothing_and_finds_nothing_off_the_subnets() {
    assert_eq!(on_link(&tables(), ip("198.51.100.200")), Some(via(9)));
    assert_eq!(on_link(&tables(), ip("192.0.2.1")), None);
}

#[test]
fn the_longest_on_link_prefix_wins() {
    assert_eq!(
        resolve(&tables(), ip("198.51.100.200"), &mut never),
        Ok(via(9))
    );
}

#[test]
fn a_disconnected_interface_or_one_of_the_other_family_is_not_used() {
    let mut t = tables();
    t.interfaces.retain(|i| i.index != 9);
    t.interfaces.push(ifrow(9, false, true));
    assert_eq!(resolve(&t, ip("198.51.100.200"), &mut never), Ok(via(7)));
    // Interface 4 has no IPv4 row: its IPv4 address is not usable.
    t.interfaces.retain(|i| !(i.index == 4 && i.v4));
    let mut asked = Vec::new();
    let got = resolve(&t, ip("203.0.113.1"), &mut |a| {
        asked.push(a);
        Lookup::NoRoute
    });
    assert!(got.is_err(), "{got:?}");
    assert_eq!(asked, vec![ip("203.0.113.1")]);
}

#[test]
fn two_interfaces_on_the_same_subnet_let_windows_choose_else_the_lowest_index() {
    let mut t = tables();
    t.interfaces.push(ifrow(12, true, true));
    t.addresses.push(addr(12, "203.0.113.11", 24));
    let hop = ip("203.0.113.1");
    assert_eq!(
        resolve(&t, hop, &mut |_| Lookup::Found(via(12))),
        Ok(via(12))
    );
    assert_eq!(resolve(&t, hop, &mut |_| Lookup::NoRoute), Ok(via(4)));
    // An answer that is neither candidate is not taken over a connected subnet.
    assert_eq!(resolve(&t, hop, &mut |_| Lookup::Found(via(7))), Ok(via(4)));
}

#[test]
fn a_hop_on_no_connected_subnet_goes_where_get_best_route2_says() {
    let got = resolve(&tables(), ip("192.0.2.1"), &mut |_| Lookup::Found(via(7)));
    assert_eq!(got, Ok(via(7)));
}

#[test]
fn no_route_and_a_failed_look_up_are_different_refusals() {
    let hop = ip("198.19.0.1");
    let none = resolve(&tables(), hop, &mut |_| Lookup::NoRoute);
    assert_eq!(
        none,
        Err(
            "next hop 198.19.0.1 is on no connected subnet and GetBestRoute2 found no route to it"
                .into()
        )
    );
    let failed = resolve(&tables(), hop, &mut |_| {
        Lookup::Failed("GetBestRoute2: The parameter is incorrect. (Win32 error 87)".into())
    });
    let failed = failed.unwrap_err();
    assert!(
        failed.contains("looking up a route to it failed"),
        "{failed}"
    );
    assert!(failed.contains("Win32 error 87"), "{failed}");
}

#[test]
fn luids_are_found_per_family() {
    let t = tables();
    assert_eq!(t.luid(4, ip("203.0.113.1")), Some(1004));
    assert_eq!(t.luid(7, ip("2001:db8::1")), None);
}

#[test]
fn a_hop_whose_subnet_moved_to_another_interface_is_left_out_of_the_read_back_route() {
    use crate::windows::fixtures::{hop, route};
    let read_back = route(
        "198.19.1.0/24",
        vec![hop("203.0.113.1", 4), hop("198.51.100.20", 7)],
        0,
    );
    // As it was: both hops still resolve to their rows' interfaces.
    let same = without_moved_hops(read_back.clone(), &tables(), &mut never);
    assert_eq!(same, read_back);
    // 203.0.113.0/24 is now on interface 12 (interface 4 lost its address).
    let mut t = tables();
    t.addresses.retain(|a| a.index != 4);
    t.interfaces.push(ifrow(12, true, true));
    t.addresses.push(addr(12, "203.0.113.10", 24));
    let moved = without_moved_hops(read_back.clone(), &t, &mut never);
    assert_eq!(
        moved,
        route("198.19.1.0/24", vec![hop("198.51.100.20", 7)], 0)
    );
    // A hop that resolves nowhere now keeps its row.
    let mut gone = tables();
    gone.addresses.retain(|a| a.index != 4);
    let kept = without_moved_hops(read_back.clone(), &gone, &mut |_| Lookup::NoRoute);
    assert_eq!(kept, read_back);
}
