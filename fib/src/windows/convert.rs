//! The platform-free half of the Windows backend: tern's routes as IP Helper forward
//! rows, the row operations one change needs given what is installed (carried out by
//! [`super::batch`]), tern's routes read back from the table, and the small
//! conversions of OS values (neighbour states, link-layer addresses, UTF-16 names,
//! Win32 error codes). No windows-sys type appears here, so all of it is unit-tested
//! on Linux; `iphlp` only moves bytes.
//!
//! Windows has no multipath route object: an ECMP route is one row per next hop, all
//! with the same prefix and metric, and Windows spreads traffic equally over the rows
//! of lowest metric. A row is identified by (prefix, next hop, interface); the metric
//! is an attribute, changed in place. Windows also has no blackhole or unreachable
//! route type and one routing table per family: such routes are refused with that
//! reason rather than approximated. (A row towards the loopback interface is a common
//! stand-in for a blackhole, but Windows documents no drop behaviour for it, and read
//! back it would be an ordinary unicast row.)

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

pub use super::record::{Record, RecordEntry};
use crate::{Interface, NeighbourState, NextHop, Route, RouteChange, RouteKind};

/// The only table Windows has: a tern route's `table` must be the main one, 254.
pub const MAIN_TABLE: u32 = 254;

/// NL_ROUTE_PROTOCOL of the rows tern creates (MIB_IPPROTO_NETMGMT, "static").
pub const PROTOCOL_NETMGMT: i32 = 3;

/// What identifies a forward row to Windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowKey {
    /// Destination (host bits clear).
    pub prefix: IpNet,
    /// Gateway; the family's unspecified address means on-link (no gateway).
    pub next_hop: IpAddr,
    /// Interface index.
    pub interface: u32,
}

/// A row tern wants installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WantedRow {
    /// Identity.
    pub key: RowKey,
    /// Route metric (Windows adds the interface metric to it when choosing).
    pub metric: u32,
    /// Asked for as on-link (kept in the record only; see [`RecordEntry::onlink`]).
    pub onlink: bool,
}

/// A row read back from the kernel's forward table (GetIpForwardTable2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstalledRow {
    /// Identity.
    pub key: RowKey,
    /// Interface LUID.
    pub luid: u64,
    /// Route metric.
    pub metric: u32,
    /// NL_ROUTE_PROTOCOL (3 = NETMGMT, 2 = local, 1 = other...).
    pub protocol: i32,
}

/// The kernel's forward table as read back, kept current while a batch is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    rows: BTreeMap<RowKey, InstalledRow>,
}

impl FromIterator<InstalledRow> for Table {
    fn from_iter<I: IntoIterator<Item = InstalledRow>>(rows: I) -> Table {
        Table {
            rows: rows.into_iter().map(|r| (r.key, r)).collect(),
        }
    }
}

impl Table {
    /// The row with this identity.
    pub fn get(&self, key: &RowKey) -> Option<&InstalledRow> {
        self.rows.get(key)
    }

    /// The rows for one prefix, tern's or not.
    pub fn for_prefix(&self, prefix: IpNet) -> impl Iterator<Item = &InstalledRow> {
        self.rows
            .range(RowKey::first_of(prefix)..)
            .map(|(_, r)| r)
            .take_while(move |r| r.key.prefix == prefix)
    }

    /// Records a row the kernel accepted (or replaces its entry).
    pub(super) fn insert(&mut self, row: InstalledRow) {
        self.rows.insert(row.key, row);
    }

    /// Forgets a row the kernel deleted.
    pub(super) fn remove(&mut self, key: &RowKey) {
        self.rows.remove(key);
    }

