//! What the main loop does with the datastore: each snapshot goes through the
//! [`Tracker`]; an accepted intent is recorded for the control socket, published for
//! the FIB task's route filter, and its diff applied live (originations, blackholes,
//! peers added, changed or removed, learnt routes re-shaped after a pool edit). A
//! rejected snapshot leaves the intent in force. Borrowed workload addresses seen in
//! the kernel are originated here too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ipnet::IpNet;
use tern_bgp::speaker::SpeakerCommand;
use tern_config::cluster::DEFAULT_SECRETS_DIR;
use tern_config::datastore::endpoint_status::LocalWorkload;
use tern_config::datastore::StoreEvent;
use tern_config::diff::IntentDiff;
use tern_config::intent::Intent;
use tern_config::tracker::{Accepted, Rejected, Tracker};
use tern_config::DaemonConfig;
use tokio::sync::{mpsc, watch};

use super::fib_task::FibMsg;
use super::state::State;
use super::{convert, routes};

/// What the intent is computed from: the datastore, and Felix's endpoint status files.
#[derive(Debug)]
pub enum Input {
    /// A datastore event.
    Store(StoreEvent),
    /// This node's workloads Felix selected for local workload peerings, all of them.
    LocalWorkloads(Vec<LocalWorkload>),
}

/// Applies a store event to the tracker; returns the diff when a snapshot (or a change
/// of the workloads selected for local workload peerings) was accepted.
pub fn on_store_event(
    ev: Input,
    tracker: &mut Tracker,
    state: &Arc<Mutex<State>>,
    published: &watch::Sender<Option<Arc<Intent>>>,
) -> Option<IntentDiff> {
    match ev {
        Input::Store(StoreEvent::Snapshot {
            documents,
            revision,
        }) => {
            let result = tracker.apply(&documents, revision);
            if let Ok(mut s) = state.lock() {
                s.snapshots += 1;
                if s.datastore_error.take().is_some() {
                    tracing::info!("datastore readable again");
                }
                if result.is_ok() {
                    s.revision = Some(revision);
                }
            }
            accepted(result, tracker, state, published)
        }
        Input::LocalWorkloads(w) => {
            tracing::debug!(
                workloads = w.len(),
                "workloads selected for local workload peerings changed"
            );
            let result = tracker.apply_local_workloads(w)?;
            accepted(result, tracker, state, published)
        }
        Input::Store(StoreEvent::Unavailable(why)) => {
            tracing::warn!("datastore unavailable, the configuration in force stays: {why}");
            if let Ok(mut s) = state.lock() {
                if s.intent.is_none() {
                    s.config_error = Some(format!("datastore unavailable: {why}"));
                } else {
                    // The outage's start stays; its cause is the latest the store gave
                    // (unreachable, then refused credentials once it answers again).
                    let since = s
                        .datastore_error
                        .as_deref()
                        .and_then(|e| e.strip_prefix("since "))
                        .and_then(|e| e.split_once(": "))
                        .map(|(t, _)| t.to_string())
                        .unwrap_or_else(|| {
                            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                                .to_string()
                        });
                    s.datastore_error = Some(format!("since {since}: {why}"));
                }
            }
            None
        }
    }
}

/// Records an accepted intent (logged warnings, the state, the published intent) or
/// a rejected one (the previous stays); the diff when accepted.
fn accepted(
    result: Result<Accepted, Rejected>,
    tracker: &Tracker,
    state: &Arc<Mutex<State>>,
    published: &watch::Sender<Option<Arc<Intent>>>,
) -> Option<IntentDiff> {
    let Ok(mut s) = state.lock() else {
        return None;
    };
    match result {
        Ok(accepted) => {
            for w in &accepted.warnings {
                tracing::warn!("{w}");
            }
            s.config_error = None;
            s.intent = tracker.current().cloned();
            // For the route filter in the FIB task, before anything acts on the diff.
            published.send_replace(tracker.current().cloned().map(Arc::new));
            Some(accepted.diff)
        }
        Err(e) => {
            let text = e.to_string();
            for line in text.lines() {
                tracing::error!("configuration rejected, the previous one stays in force: {line}");
            }
            s.config_error = Some(text);
            None
        }
    }
}

