//! The wanted routes of the FIB task's [`super::table::Table`], four bytes each beside
//! their prefix; the kernel routes that differ from them are kept the same way
//! ([`ByPrefix`], a class number each).
//!
//! What a route is besides its prefix (next hops, metric, table) is the same for
//! nearly every route of one peer, so it is kept once as a numbered [`Class`], and a
//! wanted route is its class number with one bit for "the kernel has exactly this".
//! IPv4 and IPv6 prefixes live in two maps, keyed by 5 and 17 bytes (an integer
//! [`Key`] made from `Ipv4Net` and `Ipv6Net`) instead of `IpNet` (18 for both). With
//! the interned kind `Arc`, a metric and a table beside every `IpNet` key, the map
//! was about 80 bytes per route at 100,000 routes, more than the RIB's whole entry;
//! now about 20 for IPv4 (docs/benchmarks.md).

use std::collections::{BTreeMap, HashMap};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::{Route, RouteKind};

/// A route without its prefix: what routes of one peer share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Class {
    pub(super) kind: RouteKind,
    pub(super) metric: u32,
    pub(super) table: u32,
}

impl Class {
    pub(super) fn of(r: Route) -> Class {
        Class {
            kind: r.kind,
            metric: r.metric,
            table: r.table,
        }
    }

    pub(super) fn is(&self, r: &Route) -> bool {
        self.kind == r.kind && self.metric == r.metric && self.table == r.table
    }

    pub(super) fn route(&self, prefix: IpNet) -> Route {
        Route {
            prefix,
            kind: self.kind.clone(),
            metric: self.metric,
            table: self.table,
        }
    }
}

/// The high bit of a [`Want`]: the kernel has exactly this route.
const IN_KERNEL: u32 = 1 << 31;

/// One wanted route without its prefix: its class number, and whether the kernel has
/// exactly this route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Want(u32);

impl Want {
    pub(super) fn new(class: u32, in_kernel: bool) -> Want {
        Want(class | if in_kernel { IN_KERNEL } else { 0 })
    }

    pub(super) fn class(self) -> u32 {
        self.0 & !IN_KERNEL
    }

    pub(super) fn in_kernel(self) -> bool {
        self.0 & IN_KERNEL != 0
    }

    pub(super) fn set_in_kernel(&mut self, yes: bool) {
        *self = Want::new(self.class(), yes);
    }
}

/// Every distinct [`Class`] a wanted route has, numbered, with how many routes use it.
#[derive(Debug, Default)]
pub(super) struct Classes {
    /// By number: the class and its routes (`None`: a free number).
    list: Vec<Option<(Class, usize)>>,
    numbers: HashMap<Class, u32>,
    free: Vec<u32>,
}

impl Classes {
    /// The class numbered `n` (every number a [`Want`] holds is taken).
    pub(super) fn get(&self, n: u32) -> Option<&Class> {
        self.list
            .get(n as usize)
            .and_then(|c| c.as_ref())
            .map(|(c, _)| c)
    }

    /// The number of `c`, counting one more route of it.
    pub(super) fn take(&mut self, c: Class) -> u32 {
        if let Some(&n) = self.numbers.get(&c) {
            if let Some(Some((_, uses))) = self.list.get_mut(n as usize) {
                *uses += 1;
            }
            return n;
        }
        let n = match self.free.pop() {
            Some(n) => n,
            None => {
                // Fewer classes than peers × next hops: 2^31 is never reached.
                let n = u32::try_from(self.list.len()).unwrap_or(IN_KERNEL - 1);
                self.list.push(None);
                n
            }
        };
        if let Some(slot) = self.list.get_mut(n as usize) {
            *slot = Some((c.clone(), 1));
        }
        self.numbers.insert(c, n);
        n
    }

    /// One route fewer of class `n`; the last one frees the number.
    pub(super) fn release(&mut self, n: u32) {
        let Some(slot) = self.list.get_mut(n as usize) else {
            return;
        };
        if let Some((c, uses)) = slot {
            *uses -= 1;
            if *uses == 0 {
                self.numbers.remove(c);
                *slot = None;
                self.free.push(n);
            }
        }
    }

    /// How many classes are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.numbers.len()
    }
}

/// A prefix as a map key compared as integers: `Ipv4Net`'s and `Ipv6Net`'s own order
/// compares the address bytes with `memcmp`, a call per comparison of a B-tree search
/// (the RIB's table found the same, `tern_bgp::rib`). Same order (address, then
/// length); packed, so no bigger than the prefix (5 and 17 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C, packed)]
struct Key<A: Copy> {
    addr: A,
    len: u8,
}

