//! The structured inputs reach both verdicts, and issue 23's value is rejected through
//! both renderings with the old intent kept.

use arbitrary::{Arbitrary, Unstructured};

use super::values::{Addr, Lit, Name, Pick, DURATIONS};
use super::{check_structured, render, BgpPeer, Input, Resource, Verdict};

const HUGE: &str = "10000000000000000000s10000000000000000000s";

/// The known-good snapshot plus one BGPPeer `tor` with this keepaliveTime.
fn with_peer_keepalive(keepalive: &str) -> Input {
    let mut input = Input::arbitrary(&mut Unstructured::new(&[])).unwrap();
    input.on_top_of_known_good = true;
    let index = DURATIONS
        .iter()
        .position(|l| matches!(l, Lit::S(s) if *s == keepalive))
        .unwrap();
    let mut peer = Resource::<BgpPeer>::arbitrary(&mut Unstructured::new(&[])).unwrap();
    peer.name = Name::Pick(Pick::Known(7)); // "tor"
    peer.spec.peer_ip = Some(Addr::Pick(Pick::Known(0))); // 198.51.100.1
    peer.spec.as_number = Some(Pick::Known(4)); // 64513
    peer.spec.keepalive_time = Some(Pick::Known(u8::try_from(index).unwrap()));
    input.snapshot.peers.push(peer);
    input
}

#[test]
fn the_known_good_snapshot_renders_to_ten_resources_both_ways_and_is_accepted() {
    let mut input = Input::arbitrary(&mut Unstructured::new(&[])).unwrap();
    input.on_top_of_known_good = true;
    let r = render(&input);
    assert_eq!(r.yaml.matches("---\n").count(), 10, "{}", r.yaml);
    assert_eq!(r.etcd.len(), 10, "{:?}", r.etcd.keys());
    let out = check_structured(&input);
    assert_eq!(out.yaml, Verdict::Accepted);
    assert_eq!(out.etcd, Verdict::Accepted);
}

#[test]
fn a_valid_peer_is_accepted_both_ways() {
    let input = with_peer_keepalive("10s");
    let r = render(&input);
    assert!(r.yaml.contains("keepaliveTime: 10s\n"), "{}", r.yaml);
    let out = check_structured(&input);
    assert_eq!(out.yaml, Verdict::Accepted);
    assert_eq!(out.etcd, Verdict::Accepted);
}

#[test]
fn issue_23s_keepalive_is_rejected_both_ways_and_the_old_intent_stays() {
    // Before the fix in values.rs, parsing this value panicked (overflow adding
    // durations): check_structured would have panicked here.
    let input = with_peer_keepalive(HUGE);
    let r = render(&input);
    assert!(
        r.yaml.contains(&format!("keepaliveTime: {HUGE}\n")),
        "{}",
        r.yaml
    );
    assert!(r.etcd.values().any(|v| v.contains(HUGE)));
    // check_structured itself asserts that the intent and revision stayed.
    let out = check_structured(&input);
    for (what, verdict) in [("cluster file", out.yaml), ("etcd", out.etcd)] {
        match verdict {
            Verdict::Rejected(reason) => assert!(
                reason.contains("spec.keepaliveTime")
                    && reason.contains("longer than the largest duration"),
                "{what}: {reason}"
            ),
            Verdict::Accepted => panic!("{what}: accepted"),
        }
    }
}

#[test]
fn strings_yaml_would_read_as_another_type_are_quoted() {
    for s in [
        "64512", "true", "No", "1:20", "0x10", "", "1e3", "a:", " x", "inf",
    ] {
        let mut out = String::new();
        super::yaml::yaml(&serde_json::Value::from(s), 0, &mut out);
        assert_eq!(out, format!("{}\n", serde_json::Value::from(s)), "{s}");
    }
    for s in [
        "10s",
        "node-a",
        "198.51.100.10/24",
        "2001:db8::1",
        "all()",
        "1.5h",
    ] {
        let mut out = String::new();
        super::yaml::yaml(&serde_json::Value::from(s), 0, &mut out);
        assert_eq!(out, format!("{s}\n"));
    }
}

#[test]
fn terns_fields_are_rendered_as_annotations_for_odd_length_names() {
    // "tor" has three letters: its hold time goes to the `tern/hold-time` annotation.
    let mut input = with_peer_keepalive("10s");
    if let Some(p) = input.snapshot.peers.last_mut() {
        p.spec.hold_time = Some(Pick::Known(5)); // 90s
    }
    let r = render(&input);
    assert!(r.yaml.contains("tern/hold-time"), "{}", r.yaml);
    assert!(!r.yaml.contains("holdTime"), "{}", r.yaml);
    let out = check_structured(&input);
    assert_eq!(out.yaml, Verdict::Accepted);
    assert_eq!(out.etcd, Verdict::Accepted);
}
