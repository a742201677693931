//! The FIB task's table: the wanted routes and, against them, tern's routes in the
//! kernel as far as the task knows, in one map.
//!
//! A wanted route is kept compact ([`super::wanted`]): a class number (next hops,
//! metric and table, shared by the routes of one peer) and whether the kernel has
//! exactly this route (nearly always, once installed), about 20 bytes with its prefix.
//! Only a kernel route that differs from the wanted one (found at start, sent with the
//! tunnel device filled in, or no longer wanted) is kept whole, in a second map. Two
//! full maps of `Route`s, each with its own next-hop list on the heap, cost about 220
//! bytes per route, more than the RIB (docs/benchmarks.md).
//!
//! The one rule that keeps the marker true: a wanted route that changes while the
//! kernel has the old one leaves the old one in the second map ([`Table::set_want`]).
//! A kernel batch updates the table from [`Receipt`]s.

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::wanted::{Class, Classes, Want, Wanted};
use crate::reconcile::Sent;
use crate::{Route, RouteChange};

/// Wanted routes and tern's routes in the kernel, by prefix.
#[derive(Debug, Default)]
pub(crate) struct Table {
    wanted: Wanted,
    /// Kernel routes other than the wanted route of their prefix.
    others: BTreeMap<IpNet, Route>,
    /// What the wanted routes are besides their prefixes, each distinct one once.
    classes: Classes,
}

impl Table {
    /// A table of routes read from the kernel (none wanted yet).
    pub(crate) fn from_kernel(routes: Vec<Route>) -> Table {
        Table {
            others: routes.into_iter().map(|r| (r.prefix, r)).collect(),
            ..Table::default()
        }
    }

    /// The route `w` of `p`.
    fn route(&self, p: IpNet, w: Want) -> Option<Route> {
        self.classes.get(w.class()).map(|c| c.route(p))
    }

    /// Whether `w` is `r` (without its prefix).
    fn is(&self, w: Want, r: &Route) -> bool {
        self.classes.get(w.class()).is_some_and(|c| c.is(r))
    }

    /// The wanted route of `p`.
    pub(crate) fn want(&self, p: &IpNet) -> Option<Route> {
        self.wanted.get(p).and_then(|w| self.route(*p, w))
    }

    /// Whether `r` is exactly the wanted route of its prefix.
    pub(crate) fn is_wanted(&self, r: &Route) -> bool {
        self.wanted.get(&r.prefix).is_some_and(|w| self.is(w, r))
    }

    /// Whether a route is wanted for `p`.
    pub(crate) fn wants(&self, p: &IpNet) -> bool {
        self.wanted.get(p).is_some()
    }

