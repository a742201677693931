//! BIRD-compatible control sockets (`bird_socket`, `bird6_socket` in `tern.yaml`):
//! what `calicoctl node status` and calico-node's `-bird-ready` / `-bird-live` probes
//! send to `/var/run/calico/bird.ctl` and `bird6.ctl`, answered in BIRD 1.6's CLI
//! protocol from the daemon's snapshot (docs/bird-socket.md). Read-only: every command
//! that would change something is refused with BIRD's `8007 Access denied`.
//!
//! [`render`] is the protocol as pure functions (a command line and a [`BirdView`] in,
//! reply lines out); [`server`] is the thin tokio driver around it.

pub mod render;
#[cfg(unix)]
pub mod server;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::time::SystemTime;

use tern_config::intent::PeerKind;

/// Which of Calico's two BIRDs a socket stands in for: `bird.ctl` answers for the
/// IPv4 sessions, `bird6.ctl` for the IPv6 ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `bird.ctl`.
    V4,
    /// `bird6.ctl`.
    V6,
}

impl Family {
    /// Whether a peer at `address` belongs to this socket.
    pub fn holds(self, address: IpAddr) -> bool {
        matches!(
            (self, address),
            (Family::V4, IpAddr::V4(_)) | (Family::V6, IpAddr::V6(_))
        )
    }
}

/// What the BIRD sockets show: a copy of the daemon's state at one moment.
#[derive(Debug, Clone)]
pub struct BirdView {
    /// The router id in force; `None` before a configuration was applied.
    pub router_id: Option<Ipv4Addr>,
    /// When the daemon started ("Last reboot").
    pub started: SystemTime,
    /// tern's own restart grace still runs: its Loc-RIB is not complete yet (shown
    /// as BIRD's "Graceful restart recovery in progress").
    pub in_grace: bool,
    /// Why no configuration is in force yet (`None` once one is).
    pub not_configured: Option<String>,
    /// Every configured peer, both families.
    pub peers: Vec<BirdPeer>,
}

/// One BGP session as the BIRD sockets show it.
#[derive(Debug, Clone)]
pub struct BirdPeer {
    /// Peer address.
    pub address: IpAddr,
    /// Peer port.
    pub port: u16,
    /// Its role, which picks Calico's protocol name prefix.
    pub kind: PeerKind,
    /// tern waits for the peer to connect.
    pub passive: bool,
    /// Peer AS.
    pub remote_as: u32,
    /// Our AS on the session.
    pub local_as: u32,
    /// Source address, when configured.
    pub source: Option<IpAddr>,
    /// Established.
    pub up: bool,
    /// RFC 4271 state name as the session last reported it.
    pub state: String,
    /// When `up` last changed.
    pub since: SystemTime,
    /// Why it last went down.
    pub last_error: Option<String>,
    /// Negotiated capabilities, by tern's names.
    pub capabilities: Vec<String>,
    /// The peer is our route-reflector client.
    pub rr_client: bool,
    /// Prefixes the peer provides (imported).
    pub received: u64,
    /// Prefixes in its Adj-RIB-Out (exported).
    pub advertised: u64,
}

/// Where a BIRD socket gets its view: the daemon's handler, or a test's fixture.
pub trait ViewSource: Send + Sync + 'static {
    /// The view now; `counts`: with each peer's prefix counts, which means asking the
    /// speaker (only `show protocols all` shows them, so the probes never wait for
    /// it). An error (the daemon's state unreadable) is answered as a BIRD runtime
    /// error.
    fn view(
        &self,
        counts: bool,
    ) -> Pin<Box<dyn Future<Output = Result<BirdView, String>> + Send + '_>>;
}
