//! IANA numbers of BGP-4: message types, address families, attribute and capability
//! codes, with the names a person reads in `tern decode` output.

use serde::Serialize;

/// BGP message type codes (RFC 4271 §4.1, RFC 2918).
pub mod message_type {
    /// OPEN.
    pub const OPEN: u8 = 1;
    /// UPDATE.
    pub const UPDATE: u8 = 2;
    /// NOTIFICATION.
    pub const NOTIFICATION: u8 = 3;
    /// KEEPALIVE.
    pub const KEEPALIVE: u8 = 4;
    /// ROUTE-REFRESH (RFC 2918).
    pub const ROUTE_REFRESH: u8 = 5;
}

/// Path attribute type codes.
pub mod attr {
    /// ORIGIN (RFC 4271).
    pub const ORIGIN: u8 = 1;
    /// AS_PATH (RFC 4271).
    pub const AS_PATH: u8 = 2;
    /// NEXT_HOP (RFC 4271).
    pub const NEXT_HOP: u8 = 3;
    /// MULTI_EXIT_DISC (RFC 4271).
    pub const MED: u8 = 4;
    /// LOCAL_PREF (RFC 4271).
    pub const LOCAL_PREF: u8 = 5;
    /// ATOMIC_AGGREGATE (RFC 4271).
    pub const ATOMIC_AGGREGATE: u8 = 6;
    /// AGGREGATOR (RFC 4271).
    pub const AGGREGATOR: u8 = 7;
    /// COMMUNITIES (RFC 1997).
    pub const COMMUNITIES: u8 = 8;
    /// ORIGINATOR_ID (RFC 4456).
    pub const ORIGINATOR_ID: u8 = 9;
    /// CLUSTER_LIST (RFC 4456).
    pub const CLUSTER_LIST: u8 = 10;
    /// MP_REACH_NLRI (RFC 4760).
    pub const MP_REACH_NLRI: u8 = 14;
    /// MP_UNREACH_NLRI (RFC 4760).
    pub const MP_UNREACH_NLRI: u8 = 15;
    /// EXTENDED_COMMUNITIES (RFC 4360).
    pub const EXTENDED_COMMUNITIES: u8 = 16;
    /// AS4_PATH (RFC 6793).
    pub const AS4_PATH: u8 = 17;
    /// AS4_AGGREGATOR (RFC 6793).
    pub const AS4_AGGREGATOR: u8 = 18;
    /// LARGE_COMMUNITY (RFC 8092).
    pub const LARGE_COMMUNITIES: u8 = 32;
}

/// Path attribute flag bits (RFC 4271 §4.3).
pub mod attr_flags {
    /// Optional (else well-known).
    pub const OPTIONAL: u8 = 0x80;
    /// Transitive.
    pub const TRANSITIVE: u8 = 0x40;
    /// Partial: an optional transitive attribute some speaker did not recognise.
    pub const PARTIAL: u8 = 0x20;
    /// The length field is two octets.
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

/// Capability codes (IANA "Capability Codes").
pub mod capability_code {
    /// Multiprotocol extensions (RFC 4760).
    pub const MULTIPROTOCOL: u8 = 1;
    /// Route refresh (RFC 2918).
    pub const ROUTE_REFRESH: u8 = 2;
    /// Extended next hop encoding (RFC 8950).
    pub const EXTENDED_NEXT_HOP: u8 = 5;
    /// Extended message (RFC 8654).
    pub const EXTENDED_MESSAGE: u8 = 6;
    /// Graceful restart (RFC 4724).
    pub const GRACEFUL_RESTART: u8 = 64;
    /// 4-octet AS number (RFC 6793).
    pub const FOUR_OCTET_AS: u8 = 65;
    /// ADD-PATH (RFC 7911).
    pub const ADD_PATH: u8 = 69;
    /// Enhanced route refresh (RFC 7313).
    pub const ENHANCED_ROUTE_REFRESH: u8 = 70;
    /// Long-lived graceful restart (RFC 9494); tern does not implement it, so it is
    /// kept as an unknown capability.
    pub const LONG_LIVED_GRACEFUL_RESTART: u8 = 71;
    /// FQDN (draft-walton-bgp-hostname-capability).
    pub const FQDN: u8 = 73;
}

/// AS_TRANS, the 2-octet stand-in for a 4-octet AS (RFC 6793).
pub const AS_TRANS: u16 = 23456;

/// Address family identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Afi {
    /// IPv4 (1).
    Ipv4,
    /// IPv6 (2).
    Ipv6,
    /// Any other AFI, kept by number.
    Other(u16),
}

