//! Parsers for the small value languages inside Calico resources: AS numbers (plain and
//! asdot), Go durations, communities, `address/len` and `address:port`. Each returns a
//! reason a person can act on; the caller adds the file, resource and field.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::model::AsNumber;

/// A BGP community as Calico writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Community {
    /// RFC 1997 `aa:nn`.
    Standard(u32),
    /// RFC 8092 `global:local1:local2`.
    Large(u32, u32, u32),
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Community::Standard(v) => write!(f, "{}:{}", v >> 16, v & 0xffff),
            Community::Large(a, b, c) => write!(f, "{a}:{b}:{c}"),
        }
    }
}

/// Parses `aa:nn` (each 0-65535) or `a:b:c` (each 0-4294967295).
pub fn community(text: &str) -> Result<Community, String> {
    let parts: Vec<&str> = text.trim().split(':').collect();
    let bad = || {
        format!("{text:?} is not a community: use aa:nn (0-65535 each) or a large community a:b:c (0-4294967295 each)")
    };
    match parts.as_slice() {
        [a, n] => {
            let a: u16 = a.parse().map_err(|_| bad())?;
            let n: u16 = n.parse().map_err(|_| bad())?;
            Ok(Community::Standard((u32::from(a) << 16) | u32::from(n)))
        }
        [a, b, c] => Ok(Community::Large(
            a.parse().map_err(|_| bad())?,
            b.parse().map_err(|_| bad())?,
            c.parse().map_err(|_| bad())?,
        )),
        _ => Err(bad()),
    }
}

/// Parses an AS number: 1-4294967295, plain or asdot (`1.10` = 65546). 0 is refused
/// (RFC 7607), and so is AS_TRANS 23456, which only appears inside 2-octet encodings.
pub fn asn(value: &AsNumber) -> Result<u32, String> {
    let n: u64 = match value {
        AsNumber::Number(n) => *n,
        AsNumber::Text(t) => match t.trim().split_once('.') {
            Some((hi, lo)) => {
                let hi: u16 = hi
                    .parse()
                    .map_err(|_| format!("{t:?} is not an AS number"))?;
                let lo: u16 = lo
                    .parse()
                    .map_err(|_| format!("{t:?} is not an AS number"))?;
                (u64::from(hi) << 16) | u64::from(lo)
            }
            None => t
                .trim()
                .parse()
                .map_err(|_| format!("{t:?} is not an AS number"))?,
        },
    };
    match n {
        0 => Err("AS 0 is reserved (RFC 7607) and cannot be used; use 1-4294967295".into()),
        23456 => Err("AS 23456 is AS_TRANS, reserved for 2-octet encodings; use another AS".into()),
        n => u32::try_from(n)
            .map_err(|_| format!("{n} is larger than the 4-octet AS range 1-4294967295")),
    }
}

/// The longest duration accepted: i64::MAX nanoseconds, about 292 years. Calico parses
/// these fields with Go's `time.ParseDuration`, whose `time.Duration` is an i64 of
/// nanoseconds and which refuses anything longer, so tern draws the line at the same
/// place: a value Calico accepts is accepted here, and nothing bigger can overflow
/// tern's arithmetic.
pub const MAX_DURATION: Duration = Duration::new(9_223_372_036, 854_775_807);

/// [`MAX_DURATION`] as Go prints it, for messages.
const MAX_DURATION_TEXT: &str = "2562047h47m16.854775807s, about 292 years";

/// Parses a Go duration as Calico writes them: `90s`, `1m30s`, `500ms`, `1.5h`, `0`.
///
/// The arithmetic is integer nanoseconds, as in Go, so `0.3s` is exactly 300 ms and a
/// sum of units can only end in an error, never an overflow: a value longer than
/// [`MAX_DURATION`] is refused. Digits below a nanosecond are dropped, as Go does.
pub fn duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration: write it like 90s, 1m30s or 500ms");
    let too_long =
        || format!("{text:?} is longer than the largest duration accepted ({MAX_DURATION_TEXT})");
    let max_nanos = u128::from(i64::MAX.unsigned_abs());
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() {
        return Err(bad());
    }
    let digits_end = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let mut total: u128 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let (whole, tail) = rest.split_at(digits_end(rest));
        let (fraction, tail) = match tail.strip_prefix('.') {
            Some(after) => after.split_at(digits_end(after)),
            None => ("", tail),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(bad());
        }
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            // Go accepts both the micro sign (U+00B5) and the Greek mu (U+03BC).
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ns" => 1,
            _ => return Err(bad()),
        };
        // Only ASCII digits reach here, so a failed parse is a number too long for
        // u128, which is far beyond the limit anyway.
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_long())?
        };
        // 25 fraction digits are below a nanosecond of the longest unit (an hour is
        // 3.6e12 ns) and keep numerator * unit within u128; the rest are dropped.
        let (mut numerator, mut denominator) = (0u128, 1u128);
        for c in fraction.chars().take(25) {
            let digit = c.to_digit(10).ok_or_else(bad)?;
            numerator = numerator
                .checked_mul(10)
                .and_then(|n| n.checked_add(u128::from(digit)))
                .ok_or_else(too_long)?;
            denominator = denominator.checked_mul(10).ok_or_else(too_long)?;
        }
        let part = whole
            .checked_mul(unit_nanos)
            .and_then(|w| {
                numerator
                    .checked_mul(unit_nanos)
                    .and_then(|f| f.checked_div(denominator))
                    .and_then(|f| w.checked_add(f))
            })
            .ok_or_else(too_long)?;
        total = total
            .checked_add(part)
            .filter(|t| *t <= max_nanos)
            .ok_or_else(too_long)?;
        rest = tail;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| too_long())?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| too_long())?;
    Ok(Duration::new(secs, nanos))
}

