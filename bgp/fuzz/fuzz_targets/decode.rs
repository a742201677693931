//! Coverage-guided fuzzing of the BGP decoder: the first byte picks the session
//! options, the rest is one message. See README "Fuzzing".
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_bgp::fuzzing::check_decode(data));
