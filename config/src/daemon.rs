//! The daemon's own file, `tern.yaml` (docs/configuration.md), merged with calico-node's
//! environment variables ([`env`]): every setting has a default or comes from the
//! environment (`node` from `NODENAME` or the host name). Unknown fields are errors, so
//! a typo never silently falls back to a default. Where each setting came from is kept
//! ([`DaemonConfig::sources`]) for `tern check-config`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{ConfigError, Warning};
use crate::intent::RouterIdSetting;

pub mod bfd;
mod checks;
mod datastore;
pub mod env;
mod files;
pub mod limits;
pub use bfd::BfdConfig;
pub use env::{Environment, ProcessEnvironment, Source};
pub use limits::Limits;

/// Default rtnetlink protocol number of tern's routes. Felix's main-table ownership
/// policy (`felix/routetable/ownershippol`) claims only routes with its own protocol
/// (80, or its `deviceRouteProtocol`) and routes through workload interfaces or
/// `vxlan.calico`; it leaves `tunl0` and other protocols to the routing daemon. 201 is
/// none of Felix's numbers, and not BIRD's 12, so tern never takes a BIRD route left on
/// a node being migrated for its own.
pub const DEFAULT_ROUTE_PROTOCOL: u8 = 201;
/// The kernel's main routing table.
pub const MAIN_TABLE: u32 = 254;

/// Where the cluster's Calico resources come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datastore {
    /// A multi-document YAML file of Calico v3 resources.
    File {
        /// The file; relative paths are resolved against `tern.yaml`'s directory by
        /// [`DaemonConfig::load`].
        path: PathBuf,
    },
    /// etcd v3 with Calico's key layout.
    Etcdv3 {
        /// Client URLs, e.g. `https://127.0.0.1:2379`; all `http://` or all `https://`.
        endpoints: Vec<String>,
        /// Set exactly when the endpoints are `https://`.
        tls: Option<EtcdTls>,
        /// etcd user and password (etcd's auth enabled).
        auth: Option<EtcdAuth>,
    },
    /// The Kubernetes API (Calico's CRDs).
    Kubernetes {
        /// kubeconfig file; `None`: in-cluster (service account) configuration.
        kubeconfig: Option<PathBuf>,
        /// Namespace of BGP password secrets (confd's `NAMESPACE`); `None`: the
        /// store's default.
        namespace: Option<String>,
    },
}

/// TLS files for etcd (PEM). Relative paths from `tern.yaml` are resolved against its
/// directory by [`DaemonConfig::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// CA bundle that signed etcd's server certificate.
    pub ca: PathBuf,
    /// Client certificate; set together with `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub key: Option<PathBuf>,
}

/// etcd user and password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    /// etcd user name.
    pub username: String,
    /// Where the password is.
    pub password: EtcdPassword,
}

/// Where the etcd password comes from. Never printed: `Debug` shows the file or `***`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdPassword {
    /// A file holding it (`datastore.password_file`); a final newline is not part of it.
    File(PathBuf),
    /// The password itself (`ETCD_PASSWORD`).
    Value(Password),
}

impl EtcdPassword {
    /// The password. Errors name the file, never the value.
    pub fn read(&self) -> Result<Password, String> {
        match self {
            EtcdPassword::Value(p) => Ok(p.clone()),
            EtcdPassword::File(path) => std::fs::read_to_string(path)
                .map(|s| Password(s.trim_end_matches(['\r', '\n']).to_string()))
                .map_err(|e| format!("cannot read the etcd password file {}: {e}", path.display())),
        }
    }
}

/// A password: `Debug` prints `***`, and there is no `Display`, so it cannot end up in
/// a log line or an error by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Password {
        Password(password.into())
    }
    /// The password, for the etcd client only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Kernel FIB settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibConfig {
    /// Install learnt routes at all (false: BGP only, e.g. on a route reflector).
    pub enabled: bool,
    /// rtnetlink protocol number that marks tern's routes.
    pub route_protocol: u8,
    /// Routing table.
    pub table: u32,
    /// Treat the routes Calico's BIRD left in the table (protocol 12) as this node's
    /// forwarding state at start, and remove them once tern's own are in place.
    pub take_over_bird: bool,
}

impl Default for FibConfig {
    fn default() -> FibConfig {
        FibConfig {
            enabled: true,
            route_protocol: DEFAULT_ROUTE_PROTOCOL,
            table: MAIN_TABLE,
            take_over_bird: true,
        }
    }
}

