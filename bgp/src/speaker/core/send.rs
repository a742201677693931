//! Sending, with flow control: Loc-RIB changes to every established peer that takes
//! commands (only their prefixes noted for one that does not), and what waits for a
//! session once it takes commands again. Several sessions' UPDATEs taken as one batch
//! ([`Speaker::handle_batch`]) send their changes once: a reflector with a thousand
//! clients otherwise writes a small UPDATE to every client for every UPDATE it gets.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use std::time::Instant;

use crate::rib::export::{self, ExportMemo};
use crate::rib::{BestChange, Key};
use crate::session::SessionEvent;
use crate::wire::{Message, Update};

use super::{Input, Output, RibNews, Speaker, SpeakerEvent};
use crate::speaker::deferred::Waiting;

/// Changed prefixes a batch sends at most at once.
const BATCH_PREFIXES: usize = 4096;

/// Changed prefixes times the peers that take them, that a batch sends at most at
/// once. A batch's UPDATEs are all encoded before the driver writes any: a reflector
/// whose thousand clients withdrew 4,096 prefixes held 70 MB of them, most for
/// clients that could not take them yet (those now note prefix numbers instead).
const BATCH_PAIRS: usize = 1 << 18;

/// Encoded UPDATE bytes one [`Speaker::handle_batch`] returns, about (it stops after
/// the input that passed it). Other inputs between UPDATEs (sessions coming up) each
/// send what was collected, so the cut above alone did not bound a call: a thousand
/// clients coming up while others announced made one call of 370,000 UPDATEs.
const BATCH_BYTES: usize = 4 << 20;

/// The fewest changed prefixes a batch is cut at, however many peers.
const BATCH_PREFIXES_MIN: usize = 64;

/// Prefixes of a peer's initial table, or of what waited for it, encoded at once
/// ([`Speaker::feed`], [`Speaker::flush`]).
const FEED_PIECE: usize = 1024;

impl Speaker {
    /// Takes inputs from the front of `inputs` at `now` as [`Speaker::handle`] would
    /// one after the other, except that the Loc-RIB changes of consecutive UPDATEs
    /// (End-of-RIB markers excepted) are sent together, at the Loc-RIB's state after
    /// the last of them: each peer gets one batch of packed UPDATEs instead of one per
    /// UPDATE received. Any other input sends what waits before it is handled, so no
    /// output moves across it.
    ///
    /// Returns once the changes collected reach a batch's size (at most
    /// [`BATCH_PREFIXES`], fewer the more peers take them, see [`BATCH_PAIRS`]), or
    /// the UPDATEs built [`BATCH_BYTES`], leaving the rest in `inputs`: the caller
    /// carries out the outputs (so sessions that cannot take more say so) and calls
    /// again.
    pub fn handle_batch(&mut self, now: Instant, inputs: &mut VecDeque<Input>) -> Vec<Output> {
        let taking = self.peers.values().filter(|p| p.out.is_some()).count();
        self.batch_limit = (BATCH_PAIRS / taking.max(1)).clamp(BATCH_PREFIXES_MIN, BATCH_PREFIXES);
        self.batch_sent = false;
        let mut out = Vec::new();
        let mut encoded = 0;
        while let Some(input) = inputs.pop_front() {
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
            let o = self.handle(now, input);
            encoded += o.iter().map(Output::encoded_len).sum::<usize>();
            out.extend(o);
            if self.batch_sent || encoded >= BATCH_BYTES {
                break;
            }
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
            if batch.len() >= self.batch_limit {
                self.end_batch();
                self.batch = Some(Vec::new());
                self.batch_sent = true;
            }
            return;
        }
        // Changes of only iBGP-learnt paths (a mesh peer's routes): a peer that takes
        // none and was sent none of these prefixes is skipped before its export (see
        // `AdjRibOut::holds_any`).
        let ibgp_only = changes.iter().all(export::ibgp_learnt_only);
        let mut memo = ExportMemo::new(&mut self.exports);
        for (ip, p) in self.peers.iter_mut() {
            let Some(out) = p.out.as_ref() else {
                continue;
            };
            if p.stalled || !p.deferred.is_empty() || p.feed.is_some() {
                // Its peer is not reading (RFC 9687; the send hold timer ends it), or
                // is still being sent its initial table. Waiting would stall every
                // other peer and the FIB with it, so only the prefixes are noted.
                memo.resolve(&changes);
                let ids = changes.iter().enumerate();
                p.deferred
                    .note(ids.map(|(i, c)| memo.assign(i, Key::from(c.prefix))));
                continue;
            }
            if ibgp_only && out.rib.refuses_ibgp() && !out.rib.holds_any(&changes, &mut memo) {
                continue;
            }
            let exported = p.export(&self.cfg, &self.origins, &changes, &mut memo);
            emit(&mut self.out, *ip, p.cfg.address, exported);
        }
        self.out.push(Output::Rib(RibNews::Changes(changes)));
        self.sweep_numbers();
    }

