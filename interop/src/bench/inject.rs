//! The benchmark's BGP load. [`Injector`] simulates any number of BGP peers from one
//! namespace: it listens on port 179, answers the daemon under test's connections with
//! an OPEN, and writes pre-encoded UPDATE streams (announce everything, withdraw
//! everything, flap a churn set) as fast as the daemon reads them. [`super::sink::Sink`] is
//! the other end done by nothing but tern's codec: it dials the injector, decodes every
//! UPDATE and counts prefixes, which gives the injector's own ceiling.
//!
//! Hand-written on `tern_bgp::wire` rather than driving GoBGP or ExaBGP: those need
//! seconds (ExaBGP minutes) to emit a million prefixes and would be the bottleneck;
//! here every UPDATE is encoded before the clock starts, so a run measures the daemon.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ipnet::IpNet;
use tern_bgp::wire::{
    self, pack, AsPath, Capability, CodecOptions, Family, GracefulRestart, GracefulRestartFamily,
    Message, MpNextHop, Nlri, Open, PathAttributes, Update,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify};

use super::reflect::{Held, Universe};
use crate::netns::Netns;
use crate::{Error, Result};

/// What the simulated peers have announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing yet (sessions up, no UPDATE sent).
    Idle,
    /// The whole table.
    Full,
    /// Everything withdrawn.
    Empty,
    /// The whole table but the churn set.
    ChurnOut,
}

/// One simulated peer with its pre-encoded streams.
#[derive(Debug, Clone)]
pub struct FeedPeer {
    /// Its address (the daemon under test dials it).
    pub address: IpAddr,
    /// Its BGP identifier.
    pub router_id: Ipv4Addr,
    /// Its AS.
    pub asn: u32,
    /// UPDATEs announcing the whole table.
    pub announce: Bytes,
    /// End-of-RIB for its family.
    pub end_of_rib: Bytes,
    /// UPDATEs withdrawing the whole table.
    pub withdraw: Bytes,
    /// UPDATEs withdrawing the churn set.
    pub churn_out: Bytes,
    /// UPDATEs announcing the churn set again.
    pub churn_in: Bytes,
    /// UPDATEs announcing the table without the churn set (what a fresh session gets
    /// while the churn set is out).
    pub announce_base: Bytes,
    /// Prefixes in the table.
    pub prefixes: usize,
}

fn concat(msgs: &[Bytes]) -> Bytes {
    let mut b = BytesMut::with_capacity(msgs.iter().map(Bytes::len).sum());
    for m in msgs {
        b.extend_from_slice(m);
    }
    b.freeze()
}

fn enc(what: &str) -> impl FnOnce(wire::EncodeError) -> Error + '_ {
    move |e| Error::Lab(format!("encoding {what}: {e}"))
}

impl FeedPeer {
    /// Encodes a peer at `address` (AS `asn`, eBGP when `ebgp`) announcing `table`
    /// with itself as next hop; the last `churn` prefixes of the table form the churn
    /// set. All prefixes must be of `address`'s family.
    pub fn build(
        address: IpAddr,
        router_id: Ipv4Addr,
        asn: u32,
        ebgp: bool,
        table: &[IpNet],
        churn: usize,
    ) -> Result<FeedPeer> {
        let opts = CodecOptions::modern();
        let (family, next_hop, nh4) = match address {
            IpAddr::V4(a) => (Family::IPV4_UNICAST, pack::NextHop::Classic, Some(a)),
            IpAddr::V6(a) => (
                Family::IPV6_UNICAST,
                pack::NextHop::Mp(MpNextHop::V6 {
                    global: a,
                    link_local: None,
                }),
                None,
            ),
        };
        if let Some(p) = table
            .iter()
            .find(|p| p.addr().is_ipv4() != address.is_ipv4())
        {
            return Err(Error::Spec(format!(
                "prefix {p} is not of the family of peer {address}"
            )));
        }
        let attrs = PathAttributes {
            origin: Some(wire::attribute::Origin::Igp),
            as_path: Some(if ebgp {
                AsPath::from_sequence([asn])
            } else {
                AsPath::default()
            }),
            next_hop: nh4,
            local_pref: (!ebgp).then_some(100),
            ..PathAttributes::default()
        };
        let nlri: Vec<Nlri> = table.iter().map(|p| Nlri::new(*p)).collect();
        let churn_nlri = nlri.get(nlri.len().saturating_sub(churn)..).unwrap_or(&[]);
        let mut out = Vec::new();
        pack::announcements(&attrs, family, &next_hop, &nlri, &opts, &mut out)
            .map_err(enc("announcements"))?;
        let announce = concat(&out);
        out.clear();
        pack::withdrawals(family, &nlri, &opts, &mut out).map_err(enc("withdrawals"))?;
        let withdraw = concat(&out);
        out.clear();
        pack::withdrawals(family, churn_nlri, &opts, &mut out).map_err(enc("churn"))?;
        let churn_out = concat(&out);
        out.clear();
        pack::announcements(&attrs, family, &next_hop, churn_nlri, &opts, &mut out)
            .map_err(enc("churn"))?;
        let churn_in = concat(&out);
        let announce_base = if churn == 0 {
            announce.clone()
        } else {
            out.clear();
            let base = nlri.get(..nlri.len().saturating_sub(churn)).unwrap_or(&[]);
            pack::announcements(&attrs, family, &next_hop, base, &opts, &mut out)
                .map_err(enc("announcements"))?;
            concat(&out)
        };
        let end_of_rib = Message::Update(Update::end_of_rib(family))
            .encode(&opts)
            .map_err(enc("End-of-RIB"))?;
        Ok(FeedPeer {
            address,
            router_id,
            asn,
            announce,
            end_of_rib,
            withdraw,
            churn_out,
            churn_in,
            announce_base,
            prefixes: table.len(),
        })
    }

