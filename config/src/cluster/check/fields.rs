//! Field checks several kinds share: AS numbers, durations and hold/keepalive timers,
//! graceful-restart times, passwords and selectors.

use std::time::Duration;

use crate::cluster::parse::RawDoc;
use crate::cluster::{PasswordSource, Selector};
use crate::error::ConfigError;
use crate::error::Warning;
use crate::model::{self, PasswordSpec};
use crate::values;

pub(super) fn parse_or<T>(
    d: &RawDoc,
    warnings: &mut Vec<Warning>,
    errors: &mut Vec<ConfigError>,
) -> Option<model::Resource<T>>
where
    T: serde::de::DeserializeOwned,
{
    match d.parse::<T>(warnings) {
        Ok(r) => Some(r),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

/// An optional field read with `parse`; an error names `field`.
fn value_field<T: ?Sized, U>(
    d: &RawDoc,
    field: &str,
    v: Option<&T>,
    parse: impl FnOnce(&T) -> Result<U, String>,
    errors: &mut Vec<ConfigError>,
) -> Option<U> {
    match parse(v?) {
        Ok(n) => Some(n),
        Err(r) => {
            errors.push(d.error(field, r));
            None
        }
    }
}

/// An AS number (plain or `a.b`).
pub(super) fn asn_field(
    d: &RawDoc,
    field: &str,
    v: &Option<model::AsNumber>,
    errors: &mut Vec<ConfigError>,
) -> Option<u32> {
    value_field(d, field, v.as_ref(), values::asn, errors)
}

/// A hold time and keepalive (fields named as given): hold 0 or 3 s to 65535 s, the
/// keepalive shorter than the hold time. A hold time under 3 s but above zero (`2s`,
/// and also `500ms`, which whole seconds would read as 0, the value that turns the hold
/// timer off) is refused rather than rounded, since either rounding changes what the
/// session does.
pub(super) fn timers(
    d: &RawDoc,
    (hold_field, hold): (&str, &Option<String>),
    (keepalive_field, keepalive): (&str, &Option<String>),
    errors: &mut Vec<ConfigError>,
) -> (Option<Duration>, Option<Duration>) {
    let keepalive = duration_field(d, keepalive_field, keepalive, errors);
    let hold = duration_field(d, hold_field, hold, errors);
    if let Some(h) = hold {
        if !h.is_zero() && h < Duration::from_secs(3) {
            errors.push(d.error(
                hold_field,
                format!("{h:?}: a hold time is 0 or at least 3s (RFC 4271)"),
            ));
        }
        if h.as_secs() > 65535 {
            errors.push(d.error(hold_field, "at most 65535s"));
        }
        if let Some(k) = keepalive {
            if !h.is_zero() && k >= h {
                errors.push(d.error(
                    keepalive_field,
                    format!(
                        "{}s is not shorter than the hold time {}s",
                        k.as_secs(),
                        h.as_secs()
                    ),
                ));
            }
        }
    }
    (hold, keepalive)
}

/// A duration such as `90s` or `1m30s`.
pub(super) fn duration_field(
    d: &RawDoc,
    field: &str,
    v: &Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Option<Duration> {
    value_field(d, field, v.as_deref(), values::duration, errors)
}

/// A graceful-restart time: the capability carries it in 12 bits, so at most 4095 s.
/// Refused above that (for the mesh's as for a BGPPeer's) rather than clamped, so
/// that what the peer is told is what was written.
pub(super) fn restart_time_field(
    d: &RawDoc,
    field: &str,
    v: &Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Option<Duration> {
    let t = duration_field(d, field, v, errors)?;
    if t.as_secs() > 4095 {
        errors.push(d.error(
            field,
            format!(
                "{}s: the graceful-restart time field holds at most 4095s",
                t.as_secs()
            ),
        ));
        return None;
    }
    Some(t)
}

pub(in crate::cluster) fn password(
    d: &RawDoc,
    field: &str,
    p: &Option<PasswordSpec>,
    errors: &mut Vec<ConfigError>,
) -> Option<PasswordSource> {
    let p = p.as_ref()?;
    let mut sources = Vec::new();
    if let Some(r) = &p.secret_key_ref {
        if r.name.is_empty()
            || r.key.is_empty()
            || r.name.contains(['/', '\\'])
            || r.key.contains(['/', '\\'])
            || r.name.starts_with('.')
            || r.key.starts_with('.')
        {
            errors.push(d.error(
                &format!("{field}.secretKeyRef"),
                "needs a name and a key, neither containing '/' or starting with '.'",
            ));
            return None;
        }
        sources.push(PasswordSource::SecretKeyRef {
            name: r.name.clone(),
            key: r.key.clone(),
        });
    }
    if let Some(f) = &p.file {
        sources.push(PasswordSource::File(f.clone()));
    }
    if let Some(e) = &p.env {
        sources.push(PasswordSource::Env(e.clone()));
    }
    match sources.len() {
        1 => sources.pop(),
        0 => {
            errors.push(d.error(field, "give one of secretKeyRef, file or env"));
            None
        }
        _ => {
            errors.push(d.error(field, "give only one of secretKeyRef, file or env"));
            None
        }
    }
}

pub(super) fn selector(
    d: &RawDoc,
    field: &str,
    text: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Selector> {
    match Selector::parse(text) {
        Ok(s) => Some(s),
        Err(e) => {
            errors.push(d.error(field, e.to_string()));
            None
        }
    }
}
