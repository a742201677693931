//! Reassembly tests on captures built in memory: out-of-order, duplicated and split
//! segments, a capture that starts mid-stream, and a truncated tail.

use std::time::Duration;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};

use super::*;

fn keepalive() -> Vec<u8> {
    let mut m = vec![0xff; 16];
    m.extend_from_slice(&[0, 19, 4]);
    m
}

fn notification() -> Vec<u8> {
    let mut m = vec![0xff; 16];
    m.extend_from_slice(&[0, 23, 3, 6, 2, 1, b'x']);
    m
}

/// A packet from 198.51.100.1:179 to 198.51.100.2:40000 with `seq` and `payload`.
fn packet(seq: u32, syn: bool, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 51, 100, 1], [198, 51, 100, 2], 64)
        .tcp(179, 40000, seq, 65535);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap_or_else(|e| panic!("{e}"));
    out
}

fn pcap(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut w = PcapWriter::with_header(
        Vec::new(),
        PcapHeader {
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for (i, p) in packets.iter().enumerate() {
        let pkt = PcapPacket::new(Duration::from_millis(i as u64), p.len() as u32, p);
        w.write_packet(&pkt).unwrap_or_else(|e| panic!("{e}"));
    }
    w.into_writer()
}

#[test]
fn reorders_drops_duplicates_and_joins_split_messages() {
    let ka = keepalive();
    let no = notification();
    let stream: Vec<u8> = [&ka[..], &ka, &no].concat(); // 19 + 19 + 23 bytes
    let isn = 1000u32;
    let data = 1 + isn;
    let file = pcap(&[
        packet(isn, true, &[]),
        packet(data + 30, false, &stream[30..]), // second half first
        packet(data, false, &stream[..30]),      // first half
        packet(data, false, &stream[..30]),      // retransmission
        packet(data + 10, false, &stream[10..40]), // overlapping retransmission
    ]);
    let cap = read_pcap(&file, "mem.pcap").unwrap_or_else(|e| panic!("{e}"));
    assert!(cap.warnings.is_empty(), "{:?}", cap.warnings);
    let got: Vec<Vec<u8>> = cap.messages.iter().map(|m| m.bytes.to_vec()).collect();
    assert_eq!(got, vec![ka.clone(), ka, no]);
    assert_eq!(
        cap.messages[0].flow.to_string(),
        "198.51.100.1:179 -> 198.51.100.2:40000"
    );
    assert_eq!(
        cap.messages
            .iter()
            .map(|m| m.index_in_flow)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[test]
fn a_capture_that_starts_mid_message_resynchronises() {
    let ka = keepalive();
    let stream: Vec<u8> = [&ka[5..], &ka, &ka[..10]].concat();
    let cap = read_pcap(&pcap(&[packet(5000, false, &stream)]), "late.pcap")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cap.messages.len(), 1);
    assert_eq!(cap.warnings.len(), 2, "{:?}", cap.warnings);
    assert!(
        cap.warnings[0].contains("skipped 14 bytes"),
        "{:?}",
        cap.warnings
    );
    assert!(
        cap.warnings[1].contains("10 trailing bytes: a message header cut short"),
        "{:?}",
        cap.warnings
    );
}

#[test]
fn a_hole_is_reported() {
    let ka = keepalive();
    let file = pcap(&[packet(100, false, &ka), packet(100 + 19 + 7, false, &ka)]);
    let cap = read_pcap(&file, "hole.pcap").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cap.messages.len(), 2);
    assert!(
        cap.warnings.iter().any(|w| w.contains("7 bytes missing")),
        "{:?}",
        cap.warnings
    );
}

#[test]
fn garbage_is_an_error_that_names_the_file() {
    let e = read_pcap(b"\xd4\xc3\xb2\xa1 too short", "bad.pcap")
        .err()
        .map(|e| e.to_string());
    assert!(
        e.as_deref().unwrap_or_default().starts_with("bad.pcap"),
        "{e:?}"
    );
    assert!(!looks_like_pcap(b"ffff"));
}

#[test]
fn hex_and_raw_streams() {
    let bytes = parse_hex("0xff ff:ff ffffffffffffffffffffffffff 0013 04").unwrap_or_default();
    assert_eq!(bytes, keepalive());
    assert!(parse_hex("zz").is_err());
    let (msgs, problems) = split_stream(Bytes::from([keepalive(), notification()].concat()));
    assert_eq!(msgs.len(), 2);
    assert!(problems.is_empty());
}
