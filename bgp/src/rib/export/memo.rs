//! One export per distinct path and kind of peer, shared by every peer a batch of
//! Loc-RIB changes goes to. [`export`] copies a path's attributes: done per prefix and
//! per peer, a reflector with a thousand clients made a thousand equal copies of each
//! path (1.3 GB for 11,000 prefixes) and hashed every copy again, per prefix, to pack
//! UPDATEs. Here a path is exported once per peer class — the export policy without
//! the peer's address, and for an iBGP peer without the session's local address,
//! neither of which [`export`] reads beyond its first check — and equal exports of
//! different paths are one `Arc` ([`Exports`], kept by the speaker across batches,
//! so a peer served later, alone, shares them too), and packing compares pointers.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::sent::Numbering;
use super::{export, ExportPolicy, Exported};
use crate::rib::{BestChange, Interner, Key, Path};

/// An `Arc` hashed and compared by address. Holding it keeps the allocation, so the
/// address cannot be reused by another path while the memo lives.
#[derive(Debug)]
struct ByAddress<T>(Arc<T>);

impl<T> PartialEq for ByAddress<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T> Eq for ByAddress<T> {}

impl<T> Hash for ByAddress<T> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.0), h);
    }
}

/// Every distinct export some peer holds, once. An entry nobody else holds is dropped
/// when the set has doubled since the last sweep, so it costs O(1) per insert.
#[derive(Debug, Default)]
pub struct Exports {
    set: Interner<Exported>,
    swept_at: usize,
    /// The numbers of the prefixes peers hold (see `sent`).
    numbers: Numbering,
}

impl Exports {
    /// The shared copy of `e`.
    fn intern(&mut self, e: Exported) -> Arc<Exported> {
        if self.set.len() >= 2 * self.swept_at.max(512) {
            self.set.collect_garbage();
            self.swept_at = self.set.len();
        }
        self.set.intern(e)
    }

    /// The numbers of the prefixes peers were sent.
    pub fn numbers(&self) -> &Numbering {
        &self.numbers
    }

    /// Frees the numbers no peer holds, given the marks of every peer that holds
    /// some ([`Numbering::marks`]).
    pub fn sweep_numbers(&mut self, held: &[bool]) {
        self.numbers.sweep(held);
    }

    /// Distinct exports held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

/// Exports made for one batch of changes (see the module doc). Short-lived: made per
/// batch, so it holds paths for no longer than the batch.
#[derive(Debug)]
pub struct ExportMemo<'a> {
    classes: Vec<ExportPolicy>,
    by_path: HashMap<(ByAddress<Path>, usize), Option<Arc<Exported>>>,
    /// The last answer: the prefixes of one UPDATE come in a row and share a path.
    last: Option<(Arc<Path>, usize, Option<Arc<Exported>>)>,
    /// The prefixes of the changes last given to [`ExportMemo::resolve`] and their
    /// numbers: every peer of a batch is given the same changes, so they are looked
    /// up once.
    keys: Vec<Key>,
    ids: Vec<Option<u32>>,
    /// Those numbers sorted, made when first asked for ([`Self::changed`]).
    sorted: Option<Vec<u32>>,
    exports: &'a mut Exports,
}

