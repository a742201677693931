//! Sending, with flow control: Loc-RIB changes to every established peer that takes
//! commands (only their prefixes noted for one that does not), and what waits for a
//! session once it takes commands again. Several sessions' UPDATEs taken as one batch
//! ([`Speaker::handle_batch`]) send their changes once: a reflector with a thousand
//! clients otherwise writes a small UPDATE to every client for every UPDATE it gets.

use std::net::IpAddr;
use std::time::Instant;

use crate::rib::export::{self, ExportMemo};
use crate::rib::BestChange;
use crate::session::SessionEvent;

use super::{Input, Output, RibNews, Speaker, SpeakerEvent};

/// Changed prefixes a batch sends at most at once.
const BATCH_PREFIXES: usize = 4096;

impl Speaker {
    /// Takes `inputs` at `now` as [`Speaker::handle`] would one after the other, except
    /// that the Loc-RIB changes of consecutive UPDATEs (End-of-RIB markers excepted)
    /// are sent together, at the Loc-RIB's state after the last of them: each peer
    /// gets one batch of packed UPDATEs instead of one per UPDATE received (every
    /// [`BATCH_PREFIXES`] changed prefixes at the latest). Any other
    /// input sends what waits before it is handled, so no output moves across it.
    pub fn handle_batch(
        &mut self,
        now: Instant,
        inputs: impl IntoIterator<Item = Input>,
    ) -> Vec<Output> {
        let mut out = Vec::new();
        for input in inputs {
            let mergeable = matches!(
                &input,
                Input::Session(SessionEvent::Update { update, .. })
                    if update.end_of_rib_family().is_none()
            );
            if mergeable {
                self.batch.get_or_insert_with(Vec::new);
            } else {
                self.end_batch();
            }
            out.extend(self.handle(now, input));
        }
        self.end_batch();
        out.append(&mut self.out);
        out
    }

    /// Sends the changes a batch has collected.
    fn end_batch(&mut self) {
        let Some(mut prefixes) = self.batch.take() else {
            return;
        };
        prefixes.sort_unstable();
        prefixes.dedup();
        let changes = prefixes
            .into_iter()
            .map(|prefix| BestChange {
                now: self.rib.best(&prefix),
                prefix,
            })
            .collect();
        self.propagate(changes);
    }

    /// Sends Loc-RIB changes to every established peer that takes commands (noting
    /// only the prefixes for those that do not), and to whoever installs routes.
    pub(super) fn propagate(&mut self, changes: Vec<BestChange>) {
        if changes.is_empty() {
            return;
        }
        if let Some(batch) = self.batch.as_mut() {
            batch.extend(changes.iter().map(|c| c.prefix));
            // Bounded: a full table from one peer still reaches the FIB and the other
            // peers while it arrives, not only once the whole batch is in.
            if batch.len() >= BATCH_PREFIXES {
                self.end_batch();
                self.batch = Some(Vec::new());
            }
            return;
        }
        // Changes of only iBGP-learnt paths (a mesh peer's routes): a peer that takes
        // none and was sent none of these prefixes is skipped with one look-up, not
        // one per change (see `AdjRibOut::holds_any`).
        let ibgp_only = changes.iter().all(export::ibgp_learnt_only);
        let lo = changes.iter().map(|c| c.prefix).min();
        let hi = changes.iter().map(|c| c.prefix).max();
        let mut memo = ExportMemo::new(&mut self.exports);
        for (ip, p) in self.peers.iter_mut() {
            let Some(out) = p.out.as_ref() else {
                continue;
            };
            if p.stalled || !p.deferred.is_empty() {
                // Its peer is not reading (RFC 9687; the send hold timer ends it).
                // Waiting would stall every other peer and the FIB with it, so only
                // the prefixes are noted.
                p.deferred.extend(changes.iter().map(|c| c.prefix));
                continue;
            }
            if let (true, Some(lo), Some(hi)) = (ibgp_only, lo, hi) {
                if out.rib.refuses_ibgp() && !out.rib.holds_any(lo, hi) {
                    continue;
                }
            }
            let (msgs, texts) = p.export(&self.cfg, &self.origins, &changes, &mut memo);
            if !msgs.is_empty() {
                self.out.push(Output::Send(*ip, msgs));
            }
            for text in texts {
                let e = SpeakerEvent::Rejected(p.cfg.address, text);
                self.out.push(Output::Event(e));
            }
        }
        self.out.push(Output::Rib(RibNews::Changes(changes)));
    }

    /// Hands a session that takes commands the changes and refreshes waiting for it.
    pub(super) fn flush(&mut self, ip: IpAddr) {
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        if p.out.is_none() {
            p.deferred.clear();
            p.refreshes.clear();
            return;
        }
        if p.stalled {
            return;
        }
        if !p.deferred.is_empty() {
            let changes: Vec<BestChange> = std::mem::take(&mut p.deferred)
                .into_iter()
                .map(|prefix| BestChange {
                    prefix,
                    now: self.rib.best(&prefix),
                })
                .collect();
            let memo = &mut ExportMemo::new(&mut self.exports);
            let (msgs, texts) = p.export(&self.cfg, &self.origins, &changes, memo);
            if !msgs.is_empty() {
                self.out.push(Output::Send(ip, msgs));
            }
            for text in texts {
                let e = SpeakerEvent::Rejected(p.cfg.address, text);
                self.out.push(Output::Event(e));
            }
        }
        let Some(out) = p.out.as_ref() else {
            return;
        };
        // Refreshes after the deferred changes: they re-send what those set up.
        for family in std::mem::take(&mut p.refreshes) {
            if let Ok(msgs) = out.rib.refresh(family, &out.tx, out.enhanced) {
                p.updates_out += msgs.len() as u64;
                self.out.push(Output::Send(ip, msgs));
            }
        }
    }
}
