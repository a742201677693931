//! Reconcile: the changes that turn the kernel's tern routes into the wanted ones, and
//! the rules the FIB task lives by, each written once here:
//!
//! - **adopt**: a kernel route already as wanted ([`same`]) gets no change, so a
//!   restart does not churn the FIB; a different one is replaced in place; a missing
//!   one is added without replacing (another protocol's route with the same key is
//!   refused by the kernel, not overwritten);
//! - **grace**: routes nobody wants are deleted only once the caller says the restart
//!   grace is over ([`Unwanted`]); the FIB task keeps only those found at start;
//! - **tunnel**: an on-link next hop with no interface goes out through
//!   [`TUNNEL_DEVICE`] ([`tunnel`]);
//! - **retry**: refusals are remembered per prefix and tried again ([`Refusals`]); a
//!   delete the kernel answers "not found" is done ([`settle`]);
//! - **repair**: a wanted route the kernel lost is put back ([`repair`]).
//!
//! Pure: wanted routes and the kernel's routes carrying tern's protocol in, a plan out.
//! Routes of other protocols never reach these functions.

mod refusals;
pub mod tunnel;

pub use refusals::{settle, Refusals, Sent, Settled};
pub use tunnel::TUNNEL_DEVICE;

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use crate::{Route, RouteChange, RouteFailure, RouteKind};

/// What reconcile decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Changes to apply, ordered by table then prefix.
    pub changes: Vec<RouteChange>,
    /// Kernel routes already as wanted.
    pub adopted: usize,
    /// Kernel routes not wanted but kept because graceful restart is still running.
    pub kept_stale: Vec<IpNet>,
}

/// Whether the kernel's route `have` forwards as the wanted route `want` does: ECMP
/// members in any order, and an interface the kernel filled in itself (tern gave only
/// the gateway) is no difference, or every restart would rewrite every route. The one
/// comparison of the FIB.
pub fn same(want: &Route, have: &Route) -> bool {
    if want.prefix != have.prefix || want.metric != have.metric || want.table != have.table {
        return false;
    }
    // Nearly always: the very same next hops (no lists to sort).
    if want.kind == have.kind {
        return true;
    }
    match (&want.kind, &have.kind) {
        (RouteKind::Unicast(w), RouteKind::Unicast(h)) => {
            let key = |n: &crate::NextHop, keep_if: bool| {
                (
                    n.gateway,
                    if keep_if { n.interface } else { None },
                    n.onlink,
                    n.weight,
                )
            };
            let any_if = w.iter().any(|n| n.interface.is_some());
            let mut a: Vec<_> = w.iter().map(|n| key(n, any_if)).collect();
            let mut b: Vec<_> = h.iter().map(|n| key(n, any_if)).collect();
            a.sort();
            b.sort();
            a == b
        }
        (a, b) => a == b,
    }
}

/// What to do about one key: the adopt and grace rules in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The kernel's route is the wanted one: nothing to send.
    Adopt,
    /// Send this change.
    Change(RouteChange),
    /// The metric changed: delete tern's route, then add this one. The kernel keys
    /// routes by metric too, so a replace would leave the old route beside the new
    /// one (and the old, lower metric would keep carrying the traffic).
    Remetric(Route),
    /// Not wanted, but kept: the restart grace protects it.
    KeepStale,
    /// Neither wanted nor in the kernel.
    Nothing,
}

/// The decision for one key: `want` (as the kernel should have it) against `have`
/// (tern's route in the kernel). `keep_unwanted` says the grace protects `have`.
pub fn decide(want: Option<&Route>, have: Option<&Route>, keep_unwanted: bool) -> Decision {
    match (want, have) {
        (Some(w), Some(h)) if same(w, h) => Decision::Adopt,
        (Some(w), Some(h)) if w.metric != h.metric => Decision::Remetric(w.clone()),
        (Some(w), Some(_)) => Decision::Change(RouteChange::Replace(w.clone())),
        // Not ours in the kernel yet: add without replacing, so a route of another
        // protocol with the same key (a connected subnet, an admin's static route) is
        // refused by the kernel (EEXIST, reported) rather than overwritten.
        (Some(w), None) => Decision::Change(RouteChange::Add(w.clone())),
        (None, Some(_)) if keep_unwanted => Decision::KeepStale,
        (None, Some(h)) => Decision::Change(RouteChange::Delete {
            prefix: h.prefix,
            table: h.table,
        }),
        (None, None) => Decision::Nothing,
    }
}

