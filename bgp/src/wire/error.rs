//! Decode errors, classified the way RFC 7606 asks a speaker to act on them.
//!
//! A problem in a received message is either fatal for the session (the FSM sends the
//! NOTIFICATION carried here and closes), or local to one UPDATE: treat-as-withdraw
//! (the UPDATE's prefixes are withdrawn instead of announced) or attribute discard (the
//! attribute is dropped and the UPDATE is used). The codec only classifies; the FSM acts.

use bytes::Bytes;
use serde::Serialize;

use super::notification::{code, update_subcode, Notification};

/// What RFC 7606 tells the receiver to do about a malformed UPDATE part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorAction {
    /// Drop the attribute and use the rest of the UPDATE (RFC 7606 §2).
    AttributeDiscard,
    /// Withdraw every prefix the UPDATE carries (RFC 7606 §2).
    TreatAsWithdraw,
    /// Send a NOTIFICATION and close the session.
    SessionReset,
}

/// One malformed attribute found in an UPDATE that did not need a session reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttributeError {
    /// Attribute type code.
    pub code: u8,
    /// What to do about it.
    pub action: ErrorAction,
    /// The UPDATE Message Error subcode a session reset would have used.
    pub subcode: u8,
    /// What is wrong, for logs.
    pub reason: String,
    /// The offending attribute as it was on the wire (flags, type, length, value),
    /// for the log; empty when the problem is an absence or the list as a whole.
    #[serde(serialize_with = "super::serde_hex")]
    pub data: Bytes,
}

impl std::fmt::Display for AttributeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let action = match self.action {
            ErrorAction::TreatAsWithdraw => "treat-as-withdraw",
            ErrorAction::AttributeDiscard => "attribute discarded",
            ErrorAction::SessionReset => "session reset",
        };
        write!(f, "{} (RFC 7606 {action})", self.reason)?;
        if !self.data.is_empty() {
            // At most 64 bytes: enough to identify it; a huge attribute is not echoed.
            let shown = self.data.get(..64).unwrap_or(&self.data);
            let hex: Vec<String> = shown.iter().map(|b| format!("{b:02x}")).collect();
            let more = if self.data.len() > 64 { " …" } else { "" };
            write!(f, "; bytes: {}{more}", hex.join(" "))?;
        }
        Ok(())
    }
}

/// A message that cannot be used at all: the session must be reset with
/// [`DecodeError::notification`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (NOTIFICATION {code}/{subcode})")]
pub struct DecodeError {
    /// NOTIFICATION error code to send.
    pub code: u8,
    /// NOTIFICATION error subcode to send.
    pub subcode: u8,
    /// NOTIFICATION data: the offending bytes where the RFC asks for them.
    pub data: Bytes,
    /// What is wrong, for logs.
    pub reason: String,
}

impl DecodeError {
    /// Builds an error with its NOTIFICATION fields.
    pub fn new(
        code: u8,
        subcode: u8,
        data: impl Into<Bytes>,
        reason: impl Into<String>,
    ) -> DecodeError {
        DecodeError {
            code,
            subcode,
            data: data.into(),
            reason: reason.into(),
        }
    }

    /// A Message Header Error (code 1).
    pub(crate) fn header(
        subcode: u8,
        data: impl Into<Bytes>,
        reason: impl Into<String>,
    ) -> DecodeError {
        DecodeError::new(code::MESSAGE_HEADER, subcode, data, reason)
    }

    /// An UPDATE Message Error (code 3).
    pub(crate) fn update(
        subcode: u8,
        data: impl Into<Bytes>,
        reason: impl Into<String>,
    ) -> DecodeError {
        DecodeError::new(code::UPDATE_MESSAGE, subcode, data, reason)
    }

    /// An UPDATE whose structure cannot be followed (Malformed Attribute List).
    pub(crate) fn malformed_update(reason: impl Into<String>) -> DecodeError {
        DecodeError::update(
            update_subcode::MALFORMED_ATTRIBUTE_LIST,
            Bytes::new(),
            reason,
        )
    }

    /// The NOTIFICATION to send before closing.
    pub fn notification(&self) -> Notification {
        Notification {
            code: self.code,
            subcode: self.subcode,
            data: self.data.clone(),
        }
    }
}

/// An error while encoding: something tern was asked to send cannot be represented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The message would exceed the negotiated maximum size.
    #[error("{what} needs {len} bytes, more than the {max}-byte message limit")]
    TooLong {
        /// What was being encoded.
        what: &'static str,
        /// Bytes it needs.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A field does not fit its wire width.
    #[error("{0}")]
    Invalid(String),
}
