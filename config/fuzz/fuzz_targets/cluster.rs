//! Coverage-guided fuzzing of the cluster loader: the bytes are a cluster file (and,
//! when they look like JSON, an etcd value), taken through validation, each node's
//! intent and the daemon's tracker by `tern_config::fuzzing::check_cluster`. See
//! README "Fuzzing".
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_config::fuzzing::check_cluster(data));
