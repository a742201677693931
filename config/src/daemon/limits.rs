//! The `limits:` section of `tern.yaml`: how much a peer, all peers together, a
//! control-socket client and a datastore document may make tern hold or do. Each has a
//! default sized for a Kubernetes node that may also take a full Internet table from
//! its top-of-rack router; each is checked where the input arrives and refused with an
//! error that names the limit's field, so an operator knows what to raise.

use serde::Deserialize;

use crate::error::ConfigError;

/// Default most paths from one peer: a full IPv4 and IPv6 Internet table (about 1.2M
/// prefixes in 2026) fits with room to grow.
pub const DEFAULT_MAX_PREFIXES_PER_PEER: u32 = 2_000_000;
/// Default most paths from all peers together: about 1.6 GB at tern's measured ~410
/// bytes per route with the FIB (docs/benchmarks.md).
pub const DEFAULT_MAX_ROUTES: u64 = 4_000_000;
/// Default longest control-socket request line. Requests are tiny (a command and a
/// prefix or address); anything long is a confused or hostile client.
pub const DEFAULT_CONTROL_REQUEST_BYTES: usize = 64 * 1024;
/// Default control-socket requests per second, across all clients (bursts of twice
/// that are allowed). `tern-lab` and probes poll at up to 20 per second.
pub const DEFAULT_CONTROL_REQUESTS_PER_SECOND: u32 = 100;
/// Default largest datastore document (the cluster file, or one etcd value).
pub const DEFAULT_DATASTORE_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;

/// The validated limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most paths taken from one peer (None: no limit); one more ends the session
    /// with Cease / Maximum Number of Prefixes Reached.
    pub max_prefixes_per_peer: Option<u32>,
    /// Most paths from all peers together (None: no limit); the peer whose UPDATE
    /// passes it is reset the same way.
    pub max_routes: Option<u64>,
    /// Longest control-socket request.
    pub control_request_bytes: usize,
    /// Control-socket requests per second; more get "too many requests".
    pub control_requests_per_second: u32,
    /// Largest datastore document; a bigger one is refused and the configuration in
    /// force stays.
    pub datastore_document_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_prefixes_per_peer: Some(DEFAULT_MAX_PREFIXES_PER_PEER),
            max_routes: Some(DEFAULT_MAX_ROUTES),
            control_request_bytes: DEFAULT_CONTROL_REQUEST_BYTES,
            control_requests_per_second: DEFAULT_CONTROL_REQUESTS_PER_SECOND,
            datastore_document_bytes: DEFAULT_DATASTORE_DOCUMENT_BYTES,
        }
    }
}

/// `limits:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    max_prefixes_per_peer: Option<i64>,
    max_routes: Option<i64>,
    control_request_bytes: Option<i64>,
    control_requests_per_second: Option<i64>,
    datastore_document_bytes: Option<i64>,
}

impl RawLimits {
    /// Checks each field against its range; `file` names the file in errors.
    pub(super) fn validate(self, file: &str) -> Result<Limits, ConfigError> {
        let d = Limits::default();
        let field = |name: &str| format!("limits.{name}");
        let range = |name: &str, v: i64, lo: i64, hi: i64, unit: &str| {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(ConfigError::field(
                    file,
                    &field(name),
                    format!("{v} is out of range; use {lo}-{hi} {unit}"),
                ))
            }
        };
        // 0 turns a route limit off, as BIRD's and FRR's configs allow.
        let max_prefixes_per_peer = match self.max_prefixes_per_peer {
            None => d.max_prefixes_per_peer,
            Some(v) => {
                let v = range(
                    "max_prefixes_per_peer",
                    v,
                    0,
                    i64::from(u32::MAX),
                    "paths (0: no limit)",
                )?;
                u32::try_from(v).ok().filter(|v| *v > 0)
            }
        };
        let max_routes = match self.max_routes {
            None => d.max_routes,
            Some(v) => {
                let v = range("max_routes", v, 0, i64::MAX, "paths (0: no limit)")?;
                u64::try_from(v).ok().filter(|v| *v > 0)
            }
        };
        let control_request_bytes = match self.control_request_bytes {
            None => d.control_request_bytes,
            Some(v) => usize::try_from(range("control_request_bytes", v, 1024, 16 << 20, "bytes")?)
                .unwrap_or(d.control_request_bytes),
        };
        let control_requests_per_second = match self.control_requests_per_second {
            None => d.control_requests_per_second,
            Some(v) => u32::try_from(range(
                "control_requests_per_second",
                v,
                1,
                100_000,
                "requests per second",
            )?)
            .unwrap_or(d.control_requests_per_second),
        };
        let datastore_document_bytes = match self.datastore_document_bytes {
            None => d.datastore_document_bytes,
            Some(v) => u64::try_from(range(
                "datastore_document_bytes",
                v,
                4096,
                1 << 30,
                "bytes",
            )?)
            .unwrap_or(d.datastore_document_bytes),
        };
        Ok(Limits {
            max_prefixes_per_peer,
            max_routes,
            control_request_bytes,
            control_requests_per_second,
            datastore_document_bytes,
        })
    }
}
