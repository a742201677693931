//! Carrying out a batch of route changes as row calls, with the bookkeeping that keeps
//! tern's record and its view of the table equal to what the kernel accepted. Pure
//! apart from the [`RowOps`] it is handed (IP Helper in `iphlp`, a fake kernel in the
//! tests), so the order of calls, the undo of a refused change and the saving of the
//! record are tested on every platform.

use super::convert::{
    describe_hop, plan, InstalledRow, Record, RecordEntry, RowKey, Table, WantedRow,
    PROTOCOL_NETMGMT,
};
use crate::{ApplyReport, RouteChange, RouteFailure};

/// The kernel's row calls, as [`execute`] needs them (IP Helper in `iphlp`, a fake in
/// tests). Errors are reasons ready for a [`RouteFailure`].
pub trait RowOps {
    /// Creates a row; returns the LUID of its interface.
    fn create(&mut self, row: &WantedRow) -> Result<u64, String>;
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
pub fn execute(
    change: &RouteChange,
    table: &mut Table,
    record: &mut Record,
    ops: &mut impl RowOps,
) -> Result<(), String> {
    let plan = plan(change, table, record)?;
    let mut created: Vec<(RowKey, u64)> = Vec::new();
    for w in &plan.create {
        let luid = match ops.create(w) {
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
        ops.delete(key, *luid)?;
        table.remove(key);
        record.remove(key);
    }
    for key in &plan.forget {
        record.remove(key);
    }
    Ok(())
}

fn roll_back(
    reason: String,
    created: &[(RowKey, u64)],
    table: &mut Table,
    record: &mut Record,
    ops: &mut impl RowOps,
) -> String {
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
    reason
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
    for change in changes {
        match execute(change, table, record, ops) {
            Ok(()) => applied.push(change),
            Err(reason) => report.failed.push(failure(change, reason)),
        }
    }
    report.applied = applied.len();
    if *record != before {
        if let Err(e) = save(record) {
            report.applied = 0;
            report.failed.extend(applied.into_iter().map(|c| {
                failure(
                    c,
                    format!("applied, but tern's route record could not be saved: {e}"),
                )
            }));
        }
    }
    report
}

fn failure(change: &RouteChange, reason: String) -> RouteFailure {
    RouteFailure {
        prefix: change.prefix(),
        change: change.verb(),
        reason,
        // IP Helper's codes are not sorted into kinds yet (ERROR_OBJECT_ALREADY_EXISTS
        // would be Exists, ERROR_NOT_FOUND NotFound).
        kind: crate::FailureKind::Other,
    }
}

#[cfg(test)]
mod tests;
