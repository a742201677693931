//! `bfd:` in tern.yaml: BFD (RFC 5880) for the BGP sessions, off by default, with
//! overrides per peer address or peer type (`peers:`, the first that matches wins).
//! Calico's resources have no BFD fields in open-source Calico, so the daemon's own
//! file holds it.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::intent::PeerKind;

/// Fastest interval accepted: below this a busy node declares healthy peers dead.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// Slowest interval accepted: beyond this BGP's own hold timer is as quick.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// BFD settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdConfig {
    /// Run BFD with every BGP peer once its session is up.
    pub enabled: bool,
    /// The transmit and receive interval asked for once Up.
    pub interval: Duration,
    /// Packets missed before the peer is declared down.
    pub multiplier: u8,
    /// Settings for some peers, the first that matches wins.
    pub overrides: Vec<BfdOverride>,
}

/// Which peers an override is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMatch {
    /// The peer with this address.
    Address(IpAddr),
    /// Every peer of this type.
    Type(PeerKind),
}

/// BFD settings for some peers; what is not set comes from the section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdOverride {
    /// The peers.
    pub peers: PeerMatch,
    /// BFD on or off for them.
    pub enabled: Option<bool>,
    /// Their interval.
    pub interval: Option<Duration>,
    /// Their multiplier.
    pub multiplier: Option<u8>,
}

impl Default for BfdConfig {
    /// Off; 300 ms × 3 when turned on (FRR's and BIRD's defaults).
    fn default() -> BfdConfig {
        BfdConfig {
            enabled: false,
            interval: Duration::from_millis(300),
            multiplier: 3,
            overrides: Vec::new(),
        }
    }
}

impl BfdConfig {
    /// How long a silent peer takes to be declared down (interval × multiplier), when
    /// the peer's own interval is not slower.
    pub fn detection_time(&self) -> Duration {
        self.interval * u32::from(self.multiplier)
    }

    /// Whether any peer may get BFD (the driver runs only then).
    pub fn any_enabled(&self) -> bool {
        self.enabled || self.overrides.iter().any(|o| o.enabled == Some(true))
    }

    /// The interval and multiplier for the peer at `address` of type `kind`, or `None`
    /// when BFD is off for it.
    pub fn for_peer(&self, address: IpAddr, kind: PeerKind) -> Option<(Duration, u8)> {
        let o = self.overrides.iter().find(|o| match o.peers {
            PeerMatch::Address(a) => a == address,
            PeerMatch::Type(k) => k == kind,
        });
        let enabled = o.and_then(|o| o.enabled).unwrap_or(self.enabled);
        enabled.then(|| {
            (
                o.and_then(|o| o.interval).unwrap_or(self.interval),
                o.and_then(|o| o.multiplier).unwrap_or(self.multiplier),
            )
        })
    }
}

/// The peer types an override can name, as tern.yaml writes them.
const TYPES: [(&str, PeerKind); 6] = [
    ("mesh", PeerKind::Mesh),
    ("global", PeerKind::Global),
    ("node", PeerKind::NodeSpecific),
    ("route-reflector", PeerKind::RouteReflector),
    ("route-reflector-client", PeerKind::RouteReflectorClient),
    ("local-workload", PeerKind::LocalWorkload),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBfd {
    enabled: Option<bool>,
    interval: Option<String>,
    multiplier: Option<i64>,
    peers: Option<Vec<RawOverride>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    address: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    enabled: Option<bool>,
    interval: Option<String>,
    multiplier: Option<i64>,
}

/// `interval`, checked; `field` names it in errors.
fn interval(text: &str, file: &str, field: &str) -> Result<Duration, ConfigError> {
    let v = crate::values::duration(text).map_err(|e| ConfigError::field(file, field, e))?;
    if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&v) {
        return Err(ConfigError::field(
            file,
            field,
            format!("{text} is outside 10ms..60s"),
        ));
    }
    Ok(v)
}

/// `multiplier`, checked.
fn multiplier(m: i64, file: &str, field: &str) -> Result<u8, ConfigError> {
    u8::try_from(m)
        .ok()
        .filter(|m| *m >= 1)
        .ok_or_else(|| ConfigError::field(file, field, format!("{m} is outside 1..255")))
}

impl RawOverride {
    fn validate(self, file: &str, at: &str) -> Result<BfdOverride, ConfigError> {
        let field = |f: &str| format!("{at}.{f}");
        let peers = match (self.address, self.kind) {
            (Some(a), None) => PeerMatch::Address(a.parse().map_err(|_| {
                ConfigError::field(
                    file,
                    &field("address"),
                    format!("{a:?} is not an IP address"),
                )
            })?),
            (None, Some(t)) => match TYPES.iter().find(|(name, _)| *name == t) {
                Some((_, k)) => PeerMatch::Type(*k),
                None => {
                    let names: Vec<&str> = TYPES.iter().map(|(n, _)| *n).collect();
                    return Err(ConfigError::field(
                        file,
                        &field("type"),
                        format!("{t:?} is not a peer type ({})", names.join(", ")),
                    ));
                }
            },
            _ => {
                return Err(ConfigError::field(
                    file,
                    at,
                    "name the peers with exactly one of `address` and `type`",
                ))
            }
        };
        Ok(BfdOverride {
            peers,
            enabled: self.enabled,
            interval: self
                .interval
                .map(|t| interval(&t, file, &field("interval")))
                .transpose()?,
            multiplier: self
                .multiplier
                .map(|m| multiplier(m, file, &field("multiplier")))
                .transpose()?,
        })
    }
}

impl RawBfd {
    /// Validates the section, naming the field that is wrong.
    pub(crate) fn validate(self, file: &str) -> Result<BfdConfig, ConfigError> {
        let d = BfdConfig::default();
        let interval = match self.interval {
            None => d.interval,
            Some(text) => interval(&text, file, "bfd.interval")?,
        };
        let multiplier = match self.multiplier {
            None => d.multiplier,
            Some(m) => multiplier(m, file, "bfd.multiplier")?,
        };
        let overrides = self
            .peers
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, o)| o.validate(file, &format!("bfd.peers[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let enabled = self.enabled.unwrap_or(false);
        let any = enabled || overrides.iter().any(|o| o.enabled == Some(true));
        if any && !cfg!(target_os = "linux") {
            return Err(ConfigError::field(
                file,
                "bfd.enabled",
                "BFD runs on Linux only for now",
            ));
        }
        Ok(BfdConfig {
            enabled,
            interval,
            multiplier,
            overrides,
        })
    }
}
