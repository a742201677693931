//! Linux: workload routes learned from the kernel, as Calico's BIRD learns them. The
//! CNI plugin routes each pod address to its workload interface; a pod address outside
//! this node's own blocks is a borrowed one and must be advertised as a /32 (/128) even
//! when the IPAM data does not say so yet. This task reports every host route straight
//! onto a device (address → interface name) whenever they change; the main loop keeps
//! those on workload interfaces (FelixConfiguration `interfacePrefix`, default `cali`)
//! and decides which to originate with the intent (pools, own blocks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ipnet::IpNet;
use tern_fib::linux::{watch, watch_ignoring_added, KernelEvent, LinuxFib};
use tern_fib::task::KernelNews;
use tern_fib::{Route, RouteKind};
use tokio::sync::mpsc;

/// The interface of a host route straight onto a device, if `r` is one.
fn host_route_device(r: &Route) -> Option<u32> {
    if r.prefix.prefix_len() != r.prefix.max_prefix_len() {
        return None;
    }
    match &r.kind {
        RouteKind::Unicast(h) => match &h[..] {
            [one] if one.gateway.is_none() => one.interface,
            _ => None,
        },
        _ => None,
    }
}

struct Scan {
    fib: LinuxFib,
    names: BTreeMap<u32, String>,
    /// Interfaces up with carrier, as last listed or reported: a link that goes down
    /// from up is one whose routes the kernel flushed.
    up: BTreeSet<u32>,
    routes: BTreeMap<IpNet, u32>,
}

impl Scan {
    /// Interface names afresh; the up set too when `with_up` (at start and after lost
    /// notifications only: otherwise events keep it, so a link whose going down was
    /// listed before its event was read is still seen going down).
    async fn list(&mut self, with_up: bool) {
        if let Ok(list) = self.fib.interface_list().await {
            if with_up {
                self.up = list.iter().filter(|i| i.up).map(|i| i.index).collect();
            }
            self.names = list.into_iter().map(|i| (i.index, i.name)).collect();
        }
    }

    async fn names(&mut self) {
        self.list(false).await;
    }

    async fn rescan(&mut self) {
        self.list(true).await;
        match self.fib.table_routes().await {
            Ok(all) => {
                self.routes = all
                    .into_iter()
                    .filter_map(|(_, r)| host_route_device(&r).map(|i| (r.prefix, i)))
                    .collect();
            }
            Err(e) => tracing::warn!("cannot read workload routes: {e}"),
        }
    }

    fn workloads(&self) -> BTreeMap<IpNet, String> {
        self.routes
            .iter()
            .filter_map(|(p, i)| Some((*p, self.names.get(i)?.clone())))
            .collect()
    }
}

type Events = std::pin::Pin<Box<dyn futures::Stream<Item = KernelEvent> + Send>>;

/// The route notifications: with tern's own route changes filtered out in the kernel
/// when it can (at a full table they are most of the traffic on this socket and none
/// of them matters here), every notification otherwise.
fn events(protocol: Option<u8>, own_port: u32) -> Option<Events> {
    let filtered: Option<Events> = protocol.and_then(|p| match watch_ignoring_added(p, own_port) {
        Ok(s) => Some(Box::pin(s) as Events),
        Err(e) => {
            tracing::warn!("{e}; reading every route notification instead");
            None
        }
    });
    match filtered
        .map(Ok)
        .unwrap_or_else(|| watch().map(|s| Box::pin(s) as Events))
    {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("cannot watch workload routes: {e}");
            None
        }
    }
}