    /// Every row, ordered by prefix, next hop and interface.
    pub fn rows(&self) -> impl Iterator<Item = &InstalledRow> {
        self.rows.values()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// The rows that express `route`, or why Windows cannot express it.
pub fn rows_for(route: &Route) -> Result<Vec<WantedRow>, String> {
    if route.table != MAIN_TABLE {
        return Err(one_table(route.table));
    }
    let hops = match &route.kind {
        RouteKind::Unicast(hops) => hops,
        RouteKind::Blackhole => {
            return Err("Windows has no blackhole routes; the prefix is left unrouted".into())
        }
        RouteKind::Unreachable => {
            return Err("Windows has no unreachable routes; the prefix is left unrouted".into())
        }
    };
    if hops.is_empty() {
        return Err("Invalid argument (no next hop)".into());
    }
    if route.prefix != route.prefix.trunc() {
        return Err(format!(
            "Invalid prefix: {} has host bits set",
            route.prefix
        ));
    }
    let first_weight = hops.first().map(|h| h.weight);
    if hops.iter().any(|h| Some(h.weight) != first_weight) {
        return Err(
            "Windows shares ECMP traffic equally; unequal weights cannot be expressed".into(),
        );
    }
    let mut rows: Vec<WantedRow> = Vec::with_capacity(hops.len());
    for hop in hops.iter() {
        let row = row_for(route, hop)?;
        if rows.iter().any(|r| r.key == row.key) {
            return Err(format!("{} is listed twice", describe_hop(&row.key)));
        }
        rows.push(row);
    }
    Ok(rows)
}

fn row_for(route: &Route, hop: &NextHop) -> Result<WantedRow, String> {
    let v6 = route.prefix.addr().is_ipv6();
    let next_hop = match hop.gateway {
        Some(gw) if gw.is_ipv6() != v6 => {
            return Err(format!(
                "Invalid argument (next hop {gw} is of the other address family; RFC 8950 routes are Linux only)"
            ))
        }
        Some(gw) if gw.is_unspecified() => {
            return Err(format!("Invalid argument (next hop {gw})"))
        }
        Some(gw) => gw,
        None if v6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let Some(interface) = hop.interface else {
        return Err(format!(
            "next hop {next_hop} has no interface, and a forward row needs one (batches resolve next hops first; this row was built without)"
        ));
    };
    Ok(WantedRow {
        key: RowKey {
            prefix: route.prefix,
            next_hop,
            interface,
        },
        metric: route.metric,
        onlink: hop.onlink,
    })
}

fn one_table(table: u32) -> String {
    format!("Windows has one routing table; table {table} is not supported")
}

pub(super) fn describe_hop(key: &RowKey) -> String {
    if key.next_hop.is_unspecified() {
        format!("on-link on interface {}", key.interface)
    } else {
        format!("via {} on interface {}", key.next_hop, key.interface)
    }
}

/// The row operations of one change, in the order they are made: create, update,
/// delete, so that a replaced route always has a way out (make before break).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowPlan {
    /// Rows to create.
    pub create: Vec<WantedRow>,
    /// tern's rows whose metric or on-link flag changes, with their interface LUID.
    pub update: Vec<(WantedRow, u64)>,
    /// tern's rows to delete, with their interface LUID.
    pub delete: Vec<(RowKey, u64)>,
    /// Recorded rows no longer in the table (removed outside tern): only dropped from
    /// the record.
    pub forget: Vec<RowKey>,
}

/// Plans `change` from the installed `table` and tern's `record`. Only rows the record
/// owns are ever updated or deleted; a wanted row whose identity is taken by a row that
/// is not tern's refuses the whole change before anything is done.
pub fn plan(change: &RouteChange, table: &Table, record: &Record) -> Result<RowPlan, String> {
    let prefix = change.prefix();
    let live: Vec<&InstalledRow> = table
        .for_prefix(prefix)
        .filter(|r| record.owns(r))
        .collect();
    let gone: Vec<RowKey> = record
        .for_prefix(prefix)
        .filter(|e| !table.get(&e.key).is_some_and(|r| record.owns(r)))
        .map(|e| e.key)
        .collect();
    let wanted = match change {
        RouteChange::Add(route) => {
            if !live.is_empty() {
                return Err(format!(
                    "File exists (tern already has {} row(s) for this prefix)",
                    live.len()
                ));
            }
            rows_for(route)?
        }
        RouteChange::Replace(route) => rows_for(route)?,
        RouteChange::Delete { table: t, .. } => {
            if *t != MAIN_TABLE {
                return Err(one_table(*t));
            }
            if live.is_empty() && gone.is_empty() {
                return Err("No such route (tern has no route for this prefix)".into());
            }
            return Ok(RowPlan {
                delete: live.iter().map(|r| (r.key, r.luid)).collect(),
                forget: gone,
                ..RowPlan::default()
            });
        }
    };
    let mut plan = RowPlan::default();
    for w in &wanted {
        match table.get(&w.key) {
            Some(r) if record.owns(r) => {
                let onlink = record.get(&w.key).is_some_and(|e| e.onlink);
                if r.metric != w.metric || onlink != w.onlink {
                    plan.update.push((*w, r.luid));
                }
            }
            Some(_) => {
                return Err(format!(
                    "a row tern did not create exists for this prefix {}; tern leaves it alone",
                    describe_hop(&w.key)
                ))
            }
            None => plan.create.push(*w),
        }
    }
    let is_wanted = |k: &RowKey| wanted.iter().any(|w| w.key == *k);
    plan.delete = live
        .iter()
        .filter(|r| !is_wanted(&r.key))
        .map(|r| (r.key, r.luid))
        .collect();
    plan.forget = gone.into_iter().filter(|k| !is_wanted(k)).collect();
    Ok(plan)
}

/// tern's routes: owned rows present in the table, the rows of a prefix merged into one
/// route. Windows forwards only over the rows of lowest metric, so a prefix whose rows
/// disagree on the metric (changed by hand) is reported with those rows only, and
/// reconcile then replaces it. Recorded rows the table lacks are simply absent.
pub fn own_routes(table: &Table, record: &Record) -> Vec<Route> {
    let mut by_prefix: BTreeMap<IpNet, Vec<(&InstalledRow, bool)>> = BTreeMap::new();
    for entry in record.entries() {
        if let Some(row) = table.get(&entry.key).filter(|r| record.owns(r)) {
            by_prefix
                .entry(entry.key.prefix)
                .or_default()
                .push((row, entry.onlink));
        }
    }
    by_prefix
        .into_iter()
        .filter_map(|(prefix, rows)| {
            let metric = rows.iter().map(|(r, _)| r.metric).min()?;
            let hops = rows
                .iter()
                .filter(|(r, _)| r.metric == metric)
                .map(|(r, onlink)| NextHop {
                    gateway: (!r.key.next_hop.is_unspecified()).then_some(r.key.next_hop),
                    interface: Some(r.key.interface),
                    onlink: *onlink,
                    weight: 1,
                })
                .collect();
            Some(Route {
                prefix,
                kind: RouteKind::Unicast(hops),
                metric,
                table: MAIN_TABLE,
            })
        })
        .collect()
}

/// Windows' NL_NEIGHBOR_STATE as tern's state (`None` for values it does not know).
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

/// A link-layer address as `ip neigh` prints it; `None` when unresolved (no bytes, or
/// all zero, which is how Windows leaves an unresolved entry). `len` comes from the OS
/// and is clamped to the buffer.
pub fn lladdr(bytes: &[u8], len: u32) -> Option<String> {
    let len = usize::try_from(len).map_or(bytes.len(), |l| l.min(bytes.len()));
    let mac = bytes.get(..len)?;
    if mac.iter().all(|b| *b == 0) {
        return None;
    }
    let hex: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    Some(hex.join(":"))
}

/// A NUL-terminated UTF-16 name from a fixed OS buffer (no NUL: the whole buffer).
pub fn wide_name(chars: &[u16]) -> String {
    let len = chars.iter().position(|c| *c == 0).unwrap_or(chars.len());
    String::from_utf16_lossy(chars.get(..len).unwrap_or_default())
}

/// Interfaces with their addresses attached: `(ifindex, address, on-link prefix
/// length)`. Addresses of unknown interfaces or with impossible lengths are dropped.
pub fn with_addresses(
    interfaces: Vec<Interface>,
    addresses: impl IntoIterator<Item = (u32, IpAddr, u8)>,
) -> Vec<Interface> {
    let mut by_index: BTreeMap<u32, Interface> =
        interfaces.into_iter().map(|i| (i.index, i)).collect();
    for (index, addr, len) in addresses {
        if let (Some(i), Ok(net)) = (by_index.get_mut(&index), IpNet::new(addr, len)) {
            i.addresses.push(net);
        }
    }
    by_index.into_values().collect()
}

/// A failure reason for a Win32 error code: the call, Windows' own text (`os_text`,
/// std's " (os error N)" suffix dropped) or a built-in one, the code, and the usual
/// cause for the codes route programming meets.
pub fn win32_reason(call: &str, code: u32, os_text: &str) -> String {
    let (known, hint) = match code {
        5 => (
            "Access is denied.",
            "tern must run as an administrator or LocalSystem",
        ),
        8 => (
            "Not enough memory resources are available to process this command.",
            "",
        ),
        50 => (
            "The request is not supported.",
            "the interface does not route, or this address family's stack is absent",
        ),
        87 => ("The parameter is incorrect.", ""),
        1168 => ("Element not found.", "no such interface, or no such row"),
        5010 => (
            "The object already exists.",
            "a row with this prefix, next hop and interface exists",
        ),
        _ => ("", ""),
    };
    let os = os_text.trim();
    let os = os
        .strip_suffix(&format!("(os error {code})"))
        .map_or(os, str::trim_end);
    let text = if os.is_empty() { known } else { os };
    let text = if text.is_empty() {
        "unknown error"
    } else {
        text
    };
    if hint.is_empty() {
        format!("{call}: {text} (Win32 error {code})")
    } else {
        format!("{call}: {text} (Win32 error {code}: {hint})")
    }
}

#[cfg(test)]
mod tests;
