//! What a benchmark reads about the daemon under test: CPU time and memory of its
//! processes (from /proc), and its routes arriving in and leaving the kernel FIB (from
//! netlink notifications in its namespace, counted by route protocol).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use rtnetlink::packet_core::{NetlinkBuffer, NlasIterator};
use rtnetlink::packet_route::route::RouteHeader;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use tern_fib::linux::force_receive_buffer;

use crate::netns::Netns;
use crate::{Error, Result};

/// CPU and memory of a set of processes, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcStats {
    /// User plus system CPU seconds since each process started.
    pub cpu_s: f64,
    /// Resident set size now, bytes.
    pub rss: u64,
    /// Peak resident set size (VmHWM), bytes.
    pub hwm: u64,
}

/// Reads /proc for `pids` (a process that is gone counts as zero).
pub fn proc_stats(pids: &[u32]) -> ProcStats {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let mut s = ProcStats::default();
    for pid in pids {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the command name (which may hold spaces): state is first,
            // utime and stime are the 12th and 13th.
            if let Some((_, rest)) = stat.rsplit_once(')') {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
                s.cpu_s += (t(11) + t(12)) / ticks;
            }
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let kb = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
                    * 1024
            };
            s.rss += kb("VmRSS:");
            s.hwm += kb("VmHWM:");
        }
    }
    s
}

/// Route notifications seen so far for one route protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FibCount {
    /// Routes added or replaced.
    pub added: u64,
    /// Routes removed.
    pub removed: u64,
    /// When the first of them was read.
    pub first: Option<Instant>,
    /// When the last of them was read (within [`DRAIN_EVERY`] of its arrival).
    pub last: Option<Instant>,
    /// The socket overran: counts are low.
    pub lost: bool,
    /// Distinct prefixes of the protocol in the kernel now, as the notifications tell
    /// (a replace does not count twice): the restart timeline's y axis.
    pub installed: u64,
}

