//! Carrying out a batch of route changes as row calls, with the bookkeeping that keeps
//! tern's record and its view of the table equal to what the kernel accepted. Pure
//! apart from the [`RowOps`] it is handed (IP Helper in `iphlp`, a fake kernel in the
//! tests), so the resolution of next hops to interfaces, the order of calls, the undo
//! of a refused change and the saving of the record are tested on every platform.
//! Every refusal says who refused: tern (before any call) or the system (a call's
//! Win32 error).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::convert::{
    describe_hop, plan, InstalledRow, Record, RecordEntry, RowKey, Table, WantedRow,
    PROTOCOL_NETMGMT,
};
use super::resolve::{complete, Lookup, Tables};
use crate::{ApplyReport, FailureKind, Route, RouteChange, RouteFailure};

/// The kernel's calls, as [`execute`] needs them (IP Helper in `iphlp`, a fake in
/// tests). Errors are reasons ready for a [`RouteFailure`].
pub trait RowOps {
    /// The interface and address tables next hops are resolved against
    /// (GetIfTable2, GetUnicastIpAddressTable).
    fn tables(&mut self) -> Result<Tables, String>;
    /// How the system routes to `addr` (GetBestRoute2).
    fn best_route(&mut self, addr: IpAddr) -> Lookup;
    /// Creates a row on the interface with LUID `luid` (`None`: not known yet, look it
    /// up from the index); returns the LUID used.
    fn create(&mut self, row: &WantedRow, luid: Option<u64>) -> Result<u64, String>;
    /// Sets the metric of an existing row.
    fn update(&mut self, row: &WantedRow, luid: u64) -> Result<(), String>;
    /// Deletes a row; a row that is already gone is not an error.
    fn delete(&mut self, key: &RowKey, luid: u64) -> Result<(), String>;
}

/// Carries out one change, keeping `table` and `record` equal to what was done. If a
/// creation or update is refused, the rows created for this change are deleted again,
/// so a refused add leaves nothing and a refused replace leaves the old next hops
/// (with any metric already updated). A refused delete stops the change there, the new
/// rows in place beside some old ones: [`super::convert::own_routes`] shows that mix
/// and reconcile replaces it again.
///
/// Next hops without an interface are first resolved against `tables` (see
/// [`super::resolve`]); one that cannot be is tern's refusal, and no call is made.
pub fn execute(
    change: &RouteChange,
    tables: &Tables,
    table: &mut Table,
    record: &mut Record,
    ops: &mut impl RowOps,
) -> Result<(), Refused> {
    let (change, luids) = resolved(change, tables, ops).map_err(Refused::ByTern)?;
    let plan = plan(&change, table, record).map_err(Refused::ByTern)?;
    let mut created: Vec<(RowKey, u64)> = Vec::new();
    for w in &plan.create {
        let luid = match ops.create(w, luids.get(&w.key.interface).copied()) {
            Ok(luid) => luid,
            Err(e) => return Err(roll_back(e, &created, table, record, ops)),
        };
        let row = InstalledRow {
            key: w.key,
            luid,
            metric: w.metric,
            protocol: PROTOCOL_NETMGMT,
        };
        table.insert(row);
        record.insert(RecordEntry {
            key: w.key,
            luid,
            onlink: w.onlink,
        });
        created.push((w.key, luid));
    }
    for (w, luid) in &plan.update {
        if let Err(e) = ops.update(w, *luid) {
            return Err(roll_back(e, &created, table, record, ops));
        }
        table.insert(InstalledRow {
            key: w.key,
            luid: *luid,
            metric: w.metric,
            protocol: PROTOCOL_NETMGMT,
        });
        record.insert(RecordEntry {
            key: w.key,
            luid: *luid,
            onlink: w.onlink,
        });
    }
    for (key, luid) in &plan.delete {
        ops.delete(key, *luid).map_err(Refused::BySystem)?;
        table.remove(key);
        record.remove(key);
    }
    for key in &plan.forget {
        record.remove(key);
    }
    Ok(())
}

/// Who refused a change, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// tern, before any call: the route cannot be expressed as rows, or a next hop has
    /// no interface.
    ByTern(String),
    /// The system: a call failed (the reason names it and the Win32 error).
    BySystem(String),
}