    /// Every wanted route, in prefix order.
    pub(crate) fn wanted(&self) -> impl Iterator<Item = Route> + '_ {
        self.wanted.iter().filter_map(|(p, w)| self.route(p, w))
    }

    /// Every prefix a route is wanted for, in order.
    pub(crate) fn wanted_prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.wanted.iter().map(|(p, _)| p)
    }

    /// The kernel's route for `p`.
    pub(crate) fn kernel(&self, p: &IpNet) -> Option<Route> {
        match self.wanted.get(p) {
            Some(w) if w.in_kernel() => self.route(*p, w),
            _ => self.others.get(p).cloned(),
        }
    }

    /// Whether the kernel has a route of ours for `p`.
    pub(crate) fn in_kernel(&self, p: &IpNet) -> bool {
        self.installed_as_wanted(p) || self.others.contains_key(p)
    }

    /// `p`'s share of the counts (installed, missing, unexpected), when one look-up
    /// tells: the kernel has the wanted route, or no kernel route differs from a
    /// wanted one (nearly always), so the wanted route's marker says it all. `None`:
    /// compare the routes.
    pub(crate) fn quick_share(&self, p: &IpNet) -> Option<[usize; 3]> {
        match self.wanted.get(p) {
            Some(w) if w.in_kernel() => Some([1, 0, 0]),
            _ if !self.others.is_empty() => None,
            Some(_) => Some([0, 1, 0]),
            None => Some([0, 0, 0]),
        }
    }

    /// Whether the kernel has exactly the wanted route of `p`.
    pub(crate) fn installed_as_wanted(&self, p: &IpNet) -> bool {
        self.wanted.get(p).is_some_and(|w| w.in_kernel())
    }

    /// Every route of ours in the kernel (those as wanted first, then the others;
    /// each part in prefix order).
    pub(crate) fn kernel_routes(&self) -> impl Iterator<Item = Route> + '_ {
        let as_wanted = self
            .wanted
            .iter()
            .filter(|(_, w)| w.in_kernel())
            .filter_map(|(p, w)| self.route(p, w));
        as_wanted.chain(self.others.values().cloned())
    }

    /// Every prefix the kernel has a route of ours for (as in [`Self::kernel_routes`]).
    pub(crate) fn kernel_prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        let as_wanted = self.wanted.iter().filter(|(_, w)| w.in_kernel());
        as_wanted.map(|(p, _)| p).chain(self.others.keys().copied())
    }

    /// How many routes of ours the kernel has.
    pub(crate) fn kernel_len(&self) -> usize {
        let as_wanted = self.wanted.iter().filter(|(_, w)| w.in_kernel()).count();
        as_wanted + self.others.len()
    }

    /// `p`'s wanted route is now `now` (`None`: none); returns the old one. A kernel
    /// route that was the old wanted one is kept as it is; one that is exactly the new
    /// one is marked so.
    pub(crate) fn set_want(&mut self, p: IpNet, now: Option<Route>) -> Option<Route> {
        let old = self.wanted.remove(&p);
        let old_route = old.and_then(|w| self.route(p, w));
        let mut in_kernel = false;
        if let (Some(w), Some(r)) = (old, &old_route) {
            if w.in_kernel() && now.as_ref() == Some(r) {
                in_kernel = true;
            } else if w.in_kernel() {
                self.others.insert(p, r.clone());
            }
        }
        if let Some(r) = now {
            if self.others.get(&p) == Some(&r) {
                self.others.remove(&p);
                in_kernel = true;
            }
            let class = self.classes.take(Class::of(r));
            self.wanted.insert(p, Want::new(class, in_kernel));
        }
        if let Some(w) = old {
            self.classes.release(w.class());
        }
        old_route
    }

    /// The kernel now has `r` (a batch added or replaced it).
    pub(crate) fn kernel_put(&mut self, r: Route) {
        if self.is_wanted(&r) {
            self.kernel_put_as_wanted(r.prefix);
            return;
        }
        if let Some(w) = self.wanted.get_mut(&r.prefix) {
            w.set_in_kernel(false);
        }
        self.others.insert(r.prefix, r);
    }

    /// The kernel now has the wanted route of `p`.
    pub(crate) fn kernel_put_as_wanted(&mut self, p: IpNet) {
        if let Some(w) = self.wanted.get_mut(&p) {
            w.set_in_kernel(true);
            self.others.remove(&p);
        }
    }

    /// The kernel no longer has a route of ours for `p`.
    pub(crate) fn kernel_remove(&mut self, p: &IpNet) {
        if let Some(w) = self.wanted.get_mut(p) {
            w.set_in_kernel(false);
        }
        self.others.remove(p);
    }

    /// Packs the wanted routes' maps if enough prefixes came or went since the last
    /// time (see [`Wanted::pack_if_due`]).
    pub(crate) fn pack_if_due(&mut self) {
        self.wanted.pack_if_due();
    }

    /// Keeps only the kernel routes for which `keep` holds.
    pub(crate) fn kernel_retain(&mut self, mut keep: impl FnMut(&IpNet, &Route) -> bool) {
        let classes = &self.classes;
        for (p, w) in self.wanted.in_kernel_mut() {
            let kept = classes
                .get(w.class())
                .is_some_and(|c| keep(&p, &c.route(p)));
            w.set_in_kernel(kept);
        }
        self.others.retain(|p, r| keep(p, r));
    }

    /// How many distinct route classes are held (for tests).
    #[cfg(test)]
    pub(crate) fn kinds(&self) -> usize {
        self.classes.len()
    }
}

/// What the FIB task keeps of a change it sent, instead of a copy of it (the backend
/// takes the changes): enough to update the [`Table`] once the kernel answered.
#[derive(Debug)]
pub(crate) enum Receipt {
    /// A route added or replaced: `None` when it is the wanted route itself.
    Put(IpNet, Option<Box<Route>>),
    /// A route deleted.
    Delete(IpNet),
}

impl Receipt {
    pub(crate) fn of(c: &RouteChange, table: &Table) -> Receipt {
        match c {
            RouteChange::Add(r) | RouteChange::Replace(r) => {
                let copy = (!table.is_wanted(r)).then(|| Box::new(r.clone()));
                Receipt::Put(r.prefix, copy)
            }
            RouteChange::Delete { prefix, .. } => Receipt::Delete(*prefix),
        }
    }
}

impl Sent for Receipt {
    fn prefix(&self) -> IpNet {
        match self {
            Receipt::Put(p, _) | Receipt::Delete(p) => *p,
        }
    }

