//! Coverage-guided fuzzing of the daemon's own file parser (`tern.yaml`) through
//! `tern_config::fuzzing::check_daemon`. See README "Fuzzing".
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_config::fuzzing::check_daemon(data));
