//! The soak in short (`tern_interop::soak`): a 10-node tern mesh with a BIRD ToR and
//! pods, one minute of churn (blocks moving between nodes, workload routes added and
//! deleted) and flaps (kill -9 + restart, link down past the hold time), every tern's
//! RSS and CPU sampled every 2 s. Every churn step must reach every node, the lab must
//! reconverge after every flap, no churned route may be left, every pod must reach
//! every other, and the RSS of the never-restarted terns must stay flat.
//!
//! The long run is `./test.sh --soak MINUTES` (`tern-lab soak`, release build).
//! Skips without root or BIRD; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::time::Duration;

use tern_interop::soak::{self, SoakOpts};

#[test]
fn ten_nodes_under_churn_and_flaps_for_a_minute() {
    let test = "soak";
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail(test, &reason);
        return;
    }
    if !tern_interop::have_program("bird") {
        tern_interop::skip_or_fail(test, "bird is not installed");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("soak-short");
    let _ = std::fs::remove_dir_all(&dir);
    let opts = SoakOpts {
        prefix: "t9s-".into(),
        dir: dir.clone(),
        tern: PathBuf::from(env!("CARGO_BIN_EXE_tern")),
        nodes: 10,
        duration: Duration::from_secs(60),
        sample_every: Duration::from_secs(2),
    };
    let report = soak::run(&opts, |l| eprintln!("[soak] {l}"))
        .unwrap_or_else(|e| panic!("soak did not complete: {e} (logs in {})", dir.display()));
    eprintln!("{}", report.render());
    assert!(report.cycles >= 2, "only {} cycles", report.cycles);
    assert!(report.kills >= 1 && report.link_flaps >= 1, "{report:?}");
    assert!(!report.samples.is_empty());
    let failures = report.failures();
    assert!(
        failures.is_empty(),
        "soak failed:\n  {}\n(logs in {})",
        failures.join("\n  "),
        dir.display()
    );
}
