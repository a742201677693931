//! OPEN capabilities (RFC 5492) and their values: multiprotocol, route refresh and
//! enhanced route refresh, extended message, 4-octet AS, graceful restart, ADD-PATH,
//! extended next hop, FQDN. Unknown capabilities are kept byte for byte.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;

use super::iana::{capability_code as cc, Afi, Family};
use super::reader::Reader;

/// A family in the graceful restart capability, with its forwarding-state flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct GracefulRestartFamily {
    /// The family.
    pub family: Family,
    /// Forwarding state was preserved across the restart (F bit).
    pub forwarding_preserved: bool,
}

/// The graceful restart capability (RFC 4724, RFC 8538 N bit).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct GracefulRestart {
    /// Restart State (R bit): the sender has just restarted.
    pub restart_state: bool,
    /// Notification (N bit, RFC 8538): graceful restart also covers NOTIFICATIONs.
    pub notification: bool,
    /// Restart time in seconds (12 bits).
    pub restart_time: u16,
    /// Families and their forwarding-state flags.
    pub families: Vec<GracefulRestartFamily>,
}

/// ADD-PATH direction for a family (RFC 7911).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct AddPathFamily {
    /// The family.
    pub family: Family,
    /// The sender can receive multiple paths.
    pub receive: bool,
    /// The sender can send multiple paths.
    pub send: bool,
}

/// An extended next hop entry (RFC 8950): NLRI of `family` may carry a next hop of
/// `next_hop_afi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct ExtendedNextHopFamily {
    /// NLRI family.
    pub family: Family,
    /// Next hop address family.
    pub next_hop_afi: Afi,
}

/// One capability.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case", tag = "capability", content = "value")]
pub enum Capability {
    /// Multiprotocol extensions for one family (RFC 4760).
    Multiprotocol(Family),
    /// Route refresh (RFC 2918).
    RouteRefresh,
    /// Enhanced route refresh (RFC 7313).
    EnhancedRouteRefresh,
    /// Extended message, up to 65535 bytes (RFC 8654).
    ExtendedMessage,
    /// 4-octet AS number support, with the sender's AS (RFC 6793).
    FourOctetAs(u32),
    /// Graceful restart (RFC 4724).
    GracefulRestart(GracefulRestart),
    /// ADD-PATH (RFC 7911).
    AddPath(Vec<AddPathFamily>),
    /// Extended next hop encoding (RFC 8950).
    ExtendedNextHop(Vec<ExtendedNextHopFamily>),
    /// Host and domain name (draft-walton-bgp-hostname-capability).
    Fqdn {
        /// Host name.
        hostname: String,
        /// Domain name.
        domain: String,
    },
    /// Any other capability, kept as received.
    Unknown {
        /// Capability code.
        code: u8,
        /// Value.
        #[serde(serialize_with = "super::serde_hex")]
        data: Bytes,
    },
}

impl Capability {
    /// The capability code.
    pub fn code(&self) -> u8 {
        match self {
            Capability::Multiprotocol(_) => cc::MULTIPROTOCOL,
            Capability::RouteRefresh => cc::ROUTE_REFRESH,
            Capability::EnhancedRouteRefresh => cc::ENHANCED_ROUTE_REFRESH,
            Capability::ExtendedMessage => cc::EXTENDED_MESSAGE,
            Capability::FourOctetAs(_) => cc::FOUR_OCTET_AS,
            Capability::GracefulRestart(_) => cc::GRACEFUL_RESTART,
            Capability::AddPath(_) => cc::ADD_PATH,
            Capability::ExtendedNextHop(_) => cc::EXTENDED_NEXT_HOP,
            Capability::Fqdn { .. } => cc::FQDN,
            Capability::Unknown { code, .. } => *code,
        }
    }

    /// Parses one capability value; a malformed value of a known capability is an
    /// error naming the capability.
    pub(crate) fn decode(code: u8, data: Bytes) -> Result<Capability, String> {
        let mut r = Reader::new(data.clone());
        let bad = |name: &str| format!("{name} capability of {} bytes is malformed", data.len());
        let cap = match code {
            cc::MULTIPROTOCOL => {
                let (Some(afi), Some(_), Some(safi)) = (r.u16(), r.u8(), r.u8()) else {
                    return Err(bad("multiprotocol"));
                };
                Capability::Multiprotocol(Family::new(afi, safi))
            }
            cc::ROUTE_REFRESH => Capability::RouteRefresh,
            cc::ENHANCED_ROUTE_REFRESH => Capability::EnhancedRouteRefresh,
            cc::EXTENDED_MESSAGE => Capability::ExtendedMessage,
            cc::FOUR_OCTET_AS => Capability::FourOctetAs(r.u32().ok_or_else(|| bad("4-octet AS"))?),
            cc::GRACEFUL_RESTART => {
                let head = r.u16().ok_or_else(|| bad("graceful restart"))?;
                if !r.remaining().is_multiple_of(4) {
                    return Err(bad("graceful restart"));
                }
                let mut families = Vec::new();
                while let (Some(afi), Some(safi), Some(flags)) = (r.u16(), r.u8(), r.u8()) {
                    families.push(GracefulRestartFamily {
                        family: Family::new(afi, safi),
                        forwarding_preserved: flags & 0x80 != 0,
                    });
                }
                Capability::GracefulRestart(GracefulRestart {
                    restart_state: head & 0x8000 != 0,
                    notification: head & 0x4000 != 0,
                    restart_time: head & 0x0fff,
                    families,
                })
            }
            cc::ADD_PATH => {
                if !r.remaining().is_multiple_of(4) || r.is_empty() {
                    return Err(bad("ADD-PATH"));
                }
                let mut v = Vec::new();
                while let (Some(afi), Some(safi), Some(sr)) = (r.u16(), r.u8(), r.u8()) {
                    if !(1..=3).contains(&sr) {
                        return Err(format!("ADD-PATH send/receive value {sr} is invalid"));
                    }
                    v.push(AddPathFamily {
                        family: Family::new(afi, safi),
                        receive: sr & 1 != 0,
                        send: sr & 2 != 0,
                    });
                }
                Capability::AddPath(v)
            }
            cc::EXTENDED_NEXT_HOP => {
                if !r.remaining().is_multiple_of(6) || r.is_empty() {
                    return Err(bad("extended next hop"));
                }
                let mut v = Vec::new();
                while let (Some(afi), Some(safi), Some(nh)) = (r.u16(), r.u16(), r.u16()) {
                    let Ok(safi) = u8::try_from(safi) else {
                        return Ok(Capability::Unknown { code, data });
                    };
                    v.push(ExtendedNextHopFamily {
                        family: Family::new(afi, safi),
                        next_hop_afi: nh.into(),
                    });
                }
                Capability::ExtendedNextHop(v)
            }
            cc::FQDN => {
                let hl = r.u8().ok_or_else(|| bad("FQDN"))?;
                let hostname =
                    String::from_utf8_lossy(r.slice(usize::from(hl)).ok_or_else(|| bad("FQDN"))?)
                        .into_owned();
                let dl = r.u8().unwrap_or(0);
                let domain =
                    String::from_utf8_lossy(r.slice(usize::from(dl)).ok_or_else(|| bad("FQDN"))?)
                        .into_owned();
                Capability::Fqdn { hostname, domain }
            }
            _ => return Ok(Capability::Unknown { code, data }),
        };
        Ok(cap)
    }

