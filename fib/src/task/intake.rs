//! Route news into the FIB task: wanted routes taken in message by message, then one
//! kernel batch for every prefix they touched; the end of the restart grace; and when
//! the freed heap is given back.

use ipnet::IpNet;
use tokio::sync::{mpsc, watch};

use super::{Backend, RouteFilter, Routes, Task, TRIM_AFTER};

/// Changes since the last release after which one is made even while news still
/// queues (a table arriving for minutes).
const RELEASE_ANYWAY: usize = 10 * TRIM_AFTER;

impl<B: Backend> Task<B> {
    /// Route news: this message and those queued behind it in one kernel batch; the
    /// end of the grace after them, so routes the source re-learnt are adopted first.
    /// Each message is taken into the table as it comes, keeping only the prefixes it
    /// touched: the messages concatenated into one list first were 12.5 MB more at
    /// the peak of 100,000 routes.
    pub(super) async fn on_routes<F: RouteFilter>(
        &mut self,
        first: Routes,
        routes: &mut mpsc::Receiver<F::News>,
        filter: &mut F,
        grace: &watch::Sender<bool>,
    ) {
        let mut touched = Vec::new();
        let mut converged = self.note(first, &mut touched);
        while let Ok(n) = routes.try_recv() {
            converged |= self.note(filter.filter(n), &mut touched);
        }
        self.sync_touched(touched).await;
        if converged {
            self.end_grace(grace).await;
        }
        self.release_if_due(routes.is_empty());
    }

    /// Brings the kernel in line for the prefixes [`Self::note`] touched, each once.
    pub(super) async fn sync_touched(&mut self, mut touched: Vec<IpNet>) {
        touched.sort_unstable();
        touched.dedup();
        if !touched.is_empty() {
            self.sync(&touched).await;
        }
    }

    /// Takes wanted-route changes into the table (not yet to the kernel), noting the
    /// prefixes in `touched`; true when the news is [`Routes::Converged`].
    pub(super) fn note(&mut self, news: Routes, touched: &mut Vec<IpNet>) -> bool {
        let Routes::Want(changes) = news else {
            return true;
        };
        touched.reserve(changes.len());
        for (p, r) in changes {
            let before = self.share(&p);
            if r.is_some() {
                self.adopted.remove(&p);
            }
            self.table.set_want(p, r);
            self.counted(&p, before);
            touched.push(p);
        }
        false
    }

    /// The restart grace is over: tern's routes nobody wants go.
    pub(super) async fn end_grace(&mut self, grace: &watch::Sender<bool>) {
        if !self.grace {
            return;
        }
        self.grace = false;
        self.adopted.clear();
        grace.send_replace(false);
        let stale: Vec<IpNet> = self
            .table
            .kernel_prefixes()
            .filter(|p| !self.table.wants(p))
            .collect();
        if stale.is_empty() {
            tracing::debug!("routes complete: restart grace over");
        } else {
            tracing::info!(
                routes = stale.len(),
                "routes complete, restart grace over: removing tern routes no longer wanted"
            );
        }
        self.sync(&stale).await;
        self.left.remove(&mut self.backend).await;
    }

    /// Gives the freed heap back once [`TRIM_AFTER`] changes went to the kernel since
    /// the last time and no news waits (`idle`): a table arriving in many small
    /// batches leaves as much behind as one big batch, and the call walks the heap, so
    /// it waits for a pause. The table's maps are packed first (`Table::pack_if_due`),
    /// so the nodes they leave go back too.
    pub(super) fn release_if_due(&mut self, idle: bool) {
        if self.unreleased >= RELEASE_ANYWAY || (idle && self.unreleased >= TRIM_AFTER) {
            self.unreleased = 0;
            self.table.pack_if_due();
            (self.release_freed)();
        }
    }
}
