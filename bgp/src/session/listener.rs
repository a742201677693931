//! The passive side: TCP listening sockets that hand each accepted connection to the
//! session of its source address. A connection from an address that is not a
//! configured peer is closed at once and reported once as data (the daemon logs it),
//! so a scanner cannot cause an error storm.
//!
//! One socket per address family, never a dual-stack one: the IPv6 wildcard `[::]`
//! stands for both families and binds `[::]` with `IPV6_V6ONLY` set plus `0.0.0.0` on
//! the same port (`bindMode: NodeIP` binds each node address, one per family, the
//! same way). Why not one dual-stack socket: whether `[::]` takes IPv4 differs by
//! system (Windows: never by default; Linux: `net.ipv6.bindv6only`), and on it an
//! IPv4 peer is an IPv4-mapped IPv6 address, so its TCP-MD5 key, its minimum TTL and
//! its outgoing TTL each need the mapped form or the IPv4 option on an IPv6 socket.
//! With a socket per family each peer meets a socket of its own family, so keys and
//! GTSM options are set exactly as for a dialled connection, on every system.
//!
//! The listening sockets send with TTL (hop limit) 255: the kernel answers a SYN from
//! the listening socket, and a GTSM peer (RFC 5082) drops a SYN-ACK that arrives with
//! less. The minimum TTL is per peer, so it is set on the accepted connection (by the
//! session, which knows the peer's `ttlSecurity`), and the SYN the connection was
//! opened with is kept (Linux `TCP_SAVE_SYN`) so the session can check the TTL the
//! peer's first segment arrived with and say why it refuses a peer that is too far.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, RwLock};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{sockopt, Command, SessionHandle};

/// A connection the listener refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Who connected.
    pub from: SocketAddr,
}

/// Bound listening sockets and the sessions they serve.
#[derive(Debug)]
pub struct Listener {
    /// At least one socket; the first is the main address.
    listeners: Vec<TcpListener>,
    peers: Arc<RwLock<HashMap<IpAddr, SessionHandle>>>,
}

/// An IPv4 peer could only reach an IPv6 socket IPv4-mapped; the sockets are
/// per family, but a source is still keyed by its plain address in case one is seen.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The sockets `addrs` stand for: the IPv6 wildcard is both families' wildcards;
/// each address once.
fn expand(addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for a in addrs {
        let mut add = |a: SocketAddr| {
            if !out.contains(&a) {
                out.push(a);
            }
        };
        add(*a);
        if let IpAddr::V6(ip) = a.ip() {
            if ip.is_unspecified() {
                add(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), a.port()));
            }
        }
    }
    out
}

impl Listener {
    /// Binds and listens on `addr` (e.g. `0.0.0.0:179` or `[::]:179`).
    pub fn bind(addr: SocketAddr) -> io::Result<Listener> {
        Listener::bind_all(&[addr])
    }

