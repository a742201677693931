//! calico-node's environment variables as a source of `tern.yaml` settings, so tern can
//! run with a calico-node DaemonSet's `env:` block copied unchanged.
//!
//! The variables and their meaning are calico-node's (node/pkg/lifecycle/startup,
//! libcalico-go's apiconfig, confd's secret watcher). `tern.yaml` wins over the
//! environment; an empty variable counts as unset, because Calico's manifests fill
//! optional ones from ConfigMap keys that are often `""` (e.g. `ETCD_CA_CERT_FILE`).
//!
//! The environment is a parameter ([`Environment`]) so tests never change the process
//! environment; [`ProcessEnvironment`] is the real one.

/// `NODENAME`: this node's name (calico-node's first choice).
pub const NODENAME: &str = "NODENAME";
/// `HOSTNAME`: calico-node's fallback before the host name, lower-cased.
pub const HOSTNAME: &str = "HOSTNAME";
/// `DATASTORE_TYPE`: `kubernetes` or `etcdv3`.
pub const DATASTORE_TYPE: &str = "DATASTORE_TYPE";
/// `ETCD_ENDPOINTS`: comma-separated client URLs.
pub const ETCD_ENDPOINTS: &str = "ETCD_ENDPOINTS";
/// `ETCD_CA_CERT_FILE`: the CA bundle that signed etcd's server certificate.
pub const ETCD_CA_CERT_FILE: &str = "ETCD_CA_CERT_FILE";
/// `ETCD_CERT_FILE`: the client certificate.
pub const ETCD_CERT_FILE: &str = "ETCD_CERT_FILE";
/// `ETCD_KEY_FILE`: the client certificate's private key.
pub const ETCD_KEY_FILE: &str = "ETCD_KEY_FILE";
/// `ETCD_USERNAME`: etcd user.
pub const ETCD_USERNAME: &str = "ETCD_USERNAME";
/// `ETCD_PASSWORD`: the etcd user's password itself.
pub const ETCD_PASSWORD: &str = "ETCD_PASSWORD";
/// `KUBECONFIG`: kubeconfig file for the Kubernetes datastore.
pub const KUBECONFIG: &str = "KUBECONFIG";
/// `NAMESPACE`: the namespace confd reads BGP password secrets from.
pub const NAMESPACE: &str = "NAMESPACE";
/// `CALICO_ROUTER_ID`: an IPv4 address or `hash`.
pub const CALICO_ROUTER_ID: &str = "CALICO_ROUTER_ID";

/// Where a process's settings come from besides `tern.yaml`.
pub trait Environment {
    /// The variable's value; `None` when unset or empty.
    fn var(&self, name: &str) -> Option<String>;
    /// The host's name as the kernel reports it (not yet lower-cased).
    fn host_name(&self) -> Option<String>;
}

/// The real process environment and host name.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }

    fn host_name(&self) -> Option<String> {
        // What gethostname(2) returns, read without a libc dependency: the UTS
        // namespace's name on Linux, the computer name on Windows.
        if cfg!(windows) {
            return self.var("COMPUTERNAME");
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
    }
}

/// No environment at all: only `tern.yaml` counts ([`DaemonConfig::parse`](super::DaemonConfig::parse)).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEnvironment;

impl Environment for NoEnvironment {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn host_name(&self) -> Option<String> {
        None
    }
}

/// A fixed set of variables and an optional host name, for tests and embedding.
#[derive(Debug, Clone, Default)]
pub struct MapEnvironment {
    /// The variables.
    pub vars: std::collections::BTreeMap<String, String>,
    /// The host name [`Environment::host_name`] reports.
    pub host_name: Option<String>,
}

impl MapEnvironment {
    /// An environment of `vars` and no host name.
    pub fn new<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> MapEnvironment {
        MapEnvironment {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            host_name: None,
        }
    }
}

impl Environment for MapEnvironment {
    fn var(&self, name: &str) -> Option<String> {
        self.vars
            .get(name)
            .filter(|v| !v.trim().is_empty())
            .cloned()
    }
    fn host_name(&self) -> Option<String> {
        self.host_name.clone()
    }
}

/// Where a setting's value came from (shown by `tern check-config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `tern.yaml`.
    File,
    /// An environment variable.
    Env(&'static str),
    /// tern's default.
    Default,
    /// The host's name (lower-cased, as calico-node does).
    HostName,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File => f.write_str("tern.yaml"),
            Source::Env(name) => f.write_str(name),
            Source::Default => f.write_str("default"),
            Source::HostName => f.write_str("host name"),
        }
    }
}

/// A value picked from `tern.yaml`, else a variable, remembering which.
pub(crate) fn pick<T>(
    file: Option<T>,
    env: &dyn Environment,
    var: &'static str,
    from_env: impl FnOnce(String) -> T,
) -> Option<(T, Source)> {
    match file {
        Some(v) => Some((v, Source::File)),
        None => env.var(var).map(|v| (from_env(v), Source::Env(var))),
    }
}

/// The node name when `tern.yaml` has none: `NODENAME` (trimmed), else `HOSTNAME`, else
/// the host name, both lower-cased and trimmed. That is calico-node's order
/// (`DetermineNodeName`) without its `/var/lib/calico/nodename` file.
pub(crate) fn node_name(env: &dyn Environment) -> Option<(String, Source)> {
    if let Some(n) = env.var(NODENAME) {
        return Some((n.trim().to_string(), Source::Env(NODENAME)));
    }
    if let Some(n) = env.var(HOSTNAME) {
        return Some((n.trim().to_lowercase(), Source::Env(HOSTNAME)));
    }
    env.host_name()
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .map(|h| (h, Source::HostName))
}

/// `ETCD_ENDPOINTS` split as calico-node splits it: on commas, blanks trimmed.
pub(crate) fn split_endpoints(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect()
}
