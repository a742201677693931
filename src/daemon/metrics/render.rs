//! What `/metrics` says: the daemon (build, configuration revision, datastore, uptime),
//! each peer (state, uptime, prefixes, messages and NOTIFICATIONs by type and code,
//! policy decisions), the Loc-RIB's size per family, the FIB (routes by state,
//! refusals, kernel batch durations), diagnostic findings, and the process' memory,
//! CPU and descriptors.
//!
//! Everything is read at scrape time from the same sources the control socket uses, so
//! the numbers agree with `tern status` / `fib` / `diagnose`. Table sizes come from
//! counters the speaker and the FIB task keep as routes change ([`RibCounts`],
//! [`FibCounts`]): a scrape costs the same with a million routes as with none.
//! prometheus-client encodes.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use tern_bgp::speaker::{PeerStats, RibCounts, SpeakerCommand};
use tern_fib::task::{ApplyDurations, FibCounts, FibMsg};
use tokio::sync::oneshot;

use super::process::{self, Figures};
use crate::control::proto::{DiagnoseReply, PeerInfo, Request, StatusReply};
use crate::daemon::handler::{ask as ask_task, DaemonHandler};

type Labels = Vec<(String, String)>;

/// The BGP states a session can be in, as `tern status` names them.
const STATES: [&str; 6] = [
    "Idle",
    "Connect",
    "Active",
    "OpenSent",
    "OpenConfirm",
    "Established",
];

/// Everything one scrape reports; a part whose owner did not answer is left out.
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub status: Option<StatusReply>,
    pub stats: Vec<PeerStats>,
    pub rib: Option<RibCounts>,
    pub fib: Option<FibCounts>,
    pub diagnose: Option<DiagnoseReply>,
    pub process: Figures,
}

/// The metrics text.
pub async fn render(h: &DaemonHandler) -> String {
    encode_facts(&gather(h).await)
}

async fn ask<T: serde::de::DeserializeOwned>(h: &DaemonHandler, r: Request) -> Option<T> {
    let v = h.answer(r).await.ok()?;
    serde_json::from_value(v).ok()
}

/// Asks each owner for its part (all answers are counts kept in place or small).
async fn gather(h: &DaemonHandler) -> Facts {
    let mut facts = Facts {
        status: ask::<StatusReply>(h, Request::Status).await,
        // The diagnoser's list as it last evaluated it (about once a second): a scrape
        // does not evaluate again.
        diagnose: h.state.lock().ok().map(|s| DiagnoseReply {
            findings: s.findings.clone(),
        }),
        process: process::read(),
        ..Facts::default()
    };
    if let Some(speaker) = h.speaker.get() {
        let (tx, rx) = oneshot::channel();
        if speaker.send(SpeakerCommand::PeerStats(tx)).await.is_ok() {
            facts.stats = ask_task("BGP speaker", rx).await.unwrap_or_default();
        }
        let (tx, rx) = oneshot::channel();
        if speaker.send(SpeakerCommand::RibCounts(tx)).await.is_ok() {
            facts.rib = ask_task("BGP speaker", rx).await.ok();
        }
    }
    let (tx, rx) = oneshot::channel();
    if h.fib.send(FibMsg::Counts(tx)).await.is_ok() {
        facts.fib = ask_task("FIB task", rx).await.ok();
    }
    facts
}

