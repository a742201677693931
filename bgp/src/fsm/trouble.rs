//! Why a session cannot get up, as data: a NOTIFICATION sent or received before the
//! session was Established, decoded into what each side offered and expected (the AS
//! in the peer's OPEN and the one configured for it, a duplicate router ID, the hold
//! time offered, the families or capabilities that did not match). The machine builds
//! it where it checks the OPEN, so nobody downstream parses error texts; the daemon
//! turns it into a diagnostic finding with a fix.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde::Serialize;

use std::time::Instant;

use super::{Action, DownReason, SessionConfig, State};
use crate::wire::notification::{code, open_subcode};
use crate::wire::{Capability, Family, Notification, Open};

/// Which end sent the NOTIFICATION (and so noticed the problem).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticedBy {
    /// This speaker refused the peer.
    Us,
    /// The peer refused us.
    Peer,
}

/// What the NOTIFICATION means for the two configurations, where tern can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Detail {
    /// Bad Peer AS that we sent: the peer's OPEN carried AS `offered`, the
    /// configuration expects `expected` for it.
    PeerAs {
        /// The AS in the peer's OPEN (its 4-octet AS capability when present).
        offered: u32,
        /// The AS configured for the peer.
        expected: u32,
    },
    /// Bad Peer AS that the peer sent: it refused the AS in our OPEN (it expects
    /// another one).
    OurAs {
        /// The AS our OPEN carried.
        sent: u32,
    },
    /// Bad BGP Identifier: our router ID, which the peer's OPEN carried too (we
    /// noticed), or which the peer refused (it noticed: most likely its own ID).
    RouterId {
        /// This speaker's router ID.
        router_id: Ipv4Addr,
    },
    /// Unacceptable Hold Time: the hold time offered (by the peer when we refused
    /// it, ours when the peer refused it), in seconds.
    HoldTime {
        /// Seconds.
        offered: u16,
    },
    /// Unsupported Capability that we sent: no address family in common.
    Families {
        /// Families our OPEN offered.
        ours: Vec<Family>,
        /// Families the peer's OPEN offered.
        theirs: Vec<Family>,
    },
    /// Unsupported Capability that the peer sent: the capability codes its data
    /// names (RFC 5492 §3), empty when it named none.
    Capabilities {
        /// Capability codes.
        codes: Vec<u8>,
    },
    /// Unsupported Version Number: the version the peer's OPEN carried (we refused
    /// it), or the largest one the peer supports (it refused ours).
    Version {
        /// BGP version.
        version: u8,
    },
    /// Our hold timer expired before the session was Established: the peer sent no
    /// OPEN (OpenSent) or no KEEPALIVE (OpenConfirm) within this time.
    HoldTimer {
        /// How long we waited.
        waited: Duration,
    },
    /// Nothing beyond the code and subcode.
    None,
}

/// A NOTIFICATION sent or received while the session was not Established, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionTrouble {
    /// Who sent it.
    pub by: NoticedBy,
    /// The message itself (code, subcode, data).
    pub notification: Notification,
    /// The machine's state when it was sent or received.
    pub state: State,
    /// What it means, where known.
    pub detail: Detail,
}

impl SessionTrouble {
    /// The finding kind this is: a router ID clash (either side noticed) is one of
    /// its own; everything else is a plain NOTIFICATION.
    pub fn is_duplicate_router_id(&self) -> bool {
        self.notification.code == code::OPEN_MESSAGE
            && self.notification.subcode == open_subcode::BAD_BGP_IDENTIFIER
            && matches!(self.detail, Detail::RouterId { .. })
    }

    /// The same trouble as `other` (who, code and subcode): repeats are counted, not
    /// reported as new.
    pub fn same_as(&self, other: &SessionTrouble) -> bool {
        self.by == other.by
            && self.notification.code == other.notification.code
            && self.notification.subcode == other.notification.subcode
    }
}

