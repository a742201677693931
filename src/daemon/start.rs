//! Starting the parts: the datastore task for the configured datastore, and BGP with
//! the first accepted intent (the speaker, its sessions, the intent's own prefixes).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ipnet::IpNet;
use tern_bgp::policy::PeerPolicy;
use tern_bgp::speaker::{self, RibNews, SpeakerCommand, SpeakerEvent};
use tern_config::cluster::DEFAULT_SECRETS_DIR;
use tern_config::datastore::etcd::{EtcdOptions, EtcdStore};
use tern_config::datastore::kubernetes::{self, KubeSettings, KubeStore};
use tern_config::datastore::{file::FileStore, StoreEvent};
use tern_config::diff::IntentDiff;
use tern_config::intent::Intent;
use tern_config::{DaemonConfig, Datastore};
use tokio::sync::{mpsc, Notify};

use super::fib_task::FibMsg;
use super::state::State;
use super::{convert, routes};

/// Starts the store task for the configured datastore.
pub async fn start_store(
    cfg: &DaemonConfig,
    reload: Arc<Notify>,
) -> Result<(mpsc::Receiver<StoreEvent>, String), String> {
    let (tx, rx) = mpsc::channel(4);
    let name = match &cfg.datastore {
        Datastore::File { path } => {
            let store =
                FileStore::new(path.clone()).with_max_bytes(cfg.limits.datastore_document_bytes);
            tokio::spawn(store.run(tx, reload));
            format!("file {}", path.display())
        }
        Datastore::Etcdv3 {
            endpoints,
            tls,
            auth,
        } => {
            let options = EtcdOptions {
                endpoints: endpoints.clone(),
                tls: tls.clone(),
                auth: auth.clone(),
            };
            let store = EtcdStore::connect(&options)
                .await
                .map_err(|e| e.to_string())?
                .with_max_document_bytes(cfg.limits.datastore_document_bytes);
            // etcd pushes changes; a reload has nothing to re-read.
            drop(reload);
            tokio::spawn(store.run(tx));
            format!("etcdv3 {}", endpoints.join(","))
        }
        Datastore::Kubernetes {
            kubeconfig,
            namespace,
        } => {
            let store = KubeStore::connect(&kube_settings(cfg, kubeconfig, namespace))
                .await
                .map_err(|e| e.to_string())?;
            // The API server pushes changes; a reload has nothing to re-read.
            drop(reload);
            let name = format!("kubernetes {}", store.url());
            tokio::spawn(store.run(tx));
            name
        }
    };
    Ok((rx, name))
}

/// The Kubernetes store's settings from `tern.yaml` (and the environment).
pub fn kube_settings(
    cfg: &DaemonConfig,
    kubeconfig: &Option<PathBuf>,
    namespace: &Option<String>,
) -> KubeSettings {
    KubeSettings {
        kubeconfig: kubeconfig.clone(),
        namespace: namespace
            .clone()
            .unwrap_or_else(|| kubernetes::DEFAULT_NAMESPACE.to_string()),
        max_document_bytes: cfg.limits.datastore_document_bytes,
    }
}

/// Why BGP did not start.
#[derive(Debug)]
pub enum StartError {
    /// The BGP port is taken: another routing daemon (calico-node's BIRD, during a
    /// migration) still runs on this node. The daemon waits and tries again.
    PortInUse(String),
    /// Anything else: the daemon ends.
    Fatal(String),
}

/// A running speaker: its commands, its events, and each peer's policy as compiled
/// for it (so the daemon's policy tracker need not compile them again).
pub struct Started {
    /// The speaker's command channel.
    pub speaker: mpsc::Sender<SpeakerCommand>,
    /// Its events.
    pub events: mpsc::Receiver<SpeakerEvent>,
    /// Each peer's compiled policy, by address.
    pub policies: BTreeMap<IpAddr, Arc<PeerPolicy>>,
}

/// Starts BGP with the accepted intent (`first` holds everything it asks for): the
/// speaker with its sessions, then the intent's own prefixes.
pub async fn start_bgp(
    first: &IntentDiff,
    intent: &Intent,
    fib: &mpsc::Sender<FibMsg>,
    routes: mpsc::Sender<RibNews>,
    state: &Arc<Mutex<State>>,
    cfg: &DaemonConfig,
    workloads: &BTreeMap<IpNet, String>,
) -> Result<Started, StartError> {
    let secrets_dir = PathBuf::from(DEFAULT_SECRETS_DIR);
    let (mut speaker_cfg, peer_errors) = convert::speaker_config(intent, &secrets_dir, &cfg.limits);
    // The blackholes of our blocks first: the FIB task answers the question below
    // after taking them (one channel, in order), so when the speaker says at once that
    // its table is complete (no restart), or soon, they are wanted already and the
    // end of the grace does not remove (and re-add) them.
    routes::install_own(first, intent, fib, cfg.fib.table).await;
    // Our routes still in the kernel: this is a restart with forwarding kept, so peers
    // are asked to keep ours until we have sent them our table again.
    let (atx, arx) = tokio::sync::oneshot::channel();
    let _ = fib.send(FibMsg::Adopted(atx)).await;
    let adopted = arx.await.unwrap_or(0);
    if adopted > 0 {
        tracing::info!(
            routes = adopted,
            "restarting with forwarding state kept: announcing graceful restart (R and F bits) and holding our UPDATEs until every peer has sent End-of-RIB"
        );
        speaker_cfg.restarting = true;
    }
    for e in &peer_errors {
        tracing::error!("session not started: {e}");
    }
    let policies = speaker_cfg
        .peers
        .iter()
        .filter_map(|p| Some((p.address.ip(), p.policy.clone()?)))
        .collect();
    let (etx, events) = mpsc::channel(1024);
    // Loc-RIB changes go straight to the FIB task on `routes`, not among the events.
    let speaker = speaker::spawn_routed(speaker_cfg, etx, routes)
        .await
        .map_err(|e| {
            let text = format!("cannot start BGP on port {}: {e}", intent.listen.port);
            if e.kind() == std::io::ErrorKind::AddrInUse {
                StartError::PortInUse(text)
            } else {
                StartError::Fatal(text)
            }
        })?;
    routes::originate(first, &speaker, workloads).await;
    if let Ok(mut s) = state.lock() {
        s.set_peers(intent);
        if !peer_errors.is_empty() {
            s.config_error = Some(peer_errors.join("; "));
        }
    }
    tracing::info!(
        router_id = %intent.router_id,
        asn = intent.asn,
        peers = intent.peers.len(),
        originated = intent.originated.len(),
        "configuration applied"
    );
    super::status::notify_intent_applied();
    Ok(Started {
        speaker,
        events,
        policies,
    })
}
