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
    /// A link appeared or changed state: `up` is administratively up with carrier
    /// (`ip link`'s UP,LOWER_UP). A link that was up and is no longer took its
    /// routes along without a notification for each.
    Link {
        /// Its index.
        index: u32,
        /// Up with carrier.
        up: bool,
    },
    /// A link was deleted.
    LinkRemoved {
        /// Its index.
        index: u32,
    },
    /// An address was added (`removed` false) or removed (true); removing one flushes
    /// the routes whose gateway it made reachable, without a notification for each.
    Address {
        /// The address was removed.
        removed: bool,
    },
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
    watch_filtered(rcvbuf, None)
}

/// [`watch`] without the notifications of tern's own doing: routes *added* with
/// `protocol`, and every change requested on the netlink socket with port id
/// `own_port` (the FIB's, [`super::LinuxFib::port_id`]; 0 to skip that part). At a
/// full table these are a million notifications each way, each of which would
/// otherwise be copied to this socket, read and parsed for nothing. Removals of
/// tern's routes by anyone else (an administrator, the kernel on link down) still
/// arrive: they are how a route deleted behind tern's back is noticed.
pub fn watch_ignoring_added(
    protocol: u8,
    own_port: u32,
) -> Result<impl Stream<Item = KernelEvent>, FibError> {
    watch_filtered(WATCH_RCVBUF, Some((protocol, own_port)))
}

/// A classic BPF program for a netlink socket that drops messages stamped with port
/// id `own_port` (unless 0: the kernel's own notifications carry 0) and RTM_NEWROUTE
/// messages whose `rtm_protocol` is `protocol`, and accepts everything else. Each
/// route notification travels in a packet of its own, so its header decides.
fn drop_own_changes(protocol: u8, own_port: u32) -> Vec<libc::sock_filter> {
    // BPF_ABS loads read network byte order; netlink headers are in host order.
    let newroute = u32::from(u16::from_be_bytes(libc::RTM_NEWROUTE.to_ne_bytes()));
    let port = u32::from_be_bytes(own_port.to_ne_bytes());
    // struct nlmsghdr: len 0, type 4, flags 6, seq 8, pid 12 (16 bytes); rtm_protocol
    // is byte 5 of struct rtmsg.
    const NLMSG_TYPE: u32 = 4;
    const NLMSG_PID: u32 = 12;
    const RTM_PROTOCOL: u32 = 16 + 5;
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let mut p = Vec::new();
    if own_port != 0 {
        p.push(op(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            0,
            0,
            NLMSG_PID,
        ));
        // Equal: jump to the final "drop".
        p.push(op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 4, 0, port));
    }
    p.extend([
        op(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 0, 0, NLMSG_TYPE),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 3, newroute),
        op(
            libc::BPF_LD | libc::BPF_B | libc::BPF_ABS,
            0,
            0,
            RTM_PROTOCOL,
        ),
        op(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            u32::from(protocol),
        ),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
    ]);
    p
}

/// Sets a netlink socket's receive buffer to `bytes` (capped at 2 GiB) with
/// SO_RCVBUFFORCE, which (root / CAP_NET_ADMIN) lifts the `rmem_max` cap without
/// changing the system setting. Returns false when the kernel refused.
pub fn force_receive_buffer(socket: &impl AsRawFd, bytes: usize) -> bool {
    let rcvbuf = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd belongs to `socket`, borrowed for the call; the option value is
    // a c_int that outlives the call, and its size is passed exactly.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

fn watch_filtered(
    rcvbuf: usize,
    ignore: Option<(u8, u32)>,
) -> Result<impl Stream<Item = KernelEvent>, FibError> {
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
    // On failure the default buffer stays and overruns are reported as `Lost`.
    force_receive_buffer(conn.socket_mut().socket_mut(), rcvbuf);
    if let Some((protocol, own_port)) = ignore {
        let mut program = drop_own_changes(protocol, own_port);
        let prog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_mut_ptr(),
        };
        // SAFETY: fd is a live socket owned by `conn`; `prog` points at `program`,
        // which outlives the call (the kernel copies the program), and its size is
        // passed exactly.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(FibError::Kernel {
                what: "attaching the notification filter (SO_ATTACH_FILTER)".into(),
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
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
        RouteNetlinkMessage::NewLink(l) => Some(KernelEvent::Link {
            index: l.header.index,
            up: observe::is_up(&l),
        }),
        RouteNetlinkMessage::DelLink(l) => Some(KernelEvent::LinkRemoved {
            index: l.header.index,
        }),
        RouteNetlinkMessage::NewAddress(_) => Some(KernelEvent::Address { removed: false }),
        RouteNetlinkMessage::DelAddress(_) => Some(KernelEvent::Address { removed: true }),
        m @ (RouteNetlinkMessage::NewNeighbour(_) | RouteNetlinkMessage::DelNeighbour(_)) => {
            observe::neighbours(&[m])
                .into_iter()
                .next()
                .map(KernelEvent::Neighbour)
        }
        _ => None,
    }
}
