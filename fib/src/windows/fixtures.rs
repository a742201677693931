//! Test fixtures shared by the convert and batch tests: routes, rows and record
//! entries written the way the scenarios read.

use std::net::IpAddr;

use ipnet::IpNet;

use super::convert::{
    InstalledRow, Record, RecordEntry, RowKey, WantedRow, MAIN_TABLE, PROTOCOL_NETMGMT,
};
use crate::{NextHop, Route, RouteKind};

pub(super) fn net(s: &str) -> IpNet {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

pub(super) fn hop(gw: &str, interface: u32) -> NextHop {
    NextHop {
        gateway: Some(ip(gw)),
        interface: Some(interface),
        onlink: false,
        weight: 1,
    }
}

pub(super) fn route(prefix: &str, hops: Vec<NextHop>, metric: u32) -> Route {
    Route {
        prefix: net(prefix),
        kind: RouteKind::unicast(hops),
        metric,
        table: MAIN_TABLE,
    }
}

pub(super) fn key(prefix: &str, gw: &str, interface: u32) -> RowKey {
    RowKey {
        prefix: net(prefix),
        next_hop: ip(gw),
        interface,
    }
}

pub(super) fn want(k: RowKey, metric: u32) -> WantedRow {
    WantedRow {
        key: k,
        metric,
        onlink: false,
    }
}

/// A row as the fake kernel creates it: LUID 1000 + ifindex, protocol NETMGMT.
pub(super) fn live(k: RowKey, metric: u32) -> InstalledRow {
    InstalledRow {
        key: k,
        luid: 1000 + u64::from(k.interface),
        metric,
        protocol: PROTOCOL_NETMGMT,
    }
}

pub(super) fn mine(k: RowKey) -> RecordEntry {
    RecordEntry {
        key: k,
        luid: 1000 + u64::from(k.interface),
        onlink: false,
    }
}

pub(super) fn record_of(entries: &[RecordEntry]) -> Record {
    let mut r = Record::default();
    entries.iter().for_each(|e| r.insert(*e));
    r
}

pub(super) const P1: &str = "198.18.1.0/26";
