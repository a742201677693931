//! The null daemon: tern's decoder alone, in this process. It dials every simulated
//! peer, decodes every UPDATE with tern's codec and keeps a running prefix count, so a
//! bench shows how fast the injector can deliver at all.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use tern_bgp::wire::Message;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;

use super::inject::{handshake, keepalive, open_message, read_message, runtime};
use crate::netns::Netns;
use crate::{Error, Result};

/// The null daemon: dials every simulated peer from `local` addresses, decodes every
/// UPDATE with tern's codec and keeps a running prefix count.
#[derive(Debug)]
pub struct Sink {
    count: Arc<AtomicI64>,
    established: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Starts in `ns`, with AS `asn` and identifier `router_id`, dialing each of
    /// `peers` (address, port 179) from `local_v4` / `local_v6`.
    pub fn start(
        ns: &Netns,
        asn: u32,
        router_id: Ipv4Addr,
        local: Vec<IpAddr>,
        peers: Vec<IpAddr>,
    ) -> Result<Sink> {
        let count = Arc::new(AtomicI64::new(0));
        let established = Arc::new(AtomicUsize::new(0));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let ns_name = ns.name().to_string();
        let (c, e) = (count.clone(), established.clone());
        let thread = std::thread::Builder::new()
            .name("sink".into())
            .spawn(move || {
                let Ok(rt) = runtime(&ns_name) else { return };
                rt.block_on(async move {
                    let Ok(open) = open_message(asn, router_id) else {
                        return;
                    };
                    for p in peers {
                        let Some(src) = local.iter().find(|l| l.is_ipv4() == p.is_ipv4()).copied()
                        else {
                            continue;
                        };
                        let (c, e, open) = (c.clone(), e.clone(), open.clone());
                        tokio::spawn(async move {
                            let _ = sink_session(src, p, &open, &c, &e).await;
                        });
                    }
                    let _ = stop_rx.await;
                });
            })
            .map_err(|e| Error::Lab(format!("cannot start the sink thread: {e}")))?;
        Ok(Sink {
            count,
            established,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Prefixes currently held (announced minus withdrawn).
    pub fn count(&self) -> i64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Sessions established.
    pub fn established(&self) -> usize {
        self.established.load(Ordering::SeqCst)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn sink_session(
    src: IpAddr,
    peer: IpAddr,
    open: &Bytes,
    count: &AtomicI64,
    established: &AtomicUsize,
) -> std::result::Result<(), String> {
    let mut stream = None;
    for _ in 0..50 {
        match sock_connect(src, peer).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let stream = stream.ok_or_else(|| format!("cannot connect to {peer}"))?;
    let (mut rd, mut wr, mut buf) = handshake(stream, open).await?;
    established.fetch_add(1, Ordering::SeqCst);
    let ka = keepalive();
    let mut tick = tokio::time::interval(Duration::from_secs(20));
    loop {
        tokio::select! {
            m = read_message(&mut rd, &mut buf) => {
                if let Message::Update(u) = m? {
                    let delta = u.announced_count() as i64 - u.withdrawn_count() as i64;
                    count.fetch_add(delta, Ordering::SeqCst);
                }
            }
            _ = tick.tick() => { wr.write_all(&ka).await.map_err(|e| e.to_string())?; }
        }
    }
}

async fn sock_connect(src: IpAddr, peer: IpAddr) -> std::io::Result<TcpStream> {
    let sock = if peer.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.bind(SocketAddr::new(src, 0))?;
    sock.connect(SocketAddr::new(peer, 179)).await
}