/// The changes that move tern's route for `w`'s key to `w`'s metric.
fn remetric(w: Route) -> [RouteChange; 2] {
    [
        RouteChange::Delete {
            prefix: w.prefix,
            table: w.table,
        },
        RouteChange::Add(w),
    ]
}

/// Plans the changes from `kernel` (tern's routes as found) to `wanted`.
/// `remove_unwanted` is false while graceful restart is in progress.
pub fn reconcile(wanted: &[Route], kernel: &[Route], remove_unwanted: bool) -> Plan {
    let have: BTreeMap<(u32, IpNet), &Route> =
        kernel.iter().map(|r| ((r.table, r.prefix), r)).collect();
    let want: BTreeMap<(u32, IpNet), &Route> =
        wanted.iter().map(|r| ((r.table, r.prefix), r)).collect();
    let keys: BTreeSet<(u32, IpNet)> = have.keys().chain(want.keys()).copied().collect();
    let mut plan = Plan::default();
    for key in keys {
        let (w, h) = (want.get(&key).copied(), have.get(&key).copied());
        match decide(w, h, !remove_unwanted) {
            Decision::Adopt => plan.adopted += 1,
            Decision::Change(c) => plan.changes.push(c),
            Decision::Remetric(w) => plan.changes.extend(remetric(w)),
            Decision::KeepStale => plan.kept_stale.push(key.1),
            Decision::Nothing => {}
        }
    }
    plan
}

/// Which unwanted tern routes the restart grace protects.
#[derive(Debug, Clone, Copy)]
pub enum Unwanted<'a> {
    /// None: the grace is over, unwanted routes go.
    Delete,
    /// Only these (the routes found in the kernel at start and not wanted since): a
    /// route this run wanted and then withdrew goes at once, grace or not.
    KeepOnly(&'a BTreeSet<IpNet>),
}

impl Unwanted<'_> {
    fn keeps(&self, p: &IpNet) -> bool {
        match self {
            Unwanted::Delete => false,
            Unwanted::KeepOnly(set) => set.contains(p),
        }
    }
}

/// The FIB task's plan for some prefixes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixPlan {
    /// Changes to send to the kernel, in prefix order.
    pub changes: Vec<RouteChange>,
    /// Wanted routes that cannot be sent (no tunnel device): refusals of our own.
    pub refused: Vec<RouteFailure>,
    /// Prefixes neither wanted nor in the kernel: an old refusal no longer matters.
    pub settled: Vec<IpNet>,
}

/// Plans `prefixes` for a task that keeps tern's routes by prefix: `wanted` as the
/// daemon asked (tunnel next hops still open), `kernel` as the kernel has them,
/// `unwanted` the grace rule, `tunnel` the tunnel device's index if it exists.
pub fn plan(
    prefixes: &[IpNet],
    wanted: impl Fn(&IpNet) -> Option<Route>,
    kernel: impl Fn(&IpNet) -> Option<Route>,
    unwanted: Unwanted<'_>,
    tunnel: Option<u32>,
) -> PrefixPlan {
    let mut out = PrefixPlan::default();
    for p in prefixes {
        let want = wanted(p);
        let resolved = match want.as_ref().map(|w| tunnel::resolve(w, tunnel)) {
            Some(Ok(w)) => Some(w),
            Some(Err(f)) => {
                out.refused.push(f);
                continue;
            }
            None => None,
        };
        match decide(resolved.as_deref(), kernel(p).as_ref(), unwanted.keeps(p)) {
            Decision::Change(c) => out.changes.push(c),
            Decision::Remetric(w) => out.changes.extend(remetric(w)),
            Decision::Nothing => out.settled.push(*p),
            Decision::Adopt | Decision::KeepStale => {}
        }
    }
    out
}

