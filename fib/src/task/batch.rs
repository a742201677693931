//! Kernel batches: the changes for some prefixes planned, sent and recorded.
//!
//! Many prefixes go in pieces of [`PLAN_PIECE`], pipelined: while one piece is in the
//! kernel, the previous piece's outcome is recorded and the next piece is planned, in
//! slices of [`POLL_EVERY`] between which the piece in flight is polled (this task
//! sends its datagrams). A whole table planned in one list before the first route
//! went out held every change at once: at a million routes that list and its
//! receipts made the daemon's peak 291 MB; in pieces it is 163 MB (`tern-lab bench
//! prefixes:1000000`), and the table reaches the kernel no later.
//!
//! Recording and planning may overlap a flight because they touch other prefixes: a
//! piece is planned from, and its outcome recorded into, the entries of its own
//! prefixes only. What they change lives in [`Books`], apart from the backend.

use std::collections::BTreeSet;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use ipnet::IpNet;

use super::counts::{share_in, Tally};
use super::table::{Receipt, Table};
use super::{ApplyDurations, Backend, Task};
use crate::reconcile::{self, settle, PrefixPlan, Refusals, Sent, Unwanted};
use crate::{ApplyReport, RouteChange, RouteFailure};

/// New refusals logged one by one per batch; the rest are counted in one line.
pub(super) const REFUSALS_LOGGED: usize = 10;

/// Prefixes planned and sent as one piece.
pub(super) const PLAN_PIECE: usize = 16_384;

/// Prefixes planned or recorded between two polls of the piece in flight: about
/// 0.1 ms, against the 3 ms of work the kernel has queued (8 datagrams of 128).
const POLL_EVERY: usize = 256;

/// A kernel batch on its way: what each change does, and since when.
pub(super) struct Sending {
    receipts: Vec<Receipt>,
    since: std::time::Instant,
}

/// What recording a batch's outcome changes: everything but the backend.
pub(super) struct Books<'a> {
    table: &'a mut Table,
    refusals: &'a mut Refusals,
    tally: &'a mut Tally,
    durations: &'a mut ApplyDurations,
    last_apply: &'a mut Duration,
    unreleased: &'a mut usize,
}

impl<B: Backend> Task<B> {
    /// The parts [`Books`] changes.
    fn books(&mut self) -> Books<'_> {
        self.parts().1
    }

    /// The task in the parts a flight borrows apart: the backend, the books, and what
    /// planning reads besides the table (the grace rule, the tunnel's index).
    fn parts(&mut self) -> (&mut B, Books<'_>, Unwanted<'_>, Option<u32>) {
        let books = Books {
            table: &mut self.table,
            refusals: &mut self.refusals,
            tally: &mut self.tally,
            durations: &mut self.durations,
            last_apply: &mut self.last_apply,
            unreleased: &mut self.unreleased,
        };
        let unwanted = unwanted(self.grace, &self.adopted);
        (&mut self.backend, books, unwanted, self.tunnel)
    }

    /// Brings the kernel in line with `wanted` for `prefixes` (sorted, each once), in
    /// pipelined pieces (see the module doc).
    pub(super) async fn sync(&mut self, prefixes: &[IpNet]) {
        self.find_tunnel(prefixes).await;
        let mut pieces = prefixes.chunks(PLAN_PIECE);
        let Some(first) = pieces.next() else {
            return;
        };
        let plan = self.plan(first);
        let mut changes = self.books().take(plan);
        let mut outcome: Option<(Sending, ApplyReport)> = None;
        loop {
            let sent = self.sending(&changes);
            let (report, next) = self.fly(changes, outcome.take(), pieces.next()).await;
            outcome = Some((sent, report));
            let Some(plan) = next else { break };
            changes = self.books().take(plan);
        }
        if let Some((sent, report)) = outcome {
            self.books().settle(sent, report);
        }
    }

    /// Sends `changes` and, until the kernel has them, records the previous piece's
    /// `outcome` and plans the `next` piece. Returns this piece's report and the plan.
    async fn fly(
        &mut self,
        changes: Vec<RouteChange>,
        outcome: Option<(Sending, ApplyReport)>,
        next: Option<&[IpNet]>,
    ) -> (ApplyReport, Option<PrefixPlan>) {
        let (backend, mut books, unwanted, tunnel) = self.parts();
        let apply = backend.apply(changes);
        tokio::pin!(apply);
        let mut report = None;
        // Polled only until it is done: a finished future must not be polled again.
        macro_rules! poll_flight {
            () => {
                if report.is_none() {
                    let once = std::future::poll_fn(|cx| Poll::Ready(apply.as_mut().poll(cx)));
                    if let Poll::Ready(r) = once.await {
                        report = Some(r);
                    }
                }
            };
        }
        if let Some((sent, r)) = outcome {
            let (done, refused, n) = books.open(sent, r);
            for (i, c) in done.into_iter().enumerate() {
                books.record(c);
                if i % POLL_EVERY == POLL_EVERY - 1 {
                    poll_flight!();
                }
            }
            books.close(refused, n);
            poll_flight!();
        }
        let plan = match next {
            Some(piece) => {
                let mut plan = PrefixPlan::default();
                for slice in piece.chunks(POLL_EVERY) {
                    let p = reconcile::plan(
                        slice,
                        |p| books.table.want(p),
                        |p| books.table.kernel(p),
                        unwanted,
                        tunnel,
                    );
                    plan.changes.extend(p.changes);
                    plan.refused.extend(p.refused);
                    plan.settled.extend(p.settled);
                    poll_flight!();
                }
                Some(plan)
            }
            None => None,
        };
        let report = match report {
            Some(r) => r,
            None => apply.await,
        };
        (report, plan)
    }

    /// The plan for `prefixes` (not yet taken, see [`Books::take`]).
    fn plan(&self, prefixes: &[IpNet]) -> PrefixPlan {
        let table = &self.table;
        reconcile::plan(
            prefixes,
            |p| table.want(p),
            |p| table.kernel(p),
            unwanted(self.grace, &self.adopted),
            self.tunnel,
        )
    }

    /// Sends `changes` to the kernel as one batch and records what it did.
    pub(super) async fn apply(&mut self, changes: Vec<RouteChange>) {
        if changes.is_empty() {
            return;
        }
        let sent = self.sending(&changes);
        let report = self.backend.apply(changes).await;
        self.books().settle(sent, report);
    }

    /// What each change about to be sent does, kept instead of a copy of the changes
    /// (the backend takes those): a whole table's changes copied was 20 MB more at the
    /// peak of 100,000 routes. A route sent as wanted is noted as such, without a copy.
    fn sending(&self, changes: &[RouteChange]) -> Sending {
        Sending {
            receipts: changes
                .iter()
                .map(|c| Receipt::of(c, &self.table))
                .collect(),
            since: std::time::Instant::now(),
        }
    }
}

