//! The tokio driver of [`Speaker`]: one task that waits on the command channel, the
//! sessions' events, the listener's refusals, the earliest timer the core asked for,
//! and the sessions whose queues were full, feeds each to the core and carries out its
//! outputs. It owns the session links and the listener; it makes no decisions.
//!
//! Flow control: an [`Output::Send`] is tried without waiting. When the session's queue
//! is full the driver keeps that one batch, tells the core [`Input::Stalled`] (which then
//! notes prefixes instead of building UPDATEs), and waits for room in a task of its own;
//! once the batch (and anything queued behind it, such as a new session's table) is in,
//! the core hears [`Input::Writable`]. Nothing polls.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::session::listener::{Listener, Refused};
use crate::session::{self, Command, DriverConfig, SessionEvent, SessionHandle};

use super::core::{Control, Input, Output, Speaker, TimerId};
use super::{RibNews, SpeakerCommand, SpeakerConfig, SpeakerEvent};

/// Session events taken as one batch at most ([`Speaker::handle_batch`]).
const BATCH: usize = 512;

/// What gives freed heap pages back to the system ([`set_release_freed`]).
static RELEASE_FREED: OnceLock<fn()> = OnceLock::new();

/// Sets what gives freed heap pages back to the system (the daemon's `malloc_trim`),
/// called once the Loc-RIB's table was packed: the allocator would otherwise keep
/// the old nodes' pages resident. Process-wide, as the allocator is; set once.
pub fn set_release_freed(release: fn()) {
    let _ = RELEASE_FREED.set(release);
}

/// How the driver reaches one session: a real session task, or (for tests of the
/// driver) a bare channel whose other end the test reads.
#[derive(Debug, Clone)]
pub enum Link {
    /// A session task.
    Session(SessionHandle),
    /// A channel standing in for a session.
    Channel(mpsc::Sender<Command>),
}

impl Link {
    fn try_send(&self, c: Command) -> Result<(), mpsc::error::TrySendError<Command>> {
        match self {
            Link::Session(h) => h.try_send(c),
            Link::Channel(tx) => tx.try_send(c),
        }
    }

    async fn send(&self, c: Command) -> Result<(), mpsc::error::SendError<Command>> {
        match self {
            Link::Session(h) => h.send(c).await,
            Link::Channel(tx) => tx.send(c).await,
        }
    }
}

/// Starts the session of one peer, reporting to the given channel.
pub type Spawner = Box<dyn FnMut(DriverConfig, mpsc::Sender<SessionEvent>) -> Link + Send>;

/// Starts the speaker; returns its command channel. Sessions start at once. Loc-RIB
/// changes come as [`SpeakerEvent::Routes`] among the other events.
pub async fn spawn(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
) -> io::Result<mpsc::Sender<SpeakerCommand>> {
    spawn_with(cfg, events, None, real_sessions()).await
}

/// Starts the speaker with Loc-RIB changes on their own channel, for a FIB task that
/// takes them straight from the speaker.
pub async fn spawn_routed(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
    routes: mpsc::Sender<RibNews>,
) -> io::Result<mpsc::Sender<SpeakerCommand>> {
    spawn_with(cfg, events, Some(routes), real_sessions()).await
}

/// Session tasks on real sockets.
fn real_sessions() -> Spawner {
    Box::new(|dc, events| Link::Session(session::spawn(dc, events)))
}

/// Starts the speaker with sessions made by `sessions` (tests of the driver pass
/// channels); `routes` as for [`spawn_routed`]. The listener is only bound for real
/// sessions' peers to be registered with it.
pub async fn spawn_with(
    cfg: SpeakerConfig,
    events: mpsc::Sender<SpeakerEvent>,
    routes: Option<mpsc::Sender<RibNews>>,
    sessions: Spawner,
) -> io::Result<mpsc::Sender<SpeakerCommand>> {
    let (ctx, crx) = mpsc::channel(64);
    let (stx, srx) = mpsc::channel(1024);
    let listener = match cfg.listen {
        Some(a) => {
            let all: Vec<SocketAddr> = std::iter::once(a)
                .chain(cfg.extra_listen.iter().copied())
                .collect();
            Some(Arc::new(Listener::bind_all(&all)?))
        }
        None => None,
    };
    let (core, outputs) = Speaker::new(cfg, Instant::now().into_std());
    let mut driver = Driver {
        core,
        links: HashMap::new(),
        listener,
        sessions: stx,
        events,
        routes,
        spawner: sessions,
        timers: BTreeSet::new(),
        waiting: HashMap::new(),
        writable: JoinSet::new(),
    };
    // A peer whose session cannot start is reported and forgotten there, as one
    // added later: it must not keep the other peers from starting.
    driver.run_outputs(outputs).await;
    let (rtx, rrx) = mpsc::channel(16);
    if let Some(l) = &driver.listener {
        tokio::spawn(Arc::clone(l).run(rtx));
    }
    tokio::spawn(driver.run(crx, srx, rrx));
    Ok(ctx)
}

