//! MP_REACH_NLRI and MP_UNREACH_NLRI (RFC 4760): IPv6 routes, IPv4 routes with IPv6
//! next hops (RFC 8950), link-local next hops (RFC 2545) and ADD-PATH identifiers.
//! Families tern cannot parse are kept as raw bytes, never guessed at.

use std::net::{Ipv4Addr, Ipv6Addr};

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::iana::{Afi, Family};
use super::nlri::{decode_prefixes, Nlri, NlriError};
use super::reader::Reader;

/// The next hop of an MP_REACH_NLRI.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MpNextHop {
    /// An IPv4 next hop (4 bytes).
    V4(Ipv4Addr),
    /// An IPv6 global next hop, optionally followed by a link-local one (16 or 32 bytes).
    V6 {
        /// Global address.
        global: Ipv6Addr,
        /// Link-local address, if the sender included one.
        link_local: Option<Ipv6Addr>,
    },
    /// A next hop of a length tern does not interpret.
    Other(#[serde(serialize_with = "super::serde_hex")] Bytes),
}

impl MpNextHop {
    fn encoded_len(&self) -> usize {
        match self {
            MpNextHop::V4(_) => 4,
            MpNextHop::V6 {
                link_local: None, ..
            } => 16,
            MpNextHop::V6 {
                link_local: Some(_),
                ..
            } => 32,
            MpNextHop::Other(b) => b.len(),
        }
    }

    fn encode(&self, out: &mut BytesMut) {
        match self {
            MpNextHop::V4(a) => out.put_slice(&a.octets()),
            MpNextHop::V6 { global, link_local } => {
                out.put_slice(&global.octets());
                if let Some(ll) = link_local {
                    out.put_slice(&ll.octets());
                }
            }
            MpNextHop::Other(b) => out.put_slice(b),
        }
    }

    /// Why this next hop cannot be forwarded to, if it cannot: an IPv4 address that is
    /// not a unicast host address ([`valid_ipv4_next_hop`]), an IPv6 multicast address,
    /// or an unspecified IPv6 address with no link-local one beside it.
    pub fn invalid_reason(&self) -> Option<String> {
        match self {
            MpNextHop::V4(a) if !valid_ipv4_next_hop(*a) => {
                Some(format!("next hop {a} is not a unicast host address"))
            }
            MpNextHop::V6 { global, .. } if global.is_multicast() => {
                Some(format!("next hop {global} is a multicast address"))
            }
            MpNextHop::V6 {
                global,
                link_local: None,
            } if global.is_unspecified() => {
                Some("next hop is :: with no link-local address".into())
            }
            _ => None,
        }
    }

    fn decode(afi: Afi, b: &[u8]) -> Result<MpNextHop, String> {
        let v6 = |s: &[u8]| <[u8; 16]>::try_from(s).map(Ipv6Addr::from).ok();
        match (afi, b.len()) {
            (Afi::Ipv4, 4) => Ok(MpNextHop::V4(Ipv4Addr::from(
                <[u8; 4]>::try_from(b).unwrap_or_default(),
            ))),
            (Afi::Ipv4 | Afi::Ipv6, 16) => Ok(MpNextHop::V6 {
                global: v6(b).unwrap_or(Ipv6Addr::UNSPECIFIED),
                link_local: None,
            }),
            (Afi::Ipv4 | Afi::Ipv6, 32) => Ok(MpNextHop::V6 {
                global: b.get(..16).and_then(v6).unwrap_or(Ipv6Addr::UNSPECIFIED),
                link_local: b.get(16..).and_then(v6),
            }),
            (Afi::Other(_), _) => Ok(MpNextHop::Other(Bytes::copy_from_slice(b))),
            (Afi::Ipv4, n) => Err(format!(
                "next hop length {n} is not 4, 16 or 32 (IPv4, IPv6, IPv6 + link-local)"
            )),
            (Afi::Ipv6, n) => Err(format!(
                "next hop length {n} is not 16 or 32 (IPv6, IPv6 + link-local)"
            )),
        }
    }
}

impl std::fmt::Display for MpNextHop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MpNextHop::V4(a) => write!(f, "{a}"),
            MpNextHop::V6 {
                global,
                link_local: None,
            } => write!(f, "{global}"),
            MpNextHop::V6 {
                global,
                link_local: Some(ll),
            } => write!(f, "{global} ({ll})"),
            MpNextHop::Other(b) => write!(f, "0x{}", super::hex(b)),
        }
    }
}