fn families(v: &[Family]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The plain name of a capability code.
pub fn capability_name(c: u8) -> String {
    use crate::wire::iana::capability_code as cc;
    match c {
        cc::MULTIPROTOCOL => "multiprotocol (an address family)".into(),
        cc::ROUTE_REFRESH => "route refresh".into(),
        cc::EXTENDED_NEXT_HOP => "extended next hop".into(),
        cc::EXTENDED_MESSAGE => "extended message".into(),
        cc::GRACEFUL_RESTART => "graceful restart".into(),
        cc::FOUR_OCTET_AS => "4-octet AS".into(),
        cc::ADD_PATH => "ADD-PATH".into(),
        cc::ENHANCED_ROUTE_REFRESH => "enhanced route refresh".into(),
        cc::LONG_LIVED_GRACEFUL_RESTART => "long-lived graceful restart".into(),
        cc::FQDN => "FQDN".into(),
        other => format!("capability {other}"),
    }
}

impl std::fmt::Display for SessionTrouble {
    /// The observed facts in plain words, e.g. `we sent NOTIFICATION OPEN Message
    /// Error / Bad Peer AS in OpenSent: the peer's OPEN carried AS 65002, AS 65001 is
    /// configured for it`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match self.by {
            NoticedBy::Us => "we sent",
            NoticedBy::Peer => "the peer sent",
        };
        write!(
            f,
            "{who} NOTIFICATION {} in {:?}",
            self.notification, self.state
        )?;
        match (&self.detail, self.by) {
            (Detail::PeerAs { offered, expected }, _) => write!(
                f,
                ": the peer's OPEN carried AS {offered}, AS {expected} is configured for it"
            ),
            (Detail::OurAs { sent }, _) => write!(
                f,
                ": the peer refused AS {sent}, the AS our OPEN carried (it expects another)"
            ),
            (Detail::RouterId { router_id }, NoticedBy::Us) => write!(
                f,
                ": the peer's OPEN carried BGP identifier {router_id}, this node's own router ID"
            ),
            (Detail::RouterId { router_id }, NoticedBy::Peer) => write!(
                f,
                ": the peer refused our BGP identifier {router_id} (most likely it is the peer's own router ID too)"
            ),
            (Detail::HoldTime { offered }, NoticedBy::Us) => write!(
                f,
                ": the peer offered hold time {offered} s (0 or at least 3 are allowed)"
            ),
            (Detail::HoldTime { offered }, NoticedBy::Peer) => {
                write!(f, ": the peer refused our hold time of {offered} s")
            }
            (Detail::Families { ours, theirs }, _) => write!(
                f,
                ": no address family in common: we offered {}, the peer offered {}",
                families(ours),
                families(theirs)
            ),
            (Detail::Capabilities { codes }, _) if codes.is_empty() => {
                f.write_str(": the peer did not say which capability")
            }
            (Detail::Capabilities { codes }, _) => {
                let names: Vec<String> = codes.iter().map(|c| capability_name(*c)).collect();
                write!(
                    f,
                    ": the peer does not support or requires: {}",
                    names.join(", ")
                )
            }
            (Detail::Version { version }, NoticedBy::Us) => write!(
                f,
                ": the peer's OPEN carried BGP version {version}, only 4 is supported"
            ),
            (Detail::Version { version }, NoticedBy::Peer) => write!(
                f,
                ": the peer supports BGP version {version} at most"
            ),
            (Detail::HoldTimer { waited }, _) => {
                let what = if self.state == State::OpenConfirm {
                    "KEEPALIVE"
                } else {
                    "OPEN"
                };
                write!(
                    f,
                    ": the peer sent no {what} within {} s of our OPEN",
                    waited.as_secs()
                )
            }
            (Detail::None, _) => Ok(()),
        }
    }
}

