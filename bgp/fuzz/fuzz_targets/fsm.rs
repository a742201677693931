//! Coverage-guided fuzzing of the session state machine: the bytes are a script of
//! events (start, stop, connection up or failed, bytes received, valid and mutated
//! peer messages, timers fired, time passing); `tern_bgp::fuzzing::check_fsm` checks
//! the machine's invariants after every event. See README "Fuzzing".
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_bgp::fuzzing::check_fsm(data));
