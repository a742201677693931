//! Next hops resolved to interfaces, as IP Helper needs them: a forward row names its
//! interface (index and LUID), and BGP next hops come without one. Pure: the interface
//! and address tables are passed in (GetIfTable2, GetUnicastIpAddressTable in `iphlp`), and so is the GetBestRoute2-style look-up, so every rule is tested on
//! every platform.
//!
//! The rule: the next hop is on the on-link subnet of an address of a connected
//! interface of its family (longest prefix wins); else GetBestRoute2's answer; else it
//! is refused by tern, saying whether the look-up found no route or itself failed.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::{Route, RouteKind};

/// An interface in one address family (from GetIfTable2 in `iphlp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfRow {
    /// Interface index.
    pub index: u32,
    /// Interface LUID.
    pub luid: u64,
    /// Operationally up: an interface that is down carries no traffic, so no next hop
    /// is put on it.
    pub up: bool,
    /// The family this row is for (true: IPv4).
    pub v4: bool,
}

/// One unicast address with the length of its on-link prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRow {
    /// Interface index.
    pub index: u32,
    /// The address.
    pub address: IpAddr,
    /// OnLinkPrefixLength.
    pub prefix_len: u8,
}

/// The tables the resolver reads, as IP Helper returned them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    /// Interfaces, per family.
    pub interfaces: Vec<IfRow>,
    /// GetUnicastIpAddressTable.
    pub addresses: Vec<AddrRow>,
}

/// An interface a next hop goes out by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Via {
    /// Interface index.
    pub index: u32,
    /// Interface LUID.
    pub luid: u64,
}

/// What a GetBestRoute2-style look-up answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The route's interface.
    Found(Via),
    /// The system has no route to the address (ERROR_NOT_FOUND,
    /// ERROR_NETWORK_UNREACHABLE).
    NoRoute,
    /// The look-up itself failed (any other Win32 error): not an answer.
    Failed(String),
}

impl Tables {
    /// The interface `index` in the family of `addr`, if the table has it.
    fn row(&self, index: u32, v4: bool) -> Option<&IfRow> {
        self.interfaces
            .iter()
            .find(|i| i.index == index && i.v4 == v4)
    }

    /// The LUID of interface `index` in the family of `addr` (for next hops that
    /// came with an interface already).
    pub fn luid(&self, index: u32, addr: IpAddr) -> Option<u64> {
        self.row(index, addr.is_ipv4()).map(|i| i.luid)
    }

    /// The connected interfaces whose on-link subnet holds `hop`, best first: longest
    /// prefix, then lowest index. Link-local subnets count only for link-local hops,
    /// which is what they are.
    fn on_link(&self, hop: IpAddr) -> Vec<(u8, Via)> {
        let mut found: Vec<(u8, Via)> = self
            .addresses
            .iter()
            .filter(|a| a.address.is_ipv4() == hop.is_ipv4() && a.address != hop)
            .filter_map(|a| {
                let net = IpNet::new(a.address, a.prefix_len).ok()?;
                let i = self.row(a.index, hop.is_ipv4()).filter(|i| i.up)?;
                net.contains(&hop).then_some((
                    a.prefix_len,
                    Via {
                        index: i.index,
                        luid: i.luid,
                    },
                ))
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        found.dedup_by_key(|(_, v)| *v);
        found
    }
}

/// The connected interface whose on-link subnet holds `hop` (longest prefix, then
/// lowest index), without any look-up: what `tern diagnose` can say even where
/// GetBestRoute2 does not answer.
pub fn on_link(tables: &Tables, hop: IpAddr) -> Option<Via> {
    tables.on_link(hop).first().map(|(_, v)| *v)
}

/// The interface for next hop `hop`. A hop on one connected subnet (the usual case:
/// a BGP neighbour on the node's network) takes that interface without asking. When
/// two interfaces hold equally long subnets with it (the same network on two
/// adapters), Windows' own choice decides (`best` is asked, and its answer is taken if
/// it is one of them), else the lowest index, so the choice is stable. A hop on no
/// connected subnet goes where `best` (GetBestRoute2) says. The error is tern's refusal
/// reason, naming the hop and what the look-up said.
pub fn resolve(
    tables: &Tables,
    hop: IpAddr,
    best: &mut impl FnMut(IpAddr) -> Lookup,
) -> Result<Via, String> {
    let found = tables.on_link(hop);
    if let Some(&(len, first)) = found.first() {
        let tied: Vec<Via> = found
            .iter()
            .take_while(|(l, _)| *l == len)
            .map(|(_, v)| *v)
            .collect();
        if tied.len() > 1 {
            if let Lookup::Found(v) = best(hop) {
                if tied.contains(&v) {
                    return Ok(v);
                }
            }
        }
        return Ok(first);
    }
    match best(hop) {
        Lookup::Found(v) => Ok(v),
        Lookup::NoRoute => Err(format!(
            "next hop {hop} is on no connected subnet and GetBestRoute2 found no route to it"
        )),
        Lookup::Failed(e) => Err(format!(
            "next hop {hop} is on no connected subnet, and looking up a route to it failed: {e}"
        )),
    }
}

/// `route` with an interface on every next hop that has a gateway but no interface,
/// and the LUID of every interface its next hops use (where the table knows it). The
/// error is tern's refusal of the route (the first hop that cannot be resolved).
pub fn complete(
    route: &Route,
    tables: &Tables,
    best: &mut impl FnMut(IpAddr) -> Lookup,
) -> Result<(Route, BTreeMap<u32, u64>), String> {
    let mut route = route.clone();
    let mut luids = BTreeMap::new();
    if let RouteKind::Unicast(hops) = &mut route.kind {
        for hop in std::sync::Arc::make_mut(hops).iter_mut() {
            let addr = hop.gateway.unwrap_or(route.prefix.addr());
            match (hop.interface, hop.gateway) {
                (Some(index), _) => {
                    if let Some(luid) = tables.luid(index, addr) {
                        luids.insert(index, luid);
                    }
                }
                (None, Some(gw)) => {
                    let via = resolve(tables, gw, best)?;
                    hop.interface = Some(via.index);
                    luids.insert(via.index, via.luid);
                }
                // No gateway and no interface: the row builder refuses it.
                (None, None) => {}
            }
        }
    }
    Ok((route, luids))
}

/// `route` (as read back from the table) without the next hops whose gateway now
/// resolves to another interface than the one its row is on: an address moved or an
/// interface went down. The route then differs from the wanted one, and reconcile
/// replaces it, which creates the rows on the new interface before deleting the old
/// ones. A hop that resolves nowhere now is kept: its row is the best there is until
/// something better is known.
pub fn without_moved_hops(
    mut route: Route,
    tables: &Tables,
    best: &mut impl FnMut(IpAddr) -> Lookup,
) -> Route {
    if let RouteKind::Unicast(hops) = &mut route.kind {
        *hops = hops
            .iter()
            .filter(|h| match (h.gateway, h.interface) {
                (Some(gw), Some(index)) => {
                    resolve(tables, gw, best).map_or(true, |v| v.index == index)
                }
                _ => true,
            })
            .cloned()
            .collect();
    }
    route
}

#[cfg(test)]
mod tests;
