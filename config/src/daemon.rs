//! The daemon's own file, `tern.yaml` (docs/configuration.md): every field but `node` has
//! a default. Unknown fields are errors, so a typo never silently falls back to a
//! default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{ConfigError, Warning};

pub mod limits;
pub use limits::Limits;

/// Default rtnetlink protocol number of tern's routes.
pub const DEFAULT_ROUTE_PROTOCOL: u8 = 201;
/// The kernel's main routing table.
pub const MAIN_TABLE: u32 = 254;

/// Protocol numbers other routing software uses (iproute2's rt_protos and FRR's): tern
/// reconciles every route carrying its number, so sharing one would make it remove the
/// other daemon's routes.
const TAKEN_PROTOCOLS: &[(u8, &str)] = &[
    (8, "gated"),
    (9, "ra"),
    (10, "mrt"),
    (11, "zebra"),
    (12, "bird"),
    (13, "dnrouted"),
    (14, "xorp"),
    (15, "ntk"),
    (16, "dhcp"),
    (17, "mrouted"),
    (42, "babel"),
    (186, "bgp (FRR)"),
    (187, "isis (FRR)"),
    (188, "ospf (FRR)"),
    (189, "rip (FRR)"),
    (192, "eigrp (FRR)"),
];

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
        /// Client URLs, e.g. `http://127.0.0.1:2379`.
        endpoints: Vec<String>,
    },
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
}

