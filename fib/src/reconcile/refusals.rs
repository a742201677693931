//! The retry rule: what the kernel refused, per prefix, so it is tried again (an
//! interface or an address may have come back since) and reported by `tern fib` and
//! `tern diagnose`; and how a batch's report settles each change.

use std::collections::BTreeMap;

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
pub fn settle<C: Sent>(changes: Vec<C>, report: ApplyReport) -> Settled<C> {
    let mut failed: BTreeMap<IpNet, RouteFailure> =
        report.failed.into_iter().map(|f| (f.prefix, f)).collect();
    let mut out = Settled {
        done: Vec::with_capacity(changes.len()),
        refused: Vec::new(),
    };
    for c in changes {
        match failed.remove(&c.prefix()) {
            Some(f) if c.is_delete() && f.kind == FailureKind::NotFound => out.done.push(c),
            Some(f) => out.refused.push(f),
            None => out.done.push(c),
        }
    }
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
}
