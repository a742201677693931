//! Answers control-socket requests from the daemon's snapshot, asking the speaker and
//! the FIB task for what they own. Every question to another task has a timeout, so a
//! busy speaker makes `tern routes` slow, never the daemon stuck.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipnet::IpNet;
use serde_json::Value;
use tern_bgp::rib::export::Exported;
use tern_bgp::speaker::{PeerStats, SpeakerCommand};
use tern_fib::diag::{AnnouncedNextHop, EbgpFacts, PeerFacts};
use tokio::sync::{mpsc, oneshot, Notify};

use super::fib_task::FibMsg;
use super::state::State;
use crate::birdsock::{BirdPeer, BirdView};
use crate::control::proto::{
    DaemonInfo, DiagnoseReply, HealthReply, MessageCounts, PeersReply, ReloadReply, Request,
    StatusReply,
};
use crate::control::server::Handler;

mod actions;
mod received;
mod routes;
mod routes_query;

const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Answers at least this long are followed by a trim of the heap (see
/// [`Handler::answered`]).
const LARGE_ANSWER: usize = 1 << 20;

/// The daemon's request handler.
pub struct DaemonHandler {
    /// Shared snapshot.
    pub state: Arc<Mutex<State>>,
    /// The speaker's commands, once BGP runs (it starts with the first valid
    /// configuration; until then the socket answers from the snapshot alone).
    pub speaker: Arc<std::sync::OnceLock<mpsc::Sender<SpeakerCommand>>>,
    /// The FIB task.
    pub fib: mpsc::Sender<FibMsg>,
    /// Wakes the datastore for `tern reload`.
    pub reload: Arc<Notify>,
    /// The diagnoser's own memory; held while one evaluation runs, so the periodic
    /// one and `tern diagnose`'s never interleave their log lines.
    pub diagnoser: tokio::sync::Mutex<super::diagnoser::Diagnoser>,
    /// `tern monitor`'s stream.
    pub monitor: super::monitor::Hub,
}

pub(super) async fn ask<T>(what: &str, rx: oneshot::Receiver<T>) -> Result<T, String> {
    match tokio::time::timeout(ASK_TIMEOUT, rx).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(format!("the {what} has stopped")),
        Err(_) => Err(format!(
            "the {what} did not answer within {}s",
            ASK_TIMEOUT.as_secs()
        )),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| format!("cannot encode the reply: {e}"))
}

/// A reply as JSON text, serialized once (see [`Handler::handle_text`]).
fn text<T: serde::Serialize>(v: &T) -> Result<String, String> {
    serde_json::to_string(v).map_err(|e| format!("cannot encode the reply: {e}"))
}

impl DaemonHandler {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, String> {
        self.state.lock().map_err(|_| {
            "the daemon's state is poisoned (a task panicked); restart tern".to_string()
        })
    }

    fn speaker(&self) -> Result<&mpsc::Sender<SpeakerCommand>, String> {
        self.speaker.get().ok_or_else(|| {
            "BGP is not running yet: no valid configuration has been applied (see `tern status`)"
                .to_string()
        })
    }