/// Applies a later diff: prefixes live; session changes are recorded and logged.
pub async fn apply_diff(
    d: &IntentDiff,
    intent: &Intent,
    speaker: &mpsc::Sender<SpeakerCommand>,
    fib: &mpsc::Sender<FibMsg>,
    state: &Arc<Mutex<State>>,
    cfg: &DaemonConfig,
    workloads: &BTreeMap<IpNet, String>,
) {
    if d.is_empty() {
        tracing::info!("configuration re-read: nothing changed for this node");
        return;
    }
    routes::originate(d, speaker, workloads).await;
    routes::install_own(d, intent, fib, cfg.fib.table).await;
    if d.policy_changed && cfg.fib.enabled {
        // Pools or the route priority changed (an ipipMode edit, a pool turned VXLAN,
        // programClusterRoutes, ipv4NormalRoutePriority): the speaker hands its whole
        // Loc-RIB to the FIB task again, whose filter turns it into kernel routes under
        // the intent published before this; only the routes that differ change.
        let _ = speaker.send(SpeakerCommand::Replay).await;
    }
    let secrets_dir = PathBuf::from(DEFAULT_SECRETS_DIR);
    for a in &d.peers_removed {
        tracing::info!(peer = %a, "peer removed from the configuration: closing its session");
        let _ = speaker
            .send(SpeakerCommand::RemovePeer(
                *a,
                "peer removed from configuration".into(),
            ))
            .await;
    }
    for p in &d.peers_changed {
        tracing::info!(peer = %p.address, "peer settings changed: restarting its session");
        let _ = speaker
            .send(SpeakerCommand::RemovePeer(
                p.address,
                "peer configuration changed".into(),
            ))
            .await;
    }
    for p in d.peers_changed.iter().chain(&d.peers_added) {
        match convert::peer_config(intent, p, &secrets_dir, &cfg.limits) {
            Ok(c) => {
                if d.peers_added.contains(p) {
                    tracing::info!(peer = %p.address, origin = %p.origin, "new peer: starting its session");
                }
                let _ = speaker.send(SpeakerCommand::AddPeer(c)).await;
            }
            Err(e) => tracing::error!("{e}"),
        }
    }
    if let Ok(mut s) = state.lock() {
        s.set_peers(intent);
        for p in &d.peers_changed {
            if let Some(ps) = s.peers.get_mut(&p.address) {
                ps.up = false;
                ps.state = "Idle".into();
                ps.since = std::time::SystemTime::now();
            }
        }
        if d.identity_changed {
            // The speaker's router id, AS and listener are fixed at start.
            let msg = "the router id, AS, cluster id or listener changed: restart tern to apply it"
                .to_string();
            tracing::warn!("{msg}");
            s.config_error = Some(msg);
        }
    }
    tracing::info!(
        originated = d.originated.len(),
        withdrawn = d.withdrawn.len(),
        "configuration change applied"
    );
}

