//! BGP messages out of packet captures and raw byte streams, for `tern decode` and the
//! golden tests.
//!
//! A capture (pcap or pcapng, link types Ethernet, Linux cooked v1/v2 and raw IP) is
//! cut into TCP segments (etherparse); each direction of each connection is put back
//! together in sequence-number order, dropping retransmitted bytes; the byte stream is
//! then split at BGP headers. A stream that starts mid-message (capture started late)
//! or has a hole (lost packet) is resynchronised at the next marker, with a warning.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

/// One direction of a TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    /// Sender.
    pub src: SocketAddr,
    /// Receiver.
    pub dst: SocketAddr,
}

impl std::fmt::Display for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}", self.src, self.dst)
    }
}

/// One BGP message found in a capture.
#[derive(Debug, Clone)]
pub struct CapturedMessage {
    /// Direction it travelled.
    pub flow: Flow,
    /// Its position among the messages of that flow (0-based).
    pub index_in_flow: usize,
    /// Capture time of the segment that carried its first byte.
    pub timestamp: Duration,
    /// The whole message, header included.
    pub bytes: Bytes,
}

/// What a capture held.
#[derive(Debug, Default)]
pub struct Capture {
    /// BGP messages in capture order.
    pub messages: Vec<CapturedMessage>,
    /// Holes, resynchronisations, truncated tails, skipped packets.
    pub warnings: Vec<String>,
}

/// A capture that cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Not a pcap or pcapng file, or damaged.
    #[error("{file}: not a readable pcap/pcapng capture: {reason}")]
    Format {
        /// File name.
        file: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A packet record could not be read.
    #[error("{file}: packet {packet}: {reason}")]
    Packet {
        /// File name.
        file: String,
        /// 1-based packet number, as Wireshark counts.
        packet: usize,
        /// The parser's complaint.
        reason: String,
    },
}

/// Whether `data` starts like a pcap or pcapng file.
pub fn looks_like_pcap(data: &[u8]) -> bool {
    matches!(
        data.get(..4),
        Some(
            [0xd4, 0xc3, 0xb2, 0xa1]
                | [0xa1, 0xb2, 0xc3, 0xd4]
                | [0x4d, 0x3c, 0xb2, 0xa1]
                | [0xa1, 0xb2, 0x3c, 0x4d]
        ) | Some([0x0a, 0x0d, 0x0d, 0x0a])
    )
}

struct Segment {
    seq: u32,
    syn: bool,
    timestamp: Duration,
    payload: Vec<u8>,
}

/// Reads the BGP messages of a pcap or pcapng capture. `file` names it in errors.
pub fn read_pcap(data: &[u8], file: &str) -> Result<Capture, CaptureError> {
    let mut flows: BTreeMap<Flow, Vec<Segment>> = BTreeMap::new();
    let mut order: Vec<Flow> = Vec::new();
    let mut warnings = Vec::new();
    let mut add =
        |n: usize, link: DataLink, ts: Duration, pkt: &[u8], warnings: &mut Vec<String>| {
            match tcp_segment(link, pkt) {
                Ok(Some((flow, seg))) => {
                    let list = flows.entry(flow).or_insert_with(|| {
                        order.push(flow);
                        Vec::new()
                    });
                    list.push(Segment {
                        timestamp: ts,
                        ..seg
                    });
                }
                Ok(None) => {}
                Err(e) => warnings.push(format!("{file}: packet {n}: skipped: {e}")),
            }
        };
    let fmt_err = |reason: String| CaptureError::Format {
        file: file.to_string(),
        reason,
    };
    if data.get(..4) == Some(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut r = PcapNgReader::new(Cursor::new(data)).map_err(|e| fmt_err(e.to_string()))?;
        let mut links: Vec<DataLink> = Vec::new();
        let mut n = 0;
        while let Some(block) = r.next_block() {
            let block = block.map_err(|e| CaptureError::Packet {
                file: file.into(),
                packet: n + 1,
                reason: e.to_string(),
            })?;
            match block {
                Block::SectionHeader(_) => links.clear(),
                Block::InterfaceDescription(idb) => links.push(idb.linktype),
                Block::EnhancedPacket(p) => {
                    n += 1;
                    let link = links
                        .get(p.interface_id as usize)
                        .copied()
                        .unwrap_or(DataLink::ETHERNET);
                    add(n, link, p.timestamp, &p.data, &mut warnings);
                }
                Block::SimplePacket(p) => {
                    n += 1;
                    let link = links.first().copied().unwrap_or(DataLink::ETHERNET);
                    add(n, link, Duration::ZERO, &p.data, &mut warnings);
                }
                _ => {}
            }
        }
    } else {
        let mut r = PcapReader::new(Cursor::new(data)).map_err(|e| fmt_err(e.to_string()))?;
        let link = r.header().datalink;
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            n += 1;
            let p = p.map_err(|e| CaptureError::Packet {
                file: file.into(),
                packet: n,
                reason: e.to_string(),
            })?;
            add(n, link, p.timestamp, &p.data, &mut warnings);
        }
    }

    let mut messages = Vec::new();
    for flow in order {
        let Some(segments) = flows.remove(&flow) else {
            continue;
        };
        for (index_in_flow, (timestamp, bytes)) in reassemble(flow, segments, &mut warnings)
            .into_iter()
            .enumerate()
        {
            messages.push(CapturedMessage {
                flow,
                index_in_flow,
                timestamp,
                bytes,
            });
        }
    }
    // Stable: messages of one flow keep their order when timestamps tie.
    messages.sort_by_key(|m| m.timestamp);
    Ok(Capture { messages, warnings })
}

