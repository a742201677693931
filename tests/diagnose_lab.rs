//! One namespace test per session fault `tern diagnose` names: the fault is made, the
//! finding must appear in all three places (`tern diagnose -o json`, the log line
//! `finding {kind} for {subject}: …`, the metric `tern_diagnostic_findings{kind,
//! severity}`), the fault is repaired, and the finding must clear from all three. Each
//! lab has a tern node, a BIRD node configured the way Calico's confd renders it
//! (whose `birdc show protocols all` for the same fault is captured beside tern's
//! finding) and a BIRD ToR. The times to appear and to clear are printed as `[lab
//! timing]` lines (and kept in `target/tmp/lab-timings.txt`); docs/diagnostics.md
//! tabulates them. Faults at the ToR are nftables rules inside the ToR's namespace and
//! edits of its bird.conf.
//!
//! Skips without root, BIRD or nft; fails under CI=true.

#![cfg(target_os = "linux")]

#[path = "support/lab.rs"]
mod lab_support;

#[path = "support/diag.rs"]
mod diag;

use diag::{bird_view, bird_view_down, in_ns, reconfigure_bird, summary, Watch, WAIT, WAIT_HOLD};
use tern_interop::lab::plan::{TOR_AS, TOR_V4};

/// The BIRD node's protocol toward the ToR (confd names global peers `Global_<ip>`;
/// the lab names the ToR `tor`).
const BIRD_TO_TOR: &str = "Global_tor";

/// An nftables table in namespace `ns` that treats every TCP segment to or from port
/// 179 with `verdict` (`drop`, or `reject with tcp reset`).
fn firewall_bgp(ns: &str, verdict: &str) {
    in_ns(ns, "nft", &["add", "table", "inet", "tern_diag"]);
    in_ns(
        ns,
        "nft",
        &[
            "add",
            "chain",
            "inet",
            "tern_diag",
            "input",
            "{ type filter hook input priority 0 ; }",
        ],
    );
    for port in ["dport", "sport"] {
        let rule = format!("add rule inet tern_diag input tcp {port} 179 {verdict}");
        let words: Vec<&str> = rule.split(' ').collect();
        in_ns(ns, "nft", &words);
    }
}

fn unfirewall_bgp(ns: &str) {
    in_ns(ns, "nft", &["delete", "table", "inet", "tern_diag"]);
}

/// The ToR's words in tern's subjects: its BGPPeer's name or its address.
const TOR: &[&str] = &["tor", TOR_V4];

#[test]
fn peer_not_answering_appears_and_clears() {
    let test = "diag_not_answering";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgna-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let tor = diag::tor_ns(&lab);
    let fault = w.mark();
    let t0 = std::time::Instant::now();
    firewall_bgp(&tor, "drop");
    // The live sessions end with the hold timer (9 s); then connect attempts time out.
    let established = || {
        lab.tern_cli(1, &["peers", TOR_V4, "-o", "json"])
            .1
            .contains("\"Established\"")
    };
    let _ = tern_interop::peers::wait_for("the session to end", WAIT_HOLD, || !established());
    let down = t0.elapsed();
    let seen = w.appear("peer-not-answering", TOR, fault, WAIT_HOLD, |_| Ok(()));
    lab_support::record(&format!(
        "{test}: the session ended (hold timer) {:.1} s after the fault; the finding followed {:.1} s later",
        down.as_secs_f64(),
        (seen.after.saturating_sub(down)).as_secs_f64()
    ));
    bird_view_down(test, &lab, Some(2), BIRD_TO_TOR, WAIT);
    let repair = w.mark();
    unfirewall_bgp(&tor);
    let cleared = w.clear(&seen, repair, WAIT);
    summary(test, "the ToR drops TCP 179", &seen, cleared);
}

#[test]
fn connection_refused_appears_and_clears() {
    let test = "diag_refused";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgcr-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let tor = diag::tor_ns(&lab);
    let fault = w.mark();
    firewall_bgp(&tor, "reject with tcp reset");
    let seen = w.appear("connection-refused", TOR, fault, WAIT, |_| Ok(()));
    bird_view_down(test, &lab, Some(2), BIRD_TO_TOR, WAIT);
    let repair = w.mark();
    unfirewall_bgp(&tor);
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "nothing listens on TCP 179 at the ToR (TCP reset)",
        &seen,
        cleared,
    );
}

