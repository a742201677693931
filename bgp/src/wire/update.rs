//! UPDATE messages: decoding with RFC 7606 error classification, AS4 merging (RFC 6793),
//! End-of-RIB markers (RFC 4724), and encoding of one UPDATE as it stands. Packing many
//! prefixes into few UPDATEs is in [`super::pack`].

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::aspath::AsPath;
use super::attribute::{
    expected_flags, malformed_action, parse_value, put_attribute_header, Parsed,
};
use super::attribute::{PathAttributes, RawAttribute};
use super::error::{AttributeError, DecodeError, ErrorAction};
use super::iana::{attr, attr_flags, attr_name, Afi, Family, AS_TRANS};
use super::mp::{decode_reach, decode_unreach, MpReach, MpUnreach};
use super::nlri::{decode_prefixes, Nlri};
use super::notification::update_subcode;
use super::reader::Reader;
use super::CodecOptions;

/// An UPDATE message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Update {
    /// IPv4 unicast prefixes withdrawn in the classic field.
    pub withdrawn: Vec<Nlri>,
    /// Path attributes of the announced prefixes.
    pub attributes: PathAttributes,
    /// IPv4 unicast prefixes announced in the classic field (next hop: NEXT_HOP).
    pub nlri: Vec<Nlri>,
    /// MP_REACH_NLRI, if present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mp_reach: Option<MpReach>,
    /// MP_UNREACH_NLRI, if present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mp_unreach: Option<MpUnreach>,
    /// Malformed attributes that did not need a session reset (RFC 7606).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<AttributeError>,
}

impl Update {
    /// The End-of-RIB marker for `family` (RFC 4724 §2).
    pub fn end_of_rib(family: Family) -> Update {
        if family == Family::IPV4_UNICAST {
            return Update::default();
        }
        Update {
            mp_unreach: Some(MpUnreach {
                family,
                withdrawn: Vec::new(),
                unparsed: None,
            }),
            ..Update::default()
        }
    }

    /// If this UPDATE is an End-of-RIB marker, its family.
    pub fn end_of_rib_family(&self) -> Option<Family> {
        let no_attrs = self.attributes == PathAttributes::default();
        if !self.withdrawn.is_empty()
            || !self.nlri.is_empty()
            || self.mp_reach.is_some()
            || !no_attrs
        {
            return None;
        }
        match &self.mp_unreach {
            None => Some(Family::IPV4_UNICAST),
            Some(u)
                if u.withdrawn.is_empty() && u.unparsed.as_ref().is_none_or(|b| b.is_empty()) =>
            {
                Some(u.family)
            }
            Some(_) => None,
        }
    }

    /// Whether RFC 7606 says to withdraw every prefix announced here instead of using
    /// the announcement.
    pub fn treat_as_withdraw(&self) -> bool {
        self.errors
            .iter()
            .any(|e| e.action == ErrorAction::TreatAsWithdraw)
    }

    /// Number of prefixes announced (classic and MP).
    pub fn announced_count(&self) -> usize {
        self.nlri.len() + self.mp_reach.as_ref().map_or(0, |m| m.nlri.len())
    }

    /// Number of prefixes withdrawn (classic and MP).
    pub fn withdrawn_count(&self) -> usize {
        self.withdrawn.len() + self.mp_unreach.as_ref().map_or(0, |m| m.withdrawn.len())
    }