impl super::Session {
    /// [`super::Session::fail`] (send `n`, close, go to Idle with back-off),
    /// reporting the NOTIFICATION as trouble (with `detail`) when the session is not
    /// Established.
    pub(super) fn fail_with(
        &mut self,
        out: &mut Vec<Action>,
        n: &Notification,
        detail: Detail,
        now: Instant,
    ) {
        self.trouble(out, NoticedBy::Us, n, detail);
        self.send_notification(out, n);
        self.go_idle(out, DownReason::NotificationSent(n.to_string()), now);
    }

    /// Reports a NOTIFICATION sent or received while the session is on its way up
    /// (not Idle, not Established): why it cannot get up.
    pub(super) fn trouble(
        &self,
        out: &mut Vec<Action>,
        by: NoticedBy,
        n: &Notification,
        detail: Detail,
    ) {
        if matches!(self.state, State::Idle | State::Established) {
            return;
        }
        out.push(Action::Trouble(Box::new(SessionTrouble {
            by,
            notification: n.clone(),
            state: self.state,
            detail,
        })));
    }

    /// How long the peer had when the hold timer ran out before Established: the
    /// open hold time for its OPEN, or in OpenConfirm the negotiated hold time for
    /// its KEEPALIVE.
    pub(super) fn hold_waited(&self) -> Duration {
        match self.negotiated.as_ref() {
            Some(n) if self.state == State::OpenConfirm => {
                Duration::from_secs(u64::from(n.hold_time))
            }
            _ => self.cfg.open_hold_time,
        }
    }
}

/// The families an OPEN offers (RFC 4760 §8: none listed is IPv4 unicast).
fn offered_families(o: &Open) -> Vec<Family> {
    let v: Vec<Family> = o
        .capabilities
        .iter()
        .filter_map(|c| match c {
            Capability::Multiprotocol(f) => Some(*f),
            _ => None,
        })
        .collect();
    if v.is_empty() {
        vec![Family::IPV4_UNICAST]
    } else {
        v
    }
}

impl Detail {
    /// For a NOTIFICATION the peer sent: what of ours it refused (our AS, router ID
    /// and hold time as configured), or what its data names.
    pub(super) fn of_received(n: &Notification, cfg: &SessionConfig) -> Detail {
        if n.code != code::OPEN_MESSAGE {
            return Detail::None;
        }
        match n.subcode {
            open_subcode::BAD_PEER_AS => Detail::OurAs { sent: cfg.local_as },
            open_subcode::BAD_BGP_IDENTIFIER => Detail::RouterId {
                router_id: cfg.router_id,
            },
            open_subcode::UNACCEPTABLE_HOLD_TIME => Detail::HoldTime {
                offered: cfg.hold_time,
            },
            open_subcode::UNSUPPORTED_CAPABILITY => Detail::Capabilities {
                codes: n.capability_codes(),
            },
            open_subcode::UNSUPPORTED_VERSION => match n.supported_version() {
                Some(version) => Detail::Version { version },
                None => Detail::None,
            },
            _ => Detail::None,
        }
    }

    /// For a message we refused to decode with NOTIFICATION `n`: what the peer's OPEN
    /// (`msg`, header included) offered, when `n` is about its version or hold time.
    pub(super) fn of_refused(n: &Notification, msg: &[u8]) -> Detail {
        let offered = crate::wire::open::offered(msg);
        match (n.code, n.subcode, offered) {
            (code::OPEN_MESSAGE, open_subcode::UNSUPPORTED_VERSION, Some((version, _))) => {
                Detail::Version { version }
            }
            (code::OPEN_MESSAGE, open_subcode::UNACCEPTABLE_HOLD_TIME, Some((_, hold))) => {
                Detail::HoldTime { offered: hold }
            }
            _ => Detail::None,
        }
    }