/// Whether an IPv4 address can be a BGP next hop (RFC 4271 §6.3 "a valid IP host
/// address"): not in 0.0.0.0/8 ("this network"), not multicast (224.0.0.0/4), not
/// reserved or broadcast (240.0.0.0/4). Loopback addresses are allowed: single-host
/// labs and tests peer over 127.0.0.0/8, and such a next hop does no harm off-box
/// because it is never reachable through another router.
pub fn valid_ipv4_next_hop(a: Ipv4Addr) -> bool {
    let first = a.octets()[0];
    first != 0 && first < 224
}

/// MP_REACH_NLRI: prefixes announced in a family, with their next hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MpReach {
    /// Family of the prefixes.
    pub family: Family,
    /// Next hop for all of them.
    pub next_hop: MpNextHop,
    /// The prefixes (empty for families tern does not parse).
    pub nlri: Vec<Nlri>,
    /// NLRI bytes of a family tern does not parse, kept as received.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serde_hex_opt"
    )]
    pub unparsed: Option<Bytes>,
}

/// MP_UNREACH_NLRI: prefixes withdrawn in a family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MpUnreach {
    /// Family of the prefixes.
    pub family: Family,
    /// The prefixes (empty for families tern does not parse).
    pub withdrawn: Vec<Nlri>,
    /// NLRI bytes of a family tern does not parse, kept as received.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::serde_hex_opt"
    )]
    pub unparsed: Option<Bytes>,
}

/// Result of parsing an MP_REACH_NLRI body.
pub(crate) struct ParsedReach {
    pub(crate) reach: MpReach,
    /// Set when the next hop has the right length but cannot be forwarded to (a
    /// martian): the announced prefixes are treated as withdrawn (RFC 4271 §6.3's
    /// "syntactically incorrect", handled as RFC 7606 §7.3 does for NEXT_HOP).
    pub(crate) next_hop_error: Option<String>,
}

fn family_nlri(
    family: Family,
    data: Bytes,
    add_path: impl Fn(Afi) -> bool,
) -> Result<(Vec<Nlri>, Option<Bytes>), NlriError> {
    if !family.is_supported() {
        return Ok((Vec::new(), Some(data)));
    }
    let mut nlri = Vec::new();
    decode_prefixes(&data, family.afi, add_path(family.afi), &mut nlri)?;
    Ok((nlri, None))
}

/// Parses an MP_REACH_NLRI body. `Err` means the NLRI cannot be located or parsed: a
/// session reset (RFC 7606 §7.11, §5.3).
pub(crate) fn decode_reach(
    data: Bytes,
    add_path: impl Fn(Afi) -> bool,
) -> Result<ParsedReach, String> {
    let mut r = Reader::new(data);
    let (Some(afi), Some(safi), Some(nh_len)) = (r.u16(), r.u8(), r.u8()) else {
        return Err("MP_REACH_NLRI header cut short".to_string());
    };
    let family = Family::new(afi, safi);
    let nh = r
        .slice(usize::from(nh_len))
        .ok_or_else(|| format!("MP_REACH_NLRI next hop of {nh_len} bytes overruns the attribute"))?
        .to_vec();
    r.u8()
        .ok_or_else(|| "MP_REACH_NLRI reserved byte missing".to_string())?;
    // RFC 7606 §7.11: a next hop length that does not fit the family means the NLRI
    // cannot be located reliably, so it is a session reset, even when what follows
    // happens to parse. Families tern does not parse keep their next hop as bytes.
    let next_hop = if family.is_supported() {
        MpNextHop::decode(family.afi, &nh).map_err(|e| format!("MP_REACH_NLRI {family}: {e}"))?
    } else {
        MpNextHop::Other(Bytes::from(nh))
    };
    let (nlri, unparsed) = family_nlri(family, r.rest(), add_path)
        .map_err(|e| format!("MP_REACH_NLRI {family}: {}", e.0))?;
    let next_hop_error = next_hop.invalid_reason();
    Ok(ParsedReach {
        reach: MpReach {
            family,
            next_hop,
            nlri,
            unparsed,
        },
        next_hop_error,
    })
}

/// Parses an MP_UNREACH_NLRI body; `Err` is a session reset.
pub(crate) fn decode_unreach(
    data: Bytes,
    add_path: impl Fn(Afi) -> bool,
) -> Result<MpUnreach, String> {
    let mut r = Reader::new(data);
    let (Some(afi), Some(safi)) = (r.u16(), r.u8()) else {
        return Err("MP_UNREACH_NLRI header cut short".to_string());
    };
    let family = Family::new(afi, safi);
    let (withdrawn, unparsed) = family_nlri(family, r.rest(), add_path)
        .map_err(|e| format!("MP_UNREACH_NLRI {family}: {}", e.0))?;
    Ok(MpUnreach {
        family,
        withdrawn,
        unparsed,
    })
}

