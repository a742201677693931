//! A peer's route policy replaced on a running session ([`Input::SetPolicy`]), without
//! a reset: a new export program judges the Loc-RIB again and only the difference goes
//! out; a new import program judges the paths the peer sent again (those now rejected
//! go at once), judges the rejected paths it kept again (those now accepted enter at
//! once, route refresh or not), and, when the session negotiated route refresh, asks
//! the peer to send its routes again so that rejected ones not kept may pass too.
//!
//! [`Input::SetPolicy`]: super::Input::SetPolicy

use std::net::IpAddr;
use std::sync::Arc;

use crate::policy::{Decision, PeerPolicy, PeerType, Program};
use crate::rib::export::ExportMemo;
use crate::rib::{BestChange, PeerSource};
use crate::wire::Update;

use super::super::peer;
use super::super::policy as speaker_policy;
use super::super::rejected::{self, RejectedPath};
use super::{Output, Speaker, SpeakerEvent};

impl Speaker {
    /// Replaces peer `ip`'s policy; a session that is not established takes it with
    /// its next session.
    pub(super) fn set_policy(&mut self, ip: IpAddr, policy: Arc<PeerPolicy>) {
        let Some(p) = self.peers.get_mut(&ip) else {
            return;
        };
        // No policy is the same as accepting everything unchanged.
        let old = p.cfg.policy.replace(Arc::clone(&policy));
        let all = Program::default_only(Decision::Accept);
        let import_changed = old.as_ref().map_or(&all, |o| &o.import) != &policy.import;
        let export_changed = old.as_ref().map_or(&all, |o| &o.export) != &policy.export;
        if p.source.is_none() {
            return;
        }
        let mut said = Vec::new();
        if import_changed {
            said.push(self.reimport(ip, &policy));
        }
        if export_changed {
            said.push(self.reexport(ip));
        }
        if let Some(p) = self.peers.get(&ip) {
            if !said.is_empty() {
                let e = SpeakerEvent::PolicyChanged(p.cfg.address, said.join("; "));
                self.event(e);
            }
        }
    }

    /// The new import program on what peer `ip` sent: rejected paths withdrawn, then
    /// a ROUTE-REFRESH request per family when negotiated. Returns what was done.
    fn reimport(&mut self, ip: IpAddr, policy: &PeerPolicy) -> String {
        let Some(p) = self.peers.get_mut(&ip) else {
            return String::new();
        };
        let Some(source) = p.source.clone() else {
            return String::new();
        };
        let kind = if source.ebgp {
            PeerType::External
        } else {
            PeerType::Internal
        };
        // Taken before the paths this program rejects are kept: those were judged.
        let (again, not_kept) = p.rejected.policy_rejected();
        let (u, refused) = speaker_policy::reimport(&self.rib, &policy.import, ip, kind);
        let gone = refused.len();
        // Kept as the RIB held them, for `tern routes --received`.
        for r in &refused {
            let held = self.rib.paths(&r.prefix).iter().find(|path| {
                !path.source.local && path.source.address == ip && path.path_id == r.path_id
            });
            if let Some(path) = held {
                let reason: std::sync::Arc<str> = rejected::policy_reason(&r.label).into();
                p.rejected.keep(r.prefix, r.path_id, || RejectedPath {
                    attrs: Arc::clone(&path.attrs),
                    next_hop: Some(path.next_hop),
                    reason,
                    by_policy: true,
                });
            }
        }
        let texts = p.refused(false, refused);
        let mut text = format!("new import policy: {gone} path(s) it sent now rejected");
        if p.route_refresh {
            let msgs = p.refresh_requests();
            text.push_str("; ROUTE-REFRESH sent so routes rejected before are judged again");
            if !msgs.is_empty() {
                self.out.push(Output::Send(ip, msgs));
            }
        } else if not_kept > 0 {
            text.push_str(&format!(
                "; the session did not negotiate route refresh: {not_kept} rejected \
                 path(s) that were not kept are judged again with the next session"
            ));
        }
        let address = p.cfg.address;
        for t in texts {
            self.event(SpeakerEvent::Rejected(address, t));
        }
        let mut changes = self.rib.apply_update(&source, &u);
        if !again.is_empty() {
            let accepted = self.rejudge(ip, &source, &again, &mut changes);
            text.push_str(&format!(
                "; {} kept path(s) rejected before judged again, {accepted} now accepted",
                again.len()
            ));
        }
        self.propagate(changes);
        text
    }

    /// The kept paths of peer `ip` that the old import policy rejected, announced again
    /// through the import (checks and the new policy) as if the peer had sent them:
    /// those accepted enter the RIB (their Loc-RIB changes added to `changes`), the
    /// others stay kept with the new reason. Returns how many were accepted. Not
    /// counted as rejections again, and not reported: nothing new was received.
    fn rejudge(
        &mut self,
        ip: IpAddr,
        source: &Arc<PeerSource>,
        again: &[Update],
        changes: &mut Vec<BestChange>,
    ) -> usize {
        let mut accepted = 0;
        for u in again {
            let Some(p) = self.peers.get_mut(&ip) else {
                break;
            };
            let (c, check, refused) =
                peer::import(&mut self.rib, &self.cfg, &self.own, &p.cfg, source, u);
            if check.is_none() && refused.is_empty() {
                accepted += 1;
            }
            p.rejected.after_update(u, check.as_ref(), &refused);
            changes.extend(c);
        }
        accepted
    }

    /// The new export program on the Loc-RIB for peer `ip`: only the difference is
    /// sent. Returns what was done.
    pub(super) fn reexport(&mut self, ip: IpAddr) -> String {
        let Some(p) = self.peers.get_mut(&ip) else {
            return String::new();
        };
        if p.out.is_none() {
            // Held while we restart: the table goes out under the new policy.
            return "new export policy: applies to the table still to be sent".into();
        }
        if p.stalled || !p.deferred.is_empty() {
            p.deferred.everything();
            return "new export policy: the peer is not reading; applies once it does".into();
        }
        if p.feed.is_some() {
            p.deferred.everything();
            return "new export policy: applies as the rest of the table is sent".into();
        }
        let all: Vec<BestChange> = self
            .rib
            .iter()
            .map(|(prefix, b)| BestChange {
                prefix,
                now: Some(b),
            })
            .collect();
        let (msgs, texts) = p.export(
            &self.cfg,
            &self.origins,
            &all,
            &mut ExportMemo::new(&mut self.exports),
        );
        let address = p.cfg.address;
        let text = format!(
            "new export policy: {} UPDATE(s) of differences sent",
            msgs.len()
        );
        if !msgs.is_empty() {
            self.out.push(Output::Send(ip, msgs));
        }
        for t in texts {
            self.event(SpeakerEvent::Rejected(address, t));
        }
        text
    }
}
