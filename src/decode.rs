//! `tern decode`: BGP messages from a capture, hex or raw stream, printed for people
//! (text) or scripts (JSON).
//!
//! How a message is laid out depends on what its session negotiated (4-octet AS,
//! ADD-PATH, extended messages). That is learnt from the OPENs in the input, per
//! connection and direction, unless the user forces it with flags.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tern_bgp::wire::{Capability, CodecOptions, DecodeError, Family, Message, Open, Update};

use crate::capture::Flow;

/// What the user forced on the command line; `None` means learn it from OPENs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// Decode AS numbers as 4 octets (`Some(true)`) or 2 (`Some(false)`).
    pub four_octet_as: Option<bool>,
    /// Path identifiers in (IPv4, IPv6) NLRI.
    pub add_path: Option<(bool, bool)>,
    /// Allow messages up to 65535 bytes.
    pub extended_message: Option<bool>,
}

/// One input message and what became of it.
#[derive(Debug, Serialize)]
pub struct Decoded {
    /// 1-based position in the input.
    pub index: usize,
    /// Direction, when the input was a capture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// Seconds since the first captured message, when the input was a capture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
    /// Length in bytes.
    pub length: usize,
    /// The decoded message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// Why it could not be decoded, and the NOTIFICATION a speaker would send.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorReport>,
    /// Raw bytes, hex.
    pub hex: String,
    /// The session options it was decoded with.
    #[serde(skip)]
    pub options: CodecOptions,
}

/// A message that failed to decode.
#[derive(Debug, Serialize)]
pub struct ErrorReport {
    /// What is wrong.
    pub reason: String,
    /// NOTIFICATION code.
    pub code: u8,
    /// NOTIFICATION subcode.
    pub subcode: u8,
    /// `code name / subcode name`.
    pub notification: String,
}

impl From<&DecodeError> for ErrorReport {
    fn from(e: &DecodeError) -> ErrorReport {
        let n = e.notification();
        ErrorReport {
            reason: e.reason.clone(),
            code: e.code,
            subcode: e.subcode,
            notification: format!("{} / {}", n.code_name(), n.subcode_name()),
        }
    }
}

/// A message to decode: its bytes and, for captures, direction and time.
pub struct Input {
    /// Direction, if known.
    pub flow: Option<Flow>,
    /// Capture time, if known.
    pub timestamp: Option<Duration>,
    /// The whole message.
    pub bytes: Bytes,
}

impl From<crate::capture::CapturedMessage> for Input {
    fn from(m: crate::capture::CapturedMessage) -> Input {
        Input {
            flow: Some(m.flow),
            timestamp: Some(m.timestamp),
            bytes: m.bytes,
        }
    }
}

