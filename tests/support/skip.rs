//! What a test does when it cannot run here, shared by every crate's tests (included
//! with `#[path]`, since the Windows unit tests under Wine can depend on no test crate):
//! a loud `SKIP` on stderr, a line in the run's skip list (`$TERN_SKIP_LOG`, which
//! `./test.sh` prints at the end: the test harness hides stderr of passing tests), and
//! under `CI=true` a failure, unless the test is on the documented list of skips that
//! cannot run on this project's machines (`tests/skips-allowed.txt`).

use std::io::Write as _;

/// The documented skips: `name: why it cannot run here`, one per line.
const ALLOWED: &str = include_str!("../skips-allowed.txt");

/// Whether `test` is on the documented list.
pub fn allowed(test: &str) -> bool {
    ALLOWED
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .any(|(name, _)| name.trim() == test)
}

/// `test` cannot run here because of `reason`: say so where it shows, and fail under
/// `CI=true` unless the skip is documented.
pub fn skip(test: &str, reason: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let documented = allowed(test);
    if ci && !documented {
        panic!(
            "{test}: cannot run under CI=true: {reason} \
             (a skip that cannot be avoided on this project's machines belongs in tests/skips-allowed.txt)"
        );
    }
    eprintln!("SKIP {test}: {reason}");
    if let Some(path) = std::env::var_os("TERN_SKIP_LOG") {
        let line = format!(
            "{test}: {reason}{}\n",
            if documented { " (documented)" } else { "" }
        );
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut f) = file {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
