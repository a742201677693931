//! Kernel change notifications (netlink multicast groups for routes, links, addresses
//! and neighbours), as events the FIB task acts on: a tern route deleted by someone
//! else is put back, a link or address change re-triggers next-hop resolution, a
//! neighbour turning FAILED becomes a finding, and a workload route appearing is a
//! candidate borrowed address.

use std::os::fd::AsRawFd;

use futures::stream::{Stream, StreamExt};
use rtnetlink::packet_core::NetlinkPayload;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::sys::AsyncSocket;
use rtnetlink::MulticastGroup;

use super::{message, observe};
use crate::{FibError, Neighbour, Route};

/// Something changed in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelEvent {
    /// A route was added or replaced (any protocol: workload routes matter too).
    RouteAdded {
        /// Its route protocol number.
        protocol: u8,
        /// The route.
        route: Route,
    },
    /// A route was removed.
    RouteRemoved {
        /// Its route protocol number.
        protocol: u8,
        /// The route.
        route: Route,
    },
    /// A link or an address changed: connected subnets may differ now.
    InterfacesChanged,
    /// A neighbour entry changed.
    Neighbour(Neighbour),
    /// Notifications were lost (socket overrun): re-read the kernel's state.
    Lost,
}

/// Receive buffer for notifications: a burst of route changes by another daemon must
/// not overflow it before we read (each notification costs about 1 KiB of buffer).
pub const WATCH_RCVBUF: usize = 128 << 20;

/// Subscribes to route, link, address and neighbour changes in the current namespace,
/// with a [`WATCH_RCVBUF`] receive buffer. Call inside a tokio runtime.
pub fn watch() -> Result<impl Stream<Item = KernelEvent>, FibError> {
    watch_with_buffer(WATCH_RCVBUF)
}

/// [`watch`] with a receive buffer of `rcvbuf` bytes (capped at 2 GiB).
pub fn watch_with_buffer(rcvbuf: usize) -> Result<impl Stream<Item = KernelEvent>, FibError> {
    let rcvbuf = libc::c_int::try_from(rcvbuf).unwrap_or(libc::c_int::MAX);
    let groups = [
        MulticastGroup::Ipv4Route,
        MulticastGroup::Ipv6Route,
        MulticastGroup::Link,
        MulticastGroup::Ipv4Ifaddr,
        MulticastGroup::Ipv6Ifaddr,
        MulticastGroup::Neigh,
    ];
    let (mut conn, _handle, messages) =
        rtnetlink::new_multicast_connection(&groups).map_err(|e| FibError::Kernel {
            what: "subscribing to kernel notifications".into(),
            reason: e.to_string(),
        })?;
    let fd = conn.socket_mut().socket_mut().as_raw_fd();
    // SO_RCVBUFFORCE (root / CAP_NET_ADMIN, which tern has) lifts the rmem_max cap
    // without changing the system setting; on failure the default buffer stays and
    // overruns are reported as `Lost`.
    // SAFETY: fd is a live socket owned by `conn`; the option value is a c_int that
    // outlives the call, and its size is passed exactly.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    tokio::spawn(conn);
    Ok(messages.filter_map(|(m, _)| async move {
        match m.payload {
            NetlinkPayload::Overrun(_) => Some(KernelEvent::Lost),
            NetlinkPayload::InnerMessage(inner) => event(inner),
            _ => None,
        }
    }))
}

fn event(m: RouteNetlinkMessage) -> Option<KernelEvent> {
    match m {
        RouteNetlinkMessage::NewRoute(r) => Some(KernelEvent::RouteAdded {
            protocol: message::protocol_of(&r.header),
            route: message::parse(&r)?,
        }),
        RouteNetlinkMessage::DelRoute(r) => Some(KernelEvent::RouteRemoved {
            protocol: message::protocol_of(&r.header),
            route: message::parse(&r)?,
        }),
        RouteNetlinkMessage::NewLink(_)
        | RouteNetlinkMessage::DelLink(_)
        | RouteNetlinkMessage::NewAddress(_)
        | RouteNetlinkMessage::DelAddress(_) => Some(KernelEvent::InterfacesChanged),
        m @ (RouteNetlinkMessage::NewNeighbour(_) | RouteNetlinkMessage::DelNeighbour(_)) => {
            observe::neighbours(&[m])
                .into_iter()
                .next()
                .map(KernelEvent::Neighbour)
        }
        _ => None,
    }
}
