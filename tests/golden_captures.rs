//! Golden tests on BGP messages captured from BIRD 2, GoBGP and FRR
//! (`bgp/tests/fixtures/`, made by `tern-lab capture`): every message decodes, the
//! implementations' known behaviour is visible in the decoded values, re-encoding is
//! stable, and `tern decode`'s text output matches the reviewed golden file.
//! `TERN_BLESS=1 cargo test --test golden_captures` rewrites the golden file.

mod common;

use std::path::Path;

const FIXTURE: &str = "bgp/tests/fixtures/bird-gobgp-frr.pcap";
const GOLDEN: &str = "bgp/tests/fixtures/bird-gobgp-frr.txt";

fn fixture() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE))
        .unwrap_or_else(|e| panic!("{FIXTURE}: {e}"))
}

#[test]
fn captured_messages_decode_to_what_the_daemons_sent() {
    let (all, warnings) = common::decode_capture(&fixture(), FIXTURE);
    assert!(warnings.is_empty(), "{warnings:?}");
    common::check_lab_capture(&all);
}

#[test]
fn captured_messages_re_encode_stably() {
    let (all, _) = common::decode_capture(&fixture(), FIXTURE);
    common::check_reencoding(&all);
}

#[test]
fn captured_messages_keep_the_fuzz_invariants() {
    let (all, _) = common::decode_capture(&fixture(), FIXTURE);
    for d in &all {
        let o = d.options;
        let sel = u8::from(o.four_octet_as)
            | u8::from(o.extended_message) << 1
            | u8::from(o.add_path_ipv4) << 2
            | u8::from(o.add_path_ipv6) << 3;
        let mut input = vec![sel];
        input.extend(hex::decode(&d.hex).unwrap_or_default());
        tern_bgp::fuzzing::check_decode(&input);
    }
}

#[test]
fn decode_text_output_matches_the_golden_file() {
    let (all, _) = common::decode_capture(&fixture(), FIXTURE);
    let text: String = all
        .iter()
        .map(|d| tern::decode::render_text(d, 20) + "\n")
        .collect();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var("TERN_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&golden, &text).unwrap_or_else(|e| panic!("{GOLDEN}: {e}"));
    }
    let want = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{GOLDEN}: {e} (run with TERN_BLESS=1)"));
    if want != text {
        let first = want
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "tern decode output differs from {GOLDEN} at line {}:\n  golden: {:?}\n  now:    {:?}\nreview, then TERN_BLESS=1",
            first + 1,
            want.lines().nth(first),
            text.lines().nth(first)
        );
    }
}
