//! The lab scenarios: Calico-style clusters in network namespaces (`tern_interop::lab`),
//! each asserting on every node's kernel FIB and on packets between pods, not only on
//! BGP state. Full mesh with a BIRD, FRR or GoBGP top-of-rack router (dual stack and
//! borrowed addresses with BIRD); a mixed mesh with a node running BIRD the way Calico's
//! confd configures it; two tern route reflectors with six clients; a BIRD reflector with
//! tern clients; a node failure (graceful restart, then withdrawal), and a silent one
//! noticed by BFD; a node without
//! layer-2 reachability, diagnosed. Each prints its timings and appends them to
//! `target/tmp/lab-timings.txt` (test.sh prints that file at the end).
//!
//! Skips without root or the peer daemons; fails under CI=true.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::{Duration, Instant};

use tern_interop::lab::{self, probe, Lab, LabSpec, Topology};
use tern_interop::peers::{cli_at, wait_for, Kind};

#[path = "support/lab.rs"]
mod lab_support;

use lab_support::{available, converged, fail, record};

const TERN: &str = env!("CARGO_BIN_EXE_tern");

/// Builds a lab (namespace prefix `prefix`) once the programs it needs are here, and
/// waits for it to converge. None: skipped (the reason is printed).
fn up(
    test: &str,
    prefix: &str,
    nodes: usize,
    needs: &[&str],
    tune: impl FnOnce(&mut LabSpec),
) -> Option<(Lab, tempfile::TempDir)> {
    if !available(test, needs) {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut spec = LabSpec::new(prefix, tmp.path(), Path::new(TERN), nodes);
    tune(&mut spec);
    let wait = spec.tor_password == spec.tor_peer_password;
    let lab = Lab::up(spec).unwrap_or_else(|e| panic!("{test}: {e}"));
    if !wait {
        // A lab that cannot converge (mismatched passwords): the test looks itself.
        return Some((lab, tmp));
    }
    converged(test, &lab, &format!("{nodes} nodes"));
    Some((lab, tmp))
}

/// Every pod pings every other pod; all must answer.
fn assert_all_pods_reach_each_other(test: &str, lab: &Lab) {
    let t = Instant::now();
    let m = lab.ping_matrix().unwrap_or_else(|e| panic!("{e}"));
    let failures = m.failures();
    if !failures.is_empty() {
        fail(lab, &format!("{test}: pings unanswered:\n{}", m.render()));
    }
    record(&format!(
        "{test}: {} pings between {} pods, all answered ({:.1} s)",
        m.sent(),
        m.pods.len(),
        t.elapsed().as_secs_f64()
    ));
}

/// The ToR holds every node's blocks and every borrowed address, each via the node
/// that owns (or borrowed) it.
fn assert_tor_learned_everything(lab: &Lab, kind: Kind) {
    let dir = lab.spec().dir.join("tor");
    let mut want = Vec::new();
    for n in lab.nodes() {
        want.push((n.block_v4.clone(), n.v4.clone()));
        if let (Some(b), Some(a)) = (&n.block_v6, &n.v6) {
            want.push((b.clone(), a.clone()));
        }
        for p in n.pods.iter().filter(|p| p.borrowed()) {
            want.push((format!("{}/32", p.v4), n.v4.clone()));
        }
    }
    for (prefix, next_hop) in want {
        let words = lab::peerconf::tor_route_query(kind, &prefix);
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let ok = || {
            cli_at(kind, &dir, &w)
                .map(|out| out.contains(&next_hop))
                .unwrap_or(false)
        };
        if wait_for("the ToR's route", Duration::from_secs(10), ok).is_err() {
            let out = cli_at(kind, &dir, &w).unwrap_or_else(|e| e.to_string());
            fail(
                lab,
                &format!("{kind:?} ToR: no {prefix} via {next_hop}:\n{out}"),
            );
        }
    }
}

/// Communities and large communities pass both ways with the right values: the ToR's
/// prefix arrives in tern's Loc-RIB with the ToR's, and the nodes' blocks reach the
/// ToR with the nodes' (from `prefixAdvertisements`), read back from the ToR's own CLI.
fn assert_communities_both_ways(lab: &Lab, kind: Kind) {
    let (_, out) = lab.tern_cli(1, &["routes", lab::plan::TOR_PREFIX_V4, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let best = &v["routes"][0]["best"];
    let has = |field: &str, want: &str| {
        best[field]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c == want))
    };
    assert!(
        has("communities", lab::plan::TOR_COMMUNITY),
        "{kind:?}: {v}"
    );
    assert!(
        has("large_communities", lab::plan::TOR_LARGE_COMMUNITY),
        "{kind:?}: {v}"
    );
    // The ToR's view, normalised: BIRD prints (64512,100) and (64512, 7, 8).
    let n = lab.node(1).unwrap_or_else(|e| panic!("{e}"));
    let words = lab::peerconf::tor_route_query(kind, &n.block_v4);
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let out = cli_at(kind, &lab.spec().dir.join("tor"), &w).unwrap_or_else(|e| panic!("{e}"));
    let flat: String = out
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
        .map(|c| if c == ',' { ':' } else { c })
        .collect();
    for want in [lab::plan::NODE_COMMUNITY, lab::plan::NODE_LARGE_COMMUNITY] {
        assert!(flat.contains(want), "{kind:?} ToR lacks {want}:\n{out}");
    }
}

fn mesh_with_tor(test: &str, prefix: &str, kind: Kind, tune: impl FnOnce(&mut LabSpec)) {
    let Some((lab, _tmp)) = up(test, prefix, 4, kind.programs(), |s| {
        s.tor = Some(kind);
        s.communities = true;
        tune(s);
    }) else {
        return;
    };
    assert_tor_learned_everything(&lab, kind);
    assert_communities_both_ways(&lab, kind);
    assert_all_pods_reach_each_other(test, &lab);
    tor_keeps_routes_while_tern_restarts(test, lab, kind);
}

/// Graceful restart, tern as the restarting side: node-1's tern is killed and started
/// again; the ToR (a helper) must keep node-1's block the whole time, because tern
/// announces the R and F bits on restart and sends its table and End-of-RIB only once
/// every peer has sent its own End-of-RIB.
fn tor_keeps_routes_while_tern_restarts(test: &str, mut lab: Lab, kind: Kind) {
    let dir = lab.spec().dir.join("tor");
    let (block, hop) = lab
        .node(1)
        .map(|n| (n.block_v4.clone(), n.v4.clone()))
        .unwrap_or_else(|e| panic!("{e}"));
    let words = lab::peerconf::tor_route_query(kind, &block);
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let tor_has = || {
        cli_at(kind, &dir, &w)
            .map(|out| out.contains(&hop))
            .unwrap_or(false)
    };
    let t0 = Instant::now();
    lab.kill_tern(1);
    std::thread::sleep(Duration::from_millis(500));
    lab.start_tern(1).unwrap_or_else(|e| panic!("{e}"));
    let mut checks = 0;
    let done = |lab: &Lab| {
        lab.tern_log(1)
            .contains("graceful restart over: every peer sent End-of-RIB")
    };
    while !done(&lab) {
        assert!(
            tor_has(),
            "{kind:?} ToR lost {block} while node-1's tern restarted"
        );
        checks += 1;
        if t0.elapsed() > Duration::from_secs(40) {
            fail(&lab, "node-1's graceful restart never completed");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let restarted = t0.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    assert!(tor_has(), "{kind:?} ToR lost {block} after the restart");
    let log = lab.tern_log(1);
    assert!(
        log.contains("restarting with forwarding state kept"),
        "{log}"
    );
    if let Err(e) = lab.wait_converged(Duration::from_secs(30)) {
        fail(&lab, &e.to_string());
    }
    assert_all_pods_reach_each_other(test, &lab);
    record(&format!(
        "{test}: node-1's tern killed and restarted: graceful restart complete after {:.1} s, \
         the {kind:?} ToR kept its block throughout ({checks} checks)",
        restarted.as_secs_f64()
    ));
}

#[test]
fn mesh_of_4_with_bird_tor_dual_stack_and_borrowed_addresses() {
    let test = "mesh_bird_tor";
    mesh_with_tor(test, "lsb-", Kind::Bird, |s| {
        s.pods = 2;
        s.borrowed = 1;
        s.ipv6 = true;
    });
}

#[test]
fn mesh_of_4_with_frr_tor() {
    mesh_with_tor("mesh_frr_tor", "lsf-", Kind::Frr, |_| {});
}

#[test]
fn mesh_of_4_with_gobgp_tor() {
    mesh_with_tor("mesh_gobgp_tor", "lsg-", Kind::Gobgp, |_| {});
}

#[test]
fn borrowed_address_reaches_every_node_and_its_owner_keeps_the_block() {
    let test = "borrowed";
    let Some((lab, _tmp)) = up(test, "lsw-", 3, &[], |s| {
        s.pods = 1;
        s.borrowed = 1;
    }) else {
        return;
    };
    // node-2's borrowed pod has an address from node-3's block.
    let b = lab
        .node(2)
        .ok()
        .and_then(|n| n.pods.iter().find(|p| p.borrowed()).cloned())
        .unwrap_or_else(|| panic!("no borrowed pod"));
    assert_eq!(b.owner, 3);
    let owner = lab.routes(3).unwrap_or_else(|e| panic!("{e}"));
    assert!(owner.blackhole("198.18.3.0/26"), "{:?}", owner.by_dst);
    assert!(owner.via(&b.v4, "198.51.100.12"), "{:?}", owner.by_dst);
    let first = lab.routes(1).unwrap_or_else(|e| panic!("{e}"));
    assert!(first.via("198.18.3.0/26", "198.51.100.13"));
    assert!(first.via(&b.v4, "198.51.100.12"));
    // node-2 advertises it as borrowed (from the IPAM block) and does not install it.
    let (_, out) = lab.tern_cli(2, &["routes", &format!("{}/32", b.v4), "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["routes"][0]["best"]["source"], "borrowed", "{v}");
    // From every other pod, including the one on the block's owner.
    for p in lab.pods().iter().filter(|p| p.ns != b.ns) {
        assert!(
            probe::ping(&p.ns, &b.v4),
            "{} cannot reach the borrowed {}",
            p.name,
            b.v4
        );
    }
    assert_all_pods_reach_each_other(test, &lab);
}

/// The Calico-configured BIRD on node `index` has `count` BGP protocols named
/// `prefix…` (Calico's names: `Mesh_<ip>`, `Node_<ip>`), all Established.
fn assert_bird_sessions(lab: &Lab, index: usize, prefix: &str, count: usize) {
    let bird = lab
        .bird_node(index)
        .unwrap_or_else(|| panic!("no BIRD node"));
    let protocols = bird
        .cli(&["show", "protocols"])
        .unwrap_or_else(|e| panic!("{e}"));
    let sessions: Vec<&str> = protocols
        .lines()
        .filter(|l| l.starts_with(prefix))
        .collect();
    assert_eq!(sessions.len(), count, "{protocols}");
    assert!(
        sessions.iter().all(|l| l.contains("Established")),
        "{protocols}"
    );
}

#[test]
fn mixed_mesh_with_a_calico_bird_node() {
    let test = "mixed_mesh_calico_bird";
    let Some((lab, _tmp)) = up(test, "lsm-", 4, &["bird", "birdc"], |s| {
        s.bird_nodes = 1;
        s.tor = Some(Kind::Bird);
        s.ipv6 = true;
    }) else {
        return;
    };
    assert_bird_sessions(&lab, 4, "Mesh_", 6);
    // The BIRD node's own block reaches tern nodes from BIRD's static blackhole.
    let r = lab.routes(1).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.via("198.18.4.0/26", "198.51.100.14"));
    assert_all_pods_reach_each_other(test, &lab);
}

#[test]
fn two_tern_route_reflectors_and_six_clients() {
    let test = "route_reflectors_2_plus_6";
    let Some((lab, _tmp)) = up(test, "lsr-", 8, &[], |s| {
        s.topology = Topology::RouteReflectors(2);
    }) else {
        return;
    };
    // A client has exactly the two reflectors as peers; a reflector has the other
    // reflector and the six clients.
    let peers = |i: usize| {
        let (_, out) = lab.tern_cli(i, &["peers", "-o", "json"]);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let mut p: Vec<(String, String)> = v["peers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| {
                (
                    p["address"].as_str().unwrap_or("").to_string(),
                    p["type"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        p.sort();
        p
    };
    let client = peers(5);
    assert_eq!(
        client,
        vec![
            ("198.51.100.11".into(), "route reflector".into()),
            ("198.51.100.12".into(), "route reflector".into())
        ]
    );
    let rr = peers(1);
    assert_eq!(rr.len(), 7, "{rr:?}");
    assert_eq!(
        rr.iter()
            .filter(|p| p.1 == "route reflector client")
            .count(),
        6,
        "{rr:?}"
    );
    assert_all_pods_reach_each_other(test, &lab);
}

#[test]
fn route_reflectors_keep_ecmp_with_add_path() {
    let test = "rr_add_path";
    let Some((lab, _tmp)) = up(test, "lsa-", 5, &[], |s| {
        s.topology = Topology::RouteReflectors(2);
    }) else {
        return;
    };
    // node-3 and node-4 both host 198.18.1.200 (an address of node-1's block, routed
    // to a workload interface): an anycast /32. The reflectors send every path of their
    // ECMP set (ADD-PATH), so node-5 forwards to both; with one best path reflected it
    // would only know node-3.
    let anycast = "198.18.1.200";
    for i in [3, 4] {
        let dev = lab
            .node(i)
            .map(|n| n.pods[0].host_if.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        // `replace`, as Calico's felix programs workload routes: the node may have
        // learned the other node's /32 already.
        lab.exec_on_node(
            i,
            "ip",
            &["route", "replace", &format!("{anycast}/32"), "dev", &dev],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let t0 = Instant::now();
    let ecmp = |lab: &Lab| {
        lab.routes(5)
            .map(|r| r.via(anycast, "198.51.100.13") && r.via(anycast, "198.51.100.14"))
            .unwrap_or(false)
    };
    if wait_for("ECMP on node-5", Duration::from_secs(20), || ecmp(&lab)).is_err() {
        let r = lab
            .routes(5)
            .map(|r| format!("{:?}", r.by_dst.get(anycast)))
            .unwrap_or_default();
        fail(&lab, &format!("node-5 has no ECMP route to {anycast}: {r}"));
    }
    let (_, peers) = lab.tern_cli(5, &["peers", "198.51.100.11"]);
    assert!(peers.contains("add-path"), "{peers}");
    record(&format!(
        "{test}: an anycast /32 from 2 clients reached a third client through 2 tern reflectors with both next hops (ADD-PATH) in {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
}

#[test]
fn tern_route_reflectors_with_a_calico_bird_client() {
    let test = "tern_reflectors_bird_client";
    let Some((lab, _tmp)) = up(test, "lsc-", 4, &["bird", "birdc"], |s| {
        s.topology = Topology::RouteReflectors(2);
        s.bird_nodes = 1;
    }) else {
        return;
    };
    // node-4 runs BIRD as a Calico node that peers with the two tern reflectors only;
    // what they reflect to it from node-3 carries node-3 as ORIGINATOR_ID and the
    // reflectors' cluster id in CLUSTER_LIST, and keeps node-3 as next hop.
    assert_bird_sessions(&lab, 4, "Node_", 2);
    let bird = lab.bird_node(4).unwrap_or_else(|| panic!("no BIRD node"));
    let route = bird
        .cli(&["show", "route", "all", "198.18.3.0/26"])
        .unwrap_or_else(|e| panic!("{e}"));
    for want in [
        "via 198.51.100.13",
        "BGP.originator_id: 198.51.100.13",
        &format!("BGP.cluster_list: {}", lab::plan::RR_CLUSTER_ID),
    ] {
        assert!(
            route.contains(want),
            "BIRD's route lacks {want:?}:\n{route}"
        );
    }
    assert_all_pods_reach_each_other(test, &lab);
}

#[test]
fn bird_route_reflector_with_tern_clients() {
    let test = "bird_reflector";
    let Some((lab, _tmp)) = up(test, "lsx-", 4, &["bird", "birdc"], |s| {
        s.topology = Topology::BirdReflector;
        s.ipv6 = true;
    }) else {
        return;
    };
    let rr = lab.reflector().unwrap_or_else(|| panic!("no reflector"));
    let table = rr.cli(&["show", "route"]).unwrap_or_else(|e| panic!("{e}"));
    for n in lab.nodes() {
        assert!(table.contains(&n.block_v4), "{table}");
    }
    // Reflected routes keep the originating node as next hop (checked on every FIB by
    // the convergence wait) and a client's session is with the reflector only.
    let (_, out) = lab.tern_cli(2, &["status", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let addrs: Vec<&str> = v["peers"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["address"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(addrs.len(), 2, "{v}");
    assert!(addrs.contains(&"198.51.100.2"), "{v}");
    // The reflector also sends the LAN's own subnet (its `direct` routes): tern writes
    // nothing for the node's own subnet (as BIRD, whose `direct` route wins and is not
    // exported to the kernel), so the kernel's connected route stays alone.
    let r = lab.routes(2).unwrap_or_else(|e| panic!("{e}"));
    let lan = r.by_dst.get("198.51.100.0/24").cloned().unwrap_or_default();
    assert_eq!(lan.protocol, "kernel", "{lan:?}");
    let (_, rib) = lab.tern_cli(2, &["routes", "198.51.100.0/24"]);
    assert!(
        rib.contains("198.51.100.0/24"),
        "not learnt, nothing tested: {rib}"
    );
    assert_all_pods_reach_each_other(test, &lab);
}

/// Whether node `on`'s FIB routes node `of`'s IPv4 block via that node.
fn has_block(lab: &Lab, on: usize, of: usize) -> bool {
    let (Ok(n), Ok(r)) = (lab.node(of), lab.routes(on)) else {
        return false;
    };
    r.via(&n.block_v4, &n.v4)
}

/// Node `on`'s view of its session to node `of` (RFC 4271 state name).
fn session_state(lab: &Lab, on: usize, of: usize) -> String {
    let addr = lab.node(of).map(|n| n.v4.clone()).unwrap_or_default();
    let (_, out) = lab.tern_cli(on, &["peers", &addr, "-o", "json"]);
    serde_json::from_str::<serde_json::Value>(&out)
        .map(|v| v["peers"][0]["state"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// The same silent failure as in `node_failure` step 2, with BFD at 100 ms × 3 between
/// the nodes (`tern-lab up --bfd 100`): node-3's block leaves node-1's FIB in about
/// three intervals, not a hold time; traffic to it stops being sent into the void.
#[test]
fn node_failure_with_bfd_is_noticed_in_a_third_of_a_second() {
    let test = "node_failure_bfd";
    const HOLD: u64 = 6;
    let Some((lab, _tmp)) = up(test, "lsb-", 3, &[], |s| {
        s.mesh_hold = Some(HOLD as u32);
        s.bfd_ms = Some(100);
    }) else {
        return;
    };
    let bfd_up = || {
        let addr = lab.node(3).map(|n| n.v4.clone()).unwrap_or_default();
        let (_, out) = lab.tern_cli(1, &["peers", &addr, "-o", "json"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .is_ok_and(|v| v["peers"][0]["bfd"]["state"] == "Up")
    };
    if wait_for(
        "BFD up between node-1 and node-3",
        Duration::from_secs(20),
        bfd_up,
    )
    .is_err()
    {
        fail(
            &lab,
            "the BFD session between node-1 and node-3 did not come Up",
        );
    }
    let t = Instant::now();
    lab.exec_on_node(3, "ip", &["link", "set", "eth0", "down"])
        .unwrap_or_else(|e| panic!("{e}"));
    while has_block(&lab, 1, 3) && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone = t.elapsed();
    if has_block(&lab, 1, 3) {
        fail(&lab, "node-3's block was never withdrawn");
    }
    // Three intervals after the last packet heard, plus polling and a loaded machine:
    // far below the hold time either way.
    assert!(
        gone < Duration::from_secs(2),
        "node-3's block left node-1 after {gone:?} with BFD at 100 ms x 3"
    );
    assert!(lab.tern_log(1).contains("Cease / BFD Down"));
    record(&format!(
        "{test}: node-3 silently gone (link down): node-1 withdrew its block after {} ms \
         with BFD 100 ms x 3 (without BFD: the hold timer, {HOLD} s here, 90 s by default)",
        gone.as_millis()
    ));
}

#[test]
fn node_failure_keeps_routes_for_graceful_restart_then_withdraws_them() {
    let test = "node_failure";
    const RESTART: u64 = 6;
    const HOLD: u64 = 6;
    let Some((mut lab, _tmp)) = up(test, "lsn-", 4, &[], |s| {
        s.restart_time = Some(RESTART as u32);
        s.mesh_hold = Some(HOLD as u32);
    }) else {
        return;
    };
    let pod = |i: usize| {
        lab.node(i)
            .map(|n| n.pods[0].clone())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (from, to3, to4) = (pod(1).ns, pod(3).v4, pod(4).v4);
    assert!(probe::ping(&from, &to3) && probe::ping(&from, &to4));

    // 1. node-3's tern crashes (kill -9): the kernel closes its connections, peers
    // notice at once and keep its routes for the graceful-restart time it announced.
    let t0 = Instant::now();
    lab.kill_tern(3);
    if wait_for("node-1 to see node-3 down", Duration::from_secs(10), || {
        session_state(&lab, 1, 3) != "Established"
    })
    .is_err()
    {
        fail(&lab, "node-1 never saw the session to node-3 go down");
    }
    let detected = t0.elapsed();
    // The routes stay and node-3's pods stay reachable (its kernel still forwards:
    // only its tern died).
    assert!(has_block(&lab, 1, 3), "node-3's block left node-1 at once");
    assert!(
        probe::ping(&from, &to3),
        "traffic stopped during graceful restart"
    );
    if wait_for("node-3's block withdrawn", Duration::from_secs(30), || {
        !has_block(&lab, 1, 3) && !has_block(&lab, 2, 3)
    })
    .is_err()
    {
        fail(&lab, "node-3's block was never withdrawn");
    }
    let withdrawn = t0.elapsed();
    assert!(
        withdrawn >= Duration::from_secs(RESTART - 1),
        "withdrawn after {withdrawn:?}, before the {RESTART} s restart time"
    );
    assert!(!probe::ping(&from, &to3), "node-3's pod still reachable");
    record(&format!(
        "{test}: kill -9 of node-3's tern seen by node-1 after {:.2} s (its connections \
         close); routes kept for graceful restart, withdrawn {:.1} s after the kill \
         (restart time {RESTART} s)",
        detected.as_secs_f64(),
        withdrawn.as_secs_f64()
    ));

    // 2. node-4 dies silently (its link goes down: no FIN, no RST). Without BFD only
    // the hold timer notices; then its routes go at once (no graceful restart after a
    // hold timer expiry).
    let t1 = Instant::now();
    lab.exec_on_node(4, "ip", &["link", "set", "eth0", "down"])
        .unwrap_or_else(|e| panic!("{e}"));
    if wait_for("node-4's block withdrawn", Duration::from_secs(30), || {
        !has_block(&lab, 1, 4)
    })
    .is_err()
    {
        fail(&lab, "node-4's block was never withdrawn");
    }
    let silent = t1.elapsed();
    // Not before the hold timer can fire (the last keepalive came at most a keepalive
    // interval before the link went down); after it, a loaded machine may add seconds
    // of scheduling and polling: the figure is recorded, the bound only catches a
    // detection that is not the hold timer's at all.
    assert!(
        silent >= Duration::from_secs(HOLD / 2) && silent <= Duration::from_secs(HOLD + 20),
        "silent failure detected after {silent:?} with a {HOLD} s hold time"
    );
    assert!(!probe::ping(&from, &to4));
    let log = lab.tern_log(1);
    assert!(log.contains("Hold Timer Expired"), "{log}");
    record(&format!(
        "{test}: node-4 silently gone (link down): node-1 withdrew its block after {:.1} s \
         (BFD-less detection = hold timer, nodeMeshHoldTime {HOLD} s, keepalive {} s; \
         with the 90 s default it would be up to 90 s)",
        silent.as_secs_f64(),
        HOLD / 3
    ));

    // 3. Both come back: the cluster converges again.
    let t2 = Instant::now();
    lab.exec_on_node(4, "ip", &["link", "set", "eth0", "up"])
        .and_then(|_| {
            lab.exec_on_node(
                4,
                "ip",
                &["route", "replace", "default", "via", lab::plan::GATEWAY_V4],
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
    lab.start_tern(3).unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = lab.wait_converged(Duration::from_secs(60)) {
        fail(&lab, &e.to_string());
    }
    assert!(probe::ping(&from, &to3) && probe::ping(&from, &to4));
    record(&format!(
        "{test}: node-3 restarted and node-4's link back: converged again {:.1} s later",
        t2.elapsed().as_secs_f64()
    ));

    // 4. Someone deletes one of tern's routes: it is put back.
    let t3 = Instant::now();
    lab.exec_on_node(2, "ip", &["route", "del", "198.18.1.0/26"])
        .unwrap_or_else(|e| panic!("{e}"));
    if wait_for("the deleted route back", Duration::from_secs(10), || {
        has_block(&lab, 2, 1)
    })
    .is_err()
    {
        fail(&lab, "a deleted tern route was not put back");
    }
    record(&format!(
        "{test}: a tern route deleted with `ip route del` was back after {:.1} s",
        t3.elapsed().as_secs_f64()
    ));
}

#[test]
fn node_without_layer2_reachability_is_diagnosed() {
    let test = "layer2";
    let Some((lab, _tmp)) = up(test, "lsl-", 3, &[], |s| {
        s.far_nodes = 1;
    }) else {
        return;
    };
    // Sessions come up through the router, but the next hop 203.0.113.13 is not on
    // node-1's subnet: its block cannot be installed and its pod is unreachable.
    let to = lab
        .node(3)
        .map(|n| n.pods[0].v4.clone())
        .unwrap_or_default();
    let from = lab
        .node(1)
        .map(|n| n.pods[0].ns.clone())
        .unwrap_or_default();
    assert!(!probe::ping(&from, &to));
    let findings = |i: usize| {
        let (_, out) = lab.tern_cli(i, &["diagnose", "-o", "json"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["findings"].as_array().cloned())
            .unwrap_or_default()
    };
    let l2 = |f: &serde_json::Value, subject: &str, mine: &str, theirs: &str| {
        f["kind"] == "no-layer2-reachability"
            && f["subject"].as_str().unwrap_or("").contains(subject)
            && f["evidence"].as_str().unwrap_or("").contains(mine)
            && f["evidence"].as_str().unwrap_or("").contains(theirs)
    };
    let ok = wait_for("node-1's finding", Duration::from_secs(15), || {
        findings(1)
            .iter()
            .any(|f| l2(f, "node-3", "198.51.100.0/24", "203.0.113.0/24"))
    });
    if ok.is_err() {
        fail(&lab, &format!("node-1 findings: {:?}", findings(1)));
    }
    // The kernel refused node-3's block on node-1 (its next hop is not on-link).
    assert!(
        findings(1)
            .iter()
            .any(|f| f["kind"] == "route-refused" && f["subject"] == "198.18.3.0/26"),
        "{:?}",
        findings(1)
    );
    let f3 = findings(3);
    assert!(
        f3.iter()
            .any(|f| l2(f, "node-1", "203.0.113.0/24", "198.51.100.0/24")),
        "{f3:?}"
    );
    // node-2 and node-1 still reach each other.
    let n2 = lab
        .node(2)
        .map(|n| n.pods[0].v4.clone())
        .unwrap_or_default();
    assert!(probe::ping(&from, &n2));
    let (_, text) = lab.tern_cli(1, &["diagnose"]);
    eprintln!("$ tern diagnose   (node-1)\n{text}");
    record(&format!(
        "{test}: {} findings on node-1, {} on node-3",
        findings(1).len(),
        f3.len()
    ));
}

/// No TCP-MD5 password in any output of node-1: every inspection command in text and
/// JSON, `tern check-config` on its files, and its log.
fn no_password_anywhere(lab: &Lab, secrets: &[&str]) {
    let mut outputs = Vec::new();
    for cmd in [
        &["status"][..],
        &["peers"],
        &["peers", "198.51.100.1"],
        &["routes"],
        &["routes", "--advertised", "--peer", "198.51.100.1"],
        &["fib"],
        &["diagnose"],
        &["health"],
    ] {
        for json in [false, true] {
            let mut args = cmd.to_vec();
            if json {
                args.extend(["-o", "json"]);
            }
            outputs.push((args.join(" "), lab.tern_cli(1, &args).1));
        }
    }
    let node = lab.node(1).unwrap_or_else(|e| panic!("{e}"));
    let check = std::process::Command::new(TERN)
        .args(["check-config", "--config"])
        .arg(node.dir.join("tern.yaml"))
        .output()
        .unwrap_or_else(|e| panic!("tern check-config: {e}"));
    outputs.push((
        "check-config".into(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        ),
    ));
    outputs.push(("the log".into(), lab.tern_log(1)));
    for (what, text) in &outputs {
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "the password is shown by {what}:\n{text}"
            );
        }
    }
}

/// TCP-MD5 and GTSM with a real peer: with the same password on both sides (and GTSM
/// on both) the session comes up and routes flow; the peer frozen with SIGSTOP is
/// dropped by the hold timer and comes back after SIGCONT; with different passwords
/// there is no session, and `tern diagnose` says the kernel is dropping segments for
/// their signatures.
fn md5_and_gtsm(test: &str, prefix: &str, kind: Kind) {
    let Some((lab, _tmp)) = up(test, prefix, 1, kind.programs(), |s| {
        s.tor = Some(kind);
        s.tor_password = Some("s3cret-tor".into());
        s.tor_peer_password = Some("s3cret-tor".into());
        s.tor_ttl_security = true;
    }) else {
        return;
    };
    no_password_anywhere(&lab, &["s3cret"]);

    // The ToR freezes (SIGSTOP): its connection stays open but silent, so only the
    // hold timer (9 s) notices; its prefix goes. Thawed, the session and prefix return.
    let tor_prefix = |lab: &Lab| {
        lab.routes(1)
            .map(|r| r.via(lab::plan::TOR_PREFIX_V4, lab::plan::TOR_V4))
            .unwrap_or(false)
    };
    let tor = lab.tor().unwrap_or_else(|| panic!("no ToR"));
    let t0 = Instant::now();
    tor.freeze(true);
    let gone = wait_for(
        "the frozen ToR's prefix withdrawn",
        Duration::from_secs(20),
        || !tor_prefix(&lab),
    );
    let detected = t0.elapsed();
    tor.freeze(false);
    if gone.is_err() {
        fail(&lab, "the frozen ToR's prefix stayed");
    }
    assert!(
        detected >= Duration::from_secs(5),
        "withdrawn after {detected:?}, before the 9 s hold time could expire"
    );
    assert!(lab.tern_log(1).contains("Hold Timer Expired"));
    let t1 = Instant::now();
    if wait_for(
        "the thawed ToR's prefix back",
        Duration::from_secs(30),
        || tor_prefix(&lab),
    )
    .is_err()
    {
        fail(&lab, "the ToR's prefix did not come back after SIGCONT");
    }
    record(&format!(
        "{test}: {kind:?} ToR frozen with SIGSTOP: hold timer (9 s) fired, prefix withdrawn after {:.1} s; after SIGCONT back in {:.1} s",
        detected.as_secs_f64(),
        t1.elapsed().as_secs_f64()
    ));
    drop(lab);

    let Some((lab, _tmp)) = up(test, prefix, 1, kind.programs(), |s| {
        s.tor = Some(kind);
        s.tor_password = Some("s3cret-tor".into());
        s.tor_peer_password = Some("another-one".into());
    }) else {
        return;
    };
    let finding = || {
        let (_, out) = lab.tern_cli(1, &["diagnose", "-o", "json"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["findings"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .find(|f| f["kind"] == "md5-mismatch")
    };
    if wait_for("the MD5 finding", Duration::from_secs(20), || {
        finding().is_some()
    })
    .is_err()
    {
        let (_, d) = lab.tern_cli(1, &["diagnose"]);
        fail(&lab, &format!("no md5-mismatch finding:\n{d}"));
    }
    let (_, out) = lab.tern_cli(1, &["peers", "198.51.100.1", "-o", "json"]);
    assert!(!out.contains("\"Established\""), "{out}");
    let f = finding().unwrap_or_default();
    assert!(
        f["subject"].as_str().unwrap_or("").contains("198.51.100.1"),
        "{f}"
    );
    no_password_anywhere(&lab, &["s3cret", "another-one"]);
    record(&format!(
        "{test}: {kind:?} ToR: MD5 + GTSM session up; with another password no session and `tern diagnose` reports it"
    ));
}

#[test]
fn md5_and_gtsm_with_bird() {
    md5_and_gtsm("md5_bird", "lmb-", Kind::Bird);
}

#[test]
fn md5_and_gtsm_with_frr() {
    md5_and_gtsm("md5_frr", "lmf-", Kind::Frr);
}

#[test]
fn md5_and_gtsm_with_gobgp() {
    md5_and_gtsm("md5_gobgp", "lmg-", Kind::Gobgp);
}
