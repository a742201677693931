//! Per-peer session troubles (connect attempts that time out or are refused,
//! NOTIFICATIONs while the session is down, a duplicate router ID), kept from the
//! speaker's events and turned into diagnostic findings.
//!
//! The speaker reports them as data ([`Trouble`]); here they are kept per peer until
//! the session comes up (a connect failure already when a connect succeeds), and
//! worded with this node's configuration: which AS each side expects and where that
//! is set, which password or GTSM setting may be the cause.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use tern_bgp::fsm::State as FsmState;
use tern_bgp::speaker::{
    ConnectFailure, ConnectTrouble, Detail, NoticedBy, SessionTrouble, Trouble,
};
use tern_config::intent::{PeerIntent, PeerKind};
use tern_fib::diag::{Finding, FindingKind, Severity};

use super::state::State;

/// What went wrong with each peer's session since it was last up.
#[derive(Debug, Default)]
pub struct Troubles {
    /// By peer address; removed when the session comes up or the peer goes away.
    pub by_peer: BTreeMap<IpAddr, PeerTrouble>,
}

/// One peer's trouble.
#[derive(Debug, Default, Clone)]
pub struct PeerTrouble {
    /// Connect attempts failing now (cleared by a connect that succeeds).
    pub connect: Option<ConnectTrouble>,
    /// The latest NOTIFICATION before Established, and how often it came.
    pub notification: Option<Repeated<SessionTrouble>>,
    /// The peer closed connections without a NOTIFICATION before the session was
    /// up, in this state (shown only without a NOTIFICATION, which says more).
    pub closed: Option<Repeated<FsmState>>,
}

/// Something that may repeat with every attempt.
#[derive(Debug, Clone)]
pub struct Repeated<T> {
    /// The latest one.
    pub what: T,
    /// How many times in a row the same one came.
    pub count: u64,
    /// The first of those.
    pub first: SystemTime,
    /// The latest.
    pub last: SystemTime,
}

impl<T> Repeated<T> {
    /// `what` happened at `now`, after `prev`: counted on if `same` says it is the
    /// same again.
    fn next(
        prev: Option<Repeated<T>>,
        what: T,
        same: impl Fn(&T, &T) -> bool,
        now: SystemTime,
    ) -> Repeated<T> {
        match prev {
            Some(r) if same(&r.what, &what) => Repeated {
                what,
                count: r.count + 1,
                first: r.first,
                last: now,
            },
            _ => Repeated {
                what,
                count: 1,
                first: now,
                last: now,
            },
        }
    }
}

impl Troubles {
    /// Keeps what the speaker reported for `peer`.
    pub fn record(&mut self, peer: IpAddr, t: Trouble) {
        self.record_at(peer, t, SystemTime::now());
    }

    fn record_at(&mut self, peer: IpAddr, t: Trouble, now: SystemTime) {
        let p = self.by_peer.entry(peer).or_default();
        // How the latest connection ended replaces how earlier ones did, except that
        // a NOTIFICATION stays until the session is up: a peer backing off after one
        // may close or refuse the next connections, which says less.
        match t {
            Trouble::Connect(c) => {
                p.connect = Some(c);
                p.closed = None;
            }
            Trouble::Connected => p.connect = None,
            Trouble::Closed(state) => {
                p.connect = None;
                p.closed = Some(Repeated::next(p.closed.take(), state, |a, b| a == b, now));
            }
            Trouble::Notification(n) => {
                p.closed = None;
                let same = |a: &SessionTrouble, b: &SessionTrouble| a.same_as(b);
                p.notification = Some(Repeated::next(p.notification.take(), *n, same, now));
            }
        }
        self.by_peer
            .retain(|_, p| p.connect.is_some() || p.notification.is_some() || p.closed.is_some());
    }

    /// The peer's session is up: its troubles are over.
    pub fn session_up(&mut self, peer: IpAddr) {
        self.by_peer.remove(&peer);
    }

    /// Forgets the peers `keep` says are no longer configured.
    pub fn retain(&mut self, keep: impl Fn(&IpAddr) -> bool) {
        self.by_peer.retain(|a, _| keep(a));
    }
}

