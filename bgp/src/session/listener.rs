//! The passive side: one TCP listener (port 179 unless configured) that hands each
//! accepted connection to the session of its source address. A connection from an
//! address that is not a configured peer is closed at once and reported once as data
//! (the daemon logs it), so a scanner cannot cause an error storm.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::mpsc;

use super::{sockopt, Command, SessionHandle};

/// A connection the listener refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Who connected.
    pub from: SocketAddr,
}

/// A bound listener and the sessions it serves.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
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
        let sock = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        sock.set_reuseaddr(true)?;
        sock.bind(addr)?;
        Ok(Listener {
            listener: sock.listen(1024)?,
            peers: Arc::new(RwLock::new(HashMap::new())),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections from `handle.peer`'s address, signed with `password` if set
    /// (TCP-MD5 must be configured on the listening socket before the peer's SYN).
    pub fn add_peer(&self, handle: SessionHandle, password: Option<&str>) -> io::Result<()> {
        if let Some(pw) = password {
            let v6 = self.listener.local_addr().is_ok_and(|a| a.is_ipv6());
            sockopt::set_md5(&self.listener, md5_address(v6, handle.peer.ip()), pw)?;
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
        loop {
            let Ok((stream, from)) = self.listener.accept().await else {
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
}
