//! AS_PATH and AS4_PATH: segments of 2- or 4-octet AS numbers, the path length the
//! decision process counts, and RFC 6793's rules for talking to 2-octet speakers
//! (AS_TRANS out, AS4_PATH merged back in).

use bytes::{BufMut, BytesMut};
use serde::Serialize;

use super::iana::AS_TRANS;

/// AS_PATH segment types (RFC 4271, RFC 5065).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SegmentType {
    /// AS_SET (1): unordered, counts as one hop.
    Set,
    /// AS_SEQUENCE (2): ordered.
    Sequence,
    /// AS_CONFED_SEQUENCE (3): counts as zero hops.
    ConfedSequence,
    /// AS_CONFED_SET (4): counts as zero hops.
    ConfedSet,
}

impl SegmentType {
    fn code(self) -> u8 {
        match self {
            SegmentType::Set => 1,
            SegmentType::Sequence => 2,
            SegmentType::ConfedSequence => 3,
            SegmentType::ConfedSet => 4,
        }
    }

    fn from_code(c: u8) -> Option<SegmentType> {
        Some(match c {
            1 => SegmentType::Set,
            2 => SegmentType::Sequence,
            3 => SegmentType::ConfedSequence,
            4 => SegmentType::ConfedSet,
            _ => return None,
        })
    }
}

/// One AS_PATH segment.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AsSegment {
    /// Segment type.
    pub kind: SegmentType,
    /// AS numbers, in order.
    pub asns: Vec<u32>,
}

/// A whole AS_PATH (or AS4_PATH).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AsPath {
    /// Segments, first is the most recently prepended.
    pub segments: Vec<AsSegment>,
}

impl AsPath {
    /// A path made of one AS_SEQUENCE.
    pub fn from_sequence(asns: impl IntoIterator<Item = u32>) -> AsPath {
        let asns: Vec<u32> = asns.into_iter().collect();
        if asns.is_empty() {
            return AsPath::default();
        }
        AsPath {
            segments: vec![AsSegment {
                kind: SegmentType::Sequence,
                asns,
            }],
        }
    }

    /// Parses an AS_PATH body; `four_octet` chooses 4- or 2-byte AS numbers.
    pub fn decode(data: &[u8], four_octet: bool) -> Result<AsPath, String> {
        let width = if four_octet { 4 } else { 2 };
        let mut segments = Vec::new();
        let mut pos = 0usize;
        while pos < data.len() {
            let (Some(&t), Some(&n)) = (data.get(pos), data.get(pos + 1)) else {
                return Err(format!("segment header cut short at byte {pos}"));
            };
            let kind =
                SegmentType::from_code(t).ok_or_else(|| format!("unknown segment type {t}"))?;
            if n == 0 {
                return Err("empty segment".to_string());
            }
            pos += 2;
            let need = usize::from(n) * width;
            let body = data.get(pos..pos + need).ok_or_else(|| {
                format!(
                    "segment of {n} AS numbers needs {need} bytes, {} left",
                    data.len() - pos
                )
            })?;
            pos += need;
            let asns = body
                .chunks_exact(width)
                .map(|c| match c {
                    [a, b, c, d] => u32::from_be_bytes([*a, *b, *c, *d]),
                    [a, b] => u32::from(u16::from_be_bytes([*a, *b])),
                    _ => 0,
                })
                .collect();
            segments.push(AsSegment { kind, asns });
        }
        Ok(AsPath { segments })
    }

    /// Bytes of the encoded body.
    pub fn encoded_len(&self, four_octet: bool) -> usize {
        let width = if four_octet { 4 } else { 2 };
        self.segments
            .iter()
            .map(|s| s.asns.len().div_ceil(255) * 2 + s.asns.len() * width)
            .sum()
    }

    /// Appends the body; segments longer than 255 AS numbers are split. With
    /// `four_octet` false, AS numbers above 65535 become AS_TRANS.
    pub fn encode(&self, out: &mut BytesMut, four_octet: bool) {
        for seg in &self.segments {
            for chunk in seg.asns.chunks(255) {
                out.put_u8(seg.kind.code());
                out.put_u8(chunk.len() as u8);
                for &asn in chunk {
                    if four_octet {
                        out.put_u32(asn);
                    } else {
                        out.put_u16(u16::try_from(asn).unwrap_or(AS_TRANS));
                    }
                }
            }
        }
    }

