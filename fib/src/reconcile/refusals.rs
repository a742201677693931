//! The retry rule: what the kernel refused, per prefix, so it is tried again (an
//! interface or an address may have come back since) and reported by `tern fib` and
//! `tern diagnose`; and how a batch's report settles each change.

use std::collections::{BTreeMap, VecDeque};

use ipnet::IpNet;

use crate::{ApplyReport, FailureKind, RouteChange, RouteFailure};

/// Refused routes by prefix, the latest reason each.
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    by_prefix: BTreeMap<IpNet, RouteFailure>,
}

impl Refusals {
    /// Records a refusal; true when it is new or its reason changed (worth a log line:
    /// a route refused every retry for the same reason is logged once).
    pub fn record(&mut self, f: RouteFailure) -> bool {
        let news = self.by_prefix.get(&f.prefix).map(|old| &old.reason) != Some(&f.reason);
        self.by_prefix.insert(f.prefix, f);
        news
    }

    /// Forgets `prefix`'s refusal; true when there was one (the kernel took it now).
    pub fn clear(&mut self, prefix: &IpNet) -> bool {
        self.by_prefix.remove(prefix).is_some()
    }

    /// The prefixes to try again.
    pub fn due(&self) -> Vec<IpNet> {
        self.by_prefix.keys().copied().collect()
    }

    /// Whether nothing is refused.
    pub fn is_empty(&self) -> bool {
        self.by_prefix.is_empty()
    }

    /// The refusals, by prefix.
    pub fn iter(&self) -> impl Iterator<Item = &RouteFailure> {
        self.by_prefix.values()
    }
}

/// A batch's outcome, change by change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled<C = RouteChange> {
    /// Changes now true of the kernel.
    pub done: Vec<C>,
    /// Changes it refused.
    pub refused: Vec<RouteFailure>,
}

/// A change sent to the kernel, or what the sender kept of it (the FIB task keeps a
/// receipt, not a copy: the backend takes the changes).
pub trait Sent {
    /// The prefix it changes.
    fn prefix(&self) -> IpNet;
    /// Whether it deletes the route.
    fn is_delete(&self) -> bool;
}

impl Sent for RouteChange {
    fn prefix(&self) -> IpNet {
        RouteChange::prefix(self)
    }

    fn is_delete(&self) -> bool {
        matches!(self, RouteChange::Delete { .. })
    }
}

/// Splits the sent `changes` by the kernel's `report`. A delete the kernel answers
/// "not found" found nothing to delete: the route is gone already (replaced by another
/// protocol's, or removed), so it is done, not refused.
///
/// A batch can hold two changes of one prefix (a metric change is a delete, then an
/// add): a refusal is matched to the change of its own kind, in order. Matched by
/// prefix alone, the add's refusal was taken for the delete's and the add counted as
/// done: the route was missing from the kernel, the FIB believed it installed, and
/// neither a retry nor a `route-refused` finding followed.
pub fn settle<C: Sent>(changes: Vec<C>, report: ApplyReport) -> Settled<C> {
    let mut failed: BTreeMap<(IpNet, bool), VecDeque<RouteFailure>> = BTreeMap::new();
    for f in report.failed {
        let key = (f.prefix, f.change == "delete");
        failed.entry(key).or_default().push_back(f);
    }
    let mut out = Settled {
        done: Vec::with_capacity(changes.len()),
        refused: Vec::new(),
    };
    for c in changes {
        let refusal = failed
            .get_mut(&(c.prefix(), c.is_delete()))
            .and_then(VecDeque::pop_front);
        match refusal {
            Some(f) if c.is_delete() && f.kind == FailureKind::NotFound => out.done.push(c),
            Some(f) => out.refused.push(f),
            None => out.done.push(c),
        }
    }
    // Refusals that match no change (an answer that did not say for which route) are
    // still reported.
    out.refused.extend(failed.into_values().flatten());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Route, RouteKind};

    fn failure(p: &str, change: &'static str, kind: FailureKind, reason: &str) -> RouteFailure {
        RouteFailure {
            prefix: p.parse().unwrap_or_else(|e| panic!("{e}")),
            change,
            reason: reason.into(),
            kind,
        }
    }

    #[test]
    fn a_refusal_is_news_once_per_reason() {
        let mut r = Refusals::default();
        let f = failure(
            "198.18.1.0/26",
            "add",
            FailureKind::Unreachable,
            "unreachable",
        );
        assert!(r.record(f.clone()));
        assert!(!r.record(f.clone()));
        assert!(r.record(failure(
            "198.18.1.0/26",
            "add",
            FailureKind::Other,
            "no device"
        )));
        assert_eq!(r.due(), vec![f.prefix]);
        assert!(r.clear(&f.prefix));
        assert!(!r.clear(&f.prefix));
        assert!(r.is_empty());
    }

    #[test]
    fn a_delete_of_a_route_already_gone_is_done() {
        let gone: IpNet = "198.18.2.0/26".parse().unwrap_or_else(|e| panic!("{e}"));
        let add = RouteChange::Add(Route {
            prefix: "198.18.1.0/26".parse().unwrap_or_else(|e| panic!("{e}")),
            kind: RouteKind::Blackhole,
            metric: 0,
            table: 254,
        });
        let del = RouteChange::Delete {
            prefix: gone,
            table: 254,
        };
        let report = ApplyReport {
            applied: 0,
            failed: vec![
                failure("198.18.1.0/26", "add", FailureKind::Exists, "File exists"),
                failure(
                    "198.18.2.0/26",
                    "delete",
                    FailureKind::NotFound,
                    "No such process",
                ),
            ],
        };
        let s = settle(vec![add, del.clone()], report);
        assert_eq!(s.done, vec![del]);
        assert_eq!(s.refused.len(), 1);
    }

    /// A metric change sends a delete, then an add, of one prefix: the kernel took the
    /// delete and refused the add. The add is refused, the delete done.
    #[test]
    fn two_changes_of_one_prefix_are_settled_each_by_its_own_answer() {
        let p: IpNet = "198.18.102.0/24".parse().unwrap_or_else(|e| panic!("{e}"));
        let del = RouteChange::Delete {
            prefix: p,
            table: 254,
        };
        let add = RouteChange::Add(Route {
            prefix: p,
            kind: RouteKind::Blackhole,
            metric: 7,
            table: 254,
        });
        let report = ApplyReport {
            applied: 1,
            failed: vec![failure(
                "198.18.102.0/24",
                "add",
                FailureKind::Unreachable,
                "Network is unreachable",
            )],
        };
        let s = settle(vec![del.clone(), add], report);
        assert_eq!(s.done, vec![del]);
        assert_eq!(s.refused.len(), 1);
        assert_eq!(s.refused.first().map(|f| f.change), Some("add"));
    }
}