    /// Asks the speaker `make(reply)` and waits for the answer.
    async fn ask_speaker<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> SpeakerCommand,
    ) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        self.speaker()?
            .send(make(tx))
            .await
            .map_err(|_| "the BGP speaker has stopped".to_string())?;
        ask("BGP speaker", rx).await
    }

    fn daemon_info(&self, s: &State) -> DaemonInfo {
        let i = s.intent.as_ref();
        DaemonInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            node: i.map(|i| i.node.clone()).unwrap_or_default(),
            router_id: i.map(|i| i.router_id.to_string()).unwrap_or_default(),
            asn: i.map(|i| i.asn).unwrap_or(0),
            started: humantime::format_rfc3339_seconds(s.started).to_string(),
            uptime_s: s.started_at.elapsed().as_secs(),
            datastore: s.datastore.clone(),
            intent_revision: s.revision,
            config_error: s.config_error.clone(),
            datastore_error: s.datastore_error.clone(),
            draining: s.draining,
        }
    }

    async fn peers(
        &self,
        only: Option<IpAddr>,
    ) -> Result<Vec<crate::control::proto::PeerInfo>, String> {
        let (tx, rx) = oneshot::channel();
        let asked = match self.speaker() {
            Ok(sp) => sp.send(SpeakerCommand::PeerStats(tx)).await.is_ok(),
            Err(_) => false,
        };
        let stats: BTreeMap<IpAddr, PeerStats> = if asked {
            ask("BGP speaker", rx)
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|s| (s.address, s))
                .collect()
        } else {
            BTreeMap::new()
        };
        let s = self.lock()?;
        let mut infos = s.peer_infos();
        for p in &mut infos {
            let Ok(a) = p.address.parse::<IpAddr>() else {
                continue;
            };
            if let Some(st) = stats.get(&a) {
                // Counted by the RIB as paths come and go: a status call or a metrics
                // scrape never walks the table. Paths failing the import checks are
                // treated as withdrawn (RFC 7606 style), so received = accepted.
                p.prefixes_received = st.received;
                p.prefixes_accepted = st.received;
                p.prefixes_advertised = st.advertised;
                p.updates_in = st.updates_in;
                p.updates_out = st.updates_out;
                p.policy_rejected_in = st.rejected_import;
                p.policy_filtered_out = st.filtered_export;
                session_facts(p, st);
            }
        }
        if let Some(a) = only {
            infos.retain(|p| p.address.parse::<IpAddr>().ok() == Some(a));
            if infos.is_empty() {
                return Err(format!("{a} is not a configured peer"));
            }
        }
        Ok(infos)
    }

    /// Answers one request: dispatch only, one function per kind.
    pub(super) async fn answer(&self, request: Request) -> Result<Value, String> {
        if let Some(answer) = self.routes_request(&request).await {
            return serde_json::from_str(&answer?)
                .map_err(|e| format!("cannot encode the reply: {e}"));
        }
        match request {
            Request::Status => self.status().await,
            Request::Peers { address } => self.peers_reply(address.as_deref()).await,
            Request::Routes { .. } => Err("`routes` is answered above".into()),
            Request::Fib => self.fib_report().await,
            Request::Diagnose => self.diagnose().await,
            Request::Health => self.health(),
            Request::Reload => self.reload().await,
            Request::PeerAction {
                address,
                action,
                message,
            } => {
                self.peer_action(&address, &action, message.as_deref())
                    .await
            }
            Request::LogLevel { level } => self.log_level(&level),
            Request::Drain { on } => self.drain(on).await,
            Request::Monitor { .. } => Err("`monitor` is a stream: the server answers it".into()),
        }
    }

    /// `tern status`: the daemon and every peer.
    async fn status(&self) -> Result<Value, String> {
        json(&self.status_reply().await?)
    }

    async fn status_reply(&self) -> Result<StatusReply, String> {
        let peers = self.peers(None).await?;
        let daemon = self.daemon_info(&*self.lock()?);
        Ok(StatusReply { daemon, peers })
    }

    /// `tern peers [ADDR]`.
    async fn peers_reply(&self, address: Option<&str>) -> Result<Value, String> {
        json(&self.peers_of(address).await?)
    }

    async fn peers_of(&self, address: Option<&str>) -> Result<PeersReply, String> {
        let only = address.map(parse_address).transpose()?;
        Ok(PeersReply {
            peers: self.peers(only).await?,
        })
    }

    /// `tern fib`: the FIB task's report.
    async fn fib_report(&self) -> Result<Value, String> {
        let (tx, rx) = oneshot::channel();
        self.fib
            .send(FibMsg::Report(tx))
            .await
            .map_err(|_| "the FIB task has stopped".to_string())?;
        json(&ask("FIB task", rx).await?)
    }

    /// `tern diagnose`: every finding, evaluated now (so the answer is never a second
    /// behind a repair), which also updates the list the log and the metrics follow.
    async fn diagnose(&self) -> Result<Value, String> {
        let findings = super::diagnoser::refresh(self).await?;
        json(&DiagnoseReply { findings })
    }

    /// [`Self::peer_facts`] with the next hops in each established eBGP peer's
    /// Adj-RIB-Out (asked of the speaker), for the ebgp-next-hop-unreachable rule.
    /// Without a speaker (BGP not started) nothing is announced.
    pub(super) async fn peer_facts_announced(&self) -> Result<Vec<PeerFacts>, String> {
        let mut peers = self.peer_facts()?;
        let Ok(speaker) = self.speaker() else {
            return Ok(peers);
        };
        for p in peers.iter_mut() {
            let Some(e) = p.ebgp.as_mut() else { continue };
            let (tx, rx) = oneshot::channel();
            if speaker
                .send(SpeakerCommand::AdvertisedNextHops(p.address, tx))
                .await
                .is_err()
            {
                break;
            }
            // None: the session is not established, so nothing is announced.
            if let Some(sent) = ask("BGP speaker", rx).await? {
                e.announced = sent
                    .into_iter()
                    .map(|u| AnnouncedNextHop {
                        next_hop: u.next_hop,
                        example_prefix: u.example,
                        prefixes: u.prefixes,
                    })
                    .collect();
            }
        }
        Ok(peers)
    }

    /// What the FIB task's diagnosis needs to know of each peer.
    pub(super) fn peer_facts(&self) -> Result<Vec<PeerFacts>, String> {
        let s = self.lock()?;
        Ok(s.peers
            .values()
            .map(|p| PeerFacts {
                address: p.intent.address,
                name: super::state::peer_subject(&p.intent),
                network: p.intent.peer_network,
                multihop: p.intent.off_link_expected(),
                // The next hops announced are filled in from the speaker.
                ebgp: (p.intent.remote_as != p.intent.local_as).then(|| EbgpFacts {
                    subject: super::state::peer_subject(&p.intent),
                    announced: Vec::new(),
                }),
            })
            .collect())
    }

    /// `tern health`: live while the main loop ticks, ready as the snapshot says.
    fn health(&self) -> Result<Value, String> {
        let s = self.lock()?;
        let live = s.last_tick.elapsed() < Duration::from_secs(10);
        let (ready, reason) = s.ready();
        json(&HealthReply {
            live,
            ready: live && ready,
            reason: if live {
                reason
            } else {
                "the daemon's main loop has not run for 10 s".into()
            },
        })
    }

    /// `tern reload`: wakes the datastore and waits for the next snapshot's verdict.
    async fn reload(&self) -> Result<Value, String> {
        let before = self.lock()?.snapshots;
        self.reload.notify_one();
        let deadline = tokio::time::Instant::now() + ASK_TIMEOUT;
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let s = self.lock()?;
            if s.snapshots != before {
                let accepted = s.config_error.is_none();
                return json(&ReloadReply {
                    accepted,
                    message: match &s.config_error {
                        Some(e) => e.clone(),
                        None => format!("applied revision {}", s.revision.unwrap_or(0)),
                    },
                });
            }
            if tokio::time::Instant::now() > deadline {
                return json(&ReloadReply {
                    accepted: false,
                    message: "the datastore did not answer within 5 s".into(),
                });
            }
        }
    }
}