    /// Binds and listens on each of `addrs` (e.g. a node's IPv4 and IPv6 address);
    /// an error names the address that could not be bound.
    pub fn bind_all(addrs: &[SocketAddr]) -> io::Result<Listener> {
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no address to listen on",
            ));
        }
        let mut listeners: Vec<TcpListener> = Vec::new();
        for a in expand(addrs) {
            // Port 0 (tests): the IPv4 wildcard takes the port the IPv6 one got, so
            // `[::]:0` is one port in both families.
            let a = match (a, listeners.last().map(TcpListener::local_addr)) {
                (SocketAddr::V4(v4), Some(Ok(prev)))
                    if v4.port() == 0 && v4.ip().is_unspecified() && prev.ip().is_unspecified() =>
                {
                    SocketAddr::new(IpAddr::V4(*v4.ip()), prev.port())
                }
                _ => a,
            };
            let l = listen_on(a).map_err(|e| io::Error::new(e.kind(), format!("{a}: {e}")))?;
            listeners.push(l);
        }
        Ok(Listener {
            listeners,
            peers: Arc::new(RwLock::new(HashMap::new())),
        })
    }

    /// The address actually bound by the first socket (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.local_addrs()?
            .first()
            .copied()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no listening socket"))
    }

    /// The addresses actually bound, in the order given.
    pub fn local_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        self.listeners.iter().map(TcpListener::local_addr).collect()
    }

    /// Accepts connections from `handle.peer`'s address, signed with `password` if set
    /// (TCP-MD5 must be configured on the listening socket before the peer's SYN): the
    /// key goes on every socket of the peer's family. An error names the socket.
    pub fn add_peer(&self, handle: SessionHandle, password: Option<&str>) -> io::Result<()> {
        let peer = canonical(handle.peer.ip());
        if let Some(pw) = password {
            for l in &self.listeners {
                let at = l.local_addr()?;
                if at.is_ipv4() == peer.is_ipv4() {
                    sockopt::set_md5(l, peer, pw).map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("TCP-MD5 key for {peer} on the listening socket {at}: {e}"),
                        )
                    })?;
                }
            }
        }
        if let Ok(mut map) = self.peers.write() {
            map.insert(peer, handle);
        }
        Ok(())
    }

    /// Stops accepting connections from `peer`.
    pub fn remove_peer(&self, peer: IpAddr) {
        if let Ok(mut map) = self.peers.write() {
            map.remove(&canonical(peer));
        }
    }

    /// Runs the accept loop until the task is dropped; refused connections are
    /// reported on `refused` (dropped if that channel is full). Shared (`Arc`) so the
    /// owner can still add and remove peers while it runs.
    pub async fn run(self: Arc<Self>, refused: mpsc::Sender<Refused>) {
        // One accept loop per socket; dropping this future drops the set, which
        // aborts them.
        let mut loops = JoinSet::new();
        for i in 0..self.listeners.len() {
            loops.spawn(Arc::clone(&self).accept_loop(i, refused.clone()));
        }
        while loops.join_next().await.is_some() {}
    }

    /// Accepts on socket `i` until the task is aborted.
    async fn accept_loop(self: Arc<Self>, i: usize, refused: mpsc::Sender<Refused>) {
        let Some(listener) = self.listeners.get(i) else {
            return;
        };
        loop {
            let Ok((stream, from)) = listener.accept().await else {
                continue;
            };
            let handle = self
                .peers
                .read()
                .ok()
                .and_then(|m| m.get(&canonical(from.ip())).cloned());
            match handle {
                Some(h) => {
                    // Never wait on one session here: a session whose peer stopped
                    // reading takes no commands until its send hold timer fires, and
                    // waiting would keep every other peer from connecting. Its new
                    // connection is closed instead (the peer retries); so is one for
                    // a session that has ended.
                    let _ = h.try_send(Command::Incoming(stream));
                }
                None => {
                    drop(stream);
                    let _ = refused.try_send(Refused { from });
                }
            }
        }
    }
}

/// A listening socket on `addr`: IPv6 only if IPv6, sending with TTL 255, keeping
/// SYNs (see the module doc).
fn listen_on(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // Not on Windows, where SO_REUSEADDR lets another process take over the port.
    #[cfg(unix)]
    sock.set_reuseaddr(true)?;
    #[cfg(target_os = "linux")]
    {
        if addr.is_ipv6() {
            sockopt::set_v6only(&sock, true)?;
        }
        // The options name the socket's own family.
        let family = match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        };
        sockopt::set_ttl_out(&sock, family)?;
        sockopt::save_syn(&sock)?;
    }
    // Windows' IPv6 sockets are IPv6-only unless told otherwise, which is what we want.
    sock.bind(addr)?;
    sock.listen(1024)
}

