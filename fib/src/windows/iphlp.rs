//! IP Helper calls: forward rows, interfaces, addresses and neighbours.
//!
//! This file only moves values between windows-sys structures and [`convert`]'s plain
//! types; every decision (which rows, whose rows, in what order, what a state means) is
//! made in `convert` and `batch`, where it is tested without Windows. Tables IP Helper hands out are copied
//! through a slice bounded by their NumEntries (checked first) and always freed with
//! FreeMibTable. Every failed call becomes a reason naming the call, Windows' text and
//! the Win32 code.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use windows_sys::Win32::Foundation::{
    ERROR_NETWORK_UNREACHABLE, ERROR_NOT_FOUND, NO_ERROR, WIN32_ERROR,
};
use windows_sys::Win32::NetworkManagement::IpHelper::{
    ConvertInterfaceIndexToLuid, CreateIpForwardEntry2, DeleteIpForwardEntry2, FreeMibTable,
    GetBestRoute2, GetIfTable2, GetIpForwardTable2, GetIpNetTable2, GetUnicastIpAddressTable,
    InitializeIpForwardEntry, SetIpForwardEntry2, MIB_IF_ROW2, MIB_IF_TABLE2, MIB_IPFORWARD_ROW2,
    MIB_IPFORWARD_TABLE2, MIB_IPNET_ROW2, MIB_IPNET_TABLE2, MIB_UNICASTIPADDRESS_ROW,
    MIB_UNICASTIPADDRESS_TABLE,
};
use windows_sys::Win32::NetworkManagement::Ndis::{IfOperStatusUp, NET_LUID_LH};
use windows_sys::Win32::Networking::WinSock::{
    AF_INET, AF_INET6, AF_UNSPEC, MIB_IPPROTO_NETMGMT, SOCKADDR_INET,
};

use super::batch::{apply_batch, RowOps};
use super::convert::{self, InstalledRow, Record, RowKey, Table, WantedRow};
use super::resolve::{without_moved_hops, AddrRow, IfRow, Lookup, Tables, Via};
use crate::{ApplyReport, Fib, FibError, Interface, Neighbour, Route, RouteChange, RouteFailure};

// convert decides ownership with its own copy of the protocol number.
const _: () = assert!(convert::PROTOCOL_NETMGMT == MIB_IPPROTO_NETMGMT);

/// The Windows FIB: tern's routes as IP Helper forward rows in the one routing table.
///
/// Rows are created with protocol NETMGMT and listed in a record file (see
/// [`super::record`]); only rows in the record are ever updated or deleted, and
/// [`Fib::own_routes`] returns only those still in the table. Blackhole and unreachable
/// routes, tables other than 254 and unequal ECMP weights are refused per change with
/// the reason (see [`super::convert`]). A next hop without an interface gets one first,
/// from the connected subnets or GetBestRoute2 (see [`super::resolve`]); one that has
/// none is refused by tern with what the look-up said. The route
/// metric is written as given; Windows adds the interface metric when it chooses.
///
/// Route programming needs an administrator or LocalSystem. The calls are synchronous
/// (IP Helper has no batch call): a large batch blocks the calling thread for the
/// duration, so the FIB task should run where blocking is allowed.
pub struct WindowsFib {
    record_path: PathBuf,
    record: Record,
}

impl WindowsFib {
    /// Opens the backend, reading the record of tern's rows at `record_path` (for
    /// example `C:\ProgramData\tern\routes.record`). A missing file means tern has no
    /// rows yet; it is created by the first batch that changes something. Its directory
    /// must exist. A record that cannot be read or parsed is an error: guessing would
    /// risk deleting rows that are not tern's.
    pub fn new(record_path: impl Into<PathBuf>) -> Result<WindowsFib, FibError> {
        let record_path = record_path.into();
        let record = Record::load(&record_path).map_err(|reason| FibError::Kernel {
            what: "reading tern's route record".into(),
            reason,
        })?;
        Ok(WindowsFib {
            record_path,
            record,
        })
    }

    /// Where the record is kept.
    pub fn record_path(&self) -> &Path {
        &self.record_path
    }

