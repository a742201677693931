//! NOTIFICATION messages: every error code and subcode with its RFC name, the RFC 9003
//! shutdown communication, and the RFC 8538 hard-reset wrapper.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

/// NOTIFICATION error codes.
pub mod code {
    /// Message Header Error (RFC 4271).
    pub const MESSAGE_HEADER: u8 = 1;
    /// OPEN Message Error (RFC 4271).
    pub const OPEN_MESSAGE: u8 = 2;
    /// UPDATE Message Error (RFC 4271).
    pub const UPDATE_MESSAGE: u8 = 3;
    /// Hold Timer Expired (RFC 4271).
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    /// Finite State Machine Error (RFC 4271, RFC 6608).
    pub const FSM: u8 = 5;
    /// Cease (RFC 4271, RFC 4486).
    pub const CEASE: u8 = 6;
    /// ROUTE-REFRESH Message Error (RFC 7313).
    pub const ROUTE_REFRESH_MESSAGE: u8 = 7;
    /// Send Hold Timer Expired (RFC 9687 / draft send-hold-timer).
    pub const SEND_HOLD_TIMER_EXPIRED: u8 = 8;
}

/// Message Header Error subcodes.
pub mod header_subcode {
    /// Connection Not Synchronized.
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    /// Bad Message Length.
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    /// Bad Message Type.
    pub const BAD_MESSAGE_TYPE: u8 = 3;
}

/// OPEN Message Error subcodes.
pub mod open_subcode {
    /// Unsupported Version Number.
    pub const UNSUPPORTED_VERSION: u8 = 1;
    /// Bad Peer AS.
    pub const BAD_PEER_AS: u8 = 2;
    /// Bad BGP Identifier.
    pub const BAD_BGP_IDENTIFIER: u8 = 3;
    /// Unsupported Optional Parameter.
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    /// Unacceptable Hold Time.
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    /// Unsupported Capability (RFC 5492).
    pub const UNSUPPORTED_CAPABILITY: u8 = 7;
    /// Role Mismatch (RFC 9234).
    pub const ROLE_MISMATCH: u8 = 11;
}

/// UPDATE Message Error subcodes.
pub mod update_subcode {
    /// Malformed Attribute List.
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    /// Unrecognized Well-known Attribute.
    pub const UNRECOGNIZED_WELL_KNOWN: u8 = 2;
    /// Missing Well-known Attribute.
    pub const MISSING_WELL_KNOWN: u8 = 3;
    /// Attribute Flags Error.
    pub const ATTRIBUTE_FLAGS: u8 = 4;
    /// Attribute Length Error.
    pub const ATTRIBUTE_LENGTH: u8 = 5;
    /// Invalid ORIGIN Attribute.
    pub const INVALID_ORIGIN: u8 = 6;
    /// Invalid NEXT_HOP Attribute.
    pub const INVALID_NEXT_HOP: u8 = 8;
    /// Optional Attribute Error.
    pub const OPTIONAL_ATTRIBUTE: u8 = 9;
    /// Invalid Network Field.
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    /// Malformed AS_PATH.
    pub const MALFORMED_AS_PATH: u8 = 11;
}

/// Cease subcodes (RFC 4486, RFC 8538, RFC 9384).
pub mod cease_subcode {
    /// Maximum Number of Prefixes Reached.
    pub const MAX_PREFIXES: u8 = 1;
    /// Administrative Shutdown (may carry an RFC 9003 message).
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    /// Peer De-configured.
    pub const PEER_DECONFIGURED: u8 = 3;
    /// Administrative Reset (may carry an RFC 9003 message).
    pub const ADMINISTRATIVE_RESET: u8 = 4;
    /// Connection Rejected.
    pub const CONNECTION_REJECTED: u8 = 5;
    /// Other Configuration Change.
    pub const OTHER_CONFIGURATION_CHANGE: u8 = 6;
    /// Connection Collision Resolution.
    pub const CONNECTION_COLLISION_RESOLUTION: u8 = 7;
    /// Out of Resources.
    pub const OUT_OF_RESOURCES: u8 = 8;
    /// Hard Reset (RFC 8538).
    pub const HARD_RESET: u8 = 9;
    /// BFD Down (RFC 9384).
    pub const BFD_DOWN: u8 = 10;
}

/// Longest RFC 9003 shutdown communication, in bytes of UTF-8.
pub const MAX_SHUTDOWN_MESSAGE: usize = 255;

