//! `bgp::wire`: the BGP-4 codec — the only code in tern that knows byte layouts.
//!
//! Hand-written because the hot path needs what the crates on offer do not give
//! together: decoding straight from `bytes::Bytes` (attribute values and unknown data
//! are shared slices, prefixes land in one `Vec` per UPDATE), RFC 7606 error
//! classification returned as data the FSM acts on, and an encoder that packs many
//! prefixes sharing attributes into as few UPDATEs as the size limit allows
//! (netgauze-bgp-pkt copies into owned values and has no packing; zettabgp works on
//! slices without `bytes`).
//!
//! Entry points: [`frame_len`] finds a message in a byte stream, [`Message::decode`]
//! parses one, [`Message::encode`] writes one, [`pack`] builds UPDATE streams.
//! What a session negotiated (4-octet AS, ADD-PATH, extended messages) is passed in as
//! [`CodecOptions`]; the codec keeps no state.

pub mod aspath;
pub mod attribute;
pub mod capability;
pub mod error;
pub mod iana;
pub mod mp;
pub mod nlri;
pub mod notification;
pub mod open;
pub mod pack;
mod reader;
pub mod update;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

pub use aspath::{AsPath, AsSegment, SegmentType};
pub use attribute::{
    Aggregator, Community, ExtendedCommunity, LargeCommunity, Origin, PathAttributes, RawAttribute,
};
pub use capability::{
    AddPathFamily, Capability, ExtendedNextHopFamily, GracefulRestart, GracefulRestartFamily,
};
pub use error::{AttributeError, DecodeError, EncodeError, ErrorAction};
pub use iana::{Afi, Family, Safi};
pub use mp::{MpNextHop, MpReach, MpUnreach};
pub use nlri::Nlri;
pub use notification::Notification;
pub use open::Open;
pub use update::Update;

use iana::message_type as mt;
use notification::header_subcode;

/// Length of the message header: marker, length, type.
pub const HEADER_LEN: usize = 19;
/// Largest message without RFC 8654.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// Largest message with RFC 8654 extended messages.
pub const MAX_EXTENDED_MESSAGE_LEN: usize = 65535;

/// What the session negotiated that changes byte layouts. `Default` is plain RFC 4271:
/// 2-octet AS numbers, no ADD-PATH, 4096-byte messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodecOptions {
    /// Both sides sent the 4-octet AS capability.
    pub four_octet_as: bool,
    /// Both sides sent the extended message capability.
    pub extended_message: bool,
    /// IPv4 NLRI carry path identifiers (ADD-PATH, in this direction).
    pub add_path_ipv4: bool,
    /// IPv6 NLRI carry path identifiers (ADD-PATH, in this direction).
    pub add_path_ipv6: bool,
}

impl CodecOptions {
    /// 4-octet AS, no ADD-PATH, 4096-byte messages: what every modern peer negotiates.
    pub fn modern() -> CodecOptions {
        CodecOptions {
            four_octet_as: true,
            ..CodecOptions::default()
        }
    }

    /// The largest message allowed.
    pub fn max_message_len(&self) -> usize {
        if self.extended_message {
            MAX_EXTENDED_MESSAGE_LEN
        } else {
            MAX_MESSAGE_LEN
        }
    }

    /// Whether NLRI of `afi` carry path identifiers.
    pub fn add_path(&self, afi: Afi) -> bool {
        match afi {
            Afi::Ipv4 => self.add_path_ipv4,
            Afi::Ipv6 => self.add_path_ipv6,
            Afi::Other(_) => false,
        }
    }
}

/// ROUTE-REFRESH subtypes (RFC 7313).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefreshSubtype {
    /// A plain refresh request (0).
    Request,
    /// Beginning of RIB refresh (1).
    BeginningOfRibRefresh,
    /// End of RIB refresh (2).
    EndOfRibRefresh,
    /// Reserved values, kept.
    Other(u8),
}

/// A ROUTE-REFRESH message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct RouteRefresh {
    /// Family to refresh.
    pub family: Family,
    /// Subtype.
    pub subtype: RefreshSubtype,
}

