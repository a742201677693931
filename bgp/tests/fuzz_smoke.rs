//! The fuzz target's checks on stable Rust, in CI: every seed (captured BIRD, GoBGP
//! and FRR messages, plus encoded ones) and a fixed number of deterministic mutations
//! of each. Coverage-guided fuzzing proper is `cargo fuzz run decode` (README).

use std::path::Path;

fn seeds() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/decode");
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read(e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// xorshift64: a deterministic mutation source, so a failure reproduces.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

#[test]
fn seeds_and_their_mutations_keep_the_invariants() {
    let seeds = seeds();
    assert!(
        seeds.len() >= 20,
        "expected the committed seed corpus, found {} files",
        seeds.len()
    );
    let mutations: usize = std::env::var("TERN_FUZZ_SMOKE_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for seed in &seeds {
        tern_bgp::fuzzing::check_decode(seed);
        for _ in 0..mutations {
            let mut m = seed.clone();
            let flips = 1 + next(&mut state) % 4;
            for _ in 0..flips {
                let r = next(&mut state);
                match r % 4 {
                    // Mostly flip body bytes; sometimes the options byte, sometimes cut.
                    0 if m.len() > 20 => {
                        let at = 20 + (r >> 8) as usize % (m.len() - 20);
                        m[at] = (r >> 40) as u8;
                    }
                    1 if !m.is_empty() => m[0] = (r >> 16) as u8,
                    2 if m.len() > 20 => m.truncate(20 + (r >> 8) as usize % (m.len() - 20)),
                    _ => {
                        let at = (r >> 8) as usize % m.len().max(1);
                        if let Some(b) = m.get_mut(at) {
                            *b ^= 1 << (r % 8);
                        }
                    }
                }
            }
            tern_bgp::fuzzing::check_decode(&m);
        }
    }
}
