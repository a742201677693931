//! The checks of single `tern.yaml` fields: node name, router id, metrics listener,
//! FIB settings. Each error names the field and what is allowed.

use std::net::{Ipv4Addr, SocketAddr};

use super::{FibConfig, LogFormat, RawFib, DEFAULT_ROUTE_PROTOCOL, MAIN_TABLE};
use crate::error::{ConfigError, Warning};
use crate::intent::RouterIdSetting;

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
    // Felix's own routes (its default when DeviceRouteProtocol is boot): Felix owns
    // every route with it and would delete tern's as stale.
    (80, "Felix (Calico)"),
    (186, "bgp (FRR)"),
    (187, "isis (FRR)"),
    (188, "ospf (FRR)"),
    (189, "rip (FRR)"),
    (192, "eigrp (FRR)"),
];

/// The metrics listener: an address:port, not port 0; warns when not on loopback.
pub(super) fn metrics(
    metrics: Option<String>,
    file: &str,
    warnings: &mut Vec<Warning>,
) -> Result<Option<SocketAddr>, ConfigError> {
    let err = |field: &str, reason: String| ConfigError::field(file, field, reason);
    Ok(match metrics {
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
    })
}

/// The FIB settings: protocol 5-255 (warning for other daemons' numbers), table > 0.
pub(super) fn fib(
    raw: Option<RawFib>,
    file: &str,
    warnings: &mut Vec<Warning>,
) -> Result<FibConfig, ConfigError> {
    let err = |field: &str, reason: String| ConfigError::field(file, field, reason);
    let mut fib = FibConfig::default();
    if let Some(f) = raw {
        fib.enabled = f.enabled.unwrap_or(true);
        fib.take_over_bird = f.take_over_bird.unwrap_or(true);
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
                    format!("{t} is not a routing table; use 1-4294967295 (main is {MAIN_TABLE})"),
                )
            })?;
        }
    }
    Ok(fib)
}

/// `router_id` / `CALICO_ROUTER_ID`: an IPv4 address or `hash` (calico-node's values).
pub(super) fn router_id(text: &str) -> Result<RouterIdSetting, String> {
    let text = text.trim();
    if text == "hash" {
        return Ok(RouterIdSetting::Hash);
    }
    text.parse::<Ipv4Addr>()
        .map(RouterIdSetting::Address)
        .map_err(|_| format!("{text:?} is not an IPv4 address or `hash`"))
}

/// Kubernetes object names are DNS-1123 subdomains.
pub(super) fn node_name(n: &str) -> Result<(), String> {
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

/// `log` (a level or a tracing filter, default `info`) and `log_format` (`text` or
/// `json`).
pub(super) fn log(
    log: Option<String>,
    format: Option<String>,
    file: &str,
) -> Result<(String, LogFormat), ConfigError> {
    let err = |field: &str, reason: String| ConfigError::field(file, field, reason);
    let log = log.unwrap_or_else(|| "info".into());
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
    let log_format = match format.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => {
            return Err(err(
                "log_format",
                format!("{other:?} is not a log format (text, json)"),
            ))
        }
    };
    Ok((log, log_format))
}