/// Unit tests; those of TCP-MD5 and the saved SYN are Linux only, the rest also run
/// under Wine.
#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::unwrap_used)] // a test helper: a bad literal is the test failing
    fn handle(peer: &str) -> (SessionHandle, mpsc::Receiver<Command>) {
        let (tx, rx) = mpsc::channel(4);
        let peer = peer.parse().unwrap();
        (
            SessionHandle {
                peer,
                tx,
                messages: Default::default(),
            },
            rx,
        )
    }

    /// The IPv6 wildcard binds both families on one port, each socket of its own
    /// family, and the TCP-MD5 keys of IPv4 and IPv6 peers both go in (an IPv4 key on
    /// a dual-stack socket was refused with EINVAL).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_ipv6_wildcard_is_a_socket_per_family_with_keys_for_both() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_rt = rt.enter();
        let l = Listener::bind("[::]:0".parse().unwrap()).unwrap();
        let at = l.local_addrs().unwrap();
        assert_eq!(at.len(), 2, "{at:?}");
        assert!(at[0].is_ipv6() && at[1].is_ipv4(), "{at:?}");
        assert_eq!(at[0].port(), at[1].port());
        let (h4, _rx4) = handle("198.51.100.1:179");
        let (h6, _rx6) = handle("[2001:db8::1]:179");
        l.add_peer(h4, Some("pw4")).unwrap();
        l.add_peer(h6, Some("pw6")).unwrap();
        // A plain IPv4 key on the IPv6 socket is what the kernel refuses: the listener
        // must never do it.
        assert!(sockopt::set_md5(&l.listeners[0], "198.51.100.1".parse().unwrap(), "x").is_err());
    }

    /// Signed clients of both families connect to the wildcard pair: each socket
    /// holds the key of its family's peer (a socket without it drops the SYN).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn signed_clients_of_both_families_connect() {
        let l = Listener::bind("[::]:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        let (h4, mut rx4) = handle("127.0.0.1:179");
        let (h6, mut rx6) = handle("[::1]:179");
        l.add_peer(h4, Some("pw4")).unwrap();
        l.add_peer(h6, Some("pw6")).unwrap();
        let (rtx, _rrx) = mpsc::channel(4);
        let run = tokio::spawn(Arc::new(l).run(rtx));
        for (to, pw, rx) in [("127.0.0.1", "pw4", &mut rx4), ("::1", "pw6", &mut rx6)] {
            let ip: IpAddr = to.parse().unwrap();
            let sock = if ip.is_ipv4() {
                TcpSocket::new_v4().unwrap()
            } else {
                TcpSocket::new_v6().unwrap()
            };
            sockopt::set_md5(&sock, ip, pw).unwrap();
            let c = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                sock.connect(SocketAddr::new(ip, port)),
            )
            .await;
            assert!(matches!(c, Ok(Ok(_))), "{to}: {c:?}");
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv()).await;
            assert!(matches!(got, Ok(Some(Command::Incoming(_)))), "{to}");
        }
        run.abort();
    }

    /// An IPv4 client reaches the IPv4 socket of the wildcard pair (the IPv6 one is
    /// IPv6-only), an IPv6 client the IPv6 one: each session gets its connection. On
    /// Windows (Wine) this is the case that failed: `[::]` alone refused IPv4 peers.
    #[tokio::test]
    async fn ipv4_peers_dial_in_to_the_ipv6_wildcard() {
        let l = Listener::bind("[::]:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        let (h4, mut rx4) = handle("127.0.0.1:179");
        let (h6, mut rx6) = handle("[::1]:179");
        l.add_peer(h4, None).unwrap();
        l.add_peer(h6, None).unwrap();
        let (rtx, _rrx) = mpsc::channel(4);
        let run = tokio::spawn(Arc::new(l).run(rtx));
        let c = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        assert!(c.local_addr().unwrap().is_ipv4());
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), rx4.recv()).await;
        let Ok(Some(Command::Incoming(s))) = got else {
            panic!("no connection for the IPv4 peer: {got:?}");
        };
        assert!(
            s.local_addr().unwrap().is_ipv4(),
            "accepted on the IPv4 socket"
        );
        // The SYN was kept: it came over loopback with the default TTL (64 on Linux).
        #[cfg(target_os = "linux")]
        assert!(sockopt::syn_ttl(&s).is_some_and(|t| t > 1));
        // And an IPv6 client the IPv6 one.
        let _c6 = tokio::net::TcpStream::connect(("::1", port)).await.unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), rx6.recv()).await;
        assert!(matches!(got, Ok(Some(Command::Incoming(_)))), "IPv6 peer");
        run.abort();
    }

    /// Two sockets, one per family (bindMode NodeIP on a dual-stack node): a
    /// connection to either reaches the peer's session; one from an unknown address
    /// is refused.
    #[tokio::test]
    async fn each_bound_address_accepts_its_peers() {
        let l = Listener::bind_all(&["127.0.0.1:0".parse().unwrap(), "[::1]:0".parse().unwrap()])
            .unwrap();
        let at = l.local_addrs().unwrap();
        assert_eq!(at.len(), 2);
        let (h4, mut rx4) = handle("127.0.0.1:179");
        let (h6, mut rx6) = handle("[::1]:179");
        l.add_peer(h4, None).unwrap();
        l.add_peer(h6, None).unwrap();
        let (rtx, _rrx) = mpsc::channel(4);
        let run = tokio::spawn(Arc::new(l).run(rtx));
        let _c4 = tokio::net::TcpStream::connect(at[0]).await.unwrap();
        let _c6 = tokio::net::TcpStream::connect(at[1]).await.unwrap();
        let got4 = tokio::time::timeout(std::time::Duration::from_secs(10), rx4.recv()).await;
        let got6 = tokio::time::timeout(std::time::Duration::from_secs(10), rx6.recv()).await;
        assert!(
            matches!(got4, Ok(Some(Command::Incoming(_)))),
            "IPv4 socket"
        );
        assert!(
            matches!(got6, Ok(Some(Command::Incoming(_)))),
            "IPv6 socket"
        );
        run.abort();
    }
}
