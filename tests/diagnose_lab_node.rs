//! One namespace test per node fault `tern diagnose` names (the session faults are in
//! `diagnose_lab.rs`): an interface set down, IP forwarding turned off, a peer on
//! another subnet, a next hop that stops answering ARP (INCOMPLETE, then FAILED), and
//! a next hop reached only through a gateway, then through nothing (and the route the
//! kernel refuses for it), the file datastore gone. Each fault is made,
//! its finding must appear in all three places (`tern diagnose -o json`, the log line,
//! the `tern_diagnostic_findings` metric), the fault is repaired, and the finding must
//! clear from all three; the same fault is made on the BIRD node beside tern and its
//! `birdc` view captured. Times are printed as `[lab timing]` lines.
//!
//! Skips without root, BIRD or nft; fails under CI=true.

#![cfg(target_os = "linux")]

#[path = "support/lab.rs"]
mod lab_support;

#[path = "support/diag.rs"]
mod diag;

use diag::{bird_view, bird_view_down, in_ns, node_ns, reconfigure_bird, summary, Watch, WAIT};
use tern_interop::lab::plan::{GATEWAY_V4, TOR_AS, TOR_V4};
use tern_interop::netns::Netns;
use tern_interop::process::Daemon;

const BIRD_TO_TOR: &str = "Global_tor";

fn link(ns: &str, dev: &str, how: &[&str]) {
    let mut args = vec!["link", "set", dev];
    args.extend_from_slice(how);
    in_ns(ns, "ip", &args);
}

#[test]
fn interface_down_replaces_the_layer2_finding_and_clears() {
    let test = "diag_interface_down";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgif-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let (tern_ns, bird_ns) = (node_ns(&lab, 1), node_ns(&lab, 2));
    let no_layer2 = |all: &[serde_json::Value]| match all
        .iter()
        .find(|f| f["kind"] == "no-layer2-reachability")
    {
        Some(f) => Err(format!(
            "a layer-2 finding while the interface is down: {f}"
        )),
        None => Ok(()),
    };
    let fault = w.mark();
    link(&tern_ns, "eth0", &["down"]);
    link(&bird_ns, "eth0", &["down"]);
    let seen = w.appear("interface-down", &["eth0"], fault, WAIT, no_layer2);
    // What the peers behind it suffer is named too.
    assert!(
        seen.evidence.contains(TOR_V4) || seen.evidence.contains("tor"),
        "the evidence does not name the ToR behind eth0: {}",
        seen.evidence
    );
    bird_view_down(test, &lab, Some(2), BIRD_TO_TOR, WAIT);
    let repair = w.mark();
    link(&tern_ns, "eth0", &["up"]);
    link(&bird_ns, "eth0", &["up"]);
    let cleared = w.clear(&seen, repair, WAIT);
    let log = lab.tern_log(1);
    let since = log.get(fault_offset(&log, &seen.line)..).unwrap_or("");
    assert!(
        !since.contains("finding no-layer2-reachability for"),
        "a layer-2 finding was logged while or after the interface was down"
    );
    summary(test, "the node's eth0 set down", &seen, cleared);
}

/// Where the appear line is in the log (the part from there on is checked).
fn fault_offset(log: &str, line: &str) -> usize {
    log.find(line).unwrap_or(0)
}

#[test]
fn forwarding_disabled_appears_and_clears() {
    let test = "diag_forwarding";
    let _one = diag::serial();
    // Dual stack: a finding per family, each with its own life cycle.
    let Some((lab, _tmp)) = diag::up(test, "dgfw-", |s| s.ipv6 = true, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let set = |ns: &str, on: &str| {
        in_ns(
            ns,
            "sysctl",
            &[
                "-qw",
                &format!("net.ipv4.ip_forward={on}"),
                &format!("net.ipv6.conf.all.forwarding={on}"),
            ],
        );
    };
    let (tern_ns, bird_ns) = (node_ns(&lab, 1), node_ns(&lab, 2));
    let fault = w.mark();
    set(&tern_ns, "0");
    set(&bird_ns, "0");
    let seen = w.appear("forwarding-disabled", &["IPv4"], fault, WAIT, |_| Ok(()));
    let seen6 = w.appear("forwarding-disabled", &["IPv6"], fault, WAIT, |_| Ok(()));
    bird_view(
        test,
        &lab,
        Some(2),
        &["show", "protocols", "all", BIRD_TO_TOR],
    );
    let repair = w.mark();
    set(&tern_ns, "1");
    set(&bird_ns, "1");
    let cleared = w.clear(&seen, repair, WAIT);
    let cleared6 = w.clear(&seen6, repair, WAIT);
    summary(test, "net.ipv4.ip_forward=0 on the node", &seen, cleared);
    summary(
        test,
        "net.ipv6.conf.all.forwarding=0 on the node",
        &seen6,
        cleared6,
    );
}

#[test]
fn peer_on_another_subnet_appears_and_clears() {
    let test = "diag_layer2";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgl2-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let far = "203.0.113.50";
    let cluster = lab.spec().cluster_file();
    let before = std::fs::read_to_string(&cluster).unwrap_or_else(|e| panic!("{e}"));
    let with_far = format!(
        "{before}---\napiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {{name: far-peer}}\n\
         spec: {{node: node-1, peerIP: \"{far}\", asNumber: {TOR_AS}}}\n"
    );
    let bird = diag::bird_dir(&lab, Some(2));
    let to_tor = format!("protocol bgp {BIRD_TO_TOR} from");
    let far_proto = format!(
        "protocol bgp Global_203_0_113_50 from bgp_template {{ neighbor {far} as {TOR_AS}; }}\n{to_tor}"
    );
    let fault = w.mark();
    replace_file(&cluster, &with_far);
    reconfigure_bird(&bird, &to_tor, &far_proto);
    let seen = w.appear(
        "no-layer2-reachability",
        &["far-peer", far],
        fault,
        WAIT,
        |_| Ok(()),
    );
    bird_view(
        test,
        &lab,
        Some(2),
        &["show", "protocols", "all", "Global_203_0_113_50"],
    );
    let repair = w.mark();
    replace_file(&cluster, &before);
    reconfigure_bird(&bird, &far_proto, &to_tor);
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "a BGPPeer at 203.0.113.50, a subnet the node is not on",
        &seen,
        cleared,
    );
}