    /// What to write to go from `from` to `to`.
    fn transition(&self, from: Phase, to: Phase) -> Vec<&Bytes> {
        use Phase::*;
        match (from, to) {
            (a, b) if a == b => vec![],
            (_, Idle) => vec![],
            (Idle | Empty, Full) => vec![&self.announce],
            (Idle | Empty, ChurnOut) => vec![&self.announce_base],
            (Idle, Empty) => vec![],
            (Full | ChurnOut, Empty) => vec![&self.withdraw],
            (Full, ChurnOut) => vec![&self.churn_out],
            (ChurnOut, Full) => vec![&self.churn_in],
            _ => vec![],
        }
    }
}

/// The OPEN a simulated peer (or the sink) sends: IPv4 and IPv6 unicast, route
/// refresh, 4-octet AS, graceful restart (helpers are the norm in Calico clusters).
pub(super) fn open_message(asn: u32, router_id: Ipv4Addr) -> Result<Bytes> {
    let fams = [Family::IPV4_UNICAST, Family::IPV6_UNICAST];
    let mut caps: Vec<Capability> = fams.iter().map(|f| Capability::Multiprotocol(*f)).collect();
    caps.push(Capability::RouteRefresh);
    caps.push(Capability::GracefulRestart(GracefulRestart {
        restart_state: false,
        notification: false,
        restart_time: 120,
        families: fams
            .iter()
            .map(|f| GracefulRestartFamily {
                family: *f,
                forwarding_preserved: false,
            })
            .collect(),
    }));
    Message::Open(Open::new(asn, 90, router_id, caps))
        .encode(&CodecOptions::modern())
        .map_err(enc("OPEN"))
}

pub(super) fn keepalive() -> Bytes {
    Message::Keepalive
        .encode(&CodecOptions::modern())
        .unwrap_or_default()
}