    /// Decodes an UPDATE body (the bytes after the 19-byte header).
    pub fn decode(body: Bytes, opts: &CodecOptions) -> Result<Update, DecodeError> {
        let mut r = Reader::new(body);
        let wlen = r
            .u16()
            .ok_or_else(|| DecodeError::malformed_update("withdrawn routes length missing"))?;
        let wbytes = r.bytes(usize::from(wlen)).ok_or_else(|| {
            DecodeError::malformed_update(format!(
                "withdrawn routes length {wlen} overruns the message"
            ))
        })?;
        let alen = r
            .u16()
            .ok_or_else(|| DecodeError::malformed_update("total path attribute length missing"))?;
        let abytes = r.bytes(usize::from(alen)).ok_or_else(|| {
            DecodeError::malformed_update(format!(
                "total path attribute length {alen} overruns the message"
            ))
        })?;
        let nbytes = r.rest();

        let mut u = Update::default();
        let v4_add_path = opts.add_path(Afi::Ipv4);
        let network_field = |what: &str, e: String| {
            DecodeError::update(
                update_subcode::INVALID_NETWORK_FIELD,
                Bytes::new(),
                format!("{what}: {e}"),
            )
        };
        decode_prefixes(&wbytes, Afi::Ipv4, v4_add_path, &mut u.withdrawn)
            .map_err(|e| network_field("withdrawn routes", e.0))?;
        decode_prefixes(&nbytes, Afi::Ipv4, v4_add_path, &mut u.nlri)
            .map_err(|e| network_field("NLRI", e.0))?;
        decode_attributes(abytes, opts, &mut u)?;
        u.check_mandatory();
        u.check_next_hop();
        Ok(u)
    }

    /// RFC 4271 §6.3 and RFC 7606 §7.3: a NEXT_HOP that is not a unicast host address
    /// (0.0.0.0, multicast, broadcast) makes the IPv4 NLRI treat-as-withdraw. Checked
    /// only when there are IPv4 NLRI: an UPDATE carrying only MP_REACH_NLRI ignores
    /// NEXT_HOP (RFC 4760 §3), whatever some senders put there.
    fn check_next_hop(&mut self) {
        let Some(nh) = self.attributes.next_hop else {
            return;
        };
        if self.nlri.is_empty() || super::mp::valid_ipv4_next_hop(nh) {
            return;
        }
        self.errors.push(AttributeError {
            code: attr::NEXT_HOP,
            action: ErrorAction::TreatAsWithdraw,
            subcode: update_subcode::INVALID_NEXT_HOP,
            reason: format!("NEXT_HOP {nh} is not a unicast host address"),
            data: whole_attribute(attr_flags::TRANSITIVE, attr::NEXT_HOP, &nh.octets()),
        });
    }

    /// RFC 7606 §3(d): a missing well-known mandatory attribute is treat-as-withdraw.
    fn check_mandatory(&mut self) {
        let reach_v4 = !self.nlri.is_empty();
        let reach_mp = self.mp_reach.as_ref().is_some_and(|m| !m.nlri.is_empty());
        if !reach_v4 && !reach_mp {
            return;
        }
        let a = &self.attributes;
        let mut missing = Vec::new();
        if a.origin.is_none() {
            missing.push(attr::ORIGIN);
        }
        if a.as_path.is_none() {
            missing.push(attr::AS_PATH);
        }
        if reach_v4 && a.next_hop.is_none() {
            missing.push(attr::NEXT_HOP);
        }
        for code in missing {
            if self.errors.iter().any(|e| e.code == code) {
                continue;
            }
            self.errors.push(AttributeError {
                code,
                action: ErrorAction::TreatAsWithdraw,
                subcode: update_subcode::MISSING_WELL_KNOWN,
                reason: format!("well-known attribute {} is missing", attr_name(code)),
                data: Bytes::new(),
            });
        }
    }

    /// Encodes this UPDATE as one message. MP_REACH/MP_UNREACH go first (RFC 7606 §5.1).
    pub fn encode(&self, opts: &CodecOptions) -> Result<Bytes, super::EncodeError> {
        let mut out = BytesMut::with_capacity(256);
        super::begin_message(&mut out, super::iana::message_type::UPDATE);
        let v4_add_path = opts.add_path(Afi::Ipv4);
        let wpos = out.len();
        out.put_u16(0);
        self.withdrawn
            .iter()
            .for_each(|n| n.encode(&mut out, v4_add_path));
        super::patch_len(&mut out, wpos);
        let apos = out.len();
        out.put_u16(0);
        if let Some(m) = &self.mp_reach {
            let mut v = BytesMut::new();
            m.encode_value(&mut v, &m.nlri, opts.add_path(m.family.afi));
            put_attribute_header(&mut out, attr_flags::OPTIONAL, attr::MP_REACH_NLRI, v.len());
            out.put_slice(&v);
        }
        if let Some(m) = &self.mp_unreach {
            let mut v = BytesMut::new();
            m.encode_value(&mut v, &m.withdrawn, opts.add_path(m.family.afi));
            put_attribute_header(
                &mut out,
                attr_flags::OPTIONAL,
                attr::MP_UNREACH_NLRI,
                v.len(),
            );
            out.put_slice(&v);
        }
        self.attributes.encode(&mut out, opts.four_octet_as);
        super::patch_len(&mut out, apos);
        self.nlri
            .iter()
            .for_each(|n| n.encode(&mut out, v4_add_path));
        super::finish_message(out, opts.max_message_len(), "UPDATE")
    }
}

