//! The codec's invariants on arbitrary input, shared by the cargo-fuzz target
//! (`bgp/fuzz`) and the stable-Rust smoke test that runs in CI (`tests/fuzz_smoke.rs`).
//! Panics when an invariant is broken; that is how a fuzzer learns of it.

use bytes::Bytes;

use crate::wire::{frame_len, CodecOptions, Message, Update};

/// Decodes `data` with the session options chosen by its first byte, and checks that
/// framing agrees with decoding and that whatever decodes re-encodes to the same value.
pub fn check_decode(data: &[u8]) {
    let Some((&sel, msg)) = data.split_first() else {
        return;
    };
    let opts = CodecOptions {
        four_octet_as: sel & 1 != 0,
        extended_message: sel & 2 != 0,
        add_path_ipv4: sel & 4 != 0,
        add_path_ipv6: sel & 8 != 0,
    };
    let framed = frame_len(msg, opts.max_message_len());
    let decoded = Message::decode(Bytes::copy_from_slice(msg), &opts);
    if decoded.is_ok() {
        assert!(
            matches!(framed, Ok(Some(n)) if n == msg.len()),
            "decoded a message framing rejects"
        );
    }
    // 2-octet sessions merge AS4_PATH lossily by design (RFC 6793), so only 4-octet
    // sessions must round-trip exactly.
    let (Ok(first), true) = (decoded, opts.four_octet_as) else {
        return;
    };
    let first = without_findings(first);
    if let Ok(bytes) = first.encode(&opts) {
        match Message::decode(bytes, &opts) {
            Ok(second) => assert_eq!(
                without_findings(second),
                first,
                "re-encoding changed the message"
            ),
            Err(e) => panic!("re-encoded {} does not decode: {e}", first.kind()),
        }
    }
}

/// The message without its RFC 7606 findings, which are reported on decode but never
/// encoded: what two decodes of the same content compare equal on.
pub fn without_findings(m: Message) -> Message {
    match m {
        Message::Update(u) => Message::Update(Update {
            errors: Vec::new(),
            ..u
        }),
        m => m,
    }
}
