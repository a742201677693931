//! Reconcile: the changes that turn the kernel's tern routes into the wanted ones.
//!
//! Pure: wanted routes and the kernel's routes carrying tern's protocol in, a plan out.
//! Identical routes are adopted (no change, so a restart does not churn the FIB);
//! different ones are replaced in place; routes no longer wanted are deleted only once
//! the caller says the graceful-restart period is over — until then they stay and
//! keep forwarding. Routes of other protocols never reach this function.

use std::collections::BTreeMap;

use ipnet::IpNet;

use crate::{Route, RouteChange, RouteKind};

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
/// comparison of the FIB (the daemon's FIB task uses it too).
pub fn same(want: &Route, have: &Route) -> bool {
    if want.prefix != have.prefix || want.metric != have.metric || want.table != have.table {
        return false;
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

/// Plans the changes from `kernel` (tern's routes as found) to `wanted`.
/// `remove_unwanted` is false while graceful restart is in progress.
pub fn reconcile(wanted: &[Route], kernel: &[Route], remove_unwanted: bool) -> Plan {
    let have: BTreeMap<(u32, IpNet), &Route> =
        kernel.iter().map(|r| ((r.table, r.prefix), r)).collect();
    let want: BTreeMap<(u32, IpNet), &Route> =
        wanted.iter().map(|r| ((r.table, r.prefix), r)).collect();
    let mut plan = Plan::default();
    let mut changes: BTreeMap<(u32, IpNet), RouteChange> = BTreeMap::new();
    for (key, w) in &want {
        match have.get(key) {
            Some(h) if same(w, h) => plan.adopted += 1,
            Some(_) => {
                changes.insert(*key, RouteChange::Replace((*w).clone()));
            }
            None => {
                changes.insert(*key, RouteChange::Add((*w).clone()));
            }
        }
    }
    for key in have.keys().filter(|k| !want.contains_key(k)) {
        if remove_unwanted {
            changes.insert(
                *key,
                RouteChange::Delete {
                    prefix: key.1,
                    table: key.0,
                },
            );
        } else {
            plan.kept_stale.push(key.1);
        }
    }
    plan.changes = changes.into_values().collect();
    plan
}

/// A tern route the kernel reports removed: if it is still wanted and nobody asked for
/// its removal, the change that puts it back (someone ran `ip route del`, or an
/// interface went down and took it along).
pub fn repair(wanted: Option<&Route>, removed: &Route) -> Option<RouteChange> {
    match wanted {
        Some(w) if w.prefix == removed.prefix && w.table == removed.table => {
            Some(RouteChange::Replace(w.clone()))
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
            hops[0].interface = Some(2);
        }
        assert!(same(&want, &have));
        assert!(reconcile(&[want], &[have.clone()], true).changes.is_empty());
        let mut want_if = have.clone();
        if let RouteKind::Unicast(hops) = &mut want_if.kind {
            hops[0].interface = Some(3);
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
        assert_eq!(repair(Some(&w), &w), Some(RouteChange::Replace(w.clone())));
        assert_eq!(repair(None, &w), None);
        let other = r("198.18.2.0/26", &["198.51.100.2"]);
        assert_eq!(repair(Some(&other), &w), None);
    }
}
