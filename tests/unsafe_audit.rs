//! The `unsafe` audit, run with every test: `unsafe` may appear only in the files that
//! sit on an FFI boundary (socket options, netlink socket options, IP Helper, the
//! control socket's credential and pipe ACL calls, a /proc constant, a counting test
//! allocator), and every `unsafe` there carries a `SAFETY:` comment just above it (or,
//! for the methods of an `unsafe impl`, above the impl). A new `unsafe` anywhere else,
//! or one without its comment, fails here with its file and line.

use std::path::{Path, PathBuf};

/// The FFI boundary: the only files allowed to contain `unsafe`, and why.
const ALLOWED: &[(&str, &str)] = &[
    (
        "bgp/src/session/sockopt.rs",
        "TCP_MD5SIG, IP_MINTTL setsockopt",
    ),
    (
        "fib/src/linux/watch.rs",
        "SO_RCVBUF and SO_ATTACH_FILTER on the netlink socket",
    ),
    ("fib/src/windows/iphlp.rs", "IP Helper calls"),
    ("fib/src/windows/notify.rs", "IP Helper change callbacks"),
    (
        "fib/src/windows/iphlp/tests.rs",
        "ConvertInterfaceIndexToLuid, to check the tables' LUID (Windows)",
    ),
    (
        "src/control/server.rs",
        "geteuid; the named pipe's security descriptor",
    ),
    ("interop/src/bench/measure.rs", "sysconf(_SC_CLK_TCK)"),
    (
        "interop/src/netns/interrupt.rs",
        "sigaction: tern-lab removes its namespaces on SIGTERM",
    ),
    (
        "src/daemon/memory.rs",
        "malloc_trim after a large snapshot; mallopt at start",
    ),
    ("tests/control_socket.rs", "geteuid"),
    (
        "src/control/server/tests.rs",
        "reading the named pipe's DACL back (Windows)",
    ),
    ("bgp/tests/allocations.rs", "a counting GlobalAlloc"),
    (
        "pack/tests/memory.rs",
        "a counting GlobalAlloc (a packed map's nodes)",
    ),
    (
        "src/daemon/metrics/process.rs",
        "sysconf (Linux); GetProcessMemoryInfo, GetProcessTimes, GetProcessHandleCount (Windows)",
    ),
    (
        "src/daemon/metrics/cost_tests.rs",
        "a counting GlobalAlloc (a scrape's allocations)",
    ),
];

/// How many lines above an `unsafe` its SAFETY comment may start (multi-line notes).
const SAFETY_REACH: usize = 4;
/// The same for the `# Safety` doc section of an `unsafe fn` (doc text sits between).
const DOC_REACH: usize = 8;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// The code part of a line: without a `//` comment, and without string literals, so
/// that text mentioning the word does not count.
fn code(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut prev = ' ';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
        } else if c == '/' && chars.peek() == Some(&'/') {
            break;
        } else {
            out.push(c);
        }
        prev = c;
    }
    out
}

fn has_unsafe(code: &str) -> bool {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == "unsafe")
}

/// Problems in one file's text: `unsafe` lines without a SAFETY comment above.
fn undocumented(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut bad = Vec::new();
    let mut in_unsafe_impl = false;
    for (i, line) in lines.iter().enumerate() {
        let c = code(line);
        if in_unsafe_impl && line.starts_with('}') {
            in_unsafe_impl = false;
        }
        if !has_unsafe(&c) || c.contains("forbid(unsafe_code)") {
            continue;
        }
        let documented = lines[i.saturating_sub(SAFETY_REACH)..=i]
            .iter()
            .any(|l| l.contains("SAFETY:"))
            || ((c.contains("unsafe fn") || (c.contains("unsafe extern") && c.contains(" fn ")))
                && lines[i.saturating_sub(DOC_REACH)..i]
                    .iter()
                    .any(|l| l.trim_start().starts_with("/// # Safety")));
        let impl_method = in_unsafe_impl && c.trim_start().starts_with("unsafe fn");
        if c.contains("unsafe impl") {
            in_unsafe_impl = true;
        }
        if !documented && !impl_method {
            bad.push(i + 1);
        }
    }
    bad
}

#[test]
fn unsafe_stays_at_the_ffi_boundary_with_a_safety_note() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(root, &mut files);
    assert!(files.len() > 50, "found only {} .rs files", files.len());
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(root)
            .unwrap_or(f)
            .to_string_lossy()
            .replace('\\', "/");
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let any = text
            .lines()
            .any(|l| has_unsafe(&code(l)) && !l.contains("forbid(unsafe_code)"));
        if !any {
            continue;
        }
        if !ALLOWED.iter().any(|(a, _)| *a == rel) {
            problems.push(format!(
                "{rel}: `unsafe` outside the FFI boundary (allowed: {:?})",
                ALLOWED.iter().map(|(a, _)| a).collect::<Vec<_>>()
            ));
            continue;
        }
        seen.push(rel.clone());
        for line in undocumented(&text) {
            problems.push(format!("{rel}:{line}: `unsafe` without a `SAFETY:` comment within {SAFETY_REACH} lines above (or, for an `unsafe fn`, a `# Safety` doc section)"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    // An allowed file that no longer needs `unsafe` should leave the list.
    let stale: Vec<_> = ALLOWED
        .iter()
        .filter(|(a, _)| !seen.iter().any(|s| s == a))
        .collect();
    assert!(
        stale.is_empty(),
        "no `unsafe` left in {stale:?}: remove them from ALLOWED"
    );
}

#[test]
fn the_audit_catches_what_it_should() {
    let ok = "// SAFETY: fine\nlet x = unsafe { f() };\n";
    assert!(undocumented(ok).is_empty());
    let bad = "let a = 1;\nlet x = unsafe { f() };\n";
    assert_eq!(undocumented(bad), vec![2]);
    let far = "// SAFETY: too far\n\n\n\n\nlet x = unsafe { f() };\n";
    assert_eq!(undocumented(far), vec![6]);
    let words = "let s = \"unsafe\"; // unsafe in a comment\n";
    assert!(undocumented(words).is_empty());
    let imp = "// SAFETY: forwards\nunsafe impl A for B {\n    unsafe fn f() {}\n}\n\n\n\nunsafe fn g() {}\n";
    assert_eq!(undocumented(imp), vec![8]);
    let doc = "/// Does g.\n///\n/// # Safety\n/// `p` is live.\nunsafe fn g(p: *const u8) {}\n";
    assert!(undocumented(doc).is_empty());
    let callback = "/// # Safety\n/// live.\nunsafe extern \"system\" fn cb(p: *const u8) {}\n";
    assert!(undocumented(callback).is_empty());
    assert_eq!(
        undocumented("\n\n\n\n\n\n\n\n\nunsafe extern \"C\" fn cb() {}\n"),
        vec![10]
    );
}
