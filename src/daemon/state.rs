//! What the control socket reads: a small snapshot of the daemon (identity, intent in
//! force, peer states) updated by the main loop. The Loc-RIB and the kernel view are
//! not copied here; the handler asks their owners (speaker, FIB task) on demand.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Instant, SystemTime};

use tern_bgp::fsm::Negotiated;
use tern_config::intent::{Intent, PeerIntent};

use crate::control::proto::{BfdInfo, PeerInfo};

/// One peer's runtime state.
#[derive(Debug, Clone)]
pub struct PeerState {
    /// The configured session.
    pub intent: PeerIntent,
    /// Established.
    pub up: bool,
    /// RFC 4271 state name as the session last reported it.
    pub state: String,
    /// When `up` last changed (or the peer was configured).
    pub since: SystemTime,
    /// Why it last went down.
    pub last_error: Option<String>,
    /// Negotiated families.
    pub families: Vec<String>,
    /// Negotiated capabilities.
    pub capabilities: Vec<String>,
    /// Times it left Established.
    pub flaps: u64,
}

/// How findings and logs name a peer: its type, address and what configured it
/// (`global peer 198.51.100.1 (BGPPeer tor)`, `node-to-node mesh peer 198.51.100.12
/// (node-2)`), the same in every finding so they can be grouped by subject.
pub fn peer_subject(p: &tern_config::intent::PeerIntent) -> String {
    match &p.peer_node {
        Some(node) => format!("{} peer {} ({node})", p.kind, p.address),
        None => format!("{} peer {} ({})", p.kind, p.address, p.origin),
    }
}

/// The daemon's snapshot.
#[derive(Debug)]
pub struct State {
    /// BFD's sessions, when BFD is on.
    pub bfd: Option<tern_bfd::view::Views>,
    /// Start time.
    pub started: SystemTime,
    /// Monotonic start.
    pub started_at: Instant,
    /// `file <path>` / `etcdv3 <endpoints>`.
    pub datastore: String,
    /// The intent in force.
    pub intent: Option<Intent>,
    /// Its store revision.
    pub revision: Option<i64>,
    /// The newest snapshot's error, if it was rejected; or a change that needs a restart.
    pub config_error: Option<String>,
    /// The datastore cannot be read (since when, why); cleared by the next snapshot.
    pub datastore_error: Option<String>,
    /// BGP cannot start yet (its port is taken), why; cleared once it starts.
    pub bgp_blocked: Option<String>,
    /// Peers by address.
    pub peers: BTreeMap<IpAddr, PeerState>,
    /// Last main-loop tick (liveness).
    pub last_tick: Instant,
    /// The restart grace still runs: the FIB task keeps an earlier run's routes until
    /// the speaker's Loc-RIB is complete (mirrored from the FIB task's flag).
    pub in_grace: bool,
    /// Borrowed workload addresses originated because the kernel routes them to a
    /// workload interface (shown as source `kernel`).
    pub kernel_originated: std::collections::BTreeSet<ipnet::IpNet>,
    /// Snapshots seen from the datastore, accepted or not (`tern reload` waits for the
    /// next one).
    pub snapshots: u64,
    /// Session troubles by peer (connect failures, NOTIFICATIONs while down).
    pub troubles: super::troubles::Troubles,
    /// The findings in force, as the diagnoser last evaluated them (`tern diagnose`,
    /// the metrics and the log follow this one list).
    pub findings: Vec<crate::control::proto::FindingInfo>,
    /// `tern drain` is in force (until `tern undrain` or a restart).
    pub draining: bool,
}

impl State {
    /// A fresh state.
    pub fn new(datastore: String) -> State {
        State {
            bfd: None,
            started: SystemTime::now(),
            started_at: Instant::now(),
            datastore,
            intent: None,
            revision: None,
            config_error: None,
            datastore_error: None,
            bgp_blocked: None,
            peers: BTreeMap::new(),
            last_tick: Instant::now(),
            in_grace: true,
            snapshots: 0,
            kernel_originated: Default::default(),
            troubles: Default::default(),
            findings: Vec::new(),
            draining: false,
        }
    }

