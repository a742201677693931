//! IP Helper calls: route rows, interfaces, addresses and neighbours.
//!
//! Every table IP Helper hands out is read through a slice bounded by its NumEntries
//! and freed with FreeMibTable; every call's error is reported with the call's name
//! and Windows' message for the code.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use ipnet::IpNet;
use windows_sys::Win32::Foundation::NO_ERROR;
use windows_sys::Win32::NetworkManagement::IpHelper::{
    CreateIpForwardEntry2, DeleteIpForwardEntry2, FreeMibTable, GetIfTable2, GetIpForwardTable2,
    GetIpNetTable2, GetUnicastIpAddressTable, InitializeIpForwardEntry, MIB_IF_TABLE2,
    MIB_IPFORWARD_ROW2, MIB_IPFORWARD_TABLE2, MIB_IPNET_TABLE2, MIB_UNICASTIPADDRESS_TABLE,
};
use windows_sys::Win32::NetworkManagement::Ndis::IfOperStatusUp;
use windows_sys::Win32::Networking::WinSock::{
    AF_INET, AF_INET6, AF_UNSPEC, MIB_IPPROTO_NETMGMT, SOCKADDR_INET,
};

use super::convert::{self, Row};
use crate::{ApplyReport, Fib, FibError, Interface, Neighbour, Route, RouteChange, RouteFailure};

/// The Windows FIB. tern's rows are listed in a record file (see [`convert`]).
pub struct WindowsFib {
    record_path: PathBuf,
    record: BTreeSet<Row>,
}

impl WindowsFib {
    /// Opens the backend with the record of tern's rows at `record_path` (created on
    /// the first change; a missing file means tern has no routes yet).
    pub fn new(record_path: PathBuf) -> Result<WindowsFib, FibError> {
        let record = convert::load_record(&record_path).map_err(|reason| FibError::Kernel {
            what: "reading tern's route record".into(),
            reason,
        })?;
        Ok(WindowsFib {
            record_path,
            record,
        })
    }
}

fn win_error(call: &str, code: u32) -> String {
    let text = std::io::Error::from_raw_os_error(code as i32).to_string();
    format!("{call}: {text}")
}

fn kernel(what: &str, call: &str, code: u32) -> FibError {
    FibError::Kernel {
        what: what.into(),
        reason: win_error(call, code),
    }
}

/// The address in a SOCKADDR_INET.
fn from_sockaddr(a: &SOCKADDR_INET) -> Option<IpAddr> {
    // SAFETY: si_family overlays the family field of both variants, and the variant it
    // names is the one that was written.
    unsafe {
        match a.si_family {
            AF_INET => Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                a.Ipv4.sin_addr.S_un.S_addr,
            )))),
            AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(a.Ipv6.sin6_addr.u.Byte))),
            _ => None,
        }
    }
}

fn to_sockaddr(addr: IpAddr) -> SOCKADDR_INET {
    let mut s = SOCKADDR_INET::default();
    match addr {
        IpAddr::V4(v4) => {
            s.Ipv4.sin_family = AF_INET;
            s.Ipv4.sin_addr.S_un.S_addr = u32::from(v4).to_be();
        }
        IpAddr::V6(v6) => {
            s.Ipv6.sin6_family = AF_INET6;
            s.Ipv6.sin6_addr.u.Byte = v6.octets();
        }
    }
    s
}

fn to_row(r: &Row) -> MIB_IPFORWARD_ROW2 {
    let mut row = MIB_IPFORWARD_ROW2::default();
    // SAFETY: row is a valid, writable MIB_IPFORWARD_ROW2; the call sets defaults
    // (lifetimes infinite, metric and protocol unset) that are overwritten below.
    unsafe { InitializeIpForwardEntry(&mut row) };
    row.InterfaceIndex = r.interface;
    row.DestinationPrefix.Prefix = to_sockaddr(r.prefix.network());
    row.DestinationPrefix.PrefixLength = r.prefix.prefix_len();
    row.NextHop = to_sockaddr(r.next_hop);
    row.Metric = r.metric;
    row.Protocol = MIB_IPPROTO_NETMGMT;
    row
}

/// Reads an IP Helper table of `T` rows as a Vec, freeing it.
///
/// # Safety
/// `table` must be null or point to a table IP Helper allocated, laid out as
/// `NumEntries: u32` followed by the rows, as `Tab` describes.
unsafe fn rows_of<Tab, T: Copy>(
    table: *mut Tab,
    entries: impl Fn(&Tab) -> (u32, *const T),
) -> Vec<T> {
    if table.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller guarantees table points to a live table; NumEntries rows
    // follow the header, so the slice stays inside the allocation.
    let out = unsafe {
        let (n, first) = entries(&*table);
        std::slice::from_raw_parts(first, n as usize).to_vec()
    };
    // SAFETY: the table was allocated by IP Helper and is freed once, here.
    unsafe { FreeMibTable(table.cast()) };
    out
}

fn forward_table() -> Result<Vec<Row>, FibError> {
    let mut table: *mut MIB_IPFORWARD_TABLE2 = std::ptr::null_mut();
    // SAFETY: table is a valid out-pointer; on success it receives an allocated table.
    let code = unsafe { GetIpForwardTable2(AF_UNSPEC, &mut table) };
    if code != NO_ERROR {
        return Err(kernel(
            "reading the routing table",
            "GetIpForwardTable2",
            code,
        ));
    }
    // SAFETY: GetIpForwardTable2 succeeded, so table is an IP Helper forward table.
    let rows = unsafe {
        rows_of(table, |t: &MIB_IPFORWARD_TABLE2| {
            (t.NumEntries, t.Table.as_ptr())
        })
    };
    Ok(rows
        .iter()
        .filter_map(|r| {
            let dst = from_sockaddr(&r.DestinationPrefix.Prefix)?;
            Some(Row {
                prefix: IpNet::new(dst, r.DestinationPrefix.PrefixLength).ok()?,
                next_hop: from_sockaddr(&r.NextHop)?,
                interface: r.InterfaceIndex,
                metric: r.Metric,
            })
        })
        .collect())
}

