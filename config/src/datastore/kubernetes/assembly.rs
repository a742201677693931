//! The snapshot assembly: per-kind object maps fed by watcher events, turned into one
//! consistent document set. Pure (no I/O, no clock), so its rules are unit-tested
//! without a server:
//!
//! - nothing is handed on until every kind has finished its first list;
//! - a kind being re-listed keeps its previous contents until the re-list is complete
//!   (`InitDone`), then they are swapped at once;
//! - while a kind's watch is failing, or an object is refused for its size, no snapshot
//!   is handed on (the one in force stays);
//! - Secrets are passed on only when a BGPPeer names them, EndpointSlices only when
//!   their Service is, and Services only when a traffic policy is `Local`.

use std::collections::{BTreeMap, BTreeSet};

use super::convert::{Item, Link};
use super::Kind;
use crate::datastore::Document;

/// One object as the watch task hands it on: converted, or refused unread.
pub type Entry = Result<Item, Refusal>;

/// An object not converted because its JSON is over the size limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `name` or `namespace/name`.
    pub key: String,
    /// The text reported: the object and the limit.
    pub text: String,
}

/// A failed list or watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The kind of cause (`unreachable`, `401`, `403`, …): an outage is reported again
    /// only when this changes, not for each resource that fails the same way.
    pub class: &'static str,
    /// What the operator reads.
    pub text: String,
}

/// What a watch task reports; mirrors `kube::runtime::watcher::Event` plus failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A (re-)list of the kind starts.
    Init(Kind),
    /// An object of the list in progress.
    InitApply(Kind, Entry),
    /// The list is complete: it replaces the kind's contents.
    InitDone(Kind),
    /// An object was added or changed.
    Apply(Kind, Entry),
    /// An object was deleted (its key).
    Delete(Kind, String),
    /// The kind's list or watch failed.
    Failed(Kind, Failure),
}

/// What an input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The state may now give a different snapshot: schedule one.
    Changed,
    /// Nothing to do.
    Unchanged,
    /// A failure to report (once per outage; the caller decides).
    Failed(Failure),
}

/// What [`Assembly::snapshot`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new snapshot to hand on.
    Snapshot {
        /// Every document.
        documents: Vec<Document>,
        /// A counter of snapshots handed on.
        revision: i64,
    },
    /// Nothing to hand on: not every kind is listed yet, a kind is failing, or the
    /// documents are those handed on last time.
    Nothing,
    /// An object is refused: the store is unavailable until it is fixed.
    Refused(String),
}

#[derive(Debug, Default)]
struct KindState {
    /// The contents in force.
    current: BTreeMap<String, Entry>,
    /// A list in progress; replaces `current` at its `InitDone`.
    pending: Option<BTreeMap<String, Entry>>,
    /// The first list has completed.
    listed: bool,
    /// The last list or watch failed and no event has arrived since.
    failing: bool,
}

/// Per-kind maps and the last snapshot handed on.
#[derive(Debug)]
pub struct Assembly {
    kinds: BTreeMap<Kind, KindState>,
    /// The documents of the last snapshot handed on.
    last: Option<Vec<Document>>,
    /// Snapshots handed on so far.
    revision: i64,
}

impl Default for Assembly {
    fn default() -> Self {
        Assembly::new()
    }
}

impl Assembly {
    /// An assembly waiting for the first list of every kind in [`Kind::ALL`].
    pub fn new() -> Assembly {
        Assembly {
            kinds: Kind::ALL
                .iter()
                .map(|k| (*k, KindState::default()))
                .collect(),
            last: None,
            revision: 0,
        }
    }

