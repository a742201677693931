//! The config fuzz targets' checks on stable Rust, in CI: every seed (the example
//! clusters and `tern.yaml` files, etcd values) and a fixed number of deterministic
//! mutations of each, byte-wise and line-wise (YAML is about lines and indentation).
//! Coverage-guided fuzzing proper is `cargo fuzz run cluster|tern_yaml` in
//! `config/fuzz` (README).

use std::path::Path;

/// The seeds of a target, and whether each is hostile (`hostile-*`: an alias bomb, deep
/// nesting): those are checked as they are but not mutated, since each costs the
/// parser its whole budget and the mutations would mostly stay bombs.
fn seeds(target: &str) -> Vec<(bool, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut out: Vec<(bool, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let hostile = e.file_name().to_string_lossy().starts_with("hostile-");
                    std::fs::read(e.path()).ok().map(|b| (hostile, b))
                })
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

/// Bytes that matter to YAML and to the resources: punctuation, indentation, numbers,
/// addresses, and the document separator.
const TOKENS: [&[u8]; 16] = [
    b":",
    b"- ",
    b"  ",
    b"\n",
    b"---\n",
    b"&a ",
    b"*a",
    b"{",
    b"[",
    b"\"",
    b"0",
    b"/33",
    b"65536",
    b"::",
    b"4294967296",
    b"!!binary ",
];

fn mutate(seed: &[u8], state: &mut u64) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..1 + next(state) % 3 {
        let r = next(state);
        let at = (r >> 8) as usize % (m.len() + 1);
        match r % 6 {
            0 if at < m.len() => m[at] = (r >> 40) as u8,
            1 => {
                let t = TOKENS[(r >> 32) as usize % TOKENS.len()];
                m.splice(at..at, t.iter().copied());
            }
            2 if at < m.len() => {
                let end = (at + 1 + (r >> 48) as usize % 16).min(m.len());
                m.drain(at..end);
            }
            _ => {
                // Whole lines: duplicate, delete, or move one.
                let text = String::from_utf8_lossy(&m).into_owned();
                let mut lines: Vec<&str> = text.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                let i = (r >> 16) as usize % lines.len();
                let j = (r >> 40) as usize % lines.len();
                match r % 3 {
                    0 => lines.insert(j, lines[i]),
                    1 => {
                        lines.remove(i);
                    }
                    _ => lines.swap(i, j),
                }
                m = lines.join("\n").into_bytes();
            }
        }
    }
    m
}

fn mutations(default: usize) -> usize {
    std::env::var("TERN_FUZZ_SMOKE_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn cluster_files_and_their_mutations_keep_the_invariants() {
    let seeds = seeds("cluster");
    assert!(
        seeds.len() >= 7,
        "expected the committed seeds, found {}",
        seeds.len()
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    // Parsing YAML unoptimised costs milliseconds: a few hundred per seed keep this
    // to seconds; coverage-guided fuzzing does the volume.
    let n = mutations(200);
    for (hostile, seed) in &seeds {
        let t = std::time::Instant::now();
        tern_config::fuzzing::check_cluster(seed);
        // The YAML parser's budgets (nodes, recursion) end a bomb quickly.
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t.elapsed()
        );
        if *hostile {
            continue;
        }
        for _ in 0..n {
            tern_config::fuzzing::check_cluster(&mutate(seed, &mut state));
        }
    }
}

#[test]
fn tern_yaml_files_and_their_mutations_keep_the_invariants() {
    let seeds = seeds("tern_yaml");
    assert!(
        seeds.len() >= 5,
        "expected the committed seeds, found {}",
        seeds.len()
    );
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let n = mutations(2_000);
    for (_, seed) in &seeds {
        tern_config::fuzzing::check_daemon(seed);
        for _ in 0..n {
            tern_config::fuzzing::check_daemon(&mutate(seed, &mut state));
        }
    }
}