/// The TCP segment in one captured packet, if it is one and carries payload or SYN.
fn tcp_segment(link: DataLink, pkt: &[u8]) -> Result<Option<(Flow, Segment)>, String> {
    let sliced = match link {
        DataLink::ETHERNET => SlicedPacket::from_ethernet(pkt),
        DataLink::LINUX_SLL => SlicedPacket::from_linux_sll(pkt),
        // SLL2: 20-byte header, protocol type in its first two bytes.
        DataLink::LINUX_SLL2 => {
            let ip = pkt.get(20..).ok_or("short Linux cooked v2 header")?;
            SlicedPacket::from_ip(ip)
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => SlicedPacket::from_ip(pkt),
        // BSD loopback: 4-byte family, then IP.
        DataLink::NULL | DataLink::LOOP => {
            SlicedPacket::from_ip(pkt.get(4..).ok_or("short loopback header")?)
        }
        other => return Err(format!("link type {other:?} is not supported")),
    }
    .map_err(|e| e.to_string())?;
    let (src_ip, dst_ip): (IpAddr, IpAddr) = match &sliced.net {
        Some(NetSlice::Ipv4(v4)) => (
            v4.header().source_addr().into(),
            v4.header().destination_addr().into(),
        ),
        Some(NetSlice::Ipv6(v6)) => (
            v6.header().source_addr().into(),
            v6.header().destination_addr().into(),
        ),
        _ => return Ok(None),
    };
    let Some(TransportSlice::Tcp(tcp)) = &sliced.transport else {
        return Ok(None);
    };
    if tcp.payload().is_empty() && !tcp.syn() {
        return Ok(None);
    }
    let flow = Flow {
        src: SocketAddr::new(src_ip, tcp.source_port()),
        dst: SocketAddr::new(dst_ip, tcp.destination_port()),
    };
    Ok(Some((
        flow,
        Segment {
            seq: tcp.sequence_number(),
            syn: tcp.syn(),
            timestamp: Duration::ZERO,
            payload: tcp.payload().to_vec(),
        },
    )))
}

/// Contiguous bytes of one direction, with (offset in the run, capture time) marks
/// where each segment's fresh bytes start.
type Run = (Vec<u8>, Vec<(usize, Duration)>);

/// Puts one direction back together and splits it into messages with the time of the
/// segment that carried each message's first byte.
fn reassemble(
    flow: Flow,
    segments: Vec<Segment>,
    warnings: &mut Vec<String>,
) -> Vec<(Duration, Bytes)> {
    // Offsets count from the byte after the SYN, or from the first segment seen.
    let base = segments
        .iter()
        .find(|s| s.syn)
        .map(|s| s.seq.wrapping_add(1))
        .or_else(|| segments.first().map(|s| s.seq))
        .unwrap_or(0);
    let mut data: Vec<(u64, Duration, Vec<u8>)> = segments
        .into_iter()
        .filter(|s| !s.payload.is_empty())
        .map(|s| {
            (
                u64::from(s.seq.wrapping_add(u32::from(s.syn)).wrapping_sub(base)),
                s.timestamp,
                s.payload,
            )
        })
        .collect();
    data.sort_by_key(|(off, ts, _)| (*off, *ts));

    let mut runs: Vec<Run> = Vec::new();
    let mut next: Option<u64> = None;
    for (off, ts, payload) in data {
        let end = off + payload.len() as u64;
        match next {
            Some(n) if end <= n => continue, // retransmission of bytes we have
            Some(n) if off <= n => {
                let skip = (n - off) as usize;
                if let (Some(run), Some(fresh)) = (runs.last_mut(), payload.get(skip..)) {
                    run.1.push((run.0.len(), ts));
                    run.0.extend_from_slice(fresh);
                }
            }
            _ => {
                if let Some(n) = next {
                    warnings.push(format!(
                        "{flow}: {} bytes missing from the capture; resynchronising",
                        off - n
                    ));
                }
                runs.push((payload, vec![(0, ts)]));
            }
        }
        next = Some(next.map_or(end, |n| n.max(end)));
    }

    let mut out = Vec::new();
    for (bytes, marks) in runs {
        let bytes = Bytes::from(bytes);
        let (msgs, problems) = split_stream_at(bytes.clone());
        for p in problems {
            warnings.push(format!("{flow}: {p}"));
        }
        for (start, m) in msgs {
            let ts = marks
                .iter()
                .take_while(|(at, _)| *at <= start)
                .last()
                .map_or(Duration::ZERO, |(_, t)| *t);
            out.push((ts, m));
        }
    }
    out
}

const MARKER: [u8; 16] = [0xff; 16];

/// Splits a raw stream of concatenated BGP messages (what one side of a session
/// sends). Returns the messages and, separately, what could not be split: leading
/// bytes before the first marker, a truncated message at the end.
pub fn split_stream(data: Bytes) -> (Vec<Bytes>, Vec<String>) {
    let (msgs, problems) = split_stream_at(data);
    (msgs.into_iter().map(|(_, m)| m).collect(), problems)
}

fn split_stream_at(data: Bytes) -> (Vec<(usize, Bytes)>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = data.get(pos..).unwrap_or_default();
        let at_marker = rest.get(..16) == Some(&MARKER[..]);
        let len = rest
            .get(16..18)
            .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])));
        if rest.len() < 19 && rest.iter().take(16).all(|&b| b == 0xff) {
            problems.push(format!(
                "{} trailing bytes: a message header cut short",
                rest.len()
            ));
            break;
        }
        match (at_marker, len) {
            (true, Some(len)) if len >= 19 => {
                if rest.len() < len {
                    problems.push(format!(
                        "last message cut short: header says {len} bytes, {} captured",
                        rest.len()
                    ));
                    break;
                }
                out.push((pos, data.slice(pos..pos + len)));
                pos += len;
            }
            (true, None) => {
                problems.push(format!("{} trailing bytes: a header cut short", rest.len()));
                break;
            }
            _ => {
                // Not at a message boundary: find the next marker followed by a sane length.
                let skip = (1..rest.len())
                    .find(|&i| {
                        rest.get(i..i + 16) == Some(&MARKER[..])
                            && rest
                                .get(i + 16..i + 18)
                                .is_some_and(|l| u16::from_be_bytes([l[0], l[1]]) >= 19)
                            && rest.get(i + 18) != Some(&0xff)
                    })
                    .unwrap_or(rest.len());
                problems.push(format!("skipped {skip} bytes that are not a BGP message"));
                pos += skip;
            }
        }
    }
    (out, problems)
}

/// Parses hex text: whitespace, `:` and `0x` prefixes are ignored.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let cleaned: String = text
        .split_whitespace()
        .map(|w| w.trim_start_matches("0x").trim_start_matches("0X"))
        .collect::<String>()
        .chars()
        .filter(|c| *c != ':' && *c != ',')
        .collect();
    hex::decode(&cleaned).map_err(|e| format!("not hex: {e}"))
}

#[cfg(test)]
mod tests;