/// What the speaker knows of a peer's session beyond the counters: messages by type,
/// the last NOTIFICATION each way, and (while Established) the negotiated timers, the
/// peer's router id, our address and the peer's graceful-restart capability.
fn session_facts(p: &mut crate::control::proto::PeerInfo, st: &PeerStats) {
    let counts = |m: &tern_bgp::fsm::counts::MessageCounts| MessageCounts {
        open: m.open,
        update: m.update,
        notification: m.notification,
        keepalive: m.keepalive,
        route_refresh: m.route_refresh,
    };
    p.messages_received = counts(&st.messages.0);
    p.messages_sent = counts(&st.messages.1);
    p.last_notification_received = st.last_notification_in.clone();
    p.last_notification_sent = st.last_notification_out.clone();
    p.disabled = st.disabled;
    let Some(n) = &st.negotiated else { return };
    p.hold_time = Some(n.hold_time);
    p.keepalive = Some(n.keepalive);
    p.remote_router_id = Some(n.peer_id.to_string());
    p.local_address = n.local_address.map(|a| a.to_string());
    p.local_port = n.local_port;
    p.remote_port = n.remote_port;
    p.graceful_restart = n.peer_graceful_restart.as_ref().map(|g| {
        let kept: Vec<String> = g
            .families
            .iter()
            .filter(|f| f.forwarding_preserved)
            .map(|f| f.family.to_string())
            .collect();
        format!(
            "peer restart time {}s{}, forwarding preserved for {}",
            g.restart_time,
            if g.restart_state { " (restarting)" } else { "" },
            if kept.is_empty() {
                "no family".to_string()
            } else {
                kept.join(", ")
            }
        )
    });
}