    fn is_delete(&self) -> bool {
        matches!(self, Receipt::Delete(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NextHop, RouteKind};

    fn route(p: &str, gw: &str) -> Route {
        Route {
            prefix: p.parse().unwrap_or_else(|e| panic!("{p}: {e}")),
            kind: RouteKind::unicast(gw.parse().map(NextHop::via).into_iter().collect()),
            metric: 0,
            table: 254,
        }
    }

    #[test]
    fn a_route_as_wanted_is_kept_once_and_survives_the_wanted_one_changing() {
        let a = route("198.18.0.0/26", "203.0.113.1");
        let b = route("198.18.0.0/26", "203.0.113.2");
        let p = a.prefix;
        let mut t = Table::default();
        t.set_want(p, Some(a.clone()));
        t.kernel_put(a.clone());
        assert!(t.installed_as_wanted(&p));
        assert!(t.others.is_empty());
        assert_eq!(t.kernel(&p), Some(a.clone()));
        // The wanted route moves on before the kernel does: the kernel entry keeps a.
        assert_eq!(t.set_want(p, Some(b.clone())), Some(a.clone()));
        assert_eq!(t.kernel(&p), Some(a.clone()));
        assert!(!t.installed_as_wanted(&p));
        // The kernel catches up.
        t.kernel_put(b.clone());
        assert!(t.installed_as_wanted(&p));
        assert!(t.others.is_empty());
        // No longer wanted: the kernel still has b until it is deleted.
        t.set_want(p, None);
        assert_eq!(t.kernel(&p), Some(b.clone()));
        assert_eq!(t.kernel_routes().count(), 1);
        t.kernel_remove(&p);
        assert_eq!((t.kernel_len(), t.in_kernel(&p)), (0, false));
        assert_eq!(t.kinds(), 0, "no wanted route holds a kind any more");
    }

    /// The one-look-up share agrees with comparing the routes, in every state a
    /// prefix can be in, with and without another prefix's differing kernel route.
    #[test]
    fn the_quick_share_agrees_with_comparing_the_routes() {
        let a = route("198.18.0.0/26", "203.0.113.1");
        let b = route("198.18.0.0/26", "203.0.113.2");
        let p = a.prefix;
        let elsewhere = route("198.18.1.0/26", "203.0.113.9");
        let full = |t: &Table| match (t.want(&p), t.kernel(&p)) {
            (Some(w), Some(k)) if crate::reconcile::same(&w, &k) => [1, 0, 0],
            (Some(_), _) => [0, 1, 0],
            (None, Some(_)) => [0, 0, 1],
            (None, None) => [0, 0, 0],
        };
        let mut quick_answers = 0;
        for other in [false, true] {
            for want in [None, Some(&a)] {
                for kernel in [None, Some(&a), Some(&b)] {
                    let mut t = Table::from_kernel(kernel.cloned().into_iter().collect());
                    if other {
                        t.kernel_put(elsewhere.clone());
                    }
                    t.set_want(p, want.cloned());
                    let quick = t.quick_share(&p);
                    if let Some(q) = quick {
                        quick_answers += 1;
                        assert_eq!(
                            q,
                            full(&t),
                            "want {want:?}, kernel {kernel:?}, other {other}"
                        );
                    }
                    // Without other differing routes, one look-up always tells.
                    assert!(quick.is_some() || !t.others.is_empty());
                }
            }
        }
        assert!(quick_answers >= 4);
    }

    #[test]
    fn a_route_found_at_start_points_at_the_wanted_one_once_equal() {
        let a = route("198.18.0.0/26", "203.0.113.1");
        let p = a.prefix;
        let mut t = Table::from_kernel(vec![a.clone()]);
        assert_eq!(t.kernel(&p), Some(a.clone()));
        assert!(!t.installed_as_wanted(&p));
        t.set_want(p, Some(a.clone()));
        assert!(t.installed_as_wanted(&p));
        assert!(t.others.is_empty());
        t.kernel_retain(|_, r| r.metric == 1);
        assert_eq!(t.kernel_len(), 0);
        assert_eq!(t.want(&p), Some(a));
    }

    /// The routes of one next hop share one kind; a wanted route that changes or goes
    /// lets go of its kind.
    #[test]
    fn routes_with_the_same_next_hops_share_one_kind() {
        let mut t = Table::default();
        for i in 0..100 {
            t.set_want(
                format!("198.18.1.{i}/32")
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}")),
                Some(route(&format!("198.18.1.{i}/32"), "203.0.113.1")),
            );
        }
        assert_eq!(t.kinds(), 1);
        let p: IpNet = "198.18.1.7/32".parse().unwrap_or_else(|e| panic!("{e}"));
        t.set_want(p, Some(route("198.18.1.7/32", "203.0.113.2")));
        assert_eq!(t.kinds(), 2);
        t.set_want(p, None);
        assert_eq!(t.kinds(), 1);
        // Re-setting the same route keeps the kernel marker.
        let q: IpNet = "198.18.1.8/32".parse().unwrap_or_else(|e| panic!("{e}"));
        t.kernel_put_as_wanted(q);
        t.set_want(q, Some(route("198.18.1.8/32", "203.0.113.1")));
        assert!(t.installed_as_wanted(&q));
    }
}
