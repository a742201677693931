//! A raw BGP peer and a real tern speaker on loopback, for the tests that feed the
//! speaker hand-built bytes (`hostile_input.rs`, `limits.rs`): 127.0.0.N addresses on
//! distinct ports, no namespace, no kernel route. Every wait polls with a deadline.
#![allow(dead_code)] // each test file uses part of it

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ipnet::IpNet;
use tern_bgp::rib::Best;
use tern_bgp::speaker::{self, PeerConfig, SpeakerCommand, SpeakerConfig, SpeakerEvent};
use tern_bgp::wire::{frame_len, Capability, CodecOptions, Family, Message, Notification, Open};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;

#[path = "../../../tests/support/skip.rs"]
mod skip;

/// tern's BGP identifier: lower than every raw peer's, so a connection collision
/// decided by identifiers would favour the peer's side.
pub const TERN_ID: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
pub const AS: u32 = 64512;
/// Next hop the raw peers announce (a documentation address; nothing is installed).
pub const NH: [u8; 4] = [198, 51, 100, 200];

pub fn lo(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// Loopback is always there, but a sandbox may refuse binding 127.0.0.N: say so loudly.
pub fn loopback_usable(test: &str) -> bool {
    match std::net::TcpListener::bind((lo(77), 0)) {
        Ok(_) => true,
        Err(e) => {
            skip::skip(test, &format!("cannot bind 127.0.0.77: {e}"));
            false
        }
    }
}

// ---------------------------------------------------------------------------------
// The speaker under test.

pub struct Tern {
    pub cmd: mpsc::Sender<SpeakerCommand>,
    pub at: SocketAddr,
    /// "up A", "down A: reason", "refused A" lines, in order.
    pub log: Arc<Mutex<Vec<String>>>,
}

pub fn peer_config(n: u8, open_hold: Duration) -> PeerConfig {
    PeerConfig {
        // Long enough that no keepalive or hold timer fires during a case.
        hold_time: 30,
        connect_retry: Duration::from_secs(1),
        passive: true,
        open_hold_time: Some(open_hold),
        // The next hop of what tern originates toward these peers.
        local_v4: Some(TERN_ID),
        ..PeerConfig::new(SocketAddr::new(IpAddr::V4(lo(n)), 179), AS)
    }
}

impl Tern {
    pub async fn start(port: u16, peers: Vec<PeerConfig>) -> Tern {
        Tern::start_with(port, peers, None).await
    }

    /// A speaker holding at most `max_routes` paths from all peers.
    pub async fn start_with(port: u16, peers: Vec<PeerConfig>, max_routes: Option<u64>) -> Tern {
        let at = SocketAddr::new(IpAddr::V4(lo(1)), port);
        let (etx, mut erx) = mpsc::channel(1024);
        let cfg = SpeakerConfig {
            router_id: TERN_ID,
            local_as: AS,
            listen: Some(at),
            extra_listen: Vec::new(),
            cluster_id: None,
            max_paths: 1,
            peers,
            restarting: false,
            max_routes,
        };
        let cmd = speaker::spawn(cfg, etx)
            .await
            .unwrap_or_else(|e| panic!("speaker on {at}: {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&log);
        tokio::spawn(async move {
            while let Some(e) = erx.recv().await {
                let line = match e {
                    SpeakerEvent::PeerUp(a, _) => format!("up {}", a.ip()),
                    SpeakerEvent::PeerDown(a, why) => format!("down {}: {why}", a.ip()),
                    SpeakerEvent::Refused(a) => format!("refused {}", a.ip()),
                    SpeakerEvent::Rejected(a, why) => format!("rejected {}: {why}", a.ip()),
                    _ => continue,
                };
                if let Ok(mut v) = l.lock() {
                    v.push(line);
                }
            }
        });
        Tern { cmd, at, log }
    }

    pub async fn routes(&self) -> Vec<(IpNet, Best)> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.cmd.send(SpeakerCommand::Routes(tx)).await;
        rx.await.unwrap_or_default()
    }

    /// Polls the Loc-RIB until `prefix` is there (`Some`) or gone (`None`), up to `within`.
    pub async fn wait(
        &self,
        prefix: &str,
        present: bool,
        within: Duration,
    ) -> Result<Option<Best>, ()> {
        let end = Instant::now() + within;
        loop {
            let found = self
                .routes()
                .await
                .into_iter()
                .find(|(p, _)| p.to_string() == prefix)
                .map(|(_, b)| b);
            if found.is_some() == present {
                return Ok(found);
            }
            if Instant::now() > end {
                return Err(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn present(&self, prefix: &str, case: &str) -> Best {
        match self.wait(prefix, true, Duration::from_secs(3)).await {
            Ok(Some(b)) => b,
            _ => panic!(
                "{case}: {prefix} never reached the RIB; log: {:?}",
                self.log()
            ),
        }
    }

    pub async fn absent(&self, prefix: &str, case: &str, why: &str) {
        if self
            .wait(prefix, false, Duration::from_secs(3))
            .await
            .is_err()
        {
            panic!(
                "{case}: {prefix} is still in the RIB: {why}; log: {:?}",
                self.log()
            );
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().map(|v| v.clone()).unwrap_or_default()
    }

    pub fn logged(&self, line_start: &str) -> bool {
        self.log().iter().any(|l| l.starts_with(line_start))
    }

    pub async fn stop(self) {
        let _ = self.cmd.send(SpeakerCommand::Shutdown(None)).await;
    }
}

// ---------------------------------------------------------------------------------
// The raw peer.

// One value per read, matched at once: boxing the message would only cost clarity.
#[allow(clippy::large_enum_variant)]
pub enum Got {
    Msg(Message),
    /// Bytes that do not decode as a message (tern never sends those).
    Garbage(String),
    Closed,
    Timeout,
}

pub struct Raw {
    pub s: TcpStream,
    pub buf: BytesMut,
    pub from: Ipv4Addr,
}

impl Raw {
    pub async fn connect(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<Raw> {
        let sock = TcpSocket::new_v4()?;
        sock.bind(SocketAddr::new(IpAddr::V4(from), 0))?;
        let s = sock.connect(to).await?;
        s.set_nodelay(true)?;
        Ok(Raw {
            s,
            buf: BytesMut::new(),
            from,
        })
    }

    pub async fn send(&mut self, b: &[u8]) {
        if let Err(e) = self.s.write_all(b).await {
            panic!("peer {}: write failed: {e}", self.from);
        }
    }

    /// The next message from tern, or what happened instead within `within`.
    pub async fn next(&mut self, within: Duration) -> Got {
        let end = tokio::time::Instant::now() + within;
        loop {
            match frame_len(&self.buf, 65535) {
                Ok(Some(len)) if len <= self.buf.len() => {
                    let b = self.buf.split_to(len).freeze();
                    return match Message::decode(b, &CodecOptions::modern()) {
                        Ok(m) => Got::Msg(m),
                        Err(e) => Got::Garbage(e.to_string()),
                    };
                }
                Err(e) => return Got::Garbage(e.to_string()),
                _ => {}
            }
            match tokio::time::timeout_at(end, self.s.read_buf(&mut self.buf)).await {
                Err(_) => return Got::Timeout,
                Ok(Ok(0)) | Ok(Err(_)) => return Got::Closed,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Skips OPEN, KEEPALIVE and UPDATE until a NOTIFICATION; panics otherwise.
    pub async fn notification(&mut self, case: &str) -> Notification {
        loop {
            match self.next(Duration::from_secs(3)).await {
                Got::Msg(Message::Notification(n)) => return n,
                Got::Msg(_) => continue,
                Got::Garbage(e) => panic!("{case}: tern sent garbage: {e}"),
                Got::Closed => panic!("{case}: tern closed without a NOTIFICATION"),
                Got::Timeout => panic!("{case}: no NOTIFICATION within 3 s (session kept?)"),
            }
        }
    }

    /// After a NOTIFICATION: tern must close the connection.
    pub async fn closed(&mut self, case: &str) {
        loop {
            match self.next(Duration::from_secs(3)).await {
                Got::Closed => return,
                Got::Timeout => panic!("{case}: connection still open 3 s after the NOTIFICATION"),
                _ => continue,
            }
        }
    }

    /// Sends `open`, waits for tern's OPEN and KEEPALIVE, answers with a KEEPALIVE.
    pub async fn establish(from: Ipv4Addr, to: SocketAddr, open: &[u8], case: &str) -> Raw {
        let mut r = Raw::connect(from, to)
            .await
            .unwrap_or_else(|e| panic!("{case}: connect from {from} to {to}: {e}"));
        r.send(open).await;
        r.expect_open_keepalive(case).await;
        r.send(&keepalive()).await;
        r
    }

    pub async fn expect_open_keepalive(&mut self, case: &str) {
        let mut open = false;
        loop {
            match self.next(Duration::from_secs(3)).await {
                Got::Msg(Message::Open(_)) => open = true,
                Got::Msg(Message::Keepalive) if open => return,
                Got::Msg(Message::Notification(n)) => {
                    panic!("{case}: tern refused the session: NOTIFICATION {n}")
                }
                Got::Msg(m) => panic!("{case}: unexpected {} during the handshake", m.kind()),
                Got::Garbage(e) => panic!("{case}: garbage during the handshake: {e}"),
                Got::Closed => panic!("{case}: closed during the handshake"),
                Got::Timeout => panic!("{case}: handshake timed out"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Messages, built by hand.

pub fn peer_id(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 100 + n)
}

pub fn open_msg(asn: u32, hold: u16, id: Ipv4Addr, extra: Vec<Capability>) -> Vec<u8> {
    let mut caps = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
    ];
    caps.extend(extra);
    Message::Open(Open::new(asn, hold, id, caps))
        .encode(&CodecOptions::default())
        .map(|b| b.to_vec())
        .unwrap_or_else(|e| panic!("encoding an OPEN: {e}"))
}

pub fn good_open(n: u8) -> Vec<u8> {
    open_msg(AS, 30, peer_id(n), Vec::new())
}

pub fn keepalive() -> Vec<u8> {
    Message::Keepalive
        .encode(&CodecOptions::default())
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

pub fn header(ty: u8, body: &[u8]) -> Vec<u8> {
    let len = (19 + body.len()).min(usize::from(u16::MAX)) as u16;
    let mut m = vec![0xff; 16];
    m.extend(len.to_be_bytes());
    m.push(ty);
    m.extend_from_slice(body);
    m
}

pub const WK: u8 = 0x40; // well-known (transitive)
pub const OPT: u8 = 0x80; // optional non-transitive
pub const OT: u8 = 0xc0; // optional transitive

pub fn attr(flags: u8, code: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags, code];
    if value.len() > 255 {
        a[0] |= 0x10;
        a.extend((value.len() as u16).to_be_bytes());
    } else {
        a.push(value.len() as u8);
    }
    a.extend_from_slice(value);
    a
}

pub fn origin(v: u8) -> Vec<u8> {
    attr(WK, 1, &[v])
}

pub fn as_path(asns: &[u32]) -> Vec<u8> {
    let mut v = vec![2, asns.len() as u8];
    asns.iter().for_each(|a| v.extend(a.to_be_bytes()));
    attr(WK, 2, &v)
}

pub fn next_hop(a: [u8; 4]) -> Vec<u8> {
    attr(WK, 3, &a)
}

pub fn communities(c: &[u32]) -> Vec<u8> {
    let v: Vec<u8> = c.iter().flat_map(|x| x.to_be_bytes()).collect();
    attr(OT, 8, &v)
}

/// MULTI_EXIT_DISC 77: marks the attribute-discard cases' UPDATEs, so a check cannot
/// pass on the earlier valid announcement of the same prefix.
pub fn med77() -> Vec<u8> {
    attr(OPT, 4, &77u32.to_be_bytes())
}

pub fn good_attrs() -> Vec<u8> {
    [origin(0), as_path(&[65001]), next_hop(NH)].concat()
}

pub fn update(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut body = (withdrawn.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(withdrawn);
    body.extend((attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(attrs);
    body.extend_from_slice(nlri);
    header(2, &body)
}

/// NLRI of 198.18.c.0/24.
pub fn v4(c: u8) -> Vec<u8> {
    vec![24, 198, 18, c]
}

pub fn v4s(c: u8) -> String {
    format!("198.18.{c}.0/24")
}

/// NLRI of 2001:db8:c::/48.
pub fn v6(c: u8) -> Vec<u8> {
    vec![48, 0x20, 0x01, 0x0d, 0xb8, 0, c]
}

pub fn v6s(c: u8) -> String {
    format!(
        "{}/48",
        Ipv6Addr::new(0x2001, 0xdb8, u16::from(c), 0, 0, 0, 0, 0)
    )
}

pub const NH6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0,
];

pub fn mp_reach_v6(nh: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 2, 1, nh.len() as u8];
    v.extend_from_slice(nh);
    v.push(0);
    v.extend_from_slice(nlri);
    attr(OPT, 14, &v)
}