    /// For the peer's OPEN that `negotiate` found no family in common with ours.
    pub(super) fn of_families(ours: &Open, theirs: &Open) -> Detail {
        Detail::Families {
            ours: offered_families(ours),
            theirs: offered_families(theirs),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::Bytes;

    use super::*;
    use crate::fsm::{Action, Event, Session, OPEN_HOLD_TIME};
    use crate::wire::{CodecOptions, Message};

    const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
    const PEER_ID: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 2);

    fn cfg() -> SessionConfig {
        SessionConfig {
            local_as: 64512,
            peer_as: 65001,
            router_id: LOCAL_ID,
            hold_time: 9,
            keepalive: None,
            connect_retry: Duration::from_secs(3),
            passive: false,
            delay_open: None,
            idle_hold: Duration::from_secs(1),
            idle_hold_max: Duration::from_secs(8),
            open_hold_time: OPEN_HOLD_TIME,
            send_hold_time: None,
            capabilities: vec![Capability::Multiprotocol(Family::IPV4_UNICAST)],
        }
    }

    fn encode(m: Message) -> Bytes {
        m.encode(&CodecOptions::default()).unwrap_or_default()
    }

    /// A session in OpenSent under `c`, then `bytes` from the peer: the troubles.
    fn troubles_after(c: SessionConfig, bytes: Bytes) -> Vec<SessionTrouble> {
        let t0 = Instant::now();
        let mut s = Session::new(c);
        s.handle(Event::ManualStart, t0);
        s.handle(Event::TcpConnected, t0);
        troubles(&s.handle(Event::Received(bytes), t0))
    }

    fn troubles(a: &[Action]) -> Vec<SessionTrouble> {
        a.iter()
            .filter_map(|x| match x {
                Action::Trouble(t) => Some((**t).clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn bad_peer_as_names_both_numbers() {
        let open = encode(Message::Open(Open::new(65002, 90, PEER_ID, vec![])));
        let t = troubles_after(cfg(), open);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].by, NoticedBy::Us);
        assert_eq!(t[0].state, State::OpenSent);
        assert_eq!(
            t[0].detail,
            Detail::PeerAs {
                offered: 65002,
                expected: 65001
            }
        );
        assert_eq!(
            t[0].to_string(),
            "we sent NOTIFICATION OPEN Message Error / Bad Peer AS in OpenSent: the peer's OPEN carried AS 65002, AS 65001 is configured for it"
        );
        assert!(!t[0].is_duplicate_router_id());
    }

    #[test]
    fn our_router_id_in_the_peers_open_is_a_duplicate() {
        let c = SessionConfig {
            peer_as: 64512,
            ..cfg()
        };
        let open = encode(Message::Open(Open::new(64512, 90, LOCAL_ID, vec![])));
        let t = troubles_after(c, open);
        assert_eq!(t.len(), 1, "{t:?}");
        assert!(t[0].is_duplicate_router_id());
        assert_eq!(t[0].by, NoticedBy::Us);
        assert!(t[0].to_string().contains("203.0.113.1, this node's own"));
    }

    #[test]
    fn notifications_from_the_peer_say_what_it_refused_of_ours() {
        let n = |subcode: u8, data: &'static [u8]| {
            encode(Message::Notification(Notification {
                code: code::OPEN_MESSAGE,
                subcode,
                data: Bytes::from_static(data),
            }))
        };
        let cases = [
            (
                n(open_subcode::BAD_PEER_AS, &[]),
                Detail::OurAs { sent: 64512 },
            ),
            (
                n(open_subcode::BAD_BGP_IDENTIFIER, &[]),
                Detail::RouterId {
                    router_id: LOCAL_ID,
                },
            ),
            (
                n(open_subcode::UNACCEPTABLE_HOLD_TIME, &[]),
                Detail::HoldTime { offered: 9 },
            ),
            (
                n(
                    open_subcode::UNSUPPORTED_CAPABILITY,
                    &[65, 4, 0, 0, 0xfd, 0xe8],
                ),
                Detail::Capabilities { codes: vec![65] },
            ),
            (
                n(open_subcode::UNSUPPORTED_VERSION, &[0, 3]),
                Detail::Version { version: 3 },
            ),
        ];
        for (bytes, want) in cases {
            let t = troubles_after(cfg(), bytes);
            assert_eq!(t.len(), 1, "{t:?}");
            assert_eq!(t[0].by, NoticedBy::Peer);
            assert_eq!(t[0].detail, want);
        }
        let t = troubles_after(cfg(), n(open_subcode::BAD_PEER_AS, &[]));
        assert!(t[0].to_string().contains("refused AS 64512"), "{}", t[0]);
        let t = troubles_after(cfg(), n(open_subcode::BAD_BGP_IDENTIFIER, &[]));
        assert!(t[0].is_duplicate_router_id());
    }

    #[test]
    fn an_open_we_cannot_decode_says_what_it_offered() {
        // Hold time 2 (RFC 4271: 0 or at least 3), then version 3.
        let good = encode(Message::Open(Open::new(65001, 90, PEER_ID, vec![])));
        let mut hold = good.to_vec();
        hold[22..24].copy_from_slice(&2u16.to_be_bytes());
        let t = troubles_after(cfg(), Bytes::from(hold));
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].detail, Detail::HoldTime { offered: 2 });
        assert_eq!(
            t[0].notification.subcode,
            open_subcode::UNACCEPTABLE_HOLD_TIME
        );
        assert!(t[0].to_string().contains("offered hold time 2 s"));
        let mut version = good.to_vec();
        version[19] = 3;
        let t = troubles_after(cfg(), Bytes::from(version));
        assert_eq!(t[0].detail, Detail::Version { version: 3 });
    }