impl Afi {
    /// The wire value.
    pub fn code(self) -> u16 {
        match self {
            Afi::Ipv4 => 1,
            Afi::Ipv6 => 2,
            Afi::Other(c) => c,
        }
    }
}

impl From<u16> for Afi {
    fn from(c: u16) -> Afi {
        match c {
            1 => Afi::Ipv4,
            2 => Afi::Ipv6,
            c => Afi::Other(c),
        }
    }
}

/// Subsequent address family identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Safi {
    /// Unicast (1).
    Unicast,
    /// Multicast (2).
    Multicast,
    /// Any other SAFI, kept by number.
    Other(u8),
}

impl Safi {
    /// The wire value.
    pub fn code(self) -> u8 {
        match self {
            Safi::Unicast => 1,
            Safi::Multicast => 2,
            Safi::Other(c) => c,
        }
    }
}

impl From<u8> for Safi {
    fn from(c: u8) -> Safi {
        match c {
            1 => Safi::Unicast,
            2 => Safi::Multicast,
            c => Safi::Other(c),
        }
    }
}

/// An (AFI, SAFI) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Family {
    /// Address family.
    pub afi: Afi,
    /// Subsequent address family.
    pub safi: Safi,
}

impl Family {
    /// IPv4 unicast.
    pub const IPV4_UNICAST: Family = Family {
        afi: Afi::Ipv4,
        safi: Safi::Unicast,
    };
    /// IPv6 unicast.
    pub const IPV6_UNICAST: Family = Family {
        afi: Afi::Ipv6,
        safi: Safi::Unicast,
    };

    /// A family from wire values.
    pub fn new(afi: u16, safi: u8) -> Family {
        Family {
            afi: afi.into(),
            safi: safi.into(),
        }
    }

    /// Whether tern can parse this family's NLRI (IPv4/IPv6 unicast and multicast,
    /// which share the plain prefix encoding).
    pub fn is_supported(self) -> bool {
        matches!(self.afi, Afi::Ipv4 | Afi::Ipv6)
            && matches!(self.safi, Safi::Unicast | Safi::Multicast)
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let afi = match self.afi {
            Afi::Ipv4 => "ipv4".to_string(),
            Afi::Ipv6 => "ipv6".to_string(),
            Afi::Other(c) => format!("afi{c}"),
        };
        let safi = match self.safi {
            Safi::Unicast => "unicast".to_string(),
            Safi::Multicast => "multicast".to_string(),
            Safi::Other(c) => format!("safi{c}"),
        };
        write!(f, "{afi}-{safi}")
    }
}

/// The name of a path attribute code, as RFCs spell it.
pub fn attr_name(code: u8) -> &'static str {
    match code {
        attr::ORIGIN => "ORIGIN",
        attr::AS_PATH => "AS_PATH",
        attr::NEXT_HOP => "NEXT_HOP",
        attr::MED => "MULTI_EXIT_DISC",
        attr::LOCAL_PREF => "LOCAL_PREF",
        attr::ATOMIC_AGGREGATE => "ATOMIC_AGGREGATE",
        attr::AGGREGATOR => "AGGREGATOR",
        attr::COMMUNITIES => "COMMUNITIES",
        attr::ORIGINATOR_ID => "ORIGINATOR_ID",
        attr::CLUSTER_LIST => "CLUSTER_LIST",
        attr::MP_REACH_NLRI => "MP_REACH_NLRI",
        attr::MP_UNREACH_NLRI => "MP_UNREACH_NLRI",
        attr::EXTENDED_COMMUNITIES => "EXTENDED_COMMUNITIES",
        attr::AS4_PATH => "AS4_PATH",
        attr::AS4_AGGREGATOR => "AS4_AGGREGATOR",
        attr::LARGE_COMMUNITIES => "LARGE_COMMUNITY",
        _ => "unknown",
    }
}
