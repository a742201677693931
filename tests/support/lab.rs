//! What the lab tests (`lab_scenarios`, `kube_lab`) share: whether a lab can run here,
//! waiting for it to converge, recording timings for test.sh's summary, and failing
//! with the end of every node's log. Included with `#[path]`.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use tern_interop::lab::Lab;

/// How long a lab may take to converge after its start.
const CONVERGE: Duration = Duration::from_secs(60);

/// How many lines of each node's log a failure shows.
const LOG_LINES: usize = 25;

/// Whether `test` can build a lab here (root, namespaces, and the programs `needs`);
/// when not, says why (a failure under CI=true).
pub fn available(test: &str, needs: &[&str]) -> bool {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return false;
    }
    for p in needs {
        if !tern_interop::have_program(p) {
            tern_interop::skip_or_fail(test, &format!("{p} is not installed"));
            return false;
        }
    }
    true
}

/// Waits for `lab` to converge and records how long it took (`what` names the lab in
/// the timing line); fails the test when it does not.
pub fn converged(test: &str, lab: &Lab, what: &str) {
    match lab.wait_converged(CONVERGE) {
        Ok(t) => record(&format!(
            "{test}: {what} converged {:.1} s after start",
            t.as_secs_f64()
        )),
        Err(e) => fail(lab, &format!("{e}")),
    }
}

/// Records a timing line (printed, and kept in `target/tmp/lab-timings.txt` for
/// test.sh's summary).
pub fn record(line: &str) {
    eprintln!("[lab timing] {line}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("lab-timings.txt"))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Panics with `msg` and the end of every tern log.
pub fn fail(lab: &Lab, msg: &str) -> ! {
    panic!("{msg}\n{}", lab.log_tails(LOG_LINES));
}