#[test]
fn notification_names_both_as_numbers_and_clears() {
    let test = "diag_notification";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgno-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let tor = diag::bird_dir(&lab, None);
    let right = format!("local as {TOR_AS};");
    let wrong_as = TOR_AS + 1;
    let wrong = format!("local as {wrong_as};");
    let fault = w.mark();
    reconfigure_bird(&tor, &right, &wrong);
    let seen = w.appear("notification", TOR, fault, WAIT, |_| Ok(()));
    for asn in [TOR_AS, wrong_as] {
        assert!(
            seen.evidence.contains(&asn.to_string()),
            "the notification's evidence does not name AS {asn}: {}",
            seen.evidence
        );
    }
    bird_view_down(test, &lab, Some(2), BIRD_TO_TOR, WAIT);
    let repair = w.mark();
    reconfigure_bird(&tor, &wrong, &right);
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "the ToR runs AS 65002, the BGPPeer says 65001",
        &seen,
        cleared,
    );
}

#[test]
fn duplicate_router_id_appears_and_clears() {
    let test = "diag_router_id";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgri-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let (mine, theirs) = match (lab.node(1), lab.node(2)) {
        (Ok(a), Ok(b)) => (a.v4.clone(), b.v4.clone()),
        _ => panic!("no node-1 or node-2"),
    };
    // The BIRD node (a mesh peer, iBGP) takes tern's router ID; its mesh session is
    // restarted so the OPENs carry it.
    let bird = diag::bird_dir(&lab, Some(2));
    let mesh = format!("Mesh_{}", mine.replace('.', "_"));
    let restart = || {
        let _ = tern_interop::peers::cli_at(
            tern_interop::peers::Kind::Bird,
            &bird,
            &["restart", &mesh],
        );
    };
    let (own_id, taken) = (format!("router id {theirs};"), format!("router id {mine};"));
    let fault = w.mark();
    reconfigure_bird(&bird, &own_id, &taken);
    restart();
    let seen = w.appear(
        "duplicate-router-id",
        &["node-2", theirs.as_str()],
        fault,
        WAIT,
        |_| Ok(()),
    );
    assert!(
        seen.evidence.contains(&mine),
        "the evidence does not name the router ID {mine}: {}",
        seen.evidence
    );
    bird_view_down(test, &lab, Some(2), &mesh, WAIT);
    let repair = w.mark();
    reconfigure_bird(&bird, &taken, &own_id);
    restart();
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "a mesh peer (BIRD) uses tern's router ID",
        &seen,
        cleared,
    );
}

#[test]
fn md5_mismatch_appears_and_clears() {
    let test = "diag_md5";
    let _one = diag::serial();
    let password = "s3cret-dg";
    let Some((lab, _tmp)) = diag::up(
        test,
        "dgmd-",
        |s| {
            s.tor_password = Some(password.into());
            s.tor_peer_password = Some(password.into());
        },
        // The BIRD node's BGPPeer has the password too, as confd renders it.
        |lab| {
            let to_tor = format!("neighbor {TOR_V4} as {TOR_AS};");
            reconfigure_bird(
                &diag::bird_dir(lab, Some(2)),
                &to_tor,
                &format!("{to_tor} password \"{password}\";"),
            );
        },
    ) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let tor = diag::bird_dir(&lab, None);
    let (right, wrong) = (
        format!("password \"{password}\";"),
        "password \"another-dg\";".to_string(),
    );
    let fault = w.mark();
    reconfigure_bird(&tor, &right, &wrong);
    let seen = w.appear("md5-mismatch", TOR, fault, WAIT, |_| Ok(()));
    bird_view_down(test, &lab, Some(2), BIRD_TO_TOR, WAIT);
    let repair = w.mark();
    reconfigure_bird(&tor, &wrong, &right);
    let cleared = w.clear(&seen, repair, WAIT);
    summary(test, "the ToR's TCP-MD5 password differs", &seen, cleared);
    // The BIRD node's session is back too (its view after the repair, for the docs).
    bird_view(
        test,
        &lab,
        Some(2),
        &["show", "protocols", "all", BIRD_TO_TOR],
    );
}