impl WindowsFib {
    fn execute(&mut self, change: &RouteChange) -> Result<(), String> {
        let plan = convert::plan(change, &self.record)?;
        for r in &plan.delete {
            let row = to_row(r);
            // SAFETY: row is a fully initialised MIB_IPFORWARD_ROW2 that outlives the call.
            let code = unsafe { DeleteIpForwardEntry2(&row) };
            if code != NO_ERROR && code != windows_sys::Win32::Foundation::ERROR_NOT_FOUND {
                return Err(win_error("DeleteIpForwardEntry2", code));
            }
            self.record.remove(r);
        }
        for r in &plan.create {
            let row = to_row(r);
            // SAFETY: as above.
            let code = unsafe { CreateIpForwardEntry2(&row) };
            if code != NO_ERROR {
                return Err(win_error("CreateIpForwardEntry2", code));
            }
            self.record.insert(*r);
        }
        Ok(())
    }
}

impl Fib for WindowsFib {
    async fn apply(&mut self, changes: Vec<RouteChange>) -> ApplyReport {
        let mut report = ApplyReport::default();
        for change in &changes {
            match self.execute(change) {
                Ok(()) => report.applied += 1,
                Err(reason) => report.failed.push(RouteFailure {
                    prefix: change.prefix(),
                    change: change.verb(),
                    reason,
                }),
            }
        }
        // The record must match what was done, or a later start would adopt rows
        // that are not tern's or forget rows that are.
        if let Err(reason) = convert::save_record(&self.record_path, &self.record) {
            for change in &changes {
                report.failed.push(RouteFailure {
                    prefix: change.prefix(),
                    change: change.verb(),
                    reason: format!("applied, but the route record could not be saved: {reason}"),
                });
            }
        }
        report
    }

    async fn own_routes(&mut self) -> Result<Vec<Route>, FibError> {
        Ok(convert::own_routes(&forward_table()?, &self.record))
    }

    async fn interfaces(&mut self) -> Result<Vec<Interface>, FibError> {
        let mut ifs: *mut MIB_IF_TABLE2 = std::ptr::null_mut();
        // SAFETY: ifs is a valid out-pointer.
        let code = unsafe { GetIfTable2(&mut ifs) };
        if code != NO_ERROR {
            return Err(kernel("listing interfaces", "GetIfTable2", code));
        }
        // SAFETY: GetIfTable2 succeeded.
        let rows = unsafe { rows_of(ifs, |t: &MIB_IF_TABLE2| (t.NumEntries, t.Table.as_ptr())) };
        let mut by_index: BTreeMap<u32, Interface> = rows
            .iter()
            .map(|r| {
                let len = r
                    .Alias
                    .iter()
                    .position(|c| *c == 0)
                    .unwrap_or(r.Alias.len());
                let name = String::from_utf16_lossy(r.Alias.get(..len).unwrap_or_default());
                (
                    r.InterfaceIndex,
                    Interface {
                        index: r.InterfaceIndex,
                        name,
                        up: r.OperStatus == IfOperStatusUp,
                        addresses: Vec::new(),
                    },
                )
            })
            .collect();
        let mut addrs: *mut MIB_UNICASTIPADDRESS_TABLE = std::ptr::null_mut();
        // SAFETY: addrs is a valid out-pointer.
        let code = unsafe { GetUnicastIpAddressTable(AF_UNSPEC, &mut addrs) };
        if code != NO_ERROR {
            return Err(kernel(
                "listing addresses",
                "GetUnicastIpAddressTable",
                code,
            ));
        }
        // SAFETY: GetUnicastIpAddressTable succeeded.
        let rows = unsafe {
            rows_of(addrs, |t: &MIB_UNICASTIPADDRESS_TABLE| {
                (t.NumEntries, t.Table.as_ptr())
            })
        };
        for r in &rows {
            let (Some(a), Some(i)) = (
                from_sockaddr(&r.Address),
                by_index.get_mut(&r.InterfaceIndex),
            ) else {
                continue;
            };
            if let Ok(net) = IpNet::new(a, r.OnLinkPrefixLength) {
                i.addresses.push(net);
            }
        }
        Ok(by_index.into_values().collect())
    }

    async fn neighbours(&mut self) -> Result<Vec<Neighbour>, FibError> {
        let mut table: *mut MIB_IPNET_TABLE2 = std::ptr::null_mut();
        // SAFETY: table is a valid out-pointer.
        let code = unsafe { GetIpNetTable2(AF_UNSPEC, &mut table) };
        if code != NO_ERROR {
            return Err(kernel("listing neighbours", "GetIpNetTable2", code));
        }
        // SAFETY: GetIpNetTable2 succeeded.
        let rows = unsafe {
            rows_of(table, |t: &MIB_IPNET_TABLE2| {
                (t.NumEntries, t.Table.as_ptr())
            })
        };
        Ok(rows
            .iter()
            .filter_map(|r| {
                let len = (r.PhysicalAddressLength as usize).min(r.PhysicalAddress.len());
                let mac = r.PhysicalAddress.get(..len).unwrap_or_default();
                Some(Neighbour {
                    interface: r.InterfaceIndex,
                    address: from_sockaddr(&r.Address)?,
                    lladdr: (!mac.is_empty()).then(|| {
                        mac.iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(":")
                    }),
                    state: convert::neighbour_state(r.State)?,
                })
            })
            .collect())
    }
}
