//! The rows of `tern routes --received PEER`: accepted and rejected paths merged by
//! prefix, the family filter, the counts; and the text a person sees.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failure is the verdict

use std::net::Ipv4Addr;
use std::sync::Arc;

use tern_bgp::rib::{Path, PeerSource};
use tern_bgp::speaker::rejected::{RejectedPath, RejectedView};
use tern_bgp::wire::{AsPath, PathAttributes};

use super::*;

fn attrs(as_path: &[u32]) -> Arc<PathAttributes> {
    Arc::new(PathAttributes {
        as_path: Some(AsPath::from_sequence(as_path.iter().copied())),
        local_pref: Some(100),
        ..PathAttributes::default()
    })
}

fn sent() -> Received {
    let src = Arc::new(PeerSource {
        address: "198.51.100.1".parse().unwrap(),
        router_id: Ipv4Addr::new(198, 51, 100, 1),
        asn: 65001,
        ebgp: true,
        rr_client: false,
        local: false,
    });
    let path = |stale| {
        Arc::new(Path {
            source: Arc::clone(&src),
            attrs: attrs(&[65001]),
            next_hop: "198.51.100.1".parse().unwrap(),
            path_id: 0,
            igp_cost: None,
            stale,
        })
    };
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let rejected = |reason: &str, hop: &str| RejectedPath {
        attrs: attrs(&[65001, 64512]),
        next_hop: Some(hop.parse().unwrap()),
        reason: reason.into(),
        by_policy: reason.starts_with("import policy"),
    };
    Received {
        accepted: vec![
            (net("198.18.1.0/26"), path(false), true),
            (net("198.18.3.0/26"), path(true), false),
        ],
        rejected: RejectedView {
            paths: vec![
                (
                    net("198.18.2.0/26"),
                    0,
                    rejected("our AS appears 1 times in AS_PATH", "198.51.100.1"),
                ),
                (
                    net("198.18.3.0/26"),
                    7,
                    rejected("import policy: BGPFilter tor-in", "198.51.100.1"),
                ),
                (
                    net("2001:db8:5::/64"),
                    0,
                    rejected("import policy: BGPFilter tor-in", "2001:db8::1"),
                ),
            ],
            not_kept: 3,
        },
    }
}

#[test]
fn accepted_and_rejected_paths_are_merged_by_prefix_with_why() {
    let r = reply("198.51.100.1".parse().unwrap(), &sent(), None);
    assert_eq!((r.accepted, r.rejected, r.rejected_not_kept), (2, 3, 3));
    let rows: Vec<(&str, bool, Option<&str>)> = r
        .routes
        .iter()
        .map(|p| (p.prefix.as_str(), p.accepted, p.rejected_by.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("198.18.1.0/26", true, None),
            (
                "198.18.2.0/26",
                false,
                Some("our AS appears 1 times in AS_PATH")
            ),
            ("198.18.3.0/26", true, None),
            (
                "198.18.3.0/26",
                false,
                Some("import policy: BGPFilter tor-in")
            ),
            (
                "2001:db8:5::/64",
                false,
                Some("import policy: BGPFilter tor-in")
            ),
        ]
    );
    assert!(r.routes[0].best && !r.routes[2].best && r.routes[2].stale);
    assert_eq!(r.routes[3].path_id, 7);
    assert_eq!(r.routes[4].path.next_hops, ["2001:db8::1"]);
    assert_eq!(r.routes[1].path.as_path, "65001 64512");

    let v4 = reply("198.51.100.1".parse().unwrap(), &sent(), Some(false));
    assert_eq!((v4.accepted, v4.rejected), (2, 2));
    let v6 = reply("198.51.100.1".parse().unwrap(), &sent(), Some(true));
    assert_eq!((v6.accepted, v6.rejected), (0, 1));

    // The JSON contract: `rejected_by` only on rejected paths.
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["routes"][0].get("rejected_by").is_none(), "{json}");
    assert_eq!(
        json["routes"][1]["rejected_by"],
        "our AS appears 1 times in AS_PATH"
    );
    assert_eq!(json["routes"][1]["next_hops"][0], "198.51.100.1");
}

#[test]
fn the_text_names_the_peer_the_status_and_the_reason() {
    let r = reply("198.51.100.1".parse().unwrap(), &sent(), None);
    let text = crate::control::render::received(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "Received from 198.51.100.1: 2 accepted, 3 rejected."
    );
    assert!(
        lines[2].contains("PREFIX") && lines[2].contains("REJECTED BY"),
        "{text}"
    );
    let row = |prefix: &str, n: usize| {
        lines
            .iter()
            .filter(|l| l.contains(prefix))
            .nth(n)
            .copied()
            .unwrap_or_else(|| panic!("{prefix} #{n}\n{text}"))
    };
    assert!(row("198.18.1.0/26", 0).contains("| best "), "{text}");
    assert!(row("198.18.3.0/26", 0).contains("accepted,stale"), "{text}");
    assert!(row("198.18.3.0/26", 1).contains("(path id 7)"), "{text}");
    let rejected = row("198.18.2.0/26", 0);
    assert!(
        rejected.contains("| rejected ") && rejected.contains("| our AS appears"),
        "{text}"
    );
    assert!(
        text.ends_with("3 more rejected path(s) this session were not kept: tern keeps at most 10000 per peer.\n"),
        "{text}"
    );
    let empty = crate::control::render::received(&ReceivedReply {
        peer: "198.51.100.1".into(),
        ..Default::default()
    });
    assert_eq!(
        empty,
        "Received from 198.51.100.1: 0 accepted, 0 rejected.\n"
    );
}
