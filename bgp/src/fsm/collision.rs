//! Connection collisions (RFC 4271 §6.8), sans-IO: the two connections one peer can
//! have at once — the one we opened ([`Side::Ours`]) and the one the peer opened
//! ([`Side::Theirs`]) — and which of them the session keeps.
//!
//! Both proceed: each gets our OPEN as soon as its TCP connection is up, so two
//! speakers that dial each other at the same moment never wait for a timer. Once the
//! peer's OPEN is in on one of them, the BGP identifiers (RFC 6286 §2.3: then the AS
//! numbers) decide: the connection opened by the side with the higher identifier stays,
//! the other is closed with Cease / Connection Collision Resolution. An Established
//! connection wins over a new one unless `detect_established` (RFC 4271 §8.1.1
//! `CollisionDetectEstablishedState`) says to apply the identifiers to it too.
//!
//! §6.8 compares once the peer's OPEN is in on a connection and the other one is in
//! OpenConfirm; it allows looking at OpenSent connections too when the peer's identifier
//! is known, and the OPEN just received tells it. So: when the OPEN comes in on the
//! winner, the loser is closed at once, whatever its state; when it comes in on the
//! loser while the winner waits for its own, the loser's OPEN is held unanswered
//! ([`Stage::Waiting`]) until the winner's OPEN (the loser is closed) or its close (the
//! loser goes on) decides. No KEEPALIVE goes out on a loser, so the peer cannot reach
//! Established on it, and a peer that closes our second connection instead of
//! resolving the collision (GoBGP does, in OpenSent) still gets a session. A connection
//! still connecting is not a collision yet; it is closed if it comes up after the
//! other one is Established.

use std::net::Ipv4Addr;

use bytes::Bytes;
use serde::Serialize;

use crate::wire::{frame_len, CodecOptions, Message, MAX_MESSAGE_LEN};

/// Which end opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Side {
    /// We connected to the peer.
    Ours,
    /// The peer connected to us.
    Theirs,
}

impl Side {
    /// The other connection.
    pub fn other(self) -> Side {
        match self {
            Side::Ours => Side::Theirs,
            Side::Theirs => Side::Ours,
        }
    }
}

/// How far one connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Stage {
    /// Our connect is in progress (only [`Side::Ours`]).
    Connecting,
    /// Up, our OPEN sent (or about to be, after DelayOpen), the peer's not in yet.
    OpenSent,
    /// The peer's OPEN is in but held, unanswered: this connection loses to the other
    /// one if that one's OPEN comes in too.
    Waiting,
    /// The peer's OPEN is in.
    OpenConfirm,
    /// The session runs on it.
    Established,
}

/// What to do with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Verdict {
    /// The connection is up: send our OPEN on it now.
    Start(Side),
    /// Let the connection's handshake go on with the OPEN it received.
    Proceed(Side),
    /// Close the connection with Cease / Connection Collision Resolution (subcode 7);
    /// a connection still connecting is just abandoned.
    Close(Side),
    /// Close the connection just accepted with Cease / Connection Collision
    /// Resolution; the existing one from the peer stays.
    Refuse,
}

/// The collision state of one peer's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    local_id: u32,
    local_as: u32,
    detect_established: bool,
    ours: Option<Stage>,
    theirs: Option<Stage>,
}

impl Collision {
    /// No connection yet. `detect_established` is `CollisionDetectEstablishedState`.
    pub fn new(local_id: Ipv4Addr, local_as: u32, detect_established: bool) -> Collision {
        Collision {
            local_id: u32::from(local_id),
            local_as,
            detect_established,
            ours: None,
            theirs: None,
        }
    }

    /// How far the connection opened by `side` got, if there is one.
    pub fn stage(&self, side: Side) -> Option<Stage> {
        match side {
            Side::Ours => self.ours,
            Side::Theirs => self.theirs,
        }
    }

    fn slot(&mut self, side: Side) -> &mut Option<Stage> {
        match side {
            Side::Ours => &mut self.ours,
            Side::Theirs => &mut self.theirs,
        }
    }

    /// Whether the other connection is Established and, by configuration, always wins.
    fn established_wins(&self, side: Side) -> bool {
        !self.detect_established && self.stage(side.other()) == Some(Stage::Established)
    }

    /// Our connect started; a previous connection of ours, if any, is gone (and an
    /// OPEN held on theirs goes on).
    pub fn connecting(&mut self) -> Vec<Verdict> {
        let out = self.closed(Side::Ours);
        self.ours = Some(Stage::Connecting);
        out
    }

    /// Our connect succeeded.
    pub fn connected(&mut self) -> Vec<Verdict> {
        if self.established_wins(Side::Ours) {
            self.ours = None;
            return vec![Verdict::Close(Side::Ours)];
        }
        self.ours = Some(Stage::OpenSent);
        vec![Verdict::Start(Side::Ours)]
    }

