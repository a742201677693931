//! The structure-aware fuzz check (`tern_config::fuzzing::structured`) on stable Rust,
//! in CI: a few hundred inputs (more with TERN_FUZZ_SMOKE_STRUCTURED=N) decoded from a deterministic pseudo-random byte stream
//! through `arbitrary::Unstructured`, each rendered as the cluster file and as etcd
//! values and checked (accepted whole, or rejected with the old intent kept).
//! Coverage-guided fuzzing proper is `cargo fuzz run structured` in `config/fuzz`.

use arbitrary::{Arbitrary, Unstructured};
use tern_config::fuzzing::structured::{check_structured, render, Input, Verdict};

/// xorshift64: deterministic, so a failure reproduces.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Each input costs about 20 ms unoptimised: every rendering is parsed some ten times
/// over (the tracker, the direct intent, check_cluster's own passes, per etcd value),
/// so a few hundred keep this test to seconds.
fn inputs() -> usize {
    std::env::var("TERN_FUZZ_SMOKE_STRUCTURED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

#[test]
fn structured_snapshots_are_accepted_whole_or_rejected_with_the_old_intent_kept() {
    let started = std::time::Instant::now();
    let mut state = 0x0123_4567_89ab_cdefu64;
    let (mut accepted, mut rejected, mut huge) = ([0usize; 2], [0usize; 2], 0usize);
    let n = inputs();
    for i in 0..n {
        // Short inputs: a few resources each, many of them left at the defaults (the
        // tables' first, valid entries), so snapshots are often accepted. Parsing
        // unoptimised costs milliseconds per snapshot; coverage-guided fuzzing does
        // the large ones.
        let len = 8 + (next(&mut state) % 120) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next(&mut state) as u8).collect();
        let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        if render(&input)
            .yaml
            .contains("10000000000000000000s10000000000000000000s")
        {
            huge += 1;
        }
        let out = std::panic::catch_unwind(|| check_structured(&input)).unwrap_or_else(|_| {
            panic!("input {i} of seed state: {input:#?}");
        });
        for (k, v) in [out.yaml, out.etcd].into_iter().enumerate() {
            match v {
                Verdict::Accepted => accepted[k] += 1,
                Verdict::Rejected(_) => rejected[k] += 1,
            }
        }
    }
    eprintln!(
        "{n} inputs in {:?}: accepted {accepted:?}, rejected {rejected:?} (file, etcd); issue 23's duration in {huge}",
        started.elapsed()
    );
    // Both branches of the invariant are exercised, through both renderings, and the
    // value of issue 23 is among the inputs (it used to panic the parser).
    if n >= 300 {
        assert!(accepted.iter().all(|a| *a > 0), "{accepted:?}");
        assert!(rejected.iter().all(|r| *r > 0), "{rejected:?}");
        assert!(huge > 0, "no input carried issue 23's duration");
    }
}
