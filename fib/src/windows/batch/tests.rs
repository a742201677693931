//! Execution against a fake kernel: call order, undo, the batch's view of the table
//! and the saving of the record.

use std::net::IpAddr;

use super::*;
use crate::windows::convert::{own_routes, MAIN_TABLE};
use crate::windows::fixtures::*;
use crate::RouteChange;

/// A kernel that logs each call and refuses the ones listed.
#[derive(Default)]
struct FakeKernel {
    calls: Vec<String>,
    refuse: Vec<String>,
}

impl FakeKernel {
    fn call(&mut self, what: String) -> Result<(), String> {
        self.calls.push(what.clone());
        match self.refuse.contains(&what) {
            true => Err(format!("refused {what}")),
            false => Ok(()),
        }
    }
}

impl RowOps for FakeKernel {
    fn tables(&mut self) -> Result<Tables, String> {
        Ok(Tables::default())
    }
    fn best_route(&mut self, addr: IpAddr) -> Lookup {
        self.calls.push(format!("best {addr}"));
        Lookup::NoRoute
    }
    fn create(&mut self, row: &WantedRow, _: Option<u64>) -> Result<u64, String> {
        self.call(format!("create {}", row.key.next_hop))?;
        Ok(1000 + u64::from(row.key.interface))
    }
    fn update(&mut self, row: &WantedRow, _: u64) -> Result<(), String> {
        self.call(format!("update {} {}", row.key.next_hop, row.metric))
    }
    fn delete(&mut self, key: &RowKey, _: u64) -> Result<(), String> {
        self.call(format!("delete {}", key.next_hop))
    }
}

#[test]
fn a_replace_makes_the_new_rows_before_breaking_the_old_ones() {
    let (a, b) = (key(P1, "198.51.100.2", 4), key(P1, "198.51.100.3", 4));
    let mut table: Table = [live(a, 5), live(b, 5)].into_iter().collect();
    let mut record = record_of(&[mine(a), mine(b)]);
    let mut kernel = FakeKernel::default();
    let change = RouteChange::Replace(route(
        P1,
        vec![hop("198.51.100.3", 4), hop("198.51.100.4", 4)],
        7,
    ));
    assert_eq!(
        execute(
            &change,
            &Tables::default(),
            &mut table,
            &mut record,
            &mut kernel
        ),
        Ok(())
    );
    assert_eq!(
        kernel.calls,
        [
            "create 198.51.100.4",
            "update 198.51.100.3 7",
            "delete 198.51.100.2"
        ]
    );
    let wanted = match &change {
        RouteChange::Replace(r) => r.clone(),
        _ => unreachable!(),
    };
    assert_eq!(own_routes(&table, &record), vec![wanted]);
}

#[test]
fn a_refused_row_undoes_the_rows_created_for_the_change() {
    let mut table = Table::default();
    let mut record = Record::default();
    let mut kernel = FakeKernel {
        refuse: vec!["create 198.51.100.3".into()],
        ..FakeKernel::default()
    };
    let add = RouteChange::Add(route(
        P1,
        vec![hop("198.51.100.2", 4), hop("198.51.100.3", 4)],
        5,
    ));
    let e = execute(
        &add,
        &Tables::default(),
        &mut table,
        &mut record,
        &mut kernel,
    )
    .expect_err("refused");
    assert_eq!(e, Refused::BySystem("refused create 198.51.100.3".into()));
    assert_eq!(
        kernel.calls,
        [
            "create 198.51.100.2",
            "create 198.51.100.3",
            "delete 198.51.100.2"
        ]
    );
    assert!(
        table.is_empty() && record.is_empty(),
        "{table:?} {record:?}"
    );
    // If the undo is refused too, the row stays recorded: it is still tern's.
    kernel.refuse.push("delete 198.51.100.2".into());
    let e = execute(
        &add,
        &Tables::default(),
        &mut table,
        &mut record,
        &mut kernel,
    )
    .expect_err("refused");
    assert!(
        e.reason()
            .contains("undoing the row via 198.51.100.2 on interface 4 failed"),
        "{e:?}"
    );
    assert_eq!(
        record.entries().map(|e| e.key).collect::<Vec<_>>(),
        [key(P1, "198.51.100.2", 4)]
    );
}