    /// Records the peers of a new intent, keeping the state of those that stay.
    pub fn set_peers(&mut self, intent: &Intent) {
        // Every accepted configuration passes here: the place to see whether its peers
        // fit the open-file limit.
        crate::rlimit::check_peers(intent.peers.len());
        // A removed peer's troubles go with it (and do not come back if it is re-added).
        self.troubles.retain(|a| intent.peers.contains_key(a));
        let mut next = BTreeMap::new();
        for (a, p) in &intent.peers {
            let s = match self.peers.remove(a) {
                Some(mut s) => {
                    s.intent = p.clone();
                    s
                }
                None => PeerState {
                    intent: p.clone(),
                    up: false,
                    state: "Idle".into(),
                    since: SystemTime::now(),
                    last_error: None,
                    families: Vec::new(),
                    capabilities: Vec::new(),
                    flaps: 0,
                },
            };
            next.insert(*a, s);
        }
        self.peers = next;
    }

    /// A session came up.
    pub fn peer_up(&mut self, addr: IpAddr, n: &Negotiated) {
        if let Some(p) = self.peers.get_mut(&addr) {
            p.up = true;
            p.state = "Established".into();
            p.since = SystemTime::now();
            p.families = n.families.iter().map(|f| f.to_string()).collect();
            let mut caps = vec!["multiprotocol".to_string(), "4-octet-as".to_string()];
            if n.route_refresh {
                caps.push("route-refresh".into());
            }
            if n.enhanced_route_refresh {
                caps.push("enhanced-route-refresh".into());
            }
            if n.extended_next_hop_ipv4 {
                caps.push("extended-next-hop".into());
            }
            if n.peer_graceful_restart.is_some() {
                caps.push("graceful-restart".into());
            }
            let dir = |fams: &[tern_bgp::wire::Family]| {
                fams.iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join("+")
            };
            if !n.add_path_send.is_empty() {
                caps.push(format!("add-path-send({})", dir(&n.add_path_send)));
            }
            if !n.add_path_receive.is_empty() {
                caps.push(format!("add-path-receive({})", dir(&n.add_path_receive)));
            }
            p.capabilities = caps;
        }
    }

    /// A session went down.
    pub fn peer_down(&mut self, addr: IpAddr, reason: &str) {
        if let Some(p) = self.peers.get_mut(&addr) {
            if p.up {
                p.flaps += 1;
            }
            p.up = false;
            if p.state == "Established" {
                p.state = "Idle".into();
            }
            p.since = SystemTime::now();
            p.last_error = Some(reason.to_string());
        }
    }

    /// calico-node's readiness: no peers is ready; during the first 30 s every peer
    /// must be Established and no graceful restart running; later one is enough.
    pub fn ready(&self) -> (bool, String) {
        if self.intent.is_none() {
            return (false, "no valid configuration has been applied yet".into());
        }
        if let Some(why) = &self.bgp_blocked {
            return (false, why.clone());
        }
        let total = self.peers.len();
        let up = self.peers.values().filter(|p| p.up).count();
        if total == 0 {
            return (true, "ready: no BGP peers configured".into());
        }
        if self.started_at.elapsed().as_secs() < 30 {
            if up < total {
                return (
                    false,
                    format!(
                        "{up} of {total} BGP peers established (all are needed in the first 30 s)"
                    ),
                );
            }
            if self.in_grace {
                return (false, "graceful restart in progress".into());
            }
            return (
                true,
                format!("ready: {up} of {total} BGP peers established"),
            );
        }
        if up == 0 {
            return (false, format!("no BGP peer established (0 of {total})"));
        }
        (
            true,
            format!("ready: {up} of {total} BGP peers established"),
        )
    }

    /// The BFD session with `peer`; `None` when BFD is off.
    fn bfd_info(&self, peer: IpAddr) -> Option<BfdInfo> {
        let views = self.bfd.as_ref()?.lock().ok()?;
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Some(match views.get(&peer) {
            None => BfdInfo {
                state: "none".into(),
                remote_state: "none".into(),
                diagnostic: "no diagnostic".into(),
                ..Default::default()
            },
            Some(v) => BfdInfo {
                state: v.state.name().into(),
                remote_state: v.remote_state.name().into(),
                diagnostic: v.diag.text(),
                multihop: v.multihop,
                detect_time_ms: ms(v.detection_time),
                tx_interval_ms: v.tx_interval.map(ms),
                downs: v.downs,
            },
        })
    }