/// Originates the workload addresses that are borrowed (on a workload interface, inside
/// a pool that exports, outside this node's own blocks, not already originated from
/// IPAM data) and withdraws those that no longer are. BGPConfiguration
/// `ignoredInterfaces` plays no part: confd renders it into BIRD's `direct` protocol
/// only (connected routes, which tern does not learn), never into the kernel protocol
/// that learns workload routes.
pub async fn sync_workloads(
    intent: &Intent,
    workloads: &BTreeMap<IpNet, String>,
    originated: &mut BTreeSet<IpNet>,
    speaker: &mpsc::Sender<SpeakerCommand>,
    state: &Arc<Mutex<State>>,
) {
    let wanted: BTreeSet<IpNet> = workloads
        .iter()
        .filter(|(p, ifname)| {
            intent.is_workload_interface(ifname)
                && intent.pool_of(p).is_some_and(|pool| pool.export)
                && !intent.own_blocks.iter().any(|b| b.contains(*p))
                && !intent.originated.contains_key(*p)
        })
        .map(|(p, _)| *p)
        .collect();
    for p in wanted.difference(originated) {
        tracing::info!(prefix = %p, interface = %workloads.get(p).map(String::as_str).unwrap_or("?"), "advertising a borrowed workload address seen in the kernel");
        let _ = speaker
            .send(SpeakerCommand::Originate {
                prefix: *p,
                attrs: convert::own_attrs(),
                // A workload route BIRD would learn from the kernel, on its interface.
                source: tern_bgp::policy::RouteSource::Kernel,
                interface: workloads.get(p).cloned(),
            })
            .await;
    }
    for p in originated.difference(&wanted) {
        // An address the intent now originates itself stays originated (by the intent).
        if !intent.originated.contains_key(p) {
            tracing::info!(prefix = %p, "withdrawing a workload address no longer in the kernel");
            let _ = speaker.send(SpeakerCommand::Withdraw(*p)).await;
        }
    }
    *originated = wanted.clone();
    if let Ok(mut s) = state.lock() {
        s.kernel_originated = wanted;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

    use super::*;

    /// node-a with an exporting pool and no block of its own; `extra` added.
    fn intent_of(extra: &str) -> Intent {
        let text = format!(
            "apiVersion: projectcalico.org/v3\nkind: Node\nmetadata: {{name: node-a}}\nspec: {{bgp: {{ipv4Address: 198.51.100.10/24}}}}\n---\napiVersion: projectcalico.org/v3\nkind: IPPool\nmetadata: {{name: pods}}\nspec: {{cidr: 198.18.4.0/24}}\n{extra}"
        );
        let (c, _) =
            tern_config::cluster::Cluster::from_documents(&[tern_config::datastore::Document {
                origin: "cluster.yaml".into(),
                text,
            }])
            .unwrap();
        tern_config::intent::intent(&c, "node-a").unwrap().0
    }

    /// The prefixes `sync_workloads` originates from `workloads`.
    async fn originated(intent: &Intent, workloads: &[(&str, &str)]) -> BTreeSet<IpNet> {
        let (tx, mut rx) = mpsc::channel(16);
        let state = Arc::new(Mutex::new(State::new("test".into())));
        let w: BTreeMap<IpNet, String> = workloads
            .iter()
            .map(|(p, i)| (p.parse().unwrap(), i.to_string()))
            .collect();
        let mut done = BTreeSet::new();
        sync_workloads(intent, &w, &mut done, &tx, &state).await;
        drop(tx);
        let mut sent = BTreeSet::new();
        while let Some(c) = rx.recv().await {
            if let SpeakerCommand::Originate { prefix, .. } = c {
                sent.insert(prefix);
            }
        }
        assert_eq!(sent, done);
        sent
    }

    fn set(list: &[&str]) -> BTreeSet<IpNet> {
        list.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[tokio::test]
    async fn borrowed_addresses_are_found_on_felixs_interface_prefixes() {
        let w = [
            ("198.18.4.7/32", "cali12345"),
            ("198.18.4.8/32", "tap67890"),
            ("198.18.4.9/32", "eth1"),
        ];
        let default = intent_of("");
        assert_eq!(originated(&default, &w).await, set(&["198.18.4.7/32"]));
        let felix = intent_of("---\napiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\nspec: {interfacePrefix: \"tap,cali\"}\n");
        assert_eq!(
            originated(&felix, &w).await,
            set(&["198.18.4.7/32", "198.18.4.8/32"])
        );
    }

    #[tokio::test]
    async fn ignored_interfaces_do_not_hide_borrowed_workload_addresses() {
        // confd puts ignoredInterfaces in BIRD's direct protocol only; the kernel
        // protocol still learns the workload route.
        let i = intent_of("---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {ignoredInterfaces: [\"cali*\"]}\n");
        assert_eq!(i.ignored_interfaces, ["cali*"]);
        let w = [("198.18.4.7/32", "cali12345")];
        assert_eq!(originated(&i, &w).await, set(&["198.18.4.7/32"]));
    }
}
