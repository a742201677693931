//! Reads only: GetIpForwardTable2, GetIfTable2 and GetUnicastIpAddressTable, which Wine
//! implements (GetIpInterfaceTable it does not, so next-hop resolution avoids it). No
//! test here may reach a row-writing call (CreateIpForwardEntry2 and friends abort the
//! process under Wine, and would change the host's routes on Windows), so `apply` and
//! the neighbour table (not implemented by Wine 8) stay out; GetBestRoute2 runs where
//! implemented (Wine 8 answers "not supported": skipped, said).

#[path = "../../../../tests/support/skip.rs"]
mod skip;

use super::*;
use windows_sys::Win32::Foundation::ERROR_NOT_SUPPORTED;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

#[test]
fn the_forward_table_reads_as_rows_of_one_family_each() {
    let table = forward_table().unwrap_or_else(|e| panic!("{e}"));
    assert!(!table.is_empty(), "a host always has some route");
    for row in table.rows() {
        let k = &row.key;
        assert_eq!(k.prefix.addr().is_ipv4(), k.next_hop.is_ipv4(), "{row:?}");
        assert_ne!(row.luid, 0, "{row:?}: every row is on an interface");
    }
    eprintln!("{:#?}", table.rows().collect::<Vec<_>>());
}

#[test]
fn own_routes_are_only_the_recorded_rows_of_the_live_table() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("routes.record");
    let mut fib = WindowsFib::new(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        block_on(fib.own_routes()),
        Ok(vec![]),
        "an empty record owns nothing"
    );
    // Claim one live row in the record (the file only; no route is touched).
    let table = forward_table().unwrap_or_else(|e| panic!("{e}"));
    let Some(row) = table
        .rows()
        .find(|r| r.protocol == convert::PROTOCOL_NETMGMT)
        .copied()
    else {
        skip::skip(
            "iphlp_netmgmt_row",
            "no NETMGMT row on this host; ownership of a live row not checked",
        );
        return;
    };
    let mut record = Record::default();
    record.insert(convert::RecordEntry {
        key: row.key,
        luid: row.luid,
        onlink: false,
    });
    record.save(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut fib = WindowsFib::new(&path).unwrap_or_else(|e| panic!("{e}"));
    let own = block_on(fib.own_routes()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(own[0].prefix, row.key.prefix);
}

#[test]
fn interfaces_carry_names_and_the_addresses_of_the_host() {
    let mut fib = WindowsFib::new(std::env::temp_dir().join("tern-no-record"))
        .unwrap_or_else(|e| panic!("{e}"));
    let ifs = block_on(fib.interfaces()).unwrap_or_else(|e| panic!("{e}"));
    assert!(!ifs.is_empty());
    assert!(ifs.iter().all(|i| !i.name.is_empty()), "{ifs:?}");
    assert!(ifs.iter().any(|i| !i.addresses.is_empty()), "{ifs:?}");
    eprintln!("{ifs:#?}");
}

#[test]
fn the_best_route_to_an_on_link_address_has_no_gateway_and_a_named_interface() {
    // An address inside the host's first on-link IPv4 subnet; only looked up, no
    // packet is sent.
    let table = forward_table().unwrap_or_else(|e| panic!("{e}"));
    let net = table
        .rows()
        .map(|r| r.key.prefix)
        .find(|p| p.addr().is_ipv4() && (1..32).contains(&p.prefix_len()))
        .unwrap_or_else(|| panic!("no on-link IPv4 subnet in {} rows", table.len()));
    let inside = net.hosts().next().unwrap_or(net.addr());
    match best_route(inside) {
        Ok(Some(r)) => {
            assert!(!r.interface.is_empty(), "{r:?}");
        }
        Ok(None) => panic!("no route to {inside} although {net} is in the table"),
        // Wine 8 does not implement GetBestRoute2; real Windows must get here.
        Err(e) if e.contains(&format!("Win32 error {ERROR_NOT_SUPPORTED}:")) => {
            skip::skip(
                "iphlp_best_route",
                &format!("GetBestRoute2 is not implemented here (Wine): {e}"),
            );
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_next_hop_on_a_host_subnet_resolves_from_the_tables_with_its_luid() {
    let tables = resolve_tables().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{tables:#?}");
    assert!(!tables.interfaces.is_empty(), "{tables:?}");
    assert!(tables.interfaces.iter().all(|i| i.luid != 0), "{tables:?}");
    // A host on the subnet of a connected interface's IPv4 address (not loopback).
    let Some((hop, index)) = tables.addresses.iter().find_map(|a| {
        let connected = tables
            .interfaces
            .iter()
            .any(|i| i.index == a.index && i.v4 && i.up);
        let net = IpNet::new(a.address, a.prefix_len).ok()?;
        let hop = net.hosts().find(|h| *h != a.address)?;
        (connected && a.address.is_ipv4() && !a.address.is_loopback() && a.prefix_len < 31)
            .then_some((hop, a.index))
    }) else {
        skip::skip(
            "iphlp_resolve_tables",
            "no connected IPv4 subnet on this host; on-link resolution not checked",
        );
        return;
    };
    let via = super::super::resolve::resolve(&tables, hop, &mut |a| {
        panic!("GetBestRoute2 asked for {a}, which is on a connected subnet")
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(via.index, index);
    let mut luid = NET_LUID_LH::default();
    // SAFETY: `luid` is a valid out-pointer for the duration of the call.
    let rc = unsafe { ConvertInterfaceIndexToLuid(index, &mut luid) };
    assert_eq!(rc, NO_ERROR);
    assert_eq!(
        via.luid,
        luid_value(&luid),
        "the table's LUID is the interface's"
    );
    // diagnose answers it from the tables too, where GetBestRoute2 may not answer.
    let fib = WindowsFib::new(std::env::temp_dir().join("tern-no-record"))
        .unwrap_or_else(|e| panic!("{e}"));
    let r = fib.route_to(hop).unwrap_or_else(|e| panic!("{e}"));
    let r = r.unwrap_or_else(|| panic!("no route to {hop}"));
    assert_eq!(r.gateway, None);
    assert!(
        !r.interface.is_empty() && !r.interface.starts_with("interface "),
        "{r:?}"
    );
}
