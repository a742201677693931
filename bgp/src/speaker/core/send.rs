//! Sending, with flow control: Loc-RIB changes to every established peer that takes
//! commands (only their prefixes noted for one that does not), and what waits for a
//! session once it takes commands again.

use std::net::IpAddr;

use crate::rib::{export, BestChange};

use super::{Output, RibNews, Speaker, SpeakerEvent};

impl Speaker {
    /// Sends Loc-RIB changes to every established peer that takes commands (noting
    /// only the prefixes for those that do not), and to whoever installs routes.
    pub(super) fn propagate(&mut self, changes: Vec<BestChange>) {
        if changes.is_empty() {
            return;
        }
        // Changes of only iBGP-learnt paths (a mesh peer's routes): a peer that takes
        // none and was sent none of these prefixes is skipped with one look-up, not
        // one per change (see `AdjRibOut::holds_any`).
        let ibgp_only = changes.iter().all(export::ibgp_learnt_only);
        let lo = changes.iter().map(|c| c.prefix).min();
        let hi = changes.iter().map(|c| c.prefix).max();
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
            let (msgs, texts) = p.export(&self.cfg, &self.origins, &changes);
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
            let (msgs, texts) = p.export(&self.cfg, &self.origins, &changes);
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
