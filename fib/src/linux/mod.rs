//! Linux backend: the kernel FIB over rtnetlink (netlink-proto underneath).
//!
//! Writes go out batched: many route messages per datagram and several datagrams in
//! flight. Route messages carry no NLM_F_ACK — one ACK per route was the cost that
//! capped throughput (see the README's FIB benchmark) — so the kernel answers only
//! refusals, and each batch ends with a cheap request that is answered: once that
//! answer is in, every refusal of the batch has been read (the kernel handles a
//! socket's messages in order). A refusal echoes the refused request, from which its
//! prefix and verb are read back. Reads are netlink dumps; route dumps
//! ask the kernel (strict checking) for tern's protocol and table only, and the
//! answer is filtered again here so a kernel without strict checking cannot hand us
//! another daemon's routes.
//!
//! rtnetlink's `Handle` cannot batch, so this uses its netlink-proto connection
//! directly, through rtnetlink's re-exports so the crate versions cannot drift.

mod message;
mod observe;
mod watch;

use std::net::IpAddr;

use futures::channel::mpsc::UnboundedReceiver;
use futures::stream::{FuturesUnordered, StreamExt};
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::proto::{ConnectionHandle, ReplyExpectation};
use rtnetlink::sys::{protocols::NETLINK_ROUTE, AsyncSocket, SocketAddr};

use crate::diag::Resolution;
use crate::{
    ApplyReport, FailureKind, Fib, FibError, Interface, Neighbour, Route, RouteChange, RouteFailure,
};

pub use message::parse as parse_route;
pub use watch::{
    force_receive_buffer, watch, watch_ignoring_added, watch_with_buffer, KernelEvent, WATCH_RCVBUF,
};

/// Route messages per datagram.
const BATCH: usize = 128;
/// Datagrams awaiting their ACKs at once.
const IN_FLIGHT: usize = 8;

/// The Linux FIB. Create it inside a tokio runtime (it spawns its netlink connection).
pub struct LinuxFib {
    conn: ConnectionHandle<RouteNetlinkMessage>,
    /// Where the kernel's refusals of unacknowledged route messages arrive.
    refusals: UnboundedReceiver<(NetlinkMessage<RouteNetlinkMessage>, SocketAddr)>,
    protocol: u8,
    table: u32,
    /// The netlink port id of the socket route changes go out on.
    port_id: u32,
}

impl LinuxFib {
    /// Opens a netlink connection in the current network namespace. `protocol` marks
    /// tern's routes (default 201); `table` is where `own_routes` looks.
    pub fn new(protocol: u8, table: u32) -> Result<LinuxFib, FibError> {
        let kernel = |what: &str, e: std::io::Error| FibError::Kernel {
            what: what.into(),
            reason: e.to_string(),
        };
        let (mut conn, handle, refusals) =
            rtnetlink::proto::new_connection::<RouteNetlinkMessage>(NETLINK_ROUTE)
                .map_err(|e| kernel("opening a netlink socket", e))?;
        let socket = conn.socket_mut().socket_mut();
        socket
            .set_netlink_get_strict_chk(true)
            .map_err(|e| kernel("enabling netlink strict checking", e))?;
        // Room for every ACK of the datagrams in flight, with margin for dumps.
        socket
            .set_rx_buf_sz(8 << 20)
            .map_err(|e| kernel("sizing the netlink receive buffer", e))?;
        // The kernel stamps every route notification caused by a request with the
        // requester's port id: how a watcher tells tern's own changes from others'.
        // The socket is bound now (the kernel picks the id) rather than on first send.
        let port_id = socket
            .bind_auto()
            .map(|a| a.port_number())
            .map_err(|e| kernel("binding the netlink socket", e))?;
        tokio::spawn(conn);
        Ok(LinuxFib {
            conn: handle,
            refusals,
            protocol,
            table,
            port_id,
        })
    }

    /// The netlink port id the kernel puts in notifications of changes this FIB made
    /// (0 if unknown; see [`watch_ignoring_added`]).
    pub fn port_id(&self) -> u32 {
        self.port_id
    }

