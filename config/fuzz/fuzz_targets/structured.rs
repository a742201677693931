//! Structure-aware fuzzing of the configuration (issue 23): the bytes are decoded by
//! `arbitrary` into a Calico cluster snapshot and a `tern.yaml` whose fields mix
//! typical, boundary and hostile values, rendered as the cluster file and as etcd
//! values, and checked by `tern_config::fuzzing::structured::check_structured` (no
//! panic; accepted whole or rejected with the old intent kept). See README "Fuzzing".
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_config::fuzzing::structured::check_bytes(data));