    /// The rows tern believes it created (some may since have been removed by others).
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// How Windows reaches `addr` (GetBestRoute2, IP Helper's `ip route get`): the
    /// gateway when the route has one, and the interface's name; `Ok(None)` when there
    /// is no route, `Err` when the look-up failed (the Win32 error). `tern diagnose` asks this for each next hop. (ResolveIpNetEntry2 is
    /// not used: it sends ARP / ND and blocks until an answer or a timeout, which would
    /// hold diagnose seconds per silent next hop; the neighbour table's states,
    /// GetIpNetTable2, already say INCOMPLETE or UNREACHABLE.)
    ///
    /// An address on a connected subnet is answered from the interface and address
    /// tables, as the route resolver does, without GetBestRoute2.
    pub fn route_to(&self, addr: IpAddr) -> Result<Option<crate::diag::Resolution>, String> {
        let connected = resolve_tables()
            .ok()
            .and_then(|t| super::resolve::on_link(&t, addr));
        match connected {
            Some(via) => Ok(Some(crate::diag::Resolution {
                gateway: None,
                interface: interface_name(via.index),
            })),
            None => best_route(addr),
        }
    }
}

/// GetBestRoute2 for `addr`: `Ok(None)` when there is no route, `Err` when the call
/// itself fails (the reason names the call and Windows' code).
fn best_row(addr: IpAddr) -> Result<Option<MIB_IPFORWARD_ROW2>, String> {
    let dst = to_sockaddr(addr);
    let mut best = MIB_IPFORWARD_ROW2::default();
    let mut source = SOCKADDR_INET::default();
    // SAFETY: every pointer is to a live local for the duration of the call; the
    // optional LUID and source address are null, as the call allows.
    let rc = unsafe {
        GetBestRoute2(
            std::ptr::null(),
            0,
            std::ptr::null(),
            &dst,
            0,
            &mut best,
            &mut source,
        )
    };
    match rc {
        NO_ERROR => Ok(Some(best)),
        ERROR_NOT_FOUND | ERROR_NETWORK_UNREACHABLE => Ok(None),
        _ => Err(reason("GetBestRoute2", rc)),
    }
}

/// [`best_row`] as `tern diagnose` shows it: the gateway when the route has one, and
/// the interface's name.
fn best_route(addr: IpAddr) -> Result<Option<crate::diag::Resolution>, String> {
    let Some(best) = best_row(addr)? else {
        return Ok(None);
    };
    // An unspecified next hop means on-link: no gateway in between.
    let gateway = from_sockaddr(&best.NextHop).filter(|g| !g.is_unspecified());
    Ok(Some(crate::diag::Resolution {
        gateway,
        interface: interface_name(best.InterfaceIndex),
    }))
}

/// The interface's name (its alias), or "interface N" when it cannot be listed.
fn interface_name(index: u32) -> String {
    list_interfaces()
        .ok()
        .and_then(|l| l.into_iter().find(|i| i.index == index))
        .map_or_else(|| format!("interface {index}"), |i| i.name)
}

/// The interface and address tables next hops are resolved against. Interfaces come
/// from GetIfTable2 (operational state and LUID), one row per family: an interface's
/// family shows in its addresses, which the resolver matches anyway. (GetIpInterfaceTable
/// has per-family rows, but Wine 8 answers it "not supported", and the lab runs there.)
fn resolve_tables() -> Result<Tables, String> {
    let get_ifs = |t: *mut *mut MIB_IF_TABLE2| {
        // SAFETY: `get_table` passes a valid out-pointer that outlives the call.
        unsafe { GetIfTable2(t) }
    };
    // SAFETY: GetIfTable2 stores a MIB_IF_TABLE2 on success.
    let ifs = unsafe { get_table("GetIfTable2", get_ifs) }?;
    let get_addrs = |t: *mut *mut MIB_UNICASTIPADDRESS_TABLE| {
        // SAFETY: `get_table` passes a valid out-pointer that outlives the call.
        unsafe { GetUnicastIpAddressTable(AF_UNSPEC, t) }
    };
    // SAFETY: GetUnicastIpAddressTable stores a MIB_UNICASTIPADDRESS_TABLE on success.
    let addrs = unsafe { get_table("GetUnicastIpAddressTable", get_addrs) }?;
    Ok(Tables {
        interfaces: ifs
            .iter()
            .flat_map(|r| {
                [true, false].map(|v4| IfRow {
                    index: r.InterfaceIndex,
                    luid: luid_value(&r.InterfaceLuid),
                    up: r.OperStatus == IfOperStatusUp,
                    v4,
                })
            })
            .collect(),
        addresses: addrs
            .iter()
            .filter_map(|a| {
                Some(AddrRow {
                    index: a.InterfaceIndex,
                    address: from_sockaddr(&a.Address)?,
                    prefix_len: a.OnLinkPrefixLength,
                })
            })
            .collect(),
    })
}

