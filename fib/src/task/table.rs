//! The FIB task's table: the wanted routes and, against them, tern's routes in the
//! kernel as far as the task knows, in one map.
//!
//! A wanted route is kept compact ([`super::wanted`]): a class number (next hops,
//! metric and table, shared by the routes of one peer) and whether the kernel has
//! exactly this route (nearly always, once installed), about 20 bytes with its prefix.
//! A kernel route that differs from the wanted one (found at start, sent with the
//! tunnel device filled in, or no longer wanted) is kept in a second map the same
//! way, as its class number. Two full maps of `Route`s, each with its own next-hop
//! list on the heap, cost about 220 bytes per route, more than the RIB
//! (docs/benchmarks.md); and when a peer's whole table went, every route waiting to
//! be deleted was a whole `Route` in the second map again (11 MB at 100,000 routes,
//! more than the table had taken).
//!
//! The one rule that keeps the marker true: a wanted route that changes while the
//! kernel has the old one leaves the old one in the second map ([`Table::set_want`]).
//! A kernel batch updates the table from [`Receipt`]s.

use ipnet::IpNet;

use super::wanted::{ByPrefix, Class, Classes, Want, Wanted};
use crate::reconcile::Sent;
use crate::{Route, RouteChange};

/// Wanted routes and tern's routes in the kernel, by prefix.
#[derive(Debug, Default)]
pub(crate) struct Table {
    wanted: Wanted,
    /// Kernel routes other than the wanted route of their prefix, by class number.
    others: ByPrefix<u32>,
    /// What the wanted routes are besides their prefixes, each distinct one once.
    classes: Classes,
}

impl Table {
    /// A table of routes read from the kernel (none wanted yet).
    pub(crate) fn from_kernel(routes: Vec<Route>) -> Table {
        let mut t = Table::default();
        for r in routes {
            t.put_other(r);
        }
        t
    }

    /// The kernel has `r`, which is not the wanted route of its prefix.
    fn put_other(&mut self, r: Route) {
        let p = r.prefix;
        let n = self.classes.take(Class::of(r));
        if let Some(old) = self.others.insert(p, n) {
            self.classes.release(old);
        }
    }

    /// The kernel no longer has a route other than the wanted one for `p`.
    fn remove_other(&mut self, p: &IpNet) {
        if let Some(n) = self.others.remove(p) {
            self.classes.release(n);
        }
    }