/// Counts the kernel's route notifications of one protocol in a namespace, from a
/// thread of its own.
///
/// The thread reads its socket in bursts, every [`DRAIN_EVERY`], and sleeps in between
/// rather than waiting on the socket: a waiting reader is woken by the kernel for each
/// notification, on the CPU of the daemon that made the change, and it is read, parsed
/// and counted in step with it. Waiting on a tokio stream of parsed events cost the
/// daemon 22% of its install rate (`LinuxFib` adding 100,000 routes alone: 305k/s,
/// with such a watcher in the namespace: 239k/s). Only the route groups are joined,
/// and only a notification's header and destination are read.
#[derive(Debug)]
pub struct FibWatch {
    count: Arc<Mutex<FibCount>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long the watcher sleeps between two reads of its socket: the error of the
/// times it reports, at most.
const DRAIN_EVERY: Duration = Duration::from_millis(2);

impl FibWatch {
    /// Starts watching routes with `protocol` in `ns`; returns once subscribed.
    pub fn start(ns: &Netns, protocol: u8) -> Result<FibWatch> {
        let count = Arc::new(Mutex::new(FibCount::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
        let ns = ns.name().to_string();
        let (c, halt) = (count.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("fib-watch".into())
            .spawn(move || {
                let socket = match subscribe(&ns) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                drain_until(&socket, protocol, &c, &halt);
            })
            .map_err(|e| Error::Lab(format!("cannot start the FIB watcher: {e}")))?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(FibWatch {
                count,
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(Error::Lab(format!("FIB watcher: {e}"))),
            Err(_) => Err(Error::Lab("FIB watcher did not start in 10 s".into())),
        }
    }

    /// The counts so far.
    pub fn get(&self) -> FibCount {
        self.count.lock().map(|c| *c).unwrap_or_default()
    }

    /// A handle that reads the counts from another thread (the restart sampler).
    pub fn probe(&self) -> FibProbe {
        FibProbe(self.count.clone())
    }
}

/// Reads a [`FibWatch`]'s counts from another thread.
#[derive(Debug, Clone)]
pub struct FibProbe(Arc<Mutex<FibCount>>);

impl FibProbe {
    /// The counts so far.
    pub fn get(&self) -> FibCount {
        self.0.lock().map(|c| *c).unwrap_or_default()
    }
}

impl Drop for FibWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A non-blocking netlink socket in namespace `ns` (entered by this thread), joined to
/// the IPv4 and IPv6 route groups, with room for a million unread notifications.
fn subscribe(ns: &str) -> std::result::Result<Socket, String> {
    crate::netns::enter_thread(ns).map_err(|e| e.to_string())?;
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| e.to_string())?;
    let groups = libc::RTMGRP_IPV4_ROUTE | libc::RTMGRP_IPV6_ROUTE;
    socket
        .bind(&SocketAddr::new(0, groups as u32))
        .map_err(|e| format!("joining the route groups: {e}"))?;
    // About 1 KiB of buffer per notification.
    if !force_receive_buffer(&socket, 1 << 30) {
        return Err("cannot size the receive buffer (SO_RCVBUFFORCE)".into());
    }
    socket.set_non_blocking(true).map_err(|e| e.to_string())?;
    Ok(socket)
}

/// Reads what arrived every [`DRAIN_EVERY`] until `stop`, counting into `count`.
fn drain_until(socket: &Socket, protocol: u8, count: &Mutex<FibCount>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 64 << 10];
    let mut present = HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        let (mut added, mut removed, mut lost) = (0u64, 0u64, false);
        loop {
            match socket.recv(&mut &mut buf[..], 0) {
                Ok(n) => {
                    for (new, prefix) in routes(buf.get(..n).unwrap_or_default(), protocol) {
                        if new {
                            added += 1;
                            present.insert(prefix);
                        } else {
                            removed += 1;
                            present.remove(&prefix);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // ENOBUFS: the buffer overran and notifications were dropped.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => lost = true,
                // Any other error ends the watch: what was counted says so.
                Err(_) => {
                    if let Ok(mut n) = count.lock() {
                        n.lost = true;
                    }
                    return;
                }
            }
        }
        if added + removed > 0 || lost {
            let Ok(mut n) = count.lock() else { return };
            n.added += added;
            n.removed += removed;
            n.lost |= lost;
            if added + removed > 0 {
                let now = Instant::now();
                n.first.get_or_insert(now);
                n.last = Some(now);
            }
            n.installed = present.len() as u64;
        }
        std::thread::sleep(DRAIN_EVERY);
    }
}

/// The route notifications of `protocol` in one datagram: added (or replaced) or
/// removed, and the destination. Only the headers and the destination attribute are
/// read, without copying.
fn routes(datagram: &[u8], protocol: u8) -> impl Iterator<Item = (bool, IpNet)> + '_ {
    let mut rest = Some(datagram);
    let messages = std::iter::from_fn(move || {
        let m = NetlinkBuffer::new_checked(rest?).ok()?;
        let len = (m.length() as usize + 3) & !3;
        rest = rest
            .and_then(|r| r.get(len.max(1)..))
            .filter(|r| !r.is_empty());
        Some((m.message_type(), m.payload()))
    });
    messages.filter_map(move |(kind, payload)| {
        let new = match kind {
            libc::RTM_NEWROUTE => true,
            libc::RTM_DELROUTE => false,
            _ => return None,
        };
        Some((new, destination(payload, protocol)?))
    })
}

/// Bytes of `struct rtmsg`, before a route message's attributes.
const ROUTE_HEADER_LEN: usize = 12;

/// A route message's destination, when its protocol is `protocol`.
fn destination(payload: &[u8], protocol: u8) -> Option<IpNet> {
    let header = RouteHeader::parse(payload).ok()?;
    if u8::from(header.protocol) != protocol {
        return None;
    }
    let len = header.destination_prefix_length;
    let v4 = |b: &[u8]| {
        <[u8; 4]>::try_from(b)
            .ok()
            .map(|a| IpAddr::from(Ipv4Addr::from(a)))
    };
    let v6 = |b: &[u8]| {
        <[u8; 16]>::try_from(b)
            .ok()
            .map(|a| IpAddr::from(Ipv6Addr::from(a)))
    };
    // No destination attribute: a default route.
    let mut addr = match header.address_family {
        AddressFamily::Inet => IpAddr::from(Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::from(Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    for nla in NlasIterator::new(payload.get(ROUTE_HEADER_LEN..)?) {
        let nla = nla.ok()?;
        if nla.kind() == libc::RTA_DST {
            addr = if addr.is_ipv4() {
                v4(nla.value())?
            } else {
                v6(nla.value())?
            };
        }
    }
    IpNet::new(addr, len).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
    use rtnetlink::packet_route::RouteNetlinkMessage;

    /// One route notification as the kernel sends it, serialized.
    fn notification(new: bool, prefix: &str, protocol: u8) -> Vec<u8> {
        let net: IpNet = prefix.parse().unwrap_or_else(|e| panic!("{e}"));
        let mut m = RouteMessage::default();
        m.header.address_family = match net {
            IpNet::V4(_) => AddressFamily::Inet,
            IpNet::V6(_) => AddressFamily::Inet6,
        };
        m.header.destination_prefix_length = net.prefix_len();
        m.header.protocol = protocol.into();
        if net.prefix_len() > 0 {
            m.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(net.addr())));
        }
        m.attributes.push(RouteAttribute::Oif(2));
        let inner = if new {
            RouteNetlinkMessage::NewRoute(m)
        } else {
            RouteNetlinkMessage::DelRoute(m)
        };
        let mut n = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(inner));
        n.finalize();
        let mut buf = vec![0; n.buffer_len()];
        n.serialize(&mut buf);
        buf
    }

    #[test]
    fn reads_the_destination_and_verb_of_the_protocols_route_notifications() {
        let net = |s: &str| s.parse::<IpNet>().unwrap_or_else(|e| panic!("{e}"));
        // Several messages in one datagram, as a dump would bring them: each counts,
        // another protocol's routes do not.
        let mut datagram = notification(true, "198.18.0.1/32", 201);
        datagram.extend(notification(true, "198.18.0.2/32", 12));
        datagram.extend(notification(false, "2001:db8::/64", 201));
        datagram.extend(notification(true, "0.0.0.0/0", 201));
        assert_eq!(
            routes(&datagram, 201).collect::<Vec<_>>(),
            vec![
                (true, net("198.18.0.1/32")),
                (false, net("2001:db8::/64")),
                (true, net("0.0.0.0/0")),
            ]
        );
        assert_eq!(
            routes(&datagram, 12).collect::<Vec<_>>(),
            vec![(true, net("198.18.0.2/32"))]
        );
        // Cut short or garbage: what is whole is read, nothing panics.
        let whole = notification(true, "198.18.0.3/32", 201);
        assert_eq!(
            routes(whole.get(..whole.len() - 4).unwrap_or_default(), 201).collect::<Vec<_>>(),
            vec![]
        );
        assert_eq!(routes(&[0xff; 40], 201).count(), 0);
        assert_eq!(routes(&[], 201).count(), 0);
    }
}
