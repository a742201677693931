//! The fuzz targets' checks on stable Rust, in CI: every seed and a fixed number of
//! deterministic mutations of each. `decode`: captured BIRD, GoBGP and FRR messages
//! plus encoded ones; `fsm`: event scripts that bring sessions up, collide, stall and
//! fail. Coverage-guided fuzzing proper is `cargo fuzz run decode|fsm` (README).

use std::path::Path;

fn seeds() -> Vec<Vec<u8>> {
    seeds_of("decode")
}

fn seeds_of(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
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
    let mutations = mutations();
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

fn mutations() -> usize {
    std::env::var("TERN_FUZZ_SMOKE_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// A script mutation: overwrite, flip, insert, delete or duplicate a run of bytes.
fn mutate_script(seed: &[u8], state: &mut u64) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..1 + next(state) % 4 {
        let r = next(state);
        let at = (r >> 8) as usize % (m.len() + 1);
        match r % 5 {
            0 if at < m.len() => m[at] = (r >> 40) as u8,
            1 if at < m.len() => m[at] ^= 1 << (r % 8),
            2 => m.insert(at, (r >> 40) as u8),
            3 if at < m.len() => {
                m.remove(at);
            }
            _ => {
                let end = (at + (r >> 48) as usize % 8).min(m.len());
                let run = m[at..end].to_vec();
                m.splice(at..at, run);
            }
        }
    }
    m
}

#[test]
fn fsm_scripts_and_their_mutations_keep_the_invariants() {
    let seeds = seeds_of("fsm");
    assert!(
        seeds.len() >= 8,
        "expected the committed fsm seeds, found {}",
        seeds.len()
    );
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let n = mutations();
    for seed in &seeds {
        tern_bgp::fuzzing::check_fsm(seed);
        for _ in 0..n {
            tern_bgp::fuzzing::check_fsm(&mutate_script(seed, &mut state));
        }
    }
    // Plain noise too: scripts no seed resembles.
    for _ in 0..n {
        let len = next(&mut state) % 200;
        let noise: Vec<u8> = (0..len).map(|_| next(&mut state) as u8).collect();
        tern_bgp::fuzzing::check_fsm(&noise);
    }
}