/// Which unwanted routes the restart grace keeps: while it runs, those found at start.
fn unwanted(grace: bool, adopted: &BTreeSet<IpNet>) -> Unwanted<'_> {
    if grace {
        Unwanted::KeepOnly(adopted)
    } else {
        Unwanted::Delete
    }
}

impl Books<'_> {
    /// A plan's changes, once what needs none is settled and what tern cannot send is
    /// recorded as refused.
    fn take(&mut self, plan: PrefixPlan) -> Vec<RouteChange> {
        for p in &plan.settled {
            self.refusals.clear(p);
        }
        self.refused(plan.refused);
        plan.changes
    }

    /// Records what the kernel did with the changes `sent` describes.
    fn settle(&mut self, sent: Sending, report: ApplyReport) {
        let (done, refused, n) = self.open(sent, report);
        for c in done {
            self.record(c);
        }
        self.close(refused, n);
    }

    /// A batch's outcome: the changes done, those refused, how many were sent.
    fn open(
        &mut self,
        sent: Sending,
        report: ApplyReport,
    ) -> (Vec<Receipt>, Vec<RouteFailure>, usize) {
        let n = sent.receipts.len();
        *self.last_apply = sent.since.elapsed();
        self.durations.observe(*self.last_apply);
        tracing::debug!(
            changes = n,
            seconds = self.last_apply.as_secs_f64(),
            "kernel batch applied"
        );
        let settled = settle(sent.receipts, report);
        (settled.done, settled.refused, n)
    }

    /// One change the kernel made.
    fn record(&mut self, c: Receipt) {
        let p = Sent::prefix(&c);
        let before = share_in(self.table, &p);
        // A delete clears a refusal too (the route is no longer wanted), but only a
        // put is the kernel taking what it refused.
        if self.refusals.clear(&p) && !c.is_delete() {
            tracing::info!(prefix = %p, "the kernel accepted the route it refused before");
        }
        match c {
            Receipt::Put(p, None) => self.table.kernel_put_as_wanted(p),
            Receipt::Put(_, Some(r)) => self.table.kernel_put(*r),
            Receipt::Delete(p) => self.table.kernel_remove(&p),
        }
        self.tally.shift(before, share_in(self.table, &p));
    }

    /// After the done ones, what the kernel refused (a metric change's delete, done,
    /// must not clear the refusal of its add), and the count towards a release.
    fn close(&mut self, refused: Vec<RouteFailure>, n: usize) {
        self.refused(refused);
        *self.unreleased += n;
    }

    /// Records what the kernel refused in one batch, each refusal logged once (and
    /// again only if the reason changes). The first few new refusals are logged one
    /// by one, the rest in one line: a kernel refusing a whole table (a gateway off
    /// every link) must not cost a formatted log line per route.
    fn refused(&mut self, failures: Vec<RouteFailure>) {
        let mut logged = 0;
        let mut more = 0usize;
        for f in failures {
            let shown = (logged < REFUSALS_LOGGED).then(|| (f.prefix, f.change, f.reason.clone()));
            if self.refusals.record(f) {
                match shown {
                    Some((prefix, change, reason)) => {
                        logged += 1;
                        tracing::warn!(prefix = %prefix, "the kernel refused to {change} the route: {reason}");
                    }
                    None => more += 1,
                }
            }
        }
        if more > 0 {
            tracing::warn!(
                "the kernel refused {more} more routes in this batch (`tern fib` lists them)"
            );
        }
    }
}