impl Refused {
    /// The reason, in words.
    pub fn reason(&self) -> &str {
        match self {
            Refused::ByTern(r) | Refused::BySystem(r) => r,
        }
    }
}

/// The change with its next hops' interfaces filled in, and their LUIDs.
fn resolved(
    change: &RouteChange,
    tables: &Tables,
    ops: &mut impl RowOps,
) -> Result<(RouteChange, BTreeMap<u32, u64>), String> {
    let mut best = |a: IpAddr| ops.best_route(a);
    let mut done = |r: &Route, wrap: fn(Route) -> RouteChange| {
        complete(r, tables, &mut best).map(|(r, luids)| (wrap(r), luids))
    };
    match change {
        RouteChange::Add(r) => done(r, RouteChange::Add),
        RouteChange::Replace(r) => done(r, RouteChange::Replace),
        RouteChange::Delete { .. } => Ok((change.clone(), BTreeMap::new())),
    }
}

fn roll_back(
    reason: String,
    created: &[(RowKey, u64)],
    table: &mut Table,
    record: &mut Record,
    ops: &mut impl RowOps,
) -> Refused {
    let mut reason = reason;
    for (key, luid) in created {
        match ops.delete(key, *luid) {
            Ok(()) => {
                table.remove(key);
                record.remove(key);
            }
            // Still installed, so it stays recorded: tern keeps owning it.
            Err(e) => reason.push_str(&format!(
                "; undoing the row {} failed: {e}",
                describe_hop(key)
            )),
        }
    }
    Refused::BySystem(reason)
}

/// Applies a batch: every change is attempted in order, each refusal reported with its
/// prefix. If the record changed, `save` persists it; if that fails, the changes that
/// were applied are reported as failed, because after a restart tern would no longer
/// know those rows as its own.
pub fn apply_batch(
    changes: &[RouteChange],
    table: &mut Table,
    record: &mut Record,
    ops: &mut impl RowOps,
    save: impl FnOnce(&Record) -> Result<(), String>,
) -> ApplyReport {
    // A copy to compare with, rather than bookkeeping in every path that can touch the
    // record (undo included); it costs what the save itself costs.
    let before = record.clone();
    let mut report = ApplyReport::default();
    let mut applied: Vec<&RouteChange> = Vec::new();
    let tables = read_tables(changes, ops);
    for change in changes {
        match execute(change, &tables, table, record, ops) {
            Ok(()) => applied.push(change),
            Err(refused) => report.failed.push(refusal(change, refused)),
        }
    }
    report.applied = applied.len();
    if *record != before {
        if let Err(e) = save(record) {
            report.applied = 0;
            report.failed.extend(applied.into_iter().map(|c| {
                refusal(
                    c,
                    Refused::BySystem(format!(
                        "applied, but tern's route record could not be saved: {e}"
                    )),
                )
            }));
        }
    }
    report
}

/// The tables, read once per batch when a change may need them. If they cannot be
/// read, next hops are resolved by GetBestRoute2 alone (and LUIDs from the index), so a
/// failed read costs precision, not the batch.
fn read_tables(changes: &[RouteChange], ops: &mut impl RowOps) -> Tables {
    if changes
        .iter()
        .all(|c| matches!(c, RouteChange::Delete { .. }))
    {
        return Tables::default();
    }
    ops.tables().unwrap_or_else(|e| {
        tracing::warn!("reading the interface tables to resolve next hops: {e}");
        Tables::default()
    })
}

fn refusal(change: &RouteChange, refused: Refused) -> RouteFailure {
    let kind = match refused {
        Refused::ByTern(_) => FailureKind::ByTern,
        // IP Helper's codes are not sorted into kinds yet (ERROR_OBJECT_ALREADY_EXISTS
        // would be Exists, ERROR_NOT_FOUND NotFound).
        Refused::BySystem(_) => FailureKind::Other,
    };
    RouteFailure {
        prefix: change.prefix(),
        change: change.verb(),
        reason: match refused {
            Refused::ByTern(r) | Refused::BySystem(r) => r,
        },
        kind,
    }
}

#[cfg(test)]
mod recorded;
#[cfg(test)]
mod tests;
