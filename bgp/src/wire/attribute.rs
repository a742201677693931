//! Path attributes other than MP_REACH/MP_UNREACH (those live in [`super::mp`]):
//! their typed form, how each is parsed, what RFC 7606 says to do when one is
//! malformed, and their encoding.
//!
//! [`PathAttributes`] is `Hash + Eq` so the RIB can intern it: every route that shares
//! attributes points at one copy.

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::aspath::AsPath;
use super::error::ErrorAction;
use super::iana::{attr, attr_flags, AS_TRANS};
use super::notification::update_subcode;

/// ORIGIN values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// IGP (0).
    Igp,
    /// EGP (1).
    Egp,
    /// INCOMPLETE (2).
    Incomplete,
}

impl Origin {
    fn code(self) -> u8 {
        match self {
            Origin::Igp => 0,
            Origin::Egp => 1,
            Origin::Incomplete => 2,
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Origin::Igp => "igp",
            Origin::Egp => "egp",
            Origin::Incomplete => "incomplete",
        })
    }
}

/// AGGREGATOR (with the AS already merged from AS4_AGGREGATOR when needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Aggregator {
    /// AS of the aggregating speaker.
    pub asn: u32,
    /// BGP identifier of the aggregating speaker.
    pub address: Ipv4Addr,
}

/// A standard community (RFC 1997), shown as `ASN:value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Community(pub u32);

impl Community {
    /// NO_EXPORT.
    pub const NO_EXPORT: Community = Community(0xFFFF_FF01);
    /// NO_ADVERTISE.
    pub const NO_ADVERTISE: Community = Community(0xFFFF_FF02);
    /// NO_EXPORT_SUBCONFED.
    pub const NO_EXPORT_SUBCONFED: Community = Community(0xFFFF_FF03);
    /// GRACEFUL_SHUTDOWN (RFC 8326): the sender is about to go away.
    pub const GRACEFUL_SHUTDOWN: Community = Community(0xFFFF_0000);
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0xFFFF_0000 => f.write_str("graceful-shutdown"),
            0xFFFF_0006 => f.write_str("llgr-stale"),
            0xFFFF_0007 => f.write_str("no-llgr"),
            0xFFFF_029A => f.write_str("blackhole"),
            0xFFFF_FF01 => f.write_str("no-export"),
            0xFFFF_FF02 => f.write_str("no-advertise"),
            0xFFFF_FF03 => f.write_str("no-export-subconfed"),
            v => write!(f, "{}:{}", v >> 16, v & 0xFFFF),
        }
    }
}

impl Serialize for Community {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An extended community (RFC 4360): 8 bytes, type first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExtendedCommunity(pub [u8; 8]);

impl std::fmt::Display for ExtendedCommunity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        let kind = match b[1] {
            0x02 => "rt",
            0x03 => "soo",
            _ => "",
        };
        match (b[0] & 0x3f, kind) {
            (0x00, k) if !k.is_empty() => {
                write!(
                    f,
                    "{k}:{}:{}",
                    u16::from_be_bytes([b[2], b[3]]),
                    u32::from_be_bytes([b[4], b[5], b[6], b[7]])
                )
            }
            (0x01, k) if !k.is_empty() => {
                write!(
                    f,
                    "{k}:{}:{}",
                    Ipv4Addr::new(b[2], b[3], b[4], b[5]),
                    u16::from_be_bytes([b[6], b[7]])
                )
            }
            (0x02, k) if !k.is_empty() => {
                write!(
                    f,
                    "{k}:{}:{}",
                    u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
                    u16::from_be_bytes([b[6], b[7]])
                )
            }
            _ => write!(f, "0x{:016x}", u64::from_be_bytes(b)),
        }
    }
}