#[test]
fn a_batch_sees_its_own_earlier_changes_and_saves_the_record_once() {
    let mut table = Table::default();
    let mut record = Record::default();
    let mut kernel = FakeKernel::default();
    let p2 = "198.18.2.0/26";
    let changes = [
        RouteChange::Add(route(P1, vec![hop("198.51.100.2", 4)], 5)),
        RouteChange::Add(route(p2, vec![hop("198.51.100.2", 4)], 5)),
        RouteChange::Delete {
            prefix: net(P1),
            table: MAIN_TABLE,
        },
        RouteChange::Add(route(p2, vec![hop("198.51.100.3", 4)], 5)),
        // Only possible if the delete above left the batch's table view without P1.
        RouteChange::Add(route(P1, vec![hop("198.51.100.2", 4)], 6)),
    ];
    let mut saved = Vec::new();
    let report = apply_batch(&changes, &mut table, &mut record, &mut kernel, |r| {
        saved.push(r.clone());
        Ok(())
    });
    assert_eq!(report.applied, 4);
    assert_eq!(report.failed.len(), 1);
    assert_eq!(
        (report.failed[0].prefix, report.failed[0].change),
        (net(p2), "add")
    );
    let both = record_of(&[
        mine(key(P1, "198.51.100.2", 4)),
        mine(key(p2, "198.51.100.2", 4)),
    ]);
    assert_eq!(saved, vec![both]);
    assert_eq!(
        kernel.calls,
        [
            "create 198.51.100.2",
            "create 198.51.100.2",
            "delete 198.51.100.2",
            "create 198.51.100.2"
        ]
    );
    // Nothing changed: nothing to save.
    let mut saves = 0;
    let none = apply_batch(&changes[1..2], &mut table, &mut record, &mut kernel, |_| {
        saves += 1;
        Ok(())
    });
    assert_eq!((none.applied, none.failed.len(), saves), (0, 1, 0));
}

#[test]
fn rows_deleted_behind_terns_back_are_recreated_if_wanted_and_forgotten_if_not() {
    let k = key(P1, "198.51.100.2", 4);
    let unwanted = key(P1, "198.51.100.5", 4);
    let mut table = Table::default();
    let mut record = record_of(&[mine(k), mine(unwanted)]);
    let mut kernel = FakeKernel::default();
    assert!(
        own_routes(&table, &record).is_empty(),
        "gone from the table"
    );
    let add = RouteChange::Add(route(P1, vec![hop("198.51.100.2", 4)], 5));
    assert_eq!(
        execute(
            &add,
            &Tables::default(),
            &mut table,
            &mut record,
            &mut kernel
        ),
        Ok(())
    );
    assert_eq!(kernel.calls, ["create 198.51.100.2"]);
    assert_eq!(record, record_of(&[mine(k)]));
    assert_eq!(table.rows().copied().collect::<Vec<_>>(), [live(k, 5)]);
}

#[test]
fn an_unsaved_record_turns_the_applied_changes_into_failures() {
    let mut kernel = FakeKernel::default();
    let changes = [RouteChange::Add(route(P1, vec![hop("198.51.100.2", 4)], 5))];
    let report = apply_batch(
        &changes,
        &mut Table::default(),
        &mut Record::default(),
        &mut kernel,
        |_| Err("disk full".into()),
    );
    assert_eq!(report.applied, 0);
    assert_eq!(report.failed.len(), 1);
    assert!(report.failed[0]
        .reason
        .contains("could not be saved: disk full"));
}

#[test]
fn a_refusal_by_the_system_is_counted_as_the_systems() {
    let mut kernel = FakeKernel {
        refuse: vec!["create 198.51.100.2".into()],
        ..FakeKernel::default()
    };
    let changes = [RouteChange::Add(route(P1, vec![hop("198.51.100.2", 4)], 5))];
    let report = apply_batch(
        &changes,
        &mut Table::default(),
        &mut Record::default(),
        &mut kernel,
        |_| Ok(()),
    );
    assert_eq!(report.failed.len(), 1);
    assert!(!report.failed[0].by_tern(), "{:?}", report.failed[0]);
}