    /// Path length for best-path selection: an AS_SET counts one, confederation
    /// segments zero (RFC 4271 §9.1.2.2, RFC 5065).
    pub fn path_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s.kind {
                SegmentType::Sequence => s.asns.len(),
                SegmentType::Set => 1,
                _ => 0,
            })
            .sum()
    }

    /// Whether any AS number needs 4 octets (so a 2-octet peer needs AS4_PATH).
    pub fn needs_as4(&self) -> bool {
        self.segments
            .iter()
            .flat_map(|s| &s.asns)
            .any(|&a| a > u32::from(u16::MAX))
    }

    /// Whether `asn` appears anywhere (loop detection).
    pub fn contains(&self, asn: u32) -> bool {
        self.segments
            .iter()
            .flat_map(|s| &s.asns)
            .any(|&a| a == asn)
    }

    /// How many times `asn` appears (allowas-in counts these).
    pub fn count(&self, asn: u32) -> usize {
        self.segments
            .iter()
            .flat_map(|s| &s.asns)
            .filter(|&&a| a == asn)
            .count()
    }

    /// The neighbouring AS: first AS of a leading AS_SEQUENCE.
    pub fn first_as(&self) -> Option<u32> {
        let s = self.segments.first()?;
        (s.kind == SegmentType::Sequence)
            .then(|| s.asns.first().copied())
            .flatten()
    }

    /// The same path with `asn` prepended `times` times.
    pub fn prepend(&self, asn: u32, times: usize) -> AsPath {
        let mut segments = self.segments.clone();
        match segments.first_mut() {
            Some(s) if s.kind == SegmentType::Sequence => {
                s.asns.splice(0..0, std::iter::repeat_n(asn, times));
            }
            _ => segments.insert(
                0,
                AsSegment {
                    kind: SegmentType::Sequence,
                    asns: vec![asn; times],
                },
            ),
        }
        AsPath { segments }
    }

    /// RFC 6793 §4.2.3: rebuilds the true path from a 2-octet AS_PATH and an AS4_PATH.
    /// If AS_PATH is shorter than AS4_PATH the AS4_PATH is ignored.
    pub fn merge_as4(as_path: &AsPath, as4_path: &AsPath) -> AsPath {
        let n = as_path.path_len();
        let n4 = as4_path.path_len();
        if n < n4 {
            return as_path.clone();
        }
        let mut keep = n - n4;
        let mut segments = Vec::new();
        for seg in &as_path.segments {
            if keep == 0 {
                break;
            }
            match seg.kind {
                SegmentType::Sequence => {
                    let take = seg.asns.len().min(keep);
                    segments.push(AsSegment {
                        kind: seg.kind,
                        asns: seg.asns.iter().take(take).copied().collect(),
                    });
                    keep -= take;
                }
                SegmentType::Set => {
                    segments.push(seg.clone());
                    keep -= 1;
                }
                _ => segments.push(seg.clone()),
            }
        }
        segments.extend(as4_path.segments.iter().cloned());
        AsPath { segments }
    }
}

impl std::fmt::Display for AsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for s in &self.segments {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            let list = s
                .asns
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" ");
            match s.kind {
                SegmentType::Sequence => f.write_str(&list)?,
                SegmentType::Set => write!(f, "{{{list}}}")?,
                SegmentType::ConfedSequence => write!(f, "({list})")?,
                SegmentType::ConfedSet => write!(f, "[{list}]")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(kind: SegmentType, asns: &[u32]) -> AsSegment {
        AsSegment {
            kind,
            asns: asns.to_vec(),
        }
    }

    #[test]
    fn two_and_four_octet_forms() {
        let p = AsPath {
            segments: vec![
                seg(SegmentType::Sequence, &[64501, 4200000000]),
                seg(SegmentType::Set, &[1, 2]),
            ],
        };
        for four in [true, false] {
            let mut out = BytesMut::new();
            p.encode(&mut out, four);
            assert_eq!(out.len(), p.encoded_len(four));
            let back = AsPath::decode(&out, four).unwrap_or_default();
            if four {
                assert_eq!(back, p);
            } else {
                assert_eq!(back.to_string(), "64501 23456 {1 2}");
            }
        }
        assert_eq!(p.path_len(), 3);
        assert!(p.needs_as4());
    }

    #[test]
    fn long_sequences_split_into_255s() {
        let p = AsPath::from_sequence(0..600);
        let mut out = BytesMut::new();
        p.encode(&mut out, true);
        let back = AsPath::decode(&out, true).unwrap_or_default();
        assert_eq!(back.segments.len(), 3);
        assert_eq!(back.path_len(), 600);
    }

    #[test]
    fn malformed_paths_are_rejected() {
        assert!(AsPath::decode(&[2, 0], true).is_err());
        assert!(AsPath::decode(&[5, 1, 0, 1], false).is_err());
        assert!(AsPath::decode(&[2, 2, 0, 1], false).is_err());
        assert!(AsPath::decode(&[2], false).is_err());
    }

    #[test]
    fn as4_merge_follows_rfc6793() {
        // AS_PATH: 65001 23456 23456 ; AS4_PATH: 4200000001 4200000002
        let p2 = AsPath::from_sequence([65001, 23456, 23456]);
        let p4 = AsPath::from_sequence([4200000001, 4200000002]);
        assert_eq!(
            AsPath::merge_as4(&p2, &p4).to_string(),
            "65001 4200000001 4200000002"
        );
        // A longer AS4_PATH than AS_PATH is ignored.
        let p4 = AsPath::from_sequence([1, 2, 3, 4]);
        assert_eq!(AsPath::merge_as4(&p2, &p4), p2);
    }

    #[test]
    fn prepend_and_first_as() {
        let p = AsPath::from_sequence([64502]).prepend(64501, 2);
        assert_eq!(p.to_string(), "64501 64501 64502");
        assert_eq!(p.first_as(), Some(64501));
        assert_eq!(p.count(64501), 2);
        assert_eq!(AsPath::default().prepend(7, 1).to_string(), "7");
    }
}