/// The attribute as it appeared on the wire, for NOTIFICATION data.
fn whole_attribute(flags: u8, code: u8, value: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(value.len() + 4);
    super::attribute::put_attribute(&mut b, flags, code, value);
    b.freeze()
}

/// Decodes the path attribute list into `u`, with RFC 7606's checks in their order:
/// header, length, duplicates, flags, value. Long on purpose: each check can end the
/// loop, skip the attribute or fail the whole message, and cut into functions that
/// control flow would go through return codes on the hottest path of route ingest.
fn decode_attributes(data: Bytes, opts: &CodecOptions, u: &mut Update) -> Result<(), DecodeError> {
    let mut r = Reader::new(data);
    let mut seen = [false; 256];
    let mut as4_path: Option<AsPath> = None;
    let mut as4_aggregator = None;
    while !r.is_empty() {
        let (Some(flags), Some(code)) = (r.u8(), r.u8()) else {
            u.errors.push(list_error("attribute header cut short"));
            break;
        };
        let len = if flags & attr_flags::EXTENDED_LENGTH != 0 {
            r.u16()
        } else {
            r.u8().map(u16::from)
        };
        // RFC 7606 §4: a length that overruns the attribute list is treat-as-withdraw;
        // the NLRI field can still be found from the Total Path Attribute Length.
        let Some(value) = len.and_then(|l| r.bytes(usize::from(l))) else {
            u.errors.push(list_error(&format!(
                "{} length overruns the attribute list",
                attr_name(code)
            )));
            break;
        };
        let slot = &mut seen[usize::from(code)];
        if *slot {
            if code == attr::MP_REACH_NLRI || code == attr::MP_UNREACH_NLRI {
                return Err(DecodeError::malformed_update(format!(
                    "{} appears twice",
                    attr_name(code)
                )));
            }
            u.errors.push(AttributeError {
                code,
                action: ErrorAction::AttributeDiscard,
                subcode: update_subcode::MALFORMED_ATTRIBUTE_LIST,
                reason: format!("{} appears twice; later copies discarded", attr_name(code)),
                data: whole_attribute(flags, code, &value),
            });
            continue;
        }
        *slot = true;

        let Some(want) = expected_flags(code) else {
            if flags & attr_flags::OPTIONAL == 0 {
                return Err(DecodeError::update(
                    update_subcode::UNRECOGNIZED_WELL_KNOWN,
                    whole_attribute(flags, code, &value),
                    format!("unrecognized well-known attribute {code}"),
                ));
            }
            u.attributes.unknown.push(RawAttribute {
                flags: flags & !attr_flags::EXTENDED_LENGTH,
                code,
                data: value,
            });
            continue;
        };
        let got = flags & (attr_flags::OPTIONAL | attr_flags::TRANSITIVE);
        let partial_ok = want == attr_flags::OPTIONAL | attr_flags::TRANSITIVE;
        let problem = if got != want || (!partial_ok && flags & attr_flags::PARTIAL != 0) {
            Some((
                update_subcode::ATTRIBUTE_FLAGS,
                format!("{} has flags 0x{flags:02x}", attr_name(code)),
            ))
        } else {
            None
        };
        let result = match problem {
            Some(p) => Err(p),
            None => match code {
                attr::MP_REACH_NLRI => {
                    match decode_reach(value.clone(), |afi| opts.add_path(afi)) {
                        Ok(p) => {
                            if let Some(e) = p.next_hop_error {
                                u.errors.push(AttributeError {
                                    code,
                                    action: ErrorAction::TreatAsWithdraw,
                                    subcode: update_subcode::OPTIONAL_ATTRIBUTE,
                                    reason: format!("MP_REACH_NLRI {}", e),
                                    data: whole_attribute(flags, code, &value),
                                });
                            }
                            u.mp_reach = Some(p.reach);
                            continue;
                        }
                        Err(e) => Err((update_subcode::OPTIONAL_ATTRIBUTE, e)),
                    }
                }
                attr::MP_UNREACH_NLRI => {
                    match decode_unreach(value.clone(), |afi| opts.add_path(afi)) {
                        Ok(m) => {
                            u.mp_unreach = Some(m);
                            continue;
                        }
                        Err(e) => Err((update_subcode::OPTIONAL_ATTRIBUTE, e)),
                    }
                }
                _ => parse_value(code, &value, opts.four_octet_as),
            },
        };
        match result {
            Ok(parsed) => apply(
                parsed,
                &mut u.attributes,
                &mut as4_path,
                &mut as4_aggregator,
            ),
            Err((subcode, reason)) => {
                let action = malformed_action(code);
                if action == ErrorAction::SessionReset {
                    return Err(DecodeError::update(
                        subcode,
                        whole_attribute(flags, code, &value),
                        reason,
                    ));
                }
                u.errors.push(AttributeError {
                    code,
                    action,
                    subcode,
                    reason,
                    data: whole_attribute(flags, code, &value),
                });
            }
        }
    }
    merge_as4(opts, u, as4_path, as4_aggregator);
    Ok(())
}

