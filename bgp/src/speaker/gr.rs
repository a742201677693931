//! Graceful restart (RFC 4724), both sides, as pure state: [`Helper`] is what we keep
//! for one peer that restarts (stale families, the restart generation that names its
//! restart timer), [`OwnRestart`] is our own restart (the selection deferral that holds
//! every peer's initial UPDATEs until our Loc-RIB is complete). The core
//! ([`super::core::Speaker`]) applies their answers to the RIB and turns them into
//! outputs; nothing here reads a clock or touches a route.
//!
//! Helper side, per peer. `gen` counts the peer's restarts; its restart timer carries
//! the `gen` it was armed for and does nothing once the peer has moved on.
//!
//! ```text
//!              Down: connection lost, the peer announced graceful restart and
//!              the session had come up: its routes are marked stale (families
//!              its capability lists; the others go now), gen += 1, timer
//!              restart(gen) armed for its restart time
//!   +---------+ -------------------------------------------------> +--------------+
//!   | Normal  |                                                    | Restarting   |
//!   | nothing |  End-of-RIB for the last stale family: sweep it    | stale: fams  |
//!   | stale   | <------------------------------------------------- | timer: gen   |
//!   +---------+  timer restart(gen), current gen: sweep them all   +--------------+
//!     |    ^     up again, no F bit for any stale family: sweep     |  |  ^  |  ^
//!     |    |     Down another way after coming up: drop them all    |  |  |  |  |
//!     +----+                                                        |  +--+  +--+
//!   Down any other way (NOTIFICATION,              up again: families without the F
//!   stop, prefix limit): routes dropped            bit swept, the rest wait for their
//!                                                  End-of-RIB; Down before it came up
//!                                                  again: same gen, same timer; lost
//!                                                  again after coming up: gen += 1
//! ```
//!
//! Our own restart (only when started with `restarting`):
//!
//! ```text
//!   +-------------+  every peer up, and each with GR sent End-of-RIB   +-----------+
//!   | Deferring   |  for all its families  -> RestartComplete(by EoR)  | Converged |
//!   | initial     | -------------------------------------------------> | tables go |
//!   | UPDATEs     |  timer deferral (30 s, at most half the smallest   | out, R bit|
//!   | held        |  restart time) -> RestartComplete(by timer)        | cleared   |
//!   +-------------+ -------------------------------------------------> +-----------+
//! ```

use std::time::Duration;

use crate::fsm::{DownReason, Negotiated};
use crate::wire::{Family, GracefulRestart};

use super::{PeerConfig, DEFAULT_RESTART_TIME, SELECTION_DEFERRAL};

/// Helper-side graceful restart state of one peer.
#[derive(Debug, Default, Clone)]
pub struct Helper {
    /// The peer's graceful restart capability from the last session.
    capability: Option<GracefulRestart>,
    /// Families whose routes are stale, kept while the peer restarts.
    stale: Vec<Family>,
    /// Counts restarts, so the timer of an earlier restart cannot end a later one.
    generation: u64,
}

/// What a session going down means for the peer's routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Down {
    /// Its routes are kept, marked stale, for these families until the restart timer
    /// of this generation (after `restart_time` seconds).
    Kept {
        /// Seconds the peer asked us to wait (its capability's restart time).
        restart_time: u16,
        /// The restart this timer belongs to.
        generation: u64,
        /// Families kept; the others are swept at once.
        families: Vec<Family>,
    },
    /// The session never came up again since an earlier restart: that restart (and its
    /// timer) goes on.
    StillRestarting,
    /// No graceful restart: its routes go now.
    Ended,
}

/// Whether a session that went down this way keeps its routes while the peer restarts
/// (RFC 4724 §4.2): only a lost connection does. A NOTIFICATION either way ends graceful
/// restart because we do not advertise the RFC 8538 N bit, and an administrative stop
/// never keeps routes.
fn keeps_routes(reason: &DownReason) -> bool {
    matches!(reason, DownReason::ConnectionLost)
}

/// The families the peer's graceful restart capability covers: only those keep routes.
fn gr_families(gr: &GracefulRestart) -> Vec<Family> {
    [Family::IPV4_UNICAST, Family::IPV6_UNICAST]
        .into_iter()
        .filter(|f| gr.families.iter().any(|g| g.family == *f))
        .collect()
}

impl Helper {
    /// The peer advertised graceful restart in its last session.
    pub fn negotiated(&self) -> bool {
        self.capability.is_some()
    }

    /// Some of its routes are stale (it is restarting).
    pub fn restarting(&self) -> bool {
        !self.stale.is_empty()
    }

    /// The restart `generation` is the current one (its timer may end it).
    pub fn is_current(&self, generation: u64) -> bool {
        self.generation == generation
    }

    /// RFC 4724 §4.2: stale families whose forwarding state the peer, up again with
    /// `now`, did not keep (or with no graceful restart at all now); they go at once.
    pub fn not_kept(&self, now: Option<&GracefulRestart>) -> Vec<Family> {
        self.stale
            .iter()
            .copied()
            .filter(|f| {
                !now.is_some_and(|g| {
                    g.families
                        .iter()
                        .any(|x| x.family == *f && x.forwarding_preserved)
                })
            })
            .collect()
    }

    /// The session came up with `negotiated`: its capability counts from now on.
    pub fn session_up(&mut self, negotiated: &Negotiated) {
        self.capability = negotiated.peer_graceful_restart.clone();
    }