/// Decodes every message, learning each connection's options from its OPENs.
pub fn decode_all(inputs: Vec<Input>, overrides: Overrides) -> Vec<Decoded> {
    let no_flow = Flow {
        src: SocketAddr::from(([0, 0, 0, 0], 0)),
        dst: SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let mut opens: HashMap<Flow, Open> = HashMap::new();
    let t0 = inputs.iter().filter_map(|i| i.timestamp).min();
    let mut out = Vec::with_capacity(inputs.len());
    for (n, input) in inputs.into_iter().enumerate() {
        let flow = input.flow.unwrap_or(no_flow);
        let reverse = Flow {
            src: flow.dst,
            dst: flow.src,
        };
        let opts = options_for(opens.get(&flow), opens.get(&reverse), overrides);
        let result = Message::decode(input.bytes.clone(), &opts);
        if let Ok(Message::Open(o)) = &result {
            opens.insert(flow, o.clone());
        }
        let (message, error) = match result {
            Ok(m) => (Some(m), None),
            Err(e) => (None, Some(ErrorReport::from(&e))),
        };
        out.push(Decoded {
            index: n + 1,
            flow: input.flow.map(|f| f.to_string()),
            time: input
                .timestamp
                .zip(t0)
                .map(|(t, t0)| (t - t0).as_secs_f64()),
            length: input.bytes.len(),
            message,
            error,
            hex: tern_bgp::wire::hex(&input.bytes),
            options: opts,
        });
    }
    out
}

/// The options a message from `sender` to `receiver` was encoded with. With only one
/// OPEN seen (a raw stream of one side) that OPEN speaks for both.
fn options_for(sender: Option<&Open>, receiver: Option<&Open>, o: Overrides) -> CodecOptions {
    let both = |f: &dyn Fn(&Open) -> bool| match (sender, receiver) {
        (Some(s), Some(r)) => f(s) && f(r),
        (Some(x), None) | (None, Some(x)) => f(x),
        (None, None) => false,
    };
    let add_path = |fam: Family| {
        let sends = |x: &Open, send: bool| {
            x.capabilities.iter().any(|c| match c {
                Capability::AddPath(v) => v
                    .iter()
                    .any(|a| a.family == fam && if send { a.send } else { a.receive }),
                _ => false,
            })
        };
        match (sender, receiver) {
            (Some(s), Some(r)) => sends(s, true) && sends(r, false),
            (Some(s), None) => sends(s, true),
            (None, Some(r)) => sends(r, false),
            (None, None) => false,
        }
    };
    let learnt_ap = (
        add_path(Family::IPV4_UNICAST),
        add_path(Family::IPV6_UNICAST),
    );
    let (ap4, ap6) = o.add_path.unwrap_or(learnt_ap);
    let seen = sender.is_some() || receiver.is_some();
    CodecOptions {
        // Without any OPEN, assume what every current implementation negotiates.
        four_octet_as: o.four_octet_as.unwrap_or(if seen {
            both(&|x| x.four_octet_as())
        } else {
            true
        }),
        extended_message: o.extended_message.unwrap_or(
            // Without OPENs, accept large messages rather than reject them.
            !seen || both(&|x| x.capabilities.contains(&Capability::ExtendedMessage)),
        ),
        add_path_ipv4: ap4,
        add_path_ipv6: ap6,
    }
}

/// Renders one decoded message for people; prefix lists longer than `max_prefixes`
/// are shortened.
pub fn render_text(d: &Decoded, max_prefixes: usize) -> String {
    let mut s = String::new();
    let kind = d.message.as_ref().map_or("(malformed)", |m| m.kind());
    let _ = write!(s, "#{}", d.index);
    if let Some(f) = &d.flow {
        let _ = write!(s, "  {f}");
    }
    if let Some(t) = d.time {
        let _ = write!(s, "  t={t:.3}s");
    }
    let _ = writeln!(s, "  {kind}  {} bytes", d.length);
    if let Some(e) = &d.error {
        let _ = writeln!(s, "    error: {}", e.reason);
        let _ = writeln!(
            s,
            "    a speaker would reset the session with NOTIFICATION {} ({}/{})",
            e.notification, e.code, e.subcode
        );
        return s;
    }
    match &d.message {
        Some(Message::Open(o)) => {
            let _ = writeln!(
                s,
                "    version {}, AS {}, hold time {}s, BGP identifier {}",
                o.version,
                o.asn(),
                o.hold_time,
                o.bgp_id
            );
            for c in &o.capabilities {
                let _ = writeln!(s, "    capability {c}");
            }
        }
        Some(Message::Update(u)) => render_update(&mut s, u, max_prefixes),
        Some(Message::Notification(n)) => {
            let _ = writeln!(s, "    {n}");
            if n.shutdown_message().is_none() && !n.data.is_empty() {
                let _ = writeln!(s, "    data 0x{}", tern_bgp::wire::hex(&n.data));
            }
        }
        Some(Message::RouteRefresh(r)) => {
            let _ = writeln!(s, "    {} {:?}", r.family, r.subtype);
        }
        Some(Message::Keepalive) | None => {}
    }
    s
}

fn prefix_list(list: &[tern_bgp::wire::Nlri], max: usize) -> String {
    let mut s: Vec<String> = list.iter().take(max).map(|n| n.to_string()).collect();
    if list.len() > max {
        s.push(format!("... and {} more", list.len() - max));
    }
    s.join(" ")
}

/// One UPDATE: its path attributes, the prefixes it withdraws and announces, and the
/// RFC 7606 errors found in it.
fn render_update(s: &mut String, u: &Update, max: usize) {
    if let Some(f) = u.end_of_rib_family() {
        let _ = writeln!(s, "    End-of-RIB {f}");
        return;
    }
    render_attributes(s, &u.attributes);
    render_prefixes(s, u, max);
    for e in &u.errors {
        let action = serde_json::to_value(e.action)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let _ = writeln!(s, "    RFC 7606 {action}: {}", e.reason);
    }
}

/// One `NAME  value` line of the decoded message.
fn line(s: &mut String, k: &str, v: String) {
    let _ = writeln!(s, "    {k:<21}{v}");
}

/// Every path attribute present, in type-code order.
fn render_attributes(s: &mut String, a: &tern_bgp::wire::PathAttributes) {
    if let Some(o) = a.origin {
        line(s, "ORIGIN", o.to_string());
    }
    if let Some(p) = &a.as_path {
        line(
            s,
            "AS_PATH",
            if p.segments.is_empty() {
                "(empty)".into()
            } else {
                p.to_string()
            },
        );
    }
    if let Some(n) = a.next_hop {
        line(s, "NEXT_HOP", n.to_string());
    }
    if let Some(m) = a.med {
        line(s, "MULTI_EXIT_DISC", m.to_string());
    }
    if let Some(l) = a.local_pref {
        line(s, "LOCAL_PREF", l.to_string());
    }
    if a.atomic_aggregate {
        line(s, "ATOMIC_AGGREGATE", String::new());
    }
    if let Some(g) = a.aggregator {
        line(s, "AGGREGATOR", format!("AS {} {}", g.asn, g.address));
    }
    let join = |v: Vec<String>| v.join(" ");
    if !a.communities.is_empty() {
        line(
            s,
            "COMMUNITIES",
            join(a.communities.iter().map(|c| c.to_string()).collect()),
        );
    }
    if let Some(o) = a.originator_id {
        line(s, "ORIGINATOR_ID", o.to_string());
    }
    if !a.cluster_list.is_empty() {
        line(
            s,
            "CLUSTER_LIST",
            join(a.cluster_list.iter().map(|c| c.to_string()).collect()),
        );
    }
    if !a.extended_communities.is_empty() {
        line(
            s,
            "EXTENDED_COMMUNITIES",
            join(
                a.extended_communities
                    .iter()
                    .map(|c| c.to_string())
                    .collect(),
            ),
        );
    }
    if !a.large_communities.is_empty() {
        line(
            s,
            "LARGE_COMMUNITY",
            join(a.large_communities.iter().map(|c| c.to_string()).collect()),
        );
    }
    for r in &a.unknown {
        line(
            s,
            &format!("attribute {}", r.code),
            format!("flags 0x{:02x} 0x{}", r.flags, tern_bgp::wire::hex(&r.data)),
        );
    }
}

/// The withdrawn and announced prefixes, of the UPDATE itself and of its MP_REACH /
/// MP_UNREACH attributes.
fn render_prefixes(s: &mut String, u: &Update, max: usize) {
    if !u.withdrawn.is_empty() {
        line(
            s,
            &format!("withdrawn ({})", u.withdrawn.len()),
            prefix_list(&u.withdrawn, max),
        );
    }
    if !u.nlri.is_empty() {
        line(
            s,
            &format!("announced ({})", u.nlri.len()),
            prefix_list(&u.nlri, max),
        );
    }
    if let Some(m) = &u.mp_reach {
        let _ = writeln!(s, "    MP_REACH_NLRI {} next hop {}", m.family, m.next_hop);
        if !m.nlri.is_empty() {
            line(
                s,
                &format!("  announced ({})", m.nlri.len()),
                prefix_list(&m.nlri, max),
            );
        }
    }
    if let Some(m) = &u.mp_unreach {
        let _ = writeln!(s, "    MP_UNREACH_NLRI {}", m.family);
        if !m.withdrawn.is_empty() {
            line(
                s,
                &format!("  withdrawn ({})", m.withdrawn.len()),
                prefix_list(&m.withdrawn, max),
            );
        }
    }
}
