//! A Kubernetes API server stand-in for the lab: no real API server can be installed on
//! the project's machines, so tern's Kubernetes datastore is tested against this one,
//! which speaks the real protocol: HTTPS (rustls, a CA and server certificate made at
//! start), bearer-token authentication, discovery, list with paging, watch with history,
//! BOOKMARKs and 410 Gone, metadata-only answers, create/replace/delete, and optional
//! RBAC enforcement from ClusterRole/Role YAML. It serves core nodes, secrets and
//! services, `discovery.k8s.io/v1` endpointslices and Calico's `crd.projectcalico.org/v1`
//! BGP and IPAM resources (see [`resources::RESOURCES`]).
//!
//! It runs on a tokio runtime of its own, on a thread (entered into a lab namespace when
//! asked), so synchronous tests drive it: [`ApiServer::apply`], [`ApiServer::delete`],
//! [`ApiServer::compact`], [`ApiServer::restart`], [`ApiServer::set_token`]. What it does
//! not do (PATCH, field and label selectors, historical snapshots for
//! `resourceVersionMatch=Exact`) is listed in docs/lab.md.

pub mod rbac;
pub mod resources;
mod serve;
pub mod store;
mod watch;
mod write;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};

use crate::{Error, Result};
use serve::Shared;
use store::Store;

/// The user a token stands for by default: tern's service account.
pub const DEFAULT_USER: &str = "system:serviceaccount:calico-system:tern";

/// How to run the stand-in.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Where to listen (port 0: any free port).
    pub listen: SocketAddr,
    /// The bearer token accepted.
    pub token: String,
    /// ClusterRole/Role YAML whose rules are enforced (none: everything is allowed).
    pub rbac_yaml: Option<String>,
    /// The user named in 403 messages.
    pub user: String,
    /// How many change events are kept for watches to resume from.
    pub history: usize,
    /// BOOKMARK period of watches that allow bookmarks (the real server: about a minute).
    pub bookmark_interval: Duration,
    /// Run inside this lab network namespace (`listen` must be one of its addresses).
    pub netns: Option<String>,
}

impl ApiServerOptions {
    /// Defaults: 1000 events of history, a bookmark every second, no RBAC, no namespace.
    pub fn new(listen: SocketAddr, token: &str) -> ApiServerOptions {
        ApiServerOptions {
            listen,
            token: token.to_string(),
            rbac_yaml: None,
            user: DEFAULT_USER.to_string(),
            history: 1000,
            bookmark_interval: Duration::from_secs(1),
            netns: None,
        }
    }
}

/// One resource request the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// get, list, watch, create, update, delete (or patch).
    pub verb: String,
    /// API group (`""`: core).
    pub api_group: String,
    /// Plural resource name.
    pub resource: String,
    /// The request's namespace, if any.
    pub namespace: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
}

/// The server's thread, while it runs.
struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// A running stand-in. Dropping it stops it.
pub struct ApiServer {
    shared: Arc<Shared>,
    tls: Arc<rustls::ServerConfig>,
    ca_pem: String,
    addr: SocketAddr,
    netns: Option<String>,
    running: Option<Running>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("addr", &self.addr)
            .finish()
    }
}

fn lab_err(what: &str) -> impl Fn(String) -> Error + '_ {
    move |e| Error::Lab(format!("kube-apiserver stand-in: {what}: {e}"))
}

