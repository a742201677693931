//! BFD for the BGP peers (`bfd:` in tern.yaml, Linux): the driver of `tern-bfd` runs
//! on a thread of its own, so that its packets never wait behind the speaker or the
//! FIB (a 1M-route burst keeps the runtime's workers busy, not this thread).
//!
//! A session starts when a BGP session comes up and stops when it goes down
//! (RFC 5882 §4.2: BFD never holds BGP back, and a peer that never answers BFD keeps
//! its session). When a session that had been Up goes Down, the BGP session ends with
//! Cease / BFD Down (RFC 9384) and its routes leave the FIB at once.

use std::net::IpAddr;

use tern_bfd::driver::{Command, Event, Views};
use tern_bfd::session::Config;
use tern_bfd::State;
use tern_bgp::speaker::{PeerAction, SpeakerCommand};
use tern_config::daemon::BfdConfig;
use tern_config::intent::PeerIntent;
use tokio::sync::{mpsc, oneshot};

/// The running driver.
pub struct Bfd {
    commands: mpsc::Sender<Command>,
    cfg: BfdConfig,
}

/// Starts the driver on its own thread, or nothing when BFD is off; its state changes
/// come on the receiver, and its sessions' views go into the daemon's `state`.
pub fn start(
    cfg: &BfdConfig,
    state: &std::sync::Mutex<super::state::State>,
) -> Result<Option<(Bfd, mpsc::Receiver<Event>)>, String> {
    if !cfg.any_enabled() {
        return Ok(None);
    }
    let (commands, rx) = mpsc::channel(1024);
    let (tx, events) = mpsc::channel(1024);
    let v = Views::default();
    if let Ok(mut s) = state.lock() {
        s.bfd = Some(v.clone());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("BFD: cannot start its runtime: {e}"))?;
    std::thread::Builder::new()
        .name("bfd".into())
        .spawn(move || {
            if let Err(e) = runtime.block_on(tern_bfd::driver::run(rx, tx, v)) {
                tracing::error!("BFD stopped: cannot open its UDP sockets (ports 3784, 4784): {e}");
            }
        })
        .map_err(|e| format!("BFD: cannot start its thread: {e}"))?;
    tracing::info!(
        "BFD on: {:?} × {}, detection in {:?}{}",
        cfg.interval,
        cfg.multiplier,
        cfg.detection_time(),
        match cfg.overrides.len() {
            0 => String::new(),
            n => format!(" ({n} overrides for some peers)"),
        }
    );
    let bfd = Bfd {
        commands,
        cfg: cfg.clone(),
    };
    Ok(Some((bfd, events)))
}

impl Bfd {
    /// A BGP session came up: BFD with that peer starts, unless tern.yaml turns it off
    /// for it. A peer reached through a gateway (`reachableBy`, ttlSecurity above 1)
    /// gets a multi-hop session.
    pub fn peer_up(&self, peer: IpAddr, intent: Option<&PeerIntent>) {
        let Some(intent) = intent else { return };
        let Some((interval, multiplier)) = self.cfg.for_peer(peer, intent.kind) else {
            return;
        };
        let multihop = intent.reachable_by.is_some() || intent.ttl_security.is_some_and(|t| t > 1);
        let cmd = Command::Add {
            peer,
            cfg: Config {
                desired_min_tx: interval,
                required_min_rx: interval,
                detect_mult: multiplier,
            },
            multihop,
        };
        if self.commands.try_send(cmd).is_err() {
            tracing::warn!(%peer, "BFD: its driver is not taking commands; no BFD for this session");
        }
    }

    /// A BGP session went down: its BFD session stops (the peer is told AdminDown).
    pub fn peer_down(&self, peer: IpAddr) {
        let _ = self.commands.try_send(Command::Remove(peer));
    }
}

/// A BFD state change: a session seen Up that goes Down ends the BGP session.
pub async fn on_event(ev: Event, speaker: Option<&mpsc::Sender<SpeakerCommand>>) {
    if !(ev.was_up && ev.from == State::Up && ev.to == State::Down) {
        return;
    }
    let why = ev.diag.text();
    tracing::warn!(peer = %ev.peer, "BFD down ({why}): ending the BGP session");
    let Some(sp) = speaker else { return };
    let (tx, rx) = oneshot::channel();
    let cmd = SpeakerCommand::Operate(ev.peer, PeerAction::BfdDown, why, tx);
    if sp.send(cmd).await.is_ok() {
        if let Ok(Err(e)) = rx.await {
            tracing::debug!(peer = %ev.peer, "BFD down: nothing to end: {e}");
        }
    }
}