/// One BGP message.
// Messages are transient (decoded, consumed, dropped); boxing the UPDATE would cost an
// allocation per UPDATE on the hot path to save stack space nobody holds on to.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING-KEBAB-CASE")]
pub enum Message {
    /// OPEN.
    Open(Open),
    /// UPDATE.
    Update(Update),
    /// NOTIFICATION.
    Notification(Notification),
    /// KEEPALIVE.
    Keepalive,
    /// ROUTE-REFRESH.
    RouteRefresh(RouteRefresh),
}

/// Looks at the start of a byte stream: `Ok(None)` if fewer than 19 bytes are there,
/// `Ok(Some(len))` with the length of the first message (which may not have fully
/// arrived yet), or the header error to send. `max_len` is the negotiated limit.
pub fn frame_len(buf: &[u8], max_len: usize) -> Result<Option<usize>, DecodeError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    if header[..16].iter().any(|&b| b != 0xff) {
        return Err(DecodeError::header(
            header_subcode::CONNECTION_NOT_SYNCHRONIZED,
            Bytes::new(),
            "marker is not all ones",
        ));
    }
    let len = usize::from(u16::from_be_bytes([header[16], header[17]]));
    let ty = header[18];
    let min = match ty {
        mt::OPEN => 29,
        mt::UPDATE => 23,
        mt::NOTIFICATION => 21,
        mt::KEEPALIVE => HEADER_LEN,
        mt::ROUTE_REFRESH => 23,
        _ => {
            return Err(DecodeError::header(
                header_subcode::BAD_MESSAGE_TYPE,
                Bytes::copy_from_slice(&[ty]),
                format!("message type {ty} is unknown"),
            ))
        }
    };
    // OPEN and KEEPALIVE never exceed 4096 (RFC 8654 §4), whatever was negotiated.
    let max = if ty == mt::OPEN || ty == mt::KEEPALIVE {
        MAX_MESSAGE_LEN
    } else {
        max_len
    };
    if len < min || len > max || (ty == mt::KEEPALIVE && len != HEADER_LEN) {
        return Err(DecodeError::header(
            header_subcode::BAD_MESSAGE_LENGTH,
            Bytes::copy_from_slice(&header[16..18]),
            format!("length {len} is invalid for message type {ty}"),
        ));
    }
    Ok(Some(len))
}

impl Message {
    /// Decodes one whole message (header included); `buf` must hold exactly it.
    pub fn decode(buf: Bytes, opts: &CodecOptions) -> Result<Message, DecodeError> {
        let len = frame_len(&buf, opts.max_message_len())?.ok_or_else(|| {
            DecodeError::header(
                header_subcode::BAD_MESSAGE_LENGTH,
                Bytes::new(),
                "message cut short",
            )
        })?;
        if len != buf.len() {
            return Err(DecodeError::header(
                header_subcode::BAD_MESSAGE_LENGTH,
                Bytes::copy_from_slice(buf.get(16..18).unwrap_or_default()),
                format!("header says {len} bytes, buffer holds {}", buf.len()),
            ));
        }
        let ty = buf.get(18).copied().unwrap_or_default();
        let body = buf.slice(HEADER_LEN..);
        Ok(match ty {
            mt::OPEN => Message::Open(Open::decode(body)?),
            mt::UPDATE => Message::Update(Update::decode(body, opts)?),
            mt::NOTIFICATION => {
                Message::Notification(Notification::decode(body).ok_or_else(|| {
                    DecodeError::header(header_subcode::BAD_MESSAGE_LENGTH, Bytes::new(), "short")
                })?)
            }
            mt::KEEPALIVE => Message::Keepalive,
            _ => {
                let b = body.as_ref();
                let (Some(afi), Some(sub), Some(safi)) = (b.get(..2), b.get(2), b.get(3)) else {
                    return Err(DecodeError::new(
                        notification::code::ROUTE_REFRESH_MESSAGE,
                        1,
                        buf.clone(),
                        "short",
                    ));
                };
                if b.len() != 4 {
                    return Err(DecodeError::new(
                        notification::code::ROUTE_REFRESH_MESSAGE,
                        1,
                        buf.clone(),
                        format!("ROUTE-REFRESH of {} bytes", buf.len()),
                    ));
                }
                let subtype = match sub {
                    0 => RefreshSubtype::Request,
                    1 => RefreshSubtype::BeginningOfRibRefresh,
                    2 => RefreshSubtype::EndOfRibRefresh,
                    s => RefreshSubtype::Other(*s),
                };
                Message::RouteRefresh(RouteRefresh {
                    family: Family::new(u16::from_be_bytes([afi[0], afi[1]]), *safi),
                    subtype,
                })
            }
        })
    }