/// A NOTIFICATION message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Notification {
    /// Error code.
    pub code: u8,
    /// Error subcode.
    pub subcode: u8,
    /// Data (meaning depends on code and subcode).
    #[serde(serialize_with = "super::serde_hex")]
    pub data: Bytes,
}

impl Notification {
    /// A Cease / Administrative Shutdown carrying an RFC 9003 message, cut at a UTF-8
    /// character boundary so it fits 255 bytes.
    pub fn shutdown(message: &str) -> Notification {
        Notification::cease_with_message(cease_subcode::ADMINISTRATIVE_SHUTDOWN, message)
    }

    /// Cease / Maximum Number of Prefixes Reached with the data RFC 4486 §4 suggests:
    /// the family and the limit that was passed.
    pub fn max_prefixes(family: crate::wire::Family, limit: u32) -> Notification {
        let mut data = BytesMut::with_capacity(7);
        data.put_u16(family.afi.code());
        data.put_u8(family.safi.code());
        data.put_u32(limit);
        Notification {
            code: code::CEASE,
            subcode: cease_subcode::MAX_PREFIXES,
            data: data.freeze(),
        }
    }

    /// The family and limit of a Cease / Maximum Number of Prefixes Reached that
    /// carries them (RFC 4486 §4).
    pub fn prefix_limit(&self) -> Option<(crate::wire::Family, u32)> {
        if self.code != code::CEASE || self.subcode != cease_subcode::MAX_PREFIXES {
            return None;
        }
        let d: &[u8; 7] = self.data.as_ref().try_into().ok()?;
        let family = crate::wire::Family {
            afi: u16::from_be_bytes([d[0], d[1]]).into(),
            safi: d[2].into(),
        };
        Some((family, u32::from_be_bytes([d[3], d[4], d[5], d[6]])))
    }

    /// A Cease with subcode 2 or 4 and an RFC 9003 message.
    pub fn cease_with_message(subcode: u8, message: &str) -> Notification {
        let mut end = message.len().min(MAX_SHUTDOWN_MESSAGE);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let text = message.get(..end).unwrap_or_default();
        let mut data = BytesMut::with_capacity(1 + text.len());
        data.put_u8(text.len() as u8);
        data.put_slice(text.as_bytes());
        Notification {
            code: code::CEASE,
            subcode,
            data: data.freeze(),
        }
    }

    /// The RFC 9003 shutdown communication, if this is a Cease 2/4 that carries a
    /// well-formed one. A malformed one yields `None` (the data stays available raw).
    pub fn shutdown_message(&self) -> Option<&str> {
        if self.code != code::CEASE
            || !matches!(
                self.subcode,
                cease_subcode::ADMINISTRATIVE_SHUTDOWN | cease_subcode::ADMINISTRATIVE_RESET
            )
        {
            return None;
        }
        let (len, rest) = self.data.split_first()?;
        let text = rest.get(..usize::from(*len))?;
        std::str::from_utf8(text).ok()
    }

    /// For an RFC 8538 Hard Reset, the NOTIFICATION it wraps.
    pub fn hard_reset_cause(&self) -> Option<Notification> {
        if self.code != code::CEASE || self.subcode != cease_subcode::HARD_RESET {
            return None;
        }
        let code = *self.data.first()?;
        let subcode = *self.data.get(1)?;
        Some(Notification {
            code,
            subcode,
            data: self.data.slice(2..),
        })
    }

    /// For an OPEN Message Error / Unsupported Capability, the capability codes its
    /// data names (RFC 5492 §3: a list of capabilities, each code, length, value); a
    /// list cut short yields the codes read so far.
    pub fn capability_codes(&self) -> Vec<u8> {
        let mut codes = Vec::new();
        if self.code != code::OPEN_MESSAGE || self.subcode != open_subcode::UNSUPPORTED_CAPABILITY {
            return codes;
        }
        let mut rest: &[u8] = &self.data;
        while let [c, len, tail @ ..] = rest {
            codes.push(*c);
            rest = tail.get(usize::from(*len)..).unwrap_or_default();
        }
        codes
    }

    /// For an OPEN Message Error / Unsupported Version Number, the largest version
    /// the sender supports (RFC 4271 §6.2: a 2-octet number).
    pub fn supported_version(&self) -> Option<u8> {
        if self.code != code::OPEN_MESSAGE || self.subcode != open_subcode::UNSUPPORTED_VERSION {
            return None;
        }
        match self.data.as_ref() {
            [hi, lo] => u8::try_from(u16::from_be_bytes([*hi, *lo])).ok(),
            _ => None,
        }
    }