/// The findings the troubles make: one per peer for failing connects, one for the
/// latest NOTIFICATION (its own kind when it is about a duplicate router ID). Peers no
/// longer configured, or up, have none.
pub fn findings(s: &State) -> Vec<Finding> {
    let mut out = Vec::new();
    for (addr, t) in &s.troubles.by_peer {
        let Some(p) = s.peers.get(addr).filter(|p| !p.up) else {
            continue;
        };
        let subject = super::state::peer_subject(&p.intent);
        if let Some(c) = t.connect.as_ref().filter(|c| settled(s, c)) {
            out.push(connect_finding(&p.intent, &subject, c));
        }
        if let Some(n) = &t.notification {
            out.push(notification_finding(&p.intent, &subject, n));
        } else if let Some(c) = t.closed.as_ref().filter(|c| c.count >= 2) {
            // Once may be a peer restarting or settling a collision; every attempt
            // (the next one is an idle hold of 1-2 s later) is a peer refusing us.
            out.push(closed_finding(&p.intent, &subject, c));
        }
    }
    out
}

/// Connect failures that began this soon after tern started are shown only once a
/// second attempt failed too: peers started with this node (a lab, a rebooted rack)
/// often refuse the very first one, and that is no fault.
const STARTUP: Duration = Duration::from_secs(3);

fn settled(s: &State, c: &ConnectTrouble) -> bool {
    c.in_a_row >= 2
        || c.since
            .duration_since(s.started)
            .map_or(true, |d| d >= STARTUP)
}

fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn connect_finding(p: &PeerIntent, subject: &str, c: &ConnectTrouble) -> Finding {
    let to = format!("{}:{}", p.address, p.port);
    let failed = match c.attempts {
        1 => "1 attempt failed".to_string(),
        n => format!("{n} attempts failed"),
    };
    let counts = format!(
        "{} in a row; {failed} since {} (the session was not up since then), the last at {}",
        c.in_a_row,
        time(c.since),
        time(c.last)
    );
    let (kind, mut evidence, suggestion) = match &c.failure {
        ConnectFailure::TimedOut(waited) => (
            FindingKind::PeerNotAnswering,
            format!(
                "connect attempts to {to} got no answer within {} s (no SYN-ACK and no reset), {counts}",
                waited.as_secs().max(1)
            ),
            format!(
                "check that {} is the peer's address and the peer is up, and that no firewall (on this node, on the peer or in between) drops TCP port {}: BGP needs it open both ways",
                p.address, p.port
            ),
        ),
        ConnectFailure::Refused => (
            FindingKind::ConnectionRefused,
            format!(
                "connect attempts to {to} were refused (the host answered with a TCP reset: nothing listens on port {}), {counts}",
                p.port
            ),
            format!(
                "start BGP on {} (BIRD, FRR, GoBGP, calico-node), or make it listen on that address and port {}; if it listens on another port, give that port in the BGPPeer's peerIP ({}:PORT) or the BGPConfiguration's listenPort",
                p.address, p.port, p.address
            ),
        ),
        ConnectFailure::Other(why) => (
            FindingKind::PeerNotAnswering,
            format!(
                "connect attempts to {to} failed ({why}), {counts}"
            ),
            format!(
                "this node cannot reach {}: check its routes and interfaces towards it (`ip route get {}`) and the peer's address",
                p.address, p.address
            ),
        ),
    };
    if p.password.is_some() && kind == FindingKind::PeerNotAnswering {
        evidence.push_str("; a TCP-MD5 password is configured for this peer: a peer with another password (or none) drops our SYNs silently, so if the md5-mismatch finding is present too, it is the likely cause");
    }
    if let Some(hops) = p
        .ttl_security
        .filter(|_| kind == FindingKind::PeerNotAnswering)
    {
        evidence.push_str(&format!("; ttlSecurity is {hops}: answers from more than {hops} hop(s) away, or not sent with TTL 255, are dropped by this node's kernel"));
    }
    Finding {
        kind,
        subject: subject.to_string(),
        evidence,
        suggestion,
        severity: Severity::Error,
    }
}

/// ` (at T)`, or ` (N times since T0, the last at T)`.
fn times<T>(r: &Repeated<T>) -> String {
    if r.count == 1 {
        format!(" (at {})", time(r.last))
    } else {
        format!(
            " ({} times since {}, the last at {})",
            r.count,
            time(r.first),
            time(r.last)
        )
    }
}