/// An address the user typed.
fn parse_address(text: &str) -> Result<IpAddr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an IP address"))
}

/// A prefix the user typed, or an address (a host prefix).
fn parse_prefix_or_address(text: &str) -> Result<IpNet, String> {
    match text.parse::<IpNet>() {
        Ok(n) => Ok(n),
        Err(_) => text
            .parse::<IpAddr>()
            .map(IpNet::from)
            .map_err(|_| format!("{text:?} is not a prefix or an address")),
    }
}

/// One Adj-RIB-Out entry as a `tern routes --advertised` row.
fn advertised_info(prefix: IpNet, e: &Exported, peer: IpAddr) -> crate::control::proto::RouteInfo {
    crate::control::proto::RouteInfo {
        prefix: prefix.to_string(),
        best: super::convert::path_info(
            &e.attrs,
            vec![e.next_hop.to_string()],
            peer.to_string(),
            "advertised",
        ),
        ecmp: false,
        installed: false,
        paths: Vec::new(),
    }
}

impl crate::birdsock::ViewSource for DaemonHandler {
    fn view(
        &self,
        counts: bool,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<BirdView, String>> + Send + '_>> {
        Box::pin(self.bird_view(counts))
    }
}

impl DaemonHandler {
    /// What the BIRD-compatible sockets show (src/birdsock.rs): the snapshot's peers,
    /// with the speaker's prefix counts when `counts`.
    async fn bird_view(&self, counts: bool) -> Result<BirdView, String> {
        let counted: BTreeMap<String, (u64, u64)> = if counts {
            self.peers(None)
                .await?
                .into_iter()
                .map(|p| (p.address, (p.prefixes_received, p.prefixes_advertised)))
                .collect()
        } else {
            BTreeMap::new()
        };
        let s = self.lock()?;
        let not_configured = s.intent.is_none().then(|| {
            s.config_error
                .clone()
                .or_else(|| s.datastore_error.clone())
                .unwrap_or_else(|| "waiting for the datastore's first snapshot".into())
        });
        let peers = s
            .peers
            .values()
            .map(|p| {
                let (received, advertised) = counted
                    .get(&p.intent.address.to_string())
                    .copied()
                    .unwrap_or_default();
                BirdPeer {
                    address: p.intent.address,
                    port: p.intent.port,
                    kind: p.intent.kind,
                    passive: p.intent.passive,
                    remote_as: p.intent.remote_as,
                    local_as: p.intent.local_as,
                    source: p.intent.source,
                    up: p.up,
                    state: p.state.clone(),
                    since: p.since,
                    last_error: p.last_error.clone(),
                    capabilities: p.capabilities.clone(),
                    rr_client: p.intent.rr_client,
                    received,
                    advertised,
                }
            })
            .collect();
        Ok(BirdView {
            router_id: s.intent.as_ref().map(|i| i.router_id),
            started: s.started,
            in_grace: s.in_grace,
            not_configured,
            peers,
        })
    }
}

impl Handler for DaemonHandler {
    fn handle(
        &self,
        request: Request,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send + '_>> {
        Box::pin(self.answer(request))
    }

    fn monitor(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<crate::control::proto::MonitorEvent>> {
        Some(self.monitor.subscribe())
    }

    /// After a large answer (`tern routes` on a big node: tens of MB built and
    /// freed), the freed pages go back to the system: glibc would keep them, and the
    /// node agent's RSS would stay at the peak of the largest answer ever given.
    fn answered(&self, bytes: usize) {
        if bytes >= LARGE_ANSWER {
            super::memory::release_freed();
        }
    }

    fn handle_text(
        &self,
        request: Request,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + '_>> {
        Box::pin(async move {
            // `tern routes` can be 100,000 routes: serialized once, no JSON tree.
            if let Some(answer) = self.routes_request(&request).await {
                return answer;
            }
            // Status and peers too: at 1,000 peers the tree alone was 5 MB, and
            // monitoring polls them.
            match request {
                Request::Status => text(&self.status_reply().await?),
                Request::Peers { address } => text(&self.peers_of(address.as_deref()).await?),
                request => text(&self.answer(request).await?),
            }
        })
    }
}
