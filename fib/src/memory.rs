//! An in-memory kernel: what the daemon's unit tests program instead of a real FIB.
//!
//! It keeps the kernel's rules that matter to tern so tests see the same failures the
//! kernel would report: an add of an existing route fails ("File exists"), a delete of
//! a missing one fails ("No such process"), a gateway must sit on a connected subnet
//! of an interface that is up unless the next hop is on-link, and so on. It is not used
//! to test the real backends: those run against the kernel in namespaces.

use std::collections::BTreeMap;
use std::future::{ready, Future};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::{
    connected_subnet_for, connected_subnets, ApplyReport, FailureKind, Fib, FibError, Interface,
    Neighbour, Route, RouteChange, RouteFailure, RouteKind,
};

/// The in-memory FIB.
#[derive(Debug, Clone, Default)]
pub struct MemoryFib {
    routes: BTreeMap<(u32, IpNet), Route>,
    interfaces: Vec<Interface>,
    neighbours: Vec<Neighbour>,
    history: Vec<RouteChange>,
    /// Other daemons' routes (BIRD's, left on a node tern took over), with their
    /// protocol number.
    others: Vec<(u8, Route)>,
}

impl MemoryFib {
    /// A kernel with these interfaces and no routes.
    pub fn with_interfaces(interfaces: Vec<Interface>) -> MemoryFib {
        MemoryFib {
            interfaces,
            ..MemoryFib::default()
        }
    }

    /// Replaces the neighbour table (as ARP / NDP would change it).
    pub fn set_neighbours(&mut self, neighbours: Vec<Neighbour>) {
        self.neighbours = neighbours;
    }

    /// Replaces the interfaces (links going down, addresses changing).
    pub fn set_interfaces(&mut self, interfaces: Vec<Interface>) {
        self.interfaces = interfaces;
    }

    /// tern's route for `prefix` in `table`, if any.
    pub fn route(&self, prefix: IpNet, table: u32) -> Option<&Route> {
        self.routes.get(&(table, prefix))
    }

    /// Every route, ordered by table then prefix.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.routes.values()
    }

    /// Every change the kernel accepted, in order: what a test asserts on to prove, for
    /// example, that a restart deleted nothing.
    pub fn history(&self) -> &[RouteChange] {
        &self.history
    }

    /// Seeds a route of another daemon's, under its protocol number.
    pub fn preload_other(&mut self, protocol: u8, route: Route) {
        self.others.push((protocol, route));
    }

    /// Other daemons' routes still there.
    pub fn others(&self) -> &[(u8, Route)] {
        &self.others
    }

    /// `protocol`'s routes.
    pub(crate) fn others_routes(&self, protocol: u8) -> Vec<Route> {
        self.others
            .iter()
            .filter(|(p, _)| *p == protocol)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Deletes `protocol`'s routes to these prefixes (one each), as the kernel would.
    pub(crate) fn delete_others(&mut self, routes: &[Route], protocol: u8) -> ApplyReport {
        let mut report = ApplyReport::default();
        for r in routes {
            let at = self
                .others
                .iter()
                .position(|(p, o)| *p == protocol && o.prefix == r.prefix && o.table == r.table);
            match at {
                Some(i) => {
                    self.others.remove(i);
                    report.applied += 1;
                }
                None => report.failed.push(RouteFailure {
                    prefix: r.prefix,
                    change: "delete",
                    reason: "No such process".into(),
                    kind: FailureKind::NotFound,
                }),
            }
        }
        report
    }

    /// Seeds a route as if it had survived from an earlier run.
    pub fn preload(&mut self, route: Route) {
        self.routes.insert((route.table, route.prefix), route);
    }

    fn check(&self, r: &Route) -> Result<(), (String, FailureKind)> {
        let RouteKind::Unicast(hops) = &r.kind else {
            return Ok(());
        };
        if hops.is_empty() {
            return Err(other("Invalid argument (no next hop)"));
        }
        let subnets = connected_subnets(&self.interfaces);
        for h in hops.iter() {
            let iface = match h.interface {
                Some(i) => Some(
                    self.interfaces
                        .iter()
                        .find(|x| x.index == i)
                        .ok_or_else(|| other("No such device"))?,
                ),
                None => None,
            };
            if iface.is_some_and(|i| !i.up) {
                return Err(other("Network is down"));
            }
            if h.onlink && iface.is_none() {
                return Err(other("Invalid argument (on-link next hop needs a device)"));
            }
            match (r.prefix, h.gateway) {
                (_, None) if iface.is_none() => {
                    return Err(other("Invalid argument (no gateway and no device)"))
                }
                (IpNet::V6(_), Some(IpAddr::V4(_))) => {
                    return Err(other("Invalid argument (IPv4 gateway for an IPv6 route)"))
                }
                (_, Some(gw)) if !h.onlink => {
                    let on = connected_subnet_for(&subnets, gw);
                    match (on, h.interface) {
                        (None, _) => {
                            return Err((
                                format!("Network is unreachable (gateway {gw} is not on a connected subnet)"),
                                FailureKind::Unreachable,
                            ))
                        }
                        (Some(s), Some(i)) if s.interface != i => {
                            return Err((
                                format!("Network is unreachable (gateway {gw} is not on interface {i})"),
                                FailureKind::Unreachable,
                            ))
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn apply_one(&mut self, change: &RouteChange) -> Result<(), (String, FailureKind)> {
        match change {
            RouteChange::Add(r) => {
                if self.routes.contains_key(&(r.table, r.prefix)) {
                    return Err(("File exists".into(), FailureKind::Exists));
                }
                self.check(r)?;
                self.routes.insert((r.table, r.prefix), r.clone());
            }
            RouteChange::Replace(r) => {
                self.check(r)?;
                self.routes.insert((r.table, r.prefix), r.clone());
            }
            RouteChange::Delete { prefix, table } => {
                self.routes
                    .remove(&(*table, *prefix))
                    .ok_or_else(|| ("No such process".to_string(), FailureKind::NotFound))?;
            }
        }
        Ok(())
    }

    /// [`Fib::apply`] without the future, for synchronous tests.
    pub fn apply_now(&mut self, changes: Vec<RouteChange>) -> ApplyReport {
        let mut report = ApplyReport::default();
        for c in changes {
            match self.apply_one(&c) {
                Ok(()) => {
                    report.applied += 1;
                    self.history.push(c);
                }
                Err((reason, kind)) => report.failed.push(RouteFailure {
                    prefix: c.prefix(),
                    change: c.verb(),
                    reason,
                    kind,
                }),
            }
        }
        report
    }
}

impl Fib for MemoryFib {
    fn apply(&mut self, changes: Vec<RouteChange>) -> impl Future<Output = ApplyReport> + Send {
        ready(self.apply_now(changes))
    }

    fn own_routes(&mut self) -> impl Future<Output = Result<Vec<Route>, FibError>> + Send {
        ready(Ok(self.routes.values().cloned().collect()))
    }

    fn interfaces(&mut self) -> impl Future<Output = Result<Vec<Interface>, FibError>> + Send {
        ready(Ok(self.interfaces.clone()))
    }

    fn neighbours(&mut self) -> impl Future<Output = Result<Vec<Neighbour>, FibError>> + Send {
        ready(Ok(self.neighbours.clone()))
    }
}

/// A refusal of no particular kind.
fn other(reason: &str) -> (String, FailureKind) {
    (reason.to_string(), FailureKind::Other)
}

#[cfg(test)]
mod tests;
