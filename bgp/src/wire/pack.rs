//! Building UPDATE streams: many prefixes that share attributes go out in as few
//! UPDATEs as the message size allows. The attributes are encoded once per call, not
//! once per message or per prefix.

use bytes::{BufMut, Bytes, BytesMut};

use super::attribute::{put_attribute_header, PathAttributes};
use super::error::EncodeError;
use super::iana::{attr, attr_flags, message_type, Family};
use super::mp::{MpNextHop, MpReach, MpUnreach};
use super::nlri::Nlri;
use super::{begin_message, finish_message, patch_len, CodecOptions, HEADER_LEN};

/// Where the announced prefixes' next hop goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextHop {
    /// IPv4 unicast with an IPv4 next hop: the NEXT_HOP attribute and the classic NLRI
    /// field (the attributes must carry `next_hop`).
    Classic,
    /// MP_REACH_NLRI with this next hop (IPv6; IPv4 over an IPv6 next hop, RFC 8950).
    Mp(MpNextHop),
}

/// Encodes announcements of `nlri` (all of `family`) with `attrs` into UPDATEs, each as
/// full as the size limit allows, appending them to `out`.
pub fn announcements(
    attrs: &PathAttributes,
    family: Family,
    next_hop: &NextHop,
    nlri: &[Nlri],
    opts: &CodecOptions,
    out: &mut Vec<Bytes>,
) -> Result<(), EncodeError> {
    let max = opts.max_message_len();
    let add_path = opts.add_path(family.afi);
    match next_hop {
        NextHop::Classic => {
            if family != Family::IPV4_UNICAST || attrs.next_hop.is_none() {
                return Err(EncodeError::Invalid(format!(
                    "classic encoding needs IPv4 unicast with a NEXT_HOP, got {family}"
                )));
            }
            let mut ab = BytesMut::with_capacity(128);
            attrs.encode(&mut ab, opts.four_octet_as);
            let fixed = HEADER_LEN + 4 + ab.len();
            let mut rest = nlri;
            while !rest.is_empty() {
                let mut m = BytesMut::with_capacity(capacity(fixed, rest, add_path, max));
                begin_message(&mut m, message_type::UPDATE);
                m.put_u16(0);
                m.put_u16(ab.len() as u16);
                m.put_slice(&ab);
                let n = fill(&mut m, rest, add_path, max, fixed, "UPDATE attributes")?;
                rest = rest.get(n..).unwrap_or_default();
                out.push(finish_message(m, max, "UPDATE")?);
            }
        }
        NextHop::Mp(nh) => {
            let attrs = PathAttributes {
                next_hop: None,
                ..attrs.clone()
            };
            let mut ab = BytesMut::with_capacity(128);
            attrs.encode(&mut ab, opts.four_octet_as);
            let reach = MpReach {
                family,
                next_hop: nh.clone(),
                nlri: Vec::new(),
                unparsed: None,
            };
            // MP_REACH_NLRI always with a 2-byte length so it can grow as prefixes are added.
            let fixed = HEADER_LEN + 4 + 4 + reach.header_len() + ab.len();
            let mut rest = nlri;
            while !rest.is_empty() {
                let mut m = BytesMut::with_capacity(capacity(fixed, rest, add_path, max));
                begin_message(&mut m, message_type::UPDATE);
                m.put_u16(0);
                let apos = m.len();
                m.put_u16(0);
                m.put_u8(attr_flags::OPTIONAL | attr_flags::EXTENDED_LENGTH);
                m.put_u8(attr::MP_REACH_NLRI);
                let lpos = m.len();
                m.put_u16(0);
                reach.encode_value(&mut m, &[], add_path);
                let n = fill(
                    &mut m,
                    rest,
                    add_path,
                    max - ab.len(),
                    fixed,
                    "MP_REACH_NLRI and attributes",
                )?;
                rest = rest.get(n..).unwrap_or_default();
                patch_len(&mut m, lpos);
                m.put_slice(&ab);
                patch_len(&mut m, apos);
                out.push(finish_message(m, max, "UPDATE")?);
            }
        }
    }
    Ok(())
}

/// Encodes withdrawals of `nlri` (all of `family`) into as few UPDATEs as fit: the
/// classic withdrawn routes field for IPv4 unicast, MP_UNREACH_NLRI otherwise.
pub fn withdrawals(
    family: Family,
    nlri: &[Nlri],
    opts: &CodecOptions,
    out: &mut Vec<Bytes>,
) -> Result<(), EncodeError> {
    let max = opts.max_message_len();
    let add_path = opts.add_path(family.afi);
    let mut rest = nlri;
    while !rest.is_empty() {
        let mut m = BytesMut::with_capacity(capacity(HEADER_LEN + 11, rest, add_path, max));
        begin_message(&mut m, message_type::UPDATE);
        if family == Family::IPV4_UNICAST {
            m.put_u16(0);
            let n = fill(
                &mut m,
                rest,
                add_path,
                max - 2,
                HEADER_LEN + 4,
                "withdrawal",
            )?;
            rest = rest.get(n..).unwrap_or_default();
            patch_len(&mut m, HEADER_LEN);
            m.put_u16(0);
        } else {
            m.put_u16(0);
            let apos = m.len();
            m.put_u16(0);
            put_attribute_header(&mut m, attr_flags::OPTIONAL, attr::MP_UNREACH_NLRI, 256);
            let lpos = m.len() - 2;
            MpUnreach {
                family,
                withdrawn: Vec::new(),
                unparsed: None,
            }
            .encode_value(&mut m, &[], add_path);
            let n = fill(
                &mut m,
                rest,
                add_path,
                max,
                HEADER_LEN + 4 + 4 + 3,
                "withdrawal",
            )?;
            rest = rest.get(n..).unwrap_or_default();
            patch_len(&mut m, lpos);
            patch_len(&mut m, apos);
        }
        out.push(finish_message(m, max, "UPDATE")?);
    }
    Ok(())
}

/// Bytes to reserve for a message: what the remaining prefixes need, up to the limit,
/// so a one-prefix UPDATE does not reserve 4 KiB.
fn capacity(fixed: usize, nlri: &[Nlri], add_path: bool, max: usize) -> usize {
    let mut need = fixed;
    for p in nlri {
        if need >= max {
            break;
        }
        need += p.encoded_len(add_path);
    }
    need.min(max)
}

/// Appends prefixes while they fit under `limit`; returns how many. Fails if not even
/// one fits after `fixed` bytes of overhead.
fn fill(
    m: &mut BytesMut,
    nlri: &[Nlri],
    add_path: bool,
    limit: usize,
    fixed: usize,
    what: &'static str,
) -> Result<usize, EncodeError> {
    let mut n = 0;
    for p in nlri {
        if m.len() + p.encoded_len(add_path) > limit {
            break;
        }
        p.encode(m, add_path);
        n += 1;
    }
    if n == 0 {
        let need = fixed + nlri.first().map_or(0, |p| p.encoded_len(add_path));
        return Err(EncodeError::TooLong {
            what,
            len: need,
            max: limit,
        });
    }
    Ok(n)
}