/// A CA and a server certificate for `ip` and `localhost`, as a rustls config.
fn make_tls(ip: IpAddr) -> Result<(Arc<rustls::ServerConfig>, String)> {
    let err = |what: &'static str| move |e: rcgen::Error| Error::Lab(format!("{what}: {e}"));
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err("CA params"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tern-lab kube-apiserver CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(err("CA key"))?)
        .map_err(err("CA certificate"))?;
    let names = vec![
        ip.to_string(),
        "localhost".to_string(),
        "kubernetes.default.svc".to_string(),
    ];
    let mut params = CertificateParams::new(names).map_err(err("server params"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(err("server key"))?;
    let cert = params
        .signed_by(&key, &ca)
        .map_err(err("server certificate"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Lab(format!("TLS versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone(), ca.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(|e| Error::Lab(format!("TLS certificate: {e}")))?;
    // HTTP/1.1 only (hyper's http1 server); Go clients fall back to it through ALPN.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), ca.pem()))
}

impl ApiServer {
    /// Starts the stand-in and waits until it listens.
    pub fn start(opts: ApiServerOptions) -> Result<ApiServer> {
        crate::netns::check_lab_address(&opts.listen.ip().to_string())?;
        let rbac = match &opts.rbac_yaml {
            Some(y) => Some(rbac::Rbac::parse(y).map_err(lab_err("RBAC"))?),
            None => None,
        };
        let (tls, ca_pem) = make_tls(opts.listen.ip())?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(opts.history)),
            token: RwLock::new(opts.token.clone()),
            rbac,
            user: opts.user.clone(),
            bookmark_interval: opts.bookmark_interval,
            requests: Mutex::new(Vec::new()),
            address: opts.listen.to_string(),
        });
        let mut s = ApiServer {
            shared,
            tls,
            ca_pem,
            addr: opts.listen,
            netns: opts.netns,
            running: None,
        };
        s.run()?;
        Ok(s)
    }

    /// Binds `self.addr` on a new thread and serves until stopped.
    fn run(&mut self) -> Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (shared, tls, addr, netns) = (
            self.shared.clone(),
            self.tls.clone(),
            self.addr,
            self.netns.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("kube-apiserver".into())
            .spawn(move || serve_thread(shared, tls, addr, netns, stop_rx, ready_tx))
            .map_err(|e| lab_err("thread")(e.to_string()))?;
        let bound = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| lab_err("start")(e.to_string()))
            .and_then(|r| r.map_err(lab_err("listen")));
        self.running = Some(Running {
            stop: Some(stop_tx),
            thread: Some(thread),
        });
        match bound {
            Ok(a) => {
                self.addr = a;
                Ok(())
            }
            Err(e) => {
                self.stop();
                Err(e)
            }
        }
    }

    /// `https://ip:port`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) that signed the server's certificate.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// Writes a kubeconfig for this server: the CA inline, a user with bearer `token`.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> Result<()> {
        // JSON is YAML: kubectl and kube read it as any kubeconfig.
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "tern-lab", "cluster": {
                "server": self.url(),
                "certificate-authority-data": crate::etcd::b64(&self.ca_pem),
            }}],
            "users": [{"name": "tern", "user": {"token": token}}],
            "contexts": [{"name": "tern-lab", "context": {"cluster": "tern-lab", "user": "tern"}}],
            "current-context": "tern-lab",
            "preferences": {},
        });
        let text = serde_json::to_string_pretty(&config)
            .map_err(|e| lab_err("kubeconfig")(e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| Error::Lab(format!("writing kubeconfig {}: {e}", path.display())))
    }

    /// Creates or replaces `obj` (its `apiVersion` and `kind` say which resource): a new
    /// resourceVersion, and an ADDED or MODIFIED event.
    pub fn apply(&self, obj: Value) -> Result<()> {
        let (api_version, kind) = (
            obj["apiVersion"].as_str().unwrap_or_default().to_string(),
            obj["kind"].as_str().unwrap_or_default().to_string(),
        );
        let res = resource_index(&api_version, &kind)?;
        self.shared
            .store()
            .write(res, obj, None)
            .map(|_| ())
            .map_err(|e| Error::Lab(format!("apply {kind}: {e:?}")))
    }

    /// Deletes an object: a DELETED event.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<()> {
        let res = resource_index(api_version, kind)?;
        let key = (
            res,
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        self.shared
            .store()
            .delete(&key)
            .map(|_| ())
            .map_err(|_| Error::Lab(format!("delete {kind} {name}: not found")))
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().rv()
    }

    /// Forgets the event history: lists and watches from older versions get 410 Gone.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Stops serving; open connections and watches drop. The store is kept.
    pub fn stop(&mut self) {
        if let Some(mut r) = self.running.take() {
            if let Some(tx) = r.stop.take() {
                let _ = tx.send(());
            }
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// An API server restart: same address, certificate, objects and resourceVersions;
    /// open watches drop.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        self.run()
    }

    /// Accepts only `token` from now on.
    pub fn set_token(&self, token: &str) {
        *self
            .shared
            .token
            .write()
            .unwrap_or_else(PoisonError::into_inner) = token.to_string();
    }

    /// Every resource request answered so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Applies every object of the `*.json` files in `dir` (in name order; a file holds
    /// one object or a `…List` of them).
    pub fn load_fixtures(&self, dir: &Path) -> Result<usize> {
        let objects = read_fixtures(dir)?;
        let n = objects.len();
        for o in objects {
            self.apply(o)?;
        }
        Ok(n)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn resource_index(api_version: &str, kind: &str) -> Result<usize> {
    resources::RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind)
        .ok_or_else(|| Error::Lab(format!("the stand-in does not serve {api_version} {kind}")))
}

/// The objects of the `*.json` files in `dir`, in file-name order.
pub fn read_fixtures(dir: &Path) -> Result<Vec<Value>> {
    let io = |e: std::io::Error| Error::Lab(format!("fixtures {}: {e}", dir.display()));
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(io)?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| Error::Lab(format!("fixture {}: {e}", f.display())))?;
        match v.get("items").and_then(Value::as_array) {
            // A real server's list items may omit apiVersion and kind: the list's say.
            Some(items) => out.extend(items.iter().cloned().map(|mut item| {
                if item.get("kind").is_none() {
                    let kind = v["kind"].as_str().unwrap_or_default();
                    item["kind"] = json!(kind.strip_suffix("List").unwrap_or(kind));
                    item["apiVersion"] = v["apiVersion"].clone();
                }
                item
            })),
            None => out.push(v),
        }
    }
    Ok(out)
}

/// The directory of the fixtures shipped with the crate.
pub fn fixtures_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kubeapi/fixtures")
}

/// The server thread: enters `netns`, binds `addr`, reports the bound address, serves
/// until `stop` fires; dropping its runtime then closes every connection.
fn serve_thread(
    shared: Arc<Shared>,
    tls: Arc<rustls::ServerConfig>,
    addr: SocketAddr,
    netns: Option<String>,
    stop: tokio::sync::oneshot::Receiver<()>,
    ready: std::sync::mpsc::Sender<std::result::Result<SocketAddr, String>>,
) {
    if let Some(ns) = &netns {
        if let Err(e) = crate::netns::enter_thread(ns) {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("tokio runtime: {e}")));
            return;
        }
    };
    rt.block_on(async move {
        // A restart can find the address still taken for a moment (seen once in CI
        // after the previous server's thread was joined): tried again for up to 5 s.
        let mut tries = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    let _ = ready.send(Err(format!("bind {addr}: {e}")));
                    return;
                }
            }
        };
        let bound = listener.local_addr().unwrap_or(addr);
        let _ = ready.send(Ok(bound));
        accept_loop(listener, tokio_rustls::TlsAcceptor::from(tls), shared, stop).await;
    });
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let tcp = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => match a {
                Ok((tcp, _)) => tcp,
                Err(_) => {
                    // Out of descriptors or similar: wait instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper::service::service_fn(move |req| serve::handle(shared.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