/// Reports workload host routes (address → interface) now and after every change, and
/// tells the FIB task (`fib_resync`) when the kernel may have dropped tern's routes
/// behind its back: a route of tern's `protocol` removed, another protocol's route
/// added (a replace takes ours without a removal notice), a link or address changed
/// (IPv4 routes go with a link without a notification each), notifications lost.
pub async fn run(
    table: u32,
    protocol: Option<u8>,
    fib_resync: Arc<KernelNews>,
    tx: mpsc::Sender<BTreeMap<IpNet, String>>,
) {
    let fib = match LinuxFib::new(0, table) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!("cannot watch workload routes: {e}");
            return;
        }
    };
    let own_port = fib_resync
        .own_port
        .load(std::sync::atomic::Ordering::SeqCst);
    let Some(mut events) = events(protocol, own_port) else {
        return;
    };
    let mut scan = Scan {
        fib,
        names: BTreeMap::new(),
        up: BTreeSet::new(),
        routes: BTreeMap::new(),
    };
    scan.rescan().await;
    let mut last = scan.workloads();
    if tx.send(last.clone()).await.is_err() {
        return;
    }
    // After lost notifications the table is read again, but a re-read of a huge table
    // is costly: at most one per second, or per five times its own duration.
    let mut rescan_due = false;
    let mut next_rescan = Instant::now();
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(KernelEvent::Lost) => {
                    tracing::debug!("kernel re-read asked: notifications lost");
                    fib_resync.resync();
                    rescan_due = true;
                    continue;
                }
                Some(ev) => {
                    if !scan.on_event(ev, table, protocol, &fib_resync).await {
                        continue;
                    }
                }
                None => break,
            },
            () = tokio::time::sleep_until(next_rescan.into()), if rescan_due => {
                rescan_due = false;
                let t0 = Instant::now();
                scan.rescan().await;
                next_rescan = Instant::now() + (t0.elapsed() * 5).max(Duration::from_secs(1));
            }
        }
        if !report(&scan, &mut last, &tx).await {
            return;
        }
    }
}

impl Scan {
    /// Applies a route or link notification; false when it cannot change the workloads.
    async fn on_event(
        &mut self,
        ev: KernelEvent,
        table: u32,
        protocol: Option<u8>,
        fib_resync: &KernelNews,
    ) -> bool {
        match ev {
            KernelEvent::RouteAdded { route, protocol: p } if route.table == table => {
                // Another protocol's route may have replaced one of ours (felix
                // replaces workload routes): the FIB task must not think ours is there.
                if Some(p) != protocol {
                    tracing::debug!("kernel re-read asked: another protocol's route added");
                    fib_resync.resync();
                }
                match host_route_device(&route) {
                    Some(i) => {
                        self.routes.insert(route.prefix, i);
                        if !self.names.contains_key(&i) {
                            self.names().await;
                        }
                    }
                    None => {
                        self.routes.remove(&route.prefix);
                    }
                }
            }
            KernelEvent::RouteRemoved { route, protocol: p } if route.table == table => {
                if Some(p) == protocol {
                    fib_resync.removed(route.prefix);
                }
                if host_route_device(&route).is_some() {
                    self.routes.remove(&route.prefix);
                }
            }
            // Only a link that was up going down or away, or an address removed, can
            // have taken tern's routes along (the kernel flushes them without a
            // notification each): then the FIB re-reads the table. A link coming up
            // or an address added (every pod start adds a link) only lets refused
            // routes be tried again.
            KernelEvent::Link { index, up } => {
                let was_up = if up {
                    !self.up.insert(index)
                } else {
                    self.up.remove(&index)
                };
                if was_up && !up {
                    tracing::debug!(index, "kernel re-read asked: a link went down");
                    fib_resync.resync();
                } else {
                    fib_resync.retry();
                }
                self.names().await
            }
            KernelEvent::LinkRemoved { index } => {
                if self.up.remove(&index) {
                    tracing::debug!(index, "kernel re-read asked: a link that was up is gone");
                    fib_resync.resync();
                }
                self.names().await
            }
            KernelEvent::Address { removed: true } => {
                tracing::debug!("kernel re-read asked: an address was removed");
                fib_resync.resync();
                self.names().await
            }
            KernelEvent::Address { removed: false } => {
                fib_resync.retry();
                self.names().await
            }
            _ => return false,
        }
        true
    }
}

/// Sends the workload routes if they changed; false when nobody listens any more.
async fn report(
    scan: &Scan,
    last: &mut BTreeMap<IpNet, String>,
    tx: &mpsc::Sender<BTreeMap<IpNet, String>>,
) -> bool {
    let now = scan.workloads();
    if now == *last {
        return true;
    }
    *last = now;
    tx.send(last.clone()).await.is_ok()
}