impl MpReach {
    /// Length of the attribute value before any NLRI.
    pub(crate) fn header_len(&self) -> usize {
        5 + self.next_hop.encoded_len()
    }

    /// Writes the value: header, next hop, reserved byte, then `nlri`.
    pub(crate) fn encode_value(&self, out: &mut BytesMut, nlri: &[Nlri], add_path: bool) {
        out.put_u16(self.family.afi.code());
        out.put_u8(self.family.safi.code());
        out.put_u8(self.next_hop.encoded_len() as u8);
        self.next_hop.encode(out);
        out.put_u8(0);
        for n in nlri {
            n.encode(out, add_path);
        }
        if let Some(raw) = &self.unparsed {
            out.put_slice(raw);
        }
    }
}

impl MpUnreach {
    /// Writes the value: AFI, SAFI, then `withdrawn`.
    pub(crate) fn encode_value(&self, out: &mut BytesMut, withdrawn: &[Nlri], add_path: bool) {
        out.put_u16(self.family.afi.code());
        out.put_u8(self.family.safi.code());
        for n in withdrawn {
            n.encode(out, add_path);
        }
        if let Some(raw) = &self.unparsed {
            out.put_slice(raw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_with_link_local_and_ipv4_over_ipv6() {
        let mut v = vec![0, 2, 1, 32];
        v.extend_from_slice(
            &"2001:db8::1"
                .parse::<Ipv6Addr>()
                .map(|a| a.octets())
                .unwrap_or_default(),
        );
        v.extend_from_slice(
            &"fe80::1"
                .parse::<Ipv6Addr>()
                .map(|a| a.octets())
                .unwrap_or_default(),
        );
        v.extend_from_slice(&[0, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1]);
        let p = decode_reach(Bytes::from(v), |_| false)
            .ok()
            .map(|p| p.reach);
        let p = p.unwrap_or_else(|| panic!("decode failed"));
        assert_eq!(p.next_hop.to_string(), "2001:db8::1 (fe80::1)");
        assert_eq!(p.nlri[0].to_string(), "2001:db8:0:1::/64");

        // RFC 8950: IPv4 NLRI, IPv6 next hop.
        let mut v = vec![0, 1, 1, 16];
        v.extend_from_slice(
            &"2001:db8::2"
                .parse::<Ipv6Addr>()
                .map(|a| a.octets())
                .unwrap_or_default(),
        );
        v.extend_from_slice(&[0, 26, 198, 18, 4, 0]);
        let p = decode_reach(Bytes::from(v), |_| false)
            .ok()
            .map(|p| p.reach);
        let p = p.unwrap_or_else(|| panic!("decode failed"));
        assert_eq!(p.family, Family::IPV4_UNICAST);
        assert_eq!(p.next_hop.to_string(), "2001:db8::2");
        assert_eq!(p.nlri[0].to_string(), "198.18.4.0/26");
    }

    #[test]
    fn bad_next_hop_length_is_a_session_reset() {
        // RFC 7606 §7.11: the NLRI cannot be located reliably after a next hop of the
        // wrong length, even when the bytes after it happen to parse.
        let v = vec![0, 2, 1, 5, 1, 2, 3, 4, 5, 0, 8, 0x20];
        let e = decode_reach(Bytes::from(v), |_| false).err();
        assert_eq!(
            e.as_deref(),
            Some("MP_REACH_NLRI ipv6-unicast: next hop length 5 is not 16 or 32 (IPv6, IPv6 + link-local)")
        );
        assert!(decode_reach(Bytes::from_static(&[0, 2, 1, 40, 1]), |_| false).is_err());
        assert!(decode_reach(
            Bytes::from_static(&[0, 1, 1, 4, 1, 2, 3, 4, 0, 33, 1]),
            |_| false
        )
        .is_err());
    }

    #[test]
    fn unknown_families_are_kept_raw() {
        let u = decode_unreach(Bytes::from_static(&[0, 25, 70, 1, 2, 3]), |_| false);
        let u = u.unwrap_or_else(|e| panic!("{e}"));
        assert!(u.withdrawn.is_empty());
        assert_eq!(u.unparsed.as_deref(), Some(&[1u8, 2, 3][..]));
    }
}