    /// The RFC name of the error code.
    pub fn code_name(&self) -> &'static str {
        code_name(self.code)
    }

    /// The RFC name of the subcode.
    pub fn subcode_name(&self) -> &'static str {
        subcode_name(self.code, self.subcode)
    }

    pub(crate) fn decode(body: Bytes) -> Option<Notification> {
        let code = *body.first()?;
        let subcode = *body.get(1)?;
        Some(Notification {
            code,
            subcode,
            data: body.slice(2..),
        })
    }

    pub(crate) fn encode_body(&self, out: &mut BytesMut) {
        out.put_u8(self.code);
        out.put_u8(self.subcode);
        out.put_slice(&self.data);
    }
}

impl std::fmt::Display for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {}", self.code_name(), self.subcode_name())?;
        if let Some(m) = self.shutdown_message() {
            write!(f, ": \"{m}\"")?;
        } else if let Some(inner) = self.hard_reset_cause() {
            write!(f, " ({inner})")?;
        } else if let Some((family, limit)) = self.prefix_limit() {
            write!(f, " ({family}, limit {limit})")?;
        }
        Ok(())
    }
}

/// The RFC name of a NOTIFICATION error code.
pub fn code_name(c: u8) -> &'static str {
    match c {
        code::MESSAGE_HEADER => "Message Header Error",
        code::OPEN_MESSAGE => "OPEN Message Error",
        code::UPDATE_MESSAGE => "UPDATE Message Error",
        code::HOLD_TIMER_EXPIRED => "Hold Timer Expired",
        code::FSM => "Finite State Machine Error",
        code::CEASE => "Cease",
        code::ROUTE_REFRESH_MESSAGE => "ROUTE-REFRESH Message Error",
        code::SEND_HOLD_TIMER_EXPIRED => "Send Hold Timer Expired",
        _ => "Unknown error code",
    }
}

