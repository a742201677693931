//! `tern check-config`: validate `tern.yaml` and the cluster's resources without
//! running anything, and show what this node would do (peers, originated prefixes), so
//! a person can check an edit before `tern reload`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use tern_config::cluster::DEFAULT_SECRETS_DIR;
use tern_config::daemon::EtcdPassword;
use tern_config::datastore::etcd::{EtcdOptions, EtcdStore};
use tern_config::datastore::kubernetes::{KubeSettings, KubeStore};
use tern_config::datastore::StoreEvent;
use tern_config::datastore::{file::FileStore, Document};
use tern_config::intent::{intent_with, Intent, RouterIdSetting};
use tern_config::{Cluster, DaemonConfig, Datastore};

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Errors (each a full sentence naming file, line, resource and field).
    pub errors: Vec<String>,
    /// Warnings.
    pub warnings: Vec<String>,
    /// The intent, when everything validated.
    pub intent: Option<Intent>,
    /// Where the resources came from.
    pub source: String,
    /// The daemon settings that matter, as (setting, value, where it came from); the
    /// etcd password shows as `(set)`.
    pub settings: Vec<(String, String, String)>,
}

/// How long to wait for etcd before giving up.
const ETCD_TIMEOUT: Duration = Duration::from_secs(10);

/// Loads `config`, its datastore and this node's intent, collecting every problem.
pub fn check(config: &Path) -> Report {
    let mut r = Report::default();
    let (cfg, warnings) = match DaemonConfig::load(config) {
        Ok(v) => v,
        Err(e) => {
            r.errors.push(e.to_string());
            return r;
        }
    };
    r.warnings.extend(warnings.iter().map(|w| w.to_string()));
    r.settings = settings(&cfg);
    let documents = match &cfg.datastore {
        Datastore::File { path } => {
            r.source = format!("file {}", path.display());
            // The daemon's limit, so that check-config refuses what the daemon would.
            let store = FileStore::new(path).with_max_bytes(cfg.limits.datastore_document_bytes);
            match store.read() {
                Ok(d) => vec![d],
                Err(e) => {
                    r.errors.push(e);
                    return r;
                }
            }
        }
        Datastore::Etcdv3 {
            endpoints,
            tls,
            auth,
        } => {
            r.source = format!("etcdv3 {}", endpoints.join(","));
            let options = EtcdOptions {
                endpoints: endpoints.clone(),
                tls: tls.clone(),
                auth: auth.clone(),
            };
            match etcd_snapshot(&options, cfg.limits.datastore_document_bytes) {
                Ok(d) => d,
                Err(e) => {
                    r.errors.push(e);
                    return r;
                }
            }
        }
        Datastore::Kubernetes {
            kubeconfig,
            namespace,
        } => {
            let settings = crate::daemon::kube_settings(&cfg, kubeconfig, namespace);
            match kube_snapshot(&settings) {
                Ok((url, d)) => {
                    r.source = format!("kubernetes {url}");
                    d
                }
                Err(e) => {
                    r.source = "kubernetes".into();
                    r.errors.push(e);
                    return r;
                }
            }
        }
    };
    let (cluster, warnings) = match Cluster::from_documents(&documents) {
        Ok(v) => v,
        Err(e) => {
            r.errors.extend(e.0.iter().map(|e| e.to_string()));
            return r;
        }
    };
    r.warnings.extend(warnings.iter().map(|w| w.to_string()));
    match intent_with(&cluster, &cfg.node, cfg.router_id) {
        Ok((i, notes)) => {
            r.warnings.extend(notes);
            r.errors
                .extend(password_errors(&i, Path::new(DEFAULT_SECRETS_DIR)));
            r.intent = Some(i);
        }
        Err(e) => r.errors.push(e.to_string()),
    }
    r
}

/// Each peer whose password cannot be read from its source, as the daemon words it
/// (the daemon refuses such a peer: a session without its MD5 key would never come
/// up). The values are read and dropped, never shown.
fn password_errors(i: &Intent, secrets_dir: &Path) -> Vec<String> {
    i.peers
        .values()
        .filter_map(|p| {
            p.resolve_password(secrets_dir)
                .err()
                .map(|e| format!("peer {} ({}): {e}", p.address, p.origin))
        })
        .collect()
}

