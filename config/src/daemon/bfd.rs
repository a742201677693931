//! `bfd:` in tern.yaml: BFD (RFC 5880) for the BGP sessions, off by default. Calico's
//! resources have no BFD fields in open-source Calico, so the daemon's own file holds it.

use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;

/// Fastest interval accepted: below this a busy node declares healthy peers dead.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// Slowest interval accepted: beyond this BGP's own hold timer is as quick.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// BFD settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfdConfig {
    /// Run BFD with every BGP peer once its session is up.
    pub enabled: bool,
    /// The transmit and receive interval asked for once Up.
    pub interval: Duration,
    /// Packets missed before the peer is declared down.
    pub multiplier: u8,
}

impl Default for BfdConfig {
    /// Off; 300 ms × 3 when turned on (FRR's and BIRD's defaults).
    fn default() -> BfdConfig {
        BfdConfig {
            enabled: false,
            interval: Duration::from_millis(300),
            multiplier: 3,
        }
    }
}

impl BfdConfig {
    /// How long a silent peer takes to be declared down (interval × multiplier), when
    /// the peer's own interval is not slower.
    pub fn detection_time(&self) -> Duration {
        self.interval * u32::from(self.multiplier)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBfd {
    enabled: Option<bool>,
    interval: Option<String>,
    multiplier: Option<i64>,
}

impl RawBfd {
    /// Validates the section, naming the field that is wrong.
    pub(crate) fn validate(self, file: &str) -> Result<BfdConfig, ConfigError> {
        let d = BfdConfig::default();
        let interval = match self.interval {
            None => d.interval,
            Some(text) => {
                let v = crate::values::duration(&text)
                    .map_err(|e| ConfigError::field(file, "bfd.interval", e))?;
                if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&v) {
                    return Err(ConfigError::field(
                        file,
                        "bfd.interval",
                        format!("{text} is outside 10ms..60s"),
                    ));
                }
                v
            }
        };
        let multiplier = match self.multiplier {
            None => d.multiplier,
            Some(m) => u8::try_from(m).ok().filter(|m| *m >= 1).ok_or_else(|| {
                ConfigError::field(file, "bfd.multiplier", format!("{m} is outside 1..255"))
            })?,
        };
        let enabled = self.enabled.unwrap_or(false);
        if enabled && !cfg!(target_os = "linux") {
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
        })
    }
}