impl Default for FibConfig {
    fn default() -> FibConfig {
        FibConfig {
            enabled: true,
            route_protocol: DEFAULT_ROUTE_PROTOCOL,
            table: MAIN_TABLE,
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
    /// FIB settings.
    pub fib: FibConfig,
    /// Log filter: a level (`info`) or a tracing filter directive (`tern=debug,info`).
    pub log: String,
    /// Route, control-socket and datastore limits.
    pub limits: Limits,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    node: Option<String>,
    datastore: Option<RawDatastore>,
    control_socket: Option<PathBuf>,
    metrics: Option<String>,
    fib: Option<RawFib>,
    log: Option<String>,
    limits: Option<limits::RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatastore {
    #[serde(rename = "type")]
    kind: Option<String>,
    path: Option<PathBuf>,
    endpoints: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFib {
    enabled: Option<bool>,
    route_protocol: Option<i64>,
    table: Option<i64>,
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
    /// Parses and validates `text`; `file` names it in errors and warnings.
    pub fn parse(text: &str, file: &str) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
        let raw: RawConfig = serde_saphyr::from_str(text).map_err(|e| ConfigError {
            file: file.to_string(),
            line: e.location().map(|l| l.line()),
            resource: None,
            field: None,
            reason: crate::cluster::parse::parser_message(&e.to_string()),
        })?;
        let mut warnings = Vec::new();
        let err = |field: &str, reason: String| ConfigError::field(file, field, reason);

        let node = raw.node.ok_or_else(|| {
            err(
                "node",
                "missing: the name of this node's Node resource".into(),
            )
        })?;
        check_node_name(&node).map_err(|r| err("node", r))?;

        let datastore = match raw.datastore {
            None => Datastore::File {
                path: PathBuf::from("cluster.yaml"),
            },
            Some(d) => match d.kind.as_deref().unwrap_or("file") {
                "file" => {
                    if d.endpoints.is_some() {
                        return Err(err("datastore.endpoints", "only for type etcdv3".into()));
                    }
                    Datastore::File {
                        path: d.path.unwrap_or_else(|| PathBuf::from("cluster.yaml")),
                    }
                }
                "etcdv3" => {
                    if d.path.is_some() {
                        return Err(err("datastore.path", "only for type file".into()));
                    }
                    let endpoints = d.endpoints.unwrap_or_default();
                    if endpoints.is_empty() {
                        return Err(err(
                            "datastore.endpoints",
                            "etcdv3 needs at least one endpoint, e.g. http://127.0.0.1:2379".into(),
                        ));
                    }
                    for e in &endpoints {
                        if !(e.starts_with("http://") || e.starts_with("https://")) {
                            return Err(err(
                                "datastore.endpoints",
                                format!("{e:?} is not an http:// or https:// URL"),
                            ));
                        }
                    }
                    Datastore::Etcdv3 { endpoints }
                }
                other => {
                    return Err(err(
                        "datastore.type",
                        format!("{other:?} is not a datastore; use file or etcdv3"),
                    ))
                }
            },
        };

        let metrics = match raw.metrics {
            None => None,
            Some(m) => {
                let addr: SocketAddr = m.parse().map_err(|_| {
                    err(
                        "metrics",
                        format!("{m:?} is not an address:port such as 127.0.0.1:9477"),
                    )
                })?;
                // Port 0 would listen on a port the kernel picks, which no scraper
                // could know; refuse it rather than serve metrics nobody can reach.
                if addr.port() == 0 {
                    return Err(err(
                        "metrics",
                        format!("{m:?}: port 0 is not a port; use 1-65535, e.g. 127.0.0.1:9477"),
                    ));
                }
                if !addr.ip().is_loopback() {
                    warnings.push(Warning {
                        file: file.into(),
                        resource: None,
                        field: "metrics".into(),
                        message: format!(
                            "{addr} is reachable from other hosts; metrics are unauthenticated"
                        ),
                    });
                }
                Some(addr)
            }
        };

        let mut fib = FibConfig::default();
        if let Some(f) = raw.fib {
            fib.enabled = f.enabled.unwrap_or(true);
            if let Some(p) = f.route_protocol {
                fib.route_protocol = match u8::try_from(p) {
                    Ok(p) if p >= 5 => p,
                    _ => {
                        return Err(err(
                            "fib.route_protocol",
                            format!("{p} is not usable: 0-4 are the kernel's own and the field is one byte; use 5-255 (default {DEFAULT_ROUTE_PROTOCOL})"),
                        ))
                    }
                };
                if let Some((_, who)) = TAKEN_PROTOCOLS
                    .iter()
                    .find(|(n, _)| *n == fib.route_protocol)
                {
                    warnings.push(Warning {
                        file: file.into(),
                        resource: None,
                        field: "fib.route_protocol".into(),
                        message: format!("{} is the protocol number of {who}; tern would treat that daemon's routes as its own", fib.route_protocol),
                    });
                }
            }
            if let Some(t) = f.table {
                fib.table = u32::try_from(t).ok().filter(|t| *t != 0).ok_or_else(|| {
                    err(
                        "fib.table",
                        format!(
                            "{t} is not a routing table; use 1-4294967295 (main is {MAIN_TABLE})"
                        ),
                    )
                })?;
            }
        }

        let log = raw.log.unwrap_or_else(|| "info".into());
        let levels = ["trace", "debug", "info", "warn", "error", "off"];
        if !log.contains('=') && !levels.contains(&log.as_str()) {
            return Err(err(
                "log",
                format!(
                    "{log:?} is not a level ({}) or a filter such as tern=debug",
                    levels.join(", ")
                ),
            ));
        }

        let limits = match raw.limits {
            Some(l) => l.validate(file)?,
            None => Limits::default(),
        };

        Ok((
            DaemonConfig {
                node,
                datastore,
                control_socket: raw.control_socket.unwrap_or_else(default_control_socket),
                metrics,
                fib,
                log,
                limits,
            },
            warnings,
        ))
    }

    /// Reads and validates a `tern.yaml`; a relative datastore path is taken relative
    /// to the file's directory, so the daemon works from any working directory.
    pub fn load(path: &Path) -> Result<(DaemonConfig, Vec<Warning>), ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            line: None,
            resource: None,
            field: None,
            reason: format!("cannot read: {e}"),
        })?;
        let (mut cfg, warnings) = DaemonConfig::parse(&text, &file)?;
        if let Datastore::File { path: p } = &mut cfg.datastore {
            if p.is_relative() {
                *p = path.parent().unwrap_or(Path::new(".")).join(&*p);
            }
        }
        Ok((cfg, warnings))
    }
}

/// Kubernetes object names are DNS-1123 subdomains.
fn check_node_name(n: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if n.is_empty()
        || n.len() > 253
        || !n.chars().all(ok_char)
        || !edge_ok(n.chars().next())
        || !edge_ok(n.chars().last())
    {
        return Err(format!(
            "{n:?} is not a Kubernetes node name (lower-case letters, digits, '-' and '.', starting and ending alphanumeric, at most 253)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