/// Replaces a file the way an editor does (a new file renamed over it), so a reader
/// never sees half of it.
fn replace_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{e}"));
}

/// A host on the nodes' LAN (`{prefix}gw`, 198.51.100.3) that the ToR names as the
/// next hop of 198.18.101.0/24 (a third-party next hop: BIRD keeps a static route's
/// gateway on the shared network).
const GW: &str = "198.51.100.3";
const VIA_GW: &str = "198.18.101.0/24";

fn gateway_host(lab: &tern_interop::lab::Lab) -> Netns {
    let prefix = &lab.spec().prefix;
    let gw = Netns::create(&format!("{prefix}gw")).unwrap_or_else(|e| panic!("{e}"));
    let sw = lab.spec().switch_ns();
    gw.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "p-gw", "netns", &sw,
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    for args in [
        &["link", "set", "p-gw", "master", "br0"][..],
        &["link", "set", "p-gw", "up"],
    ] {
        let mut full = vec!["-n", sw.as_str()];
        full.extend_from_slice(args);
        tern_interop::netns::run("ip", &full).unwrap_or_else(|e| panic!("{e}"));
    }
    gw.ip(&["link", "set", "eth0", "up"])
        .unwrap_or_else(|e| panic!("{e}"));
    gw.add_addr("eth0", &format!("{GW}/24"))
        .unwrap_or_else(|e| panic!("{e}"));
    gw
}

/// Pings `to` from namespace `ns` five times a second until dropped: traffic that
/// makes the kernel resolve the next hop.
fn pinger(ns: &str, to: &str, log: &std::path::Path) -> Daemon {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns, "ping", "-i", "0.2", "-q", to]);
    Daemon::spawn("ping", c, log).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn next_hop_without_arp_is_incomplete_then_failed_and_clears() {
    let test = "diag_neighbour";
    let _one = diag::serial();
    let Some((lab, tmp)) = diag::up(test, "dgnb-", |_| {}, |_| {}) else {
        return;
    };
    let gw = gateway_host(&lab);
    reconfigure_bird(
        &diag::bird_dir(&lab, None),
        "protocol device { }",
        &format!("protocol device {{ }}\nprotocol static {{ ipv4; route {VIA_GW} via {GW}; }}"),
    );
    let tern_ns = node_ns(&lab, 1);
    let installed =
        || in_ns(&tern_ns, "ip", &["route", "show", VIA_GW]).contains(&format!("via {GW}"));
    if tern_interop::peers::wait_for("the route via the gateway host", WAIT, installed).is_err() {
        lab_support::fail(&lab, &format!("node-1 never installed {VIA_GW} via {GW}"));
    }
    let w = Watch::on(&lab, test);
    let hop = &["next", GW][..];
    let arp = |on: &str| link(gw.name(), "eth0", &["arp", on]);
    let forget = || {
        let _ = tern_interop::netns::run(
            "ip",
            &["-n", tern_ns.as_str(), "neigh", "del", GW, "dev", "eth0"],
        );
    };

    // INCOMPLETE: traffic keeps asking, nobody answers.
    let ping = pinger(&tern_ns, "198.18.101.1", &tmp.path().join("ping.log"));
    let fault = w.mark();
    arp("off");
    forget();
    let seen = w.appear("neighbour-incomplete", hop, fault, WAIT, |_| Ok(()));
    bird_view(test, &lab, Some(2), &["show", "route", "all", VIA_GW]);
    let repair = w.mark();
    arp("on");
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "the next hop stops answering ARP, traffic flowing",
        &seen,
        cleared,
    );
    drop(ping);

    // FAILED: one packet asked, nobody answered, nothing asks again.
    let fault = w.mark();
    arp("off");
    forget();
    // Unanswered, so `ping` fails: only its ARP request matters.
    let _ = tern_interop::netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &tern_ns,
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "-q",
            "198.18.101.1",
        ],
    );
    let seen = w.appear("neighbour-failed", hop, fault, WAIT, |_| Ok(()));
    let repair = w.mark();
    arp("on");
    let _ = tern_interop::netns::run(
        "ip",
        &[
            "netns",
            "exec",
            &tern_ns,
            "ping",
            "-c",
            "2",
            "-W",
            "1",
            "-q",
            "198.18.101.1",
        ],
    );
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "the next hop stops answering ARP, traffic stopped",
        &seen,
        cleared,
    );
}