/// The report for scripts (`tern check-config -o json`, docs/json.md): `ok`, the
/// problems, the settings and, when valid, the node's peers and originated prefixes.
pub fn to_json(r: &Report) -> serde_json::Value {
    use serde_json::json;
    let settings: Vec<_> = r
        .settings
        .iter()
        .map(|(setting, value, source)| {
            json!({"setting": setting, "value": value, "source": source})
        })
        .collect();
    let node = r.intent.as_ref().map(|i| {
        let peers: Vec<_> = i
            .peers
            .values()
            .map(|p| {
                json!({
                    "address": p.address.to_string(),
                    "port": p.port,
                    "asn": p.remote_as,
                    "local_asn": p.local_as,
                    "type": p.kind.as_str(),
                    "passive": p.passive,
                    "from": p.origin,
                    "peer_node": p.peer_node,
                    "password": p.password.is_some() || p.snapshot_password.is_some(),
                })
            })
            .collect();
        let originated: Vec<_> = i
            .originated
            .iter()
            .map(|(net, o)| {
                json!({
                    "prefix": net.to_string(),
                    "source": o.source.as_str(),
                    "blackhole": o.blackhole,
                    "advertised": o.export,
                    "communities": o.communities.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "node": i.node,
            "router_id": i.router_id.to_string(),
            "asn": i.asn,
            "port": i.listen.port,
            "peers": peers,
            "originated": originated,
        })
    });
    json!({
        "ok": r.errors.is_empty(),
        "source": r.source,
        "errors": r.errors,
        "warnings": r.warnings,
        "settings": settings,
        "intent": node,
    })
}

/// The settings `check-config` shows: node, datastore and router id, each with its value
/// and source (`tern.yaml`, an environment variable, the host name or the default).
fn settings(cfg: &DaemonConfig) -> Vec<(String, String, String)> {
    let mut rows = Vec::new();
    let mut add = |setting: &str, value: String| {
        let source = cfg
            .source(setting)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "tern.yaml".into());
        rows.push((setting.to_string(), value, source));
    };
    add("node", cfg.node.clone());
    let kind = match &cfg.datastore {
        Datastore::File { .. } => "file",
        Datastore::Etcdv3 { .. } => "etcdv3",
        Datastore::Kubernetes { .. } => "kubernetes",
    };
    add("datastore.type", kind.into());
    let path = |p: &Path| p.display().to_string();
    match &cfg.datastore {
        Datastore::File { path: p } => add("datastore.path", path(p)),
        Datastore::Etcdv3 {
            endpoints,
            tls,
            auth,
        } => {
            add("datastore.endpoints", endpoints.join(","));
            if let Some(tls) = tls {
                add("datastore.tls.ca", path(&tls.ca));
                if let (Some(c), Some(k)) = (&tls.cert, &tls.key) {
                    add("datastore.tls.cert", path(c));
                    add("datastore.tls.key", path(k));
                }
            }
            if let Some(auth) = auth {
                add("datastore.username", auth.username.clone());
                let password = match &auth.password {
                    EtcdPassword::File(p) => format!("(set, from {})", path(p)),
                    EtcdPassword::Value(_) => "(set)".into(),
                };
                add("datastore.password", password);
            }
        }
        Datastore::Kubernetes {
            kubeconfig,
            namespace,
        } => {
            let kubeconfig = kubeconfig
                .as_deref()
                .map(path)
                .unwrap_or_else(|| "(in-cluster service account)".into());
            add("datastore.kubeconfig", kubeconfig);
            if let Some(ns) = namespace {
                add("datastore.namespace", ns.clone());
            }
        }
    }
    if let Some(id) = &cfg.router_id {
        let value = match id {
            RouterIdSetting::Address(a) => a.to_string(),
            RouterIdSetting::Hash => "hash".into(),
        };
        add("router_id", value);
    }
    rows
}

fn etcd_snapshot(options: &EtcdOptions, max_value_bytes: u64) -> Result<Vec<Document>, String> {
    let endpoints = &options.endpoints;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async {
        let work = async {
            let mut store = EtcdStore::connect(options)
                .await
                .map_err(|e| e.to_string())?
                .with_max_document_bytes(max_value_bytes);
            store.snapshot().await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(ETCD_TIMEOUT, work).await {
            Ok(r) => r.map(|(docs, _rev)| docs),
            Err(_) => Err(format!(
                "etcd at {} did not answer within {}s",
                endpoints.join(","),
                ETCD_TIMEOUT.as_secs()
            )),
        }
    })
}

/// One snapshot from the Kubernetes API: the first complete read, or the store's first
/// report of why it cannot read. Returns the API server URL too.
fn kube_snapshot(settings: &KubeSettings) -> Result<(String, Vec<Document>), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(async {
        let store = KubeStore::connect(settings)
            .await
            .map_err(|e| e.to_string())?;
        let url = store.url().to_string();
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let task = tokio::spawn(store.run(tx));
        let first = tokio::time::timeout(ETCD_TIMEOUT, rx.recv()).await;
        task.abort();
        match first {
            Ok(Some(StoreEvent::Snapshot { documents, .. })) => Ok((url, documents)),
            Ok(Some(StoreEvent::Unavailable(why))) => Err(why),
            Ok(None) => Err(format!("Kubernetes API {url}: the store stopped")),
            Err(_) => Err(format!(
                "Kubernetes API {url} did not answer within {}s",
                ETCD_TIMEOUT.as_secs()
            )),
        }
    })
}

