//! The passive side: TCP listening sockets (one, on port 179 unless configured; one
//! per node address with `bindMode: NodeIP` on a dual-stack node) that hand each
//! accepted connection to the session of its source address. A connection from an
//! address that is not a configured peer is closed at once and reported once as data
//! (the daemon logs it), so a scanner cannot cause an error storm.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
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

/// IPv4 peers reach a dual-stack socket as IPv4-mapped IPv6 addresses.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The address a TCP-MD5 key names on a listening socket: on a dual-stack (IPv6)
/// socket an IPv4 peer must be given IPv4-mapped (the kernel refuses an AF_INET address
/// there with EINVAL).
fn md5_address(listener_is_v6: bool, peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(a) if listener_is_v6 => IpAddr::V6(a.to_ipv6_mapped()),
        other => other,
    }
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
        let listeners = addrs
            .iter()
            .map(|a| listen_on(*a).map_err(|e| io::Error::new(e.kind(), format!("{a}: {e}"))))
            .collect::<io::Result<Vec<_>>>()?;
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
    /// (TCP-MD5 must be configured on the listening socket before the peer's SYN).
    pub fn add_peer(&self, handle: SessionHandle, password: Option<&str>) -> io::Result<()> {
        if let Some(pw) = password {
            let peer = handle.peer.ip();
            for l in &self.listeners {
                let Ok(at) = l.local_addr() else { continue };
                // Only a socket the peer can reach takes its key: an IPv4 peer reaches
                // an IPv6 socket only when it is the dual-stack wildcard.
                let reachable = match (at.ip(), peer) {
                    (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => true,
                    (IpAddr::V6(a), IpAddr::V4(_)) => a.is_unspecified(),
                    (IpAddr::V4(_), IpAddr::V6(_)) => false,
                };
                if reachable {
                    sockopt::set_md5(l, md5_address(at.is_ipv6(), peer), pw)?;
                }
            }
        }
        if let Ok(mut map) = self.peers.write() {
            map.insert(canonical(handle.peer.ip()), handle);
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

/// A listening socket on `addr`.
fn listen_on(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(1024)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A dual-stack node with a TCP-MD5 password on an IPv4 peer: the key is set
    /// IPv4-mapped, which the kernel takes (a plain IPv4 address it refuses).
    #[test]
    fn md5_keys_for_ipv4_peers_on_a_dual_stack_listener() {
        let peer: IpAddr = "198.51.100.1".parse().unwrap();
        let v6 = std::net::TcpListener::bind("[::1]:0").unwrap();
        assert!(sockopt::set_md5(&v6, peer, "pw").is_err());
        sockopt::set_md5(&v6, md5_address(true, peer), "pw").unwrap();
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        sockopt::set_md5(&v4, md5_address(false, peer), "pw").unwrap();
        let peer6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(md5_address(true, peer6), peer6);
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
        let handle = |peer: &str| {
            let (tx, rx) = mpsc::channel(4);
            let peer = peer.parse().unwrap();
            (SessionHandle { peer, tx }, rx)
        };
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