    /// Encodes the message, failing if it would exceed the size limit.
    pub fn encode(&self, opts: &CodecOptions) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::with_capacity(64);
        let (ty, what) = match self {
            Message::Open(_) => (mt::OPEN, "OPEN"),
            Message::Update(u) => return u.encode(opts),
            Message::Notification(_) => (mt::NOTIFICATION, "NOTIFICATION"),
            Message::Keepalive => (mt::KEEPALIVE, "KEEPALIVE"),
            Message::RouteRefresh(_) => (mt::ROUTE_REFRESH, "ROUTE-REFRESH"),
        };
        begin_message(&mut out, ty);
        match self {
            Message::Open(o) => o.encode_body(&mut out),
            Message::Notification(n) => n.encode_body(&mut out),
            Message::RouteRefresh(r) => {
                out.put_u16(r.family.afi.code());
                out.put_u8(match r.subtype {
                    RefreshSubtype::Request => 0,
                    RefreshSubtype::BeginningOfRibRefresh => 1,
                    RefreshSubtype::EndOfRibRefresh => 2,
                    RefreshSubtype::Other(s) => s,
                });
                out.put_u8(r.family.safi.code());
            }
            Message::Keepalive | Message::Update(_) => {}
        }
        let max = if ty == mt::OPEN {
            MAX_MESSAGE_LEN
        } else {
            opts.max_message_len()
        };
        finish_message(out, max, what)
    }

    /// The message type name as RFCs spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Open(_) => "OPEN",
            Message::Update(_) => "UPDATE",
            Message::Notification(_) => "NOTIFICATION",
            Message::Keepalive => "KEEPALIVE",
            Message::RouteRefresh(_) => "ROUTE-REFRESH",
        }
    }
}

/// Writes a header with a zero length, to be fixed by [`finish_message`].
pub(crate) fn begin_message(out: &mut BytesMut, ty: u8) {
    out.put_slice(&[0xff; 16]);
    out.put_u16(0);
    out.put_u8(ty);
}

/// Writes the final length into the header, or fails if over `max`.
pub(crate) fn finish_message(
    mut out: BytesMut,
    max: usize,
    what: &'static str,
) -> Result<Bytes, EncodeError> {
    if out.len() > max {
        return Err(EncodeError::TooLong {
            what,
            len: out.len(),
            max,
        });
    }
    let len = out.len();
    patch_u16(&mut out, 16, len);
    Ok(out.freeze())
}

/// Overwrites two bytes at `at` with `v` (a length computed after the fact).
pub(crate) fn patch_u16(out: &mut BytesMut, at: usize, v: usize) {
    if let Some(s) = out.get_mut(at..at + 2) {
        s.copy_from_slice(&(v.min(usize::from(u16::MAX)) as u16).to_be_bytes());
    }
}

/// Fills the 2-byte length field at `at` with the number of bytes written after it.
pub(crate) fn patch_len(out: &mut BytesMut, at: usize) {
    let len = out.len().saturating_sub(at + 2);
    patch_u16(out, at, len);
}

/// Lower-case hex of a byte string.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn serde_hex<S: serde::Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(b))
}

pub(crate) fn serde_hex_opt<S: serde::Serializer>(
    b: &Option<Bytes>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match b {
        Some(b) => s.serialize_str(&hex(b)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests;
