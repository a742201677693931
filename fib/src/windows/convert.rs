//! The platform-free half of the Windows backend: tern's routes as IP Helper rows,
//! the plan of row creations and deletions for a change, the record of which rows are
//! tern's, and neighbour states. Compiled everywhere so it is unit-tested on Linux.
//!
//! Windows has no multipath route object: an ECMP route is one row per next hop, with
//! the same prefix. It has no blackhole or unreachable route type either, and one
//! routing table per family; such routes are refused with a reason rather than
//! approximated. The route's Protocol field cannot tell tern's rows from an
//! administrator's `route add` (both are NETMGMT), so tern keeps a record file of the
//! rows it created and never touches a row that is not in it.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use ipnet::IpNet;

use crate::{NeighbourState, NextHop, Route, RouteChange, RouteKind};

/// The only table Windows has (tern's `table` must be the main one, 254).
pub const MAIN_TABLE: u32 = 254;

/// One IP Helper forward row as tern describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row {
    /// Destination.
    pub prefix: IpNet,
    /// Gateway; the unspecified address means on-link.
    pub next_hop: IpAddr,
    /// Interface index.
    pub interface: u32,
    /// Route metric (added by Windows to the interface metric).
    pub metric: u32,
}

/// The rows that express `route`, or why Windows cannot express it.
pub fn rows_for(route: &Route) -> Result<Vec<Row>, String> {
    if route.table != MAIN_TABLE {
        return Err(format!(
            "Windows has one routing table; table {} is not supported",
            route.table
        ));
    }
    let hops = match &route.kind {
        RouteKind::Unicast(h) => h,
        RouteKind::Blackhole => {
            return Err(
                "Windows has no blackhole routes; the block stays unrouted on this node".into(),
            )
        }
        RouteKind::Unreachable => return Err("Windows has no unreachable routes".into()),
    };
    if hops.is_empty() {
        return Err("unicast route without a next hop".into());
    }
    hops.iter().map(|h| row_for(route, h)).collect()
}

fn row_for(route: &Route, h: &NextHop) -> Result<Row, String> {
    let v6 = route.prefix.addr().is_ipv6();
    let next_hop = match h.gateway {
        Some(gw) if gw.is_ipv6() != v6 => {
            return Err(format!(
                "next hop {gw} is of the other address family (RFC 8950 routes are Linux only)"
            ))
        }
        Some(gw) => gw,
        None if v6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let Some(interface) = h.interface else {
        return Err(format!("next hop {next_hop} has no interface; IP Helper needs one (resolve the next hop first)"));
    };
    Ok(Row {
        prefix: route.prefix,
        next_hop,
        interface,
        metric: route.metric,
    })
}

/// Rows to delete and to create, in that order, for one change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowPlan {
    /// tern's rows to delete first.
    pub delete: Vec<Row>,
    /// Rows to create.
    pub create: Vec<Row>,
}

/// Plans `change` against tern's recorded rows. Only recorded rows are ever deleted.
pub fn plan(change: &RouteChange, ours: &BTreeSet<Row>) -> Result<RowPlan, String> {
    let mine = |prefix: IpNet| ours.iter().filter(move |r| r.prefix == prefix).copied();
    match change {
        RouteChange::Add(route) => {
            if mine(route.prefix).next().is_some() {
                return Err("tern already has a route for this prefix".into());
            }
            Ok(RowPlan {
                delete: Vec::new(),
                create: rows_for(route)?,
            })
        }
        RouteChange::Replace(route) => {
            let want: BTreeSet<Row> = rows_for(route)?.into_iter().collect();
            Ok(RowPlan {
                delete: mine(route.prefix).filter(|r| !want.contains(r)).collect(),
                create: want.iter().filter(|r| !ours.contains(r)).copied().collect(),
            })
        }
        RouteChange::Delete { prefix, table } => {
            if *table != MAIN_TABLE {
                return Err(format!(
                    "Windows has one routing table; table {table} is not supported"
                ));
            }
            let delete: Vec<Row> = mine(*prefix).collect();
            if delete.is_empty() {
                return Err("tern has no route for this prefix".into());
            }
            Ok(RowPlan {
                delete,
                create: Vec::new(),
            })
        }
    }
}

/// tern's routes: recorded rows still present in the kernel's table, ECMP rows merged.
/// Recorded rows the table lacks are gone (someone deleted them, or a reboot).
pub fn own_routes(table: &[Row], record: &BTreeSet<Row>) -> Vec<Route> {
    let present: BTreeSet<&Row> = table.iter().collect();
    let mut routes: Vec<Route> = Vec::new();
    for row in record.iter().filter(|r| present.contains(r)) {
        let hop = NextHop {
            gateway: (!row.next_hop.is_unspecified()).then_some(row.next_hop),
            interface: Some(row.interface),
            onlink: false,
            weight: 1,
        };
        match routes.last_mut() {
            Some(Route {
                prefix,
                kind: RouteKind::Unicast(hops),
                ..
            }) if *prefix == row.prefix => hops.push(hop),
            _ => routes.push(Route {
                prefix: row.prefix,
                kind: RouteKind::Unicast(vec![hop]),
                metric: row.metric,
                table: MAIN_TABLE,
            }),
        }
    }
    routes
}

/// Reads the record file: one row per line, `prefix next-hop interface metric`.
/// A missing file is an empty record (first start).
pub fn load_record(path: &Path) -> Result<BTreeSet<Row>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, line)| {
            parse_row(line).map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))
        })
        .collect()
}

fn parse_row(line: &str) -> Result<Row, String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [prefix, next_hop, interface, metric] = f.as_slice() else {
        return Err(format!(
            "expected `prefix next-hop interface metric`, got {line:?}"
        ));
    };
    Ok(Row {
        prefix: prefix
            .parse()
            .map_err(|e| format!("prefix {prefix:?}: {e}"))?,
        next_hop: next_hop
            .parse()
            .map_err(|e| format!("next hop {next_hop:?}: {e}"))?,
        interface: interface
            .parse()
            .map_err(|e| format!("interface {interface:?}: {e}"))?,
        metric: metric
            .parse()
            .map_err(|e| format!("metric {metric:?}: {e}"))?,
    })
}

/// Writes the record file atomically (temporary file, then rename), so a crash leaves
/// the old record or the new one, never half of one.
pub fn save_record(path: &Path, record: &BTreeSet<Row>) -> Result<(), String> {
    let text: String = record
        .iter()
        .map(|r| format!("{} {} {} {}\n", r.prefix, r.next_hop, r.interface, r.metric))
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Windows' NL_NEIGHBOR_STATE as tern's state (`None` for values it does not report).
pub fn neighbour_state(state: i32) -> Option<NeighbourState> {
    Some(match state {
        0 => NeighbourState::Failed, // NlnsUnreachable: resolution failed
        1 => NeighbourState::Incomplete,
        2 => NeighbourState::Probe,
        3 => NeighbourState::Delay,
        4 => NeighbourState::Stale,
        5 => NeighbourState::Reachable,
        6 => NeighbourState::Permanent,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