    /// Frees the prefix numbers no peer holds any more, once the numbering has
    /// doubled since the last time (see `rib::export::sent`).
    fn sweep_numbers(&mut self) {
        if !self.exports.numbers().wants_sweep() {
            return;
        }
        let mut held = self.exports.numbers().marks();
        for p in self.peers.values() {
            if let Some(out) = p.out.as_ref() {
                out.rib.mark(&mut held);
            }
            p.deferred.mark(&mut held);
        }
        self.exports.sweep_numbers(&held);
    }

    /// Sends `changes` to the peer at `ip` alone.
    fn export_to(&mut self, ip: IpAddr, changes: &[BestChange]) {
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        let memo = &mut ExportMemo::new(&mut self.exports);
        let exported = p.export(&self.cfg, &self.origins, changes, memo);
        emit(&mut self.out, ip, p.cfg.address, exported);
    }

    /// Everything again, for a peer too far behind to note each prefix: the Loc-RIB
    /// in pieces (never copied whole), then withdrawals of what the peer holds that
    /// the Loc-RIB has no more. Its Adj-RIB-Out sends only what differs.
    fn resend_all(&mut self, ip: IpAddr) {
        let mut after = None;
        loop {
            let changes = self.rib.best_after(after, BATCH_PREFIXES);
            let Some(last) = changes.last() else {
                break;
            };
            after = Some(last.prefix);
            self.export_to(ip, &changes);
        }
        let Some(out) = self.peers.get(&ip).and_then(|p| p.out.as_ref()) else {
            return;
        };
        let gone: Vec<BestChange> = out
            .rib
            .iter(self.exports.numbers())
            .into_iter()
            .filter(|(prefix, _)| self.rib.best(prefix).is_none())
            .map(|(prefix, _)| BestChange { prefix, now: None })
            .collect();
        self.export_to(ip, &gone);
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
        match p.deferred.take(FEED_PIECE) {
            Waiting::Nothing => {}
            Waiting::Prefixes(ids) => {
                let numbers = self.exports.numbers();
                let mut changes: Vec<BestChange> = ids
                    .into_iter()
                    .filter_map(|id| numbers.key(id))
                    .map(|k| {
                        let prefix = k.net();
                        let now = self.rib.best(&prefix);
                        BestChange { prefix, now }
                    })
                    .collect();
                changes.sort_unstable_by_key(|c| c.prefix);
                self.export_to(ip, &changes);
            }
            Waiting::Everything => self.resend_all(ip),
        }
        self.sweep_numbers();
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        if !p.deferred.is_empty() {
            // The rest once the session took this piece: sent whole, a slow peer's
            // backlog sat in its write buffer (1,000 clients 250 KB each).
            self.out.push(Output::Wake(ip));
            return;
        }
        let Some(out) = p.out.as_ref() else {
            return;
        };
        // Refreshes after the deferred changes: they re-send what those set up.
        for family in std::mem::take(&mut p.refreshes) {
            let numbers = self.exports.numbers();
            if let Ok(msgs) = out.rib.refresh(family, &out.tx, out.enhanced, numbers) {
                p.updates_out += msgs.len() as u64;
                self.out.push(Output::Send(ip, msgs));
            }
        }
        self.feed(ip);
    }

    /// Sends the next piece of a peer's initial table, with End-of-RIB once it is all
    /// out. The next piece is asked for ([`Output::Wake`]) and built only once the
    /// session took this one: a thousand peers coming up at once held a thousand
    /// encoded tables (100 MB for the reflector's 1,000 clients).
    pub(super) fn feed(&mut self, ip: IpAddr) {
        let Some(after) = self
            .peers
            .get(&ip)
            .and_then(|p| p.feed.as_ref())
            .map(|f| f.after)
        else {
            return;
        };
        let piece = self.rib.best_after(after, FEED_PIECE);
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        let memo = &mut ExportMemo::new(&mut self.exports);
        let (mut msgs, texts) = p.export(&self.cfg, &self.origins, &piece, memo);
        let (Some(out), Some(feed)) = (p.out.as_ref(), p.feed.as_mut()) else {
            return;
        };
        let more = match piece.last() {
            Some(last) if piece.len() == FEED_PIECE => {
                feed.after = Some(last.prefix);
                true
            }
            _ => {
                for f in &feed.families {
                    if let Ok(b) = Message::Update(Update::end_of_rib(*f)).encode(&out.tx) {
                        msgs.push(b);
                        p.updates_out += 1;
                    }
                }
                p.feed = None;
                false
            }
        };
        emit(&mut self.out, ip, p.cfg.address, (msgs, texts));
        if more {
            self.out.push(Output::Wake(ip));
        }
    }
}

/// Outputs one peer's export: its UPDATEs, and what its policy refused.
fn emit(
    out: &mut Vec<Output>,
    ip: IpAddr,
    peer: SocketAddr,
    (msgs, texts): (Vec<Bytes>, Vec<String>),
) {
    if !msgs.is_empty() {
        out.push(Output::Send(ip, msgs));
    }
    for text in texts {
        out.push(Output::Event(SpeakerEvent::Rejected(peer, text)));
    }
}