    /// The route protocol number that marks tern's routes.
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// Every route of tern's table, whatever its protocol, with the protocol number:
    /// what the daemon reads workload routes (to `cali*` interfaces) from.
    pub async fn table_routes(&self) -> Result<Vec<(u8, crate::Route)>, FibError> {
        let mut routes = Vec::new();
        for v6 in [false, true] {
            let what = if v6 {
                "dumping every IPv6 route"
            } else {
                "dumping every IPv4 route"
            };
            // Protocol 0 (RTPROT_UNSPEC) in a strict dump request means any protocol.
            for m in self
                .dump(what, message::dump_routes(v6, self.table, 0))
                .await?
            {
                let RouteNetlinkMessage::NewRoute(r) = m else {
                    continue;
                };
                let protocol = message::protocol_of(&r.header);
                if let Some(route) = message::parse(&r).filter(|x| x.table == self.table) {
                    routes.push((protocol, route));
                }
            }
        }
        Ok(routes)
    }

    /// The interfaces, without needing `&mut` (for tasks sharing the connection).
    pub async fn interface_list(&self) -> Result<Vec<Interface>, FibError> {
        self.interfaces_now().await
    }

    /// How the kernel reaches `addr`, as `ip route get` answers; `None` when it has no
    /// route (or only an unreachable / blackhole one).
    pub async fn route_to(&self, addr: IpAddr) -> Result<Option<Resolution>, FibError> {
        let what = format!("looking up the route to {addr}");
        let answers = match self.dump(&what, message::get_route(addr)).await {
            Ok(a) => a,
            // ENETUNREACH / EHOSTUNREACH: no route, which is an answer, not a failure.
            Err(FibError::Kernel { reason, .. })
                if reason.contains("errno 101") || reason.contains("errno 113") =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let Some(RouteNetlinkMessage::NewRoute(r)) = answers.first() else {
            return Ok(None);
        };
        let Some(crate::Route {
            kind: crate::RouteKind::Unicast(hops),
            ..
        }) = message::parse(r)
        else {
            return Ok(None);
        };
        let Some(hop) = hops.first() else {
            return Ok(None);
        };
        let ifaces = self.interfaces_now().await?;
        let interface = hop
            .interface
            .and_then(|i| ifaces.iter().find(|x| x.index == i))
            .map(|x| x.name.clone())
            .unwrap_or_else(|| format!("interface {}", hop.interface.unwrap_or(0)));
        Ok(Some(Resolution {
            gateway: hop.gateway,
            interface,
        }))
    }

    async fn interfaces_now(&self) -> Result<Vec<Interface>, FibError> {
        let links = self
            .dump("listing interfaces", observe::dump_links())
            .await?;
        let addresses = self
            .dump("listing addresses", observe::dump_addresses())
            .await?;
        Ok(observe::interfaces(&links, &addresses))
    }

    /// Sends one dump request and collects the answers.
    async fn dump(
        &self,
        what: &str,
        request: NetlinkMessage<RouteNetlinkMessage>,
    ) -> Result<Vec<RouteNetlinkMessage>, FibError> {
        let mut stream = self
            .conn
            .request(request, SocketAddr::new(0, 0))
            .map_err(|e| FibError::Kernel {
                what: what.into(),
                reason: e.to_string(),
            })?;
        let mut out = Vec::new();
        while let Some(m) = stream.next().await {
            match m.payload {
                NetlinkPayload::InnerMessage(inner) => out.push(inner),
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    return Err(FibError::Kernel {
                        what: what.into(),
                        reason: message::errno_text(e.raw_code()),
                    })
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// Sends one batch of unacknowledged route messages followed by the barrier, and
/// returns when the barrier is answered; `Err` carries the batch's changes when the
/// request could not be sent at all.
async fn send_batch(
    conn: ConnectionHandle<RouteNetlinkMessage>,
    batch: Vec<(RouteChange, NetlinkMessage<RouteNetlinkMessage>)>,
) -> Result<usize, Vec<RouteFailure>> {
    let sent = batch.len();
    let mut changes = Vec::with_capacity(sent);
    let mut messages = Vec::with_capacity(sent + 1);
    for (c, m) in batch {
        changes.push(c);
        messages.push((m, ReplyExpectation::NotExpected));
    }
    messages.push((message::barrier(), ReplyExpectation::Expected));
    let fail_all = |reason: String| {
        changes
            .iter()
            .map(|c| RouteFailure {
                prefix: c.prefix(),
                change: c.verb(),
                reason: reason.clone(),
                kind: FailureKind::Other,
            })
            .collect::<Vec<_>>()
    };
    let mut stream = match conn.request_batch_with_expectation(messages, SocketAddr::new(0, 0)) {
        Ok(s) => s,
        Err(e) => return Err(fail_all(format!("netlink request failed: {e}"))),
    };
    let mut answered = false;
    while let Some(m) = stream.next().await {
        answered |= matches!(m.payload, NetlinkPayload::InnerMessage(_));
    }
    if answered {
        Ok(sent)
    } else {
        Err(fail_all(
            "the kernel did not answer (netlink connection closed)".into(),
        ))
    }
}

fn collect(report: &mut ApplyReport, done: Result<usize, Vec<RouteFailure>>) {
    match done {
        Ok(sent) => report.applied += sent,
        Err(failed) => report.failed.extend(failed),
    }
}

impl LinuxFib {
    /// Applies `changes` to the routes carrying `protocol`: tern's own, or (deletes
    /// only) those BIRD left behind on a node tern took over.
    pub(crate) async fn apply_as(
        &mut self,
        changes: Vec<RouteChange>,
        protocol: u8,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        // Refusals left by an earlier apply that was abandoned midway belong to it.
        while self.refusals.try_recv().is_ok() {}
        let mut inflight = FuturesUnordered::new();
        let mut batch = Vec::with_capacity(BATCH);
        let mut changes = changes.into_iter().peekable();
        while let Some(change) = changes.next() {
            match message::request(&change, protocol, false) {
                Ok(m) => batch.push((change, m)),
                Err(reason) => report.failed.push(RouteFailure {
                    prefix: change.prefix(),
                    change: change.verb(),
                    reason,
                    kind: FailureKind::Other,
                }),
            }
            if batch.len() == BATCH || (changes.peek().is_none() && !batch.is_empty()) {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                inflight.push(send_batch(self.conn.clone(), full));
                if inflight.len() >= IN_FLIGHT {
                    if let Some(done) = inflight.next().await {
                        collect(&mut report, done);
                    }
                }
            }
        }
        while let Some(done) = inflight.next().await {
            collect(&mut report, done);
        }
        // Every barrier is answered, so every refusal has been read.
        while let Ok(Some((m, _))) = self.refusals.try_recv().map(Some) {
            if let NetlinkPayload::Error(e) = m.payload {
                if e.code.is_some() {
                    report.applied = report.applied.saturating_sub(1);
                    report
                        .failed
                        .push(message::refused(&e.header, e.raw_code()));
                }
            }
        }
        report
    }

    /// The routes carrying `protocol` in tern's table.
    pub(crate) async fn routes_of(&mut self, protocol: u8) -> Result<Vec<Route>, FibError> {
        let mut routes = Vec::new();
        for v6 in [false, true] {
            let what = if v6 {
                "dumping IPv6 routes"
            } else {
                "dumping IPv4 routes"
            };
            let request = message::dump_routes(v6, self.table, protocol);
            for m in self.dump(what, request).await? {
                let RouteNetlinkMessage::NewRoute(r) = m else {
                    continue;
                };
                if message::protocol_of(&r.header) != protocol {
                    continue;
                }
                if let Some(route) = message::parse(&r).filter(|x| x.table == self.table) {
                    routes.push(route);
                }
            }
        }
        Ok(routes)
    }
}

impl Fib for LinuxFib {
    async fn apply(&mut self, changes: Vec<RouteChange>) -> ApplyReport {
        let protocol = self.protocol;
        self.apply_as(changes, protocol).await
    }

    async fn own_routes(&mut self) -> Result<Vec<Route>, FibError> {
        let protocol = self.protocol;
        self.routes_of(protocol).await
    }

    async fn interfaces(&mut self) -> Result<Vec<Interface>, FibError> {
        self.interfaces_now().await
    }

    async fn neighbours(&mut self) -> Result<Vec<Neighbour>, FibError> {
        let answers = self
            .dump("listing neighbours", observe::dump_neighbours())
            .await?;
        Ok(observe::neighbours(&answers))
    }
}