/// The report for people.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    render_settings(&mut out, &r.settings);
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for e in &r.errors {
        let _ = writeln!(out, "error: {e}");
    }
    if !r.errors.is_empty() {
        let n = r.errors.len();
        let _ = writeln!(
            out,
            "{n} error{}: the configuration cannot be used",
            if n == 1 { "" } else { "s" }
        );
        return out;
    }
    let Some(i) = &r.intent else {
        return out;
    };
    let _ = writeln!(
        out,
        "ok: node {} from {}: router id {}, AS {}, BGP port {}{}{}",
        i.node,
        r.source,
        i.router_id,
        i.asn,
        i.listen.port,
        // bindMode NodeIP: each node address gets its own listener.
        if i.listen.addresses.is_empty() {
            String::new()
        } else {
            let a: Vec<String> = i.listen.addresses.iter().map(ToString::to_string).collect();
            format!(" on {} (bindMode NodeIP)", a.join(" and "))
        },
        i.rr_cluster_id
            .map(|c| format!(", route reflector (cluster id {c})"))
            .unwrap_or_default()
    );
    render_peers(&mut out, i);
    render_originated(&mut out, i);
    out
}

/// The settings in force and where each came from, as aligned columns.
fn render_settings(out: &mut String, settings: &[(String, String, String)]) {
    if settings.is_empty() {
        return;
    }
    let _ = writeln!(out, "settings:");
    let width = settings.iter().map(|(s, _, _)| s.len()).max().unwrap_or(0);
    let value_width = settings
        .iter()
        .map(|(_, v, _)| v.chars().count())
        .max()
        .unwrap_or(0);
    for (setting, value, source) in settings {
        let _ = writeln!(
            out,
            "  {setting:<width$}  {value:<value_width$}  ({source})"
        );
    }
    let _ = writeln!(out);
}

/// The node's peers as a table.
fn render_peers(out: &mut String, i: &Intent) {
    let _ = writeln!(out, "\npeers ({}):", i.peers.len());
    let mut rows: Vec<[String; 5]> =
        vec![["ADDRESS", "AS", "TYPE", "DIALS", "FROM"].map(String::from)];
    rows.extend(i.peers.values().map(|p| {
        [
            if p.port == 179 {
                p.address.to_string()
            } else {
                format!("{} port {}", p.address, p.port)
            },
            p.remote_as.to_string(),
            p.kind.to_string(),
            if p.passive { "waits" } else { "yes" }.to_string(),
            match (&p.peer_node, p.kind) {
                (Some(n), tern_config::intent::PeerKind::Mesh) => format!("node {n}"),
                (Some(n), _) => format!("{} (node {n})", p.origin),
                (None, _) => p.origin.clone(),
            },
        ]
    }));
    table(out, &rows);
}

/// The routes the node originates as a table.
fn render_originated(out: &mut String, i: &Intent) {
    let _ = writeln!(out, "\noriginated ({}):", i.originated.len());
    let mut rows: Vec<[String; 5]> = vec![[
        "PREFIX",
        "SOURCE",
        "LOCAL ROUTE",
        "ADVERTISED",
        "COMMUNITIES",
    ]
    .map(String::from)];
    rows.extend(i.originated.iter().map(|(net, o)| {
        [
            net.to_string(),
            o.source.as_str().to_string(),
            if o.blackhole { "blackhole" } else { "-" }.to_string(),
            if o.export {
                "yes"
            } else {
                "no (disableBGPExport)"
            }
            .to_string(),
            o.communities
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        ]
    }));
    table(out, &rows);
}

fn table(out: &mut String, rows: &[[String; 5]]) {
    let mut width = [0usize; 5];
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::from(" ");
        for (w, c) in width.iter().zip(r) {
            let _ = write!(line, " {c:<w$}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}
