//! OPEN messages (RFC 4271 §4.2) with capability optional parameters (RFC 5492) and the
//! RFC 9072 extended optional parameters length.

use std::net::Ipv4Addr;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::capability::Capability;
use super::error::DecodeError;
use super::iana::AS_TRANS;
use super::notification::{code, open_subcode};
use super::reader::Reader;

/// Optional parameter type of capabilities (RFC 5492).
const PARAM_CAPABILITIES: u8 = 2;

/// An OPEN message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Open {
    /// Protocol version (4).
    pub version: u8,
    /// The 2-octet "My Autonomous System" field (AS_TRANS for 4-octet ASes).
    pub my_as: u16,
    /// Proposed hold time in seconds (0 or at least 3).
    pub hold_time: u16,
    /// BGP identifier.
    pub bgp_id: Ipv4Addr,
    /// Capabilities, in the order received.
    pub capabilities: Vec<Capability>,
}

/// The version and hold time an OPEN message (header included) offers, read without
/// checking anything else: what a refused OPEN carried, for diagnostics.
pub fn offered(msg: &[u8]) -> Option<(u8, u16)> {
    let body = msg.get(super::HEADER_LEN..)?;
    let version = *body.first()?;
    let hold = u16::from_be_bytes([*body.get(3)?, *body.get(4)?]);
    Some((version, hold))
}

impl Open {
    /// An OPEN for `asn`: a 4-octet AS travels in the 4-octet AS capability, which is
    /// always included, with AS_TRANS in the 2-octet field if it does not fit.
    pub fn new(
        asn: u32,
        hold_time: u16,
        bgp_id: Ipv4Addr,
        mut capabilities: Vec<Capability>,
    ) -> Open {
        if !capabilities
            .iter()
            .any(|c| matches!(c, Capability::FourOctetAs(_)))
        {
            capabilities.push(Capability::FourOctetAs(asn));
        }
        Open {
            version: 4,
            my_as: u16::try_from(asn).unwrap_or(AS_TRANS),
            hold_time,
            bgp_id,
            capabilities,
        }
    }

    /// The sender's AS: from the 4-octet AS capability when present.
    pub fn asn(&self) -> u32 {
        self.capabilities
            .iter()
            .find_map(|c| match c {
                Capability::FourOctetAs(a) => Some(*a),
                _ => None,
            })
            .unwrap_or(u32::from(self.my_as))
    }

    /// Whether the sender advertised the 4-octet AS capability.
    pub fn four_octet_as(&self) -> bool {
        self.capabilities
            .iter()
            .any(|c| matches!(c, Capability::FourOctetAs(_)))
    }

    /// Decodes an OPEN body. Checks what RFC 4271/6286 make unconditional: version 4,
    /// hold time not 1 or 2, a non-zero BGP identifier, well-formed parameters. One
    /// function over 100 lines on purpose: it reads the fields in wire order, each
    /// check beside the field it guards.
    pub fn decode(body: Bytes) -> Result<Open, DecodeError> {
        let open_err = |sub: u8, data: Bytes, reason: String| {
            DecodeError::new(code::OPEN_MESSAGE, sub, data, reason)
        };
        let mut r = Reader::new(body);
        let (Some(version), Some(my_as), Some(hold_time), Some(id), Some(plen)) =
            (r.u8(), r.u16(), r.u16(), r.u32(), r.u8())
        else {
            return Err(DecodeError::header(
                2,
                Bytes::new(),
                "OPEN shorter than 29 bytes",
            ));
        };
        if version != 4 {
            return Err(open_err(
                open_subcode::UNSUPPORTED_VERSION,
                Bytes::from_static(&[0, 4]),
                format!("BGP version {version} is not supported (4 is)"),
            ));
        }
        if hold_time == 1 || hold_time == 2 {
            return Err(open_err(
                open_subcode::UNACCEPTABLE_HOLD_TIME,
                Bytes::new(),
                format!("hold time {hold_time}s is not allowed (0 or at least 3)"),
            ));
        }
        if id == 0 {
            return Err(open_err(
                open_subcode::BAD_BGP_IDENTIFIER,
                Bytes::new(),
                "BGP identifier is 0".into(),
            ));
        }
        // RFC 9072: 255 in the length, then 255 as a parameter type, then a 2-byte length,
        // and each parameter's length becomes 2 bytes as well.
        let mut rest = r.rest();
        let extended = plen == 255 && rest.first() == Some(&255);
        let params_len = if extended {
            let mut er = Reader::new(rest.clone());
            let (_, Some(l)) = (er.u8(), er.u16()) else {
                return Err(open_err(
                    0,
                    Bytes::new(),
                    "extended optional parameters length cut short".into(),
                ));
            };
            rest = er.rest();
            usize::from(l)
        } else {
            usize::from(plen)
        };
        if rest.len() != params_len {
            return Err(open_err(
                0,
                Bytes::new(),
                format!(
                    "optional parameters length {params_len} but {} bytes follow",
                    rest.len()
                ),
            ));
        }
        let mut pr = Reader::new(rest);
        let mut capabilities = Vec::new();
        while !pr.is_empty() {
            let ptype = pr.u8();
            let plen = if extended {
                pr.u16()
            } else {
                pr.u8().map(u16::from)
            };
            let (Some(ptype), Some(value)) = (ptype, plen.and_then(|l| pr.bytes(usize::from(l))))
            else {
                return Err(open_err(
                    0,
                    Bytes::new(),
                    "optional parameter overruns the OPEN".into(),
                ));
            };
            if ptype != PARAM_CAPABILITIES {
                return Err(open_err(
                    open_subcode::UNSUPPORTED_OPTIONAL_PARAMETER,
                    Bytes::new(),
                    format!("optional parameter type {ptype} is not supported"),
                ));
            }
            let mut cr = Reader::new(value);
            while !cr.is_empty() {
                let (Some(ccode), Some(clen)) = (cr.u8(), cr.u8()) else {
                    return Err(open_err(
                        0,
                        Bytes::new(),
                        "capability header cut short".into(),
                    ));
                };
                let Some(cval) = cr.bytes(usize::from(clen)) else {
                    return Err(open_err(
                        0,
                        Bytes::new(),
                        format!("capability {ccode} overruns its parameter"),
                    ));
                };
                capabilities.push(
                    Capability::decode(ccode, cval).map_err(|e| open_err(0, Bytes::new(), e))?,
                );
            }
        }
        Ok(Open {
            version,
            my_as,
            hold_time,
            bgp_id: Ipv4Addr::from(id),
            capabilities,
        })
    }

    /// Appends the OPEN body. All capabilities go in one parameter; RFC 9072's extended
    /// form is used only when they do not fit 255 bytes.
    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u8(self.version);
        out.put_u16(self.my_as);
        out.put_u16(self.hold_time);
        out.put_slice(&self.bgp_id.octets());
        let mut caps = BytesMut::new();
        for c in &self.capabilities {
            c.encode(&mut caps);
        }
        if caps.is_empty() {
            out.put_u8(0);
        } else if caps.len() + 2 <= 255 {
            out.put_u8(caps.len() as u8 + 2);
            out.put_u8(PARAM_CAPABILITIES);
            out.put_u8(caps.len() as u8);
            out.put_slice(&caps);
        } else {
            out.put_u8(255);
            out.put_u8(255);
            out.put_u16((caps.len() + 3) as u16);
            out.put_u8(PARAM_CAPABILITIES);
            out.put_u16(caps.len() as u16);
            out.put_slice(&caps);
        }
    }
}
