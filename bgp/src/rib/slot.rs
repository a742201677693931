//! What the RIB holds for one prefix: its paths (the Adj-RIB-In of every peer for it)
//! and its Loc-RIB entry, in one value of one map.
//!
//! Most prefixes have a single path, whose Loc-RIB entry is that path alone: such a
//! prefix is stored as that path's `Arc` and nothing else (16 bytes in the map, no
//! allocation of its own, since the paths of one UPDATE share one `Arc<Path>`). Only a
//! prefix with several paths keeps a boxed list and its selected [`Best`]. This is
//! what brought tern's table from about 390 bytes per route (a `Vec` and an
//! `Arc<Path>` per prefix in the Adj-RIB-In map, a second map of `Best`s) to BIRD's
//! size; see docs/benchmarks.md.

use std::sync::Arc;

use super::decision::{compare, multipath_equal, Reason};
use super::{Best, Multipath, Path};

/// One prefix's paths and Loc-RIB entry.
#[derive(Debug)]
pub(super) enum Slot {
    /// One path, which is the best.
    One(Arc<Path>),
    /// Several paths and the best of them, as last selected.
    Many(Box<Many>),
    /// The last path went; only between a change and [`Slot::settle`], which removes
    /// the prefix (never seen outside the RIB).
    Empty,
}

/// Several paths to one prefix.
#[derive(Debug)]
pub(super) struct Many {
    paths: Vec<Arc<Path>>,
    best: Best,
}

impl Best {
    /// The entry of a prefix with the single path `p`.
    pub fn only(p: &Arc<Path>) -> Best {
        let mut multipath = Multipath::new();
        multipath.push(Arc::clone(p));
        Best {
            best: Arc::clone(p),
            multipath,
            reason: Reason::Equal,
        }
    }
}

/// Whether `p` is the path `peer` sent with ADD-PATH identifier `id`.
fn sent_by(p: &Path, peer: std::net::IpAddr, id: u32) -> bool {
    p.source.address == peer && p.path_id == id
}

impl Slot {
    /// Every path held.
    pub(super) fn paths(&self) -> &[Arc<Path>] {
        match self {
            Slot::One(p) => std::slice::from_ref(p),
            Slot::Many(m) => &m.paths,
            Slot::Empty => &[],
        }
    }

    /// The Loc-RIB entry (`None` only while [`Slot::Empty`]).
    pub(super) fn best(&self) -> Option<Best> {
        match self {
            Slot::One(p) => Some(Best::only(p)),
            Slot::Many(m) => Some(m.best.clone()),
            Slot::Empty => None,
        }
    }

    /// Adds `path`, replacing the one from the same peer with the same ADD-PATH
    /// identifier; returns whether one was replaced. [`Slot::settle`] must follow.
    pub(super) fn put(&mut self, path: Arc<Path>) -> bool {
        let (peer, id) = (path.source.address, path.path_id);
        match self {
            Slot::Empty => {
                *self = Slot::One(path);
                false
            }
            Slot::One(old) if sent_by(old, peer, id) => {
                *old = path;
                true
            }
            Slot::One(old) => {
                let best = Best::only(old);
                let paths = vec![Arc::clone(old), path];
                *self = Slot::Many(Box::new(Many { paths, best }));
                false
            }
            Slot::Many(m) => {
                let before = m.paths.len();
                m.paths.retain(|p| !sent_by(p, peer, id));
                m.paths.push(path);
                m.paths.len() == before
            }
        }
    }

    /// Removes the path `peer` sent with identifier `id`; returns whether there was
    /// one. [`Slot::settle`] must follow.
    pub(super) fn take(&mut self, peer: std::net::IpAddr, id: u32) -> bool {
        self.take_where(|p| sent_by(p, peer, id), |_| {}) > 0
    }

    /// Removes every path for which `gone` holds, telling `removed` of each; returns
    /// how many. [`Slot::settle`] must follow.
    pub(super) fn take_where(
        &mut self,
        gone: impl Fn(&Path) -> bool,
        mut removed: impl FnMut(&Path),
    ) -> usize {
        match self {
            Slot::One(p) if gone(p) => {
                removed(p);
                *self = Slot::Empty;
                1
            }
            Slot::Many(m) => {
                let before = m.paths.len();
                m.paths.retain(|p| {
                    let drop = gone(p);
                    if drop {
                        removed(p);
                    }
                    !drop
                });
                before - m.paths.len()
            }
            Slot::One(_) | Slot::Empty => 0,
        }
    }

    /// Replaces every path for which `f` gives a new one (graceful restart marking
    /// paths stale); returns how many. [`Slot::settle`] must follow.
    pub(super) fn replace(&mut self, mut f: impl FnMut(&Arc<Path>) -> Option<Arc<Path>>) -> usize {
        let paths: &mut [Arc<Path>] = match self {
            Slot::One(p) => std::slice::from_mut(p),
            Slot::Many(m) => &mut m.paths,
            Slot::Empty => &mut [],
        };
        let mut n = 0;
        for p in paths.iter_mut() {
            if let Some(new) = f(p) {
                *p = new;
                n += 1;
            }
        }
        n
    }

    /// Selects the best path after a change and returns the entry (`None`: no path
    /// left, the caller removes the prefix). A single path left is stored alone.
    pub(super) fn settle(&mut self, max_paths: usize) -> Option<Best> {
        let Slot::Many(m) = self else {
            return self.best();
        };
        match m.paths.as_slice() {
            [] => {
                *self = Slot::Empty;
                None
            }
            [only] => {
                *self = Slot::One(Arc::clone(only));
                self.best()
            }
            paths => {
                m.best = select(paths, max_paths)?;
                Some(m.best.clone())
            }
        }
    }
}

/// The best of two or more paths, the ones sharing traffic with it (up to
/// `max_paths`) and why it beat the runner-up.
fn select(paths: &[Arc<Path>], max_paths: usize) -> Option<Best> {
    let mut sorted: Vec<&Arc<Path>> = paths.iter().collect();
    sorted.sort_by(|a, b| compare(a, b).0);
    let best = Arc::clone(sorted.first()?);
    let reason = sorted
        .get(1)
        .map_or(Reason::Equal, |second| compare(&best, second).1);
    let multipath = sorted
        .iter()
        .filter(|p| multipath_equal(&best, p))
        .take(max_paths)
        .map(|p| Arc::clone(p))
        .collect();
    Some(Best {
        best,
        multipath,
        reason,
    })
}
