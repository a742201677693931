//! tern's routes in the kernel as far as the FIB task knows, kept against the wanted
//! routes: a route the kernel has exactly as wanted (nearly every one) is stored as
//! its prefix and a marker, not as a second copy of the route. With two full maps of
//! `Route`s (each with its own next-hop list on the heap) the FIB task held about 300
//! bytes per route, more than the whole RIB; see docs/benchmarks.md.
//!
//! The one rule that keeps the marker true: before a wanted route changes, a kernel
//! entry that points at it takes the old route as its own copy
//! ([`Installed::wanted_changes`]). A kernel batch updates it from [`Receipt`]s.

use std::collections::BTreeMap;

use ipnet::IpNet;

use crate::reconcile::Sent;
use crate::{Route, RouteChange};

/// One prefix's route in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// Exactly the wanted route of the prefix.
    AsWanted,
    /// Another route (found at start, or sent with the tunnel device filled in).
    Other(Box<Route>),
}

/// tern's routes in the kernel, by prefix.
#[derive(Debug, Clone, Default)]
pub(crate) struct Installed {
    map: BTreeMap<IpNet, Entry>,
}

impl Installed {
    /// Routes read from the kernel (none wanted yet).
    pub(crate) fn from_kernel(routes: Vec<Route>) -> Installed {
        Installed {
            map: routes
                .into_iter()
                .map(|r| (r.prefix, Entry::Other(Box::new(r))))
                .collect(),
        }
    }

    /// The kernel's route for `p`.
    pub(crate) fn get<'a>(
        &'a self,
        p: &IpNet,
        wanted: &'a BTreeMap<IpNet, Route>,
    ) -> Option<&'a Route> {
        match self.map.get(p)? {
            Entry::AsWanted => wanted.get(p),
            Entry::Other(r) => Some(r),
        }
    }

    /// Whether the kernel has a route of ours for `p`.
    pub(crate) fn contains_key(&self, p: &IpNet) -> bool {
        self.map.contains_key(p)
    }

    /// Every prefix the kernel has a route of ours for, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &IpNet> {
        self.map.keys()
    }

    /// Every route, in prefix order.
    pub(crate) fn iter<'a>(
        &'a self,
        wanted: &'a BTreeMap<IpNet, Route>,
    ) -> impl Iterator<Item = (&'a IpNet, &'a Route)> {
        self.map.iter().filter_map(move |(p, e)| match e {
            Entry::AsWanted => wanted.get(p).map(|r| (p, r)),
            Entry::Other(r) => Some((p, &**r)),
        })
    }

    /// The kernel now has `r` (a batch added or replaced it).
    pub(crate) fn insert(&mut self, r: Route, wanted: &BTreeMap<IpNet, Route>) {
        let p = r.prefix;
        let e = if wanted.get(&p) == Some(&r) {
            Entry::AsWanted
        } else {
            Entry::Other(Box::new(r))
        };
        self.map.insert(p, e);
    }

    /// The kernel now has the wanted route of `p`.
    pub(crate) fn insert_as_wanted(&mut self, p: IpNet) {
        self.map.insert(p, Entry::AsWanted);
    }

    /// The kernel no longer has a route of ours for `p`.
    pub(crate) fn remove(&mut self, p: &IpNet) {
        self.map.remove(p);
    }

    /// Call when `p`'s wanted route has changed from `old` (`None`: there was none) to
    /// `now`: an entry that pointed at the old one keeps it as its own copy, and one
    /// that is exactly the new one points at it.
    pub(crate) fn wanted_changes(&mut self, p: &IpNet, old: Option<Route>, now: Option<&Route>) {
        let Some(e) = self.map.get_mut(p) else {
            return;
        };
        match (&*e, old) {
            (Entry::AsWanted, Some(old)) if now != Some(&old) => {
                *e = Entry::Other(Box::new(old));
            }
            (Entry::Other(r), _) if now == Some(&**r) => *e = Entry::AsWanted,
            _ => {}
        }
    }

    /// Keeps only the routes for which `keep` holds.
    pub(crate) fn retain(
        &mut self,
        wanted: &BTreeMap<IpNet, Route>,
        mut keep: impl FnMut(&IpNet, &Route) -> bool,
    ) {
        self.map.retain(|p, e| {
            let r = match e {
                Entry::AsWanted => wanted.get(p),
                Entry::Other(r) => Some(&**r),
            };
            r.is_some_and(|r| keep(p, r))
        });
    }

    /// How many routes.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// What the FIB task keeps of a change it sent, instead of a copy of it (the backend
/// takes the changes): enough to update [`Installed`] once the kernel answered.
pub(crate) enum Receipt {
    /// A route added or replaced: `None` when it is the wanted route itself.
    Put(IpNet, Option<Box<Route>>),
    /// A route deleted.
    Delete(IpNet),
}

impl Receipt {
    pub(crate) fn of(c: &RouteChange, wanted: &BTreeMap<IpNet, Route>) -> Receipt {
        match c {
            RouteChange::Add(r) | RouteChange::Replace(r) => {
                let copy = (wanted.get(&r.prefix) != Some(r)).then(|| Box::new(r.clone()));
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
            kind: RouteKind::Unicast(gw.parse().map(NextHop::via).into_iter().collect::<Vec<_>>()),
            metric: 0,
            table: 254,
        }
    }

    #[test]
    fn a_route_as_wanted_is_kept_once_and_survives_the_wanted_one_changing() {
        let a = route("198.18.0.0/26", "203.0.113.1");
        let b = route("198.18.0.0/26", "203.0.113.2");
        let p = a.prefix;
        let mut wanted = BTreeMap::from([(p, a.clone())]);
        let mut k = Installed::default();
        k.insert(a.clone(), &wanted);
        assert_eq!(k.map.get(&p), Some(&Entry::AsWanted));
        assert_eq!(k.get(&p, &wanted), Some(&a));
        // The wanted route moves on before the kernel does: the kernel entry keeps a.
        let old = wanted.insert(p, b.clone());
        k.wanted_changes(&p, old, Some(&b));
        assert_eq!(k.get(&p, &wanted), Some(&a));
        // The kernel catches up.
        k.insert(b.clone(), &wanted);
        assert_eq!(k.map.get(&p), Some(&Entry::AsWanted));
        // No longer wanted: the kernel still has b until it is deleted.
        let old = wanted.remove(&p);
        k.wanted_changes(&p, old, None);
        assert_eq!(k.get(&p, &wanted), Some(&b));
        assert_eq!(k.iter(&wanted).count(), 1);
        k.remove(&p);
        assert_eq!((k.len(), k.contains_key(&p)), (0, false));
    }

    #[test]
    fn a_route_found_at_start_points_at_the_wanted_one_once_equal() {
        let a = route("198.18.0.0/26", "203.0.113.1");
        let p = a.prefix;
        let mut k = Installed::from_kernel(vec![a.clone()]);
        let mut wanted = BTreeMap::new();
        assert_eq!(k.get(&p, &wanted), Some(&a));
        let old = wanted.insert(p, a.clone());
        k.wanted_changes(&p, old, Some(&a));
        assert_eq!(k.map.get(&p), Some(&Entry::AsWanted));
        k.retain(&wanted, |_, r| r.metric == 1);
        assert_eq!(k.len(), 0);
    }
}