/// The text for `facts`.
pub(super) fn encode_facts(facts: &Facts) -> String {
    let mut root = Registry::default();
    process_metrics(&mut root, &facts.process);
    let reg = root.sub_registry_with_prefix("tern");
    reg.register(
        "build",
        "tern's version",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    if let Some(s) = &facts.status {
        daemon_metrics(reg, s);
        peer_metrics(reg, &s.peers);
        message_metrics(reg, &s.peers, &facts.stats);
    }
    if let Some(r) = &facts.rib {
        gauge(
            reg,
            "rib_prefixes",
            "Loc-RIB prefixes with a best path, by address family",
            vec![
                (label(&[("family", "ipv4")]), n64(r.ipv4_prefixes)),
                (label(&[("family", "ipv6")]), n64(r.ipv6_prefixes)),
            ],
        );
        single(
            reg,
            "rib_paths",
            "Paths held from every source (Adj-RIBs-In after the import checks, our own routes)",
            n64(r.paths),
        );
    }
    if let Some(f) = &facts.fib {
        fib_metrics(reg, f);
    }
    if let Some(d) = &facts.diagnose {
        diagnose_metrics(reg, d);
    }
    let mut out = String::new();
    if encode(&mut out, &root).is_err() {
        return "# tern: cannot encode metrics\n".into();
    }
    out
}

fn n64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn gauge(reg: &mut Registry, name: &str, help: &str, values: Vec<(Labels, i64)>) {
    let f = Family::<Labels, Gauge>::default();
    for (l, v) in values {
        f.get_or_create(&l).set(v);
    }
    reg.register(name, help, f);
}

fn single(reg: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64>::default();
    g.set(v);
    reg.register(name, help, g);
}

fn float(reg: &mut Registry, name: &str, help: &str, v: f64) {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(v);
    reg.register(name, help, g);
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The process figures, under the names every Prometheus client library uses.
fn process_metrics(reg: &mut Registry, f: &Figures) {
    if let Some(b) = f.resident_bytes {
        single(
            reg,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            n64(b),
        );
    }
    if let Some(s) = f.cpu_seconds {
        let c = Counter::<f64, AtomicU64>::default();
        c.inc_by(s);
        reg.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            c,
        );
    }
    if let Some(n) = f.open_fds {
        single(
            reg,
            "process_open_fds",
            "Number of open file descriptors",
            n64(n),
        );
    }
    if let Some(t) = f.start_time_seconds {
        float(
            reg,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            t,
        );
    }
}

/// The daemon's configuration, datastore and uptime.
fn daemon_metrics(reg: &mut Registry, s: &StatusReply) {
    let d = &s.daemon;
    single(
        reg,
        "config_revision",
        "Datastore revision of the configuration in force",
        d.intent_revision.unwrap_or(0),
    );
    single(
        reg,
        "config_error",
        "1 when the newest configuration was rejected or needs a restart",
        i64::from(d.config_error.is_some()),
    );
    single(
        reg,
        "datastore_up",
        "0 while the datastore cannot be read (the configuration in force stays; tern status says why)",
        i64::from(d.datastore_error.is_none()),
    );
    single(
        reg,
        "uptime_seconds",
        "Seconds since the daemon started",
        n64(d.uptime_s),
    );
}

/// Per-peer session state and sizes.
fn peer_metrics(reg: &mut Registry, peers: &[PeerInfo]) {
    let peer = |x: &PeerInfo| label(&[("peer", &x.address), ("type", &x.kind)]);
    type Pick = fn(&PeerInfo) -> i64;
    let gauges: [(&str, &str, Pick); 5] = [
        ("peer_up", "1 when the BGP session is Established", |x| {
            i64::from(x.state == "Established")
        }),
        (
            "peer_uptime_seconds",
            "Seconds the session has been Established",
            |x| n64(x.uptime_s),
        ),
        (
            "peer_prefixes_received",
            "Prefixes for which the peer provides a Loc-RIB path",
            |x| n64(x.prefixes_received),
        ),
        (
            "peer_prefixes_accepted",
            "Prefixes from the peer accepted by import",
            |x| n64(x.prefixes_accepted),
        ),
        (
            "peer_prefixes_advertised",
            "Prefixes in the peer's Adj-RIB-Out",
            |x| n64(x.prefixes_advertised),
        ),
    ];
    for (name, help, pick) in gauges {
        gauge(
            reg,
            name,
            help,
            peers.iter().map(|x| (peer(x), pick(x))).collect(),
        );
    }
    // One series per state, 1 for the current one: `tern_peer_state{state="Active"} == 1`
    // finds the sessions stuck connecting.
    let states = peers
        .iter()
        .flat_map(|x| {
            STATES.iter().map(move |s| {
                (
                    label(&[("peer", &x.address), ("state", s)]),
                    i64::from(x.state == *s),
                )
            })
        })
        .collect();
    gauge(
        reg,
        "peer_state",
        "1 for the BGP session's current state",
        states,
    );
    peer_counters(reg, peers);
    bfd_metrics(reg, peers);
}

/// The BFD states, as `tern peers` names them.
const BFD_STATES: [&str; 4] = ["AdminDown", "Down", "Init", "Up"];

/// Each BFD session: its state (one series per state, 1 for the current one) and its
/// detection time. Nothing when BFD is off.
fn bfd_metrics(reg: &mut Registry, peers: &[PeerInfo]) {
    let with: Vec<(&PeerInfo, &crate::control::proto::BfdInfo)> = peers
        .iter()
        .filter_map(|p| p.bfd.as_ref().map(|b| (p, b)))
        .filter(|(_, b)| b.state != "none")
        .collect();
    if with.is_empty() {
        return;
    }
    let states = with
        .iter()
        .flat_map(|(p, b)| {
            BFD_STATES.iter().map(move |s| {
                (
                    label(&[("peer", &p.address), ("state", s)]),
                    i64::from(b.state == *s),
                )
            })
        })
        .collect();
    gauge(
        reg,
        "bfd_session_state",
        "1 for the BFD session's current state",
        states,
    );
    let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (p, b) in &with {
        #[allow(clippy::cast_precision_loss)] // milliseconds: far below 2^52
        f.get_or_create(&label(&[("peer", &p.address)]))
            .set(b.detect_time_ms as f64 / 1000.0);
    }
    reg.register(
        "bfd_detect_time_seconds",
        "Silence after which BFD declares the peer down",
        f,
    );
    let downs = Family::<Labels, Counter>::default();
    for (p, b) in &with {
        downs
            .get_or_create(&label(&[("peer", &p.address)]))
            .inc_by(b.downs);
    }
    reg.register(
        "bfd_session_downs",
        "Times the BFD session went from Up to Down",
        downs,
    );
}

/// The per-peer counters kept under their first names: flaps, UPDATEs, policy.
fn peer_counters(reg: &mut Registry, peers: &[PeerInfo]) {
    type Pick = fn(&PeerInfo) -> u64;
    let table: [(&str, &str, Pick); 5] = [
        ("peer_flaps", "Times the session left Established", |x| {
            x.flaps
        }),
        ("peer_updates_received", "UPDATE messages received", |x| {
            x.updates_in
        }),
        ("peer_updates_sent", "UPDATE messages sent", |x| {
            x.updates_out
        }),
        (
            "peer_policy_rejected_in",
            "Routes from the peer its import policy rejected",
            |x| x.policy_rejected_in,
        ),
        (
            "peer_policy_filtered_out",
            "Times its export policy kept a route from the peer",
            |x| x.policy_filtered_out,
        ),
    ];
    for (name, help, pick) in table {
        let c = Family::<Labels, Counter>::default();
        for x in peers {
            c.get_or_create(&label(&[("peer", &x.address), ("type", &x.kind)]))
                .inc_by(pick(x));
        }
        reg.register(name, help, c);
    }
}

/// BGP messages by type (as the session counted them on the wire, since the peer was
/// configured) and NOTIFICATIONs by code, per peer and direction.
fn message_metrics(reg: &mut Registry, peers: &[PeerInfo], stats: &[PeerStats]) {
    let by_peer: BTreeMap<String, &PeerStats> =
        stats.iter().map(|s| (s.address.to_string(), s)).collect();
    for (dir, help) in [
        ("received", "BGP messages received"),
        ("sent", "BGP messages sent"),
    ] {
        let msgs = Family::<Labels, Counter>::default();
        let notes = Family::<Labels, Counter>::default();
        for x in peers {
            let st = by_peer.get(&x.address);
            let (m, codes) = match dir {
                "received" => (&x.messages_received, st.map(|s| &s.notifications_in)),
                _ => (&x.messages_sent, st.map(|s| &s.notifications_out)),
            };
            let typed = |t: &str| label(&[("peer", &x.address), ("type", t)]);
            for (t, n) in [
                ("open", m.open),
                ("update", m.update),
                ("notification", m.notification),
                ("keepalive", m.keepalive),
                ("route_refresh", m.route_refresh),
            ] {
                msgs.get_or_create(&typed(t)).inc_by(n);
            }
            for (code, count) in codes.into_iter().flatten() {
                notes
                    .get_or_create(&label(&[("peer", &x.address), ("code", code)]))
                    .inc_by(*count);
            }
        }
        reg.register(format!("bgp_messages_{dir}"), help, msgs);
        reg.register(
            format!("bgp_notifications_{dir}"),
            format!("NOTIFICATION messages {dir}, by error code"),
            notes,
        );
    }
}

/// The kernel routes by state, refusals and batch durations.
fn fib_metrics(reg: &mut Registry, f: &FibCounts) {
    let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    gauge(
        reg,
        "fib_routes",
        "tern's kernel routes by state",
        vec![
            (label(&[("state", "installed")]), n(f.installed)),
            (label(&[("state", "missing")]), n(f.missing)),
            (label(&[("state", "unexpected")]), n(f.unexpected)),
        ],
    );
    gauge(
        reg,
        "fib_refused",
        "Refused routes, by who refused them: the kernel (IP Helper on Windows) or tern itself",
        vec![
            (label(&[("by", "kernel")]), n(f.refused_by_system)),
            (label(&[("by", "tern")]), n(f.refused_by_tern)),
        ],
    );
    float(
        reg,
        "fib_last_apply_seconds",
        "Duration of the last batch of kernel route changes",
        f.last_apply_seconds,
    );
    reg.register(
        "fib_apply_duration_seconds",
        "Durations of the batches of kernel route changes",
        Durations(f.apply.clone()),
    );
}

/// The FIB task's histogram, encoded as one: the task observes, the scrape only reads.
#[derive(Debug)]
struct Durations(ApplyDurations);

impl TypedMetric for Durations {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Durations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.0.sum,
            self.0.count,
            &self.0.pairs(),
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Diagnostic findings by kind and severity.
fn diagnose_metrics(reg: &mut Registry, d: &DiagnoseReply) {
    let mut counts: BTreeMap<(String, String), i64> = Default::default();
    // Every known kind and severity, 0 when absent: a query or an alert sees the
    // series before the first finding of its kind.
    let kinds = tern_fib::diag::FindingKind::ALL
        .iter()
        .map(|k| k.name())
        .chain(["datastore-unavailable"]);
    for kind in kinds {
        for severity in ["info", "warning", "error"] {
            counts.insert((kind.to_string(), severity.to_string()), 0);
        }
    }
    for f in &d.findings {
        *counts
            .entry((f.kind.clone(), f.severity.clone()))
            .or_default() += 1;
    }
    gauge(
        reg,
        "diagnostic_findings",
        "Current diagnostic findings by kind and severity",
        counts
            .into_iter()
            .map(|((k, s), v)| (label(&[("kind", &k), ("severity", &s)]), v))
            .collect(),
    );
}