fn list_error(reason: &str) -> AttributeError {
    AttributeError {
        code: 0,
        action: ErrorAction::TreatAsWithdraw,
        subcode: update_subcode::MALFORMED_ATTRIBUTE_LIST,
        reason: reason.to_string(),
        data: Bytes::new(),
    }
}

fn apply(
    p: Parsed,
    a: &mut PathAttributes,
    as4_path: &mut Option<AsPath>,
    as4_aggregator: &mut Option<super::attribute::Aggregator>,
) {
    match p {
        Parsed::Origin(o) => a.origin = Some(o),
        Parsed::AsPath(p) => a.as_path = Some(p),
        Parsed::NextHop(n) => a.next_hop = Some(n),
        Parsed::Med(m) => a.med = Some(m),
        Parsed::LocalPref(l) => a.local_pref = Some(l),
        Parsed::AtomicAggregate => a.atomic_aggregate = true,
        Parsed::Aggregator(g) => a.aggregator = Some(g),
        Parsed::Communities(c) => a.communities = c,
        Parsed::OriginatorId(o) => a.originator_id = Some(o),
        Parsed::ClusterList(c) => a.cluster_list = c,
        Parsed::ExtendedCommunities(c) => a.extended_communities = c,
        Parsed::As4Path(p) => *as4_path = Some(p),
        Parsed::As4Aggregator(g) => *as4_aggregator = Some(g),
        Parsed::LargeCommunities(c) => a.large_communities = c,
    }
}

/// RFC 6793 §4.2.3 on a 2-octet session; on a 4-octet session AS4_* are ignored.
fn merge_as4(
    opts: &CodecOptions,
    u: &mut Update,
    as4_path: Option<AsPath>,
    as4_aggregator: Option<super::attribute::Aggregator>,
) {
    if opts.four_octet_as {
        return;
    }
    let a = &mut u.attributes;
    if let Some(agg) = a.aggregator {
        if agg.asn != u32::from(AS_TRANS) {
            // The aggregating speaker was 2-octet: AS4_PATH may be stale.
            return;
        }
        if let Some(agg4) = as4_aggregator {
            a.aggregator = Some(agg4);
        }
    }
    if let (Some(p), Some(p4)) = (&a.as_path, as4_path) {
        a.as_path = Some(AsPath::merge_as4(p, &p4));
    }
}