    /// The session went down for `reason`; `was_up` says it had come up.
    pub fn session_down(&mut self, was_up: bool, reason: &DownReason) -> Down {
        match self.capability.as_ref() {
            Some(gr) if was_up && keeps_routes(reason) => {
                self.stale = gr_families(gr);
                self.generation += 1;
                Down::Kept {
                    restart_time: gr.restart_time,
                    generation: self.generation,
                    families: self.stale.clone(),
                }
            }
            _ if !was_up && !self.stale.is_empty() => Down::StillRestarting,
            _ => {
                self.stale.clear();
                Down::Ended
            }
        }
    }

    /// The peer re-sent a family's routes (End-of-RIB), did not keep its forwarding
    /// state, or its restart time ran out (`None`: every family). True when something
    /// was stale, so the caller sweeps what was not sent again.
    pub fn end(&mut self, family: Option<Family>) -> bool {
        let before = self.stale.len();
        self.stale.retain(|f| family.is_some_and(|x| x != *f));
        self.stale.len() != before
    }

    /// No graceful restart for these routes (the peer passed a prefix limit: the peer
    /// is the problem).
    pub fn abandon(&mut self) {
        self.capability = None;
        self.stale.clear();
    }
}

/// Where one peer stands in our own restart.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// The session is up.
    pub up: bool,
    /// It advertised graceful restart (and so sends End-of-RIB).
    pub graceful: bool,
    /// Families negotiated this session.
    pub families: &'a [Family],
    /// Families it has sent End-of-RIB for this session.
    pub eor_in: &'a [Family],
}

/// Our own graceful restart: running from the start (when we restarted) until our
/// Loc-RIB is complete or the selection deferral timer runs out.
#[derive(Debug, Clone)]
pub struct OwnRestart {
    running: bool,
}

impl OwnRestart {
    /// Starts running when `restarting`.
    pub fn new(restarting: bool) -> OwnRestart {
        OwnRestart {
            running: restarting,
        }
    }

    /// Initial UPDATEs are held.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The selection deferral time: [`SELECTION_DEFERRAL`], never more than half the
    /// restart time announced to a peer, so no helper gives up on our routes first.
    pub fn deferral<'a>(peers: impl Iterator<Item = &'a PeerConfig>) -> Duration {
        peers
            .map(|p| {
                Duration::from_secs(u64::from(p.restart_time.unwrap_or(DEFAULT_RESTART_TIME)) / 2)
            })
            .fold(SELECTION_DEFERRAL, Duration::min)
    }

    /// Every peer is up and, when it does graceful restart, has sent End-of-RIB for each
    /// of its families: our Loc-RIB is complete. A peer without graceful restart need
    /// not send End-of-RIB: its being up is enough.
    pub fn complete<'a>(&self, mut peers: impl Iterator<Item = Progress<'a>>) -> bool {
        self.running
            && peers
                .all(|p| p.up && (!p.graceful || p.families.iter().all(|f| p.eor_in.contains(f))))
    }

    /// Ends the restart; true if it was running.
    pub fn finish(&mut self) -> bool {
        std::mem::replace(&mut self.running, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::GracefulRestartFamily;

    fn cap(families: &[(Family, bool)]) -> GracefulRestart {
        GracefulRestart {
            restart_state: false,
            notification: false,
            restart_time: 120,
            families: families
                .iter()
                .map(|(family, f)| GracefulRestartFamily {
                    family: *family,
                    forwarding_preserved: *f,
                })
                .collect(),
        }
    }

    #[test]
    fn only_a_lost_connection_of_an_up_session_keeps_routes() {
        let mut h = Helper {
            capability: Some(cap(&[(Family::IPV4_UNICAST, true)])),
            ..Helper::default()
        };
        let stopped = h.session_down(true, &DownReason::Stopped);
        assert_eq!(stopped, Down::Ended);
        let lost = h.session_down(true, &DownReason::ConnectionLost);
        assert_eq!(
            lost,
            Down::Kept {
                restart_time: 120,
                generation: 1,
                families: vec![Family::IPV4_UNICAST]
            }
        );
        // Down again before it came up: the same restart goes on.
        let again = h.session_down(false, &DownReason::ConnectionLost);
        assert_eq!(again, Down::StillRestarting);
        assert!(h.is_current(1));
        assert!(h.end(Some(Family::IPV4_UNICAST)));
        assert!(!h.restarting());
        assert!(!h.end(None));
    }

    #[test]
    fn families_without_forwarding_state_are_not_kept() {
        let mut h = Helper {
            capability: Some(cap(&[
                (Family::IPV4_UNICAST, true),
                (Family::IPV6_UNICAST, true),
            ])),
            ..Helper::default()
        };
        h.session_down(true, &DownReason::ConnectionLost);
        let back = cap(&[(Family::IPV4_UNICAST, true), (Family::IPV6_UNICAST, false)]);
        assert_eq!(h.not_kept(Some(&back)), vec![Family::IPV6_UNICAST]);
        assert_eq!(h.not_kept(None).len(), 2);
    }

    #[test]
    fn own_restart_waits_for_every_end_of_rib() {
        let r = OwnRestart::new(true);
        let fams = [Family::IPV4_UNICAST, Family::IPV6_UNICAST];
        let p = |up, eor_in| Progress {
            up,
            graceful: true,
            families: &fams,
            eor_in,
        };
        assert!(!r.complete([p(true, &fams[..1])].into_iter()));
        assert!(!r.complete([p(false, &fams[..])].into_iter()));
        assert!(r.complete([p(true, &fams[..])].into_iter()));
        let no_gr = Progress {
            graceful: false,
            ..p(true, &[])
        };
        assert!(r.complete([no_gr].into_iter()));
    }
}
