//! NLRI: prefixes as BGP encodes them (length in bits, then just enough address bytes),
//! with the optional RFC 7911 path identifier in front.
//!
//! Decoding writes into a caller's `Vec` of small `Copy` values, so a packed UPDATE
//! costs one allocation, never one per prefix.

use std::net::{Ipv4Addr, Ipv6Addr};

use bytes::{BufMut, BytesMut};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Serialize;

use super::iana::Afi;

/// One reachable or withdrawn destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Nlri {
    /// The prefix (host bits cleared).
    pub prefix: IpNet,
    /// RFC 7911 path identifier, present when ADD-PATH is in use for the family.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_id: Option<u32>,
}

impl Nlri {
    /// A prefix without a path identifier.
    pub fn new(prefix: IpNet) -> Nlri {
        Nlri {
            prefix,
            path_id: None,
        }
    }

    /// Bytes this NLRI takes on the wire.
    pub fn encoded_len(&self, add_path: bool) -> usize {
        let plen = usize::from(self.prefix.prefix_len());
        1 + plen.div_ceil(8) + if add_path { 4 } else { 0 }
    }

    /// Appends the wire form. `add_path` writes the path id (0 when absent).
    pub fn encode(&self, out: &mut BytesMut, add_path: bool) {
        if add_path {
            out.put_u32(self.path_id.unwrap_or(0));
        }
        let plen = self.prefix.prefix_len();
        out.put_u8(plen);
        let n = usize::from(plen).div_ceil(8);
        match self.prefix {
            IpNet::V4(p) => out.put_slice(p.addr().octets().get(..n).unwrap_or_default()),
            IpNet::V6(p) => out.put_slice(p.addr().octets().get(..n).unwrap_or_default()),
        }
    }
}

impl std::fmt::Display for Nlri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path_id {
            Some(id) => write!(f, "{} path-id {id}", self.prefix),
            None => write!(f, "{}", self.prefix),
        }
    }
}

/// Why a run of NLRI could not be parsed (always a session reset, RFC 7606 §5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NlriError(pub String);

/// Parses a run of NLRI of family `afi` and appends them to `out`.
pub(crate) fn decode_prefixes(
    data: &[u8],
    afi: Afi,
    add_path: bool,
    out: &mut Vec<Nlri>,
) -> Result<(), NlriError> {
    let max_len: u8 = match afi {
        Afi::Ipv4 => 32,
        Afi::Ipv6 => 128,
        Afi::Other(c) => return Err(NlriError(format!("cannot parse prefixes of AFI {c}"))),
    };
    let mut pos = 0usize;
    while pos < data.len() {
        let path_id = if add_path {
            let id = data
                .get(pos..pos + 4)
                .ok_or_else(|| NlriError(format!("path identifier cut short at byte {pos}")))?;
            pos += 4;
            Some(u32::from_be_bytes([id[0], id[1], id[2], id[3]]))
        } else {
            None
        };
        let plen = *data
            .get(pos)
            .ok_or_else(|| NlriError(format!("prefix length missing at byte {pos}")))?;
        if plen > max_len {
            return Err(NlriError(format!(
                "prefix length {plen} exceeds {max_len} at byte {pos}"
            )));
        }
        pos += 1;
        let n = usize::from(plen).div_ceil(8);
        let bytes = data.get(pos..pos + n).ok_or_else(|| {
            NlriError(format!(
                "/{plen} prefix needs {n} bytes, {} left",
                data.len() - pos
            ))
        })?;
        pos += n;
        let prefix = match afi {
            Afi::Ipv4 => {
                let mut a = [0u8; 4];
                a[..n].copy_from_slice(bytes);
                let v = u32::from_be_bytes(a) & mask32(plen);
                Ipv4Net::new(Ipv4Addr::from(v), plen).map(IpNet::V4)
            }
            _ => {
                let mut a = [0u8; 16];
                a[..n].copy_from_slice(bytes);
                let v = u128::from_be_bytes(a) & mask128(plen);
                Ipv6Net::new(Ipv6Addr::from(v), plen).map(IpNet::V6)
            }
        }
        .map_err(|e| NlriError(format!("invalid prefix length {plen}: {e}")))?;
        out.push(Nlri { prefix, path_id });
    }
    Ok(())
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(data: &[u8], afi: Afi, add_path: bool) -> Result<Vec<Nlri>, NlriError> {
        let mut v = Vec::new();
        decode_prefixes(data, afi, add_path, &mut v).map(|_| v)
    }

    #[test]
    fn decodes_v4_and_clears_host_bits() {
        let v = parse(
            &[24, 198, 18, 1, 32, 198, 18, 0, 7, 0, 9, 198, 0xff],
            Afi::Ipv4,
            false,
        );
        let v = v.unwrap_or_default();
        let s: Vec<String> = v.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            s,
            [
                "198.18.1.0/24",
                "198.18.0.7/32",
                "0.0.0.0/0",
                "198.128.0.0/9"
            ]
        );
    }

    #[test]
    fn decodes_v6_with_path_ids() {
        let data = [0, 0, 0, 7, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 1];
        let v = parse(&data, Afi::Ipv6, true).unwrap_or_default();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].to_string(), "2001:db8:1::/48 path-id 7");
    }

    #[test]
    fn rejects_bad_lengths_and_truncation() {
        assert!(parse(&[33, 1, 2, 3, 4, 5], Afi::Ipv4, false).is_err());
        assert!(parse(&[129], Afi::Ipv6, false).is_err());
        assert!(parse(&[24, 198, 18], Afi::Ipv4, false).is_err());
        assert!(parse(&[0, 0, 1], Afi::Ipv4, true).is_err());
        assert!(parse(&[8, 1], Afi::Other(25), false).is_err());
    }

    #[test]
    fn encode_is_the_inverse() {
        let mut out = BytesMut::new();
        let n = Nlri {
            prefix: "198.18.4.0/26".parse().unwrap_or_default(),
            path_id: Some(3),
        };
        n.encode(&mut out, true);
        assert_eq!(out.len(), n.encoded_len(true));
        assert_eq!(parse(&out, Afi::Ipv4, true).unwrap_or_default(), vec![n]);
    }
}