impl ExportMemo<'_> {
    /// An empty memo, interning into `exports`.
    pub fn new(exports: &mut Exports) -> ExportMemo<'_> {
        ExportMemo {
            classes: Vec::new(),
            by_path: HashMap::new(),
            last: None,
            keys: Vec::new(),
            ids: Vec::new(),
            sorted: None,
            exports,
        }
    }

    /// Looks up the numbers of the prefixes of `changes`, for [`Self::id`]: once for
    /// all the peers given the same changes (compared by prefix, not by address).
    pub(crate) fn resolve(&mut self, changes: &[BestChange]) {
        let same = self.keys.len() == changes.len()
            && self
                .keys
                .iter()
                .zip(changes)
                .all(|(k, c)| *k == Key::from(c.prefix));
        if !same {
            self.keys = changes.iter().map(|c| Key::from(c.prefix)).collect();
            let n = &self.exports.numbers;
            self.ids = self.keys.iter().map(|k| n.get(k)).collect();
            self.sorted = None;
        }
    }

    /// Whether the prefix numbered `id` is among the changes given to
    /// [`Self::resolve`]: for a peer holding fewer prefixes than there are changes.
    pub(crate) fn changed(&mut self, id: u32) -> bool {
        let ids = &self.ids;
        let sorted = self.sorted.get_or_insert_with(|| {
            let mut v: Vec<u32> = ids.iter().flatten().copied().collect();
            v.sort_unstable();
            v
        });
        sorted.binary_search(&id).is_ok()
    }

    /// The number of the prefix of the `i`th change given to [`Self::resolve`].
    pub(crate) fn id(&self, i: usize) -> Option<u32> {
        self.ids.get(i).copied().flatten()
    }

    /// [`Self::id`], given a number if it has none (it is about to be sent).
    pub(crate) fn assign(&mut self, i: usize, key: Key) -> u32 {
        if let Some(id) = self.id(i) {
            return id;
        }
        let id = self.exports.numbers.assign(key);
        if let Some(slot) = self.ids.get_mut(i) {
            *slot = Some(id);
        }
        self.sorted = None;
        id
    }

    /// The class of peers whose exports equal those for `policy`.
    pub fn class(&mut self, policy: &ExportPolicy) -> usize {
        let norm = ExportPolicy {
            peer: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            session_local: policy.session_local.filter(|_| policy.ebgp),
            ..policy.clone()
        };
        match self.classes.iter().position(|c| *c == norm) {
            Some(i) => i,
            None => {
                self.classes.push(norm);
                self.classes.len() - 1
            }
        }
    }

    /// [`export`] of `path` for the peer of `policy`, of class `class`: from the memo
    /// when a peer of the class has had the path.
    pub fn export(
        &mut self,
        path: &Arc<Path>,
        policy: &ExportPolicy,
        class: usize,
    ) -> Option<Arc<Exported>> {
        // The one rule that depends on the peer's address: never back to its source.
        if !path.source.local && path.source.address == policy.peer {
            return None;
        }
        if let Some((p, c, e)) = &self.last {
            if *c == class && Arc::ptr_eq(p, path) {
                return e.clone();
            }
        }
        let key = (ByAddress(Arc::clone(path)), class);
        let e = match self.by_path.get(&key) {
            Some(e) => e.clone(),
            None => {
                let e = export(path, policy).map(|e| self.exports.intern(e));
                self.by_path.insert(key, e.clone());
                e
            }
        };
        self.last = Some((Arc::clone(path), class, e.clone()));
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rib::PeerSource;
    use crate::wire::PathAttributes;

    fn path(from: [u8; 4], med: u32) -> Arc<Path> {
        let a = Ipv4Addr::from(from);
        Arc::new(Path {
            source: Arc::new(PeerSource {
                address: IpAddr::V4(a),
                router_id: a,
                asn: 64512,
                ebgp: false,
                rr_client: true,
                local: false,
            }),
            attrs: Arc::new(PathAttributes {
                med: Some(med),
                ..PathAttributes::default()
            }),
            next_hop: IpAddr::V4(a),
            path_id: 0,
            igp_cost: None,
            stale: false,
        })
    }

    fn client(peer: [u8; 4], local: [u8; 4]) -> ExportPolicy {
        ExportPolicy {
            peer: IpAddr::V4(Ipv4Addr::from(peer)),
            ebgp: false,
            local_as: 64512,
            router_id: Ipv4Addr::new(198, 51, 100, 99),
            cluster_id: Some(Ipv4Addr::new(198, 51, 100, 99)),
            peer_is_client: true,
            next_hop_self: false,
            next_hop_keep: false,
            local_v4: Some(Ipv4Addr::new(198, 51, 100, 99)),
            local_v6: None,
            session_local: Some(IpAddr::V4(Ipv4Addr::from(local))),
            graceful_shutdown: false,
        }
    }

    #[test]
    fn clients_share_one_export_per_path_and_never_get_their_own() {
        let mut exports = Exports::default();
        let mut m = ExportMemo::new(&mut exports);
        let (a, b) = (
            client([198, 51, 100, 1], [203, 0, 113, 1]),
            client([198, 51, 100, 2], [203, 0, 113, 2]),
        );
        let (ca, cb) = (m.class(&a), m.class(&b));
        assert_eq!(
            ca, cb,
            "iBGP clients differing in address only are one class"
        );
        let p = path([198, 51, 100, 1], 5);
        assert_eq!(m.export(&p, &a, ca), None, "not back to its source");
        let to_b = m.export(&p, &b, cb).unwrap();
        assert_eq!(*to_b, export(&p, &b).unwrap(), "the memo changes no export");
        let c = client([198, 51, 100, 3], [203, 0, 113, 3]);
        let cc = m.class(&c);
        let again = m.export(&p, &c, cc).unwrap();
        assert!(Arc::ptr_eq(&to_b, &again));
        // Another path with equal attributes from the same source: the same export.
        let twin = path([198, 51, 100, 1], 5);
        assert!(Arc::ptr_eq(&m.export(&twin, &b, cb).unwrap(), &to_b));
        // A different policy is a different class with its own exports.
        let nhs = ExportPolicy {
            next_hop_self: true,
            ..b.clone()
        };
        let cn = m.class(&nhs);
        assert_ne!(cn, cb);
        assert_eq!(*m.export(&p, &nhs, cn).unwrap(), export(&p, &nhs).unwrap());
        // eBGP peers keep the session's address in the class (it is their next hop).
        let mut e1 = b.clone();
        e1.ebgp = true;
        let mut e2 = e1.clone();
        e2.session_local = Some(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)));
        assert_ne!(m.class(&e1), m.class(&e2));
        drop(m);
        // Later batches share the exports peers still hold.
        let mut m = ExportMemo::new(&mut exports);
        let class = m.class(&b);
        assert!(Arc::ptr_eq(&m.export(&p, &b, class).unwrap(), &to_b));
    }

    #[test]
    fn exports_nobody_holds_are_swept() {
        let mut exports = Exports::default();
        let kept: Vec<Arc<Exported>> = (0..600u32)
            .map(|i| {
                let e = export(
                    &path([198, 51, 100, 1], i),
                    &client([198, 51, 100, 2], [203, 0, 113, 2]),
                );
                exports.intern(e.unwrap())
            })
            .filter(|e| e.attrs.med.is_some_and(|m| m % 2 == 0))
            .collect();
        assert_eq!(exports.len(), 600);
        for i in 600..1100u32 {
            let e = export(
                &path([198, 51, 100, 1], i),
                &client([198, 51, 100, 2], [203, 0, 113, 2]),
            );
            drop(exports.intern(e.unwrap()));
        }
        // Swept once, at 1,024: the 300 held survive, the rest since then wait.
        assert!(exports.len() < 1100, "{}", exports.len());
        assert!(kept.iter().all(|k| Arc::strong_count(k) == 2));
    }
}
