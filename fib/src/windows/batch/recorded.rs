//! The write path through the row-call trait with a recording fake of IP Helper: a
//! learned route (a BGP next hop, no interface) is resolved and created on the
//! resolved interface's index and LUID; an unresolvable one makes no call and is
//! tern's refusal. (Wine's iphlpapi has no CreateIpForwardEntry2, so this is where
//! the calls are seen.)

use std::net::IpAddr;

use super::*;
use crate::windows::fixtures::*;
use crate::windows::resolve::{AddrRow, IfRow, Via};
use crate::{NextHop, RouteChange};

/// One recorded call, with the arguments IP Helper would get.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Tables,
    BestRoute(IpAddr),
    /// CreateIpForwardEntry2: destination, next hop, InterfaceIndex, InterfaceLuid.
    Create(String, IpAddr, u32, u64),
    Update(RowKey),
    Delete(RowKey),
}

/// IP Helper as seen from tern: interface 4 (LUID 0x6000001) with 203.0.113.10/24;
/// GetBestRoute2 answers what `best` says.
struct Recorder {
    calls: Vec<Call>,
    best: Lookup,
}

impl Recorder {
    fn new(best: Lookup) -> Recorder {
        Recorder {
            calls: Vec::new(),
            best,
        }
    }
}

const LUID4: u64 = 0x600_0001;

impl RowOps for Recorder {
    fn tables(&mut self) -> Result<Tables, String> {
        self.calls.push(Call::Tables);
        Ok(Tables {
            interfaces: vec![IfRow {
                index: 4,
                luid: LUID4,
                up: true,
                v4: true,
            }],
            addresses: vec![AddrRow {
                index: 4,
                address: ip("203.0.113.10"),
                prefix_len: 24,
            }],
        })
    }
    fn best_route(&mut self, addr: IpAddr) -> Lookup {
        self.calls.push(Call::BestRoute(addr));
        self.best.clone()
    }
    fn create(&mut self, row: &WantedRow, luid: Option<u64>) -> Result<u64, String> {
        let luid = luid.ok_or("no LUID passed to the create call")?;
        self.calls.push(Call::Create(
            row.key.prefix.to_string(),
            row.key.next_hop,
            row.key.interface,
            luid,
        ));
        Ok(luid)
    }
    fn update(&mut self, row: &WantedRow, _: u64) -> Result<(), String> {
        self.calls.push(Call::Update(row.key));
        Ok(())
    }
    fn delete(&mut self, key: &RowKey, _: u64) -> Result<(), String> {
        self.calls.push(Call::Delete(*key));
        Ok(())
    }
}

/// A route as BGP hands it over: a gateway, no interface.
fn learned(prefix: &str, gw: &str) -> RouteChange {
    RouteChange::Add(route(
        prefix,
        vec![NextHop {
            gateway: Some(ip(gw)),
            interface: None,
            onlink: false,
            weight: 1,
        }],
        0,
    ))
}

fn apply(changes: &[RouteChange], ops: &mut Recorder) -> (ApplyReport, Table, Record) {
    let mut table = Table::default();
    let mut record = Record::default();
    let report = apply_batch(changes, &mut table, &mut record, ops, |_| Ok(()));
    (report, table, record)
}

#[test]
fn a_learned_route_is_created_on_its_next_hops_connected_interface() {
    let mut ops = Recorder::new(Lookup::NoRoute);
    let (report, table, record) = apply(&[learned("198.19.1.0/24", "203.0.113.1")], &mut ops);
    assert_eq!(report.failed, vec![]);
    assert_eq!(report.applied, 1);
    assert_eq!(
        ops.calls,
        vec![
            Call::Tables,
            Call::Create("198.19.1.0/24".into(), ip("203.0.113.1"), 4, LUID4),
        ]
    );
    let k = key("198.19.1.0/24", "203.0.113.1", 4);
    assert_eq!(table.get(&k).map(|r| r.luid), Some(LUID4));
    assert_eq!(record.get(&k).map(|e| e.luid), Some(LUID4));
}

#[test]
fn a_next_hop_off_every_subnet_goes_where_get_best_route2_says() {
    let via = Via {
        index: 9,
        luid: 0x600_0009,
    };
    let mut ops = Recorder::new(Lookup::Found(via));
    let (report, _, _) = apply(&[learned("198.19.2.0/24", "198.51.100.1")], &mut ops);
    assert_eq!(report.applied, 1, "{report:?}");
    assert_eq!(
        ops.calls,
        vec![
            Call::Tables,
            Call::BestRoute(ip("198.51.100.1")),
            Call::Create("198.19.2.0/24".into(), ip("198.51.100.1"), 9, 0x600_0009),
        ]
    );
}

#[test]
fn an_unresolvable_next_hop_makes_no_call_and_is_terns_refusal() {
    let mut ops = Recorder::new(Lookup::NoRoute);
    let (report, table, record) = apply(&[learned("198.19.3.0/24", "198.51.100.1")], &mut ops);
    assert_eq!(report.applied, 0);
    let [f] = report.failed.as_slice() else {
        panic!("one refusal expected: {report:?}")
    };
    assert!(f.by_tern(), "{f:?}");
    assert_eq!(
        f.reason,
        "next hop 198.51.100.1 is on no connected subnet and GetBestRoute2 found no route to it"
    );
    assert_eq!(
        ops.calls,
        vec![Call::Tables, Call::BestRoute(ip("198.51.100.1"))]
    );
    assert!(table.is_empty() && record.is_empty());

    // A look-up that fails is reported as a failed look-up, not as "no route".
    let mut ops = Recorder::new(Lookup::Failed(
        "GetBestRoute2: The parameter is incorrect. (Win32 error 87)".into(),
    ));
    let (report, _, _) = apply(&[learned("198.19.3.0/24", "198.51.100.1")], &mut ops);
    let [f] = report.failed.as_slice() else {
        panic!("one refusal expected: {report:?}")
    };
    assert!(
        f.by_tern() && f.reason.contains("looking up a route to it failed"),
        "{f:?}"
    );
    assert!(f.reason.contains("Win32 error 87"), "{f:?}");
}

#[test]
fn what_windows_cannot_express_is_terns_refusal_too() {
    let mut ops = Recorder::new(Lookup::NoRoute);
    let blackhole = RouteChange::Add(crate::Route {
        kind: crate::RouteKind::Blackhole,
        ..route("198.19.4.0/24", vec![], 0)
    });
    let (report, _, _) = apply(&[blackhole], &mut ops);
    assert!(report.failed.iter().all(|f| f.by_tern()), "{report:?}");
    assert!(!ops.calls.iter().any(|c| matches!(c, Call::Create(..))));
}