struct Driver {
    core: Speaker,
    links: HashMap<IpAddr, Link>,
    /// The listener, to register peers added later.
    listener: Option<Arc<Listener>>,
    /// Where session tasks report, for peers added later.
    sessions: mpsc::Sender<SessionEvent>,
    events: mpsc::Sender<SpeakerEvent>,
    /// Where Loc-RIB news goes when not among the events.
    routes: Option<mpsc::Sender<RibNews>>,
    spawner: Spawner,
    /// Armed timers, earliest first.
    timers: BTreeSet<(Instant, TimerId)>,
    /// Per stalled session: batches waiting behind the one being delivered.
    waiting: HashMap<IpAddr, VecDeque<Vec<Bytes>>>,
    /// Deliveries to stalled sessions; each ends when its session took the batch.
    writable: JoinSet<IpAddr>,
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<SpeakerCommand>,
        mut sessions: mpsc::Receiver<SessionEvent>,
        mut refused: mpsc::Receiver<Refused>,
    ) {
        loop {
            let next = self.timers.first().map(|(at, _)| *at);
            tokio::select! {
                c = commands.recv() => match c {
                    None => return self.shutdown(None, Command::Stop),
                    Some(SpeakerCommand::Shutdown(text)) => return self.shutdown(text, Command::Stop),
                    Some(SpeakerCommand::ShutdownForRestart(text)) => {
                        return self.shutdown(text, Command::Restart)
                    }
                    Some(c) => self.command(c).await,
                },
                Some(e) = sessions.recv() => {
                    // What else the sessions have said meanwhile goes in the same
                    // batch (bounded, so a busy speaker still sees its timers).
                    let mut batch = VecDeque::from([Input::Session(e)]);
                    while batch.len() < BATCH {
                        match sessions.try_recv() {
                            Ok(e) => batch.push_back(Input::Session(e)),
                            Err(_) => break,
                        }
                    }
                    // The core stops after each full batch of changes, so what it
                    // encoded is written (or found not to fit) before it goes on.
                    while !batch.is_empty() {
                        let outputs = self.core.handle_batch(Instant::now().into_std(), &mut batch);
                        self.run_outputs(outputs).await;
                    }
                }
                Some(r) = refused.recv() => {
                    let _ = self.events.send(SpeakerEvent::Refused(r.from)).await;
                }
                () = sleep_until(next), if next.is_some() => {
                    if let Some((_, id)) = self.timers.pop_first() {
                        self.input(Input::Timer(id)).await;
                    }
                }
                Some(done) = self.writable.join_next(), if !self.writable.is_empty() => {
                    if let Ok(ip) = done {
                        self.delivered(ip).await;
                    }
                }
            }
        }
    }

    /// Ends every session with `stop(text)` ([`Command::Stop`] or [`Command::Restart`]).
    fn shutdown(&mut self, text: Option<String>, stop: fn(Option<String>) -> Command) {
        for link in self.links.values() {
            send_soon(link, stop(text.clone()));
        }
    }

    async fn command(&mut self, c: SpeakerCommand) {
        let input = match c {
            SpeakerCommand::Originate {
                prefix,
                attrs,
                source,
                interface,
            } => Input::Originate {
                prefix,
                attrs,
                source,
                interface,
            },
            SpeakerCommand::SetPolicy(ip, policy) => Input::SetPolicy(ip, policy),
            SpeakerCommand::Withdraw(prefix) => Input::Withdraw(prefix),
            SpeakerCommand::AddPeer(p) => Input::AddPeer(p),
            SpeakerCommand::RemovePeer(ip, text) => Input::RemovePeer(ip, text),
            SpeakerCommand::Routes(reply) => {
                let _ = reply.send(self.core.routes());
                return;
            }
            SpeakerCommand::RoutesOf(want, reply) => {
                let _ = reply.send(self.core.routes_of(want));
                return;
            }
            SpeakerCommand::PathsOf(prefixes, reply) => {
                let _ = reply.send(self.core.paths_of(&prefixes));
                return;
            }
            SpeakerCommand::Paths(reply) => {
                let _ = reply.send(self.core.paths());
                return;
            }
            SpeakerCommand::PeerStats(reply) => {
                let mut stats = self.core.peer_stats();
                for s in &mut stats {
                    if let Some(Link::Session(h)) = self.links.get(&s.address) {
                        s.messages = h.messages();
                    }
                }
                let _ = reply.send(stats);
                return;
            }
            SpeakerCommand::RibCounts(reply) => {
                let _ = reply.send(self.core.rib_counts());
                return;
            }
            SpeakerCommand::Advertised(ip, reply) => {
                let _ = reply.send(self.core.advertised(ip));
                return;
            }
            SpeakerCommand::Received(ip, prefix, reply) => {
                let _ = reply.send(self.core.received(ip, prefix));
                return;
            }
            SpeakerCommand::AdvertisedNextHops(ip, reply) => {
                let _ = reply.send(self.core.advertised_next_hops(ip));
                return;
            }
            SpeakerCommand::Operate(ip, action, text, reply) => {
                let (answer, outputs) = self.core.operate(ip, action, &text);
                self.run_outputs(outputs).await;
                let _ = reply.send(answer);
                return;
            }
            SpeakerCommand::Drain(on, reply) => {
                let (answer, outputs) = self.core.drain(on);
                self.run_outputs(outputs).await;
                let _ = reply.send(answer);
                return;
            }
            SpeakerCommand::Replay => {
                self.replay().await;
                return;
            }
            SpeakerCommand::Shutdown(_) | SpeakerCommand::ShutdownForRestart(_) => return,
        };
        self.input(input).await;
    }

    async fn input(&mut self, input: Input) {
        let outputs = self.core.handle(Instant::now().into_std(), input);
        self.run_outputs(outputs).await;
    }

    /// Carries out the core's outputs in order (and those of what that tells it).
    async fn run_outputs(&mut self, outputs: Vec<Output>) {
        let mut queue = VecDeque::from(outputs);
        while let Some(o) = queue.pop_front() {
            match o {
                Output::Send(ip, msgs) => {
                    if self.send(ip, msgs) {
                        let now = Instant::now().into_std();
                        queue.extend(self.core.handle(now, Input::Stalled(ip)));
                    }
                }
                Output::Wake(ip) => {
                    // A session still being delivered to says so when done.
                    if self.links.contains_key(&ip) && !self.waiting.contains_key(&ip) {
                        let now = Instant::now().into_std();
                        queue.extend(self.core.handle(now, Input::Writable(ip)));
                    }
                }
                Output::Control(ip, c) => {
                    if let Some(link) = self.links.get(&ip) {
                        send_soon(link, control(c));
                    }
                }
                Output::StartSession(dc) => {
                    let peer = dc.peer;
                    if let Err(e) = self.start_session(*dc).await {
                        let text = format!("cannot start the session: {e}");
                        let _ = self.events.send(SpeakerEvent::PeerDown(peer, text)).await;
                        let now = Instant::now().into_std();
                        queue.extend(self.core.handle(now, Input::StartFailed(peer.ip())));
                    }
                }
                Output::DropSession(ip, text) => {
                    if let Some(l) = &self.listener {
                        l.remove_peer(ip);
                    }
                    self.waiting.remove(&ip);
                    if let Some(link) = self.links.remove(&ip) {
                        send_soon(&link, Command::Stop(Some(text)));
                    }
                }
                Output::Rib(news) => self.rib(news).await,
                // The table's old nodes' pages go back to the system.
                Output::Packed => {
                    if let Some(release) = RELEASE_FREED.get() {
                        release();
                    }
                }
                Output::Event(e) => {
                    let _ = self.events.send(e).await;
                }
                Output::Timer { id, at } => {
                    self.timers.retain(|(_, t)| *t != id);
                    if let Some(at) = at {
                        self.timers.insert((Instant::from_std(at), id));
                    }
                }
            }
        }
    }

    /// Hands the whole Loc-RIB to whoever installs routes, a piece at a time: each
    /// piece waits for room on the channel, and nothing else runs in between, so the
    /// pieces together are the table as it is now.
    async fn replay(&mut self) {
        /// Entries per message: large enough to batch kernel work, small enough that
        /// a million-route table is never copied at once.
        const PIECE: usize = 8192;
        if self.routes.is_none() {
            return;
        }
        let mut after = None;
        loop {
            let piece = self.core.best_after(after, PIECE);
            let Some(last) = piece.last() else {
                return;
            };
            after = Some(last.prefix);
            self.rib(RibNews::Replay(piece)).await;
        }
    }

    async fn rib(&mut self, news: RibNews) {
        match (&self.routes, news) {
            (Some(r), news) => {
                let _ = r.send(news).await;
            }
            (None, RibNews::Changes(c)) => {
                let _ = self.events.send(SpeakerEvent::Routes(c)).await;
            }
            // Without a routes channel nobody waits for convergence, nor installs.
            (None, RibNews::Converged | RibNews::Replay(_)) => {}
        }
    }

    /// Creates a peer's session, registers it with the listener and starts it.
    async fn start_session(&mut self, dc: DriverConfig) -> io::Result<()> {
        let ip = dc.peer.ip();
        session::check_supported(&dc)?;
        let password = dc.password.clone();
        let link = (self.spawner)(dc, self.sessions.clone());
        if let (Some(l), Link::Session(h)) = (&self.listener, &link) {
            l.add_peer(h.clone(), password.as_deref())?;
        }
        let _ = link.send(Command::Start).await;
        self.links.insert(ip, link);
        Ok(())
    }

    /// Queues UPDATEs for a session without waiting; true if it just stalled.
    fn send(&mut self, ip: IpAddr, msgs: Vec<Bytes>) -> bool {
        if let Some(behind) = self.waiting.get_mut(&ip) {
            behind.push_back(msgs);
            return false;
        }
        let Some(link) = self.links.get(&ip) else {
            return false;
        };
        match link.try_send(Command::SendUpdates(msgs)) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(c)) => {
                self.deliver(ip, link.clone(), c);
                self.waiting.insert(ip, VecDeque::new());
                true
            }
        }
    }

    /// Waits, in a task of its own, until `link` takes `c`.
    fn deliver(&mut self, ip: IpAddr, link: Link, c: Command) {
        self.writable.spawn(async move {
            let _ = link.send(c).await;
            ip
        });
    }

    /// A stalled session took its batch: the next one waiting goes, or the core hears
    /// that it takes commands again.
    async fn delivered(&mut self, ip: IpAddr) {
        let next = self.waiting.get_mut(&ip).and_then(VecDeque::pop_front);
        match (next, self.links.get(&ip)) {
            (Some(msgs), Some(link)) => {
                let link = link.clone();
                self.deliver(ip, link, Command::SendUpdates(msgs));
            }
            (_, link) => {
                self.waiting.remove(&ip);
                if link.is_some() {
                    self.input(Input::Writable(ip)).await;
                }
            }
        }
    }
}

fn control(c: Control) -> Command {
    match c {
        Control::Stop(text) => Command::Stop(text),
        Control::Reset(n, hold) => Command::Reset(n, hold),
        Control::SetCapabilities(caps) => Command::SetCapabilities(caps),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Queues a command for a session without waiting; if its queue is full (the peer is
/// not reading), a task delivers it once there is room, so the speaker never waits
/// on one session. Used for rare commands (stop, capabilities), never per UPDATE.
fn send_soon(link: &Link, c: Command) {
    if let Err(mpsc::error::TrySendError::Full(c)) = link.try_send(c) {
        let link = link.clone();
        tokio::spawn(async move {
            let _ = link.send(c).await;
        });
    }
}