    /// The kernel route of `p` other than the wanted one.
    fn other(&self, p: &IpNet) -> Option<Route> {
        let n = self.others.get(p)?;
        self.classes.get(n).map(|c| c.route(*p))
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
            _ => self.other(p),
        }
    }

    /// Whether the kernel has a route of ours for `p`.
    pub(crate) fn in_kernel(&self, p: &IpNet) -> bool {
        self.installed_as_wanted(p) || self.others.get(p).is_some()
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
        let others = self
            .others
            .iter()
            .filter_map(|(p, n)| self.classes.get(n).map(|c| c.route(p)));
        as_wanted.chain(others)
    }

    /// Every prefix the kernel has a route of ours for (as in [`Self::kernel_routes`]).
    pub(crate) fn kernel_prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        let as_wanted = self.wanted.iter().filter(|(_, w)| w.in_kernel());
        as_wanted
            .map(|(p, _)| p)
            .chain(self.others.iter().map(|(p, _)| p))
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
        // The old wanted route's class number goes with it, to the new wanted route or
        // to the second map, or is let go.
        let mut release = old.map(Want::class);
        if let (Some(w), Some(r)) = (old, &old_route) {
            if w.in_kernel() && now.as_ref() == Some(r) {
                in_kernel = true;
            } else if w.in_kernel() {
                if let Some(gone) = self.others.insert(p, w.class()) {
                    self.classes.release(gone);
                }
                release = None;
            }
        }
        if let Some(r) = now {
            let class = match self.others.get(&p) {
                Some(n) if self.classes.get(n).is_some_and(|c| c.is(&r)) => {
                    self.others.remove(&p);
                    in_kernel = true;
                    n
                }
                _ => self.classes.take(Class::of(r)),
            };
            self.wanted.insert(p, Want::new(class, in_kernel));
        }
        if let Some(n) = release {
            self.classes.release(n);
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
        self.put_other(r);
    }

    /// The kernel now has the wanted route of `p`.
    pub(crate) fn kernel_put_as_wanted(&mut self, p: IpNet) {
        if let Some(w) = self.wanted.get_mut(&p) {
            w.set_in_kernel(true);
            self.remove_other(&p);
        }
    }

    /// The kernel no longer has a route of ours for `p`.
    pub(crate) fn kernel_remove(&mut self, p: &IpNet) {
        if let Some(w) = self.wanted.get_mut(p) {
            w.set_in_kernel(false);
        }
        self.remove_other(p);
    }

    /// Packs the wanted routes' maps if enough prefixes came or went since the last
    /// time (see [`Wanted::pack_if_due`]).
    pub(crate) fn pack_if_due(&mut self) {
        self.wanted.pack_if_due();
    }

    /// Keeps only the kernel routes for which `keep` holds.
    pub(crate) fn kernel_retain(&mut self, mut keep: impl FnMut(&IpNet, &Route) -> bool) {
        let classes = &mut self.classes;
        for (p, w) in self.wanted.iter_mut().filter(|(_, w)| w.in_kernel()) {
            let kept = classes
                .get(w.class())
                .is_some_and(|c| keep(&p, &c.route(p)));
            w.set_in_kernel(kept);
        }
        let mut gone = Vec::new();
        self.others.retain(
            |p, n| classes.get(n).is_some_and(|c| keep(&p, &c.route(p))),
            |n| gone.push(n),
        );
        for n in gone {
            classes.release(n);
        }
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

    /// Kernel routes waiting to be deleted are class numbers too: the routes of one
    /// next hop share one class however many wait, each keeps it until the kernel
    /// lets the route go, and the last one lets the class go.
    #[test]
    fn routes_waiting_to_be_deleted_share_their_class_until_they_go() {
        let rs: Vec<Route> = (0..50)
            .map(|i| route(&format!("198.18.2.{i}/32"), "203.0.113.1"))
            .collect();
        let mut t = Table::from_kernel(rs[..10].to_vec());
        assert_eq!((t.kernel_len(), t.others.len(), t.kinds()), (10, 10, 1));
        for r in &rs {
            t.set_want(r.prefix, Some(r.clone()));
        }
        assert!(
            t.others.is_empty(),
            "the routes found at start are the wanted ones"
        );
        assert!(rs[..10].iter().all(|r| t.installed_as_wanted(&r.prefix)));
        for r in &rs[10..] {
            t.kernel_put(r.clone());
        }
        // The peer's table goes: every route waits in the kernel to be deleted.
        for r in &rs {
            t.set_want(r.prefix, None);
        }
        assert_eq!((t.others.len(), t.kinds()), (50, 1));
        assert_eq!(t.kernel(&rs[7].prefix), Some(rs[7].clone()));
        assert!(t.kernel_routes().eq(rs.iter().cloned()));
        assert_eq!(t.quick_share(&rs[7].prefix), None, "compare the routes");
        // Another route replaces one in the kernel, then is dropped by a re-read.
        t.kernel_put(route("198.18.2.0/32", "203.0.113.2"));
        assert_eq!((t.others.len(), t.kinds()), (50, 2));
        t.kernel_retain(|_, r| r.kind == rs[0].kind);
        assert_eq!((t.others.len(), t.kinds()), (49, 1));
        for r in &rs[1..] {
            t.kernel_remove(&r.prefix);
        }
        assert_eq!((t.kernel_len(), t.kinds()), (0, 0));
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