#[test]
fn next_hop_through_a_gateway_then_through_nothing_appears_and_clears() {
    let test = "diag_recursive";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgrc-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    // The ToR announces 198.18.102.0/24 with the next hop 203.0.113.50, which node-1
    // reaches only through its default gateway.
    let far = "203.0.113.50";
    let tor = diag::bird_dir(&lab, None);
    let plain = "protocol device { }".to_string();
    let with_far =
        "protocol device { }\nprotocol static far { ipv4; route 198.18.102.0/24 blackhole; }"
            .to_string();
    let tagged = "if source = RTS_STATIC then {";
    let far_hop = format!("if net = 198.18.102.0/24 then bgp_next_hop = {far}; {tagged}");
    let (tern_ns, bird_ns) = (node_ns(&lab, 1), node_ns(&lab, 2));
    let hop = &[far][..];
    let announce = || {
        reconfigure_bird(&tor, &plain, &with_far);
        reconfigure_bird(&tor, tagged, &far_hop);
    };
    let withdraw = || {
        reconfigure_bird(&tor, &far_hop, tagged);
        reconfigure_bird(&tor, &with_far, &plain);
    };
    let fault = w.mark();
    announce();
    let recursive = w.appear("recursive-next-hop", hop, fault, WAIT, |_| Ok(()));
    // The kernel will not take a gateway that is not on a connected network.
    let refused = w.appear("route-refused", &["198.18.102.0/24"], fault, WAIT, |_| {
        Ok(())
    });
    bird_view(
        test,
        &lab,
        Some(2),
        &["show", "route", "all", "198.18.102.0/24"],
    );
    let repair = w.mark();
    withdraw();
    let cleared = w.clear(&recursive, repair, WAIT);
    let refused_cleared = w.clear(&refused, repair, WAIT);
    summary(
        test,
        "a next hop 203.0.113.50 off the node's subnets, through its gateway",
        &recursive,
        cleared,
    );
    summary(
        test,
        "a route whose next hop 203.0.113.50 the kernel cannot use",
        &refused,
        refused_cleared,
    );

    // The same route on nodes without a default route: nothing reaches the next hop.
    for ns in [&tern_ns, &bird_ns] {
        in_ns(ns, "ip", &["route", "del", "default"]);
    }
    let fault = w.mark();
    announce();
    let unresolved = w.appear("unresolved-next-hop", hop, fault, WAIT, |_| Ok(()));
    bird_view(
        test,
        &lab,
        Some(2),
        &["show", "route", "all", "198.18.102.0/24"],
    );
    let repair = w.mark();
    withdraw();
    let cleared = w.clear(&unresolved, repair, WAIT);
    for ns in [&tern_ns, &bird_ns] {
        in_ns(ns, "ip", &["route", "add", "default", "via", GATEWAY_V4]);
    }
    summary(
        test,
        "a route whose next hop nothing reaches (no default route)",
        &unresolved,
        cleared,
    );
}

#[test]
fn datastore_unavailable_appears_and_clears() {
    let test = "diag_datastore";
    let _one = diag::serial();
    let Some((lab, _tmp)) = diag::up(test, "dgds-", |_| {}, |_| {}) else {
        return;
    };
    let w = Watch::on(&lab, test);
    let cluster = lab.spec().cluster_file();
    let aside = cluster.with_extension("aside");
    let fault = w.mark();
    std::fs::rename(&cluster, &aside).unwrap_or_else(|e| panic!("{e}"));
    let seen = w.appear("datastore-unavailable", &[], fault, WAIT, |_| Ok(()));
    // The configuration in force stays: the sessions are still up.
    let (_, status) = lab.tern_cli(1, &["status"]);
    assert!(status.contains("Established"), "{status}");
    let repair = w.mark();
    std::fs::rename(&aside, &cluster).unwrap_or_else(|e| panic!("{e}"));
    let cleared = w.clear(&seen, repair, WAIT);
    summary(
        test,
        "the file datastore's cluster.yaml is gone",
        &seen,
        cleared,
    );
}