pub(super) fn reason(call: &str, code: WIN32_ERROR) -> String {
    // std's text for a raw OS error comes from FormatMessageW.
    let os = std::io::Error::from_raw_os_error(code as i32).to_string();
    convert::win32_reason(call, code, &os)
}

fn check(call: &str, code: WIN32_ERROR) -> Result<(), String> {
    if code == NO_ERROR {
        Ok(())
    } else {
        Err(reason(call, code))
    }
}

/// An IP Helper table: a row count, then that many rows in one allocation.
trait MibTable {
    type Row: Copy;

    /// The row count and a pointer to the first row.
    ///
    /// # Safety
    /// `table` points to a live table allocated by IP Helper.
    unsafe fn header(table: *const Self) -> (u32, *const Self::Row);
}

macro_rules! mib_table {
    ($table:ty => $row:ty) => {
        impl MibTable for $table {
            type Row = $row;

            // SAFETY: the contract is the trait's (`table` points to a live table).
            unsafe fn header(table: *const Self) -> (u32, *const $row) {
                // SAFETY: the caller guarantees `table` is live. The fields are reached
                // through the raw pointer, so the row pointer keeps the provenance of
                // the whole allocation rather than of the declared one-row array.
                unsafe {
                    (
                        (*table).NumEntries,
                        std::ptr::addr_of!((*table).Table).cast::<$row>(),
                    )
                }
            }
        }
    };
}

mib_table!(MIB_IPFORWARD_TABLE2 => MIB_IPFORWARD_ROW2);
mib_table!(MIB_IF_TABLE2 => MIB_IF_ROW2);
mib_table!(MIB_UNICASTIPADDRESS_TABLE => MIB_UNICASTIPADDRESS_ROW);
mib_table!(MIB_IPNET_TABLE2 => MIB_IPNET_ROW2);

/// A row count above this is taken as a corrupt table rather than trusted.
const MAX_ROWS: usize = 1 << 24;

/// Frees an IP Helper table on every path out of [`get_table`].
struct FreeOnDrop(*const core::ffi::c_void);

impl Drop for FreeOnDrop {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer is a table IP Helper allocated; it is freed once, here.
            unsafe { FreeMibTable(self.0) };
        }
    }
}

/// Calls a Get…Table2 function and copies its rows out. ERROR_NOT_FOUND, which these
/// calls return when there are no entries, is an empty table.
///
/// # Safety
/// `get` must be an IP Helper call that, when it returns NO_ERROR, has stored in its
/// argument a table of `T` allocated by IP Helper (or null).
unsafe fn get_table<T: MibTable>(
    call: &str,
    get: impl FnOnce(*mut *mut T) -> WIN32_ERROR,
) -> Result<Vec<T::Row>, String> {
    let mut table: *mut T = std::ptr::null_mut();
    let code = get(&mut table);
    if code == ERROR_NOT_FOUND {
        return Ok(Vec::new());
    }
    check(call, code)?;
    let _free = FreeOnDrop(table.cast_const().cast());
    if table.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the call succeeded, so `table` is a live IP Helper table of T.
    let (count, first) = unsafe { T::header(table) };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let bytes = count.checked_mul(std::mem::size_of::<T::Row>());
    if count > MAX_ROWS || bytes.is_none_or(|b| b > isize::MAX as usize) {
        return Err(format!("{call}: implausible row count {count}"));
    }
    // SAFETY: IP Helper laid out `count` initialised, aligned rows from `first` within
    // the allocation, which stays alive until `_free` drops after the copy; `count` was
    // bounded above, so the slice's size fits in isize.
    let rows = unsafe { std::slice::from_raw_parts(first, count) };
    Ok(rows.to_vec())
}

