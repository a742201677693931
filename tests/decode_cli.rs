//! `tern decode` as a user runs it: input on stdin or in a file, text and JSON output,
//! exit codes for malformed messages and unreadable input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use tern_bgp::wire::{
    pack, CodecOptions, Family, Message, Nlri, Notification, Origin, PathAttributes, Update,
};

fn tern(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start tern: {e}"));
    if let Some(mut s) = child.stdin.take() {
        s.write_all(stdin).unwrap_or_else(|e| panic!("{e}"));
    }
    child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
}

fn stream() -> Vec<u8> {
    let o = CodecOptions::modern();
    let attrs = PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(tern_bgp::wire::AsPath::from_sequence([64512])),
        next_hop: Some(
            "203.0.113.1"
                .parse()
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
        ),
        ..PathAttributes::default()
    };
    let prefixes: Vec<Nlri> = (0..30)
        .filter_map(|i| format!("198.18.{i}.0/24").parse().ok())
        .map(Nlri::new)
        .collect();
    let mut msgs = Vec::new();
    let packed = pack::announcements(
        &attrs,
        Family::IPV4_UNICAST,
        &pack::NextHop::Classic,
        &prefixes,
        &o,
        &mut msgs,
    );
    assert!(packed.is_ok());
    for m in [
        Message::Keepalive,
        Message::Update(Update::end_of_rib(Family::IPV6_UNICAST)),
        Message::Notification(Notification::shutdown("node drained for upgrade")),
    ] {
        msgs.push(m.encode(&o).unwrap_or_default());
    }
    msgs.concat()
}

#[test]
fn text_output_reads_like_the_messages() {
    let out = tern(&["decode", "--max-prefixes", "3"], &stream());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "#1  UPDATE",
        "AS_PATH              64512",
        "announced (30)       198.18.0.0/24 198.18.1.0/24 198.18.2.0/24 ... and 27 more",
        "#2  KEEPALIVE  19 bytes",
        "End-of-RIB ipv6-unicast",
        "Cease / Administrative Shutdown: \"node drained for upgrade\"",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 messages, 0 malformed"));
}

#[test]
fn hex_input_and_json_output() {
    let hex = tern_bgp::wire::hex(&stream());
    let spaced: String = hex
        .as_bytes()
        .chunks(8)
        .map(|c| String::from_utf8_lossy(c).into_owned() + " ")
        .collect();
    let out = tern(&["decode", "-o", "json"], spaced.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let msgs = doc["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[0]["message"]["type"], "UPDATE");
    assert_eq!(
        msgs[0]["message"]["nlri"].as_array().map(|a| a.len()),
        Some(30)
    );
    assert_eq!(msgs[0]["message"]["nlri"][0]["prefix"], "198.18.0.0/24");
    assert_eq!(msgs[0]["message"]["attributes"]["origin"], "igp");
    assert_eq!(msgs[3]["message"]["type"], "NOTIFICATION");
    assert_eq!(
        msgs[3]["length"],
        19 + 2 + 1 + "node drained for upgrade".len()
    );
}

#[test]
fn a_malformed_message_is_explained_and_exits_1() {
    // An UPDATE whose NLRI claims a /33.
    let mut m = vec![0xff; 16];
    m.extend_from_slice(&[0, 29, 2, 0, 0, 0, 0, 33, 198, 18, 0, 0, 1]);
    let out = tern(&["decode", "--format", "raw"], &m);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("prefix length 33 exceeds 32"), "{text}");
    assert!(
        text.contains("NOTIFICATION UPDATE Message Error / Invalid Network Field (3/10)"),
        "{text}"
    );
}

#[test]
fn unreadable_input_exits_2_and_names_the_file() {
    let out = tern(&["decode", "/nonexistent/capture.pcap"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/capture.pcap"));
    let out = tern(&["decode", "--format", "pcap"], b"not a capture at all");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a readable pcap"));
}