/// A tern route the kernel reports removed: if it is still wanted and nobody asked for
/// its removal, the change that puts it back (someone ran `ip route del`, or an
/// interface went down and took it along).
///
/// An add, not a replace: when the route went because another protocol's route took
/// its key, the kernel refuses the add (reported) instead of tern overwriting it.
pub fn repair(wanted: Option<&Route>, removed: &Route) -> Option<RouteChange> {
    match wanted {
        Some(w) if w.prefix == removed.prefix && w.table == removed.table => {
            Some(RouteChange::Add(w.clone()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NextHop;

    fn r(prefix: &str, gws: &[&str]) -> Route {
        let kind = if gws.is_empty() {
            RouteKind::Blackhole
        } else {
            RouteKind::Unicast(
                gws.iter()
                    .filter_map(|g| g.parse().ok())
                    .map(NextHop::via)
                    .collect(),
            )
        };
        Route {
            prefix: prefix.parse().unwrap_or_else(|e| panic!("{prefix}: {e}")),
            kind,
            metric: 0,
            table: 254,
        }
    }

    #[test]
    fn a_restart_with_the_same_routes_changes_nothing() {
        let routes = vec![
            r("198.18.1.0/26", &["198.51.100.2"]),
            r("198.18.0.0/26", &[]),
        ];
        let plan = reconcile(&routes, &routes, true);
        assert_eq!(
            plan,
            Plan {
                changes: vec![],
                adopted: 2,
                kept_stale: vec![]
            }
        );
    }

    /// tern gives a gateway only; the kernel's copy names the interface it resolved:
    /// the same route (a restart adopts it). A wanted interface does count.
    #[test]
    fn an_interface_the_kernel_filled_in_is_no_difference() {
        let want = r("198.18.1.0/26", &["198.51.100.2"]);
        let mut have = want.clone();
        if let RouteKind::Unicast(hops) = &mut have.kind {
            std::sync::Arc::make_mut(hops)[0].interface = Some(2);
        }
        assert!(same(&want, &have));
        assert!(reconcile(&[want], &[have.clone()], true).changes.is_empty());
        let mut want_if = have.clone();
        if let RouteKind::Unicast(hops) = &mut want_if.kind {
            std::sync::Arc::make_mut(hops)[0].interface = Some(3);
        }
        assert!(!same(&want_if, &have));
    }

    #[test]
    fn ecmp_order_does_not_matter() {
        let a = r("198.18.1.0/26", &["198.51.100.2", "198.51.100.3"]);
        let b = r("198.18.1.0/26", &["198.51.100.3", "198.51.100.2"]);
        assert!(reconcile(&[a], &[b], true).changes.is_empty());
    }

    #[test]
    fn new_changed_and_unwanted_routes() {
        let kernel = vec![
            r("198.18.1.0/26", &["198.51.100.2"]),
            r("198.18.9.0/26", &["198.51.100.2"]),
        ];
        let wanted = vec![
            r("198.18.1.0/26", &["198.51.100.3"]),
            r("198.18.2.0/26", &["198.51.100.2"]),
        ];
        let plan = reconcile(&wanted, &kernel, false);
        assert_eq!(
            plan.changes,
            vec![
                RouteChange::Replace(wanted[0].clone()),
                RouteChange::Add(wanted[1].clone())
            ]
        );
        assert_eq!(
            plan.kept_stale,
            vec![kernel[1].prefix],
            "kept during graceful restart"
        );
        let plan = reconcile(&wanted, &kernel, true);
        assert_eq!(
            plan.changes.last(),
            Some(&RouteChange::Delete {
                prefix: kernel[1].prefix,
                table: 254
            })
        );
        assert!(plan.kept_stale.is_empty());
    }

    #[test]
    fn a_removed_route_is_put_back_only_when_still_wanted() {
        let w = r("198.18.1.0/26", &["198.51.100.2"]);
        assert_eq!(repair(Some(&w), &w), Some(RouteChange::Add(w.clone())));
        assert_eq!(repair(None, &w), None);
        let other = r("198.18.2.0/26", &["198.51.100.2"]);
        assert_eq!(repair(Some(&other), &w), None);
    }

    #[test]
    fn a_metric_change_deletes_then_adds() {
        let old = r("198.18.1.0/26", &["198.51.100.2"]);
        let new = Route {
            metric: 1024,
            ..old.clone()
        };
        let plan = reconcile(std::slice::from_ref(&new), &[old], true);
        assert_eq!(
            plan.changes,
            vec![
                RouteChange::Delete {
                    prefix: new.prefix,
                    table: new.table
                },
                RouteChange::Add(new)
            ]
        );
    }
}