/// The address in a SOCKADDR_INET (`None` for other families).
pub(super) fn from_sockaddr(a: &SOCKADDR_INET) -> Option<IpAddr> {
    // SAFETY: si_family overlays the family field of both members, and IP Helper
    // writes the member the family names; every bit pattern of either member is valid.
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

fn luid_value(luid: &NET_LUID_LH) -> u64 {
    // SAFETY: NET_LUID_LH is a union over one u64; any bit pattern is a valid Value.
    unsafe { luid.Value }
}

fn installed(r: &MIB_IPFORWARD_ROW2) -> Option<InstalledRow> {
    let dst = from_sockaddr(&r.DestinationPrefix.Prefix)?;
    Some(InstalledRow {
        key: RowKey {
            prefix: IpNet::new(dst, r.DestinationPrefix.PrefixLength).ok()?,
            next_hop: from_sockaddr(&r.NextHop)?,
            interface: r.InterfaceIndex,
        },
        luid: luid_value(&r.InterfaceLuid),
        metric: r.Metric,
        protocol: r.Protocol,
    })
}

fn forward_table() -> Result<Table, String> {
    let get = |t: *mut *mut MIB_IPFORWARD_TABLE2| {
        // SAFETY: `get_table` passes a valid out-pointer that outlives the call.
        unsafe { GetIpForwardTable2(AF_UNSPEC, t) }
    };
    // SAFETY: GetIpForwardTable2 stores a MIB_IPFORWARD_TABLE2 on success.
    let rows = unsafe { get_table("GetIpForwardTable2", get) }?;
    Ok(rows.iter().filter_map(installed).collect())
}

fn mib_row(key: &RowKey, luid: u64, metric: u32) -> MIB_IPFORWARD_ROW2 {
    let mut row = MIB_IPFORWARD_ROW2::default();
    // SAFETY: `row` is a valid, writable MIB_IPFORWARD_ROW2 for the duration of the
    // call, which only fills in defaults (infinite lifetimes and the like).
    unsafe { InitializeIpForwardEntry(&mut row) };
    row.InterfaceLuid = NET_LUID_LH { Value: luid };
    row.InterfaceIndex = key.interface;
    row.DestinationPrefix.Prefix = to_sockaddr(key.prefix.network());
    row.DestinationPrefix.PrefixLength = key.prefix.prefix_len();
    row.NextHop = to_sockaddr(key.next_hop);
    row.Metric = metric;
    row.Protocol = MIB_IPPROTO_NETMGMT;
    row
}

/// The row calls on the live kernel.
struct IpHelper;

impl RowOps for IpHelper {
    fn tables(&mut self) -> Result<Tables, String> {
        resolve_tables()
    }

    fn best_route(&mut self, addr: IpAddr) -> Lookup {
        match best_row(addr) {
            Ok(Some(r)) => Lookup::Found(Via {
                index: r.InterfaceIndex,
                luid: luid_value(&r.InterfaceLuid),
            }),
            Ok(None) => Lookup::NoRoute,
            Err(e) => Lookup::Failed(e),
        }
    }

    fn create(&mut self, row: &WantedRow, luid: Option<u64>) -> Result<u64, String> {
        let luid = match luid {
            Some(luid) => luid,
            None => {
                let mut luid = NET_LUID_LH::default();
                // SAFETY: `luid` is a valid out-pointer for the duration of the call.
                let code = unsafe { ConvertInterfaceIndexToLuid(row.key.interface, &mut luid) };
                check("ConvertInterfaceIndexToLuid", code)
                    .map_err(|e| format!("interface {}: {e}", row.key.interface))?;
                luid_value(&luid)
            }
        };
        let mib = mib_row(&row.key, luid, row.metric);
        // SAFETY: `mib` is a fully initialised row that outlives the call, which reads it.
        check("CreateIpForwardEntry2", unsafe {
            CreateIpForwardEntry2(&mib)
        })?;
        Ok(luid)
    }

    fn update(&mut self, row: &WantedRow, luid: u64) -> Result<(), String> {
        let mib = mib_row(&row.key, luid, row.metric);
        // SAFETY: as for CreateIpForwardEntry2.
        check("SetIpForwardEntry2", unsafe { SetIpForwardEntry2(&mib) })
    }

    fn delete(&mut self, key: &RowKey, luid: u64) -> Result<(), String> {
        let mib = mib_row(key, luid, 0);
        // SAFETY: as for CreateIpForwardEntry2.
        match unsafe { DeleteIpForwardEntry2(&mib) } {
            ERROR_NOT_FOUND => Ok(()),
            code => check("DeleteIpForwardEntry2", code),
        }
    }
}

/// Bit of MIB_IF_ROW2's InterfaceAndOperStatusFlags (second bitfield, FilterInterface)
/// marking an NDIS filter module's pseudo-interface ("Ethernet-WFP Native MAC Layer
/// LightWeight Filter-0000"): never a place for a route, only noise in the list.
const FILTER_INTERFACE: u8 = 0b10;

fn list_interfaces() -> Result<Vec<Interface>, FibError> {
    let kernel = |reason| FibError::Kernel {
        what: "listing interfaces".into(),
        reason,
    };
    let get_ifs = |t: *mut *mut MIB_IF_TABLE2| {
        // SAFETY: `get_table` passes a valid out-pointer that outlives the call.
        unsafe { GetIfTable2(t) }
    };
    // SAFETY: GetIfTable2 stores a MIB_IF_TABLE2 on success.
    let ifs = unsafe { get_table("GetIfTable2", get_ifs) }.map_err(kernel)?;
    let get_addrs = |t: *mut *mut MIB_UNICASTIPADDRESS_TABLE| {
        // SAFETY: `get_table` passes a valid out-pointer that outlives the call.
        unsafe { GetUnicastIpAddressTable(AF_UNSPEC, t) }
    };
    // SAFETY: GetUnicastIpAddressTable stores a MIB_UNICASTIPADDRESS_TABLE on success.
    let addrs = unsafe { get_table("GetUnicastIpAddressTable", get_addrs) }.map_err(kernel)?;
    let interfaces = ifs
        .iter()
        .filter(|r| r.InterfaceAndOperStatusFlags._bitfield & FILTER_INTERFACE == 0)
        .map(|r| Interface {
            index: r.InterfaceIndex,
            name: convert::wide_name(&r.Alias),
            up: r.OperStatus == IfOperStatusUp,
            addresses: Vec::new(),
        })
        .collect();
    Ok(convert::with_addresses(
        interfaces,
        addrs.iter().filter_map(|a| {
            Some((
                a.InterfaceIndex,
                from_sockaddr(&a.Address)?,
                a.OnLinkPrefixLength,
            ))
        }),
    ))
}

fn list_neighbours() -> Result<Vec<Neighbour>, FibError> {
    let get = |t: *mut *mut MIB_IPNET_TABLE2| {
        // SAFETY: `get_table` passes a valid out-pointer that outlives the call.
        unsafe { GetIpNetTable2(AF_UNSPEC, t) }
    };
    // SAFETY: GetIpNetTable2 stores a MIB_IPNET_TABLE2 on success.
    let rows = unsafe { get_table("GetIpNetTable2", get) }.map_err(|reason| FibError::Kernel {
        what: "listing neighbours".into(),
        reason,
    })?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Neighbour {
                interface: r.InterfaceIndex,
                address: from_sockaddr(&r.Address)?,
                lladdr: convert::lladdr(&r.PhysicalAddress, r.PhysicalAddressLength),
                state: convert::neighbour_state(r.State)?,
            })
        })
        .collect())
}