impl From<Ipv4Net> for Key<u32> {
    fn from(p: Ipv4Net) -> Self {
        Key {
            addr: u32::from(p.addr()),
            len: p.prefix_len(),
        }
    }
}

impl From<Ipv6Net> for Key<u128> {
    fn from(p: Ipv6Net) -> Self {
        Key {
            addr: u128::from(p.addr()),
            len: p.prefix_len(),
        }
    }
}

impl Key<u32> {
    /// The prefix back (every key was made from one, so the length is valid).
    fn net(self) -> IpNet {
        let (addr, len) = (self.addr, self.len);
        Ipv4Net::new(addr.into(), len).map_or_else(|_| IpNet::default(), IpNet::V4)
    }
}

impl Key<u128> {
    /// The prefix back (every key was made from one, so the length is valid).
    fn net(self) -> IpNet {
        let (addr, len) = (self.addr, self.len);
        Ipv6Net::new(addr.into(), len).map_or_else(|_| IpNet::default(), IpNet::V6)
    }
}

/// Small values by prefix, IPv4 before IPv6 (the order of `IpNet`): the wanted
/// routes ([`Wanted`]) and the class numbers of kernel routes other than the wanted
/// ones (`super::table::Table`'s second map).
#[derive(Debug)]
pub(super) struct ByPrefix<V> {
    v4: BTreeMap<Key<u32>, V>,
    v6: BTreeMap<Key<u128>, V>,
    /// Prefixes added or removed since the maps were last packed.
    unpacked: usize,
}

/// Wanted routes by prefix.
pub(super) type Wanted = ByPrefix<Want>;

impl<V> Default for ByPrefix<V> {
    fn default() -> Self {
        ByPrefix {
            v4: BTreeMap::new(),
            v6: BTreeMap::new(),
            unpacked: 0,
        }
    }
}

impl<V: Copy> ByPrefix<V> {
    pub(super) fn get(&self, p: &IpNet) -> Option<V> {
        match p {
            IpNet::V4(p) => self.v4.get(&Key::from(*p)).copied(),
            IpNet::V6(p) => self.v6.get(&Key::from(*p)).copied(),
        }
    }

    pub(super) fn get_mut(&mut self, p: &IpNet) -> Option<&mut V> {
        match p {
            IpNet::V4(p) => self.v4.get_mut(&Key::from(*p)),
            IpNet::V6(p) => self.v6.get_mut(&Key::from(*p)),
        }
    }

    /// Sets `p`'s value; returns the one it replaced.
    pub(super) fn insert(&mut self, p: IpNet, v: V) -> Option<V> {
        let old = match p {
            IpNet::V4(p) => self.v4.insert(Key::from(p), v),
            IpNet::V6(p) => self.v6.insert(Key::from(p), v),
        };
        self.unpacked += usize::from(old.is_none());
        old
    }

    pub(super) fn remove(&mut self, p: &IpNet) -> Option<V> {
        let old = match p {
            IpNet::V4(p) => self.v4.remove(&Key::from(*p)),
            IpNet::V6(p) => self.v6.remove(&Key::from(*p)),
        };
        self.unpacked += usize::from(old.is_some());
        old
    }

    pub(super) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// Rebuilds the maps with full nodes ([`tern_pack`]) once enough prefixes came or
    /// went: routes that arrive in prefix order leave each node about half full, 21
    /// bytes per IPv4 route at 100,000 against 11 packed. Enough: a quarter of the
    /// routes, so a table arriving in many pieces is packed a few times, not once per
    /// piece (each pack moves every route).
    pub(super) fn pack_if_due(&mut self) {
        if self.unpacked >= PACK_AFTER && self.unpacked * 4 >= self.len() {
            tern_pack::pack(&mut self.v4);
            tern_pack::pack(&mut self.v6);
            self.unpacked = 0;
        }
    }