/// The validated daemon configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// This node's Node resource name.
    pub node: String,
    /// Where cluster state comes from.
    pub datastore: Datastore,
    /// Control socket path (a named pipe name on Windows).
    pub control_socket: PathBuf,
    /// Prometheus listener; `None` disables metrics.
    pub metrics: Option<SocketAddr>,
    /// BIRD-compatible control socket for the IPv4 sessions (`bird_socket`, e.g.
    /// `/var/run/calico/bird.ctl`), for `calicoctl node status` and calico-node's
    /// `-bird-ready` / `-bird-live` (docs/bird-socket.md); `None`: off. Unix only.
    pub bird_socket: Option<PathBuf>,
    /// The same for the IPv6 sessions (`bird6_socket`, e.g.
    /// `/var/run/calico/bird6.ctl`); `None`: off. Unix only.
    pub bird6_socket: Option<PathBuf>,
    /// Felix's endpoint status directory (`endpoint_status_dir`), read for the
    /// workloads selected for local workload peerings.
    pub endpoint_status_dir: PathBuf,
    /// FIB settings.
    pub fib: FibConfig,
    /// Log filter: a level (`info`) or a tracing filter directive (`tern=debug,info`).
    pub log: String,
    /// How log lines look (`log_format`).
    pub log_format: LogFormat,
    /// Route, control-socket and datastore limits.
    pub limits: Limits,
    /// BFD with the BGP peers (`bfd`).
    pub bfd: BfdConfig,
    /// The router id setting (`router_id`, `CALICO_ROUTER_ID`); `None`: the Node's
    /// IPv4 address.
    pub router_id: Option<RouterIdSetting>,
    /// Where each daemon setting that has a source to tell came from, in a stable
    /// order: `node`, `datastore.type`, the datastore's settings, `router_id`.
    pub sources: Vec<(String, Source)>,
}

/// How the daemon's log lines look (`log_format` in tern.yaml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (`text`, the default).
    #[default]
    Text,
    /// One JSON object per line, for Kubernetes log pipelines (`json`).
    Json,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    node: Option<String>,
    datastore: Option<datastore::RawDatastore>,
    control_socket: Option<PathBuf>,
    metrics: Option<String>,
    bird_socket: Option<PathBuf>,
    bird6_socket: Option<PathBuf>,
    endpoint_status_dir: Option<PathBuf>,
    fib: Option<RawFib>,
    log: Option<String>,
    log_format: Option<String>,
    limits: Option<limits::RawLimits>,
    router_id: Option<String>,
    bfd: Option<bfd::RawBfd>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFib {
    enabled: Option<bool>,
    route_protocol: Option<i64>,
    table: Option<i64>,
    take_over_bird: Option<bool>,
}

/// The platform's default control socket.
pub fn default_control_socket() -> PathBuf {
    if cfg!(windows) {
        PathBuf::from(r"\\.\pipe\tern")
    } else {
        PathBuf::from("/run/tern/tern.sock")
    }
}