    #[test]
    fn no_family_in_common_names_both_offers() {
        let v6 = vec![Capability::Multiprotocol(Family::IPV6_UNICAST)];
        let open = encode(Message::Open(Open::new(65001, 90, PEER_ID, v6)));
        let t = troubles_after(cfg(), open);
        assert_eq!(
            t[0].detail,
            Detail::Families {
                ours: vec![Family::IPV4_UNICAST],
                theirs: vec![Family::IPV6_UNICAST]
            }
        );
        assert!(t[0]
            .to_string()
            .ends_with("we offered ipv4-unicast, the peer offered ipv6-unicast"));
    }

    #[test]
    fn hold_timer_before_established_is_trouble_but_not_once_up() {
        let t0 = Instant::now();
        let mut s = Session::new(cfg());
        s.handle(Event::ManualStart, t0);
        s.handle(Event::TcpConnected, t0);
        let t = troubles(&s.handle(Event::TimerExpired(crate::fsm::Timer::Hold), t0));
        assert_eq!(
            t[0].detail,
            Detail::HoldTimer {
                waited: OPEN_HOLD_TIME
            }
        );
        assert!(t[0].to_string().contains("no OPEN within 240 s"));

        // Established: a NOTIFICATION or hold timer is a session going down, not
        // trouble getting up.
        let mut s = Session::new(cfg());
        s.handle(Event::ManualStart, t0);
        s.handle(Event::TcpConnected, t0);
        let open = encode(Message::Open(Open::new(65001, 90, PEER_ID, vec![])));
        s.handle(Event::Received(open), t0);
        s.handle(Event::Received(encode(Message::Keepalive)), t0);
        assert_eq!(s.state(), State::Established);
        let a = s.handle(Event::TimerExpired(crate::fsm::Timer::Hold), t0);
        assert!(troubles(&a).is_empty(), "{a:?}");
        assert_eq!(s.state(), State::Idle);
    }

    #[test]
    fn collision_resolution_and_our_own_stop_are_no_trouble() {
        let t0 = Instant::now();
        let cease = encode(Message::Notification(Notification {
            code: code::CEASE,
            subcode: crate::wire::notification::cease_subcode::CONNECTION_COLLISION_RESOLUTION,
            data: Bytes::new(),
        }));
        assert!(troubles_after(cfg(), cease).is_empty());
        let mut s = Session::new(cfg());
        s.handle(Event::ManualStart, t0);
        s.handle(Event::TcpConnected, t0);
        assert!(troubles(&s.handle(Event::ManualStop(None), t0)).is_empty());
    }
}