    /// `tern peers` rows (prefix counts filled by the caller).
    pub fn peer_infos(&self) -> Vec<PeerInfo> {
        self.peers
            .values()
            .map(|p| {
                let uptime = if p.up {
                    p.since.elapsed().map(|d| d.as_secs()).unwrap_or(0)
                } else {
                    0
                };
                PeerInfo {
                    address: p.intent.address.to_string(),
                    port: p.intent.port,
                    asn: p.intent.remote_as,
                    local_asn: p.intent.local_as,
                    kind: p.intent.kind.as_str().into(),
                    state: p.state.clone(),
                    since: humantime::format_rfc3339_seconds(p.since).to_string(),
                    uptime_s: uptime,
                    families: p.families.clone(),
                    capabilities: p.capabilities.clone(),
                    prefixes_received: 0,
                    prefixes_accepted: 0,
                    prefixes_advertised: 0,
                    last_error: p.last_error.clone(),
                    flaps: p.flaps,
                    updates_in: 0,
                    updates_out: 0,
                    policy_rejected_in: 0,
                    policy_filtered_out: 0,
                    md5: p.intent.password.is_some(),
                    gtsm_hops: p.intent.ttl_security,
                    filters: p.intent.filters.iter().map(|f| f.name.clone()).collect(),
                    bfd: self.bfd_info(p.intent.address),
                    ..Default::default()
                }
            })
            .collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::time::Duration;
    use tern_config::datastore::Document;

    pub(crate) fn state_with_mesh() -> State {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/examples/mesh/cluster.yaml"
        ))
        .unwrap();
        let mut t = tern_config::tracker::Tracker::new("node-a");
        t.apply(
            &[Document {
                origin: "cluster.yaml".into(),
                text,
            }],
            1,
        )
        .unwrap();
        let mut s = State::new("file cluster.yaml".into());
        s.intent = t.current().cloned();
        if let Some(i) = t.current() {
            s.set_peers(i);
        }
        s
    }

    #[test]
    fn readiness_follows_calico_nodes_rules() {
        let mut s = State::new("file x".into());
        assert!(!s.ready().0, "no intent yet");
        let mut s2 = state_with_mesh();
        assert_eq!(s2.peers.len(), 4);
        let (ready, why) = s2.ready();
        assert!(!ready);
        assert_eq!(
            why,
            "0 of 4 BGP peers established (all are needed in the first 30 s)"
        );
        let addrs: Vec<IpAddr> = s2.peers.keys().copied().collect();
        for a in &addrs {
            s2.peers.get_mut(a).unwrap().up = true;
        }
        assert_eq!(s2.ready(), (false, "graceful restart in progress".into()));
        s2.in_grace = false;
        assert!(s2.ready().0);
        // After 30 s one peer is enough, none is not.
        s2.started_at = Instant::now().checked_sub(Duration::from_secs(31)).unwrap();
        for a in &addrs[1..] {
            s2.peer_down(*a, "hold timer expired");
        }
        assert!(s2.ready().0);
        s2.peer_down(addrs[0], "hold timer expired");
        assert_eq!(
            s2.ready(),
            (false, "no BGP peer established (0 of 4)".into())
        );
        // No peers at all is ready.
        s.intent = s2.intent.clone();
        assert!(s.ready().0);
    }

    #[test]
    fn peer_rows_carry_state_and_last_error() {
        let mut s = state_with_mesh();
        let a: IpAddr = "198.51.100.11".parse().unwrap();
        s.peer_down(a, "connection refused");
        let row = s
            .peer_infos()
            .into_iter()
            .find(|p| p.address == "198.51.100.11")
            .unwrap();
        assert_eq!(row.kind, "node-to-node mesh");
        assert_eq!(row.state, "Idle");
        assert_eq!(row.last_error.as_deref(), Some("connection refused"));
        assert_eq!(row.uptime_s, 0);
    }
}
