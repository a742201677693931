//! Counts for the metrics endpoint, kept as routes come and go so that a scrape costs
//! the same with a million routes as with none: routes by state (as the task last knew
//! the kernel; `tern fib` re-reads it) and how long kernel batches took.

use std::time::Duration;

use ipnet::IpNet;

use super::table::Table;
use super::{Backend, Task};
use crate::reconcile::same;
use crate::Route;

/// Upper bounds (seconds) of the kernel batch duration histogram: a single route takes
/// about a millisecond, a million routes several seconds.
pub const APPLY_BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0];

/// The FIB's counts, for the metrics endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FibCounts {
    /// Wanted routes the kernel has as wanted.
    pub installed: usize,
    /// Wanted routes the kernel does not have (or has differently).
    pub missing: usize,
    /// tern's routes in the kernel that are not wanted.
    pub unexpected: usize,
    /// Changes the kernel (IP Helper on Windows) refused.
    pub refused_by_system: usize,
    /// Changes tern refused itself.
    pub refused_by_tern: usize,
    /// Durations of the kernel batches.
    pub apply: ApplyDurations,
    /// Seconds the last kernel batch took.
    pub last_apply_seconds: f64,
    /// The FIB is off (`fib: { enabled: false }`).
    pub disabled: bool,
}

/// A histogram of kernel batch durations.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyDurations {
    /// Batches per bucket (not cumulative): one per [`APPLY_BUCKETS`] bound, then the
    /// ones above the last bound.
    pub buckets: [u64; APPLY_BUCKETS.len() + 1],
    /// Seconds of all batches.
    pub sum: f64,
    /// Batches.
    pub count: u64,
}

impl Default for ApplyDurations {
    fn default() -> Self {
        ApplyDurations {
            buckets: [0; APPLY_BUCKETS.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }
}

impl ApplyDurations {
    /// Records one batch.
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = APPLY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(APPLY_BUCKETS.len());
        if let Some(b) = self.buckets.get_mut(i) {
            *b += 1;
        }
        self.sum += s;
        self.count += 1;
    }

    /// `(upper bound, batches)` pairs, the last bound infinite, as Prometheus
    /// encoders take them.
    pub fn pairs(&self) -> Vec<(f64, u64)> {
        APPLY_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.buckets.iter().copied())
            .collect()
    }
}

/// Routes by state, kept in step with the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    installed: usize,
    missing: usize,
    unexpected: usize,
}

/// One prefix's share of the [`Tally`]: installed, missing, unexpected (0 or 1 each).
pub(crate) type Share = [usize; 3];

fn share(wanted: Option<&Route>, kernel: Option<&Route>) -> Share {
    match (wanted, kernel) {
        (Some(w), Some(k)) if same(w, k) => [1, 0, 0],
        (Some(_), _) => [0, 1, 0],
        (None, Some(_)) => [0, 0, 1],
        (None, None) => [0, 0, 0],
    }
}

/// `p`'s share of the tally in `table` as things are now.
pub(super) fn share_in(table: &Table, p: &IpNet) -> Share {
    if let Some(s) = table.quick_share(p) {
        return s;
    }
    share(table.want(p).as_ref(), table.kernel(p).as_ref())
}

impl Tally {
    /// Replaces a prefix's old share by its new one.
    pub(super) fn shift(&mut self, old: Share, new: Share) {
        let [i, m, u] = old;
        self.installed = self.installed.saturating_sub(i);
        self.missing = self.missing.saturating_sub(m);
        self.unexpected = self.unexpected.saturating_sub(u);
        let [i, m, u] = new;
        self.installed += i;
        self.missing += m;
        self.unexpected += u;
    }
}

impl<B: Backend> Task<B> {
    /// `p`'s share of the tally as things are now; take it before a change to `p` and
    /// pass it to [`Self::counted`] after.
    pub(super) fn share(&self, p: &IpNet) -> Share {
        share_in(&self.table, p)
    }

    /// Accounts for a change to `p` whose share was `before`.
    pub(super) fn counted(&mut self, p: &IpNet, before: Share) {
        let now = self.share(p);
        self.tally.shift(before, now);
    }

    /// Counts every route afresh (at start, and after a re-read of the kernel, which
    /// walks the whole table anyway).
    pub(super) fn recount(&mut self) {
        let mut t = Tally::default();
        for w in self.table.wanted() {
            t.shift(
                [0; 3],
                share(Some(&w), self.table.kernel(&w.prefix).as_ref()),
            );
        }
        for k in self.table.kernel_routes() {
            if !self.table.wants(&k.prefix) {
                t.shift([0; 3], share(None, Some(&k)));
            }
        }
        self.tally = t;
    }