    /// Applies one input.
    pub fn apply(&mut self, input: Input) -> Step {
        let kind = match &input {
            Input::Init(k)
            | Input::InitApply(k, _)
            | Input::InitDone(k)
            | Input::Apply(k, _)
            | Input::Delete(k, _)
            | Input::Failed(k, _) => *k,
        };
        let state = self.kinds.entry(kind).or_default();
        if let Input::Failed(_, failure) = input {
            state.failing = true;
            return Step::Failed(failure);
        }
        // Any event but `Init` means the API server answers this kind again. (kube's
        // watcher emits `Init` before it sends the list request, so `Init` proves
        // nothing: a failing list repeats `Init`, error, `Init`, …)
        let recovered =
            !matches!(input, Input::Init(_)) && std::mem::replace(&mut state.failing, false);
        let changed = match input {
            Input::Init(_) => {
                state.pending = Some(BTreeMap::new());
                false
            }
            Input::InitApply(_, entry) => {
                // An InitApply without Init does not happen; start a list if it does,
                // so that the object is not lost.
                let pending = state.pending.get_or_insert_with(BTreeMap::new);
                pending.insert(entry_key(&entry), entry);
                false
            }
            Input::InitDone(_) => {
                let listed = state.pending.take().unwrap_or_default();
                let changed = !state.listed || listed != state.current;
                state.current = listed;
                state.listed = true;
                changed
            }
            Input::Apply(_, entry) => {
                let key = entry_key(&entry);
                state.current.get(&key) != Some(&entry) && {
                    state.current.insert(key, entry);
                    true
                }
            }
            Input::Delete(_, key) => state.current.remove(&key).is_some(),
            Input::Failed(..) => false,
        };
        if changed || recovered {
            Step::Changed
        } else {
            Step::Unchanged
        }
    }

    /// Whether every kind has been listed and none is failing.
    pub fn ready(&self) -> bool {
        self.kinds.values().all(|s| s.listed && !s.failing)
    }

    /// The snapshot to hand on now, if any. With `force`, a snapshot equal to the last
    /// one is handed on again (after an outage, so the daemon learns it is over).
    pub fn snapshot(&mut self, force: bool) -> Outcome {
        if !self.ready() {
            return Outcome::Nothing;
        }
        if let Some(refusal) = self
            .kinds
            .values()
            .flat_map(|s| s.current.values())
            .find_map(|e| e.as_ref().err())
        {
            return Outcome::Refused(refusal.text.clone());
        }
        let documents = self.documents();
        if !force && self.last.as_ref() == Some(&documents) {
            return Outcome::Nothing;
        }
        self.revision += 1;
        self.last = Some(documents.clone());
        Outcome::Snapshot {
            documents,
            revision: self.revision,
        }
    }

    /// Every document passed on, in kind order then key order.
    fn documents(&self) -> Vec<Document> {
        let items = |kind: Kind| {
            self.kinds
                .get(&kind)
                .into_iter()
                .flat_map(|s| s.current.values())
                .filter_map(|e| e.as_ref().ok())
        };
        let secrets: BTreeSet<&str> = items(Kind::BgpPeer)
            .flat_map(|i| match &i.link {
                Link::PeerSecrets(names) => names.as_slice(),
                _ => &[],
            })
            .map(String::as_str)
            .collect();
        let services: BTreeSet<&str> = items(Kind::Service)
            .filter(|i| matches!(i.link, Link::Service { local: true }))
            .map(|i| i.key.as_str())
            .collect();
        let mut out = Vec::new();
        for kind in Kind::ALL {
            for item in items(*kind) {
                let pass = match &item.link {
                    Link::None | Link::PeerSecrets(_) => true,
                    // Secrets are watched in one namespace, so the name identifies them.
                    Link::Secret => item
                        .key
                        .rsplit('/')
                        .next()
                        .is_some_and(|name| secrets.contains(name)),
                    Link::Service { local } => *local,
                    Link::Slice { service } => {
                        service.as_deref().is_some_and(|s| services.contains(s))
                    }
                };
                if pass {
                    out.push(item.document.clone());
                }
            }
        }
        out
    }
}

fn entry_key(entry: &Entry) -> String {
    match entry {
        Ok(item) => item.key.clone(),
        Err(refusal) => refusal.key.clone(),
    }
}