fn closed_finding(p: &PeerIntent, subject: &str, r: &Repeated<FsmState>) -> Finding {
    let when = match r.what {
        FsmState::OpenConfirm => "after the OPEN exchange, before its first KEEPALIVE",
        _ => "without sending its OPEN",
    };
    let us = match p.source {
        Some(a) => format!("this node ({a}, AS {})", p.local_as),
        None => format!("this node (AS {})", p.local_as),
    };
    Finding {
        kind: FindingKind::ConnectionRefused,
        subject: subject.to_string(),
        evidence: format!(
            "the peer accepted the TCP connection on port {} but closed it {when}, with no NOTIFICATION{}; the session stays down",
            p.port,
            times(r)
        ),
        suggestion: format!(
            "the peer does not take this node as a neighbour: configure {us} as one on {} (BIRD logs \"Unexpected connect from unknown address\" for it), or check that it does not limit who may connect (an ACL, a passive-only neighbour, a connection limit)",
            p.address
        ),
        severity: Severity::Error,
    }
}

fn notification_finding(p: &PeerIntent, subject: &str, r: &Repeated<SessionTrouble>) -> Finding {
    let t = &r.what;
    let times = times(r);
    let kind = if t.is_duplicate_router_id() {
        FindingKind::DuplicateRouterId
    } else {
        FindingKind::Notification
    };
    Finding {
        kind,
        subject: subject.to_string(),
        evidence: format!("{t}{times}; the session stays down"),
        suggestion: suggestion(p, t),
        severity: Severity::Error,
    }
}

/// Where the AS configured for the peer is set.
fn remote_as_field(p: &PeerIntent) -> String {
    match (p.kind, &p.peer_node) {
        (PeerKind::Mesh, Some(n)) => format!(
            "the peer node {n}'s AS (its Node's spec.bgp.asNumber, else BGPConfiguration default's asNumber)"
        ),
        _ => format!("the asNumber of {}", p.origin),
    }
}

/// Where this node's AS towards the peer is set.
fn local_as_field(p: &PeerIntent) -> String {
    match p.kind {
        PeerKind::Mesh => "this node's AS (its Node's spec.bgp.asNumber, else BGPConfiguration default's asNumber)".into(),
        _ => format!(
            "this node's AS (the localASNumber of {}, else its Node's spec.bgp.asNumber or BGPConfiguration default's asNumber)",
            p.origin
        ),
    }
}

fn suggestion(p: &PeerIntent, t: &SessionTrouble) -> String {
    match (&t.detail, t.by) {
        (Detail::PeerAs { offered, expected }, _) => format!(
            "make the two agree: set {} to {offered}, or configure the peer with AS {expected}",
            remote_as_field(p)
        ),
        (Detail::OurAs { sent }, _) => format!(
            "the peer expects another AS than {sent} for this node: configure AS {sent} for this node's address on the peer (its neighbour's remote AS), or set {} to the AS the peer expects",
            local_as_field(p)
        ),
        (Detail::RouterId { router_id }, _) => format!(
            "give each node its own router ID: {router_id} is used twice; this node's is its Node's spec.bgp.ipv4Address unless tern.yaml's router_id (CALICO_ROUTER_ID) sets another; change the peer's router ID or this node's"
        ),
        (Detail::HoldTime { offered }, NoticedBy::Us) => format!(
            "the peer offers hold time {offered} s, which BGP forbids: set the peer's hold time to 0 or at least 3 s"
        ),
        (Detail::HoldTime { offered }, NoticedBy::Peer) => format!(
            "the peer does not accept our hold time of {offered} s: set the tern/hold-time annotation (mesh: tern/node-mesh-hold-time) to a value it accepts, or lower the peer's minimum"
        ),
        (Detail::Families { .. }, _) => "enable a family both sides carry: tern's tern/families annotation on the BGPPeer (default: the peer address's family) and the peer's address families".into(),
        (Detail::Capabilities { .. }, _) => "the peer requires a capability tern did not offer, or refuses one it did: change the peer's requirement (strict capability matching) or the session's settings that announce it".into(),
        (Detail::Version { .. }, _) => "the peer must speak BGP-4: check that the address is a BGP speaker's".into(),
        (Detail::HoldTimer { .. }, _) => format!(
            "the peer took the connection but did not finish the OPEN exchange: check that it has this node as a neighbour (AS {}) and that nothing in between cuts the connection",
            p.local_as
        ),
        (Detail::None, NoticedBy::Peer) => "the peer ended the session before it was up: its log says why; check that it has this node configured as a neighbour with the same AS numbers, password and address families".into(),
        (Detail::None, NoticedBy::Us) => "tern ended the session before it was up because of what the peer sent (the NOTIFICATION names the error): check the peer's BGP implementation and configuration".into(),
    }
}

#[cfg(test)]
mod tests;