    /// Appends code, length and value.
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        let mut v = BytesMut::new();
        match self {
            Capability::Multiprotocol(f) => {
                v.put_u16(f.afi.code());
                v.put_u8(0);
                v.put_u8(f.safi.code());
            }
            Capability::RouteRefresh
            | Capability::EnhancedRouteRefresh
            | Capability::ExtendedMessage => {}
            Capability::FourOctetAs(asn) => v.put_u32(*asn),
            Capability::GracefulRestart(gr) => {
                let mut head = gr.restart_time & 0x0fff;
                if gr.restart_state {
                    head |= 0x8000;
                }
                if gr.notification {
                    head |= 0x4000;
                }
                v.put_u16(head);
                for f in &gr.families {
                    v.put_u16(f.family.afi.code());
                    v.put_u8(f.family.safi.code());
                    v.put_u8(if f.forwarding_preserved { 0x80 } else { 0 });
                }
            }
            Capability::AddPath(fams) => {
                for f in fams {
                    v.put_u16(f.family.afi.code());
                    v.put_u8(f.family.safi.code());
                    v.put_u8(u8::from(f.receive) | (u8::from(f.send) << 1));
                }
            }
            Capability::ExtendedNextHop(fams) => {
                for f in fams {
                    v.put_u16(f.family.afi.code());
                    v.put_u16(u16::from(f.family.safi.code()));
                    v.put_u16(f.next_hop_afi.code());
                }
            }
            Capability::Fqdn { hostname, domain } => {
                for s in [hostname, domain] {
                    let b = s.as_bytes().get(..s.len().min(255)).unwrap_or_default();
                    v.put_u8(b.len() as u8);
                    v.put_slice(b);
                }
            }
            Capability::Unknown { data, .. } => v.put_slice(data),
        }
        out.put_u8(self.code());
        out.put_u8(v.len().min(255) as u8);
        out.put_slice(v.get(..v.len().min(255)).unwrap_or_default());
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capability::Multiprotocol(fam) => write!(f, "multiprotocol {fam}"),
            Capability::RouteRefresh => f.write_str("route-refresh"),
            Capability::EnhancedRouteRefresh => f.write_str("enhanced-route-refresh"),
            Capability::ExtendedMessage => f.write_str("extended-message"),
            Capability::FourOctetAs(a) => write!(f, "4-octet-as {a}"),
            Capability::GracefulRestart(gr) => {
                write!(f, "graceful-restart time {}s", gr.restart_time)?;
                if gr.restart_state {
                    f.write_str(" restarting")?;
                }
                if gr.notification {
                    f.write_str(" notification")?;
                }
                for fam in &gr.families {
                    write!(
                        f,
                        " {}{}",
                        fam.family,
                        if fam.forwarding_preserved { "(F)" } else { "" }
                    )?;
                }
                Ok(())
            }
            Capability::AddPath(fams) => {
                f.write_str("add-path")?;
                for a in fams {
                    let dir = match (a.receive, a.send) {
                        (true, true) => "send/receive",
                        (true, false) => "receive",
                        _ => "send",
                    };
                    write!(f, " {} {dir}", a.family)?;
                }
                Ok(())
            }
            Capability::ExtendedNextHop(fams) => {
                f.write_str("extended-next-hop")?;
                for e in fams {
                    let nh = match e.next_hop_afi {
                        Afi::Ipv4 => "ipv4".to_string(),
                        Afi::Ipv6 => "ipv6".to_string(),
                        Afi::Other(c) => format!("afi{c}"),
                    };
                    write!(f, " {} via {nh}", e.family)?;
                }
                Ok(())
            }
            Capability::Fqdn { hostname, domain } => write!(f, "fqdn {hostname:?} {domain:?}"),
            Capability::Unknown { code, data } => {
                let name = match *code {
                    cc::LONG_LIVED_GRACEFUL_RESTART => "long-lived-graceful-restart",
                    128 => "route-refresh-cisco",
                    _ => "code",
                };
                write!(f, "{name} ({code}) 0x{}", super::hex(data))
            }
        }
    }
}
