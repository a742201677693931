//! The picture of a lab as `tern-lab up` builds it (and `./demo.sh` shows it): the
//! ToR, the LAN, every node with its addresses and blocks, its pods (borrowed ones
//! marked), the eBGP sessions to the ToR and the iBGP mesh, drawn from the same
//! [`LabSpec`] plan the lab is built from, so the picture cannot drift from the lab.

use crate::lab::plan::{self, LabSpec, NodeKind, Topology};

use super::svg::{Anchor, Svg};

const NODE_W: f64 = 200.0;
const GAP: f64 = 24.0;

/// The topology of `spec` as SVG.
pub fn chart(spec: &LabSpec) -> String {
    let nodes = spec.node_plans();
    let n = nodes.len().max(1) as f64;
    let width = 40.0 + n * NODE_W + (n - 1.0) * GAP;
    let max_pods = nodes.iter().map(|p| p.pods.len()).max().unwrap_or(0) as f64;
    let height = 390.0 + max_pods * 46.0;
    let mut s = Svg::new(width, height);
    let title = match spec.topology {
        Topology::Mesh => "node-to-node mesh",
        Topology::RouteReflectors(_) => "route reflectors",
        Topology::BirdReflector => "a BIRD route reflector",
    };
    s.bold(
        16.0,
        24.0,
        &format!("The lab: {} nodes, {title}", nodes.len()),
        16.0,
        Anchor::Start,
        "#111827",
    );
    s.text(
        16.0,
        44.0,
        &format!(
            "Each box is a network namespace on one machine. Cluster AS {}, pools {}{}.",
            plan::CLUSTER_AS,
            plan::POOL_V4,
            if spec.ipv6 {
                format!(" and {}", plan::POOL_V6)
            } else {
                String::new()
            }
        ),
        11.0,
        Anchor::Start,
        "#4b5563",
    );
    let centre = |i: usize| 20.0 + i as f64 * (NODE_W + GAP) + NODE_W / 2.0;
    // The ToR and its eBGP sessions.
    let (tor_y, lan_y, node_y) = (64.0, 170.0, 250.0);
    if let Some(kind) = spec.tor {
        let name = format!("{kind:?}").to_lowercase();
        let x = width / 2.0 - 140.0;
        s.rect(x, tor_y, 280.0, 64.0, "#fef3c7");
        s.bold(
            width / 2.0,
            tor_y + 20.0,
            &format!("top-of-rack router ({name})"),
            12.0,
            Anchor::Middle,
            "#111827",
        );
        s.text(
            width / 2.0,
            tor_y + 37.0,
            &format!("AS {}, {}", plan::TOR_AS, plan::TOR_V4),
            11.0,
            Anchor::Middle,
            "#111827",
        );
        s.text(
            width / 2.0,
            tor_y + 53.0,
            &format!("announces {}", plan::TOR_PREFIX_V4),
            11.0,
            Anchor::Middle,
            "#374151",
        );
        for i in 0..nodes.len() {
            s.line(
                (width / 2.0, tor_y + 64.0),
                (centre(i), node_y),
                "#d97706",
                1.5,
                false,
            );
        }
        s.text(
            width - 20.0,
            tor_y + 20.0,
            "eBGP to every node",
            11.0,
            Anchor::End,
            "#d97706",
        );
    }
    // The LAN.
    s.rect(20.0, lan_y, width - 40.0, 22.0, "#e5e7eb");
    s.text(
        30.0,
        lan_y + 15.0,
        &format!(
            "LAN 198.51.100.0/24{} (bridge in the switch namespace, gateway {})",
            if spec.ipv6 { ", 2001:db8:100::/64" } else { "" },
            plan::GATEWAY_V4
        ),
        11.0,
        Anchor::Start,
        "#111827",
    );
    // The mesh, as arcs under the LAN between every pair of nodes.
    if spec.topology == Topology::Mesh {
        for a in 0..nodes.len() {
            for b in a + 1..nodes.len() {
                let (x1, x2) = (centre(a), centre(b));
                let depth = 8.0 + 8.0 * (b - a) as f64;
                let pts: Vec<(f64, f64)> = (0..=16)
                    .map(|k| {
                        let t = k as f64 / 16.0;
                        (
                            x1 + (x2 - x1) * t,
                            node_y - 4.0 - depth * 4.0 * t * (1.0 - t),
                        )
                    })
                    .collect();
                s.polyline(&pts, "#2563eb", 1.0);
            }
        }
        s.text(
            width - 20.0,
            lan_y + 40.0,
            "iBGP node-to-node mesh",
            11.0,
            Anchor::End,
            "#2563eb",
        );
    }
    for (i, node) in nodes.iter().enumerate() {
        let x = 20.0 + i as f64 * (NODE_W + GAP);
        let fill = if node.kind == NodeKind::Tern {
            "#dbeafe"
        } else {
            "#dcfce7"
        };
        s.rect(x, node_y, NODE_W, 96.0, fill);
        let what = match (node.kind, node.reflector) {
            (NodeKind::Tern, true) => "tern, route reflector",
            (NodeKind::Tern, false) => "tern",
            (NodeKind::CalicoBird, _) => "BIRD as Calico runs it",
        };
        s.bold(
            x + 8.0,
            node_y + 18.0,
            &format!("{} ({what})", node.name),
            12.0,
            Anchor::Start,
            "#111827",
        );
        s.text(
            x + 8.0,
            node_y + 36.0,
            &node.v4,
            11.0,
            Anchor::Start,
            "#111827",
        );
        if let Some(v6) = &node.v6 {
            s.text(x + 8.0, node_y + 52.0, v6, 11.0, Anchor::Start, "#111827");
        }
        s.text(
            x + 8.0,
            node_y + 70.0,
            &format!("block {}", node.block_v4),
            11.0,
            Anchor::Start,
            "#1e3a8a",
        );
        if let Some(b6) = &node.block_v6 {
            s.text(x + 8.0, node_y + 86.0, b6, 10.0, Anchor::Start, "#1e3a8a");
        }
        for (j, pod) in node.pods.iter().enumerate() {
            let py = node_y + 120.0 + j as f64 * 46.0;
            s.line(
                (x + 20.0, node_y + 96.0),
                (x + 20.0, py + 18.0),
                "#9ca3af",
                1.0,
                false,
            );
            let (fill, tag) = if pod.borrowed() {
                (
                    "#fee2e2",
                    format!("borrowed from node-{}: a /32 route", pod.owner),
                )
            } else {
                ("#f3f4f6", "in the node's block".to_string())
            };
            s.rect(x + 30.0, py, NODE_W - 30.0, 38.0, fill);
            s.text(
                x + 36.0,
                py + 15.0,
                &format!("{}  {}", pod.name.rsplit('/').next().unwrap_or(""), pod.v4),
                10.0,
                Anchor::Start,
                "#111827",
            );
            s.text(x + 36.0, py + 30.0, &tag, 9.0, Anchor::Start, "#4b5563");
        }
    }
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::Kind;
    use std::path::Path;

    #[test]
    fn the_demo_lab_shows_every_node_pod_and_session() {
        let mut spec = LabSpec::new("tl-", Path::new("/tmp/x"), Path::new("tern"), 4);
        spec.tor = Some(Kind::Bird);
        spec.pods = 2;
        spec.borrowed = 1;
        spec.ipv6 = true;
        let svg = chart(&spec);
        for i in 1..=4 {
            assert!(svg.contains(&format!("node-{i} (tern)")), "{svg}");
            assert!(svg.contains(&format!("block 198.18.{i}.0/26")));
        }
        assert!(svg.contains("top-of-rack router (bird)"));
        assert_eq!(svg.matches("borrowed from").count(), 4);
        // 6 mesh arcs for 4 nodes.
        assert_eq!(svg.matches("<polyline").count(), 6);
    }
}