impl Serialize for ExtendedCommunity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A large community (RFC 8092), shown as `global:local1:local2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LargeCommunity {
    /// Global administrator (an AS).
    pub global: u32,
    /// First local data part.
    pub local1: u32,
    /// Second local data part.
    pub local2: u32,
}

impl std::fmt::Display for LargeCommunity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.global, self.local1, self.local2)
    }
}

impl Serialize for LargeCommunity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An attribute tern does not interpret, kept byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RawAttribute {
    /// Flags as received (the extended-length bit is recomputed on encode).
    pub flags: u8,
    /// Type code.
    pub code: u8,
    /// Value.
    #[serde(serialize_with = "super::serde_hex")]
    pub data: Bytes,
}

impl RawAttribute {
    /// How it is passed on to another peer (RFC 4271 §5): an optional transitive
    /// attribute with the Partial bit set; an optional non-transitive one not at all.
    pub fn readvertised(&self) -> Option<RawAttribute> {
        let transitive = self.flags & attr_flags::TRANSITIVE != 0;
        let optional = self.flags & attr_flags::OPTIONAL != 0;
        (optional && transitive).then(|| RawAttribute {
            flags: self.flags | attr_flags::PARTIAL,
            ..self.clone()
        })
    }
}

/// The path attributes of a route (MP_REACH/MP_UNREACH excluded: they belong to the
/// UPDATE, not to a route). AS4_PATH/AS4_AGGREGATOR are merged in on decode and
/// generated on encode for 2-octet sessions, so they never appear here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct PathAttributes {
    /// ORIGIN.
    pub origin: Option<Origin>,
    /// AS_PATH (true 4-octet path).
    pub as_path: Option<AsPath>,
    /// NEXT_HOP (IPv4 NLRI only; MP families carry theirs in MP_REACH_NLRI).
    pub next_hop: Option<Ipv4Addr>,
    /// MULTI_EXIT_DISC.
    pub med: Option<u32>,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
    /// ATOMIC_AGGREGATE present.
    pub atomic_aggregate: bool,
    /// AGGREGATOR.
    pub aggregator: Option<Aggregator>,
    /// COMMUNITIES.
    pub communities: Vec<Community>,
    /// ORIGINATOR_ID.
    pub originator_id: Option<Ipv4Addr>,
    /// CLUSTER_LIST.
    pub cluster_list: Vec<Ipv4Addr>,
    /// EXTENDED_COMMUNITIES.
    pub extended_communities: Vec<ExtendedCommunity>,
    /// LARGE_COMMUNITY.
    pub large_communities: Vec<LargeCommunity>,
    /// Attributes tern does not interpret, in the order received.
    pub unknown: Vec<RawAttribute>,
    /// Not a wire attribute, never encoded nor decoded: the kernel metric an import
    /// policy gave the route (Calico's `setPriority` operation, BIRD's `krt_metric`,
    /// which BIRD also keeps among a route's attributes). `None` lets the FIB derive
    /// the metric from LOCAL_PREF or the normal route priority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_priority: Option<u32>,
}

/// The expected optional/transitive flag bits of a known attribute, or `None` for
/// codes tern does not know.
pub(crate) fn expected_flags(code: u8) -> Option<u8> {
    const WK: u8 = attr_flags::TRANSITIVE;
    const ON: u8 = attr_flags::OPTIONAL;
    const OT: u8 = attr_flags::OPTIONAL | attr_flags::TRANSITIVE;
    Some(match code {
        attr::ORIGIN
        | attr::AS_PATH
        | attr::NEXT_HOP
        | attr::LOCAL_PREF
        | attr::ATOMIC_AGGREGATE => WK,
        attr::MED
        | attr::ORIGINATOR_ID
        | attr::CLUSTER_LIST
        | attr::MP_REACH_NLRI
        | attr::MP_UNREACH_NLRI => ON,
        attr::AGGREGATOR
        | attr::COMMUNITIES
        | attr::EXTENDED_COMMUNITIES
        | attr::AS4_PATH
        | attr::AS4_AGGREGATOR
        | attr::LARGE_COMMUNITIES => OT,
        _ => return None,
    })
}

/// RFC 7606 §7: what to do when a known attribute is malformed.
pub(crate) fn malformed_action(code: u8) -> ErrorAction {
    match code {
        attr::ATOMIC_AGGREGATE | attr::AGGREGATOR | attr::AS4_PATH | attr::AS4_AGGREGATOR => {
            ErrorAction::AttributeDiscard
        }
        attr::MP_REACH_NLRI | attr::MP_UNREACH_NLRI => ErrorAction::SessionReset,
        _ => ErrorAction::TreatAsWithdraw,
    }
}

/// Values parsed from one attribute, before AS4 merging.
pub(crate) enum Parsed {
    Origin(Origin),
    AsPath(AsPath),
    NextHop(Ipv4Addr),
    Med(u32),
    LocalPref(u32),
    AtomicAggregate,
    Aggregator(Aggregator),
    Communities(Vec<Community>),
    OriginatorId(Ipv4Addr),
    ClusterList(Vec<Ipv4Addr>),
    ExtendedCommunities(Vec<ExtendedCommunity>),
    As4Path(AsPath),
    As4Aggregator(Aggregator),
    LargeCommunities(Vec<LargeCommunity>),
}

/// A malformed attribute value: (subcode, reason).
pub(crate) type ValueError = (u8, String);

fn fixed<const N: usize>(data: &[u8], name: &str) -> Result<[u8; N], ValueError> {
    <[u8; N]>::try_from(data).map_err(|_| {
        (
            update_subcode::ATTRIBUTE_LENGTH,
            format!("{name} length {} is not {N}", data.len()),
        )
    })
}

fn multiple_of(data: &[u8], n: usize, name: &str) -> Result<(), ValueError> {
    if !data.len().is_multiple_of(n) || data.is_empty() {
        return Err((
            update_subcode::ATTRIBUTE_LENGTH,
            format!("{name} length {} is not a multiple of {n}", data.len()),
        ));
    }
    Ok(())
}

/// Parses the value of a known attribute (not MP_REACH/MP_UNREACH).
pub(crate) fn parse_value(code: u8, data: &[u8], four_octet: bool) -> Result<Parsed, ValueError> {
    let u32_of = |b: [u8; 4]| u32::from_be_bytes(b);
    Ok(match code {
        attr::ORIGIN => match fixed::<1>(data, "ORIGIN")? {
            [0] => Parsed::Origin(Origin::Igp),
            [1] => Parsed::Origin(Origin::Egp),
            [2] => Parsed::Origin(Origin::Incomplete),
            [v] => {
                return Err((
                    update_subcode::INVALID_ORIGIN,
                    format!("ORIGIN value {v} is undefined"),
                ))
            }
        },
        attr::AS_PATH => Parsed::AsPath(
            AsPath::decode(data, four_octet)
                .map_err(|e| (update_subcode::MALFORMED_AS_PATH, format!("AS_PATH: {e}")))?,
        ),
        attr::NEXT_HOP => Parsed::NextHop(Ipv4Addr::from(fixed::<4>(data, "NEXT_HOP")?)),
        attr::MED => Parsed::Med(u32_of(fixed::<4>(data, "MULTI_EXIT_DISC")?)),
        attr::LOCAL_PREF => Parsed::LocalPref(u32_of(fixed::<4>(data, "LOCAL_PREF")?)),
        attr::ATOMIC_AGGREGATE => {
            fixed::<0>(data, "ATOMIC_AGGREGATE")?;
            Parsed::AtomicAggregate
        }
        attr::AGGREGATOR => Parsed::Aggregator(parse_aggregator(data, four_octet, "AGGREGATOR")?),
        attr::AS4_AGGREGATOR => {
            Parsed::As4Aggregator(parse_aggregator(data, true, "AS4_AGGREGATOR")?)
        }
        attr::COMMUNITIES => {
            multiple_of(data, 4, "COMMUNITIES")?;
            Parsed::Communities(data.chunks_exact(4).map(|c| Community(be32(c))).collect())
        }
        attr::ORIGINATOR_ID => {
            Parsed::OriginatorId(Ipv4Addr::from(fixed::<4>(data, "ORIGINATOR_ID")?))
        }
        attr::CLUSTER_LIST => {
            multiple_of(data, 4, "CLUSTER_LIST")?;
            Parsed::ClusterList(
                data.chunks_exact(4)
                    .map(|c| Ipv4Addr::from(be32(c)))
                    .collect(),
            )
        }
        attr::EXTENDED_COMMUNITIES => {
            multiple_of(data, 8, "EXTENDED_COMMUNITIES")?;
            Parsed::ExtendedCommunities(
                data.chunks_exact(8)
                    .map(|c| ExtendedCommunity(<[u8; 8]>::try_from(c).unwrap_or_default()))
                    .collect(),
            )
        }
        attr::AS4_PATH => Parsed::As4Path(
            AsPath::decode(data, true)
                .map_err(|e| (update_subcode::OPTIONAL_ATTRIBUTE, format!("AS4_PATH: {e}")))?,
        ),
        attr::LARGE_COMMUNITIES => {
            multiple_of(data, 12, "LARGE_COMMUNITY")?;
            Parsed::LargeCommunities(
                data.chunks_exact(12)
                    .map(|c| LargeCommunity {
                        global: be32(c.get(0..4).unwrap_or_default()),
                        local1: be32(c.get(4..8).unwrap_or_default()),
                        local2: be32(c.get(8..12).unwrap_or_default()),
                    })
                    .collect(),
            )
        }
        c => {
            return Err((
                update_subcode::MALFORMED_ATTRIBUTE_LIST,
                format!("attribute {c} has no parser"),
            ))
        }
    })
}

fn be32(c: &[u8]) -> u32 {
    match c {
        [a, b, c, d] => u32::from_be_bytes([*a, *b, *c, *d]),
        _ => 0,
    }
}

fn parse_aggregator(data: &[u8], four_octet: bool, name: &str) -> Result<Aggregator, ValueError> {
    let (asn, addr) = if four_octet {
        let b = fixed::<8>(data, name)?;
        (be32(&b[0..4]), [b[4], b[5], b[6], b[7]])
    } else {
        let b = fixed::<6>(data, name)?;
        (
            u32::from(u16::from_be_bytes([b[0], b[1]])),
            [b[2], b[3], b[4], b[5]],
        )
    };
    Ok(Aggregator {
        asn,
        address: Ipv4Addr::from(addr),
    })
}

/// Writes one attribute header + value, choosing the extended length when needed.
pub(crate) fn put_attribute(out: &mut BytesMut, flags: u8, code: u8, value: &[u8]) {
    put_attribute_header(out, flags, code, value.len());
    out.put_slice(value);
}

/// Writes an attribute header for a value of `len` bytes that the caller writes next.
pub(crate) fn put_attribute_header(out: &mut BytesMut, flags: u8, code: u8, len: usize) {
    if len > 255 {
        out.put_u8(flags | attr_flags::EXTENDED_LENGTH);
        out.put_u8(code);
        out.put_u16(len as u16);
    } else {
        out.put_u8(flags & !attr_flags::EXTENDED_LENGTH);
        out.put_u8(code);
        out.put_u8(len as u8);
    }
}

impl PathAttributes {
    /// Appends every attribute in type-code order. On a 2-octet session
    /// (`four_octet` false) AS numbers above 65535 go out as AS_TRANS, with AS4_PATH and
    /// AS4_AGGREGATOR carrying the true values (RFC 6793 §4.2.2).
    pub fn encode(&self, out: &mut BytesMut, four_octet: bool) {
        const WK: u8 = attr_flags::TRANSITIVE;
        const ON: u8 = attr_flags::OPTIONAL;
        const OT: u8 = attr_flags::OPTIONAL | attr_flags::TRANSITIVE;
        if let Some(o) = self.origin {
            put_attribute(out, WK, attr::ORIGIN, &[o.code()]);
        }
        if let Some(p) = &self.as_path {
            put_attribute_header(out, WK, attr::AS_PATH, p.encoded_len(four_octet));
            p.encode(out, four_octet);
        }
        if let Some(nh) = self.next_hop {
            put_attribute(out, WK, attr::NEXT_HOP, &nh.octets());
        }
        if let Some(m) = self.med {
            put_attribute(out, ON, attr::MED, &m.to_be_bytes());
        }
        if let Some(lp) = self.local_pref {
            put_attribute(out, WK, attr::LOCAL_PREF, &lp.to_be_bytes());
        }
        if self.atomic_aggregate {
            put_attribute(out, WK, attr::ATOMIC_AGGREGATE, &[]);
        }
        if let Some(a) = self.aggregator {
            let mut v = BytesMut::with_capacity(8);
            if four_octet {
                v.put_u32(a.asn);
            } else {
                v.put_u16(u16::try_from(a.asn).unwrap_or(AS_TRANS));
            }
            v.put_slice(&a.address.octets());
            put_attribute(out, OT, attr::AGGREGATOR, &v);
        }
        if !self.communities.is_empty() {
            put_attribute_header(out, OT, attr::COMMUNITIES, self.communities.len() * 4);
            self.communities.iter().for_each(|c| out.put_u32(c.0));
        }
        if let Some(id) = self.originator_id {
            put_attribute(out, ON, attr::ORIGINATOR_ID, &id.octets());
        }
        if !self.cluster_list.is_empty() {
            put_attribute_header(out, ON, attr::CLUSTER_LIST, self.cluster_list.len() * 4);
            self.cluster_list
                .iter()
                .for_each(|c| out.put_slice(&c.octets()));
        }
        if !self.extended_communities.is_empty() {
            put_attribute_header(
                out,
                OT,
                attr::EXTENDED_COMMUNITIES,
                self.extended_communities.len() * 8,
            );
            self.extended_communities
                .iter()
                .for_each(|c| out.put_slice(&c.0));
        }
        if !four_octet {
            if let Some(p) = self.as_path.as_ref().filter(|p| p.needs_as4()) {
                put_attribute_header(out, OT, attr::AS4_PATH, p.encoded_len(true));
                p.encode(out, true);
            }
            if let Some(a) = self.aggregator.filter(|a| a.asn > u32::from(u16::MAX)) {
                let mut v = BytesMut::with_capacity(8);
                v.put_u32(a.asn);
                v.put_slice(&a.address.octets());
                put_attribute(out, OT, attr::AS4_AGGREGATOR, &v);
            }
        }
        if !self.large_communities.is_empty() {
            put_attribute_header(
                out,
                OT,
                attr::LARGE_COMMUNITIES,
                self.large_communities.len() * 12,
            );
            for c in &self.large_communities {
                out.put_u32(c.global);
                out.put_u32(c.local1);
                out.put_u32(c.local2);
            }
        }
        for u in &self.unknown {
            put_attribute(out, u.flags, u.code, &u.data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn community_names() {
        assert_eq!(Community(0xFDE8_0064).to_string(), "65000:100");
        assert_eq!(Community::NO_EXPORT.to_string(), "no-export");
        let rt = ExtendedCommunity([0, 2, 0xfd, 0xe8, 0, 0, 0, 7]);
        assert_eq!(rt.to_string(), "rt:65000:7");
        let odd = ExtendedCommunity([0x80, 9, 1, 2, 3, 4, 5, 6]);
        assert_eq!(odd.to_string(), "0x8009010203040506");
    }

    #[test]
    fn readvertised_unknowns_follow_rfc4271() {
        let t = RawAttribute {
            flags: 0xc0,
            code: 99,
            data: Bytes::from_static(b"x"),
        };
        assert_eq!(t.readvertised().map(|a| a.flags), Some(0xe0));
        let nt = RawAttribute {
            flags: 0x80,
            code: 99,
            data: Bytes::new(),
        };
        assert_eq!(nt.readvertised(), None);
    }

    #[test]
    fn value_errors_carry_rfc_subcodes() {
        let e = parse_value(attr::ORIGIN, &[7], true).err().map(|e| e.0);
        assert_eq!(e, Some(update_subcode::INVALID_ORIGIN));
        let e = parse_value(attr::MED, &[0, 0, 1], true).err().map(|e| e.0);
        assert_eq!(e, Some(update_subcode::ATTRIBUTE_LENGTH));
        let e = parse_value(attr::COMMUNITIES, &[], true).err().map(|e| e.0);
        assert_eq!(e, Some(update_subcode::ATTRIBUTE_LENGTH));
    }
}