/// Reads one message (extended lengths allowed: the reader never rejects a size).
pub(super) async fn read_message(
    rd: &mut OwnedReadHalf,
    buf: &mut BytesMut,
) -> std::result::Result<Message, String> {
    loop {
        match wire::frame_len(buf, wire::MAX_EXTENDED_MESSAGE_LEN) {
            Ok(Some(len)) if buf.len() >= len => {
                let frame = buf.split_to(len).freeze();
                return Message::decode(frame, &CodecOptions::modern()).map_err(|e| e.to_string());
            }
            Err(e) => return Err(e.to_string()),
            _ => {}
        }
        let n = rd.read_buf(buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
    }
}

/// OPEN, KEEPALIVE both ways; our OPEN is written first.
pub(super) async fn handshake(
    stream: TcpStream,
    open: &Bytes,
) -> std::result::Result<(OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf, BytesMut), String> {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    wr.write_all(open).await.map_err(|e| e.to_string())?;
    let mut buf = BytesMut::with_capacity(1 << 16);
    let mut got_open = false;
    loop {
        match read_message(&mut rd, &mut buf).await? {
            Message::Open(_) => {
                got_open = true;
                wr.write_all(&keepalive())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Message::Keepalive if got_open => return Ok((rd, wr, buf)),
            Message::Notification(n) => return Err(format!("NOTIFICATION {n:?}")),
            _ => {}
        }
    }
}

/// State the injector's tasks share with the runner.
#[derive(Debug, Default)]
struct Shared {
    established: AtomicUsize,
    /// Per peer: the last phase sequence number fully written, and when.
    written: Mutex<Vec<(u64, Option<Instant>)>>,
    errors: Mutex<Vec<String>>,
    /// The load, when the peers count what the daemon sends them (a reflector run).
    universe: Option<Arc<Universe>>,
    /// Per peer: distinct prefixes of the load it holds from the daemon.
    held: Vec<AtomicUsize>,
    /// Prefixes received that are not in the load, all peers together.
    unknown: AtomicUsize,
}

impl Shared {
    fn error(&self, e: String) {
        if let Ok(mut v) = self.errors.lock() {
            if v.len() < 20 {
                v.push(e);
            }
        }
    }
}

/// Simulated peers in a namespace of their own (see the module doc).
#[derive(Debug)]
pub struct Injector {
    tx: watch::Sender<(u64, Phase)>,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    seq: u64,
}

impl Injector {
    /// Starts the peers in `ns`, listening on port 179 of every address (their
    /// addresses must be configured there already). Returns once listening.
    pub fn start(ns: &Netns, peers: Vec<FeedPeer>) -> Result<Injector> {
        Injector::start_counting(ns, peers, None)
    }

    /// [`Injector::start`]; with a `universe`, each peer also decodes what the daemon
    /// sends it and keeps which prefixes of the universe it holds ([`Injector::held`]).
    pub fn start_counting(
        ns: &Netns,
        peers: Vec<FeedPeer>,
        universe: Option<Arc<Universe>>,
    ) -> Result<Injector> {
        let shared = Arc::new(Shared {
            written: Mutex::new(vec![(0, None); peers.len()]),
            held: peers.iter().map(|_| AtomicUsize::new(0)).collect(),
            universe,
            ..Shared::default()
        });
        let (tx, rx) = watch::channel((0u64, Phase::Idle));
        let (stop_tx, stop_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let ns_name = ns.name().to_string();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("injector".into())
            .spawn(move || {
                let r = run_injector(&ns_name, peers, sh, rx, stop_rx, &ready_tx);
                if let Err(e) = r {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| Error::Lab(format!("cannot start the injector thread: {e}")))?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Error::Lab(format!("injector: {e}"))),
            Err(_) => return Err(Error::Lab("injector did not start in 10 s".into())),
        }
        Ok(Injector {
            tx,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
            seq: 0,
        })
    }

    /// Sessions currently established.
    pub fn established(&self) -> usize {
        self.shared.established.load(Ordering::SeqCst)
    }

    /// Switches every peer to `phase`; returns the phase's sequence number and the
    /// instant it was ordered (the start of the measurement).
    pub fn set_phase(&mut self, phase: Phase) -> (u64, Instant) {
        self.seq += 1;
        let t = Instant::now();
        let _ = self.tx.send((self.seq, phase));
        (self.seq, t)
    }

    /// When every peer had written phase `seq` to its socket (the last of them), if
    /// all have.
    pub fn written(&self, seq: u64) -> Option<Instant> {
        let w = self.shared.written.lock().ok()?;
        let mut last = None;
        for (s, t) in w.iter() {
            if *s < seq {
                return None;
            }
            last = last.max(*t);
        }
        last
    }

    /// In a counting run: the prefixes of other peers that peers still miss, all
    /// together (0: each holds every other's), and those they hold.
    pub fn reflected(&self) -> Option<(usize, usize)> {
        let u = self.shared.universe.as_ref()?;
        let (mut missing, mut held) = (0, 0);
        for (i, h) in self.shared.held.iter().enumerate() {
            let h = h.load(Ordering::Relaxed);
            missing += u.expected(i).saturating_sub(h);
            held += h;
        }
        Some((missing, held))
    }

    /// Prefixes peers received that are not in the universe.
    pub fn unknown_received(&self) -> usize {
        self.shared.unknown.load(Ordering::Relaxed)
    }

    /// Errors the sessions met (at most 20).
    pub fn errors(&self) -> Vec<String> {
        self.shared
            .errors
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(super) fn runtime(ns_name: &str) -> std::result::Result<tokio::runtime::Runtime, String> {
    crate::netns::enter_thread(ns_name).map_err(|e| e.to_string())?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn run_injector(
    ns_name: &str,
    peers: Vec<FeedPeer>,
    shared: Arc<Shared>,
    rx: watch::Receiver<(u64, Phase)>,
    stop: oneshot::Receiver<()>,
    ready: &std::sync::mpsc::Sender<std::result::Result<(), String>>,
) -> std::result::Result<(), String> {
    let rt = runtime(ns_name)?;
    rt.block_on(async move {
        // Dual stack: IPv4 connections arrive as v4-mapped addresses.
        let listener = TcpListener::bind(SocketAddr::from(([0u16; 8], 179)))
            .await
            .map_err(|e| format!("listen on [::]:179: {e}"))?;
        let mut by_addr = HashMap::new();
        let peers: Vec<Arc<FeedPeer>> = peers.into_iter().map(Arc::new).collect();
        for (i, p) in peers.iter().enumerate() {
            by_addr.insert(p.address, i);
        }
        let _ = ready.send(Ok(()));
        let accept = async {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let local = stream.local_addr().map(|a| a.ip().to_canonical());
                let Some(&i) = local.as_ref().ok().and_then(|a| by_addr.get(a)) else {
                    continue;
                };
                let Some(peer) = peers.get(i).cloned() else {
                    continue;
                };
                let (sh, rx) = (shared.clone(), rx.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(stream, peer.clone(), i, sh.clone(), rx).await {
                        sh.error(format!("peer {}: {e}", peer.address));
                    }
                });
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = stop => {}
        }
        Ok(())
    })
}

async fn serve(
    stream: TcpStream,
    peer: Arc<FeedPeer>,
    index: usize,
    shared: Arc<Shared>,
    mut rx: watch::Receiver<(u64, Phase)>,
) -> std::result::Result<(), String> {
    let open = open_message(peer.asn, peer.router_id).map_err(|e| e.to_string())?;
    let (mut rd, mut wr, mut buf) = handshake(stream, &open).await?;
    shared.established.fetch_add(1, Ordering::SeqCst);
    let closed = Arc::new(Notify::new());
    let c = closed.clone();
    let sh = shared.clone();
    // Whatever the daemon sends is read (and counted, in a reflector run) at once, so
    // it never blocks on us.
    tokio::spawn(async move {
        match sh.universe.clone() {
            Some(u) => {
                let mut held = Held::new(&u, index);
                while let Ok(m) = read_message(&mut rd, &mut buf).await {
                    if let Message::Update(up) = m {
                        let unknown = held.unknown;
                        held.apply(&u, &up);
                        if let Some(h) = sh.held.get(index) {
                            h.store(held.count(), Ordering::Relaxed);
                        }
                        sh.unknown
                            .fetch_add(held.unknown - unknown, Ordering::Relaxed);
                    }
                }
            }
            None => {
                let mut b = vec![0u8; 1 << 16];
                while let Ok(n) = rd.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
        c.notify_one();
    });
    let ka = keepalive();
    let mut tick = tokio::time::interval(Duration::from_secs(20));
    tick.tick().await;
    let mut sent = Phase::Idle;
    let mut eor_sent = false;
    let result = async {
        loop {
            let (seq, want) = *rx.borrow_and_update();
            for chunk in peer.transition(sent, want) {
                wr.write_all(chunk).await.map_err(|e| e.to_string())?;
            }
            if want != Phase::Idle && !eor_sent {
                wr.write_all(&peer.end_of_rib).await.map_err(|e| e.to_string())?;
                eor_sent = true;
            }
            sent = want;
            if let Ok(mut w) = shared.written.lock() {
                if let Some(slot) = w.get_mut(index) {
                    *slot = (seq, Some(Instant::now()));
                }
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return Ok(()) },
                _ = tick.tick() => { wr.write_all(&ka).await.map_err(|e| e.to_string())?; }
                _ = closed.notified() => return Err::<(), String>("the daemon closed the session".into()),
            }
        }
    }
    .await;
    shared.established.fetch_sub(1, Ordering::SeqCst);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(stream: &Bytes) -> (usize, usize) {
        let mut buf = BytesMut::from(&stream[..]);
        let (mut ann, mut wd) = (0, 0);
        while let Ok(Some(len)) = wire::frame_len(&buf, wire::MAX_EXTENDED_MESSAGE_LEN) {
            let frame = buf.split_to(len).freeze();
            if let Ok(Message::Update(u)) = Message::decode(frame, &CodecOptions::modern()) {
                ann += u.announced_count();
                wd += u.withdrawn_count();
            }
        }
        (ann, wd)
    }

    #[test]
    fn a_fresh_session_in_churn_out_gets_only_the_base_table() {
        let table: Vec<IpNet> = (0..100u32)
            .map(|i| IpNet::new(IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i)), 32).unwrap())
            .collect();
        let p = FeedPeer::build(
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 100)),
            Ipv4Addr::new(198, 51, 100, 100),
            65001,
            true,
            &table,
            30,
        )
        .unwrap();
        let sent = |from, to| {
            p.transition(from, to)
                .into_iter()
                .map(count)
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        };
        assert_eq!(sent(Phase::Idle, Phase::ChurnOut), (70, 0));
        assert_eq!(sent(Phase::Idle, Phase::Full), (100, 0));
        assert_eq!(sent(Phase::Full, Phase::ChurnOut), (0, 30));
        assert_eq!(sent(Phase::ChurnOut, Phase::Full), (30, 0));
        let all = FeedPeer::build(p.address, p.router_id, 65001, true, &table, 0).unwrap();
        assert_eq!(all.announce_base, all.announce);
    }
}