/// The RFC name of a NOTIFICATION subcode under `code`.
pub fn subcode_name(c: u8, s: u8) -> &'static str {
    match (c, s) {
        (_, 0) => "Unspecific",
        (code::MESSAGE_HEADER, 1) => "Connection Not Synchronized",
        (code::MESSAGE_HEADER, 2) => "Bad Message Length",
        (code::MESSAGE_HEADER, 3) => "Bad Message Type",
        (code::OPEN_MESSAGE, 1) => "Unsupported Version Number",
        (code::OPEN_MESSAGE, 2) => "Bad Peer AS",
        (code::OPEN_MESSAGE, 3) => "Bad BGP Identifier",
        (code::OPEN_MESSAGE, 4) => "Unsupported Optional Parameter",
        (code::OPEN_MESSAGE, 5) => "Authentication Failure (deprecated)",
        (code::OPEN_MESSAGE, 6) => "Unacceptable Hold Time",
        (code::OPEN_MESSAGE, 7) => "Unsupported Capability",
        (code::OPEN_MESSAGE, 8..=10) => "Deprecated",
        (code::OPEN_MESSAGE, 11) => "Role Mismatch",
        (code::UPDATE_MESSAGE, 1) => "Malformed Attribute List",
        (code::UPDATE_MESSAGE, 2) => "Unrecognized Well-known Attribute",
        (code::UPDATE_MESSAGE, 3) => "Missing Well-known Attribute",
        (code::UPDATE_MESSAGE, 4) => "Attribute Flags Error",
        (code::UPDATE_MESSAGE, 5) => "Attribute Length Error",
        (code::UPDATE_MESSAGE, 6) => "Invalid ORIGIN Attribute",
        (code::UPDATE_MESSAGE, 7) => "AS Routing Loop (deprecated)",
        (code::UPDATE_MESSAGE, 8) => "Invalid NEXT_HOP Attribute",
        (code::UPDATE_MESSAGE, 9) => "Optional Attribute Error",
        (code::UPDATE_MESSAGE, 10) => "Invalid Network Field",
        (code::UPDATE_MESSAGE, 11) => "Malformed AS_PATH",
        (code::FSM, 1) => "Receive Unexpected Message in OpenSent State",
        (code::FSM, 2) => "Receive Unexpected Message in OpenConfirm State",
        (code::FSM, 3) => "Receive Unexpected Message in Established State",
        (code::CEASE, 1) => "Maximum Number of Prefixes Reached",
        (code::CEASE, 2) => "Administrative Shutdown",
        (code::CEASE, 3) => "Peer De-configured",
        (code::CEASE, 4) => "Administrative Reset",
        (code::CEASE, 5) => "Connection Rejected",
        (code::CEASE, 6) => "Other Configuration Change",
        (code::CEASE, 7) => "Connection Collision Resolution",
        (code::CEASE, 8) => "Out of Resources",
        (code::CEASE, 9) => "Hard Reset",
        (code::CEASE, 10) => "BFD Down",
        (code::ROUTE_REFRESH_MESSAGE, 1) => "Invalid Message Length",
        _ => "Unknown subcode",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_limit_carries_family_and_limit_and_prints_them() {
        let n = Notification::max_prefixes(crate::wire::Family::IPV6_UNICAST, 1000);
        assert_eq!(n.data.as_ref(), &[0, 2, 1, 0, 0, 0x03, 0xe8]);
        assert_eq!(
            n.prefix_limit(),
            Some((crate::wire::Family::IPV6_UNICAST, 1000))
        );
        assert_eq!(
            n.to_string(),
            "Cease / Maximum Number of Prefixes Reached (ipv6-unicast, limit 1000)"
        );
        // Without the optional data (RFC 4486 says MAY) it still prints plainly.
        let bare = Notification {
            data: Bytes::new(),
            ..n
        };
        assert_eq!(bare.prefix_limit(), None);
        assert_eq!(
            bare.to_string(),
            "Cease / Maximum Number of Prefixes Reached"
        );
    }

    #[test]
    fn shutdown_message_round_trips_and_is_cut_on_a_char_boundary() {
        let n = Notification::shutdown("maintenance window");
        assert_eq!(n.shutdown_message(), Some("maintenance window"));
        assert_eq!(
            n.to_string(),
            "Cease / Administrative Shutdown: \"maintenance window\""
        );
        let long = "é".repeat(200); // 400 bytes
        let n = Notification::shutdown(&long);
        let m = n.shutdown_message().unwrap_or_default();
        assert_eq!(m.len(), 254);
        assert!(m.chars().all(|c| c == 'é'));
    }

    #[test]
    fn malformed_shutdown_text_is_not_trusted() {
        let n = Notification {
            code: 6,
            subcode: 2,
            data: Bytes::from_static(&[10, b'a']),
        };
        assert_eq!(n.shutdown_message(), None);
        let n = Notification {
            code: 6,
            subcode: 2,
            data: Bytes::from_static(&[2, 0xff, 0xfe]),
        };
        assert_eq!(n.shutdown_message(), None);
    }

    #[test]
    fn every_defined_code_has_a_name() {
        for c in 1..=8 {
            assert_ne!(code_name(c), "Unknown error code");
        }
        for s in 1..=11 {
            assert_ne!(subcode_name(code::UPDATE_MESSAGE, s), "Unknown subcode");
            assert_ne!(subcode_name(code::OPEN_MESSAGE, s), "Unknown subcode");
        }
        for s in 1..=10 {
            assert_ne!(subcode_name(code::CEASE, s), "Unknown subcode");
        }
    }

    #[test]
    fn unsupported_capability_and_version_data_are_decoded() {
        let n = Notification {
            code: code::OPEN_MESSAGE,
            subcode: open_subcode::UNSUPPORTED_CAPABILITY,
            // multiprotocol ipv6 unicast, then a cut-short graceful restart.
            data: Bytes::from_static(&[1, 4, 0, 2, 0, 1, 64, 6, 0]),
        };
        assert_eq!(n.capability_codes(), vec![1, 64]);
        let n = Notification {
            code: code::OPEN_MESSAGE,
            subcode: open_subcode::UNSUPPORTED_VERSION,
            data: Bytes::from_static(&[0, 4]),
        };
        assert_eq!(n.supported_version(), Some(4));
        assert!(n.capability_codes().is_empty());
        let short = Notification {
            data: Bytes::from_static(&[4]),
            ..n
        };
        assert_eq!(short.supported_version(), None);
    }

    #[test]
    fn hard_reset_unwraps_its_cause() {
        let n = Notification {
            code: 6,
            subcode: 9,
            data: Bytes::from_static(&[4, 0]),
        };
        assert_eq!(
            n.hard_reset_cause().map(|i| i.code),
            Some(code::HOLD_TIMER_EXPIRED)
        );
        assert_eq!(
            n.to_string(),
            "Cease / Hard Reset (Hold Timer Expired / Unspecific)"
        );
    }
}
