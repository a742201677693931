//! Hostile input crafted by ExaBGP (Debian `exabgp`), against a real tern speaker on
//! loopback: what ExaBGP can send that a well-behaved peer would not is a generic
//! attribute of any code and flags. Two ExaBGP neighbours:
//! - 127.0.0.61 sends a plain route and one carrying an unknown optional transitive
//!   attribute: both must be taken, the unknown attribute kept for passing on
//!   (RFC 4271 §5);
//! - 127.0.0.62 sends a route with an unrecognized *well-known* attribute: tern must
//!   reset that session with UPDATE Message Error / Unrecognized Well-known Attribute
//!   (RFC 4271 §6.3, not revised by RFC 7606), and never take the route, while the
//!   first neighbour's session and routes carry on.
//!
//! The raw-socket cases for every RFC 7606 rule are in `bgp/tests/hostile_input.rs`; this one
//! checks the same code against another implementation's encoder.
#![cfg(target_os = "linux")]

// The raw peer and speaker harness of tern-bgp's own hostile-input tests.
#[path = "../../bgp/tests/common/mod.rs"]
mod common;
use common::*;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tern_bgp::fsm::OPEN_HOLD_TIME;

/// ExaBGP, stopped by its PID when dropped.
struct Exa(Child);

impl Drop for Exa {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn neighbour(n: u8, port: u16, routes: &str) -> String {
    format!(
        "neighbor 127.0.0.1 {{\n  router-id 198.51.100.{id};\n  local-address 127.0.0.{n};\n  local-as 64512;\n  peer-as 64512;\n  connect {port};\n  family {{ ipv4 unicast; }}\n  static {{\n{routes}  }}\n}}\n",
        id = 100 + u16::from(n)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exabgp_crafted_attributes_are_handled_as_the_rfcs_say() {
    let case = "exabgp";
    if !loopback_usable(case) {
        return;
    }
    if !tern_interop::have_program("exabgp") {
        tern_interop::skip_or_fail(case, "exabgp is not installed");
        return;
    }
    let port = 17949;
    let tern = Tern::start(
        port,
        vec![
            peer_config(61, OPEN_HOLD_TIME),
            peer_config(62, OPEN_HOLD_TIME),
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let conf = dir.path().join("exabgp.conf");
    let text = [
        neighbour(
            61,
            port,
            "    route 198.18.61.0/24 next-hop 198.51.100.200;\n    route 198.18.63.0/24 next-hop 198.51.100.200 attribute [ 0x99 0xc0 0x01020304 ];\n",
        ),
        neighbour(
            62,
            port,
            "    route 198.18.62.0/24 next-hop 198.51.100.200 attribute [ 0x98 0x40 0x0102 ];\n",
        ),
    ]
    .concat();
    std::fs::write(&conf, text).unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("exabgp.log");
    let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}"));
    let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let exa = Exa(Command::new("exabgp")
        .arg(&conf)
        .env("exabgp.daemon.user", "root")
        .env("exabgp.daemon.daemonize", "false")
        .env("exabgp.log.destination", "stdout")
        .env("exabgp.api.cli", "false")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("exabgp: {e}")));
    let exa_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // The well-behaved neighbour's routes, the unknown attribute kept.
    let plain = match tern
        .wait("198.18.61.0/24", true, Duration::from_secs(30))
        .await
    {
        Ok(Some(b)) => b,
        _ => panic!(
            "{case}: no route from ExaBGP; tern: {:?}\nexabgp:\n{}",
            tern.log(),
            exa_log()
        ),
    };
    assert!(
        plain.best.attrs.unknown.is_empty(),
        "{:?}",
        plain.best.attrs
    );
    let unknown = tern.present("198.18.63.0/24", case).await;
    let kept: Vec<u8> = unknown.best.attrs.unknown.iter().map(|a| a.code).collect();
    assert_eq!(kept, [0x99], "{:?}", unknown.best.attrs);
    assert_eq!(
        unknown.best.attrs.unknown[0].data.as_ref(),
        &[1, 2, 3, 4],
        "the value passes through unchanged"
    );

    // The other neighbour is reset, each time it comes back, and its route never used.
    let want = "down 127.0.0.62: sent NOTIFICATION UPDATE Message Error / Unrecognized Well-known Attribute";
    let end = Instant::now() + Duration::from_secs(30);
    while !tern.logged(want) {
        assert!(
            Instant::now() < end,
            "{case}: no reset of 127.0.0.62; tern: {:?}\nexabgp:\n{}",
            tern.log(),
            exa_log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tern.absent(
        "198.18.62.0/24",
        case,
        "a route with an unrecognized well-known attribute was used",
    )
    .await;
    assert!(
        !tern.log().iter().any(|l| l.starts_with("down 127.0.0.61")),
        "{case}: the well-behaved neighbour's session went down: {:?}",
        tern.log()
    );
    tern.present("198.18.61.0/24", case).await;
    drop(exa);
    tern.stop().await;
}