    /// The counts, without walking the table.
    pub(super) fn counts(&self) -> FibCounts {
        let by_tern = self.refusals.iter().filter(|f| f.by_tern()).count();
        FibCounts {
            installed: self.tally.installed,
            missing: self.tally.missing,
            unexpected: self.tally.unexpected,
            refused_by_system: self.refusals.iter().count().saturating_sub(by_tern),
            refused_by_tern: by_tern,
            apply: self.durations.clone(),
            last_apply_seconds: self.last_apply.as_secs_f64(),
            disabled: false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use std::sync::Arc;

    use tokio::sync::{mpsc, oneshot, watch};

    use super::super::{run, FibMsg, FibReply, Inputs, KernelNews, RouteFilter, Routes};
    use super::*;
    use crate::memory::MemoryFib;
    use crate::{RouteChange, RouteKind};

    struct Identity;

    impl RouteFilter for Identity {
        type News = Routes;
        fn filter(&mut self, news: Routes) -> Routes {
            news
        }
    }

    fn blackhole(p: &str) -> Route {
        Route {
            prefix: p.parse().unwrap(),
            kind: RouteKind::Blackhole,
            metric: 0,
            table: 254,
        }
    }

    /// The counts and `tern fib`'s lists, asked one after the other.
    async fn both(commands: &mpsc::Sender<FibMsg>) -> (FibCounts, FibReply) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (tx, rx) = oneshot::channel();
        commands.send(FibMsg::Counts(tx)).await.unwrap();
        let counts = rx.await.unwrap();
        let (tx, rx) = oneshot::channel();
        commands.send(FibMsg::Report(tx)).await.unwrap();
        (counts, rx.await.unwrap())
    }

    fn agree(c: &FibCounts, r: &FibReply) -> [usize; 3] {
        let listed = [r.installed.len(), r.missing.len(), r.unexpected.len()];
        assert_eq!(
            [c.installed, c.missing, c.unexpected],
            listed,
            "{c:?} {r:?}"
        );
        listed
    }

    /// The counts kept as routes come and go agree with `tern fib`'s lists, which are
    /// worked out afresh from the kernel: through adoption at start, a new route, the
    /// end of the grace and a withdrawal.
    #[tokio::test(start_paused = true)]
    async fn the_counts_agree_with_the_report_as_routes_come_and_go() {
        let mut kernel = MemoryFib::default();
        let (a, b, c) = (
            blackhole("198.51.100.0/26"),
            blackhole("198.51.100.64/26"),
            blackhole("203.0.113.0/26"),
        );
        kernel.apply_now(vec![
            RouteChange::Add(a.clone()),
            RouteChange::Add(b.clone()),
        ]);
        let (commands, crx) = mpsc::channel(8);
        let (routes, rrx) = mpsc::channel(8);
        let (gtx, _grace) = watch::channel(true);
        tokio::spawn(run(
            kernel,
            Inputs {
                commands: crx,
                routes: rrx,
                filter: Identity,
                kernel: Arc::new(KernelNews::default()),
                grace: gtx,
                predecessor: None,
                release_freed: || {},
            },
        ));
        let (counts, report) = both(&commands).await;
        assert_eq!(agree(&counts, &report), [0, 0, 2]);
        let want = vec![(a.prefix, Some(a.clone())), (c.prefix, Some(c.clone()))];
        routes.send(Routes::Want(want)).await.unwrap();
        let (counts, report) = both(&commands).await;
        assert_eq!(agree(&counts, &report), [2, 0, 1]);
        // Only C needed the kernel: one batch.
        assert_eq!(counts.apply.count, 1);
        routes.send(Routes::Converged).await.unwrap();
        let (counts, report) = both(&commands).await;
        assert_eq!(agree(&counts, &report), [2, 0, 0]);
        routes
            .send(Routes::Want(vec![(a.prefix, None)]))
            .await
            .unwrap();
        let (counts, report) = both(&commands).await;
        assert_eq!(agree(&counts, &report), [1, 0, 0]);
        assert_eq!(counts.apply.count, 3);
    }

    #[test]
    fn batches_fall_in_the_first_bucket_that_holds_them() {
        let mut d = ApplyDurations::default();
        d.observe(Duration::from_micros(500));
        d.observe(Duration::from_millis(1));
        d.observe(Duration::from_millis(70));
        d.observe(Duration::from_secs(60));
        assert_eq!(d.count, 4);
        let pairs = d.pairs();
        assert_eq!(pairs.len(), APPLY_BUCKETS.len() + 1);
        assert_eq!(pairs[0], (0.001, 2));
        assert_eq!(pairs[4], (0.1, 1));
        assert_eq!(pairs[10], (f64::INFINITY, 1));
        assert!((d.sum - 60.0715).abs() < 1e-9, "{}", d.sum);
    }
}