    /// The peer connected to us. A connection it opened before and still has is
    /// replaced (the peer gave up on it: it restarted, or the old one never got
    /// anywhere), unless the session runs on it.
    pub fn accepted(&mut self) -> Vec<Verdict> {
        let mut out = Vec::new();
        match self.theirs {
            // Two connections from the peer are no §6.8 collision: the running one stays.
            Some(Stage::Established) => return vec![Verdict::Refuse],
            Some(_) => out.push(Verdict::Close(Side::Theirs)),
            None => {}
        }
        if self.established_wins(Side::Theirs) {
            self.theirs = None;
            out.push(Verdict::Refuse);
            return out;
        }
        self.theirs = Some(Stage::OpenSent);
        out.push(Verdict::Start(Side::Theirs));
        out
    }

    /// The peer's OPEN, with this identifier and AS, came in on `side`'s connection.
    /// No verdict means: hold the OPEN (do not answer it) until the other connection's
    /// OPEN or close decides.
    pub fn open_received(&mut self, side: Side, peer_id: Ipv4Addr, peer_as: u32) -> Vec<Verdict> {
        let other = side.other();
        // Identifiers and AS numbers equal (the FSM refuses that within one AS, RFC
        // 6286): no rule applies; the connection whose OPEN came first stays.
        let this_wins = self.winner(u32::from(peer_id), peer_as) == Some(side);
        match self.stage(other) {
            None | Some(Stage::Connecting) => {}
            Some(Stage::Established) if !self.detect_established => {
                *self.slot(side) = None;
                return vec![Verdict::Close(side)];
            }
            // The loser waits for the winner's OPEN instead of closing at once: a peer
            // that refuses a second connection outright (GoBGP closes one it accepts
            // in OpenSent) would otherwise leave neither.
            Some(Stage::OpenSent) if !this_wins => {
                *self.slot(side) = Some(Stage::Waiting);
                return Vec::new();
            }
            Some(Stage::Waiting) if !this_wins => {
                *self.slot(side) = None;
                *self.slot(other) = Some(Stage::OpenConfirm);
                return vec![Verdict::Close(side), Verdict::Proceed(other)];
            }
            Some(_) if !this_wins => {
                *self.slot(side) = None;
                return vec![Verdict::Close(side)];
            }
            Some(_) => {
                *self.slot(other) = None;
                *self.slot(side) = Some(Stage::OpenConfirm);
                return vec![Verdict::Close(other), Verdict::Proceed(side)];
            }
        }
        *self.slot(side) = Some(Stage::OpenConfirm);
        vec![Verdict::Proceed(side)]
    }

    /// The connection opened by the side with the higher identifier (compared as
    /// 32-bit unsigned integers, RFC 4271 §6.8), or with the same identifier the higher
    /// AS number (RFC 6286 §2.3).
    fn winner(&self, peer_id: u32, peer_as: u32) -> Option<Side> {
        match (self.local_id, self.local_as).cmp(&(peer_id, peer_as)) {
            std::cmp::Ordering::Greater => Some(Side::Ours),
            std::cmp::Ordering::Less => Some(Side::Theirs),
            std::cmp::Ordering::Equal => None,
        }
    }

    /// The session reached Established on `side`'s connection.
    pub fn established(&mut self, side: Side) {
        if self.stage(side).is_some() {
            *self.slot(side) = Some(Stage::Established);
        }
    }

    /// Whether the session would carry on with the other connection if `side`'s
    /// closed: it is up, and `side`'s is not the Established one (whose end is the
    /// session's).
    pub fn carries_on(&self, side: Side) -> bool {
        self.stage(side) != Some(Stage::Established)
            && matches!(
                self.stage(side.other()),
                Some(Stage::OpenSent | Stage::Waiting | Stage::OpenConfirm)
            )
    }

    /// `side`'s connection closed (or our connect failed). An OPEN held on the other
    /// connection goes on (`Proceed`).
    pub fn closed(&mut self, side: Side) -> Vec<Verdict> {
        let other = side.other();
        if self.slot(side).take().is_none() || self.stage(other) != Some(Stage::Waiting) {
            return Vec::new();
        }
        *self.slot(other) = Some(Stage::OpenConfirm);
        vec![Verdict::Proceed(other)]
    }

    /// The session stopped: no connection is left.
    pub fn reset(&mut self) {
        self.ours = None;
        self.theirs = None;
    }
}

/// The first message of a connection, as far as the collision decision cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstMessage {
    /// Not all of it is in yet.
    Incomplete,
    /// An OPEN from this identifier and (4-octet) AS.
    Open {
        /// BGP Identifier.
        bgp_id: Ipv4Addr,
        /// AS number (from the 4-octet AS capability when present).
        asn: u32,
    },
    /// Anything else (a NOTIFICATION, a malformed message): the state machine deals
    /// with it.
    Other,
}

/// Looks at the first message in `buf` (what a connection has received so far).
pub fn first_message(buf: &[u8]) -> FirstMessage {
    let len = match frame_len(buf, MAX_MESSAGE_LEN) {
        Ok(Some(len)) if len <= buf.len() => len,
        Ok(_) => return FirstMessage::Incomplete,
        Err(_) => return FirstMessage::Other,
    };
    match buf
        .get(..len)
        .map(|b| Message::decode(Bytes::copy_from_slice(b), &CodecOptions::default()))
    {
        Some(Ok(Message::Open(o))) => FirstMessage::Open {
            bgp_id: o.bgp_id,
            asn: o.asn(),
        },
        _ => FirstMessage::Other,
    }
}

#[cfg(test)]
mod tests;