impl Fib for WindowsFib {
    async fn apply(&mut self, changes: Vec<RouteChange>) -> ApplyReport {
        let mut table = match forward_table() {
            Ok(table) => table,
            Err(e) => {
                return ApplyReport {
                    applied: 0,
                    failed: changes
                        .iter()
                        .map(|c| RouteFailure {
                            prefix: c.prefix(),
                            change: c.verb(),
                            reason: format!("reading the routing table: {e}"),
                            kind: crate::FailureKind::Other,
                        })
                        .collect(),
                }
            }
        };
        let path = &self.record_path;
        apply_batch(
            &changes,
            &mut table,
            &mut self.record,
            &mut IpHelper,
            |record| record.save(path),
        )
    }

    async fn own_routes(&mut self) -> Result<Vec<Route>, FibError> {
        let table = forward_table().map_err(|reason| FibError::Kernel {
            what: "reading the routing table".into(),
            reason,
        })?;
        let routes = convert::own_routes(&table, &self.record);
        // Rows whose next hop has moved to another interface read back without that
        // hop, so reconcile puts them where the hop is now. Without the tables the
        // rows are reported as they are (a failed read must not look like a change).
        let Ok(tables) = resolve_tables() else {
            return Ok(routes);
        };
        let mut best = |a: IpAddr| IpHelper.best_route(a);
        Ok(routes
            .into_iter()
            .map(|r| without_moved_hops(r, &tables, &mut best))
            .collect())
    }

    async fn interfaces(&mut self) -> Result<Vec<Interface>, FibError> {
        list_interfaces()
    }

    async fn neighbours(&mut self) -> Result<Vec<Neighbour>, FibError> {
        list_neighbours()
    }
}

#[cfg(test)]
mod tests;