impl DaemonConfig {
    /// Parses and validates `text` alone, without the environment or the host name (so
    /// `node` must be in it); `file` names it in errors and warnings.
    pub fn parse(text: &str, file: &str) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
        DaemonConfig::parse_with(text, file, &env::NoEnvironment)
    }

    /// Parses and validates `text`, taking what it does not set from `env` (calico-node's
    /// variables, see [`env`]); `tern.yaml` wins. Paths are left as written.
    pub fn parse_with(
        text: &str,
        file: &str,
        env: &dyn Environment,
    ) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
        let raw = raw_config(text, file)?;
        let mut warnings = Vec::new();
        let err = |field: &str, reason: String| ConfigError::field(file, field, reason);
        let mut sources = Vec::new();

        let (node, source) = match raw.node {
            Some(n) => (n, Source::File),
            None => env::node_name(env).ok_or_else(|| {
                err(
                    "node",
                    "missing: the name of this node's Node resource (set `node`, or NODENAME in the environment)".into(),
                )
            })?,
        };
        let node_field = match source {
            Source::Env(var) => format!("node (from {var})"),
            Source::HostName => "node (from the host name)".to_string(),
            _ => "node".to_string(),
        };
        checks::node_name(&node).map_err(|r| err(&node_field, r))?;
        sources.push(("node".to_string(), source));

        let datastore = datastore::resolve(raw.datastore, env, file, &mut sources)?;

        let router_id = match env::pick(raw.router_id, env, env::CALICO_ROUTER_ID, |v| v) {
            None => None,
            Some((text, source)) => {
                let field = match source {
                    Source::Env(var) => format!("router_id (from {var})"),
                    _ => "router_id".to_string(),
                };
                sources.push(("router_id".to_string(), source));
                Some(checks::router_id(&text).map_err(|r| err(&field, r))?)
            }
        };

        let metrics = checks::metrics(raw.metrics, file, &mut warnings)?;
        let fib = checks::fib(raw.fib, file, &mut warnings)?;

        let (log, log_format) = checks::log(raw.log, raw.log_format, file)?;

        let control_socket = raw.control_socket.unwrap_or_else(default_control_socket);
        let (bird_socket, bird6_socket) =
            bird_sockets(raw.bird_socket, raw.bird6_socket, &control_socket, file)?;

        let limits = match raw.limits {
            Some(l) => l.validate(file)?,
            None => Limits::default(),
        };
        let bfd = match raw.bfd {
            Some(b) => b.validate(file)?,
            None => BfdConfig::default(),
        };

        Ok((
            DaemonConfig {
                node,
                datastore,
                router_id,
                sources,
                control_socket,
                metrics,
                bird_socket,
                bird6_socket,
                endpoint_status_dir: raw.endpoint_status_dir.unwrap_or_else(|| {
                    PathBuf::from(crate::datastore::endpoint_status::DEFAULT_DIR)
                }),
                fib,
                log,
                log_format,
                limits,
                bfd,
            },
            warnings,
        ))
    }

    /// Reads and validates a `tern.yaml`, taking unset settings from the process
    /// environment (calico-node's variables, see [`env`]). Relative paths written in
    /// the file are taken relative to its directory, so the daemon works from any
    /// working directory; the datastore's TLS, password and kubeconfig files must be
    /// readable now, so a wrong path is reported at start, naming it.
    pub fn load(path: &Path) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
        DaemonConfig::load_with(path, &ProcessEnvironment)
    }

    /// [`DaemonConfig::load`] with `env` instead of the process environment.
    pub fn load_with(
        path: &Path,
        env: &dyn Environment,
    ) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: None,
            resource: None,
            field: None,
            reason: format!("cannot read: {e}"),
        })?;
        let (mut cfg, warnings) = DaemonConfig::parse_with(&text, &file, env)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        files::resolve_relative(&mut cfg, dir);
        files::check_readable(&cfg, &file)?;
        Ok((cfg, warnings))
    }

    /// Where `setting` (e.g. `node`, `datastore.tls.ca`) came from, when recorded.
    pub fn source(&self, setting: &str) -> Option<Source> {
        self.sources
            .iter()
            .find(|(name, _)| name == setting)
            .map(|(_, source)| *source)
    }
}

/// `bird_socket` and `bird6_socket`: absolute paths, distinct from each other and from
/// the control socket; refused on Windows, which has no Unix sockets for birdc.
fn bird_sockets(
    v4: Option<PathBuf>,
    v6: Option<PathBuf>,
    control: &Path,
    file: &str,
) -> Result<(Option<PathBuf>, Option<PathBuf>), ConfigError> {
    for (field, path) in [("bird_socket", &v4), ("bird6_socket", &v6)] {
        let Some(path) = path else { continue };
        let err = |reason: String| ConfigError::field(file, field, reason);
        if cfg!(windows) {
            return Err(err("not supported on Windows".into()));
        }
        if !path.is_absolute() {
            return Err(err(format!(
                "{} is not an absolute path (e.g. /var/run/calico/bird.ctl)",
                path.display()
            )));
        }
        if path == control {
            return Err(err(format!(
                "{} is the control socket's path; use another file",
                path.display()
            )));
        }
    }
    if let (Some(a), Some(b)) = (&v4, &v6) {
        if a == b {
            return Err(ConfigError::field(
                file,
                "bird6_socket",
                format!(
                    "{} is also bird_socket; the IPv4 and IPv6 sockets need two files",
                    b.display()
                ),
            ));
        }
    }
    Ok((v4, v6))
}

/// The raw file; one with no settings at all (empty, only comments) is `{}`, since the
/// environment may supply everything.
fn raw_config(text: &str, file: &str) -> Result<RawConfig, ConfigError> {
    let empty = text
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---");
    let text = if empty { "{}" } else { text };
    serde_saphyr::from_str(text).map_err(|e| ConfigError {
        file: file.to_string(),
        line: e.location().map(|l| l.line()),
        resource: None,
        field: None,
        reason: crate::cluster::parse::parser_message(&e.to_string()),
    })
}

#[cfg(test)]
mod env_tests;
#[cfg(test)]
mod tests;