    /// Every entry, in prefix order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (IpNet, V)> + '_ {
        let v4 = self.v4.iter().map(|(p, v)| (p.net(), *v));
        v4.chain(self.v6.iter().map(|(p, v)| (p.net(), *v)))
    }

    /// Every entry, in prefix order, to be changed.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (IpNet, &mut V)> + '_ {
        let v4 = self.v4.iter_mut().map(|(p, v)| (p.net(), v));
        v4.chain(self.v6.iter_mut().map(|(p, v)| (p.net(), v)))
    }

    /// Keeps the entries for which `keep` holds; `gone` sees each value dropped.
    pub(super) fn retain(
        &mut self,
        mut keep: impl FnMut(IpNet, V) -> bool,
        mut gone: impl FnMut(V),
    ) {
        let before = self.len();
        self.v4.retain(|p, v| {
            keep(p.net(), *v) || {
                gone(*v);
                false
            }
        });
        self.v6.retain(|p, v| {
            keep(p.net(), *v) || {
                gone(*v);
                false
            }
        });
        self.unpacked += before - self.len();
    }
}

/// Prefixes added or removed before packing is worth a walk of the maps.
const PACK_AFTER: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_want_keeps_its_class_and_its_kernel_bit_apart() {
        let mut w = Want::new(IN_KERNEL - 1, false);
        assert_eq!((w.class(), w.in_kernel()), (IN_KERNEL - 1, false));
        w.set_in_kernel(true);
        assert_eq!((w.class(), w.in_kernel()), (IN_KERNEL - 1, true));
        w.set_in_kernel(false);
        assert_eq!((w.class(), w.in_kernel()), (IN_KERNEL - 1, false));
    }

    #[test]
    fn a_class_number_is_reused_once_its_last_route_went() {
        let class = |metric| Class {
            kind: RouteKind::Blackhole,
            metric,
            table: 254,
        };
        let mut c = Classes::default();
        let a = c.take(class(1));
        assert_eq!(c.take(class(1)), a);
        let b = c.take(class(2));
        assert_ne!(a, b);
        c.release(a);
        assert_eq!(c.get(a), Some(&class(1)), "one route still has it");
        c.release(a);
        assert_eq!((c.get(a), c.len()), (None, 1));
        assert_eq!(c.take(class(3)), a, "the free number is taken again");
        assert_eq!(c.get(b), Some(&class(2)));
    }

    #[test]
    fn prefixes_come_in_the_order_of_ipnet() {
        let mut w = Wanted::default();
        let ps: Vec<IpNet> = [
            "2001:db8::/64",
            "198.18.0.0/26",
            "198.18.0.0/24",
            "2001:db8::/48",
        ]
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
        assert_eq!(ps.len(), 4);
        for p in &ps {
            w.insert(*p, Want::new(0, false));
        }
        let mut sorted = ps.clone();
        sorted.sort();
        assert_eq!(w.iter().map(|(p, _)| p).collect::<Vec<_>>(), sorted);
    }

    #[test]
    fn packing_keeps_every_route_and_waits_for_enough_changes() {
        let mut w = Wanted::default();
        let v6: IpNet = "2001:db8::/64".parse().unwrap_or_else(|e| panic!("{e}"));
        w.insert(v6, Want::new(1, true));
        for i in 0..PACK_AFTER as u32 - 2 {
            let p = Ipv4Net::new((0xc612_0000 + i).into(), 32);
            w.insert(
                IpNet::V4(p.unwrap_or_else(|e| panic!("{e}"))),
                Want::new(0, false),
            );
        }
        let before: Vec<(IpNet, Want)> = w.iter().collect();
        w.pack_if_due();
        assert_eq!(w.unpacked, PACK_AFTER - 1, "one change short: not packed");
        w.remove(&v6);
        w.insert(v6, Want::new(2, false));
        w.pack_if_due();
        assert_eq!(w.unpacked, 0);
        let after: Vec<(IpNet, Want)> = w.iter().collect();
        assert_eq!(after.len(), before.len());
        assert_eq!(after.last(), Some(&(v6, Want::new(2, false))));
        assert_eq!(after[..after.len() - 1], before[..before.len() - 1]);
        assert_eq!(w.get(&before[7].0), Some(Want::new(0, false)));
        // In a larger table the changes must also be a quarter of its routes.
        let v4 = |i: u32| IpNet::V4(Ipv4Net::new((0xc613_0000 + i).into(), 32).unwrap_or_default());
        for i in 0..16_384 {
            w.insert(v4(i), Want::new(0, false));
        }
        w.pack_if_due();
        assert_eq!(w.unpacked, 0, "16,384 new routes in 20,479");
        for i in 16_384..16_384 + PACK_AFTER as u32 {
            w.insert(v4(i), Want::new(0, false));
        }
        w.pack_if_due();
        assert_eq!(
            w.unpacked, PACK_AFTER,
            "4,096 changes in 24,575 routes: not yet"
        );
    }
}