/// Parses `addr/len` or a bare address (host length), as in `Node.spec.bgp.ipv4Address`.
pub fn address_with_len(text: &str) -> Result<(IpAddr, u8), String> {
    let t = text.trim();
    let (addr, len) = match t.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (t, None),
    };
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address (with optional /length)"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("{text:?}: the prefix length must be 0-{max}"))?,
    };
    Ok((addr, len))
}

/// Parses a `peerIP`: `198.51.100.1`, `198.51.100.1:1790`, `2001:db8::1`,
/// `[2001:db8::1]:1790`.
pub fn peer_ip(text: &str) -> Result<(IpAddr, Option<u16>), String> {
    let t = text.trim();
    if let Ok(a) = t.parse::<IpAddr>() {
        return Ok((a, None));
    }
    match t.parse::<SocketAddr>() {
        Ok(s) if s.port() != 0 => Ok((s.ip(), Some(s.port()))),
        _ => Err(format!(
            "{text:?} is not a peer address: use 198.51.100.1, 198.51.100.1:1790, 2001:db8::1 or [2001:db8::1]:1790"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_numbers_plain_asdot_and_refused() {
        assert_eq!(asn(&AsNumber::Number(64512)), Ok(64512));
        assert_eq!(asn(&AsNumber::Text("1.10".into())), Ok(65546));
        assert_eq!(asn(&AsNumber::Text("4200000000".into())), Ok(4_200_000_000));
        assert!(asn(&AsNumber::Number(0)).unwrap_err().contains("AS 0"));
        assert!(asn(&AsNumber::Number(23456)).is_err());
        assert!(asn(&AsNumber::Number(1 << 32)).is_err());
        assert!(asn(&AsNumber::Text("sixty".into())).is_err());
    }

    #[test]
    fn go_durations() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        for bad in ["", "90", "s", "1x", "-1s", "1m30"] {
            assert!(duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn go_duration_fractions_and_units_are_exact() {
        assert_eq!(duration("0.3s"), Ok(Duration::from_millis(300)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(
            duration("1h1m1s1ms1us1ns"),
            Ok(Duration::new(3661, 1_001_001))
        );
        assert_eq!(duration("2\u{b5}s"), Ok(Duration::from_micros(2)));
        assert_eq!(duration("2\u{3bc}s"), Ok(Duration::from_micros(2)));
        // Digits below a nanosecond are dropped, however many there are.
        assert_eq!(
            duration(&format!("1.{}s", "9".repeat(100))),
            Ok(Duration::new(1, 999_999_999))
        );
        for bad in [".s", "1..5s", "1.5.3s", "1e3s", "1 s"] {
            assert!(duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn durations_longer_than_go_accepts_are_refused_not_overflowed() {
        // Issue 23: each part fits a Duration, their sum does not (this panicked with
        // "overflow when adding durations").
        let text = "10000000000000000000s10000000000000000000s";
        assert_eq!(
            duration(text),
            Err(format!(
                "{text:?} is longer than the largest duration accepted (2562047h47m16.854775807s, about 292 years)"
            ))
        );
        // Go's limit exactly, written two ways, is accepted; one nanosecond more is not.
        assert_eq!(duration("2562047h47m16.854775807s"), Ok(MAX_DURATION));
        assert_eq!(duration("9223372036854775807ns"), Ok(MAX_DURATION));
        for long in [
            "2562047h47m16.854775808s".to_string(),
            "9223372036854775808ns".to_string(),
            "2562047h".repeat(2),
            // More digits than u128 holds.
            format!("{}s", "9".repeat(100)),
            format!("{}h", "1".repeat(40)),
            format!("0.{}1h{}h", "0".repeat(30), "9".repeat(30)),
        ] {
            let e = duration(&long).expect_err(&long);
            assert!(
                e.contains("longer than the largest duration accepted"),
                "{e}"
            );
        }
    }

    #[test]
    fn communities_standard_and_large() {
        assert_eq!(
            community("65001:100"),
            Ok(Community::Standard((65001 << 16) | 100))
        );
        assert_eq!(
            community("4200000000:1:2"),
            Ok(Community::Large(4_200_000_000, 1, 2))
        );
        assert_eq!(
            community("65001:100").map(|c| c.to_string()),
            Ok("65001:100".into())
        );
        for bad in ["65536:1", "1", "a:b", "1:2:3:4", ""] {
            assert!(community(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn addresses_and_peer_ips() {
        assert_eq!(
            address_with_len("198.51.100.10/24"),
            Ok(("198.51.100.10".parse().unwrap(), 24))
        );
        assert_eq!(
            address_with_len("2001:db8::1"),
            Ok(("2001:db8::1".parse().unwrap(), 128))
        );
        assert!(address_with_len("198.51.100.10/33").is_err());
        assert_eq!(
            peer_ip("198.51.100.1:1790"),
            Ok(("198.51.100.1".parse().unwrap(), Some(1790)))
        );
        assert_eq!(
            peer_ip("[2001:db8::1]:1790"),
            Ok(("2001:db8::1".parse().unwrap(), Some(1790)))
        );
        assert_eq!(
            peer_ip("2001:db8::1"),
            Ok(("2001:db8::1".parse().unwrap(), None))
        );
        assert!(peer_ip("198.51.100.1:0").is_err());
        assert!(peer_ip("tor-a").is_err());
    }
}
