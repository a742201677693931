//! The picture of a lab as `tern-lab up` builds it (and `./demo.sh` shows it): the
//! ToR, the LAN, every node with its addresses and blocks, its pods (borrowed ones
//! marked), the eBGP sessions to the ToR and the iBGP mesh, drawn from the same
//! [`LabSpec`] plan the lab is built from, so the picture cannot drift from the lab.

use crate::lab::plan::{self, LabSpec, NodeKind, Topology};

use super::svg::{Anchor, Svg};

const NODE_W: f64 = 200.0;
const GAP: f64 = 24.0;

/// Where the rows of the picture start.
const TOR_Y: f64 = 64.0;
const LAN_Y: f64 = 170.0;
const NODE_Y: f64 = 250.0;

/// The x of node `i`'s centre.
fn centre(i: usize) -> f64 {
    20.0 + i as f64 * (NODE_W + GAP) + NODE_W / 2.0
}

/// The topology of `spec` as SVG.
pub fn chart(spec: &LabSpec) -> String {
    let nodes = spec.node_plans();
    let n = nodes.len().max(1) as f64;
    let width = 40.0 + n * NODE_W + (n - 1.0) * GAP;
    let max_pods = nodes.iter().map(|p| p.pods.len()).max().unwrap_or(0) as f64;
    let height = 390.0 + max_pods * 46.0;
    let mut s = Svg::new(width, height);
    heading(&mut s, spec, nodes.len());
    if let Some(kind) = spec.tor {
        tor(&mut s, kind, width, nodes.len());
    }
    lan(&mut s, spec, width);
    if spec.topology == Topology::Mesh {
        mesh(&mut s, width, nodes.len());
    }
    for (i, node) in nodes.iter().enumerate() {
        let x = 20.0 + i as f64 * (NODE_W + GAP);
        node_box(&mut s, node, x);
        pods(&mut s, node, x);
    }
    s.finish()
}

/// The title and the line under it.
fn heading(s: &mut Svg, spec: &LabSpec, nodes: usize) {
    let title = match spec.topology {
        Topology::Mesh => "node-to-node mesh",
        Topology::RouteReflectors(_) => "route reflectors",
        Topology::BirdReflector => "a BIRD route reflector",
    };
    s.bold(
        16.0,
        24.0,
        &format!("The lab: {} nodes, {title}", nodes),
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
}

/// The ToR and its eBGP sessions.
fn tor(s: &mut Svg, kind: crate::peers::Kind, width: f64, nodes: usize) {
    let name = format!("{kind:?}").to_lowercase();
    let x = width / 2.0 - 140.0;
    s.rect(x, TOR_Y, 280.0, 64.0, "#fef3c7");
    s.bold(
        width / 2.0,
        TOR_Y + 20.0,
        &format!("top-of-rack router ({name})"),
        12.0,
        Anchor::Middle,
        "#111827",
    );
    s.text(
        width / 2.0,
        TOR_Y + 37.0,
        &format!("AS {}, {}", plan::TOR_AS, plan::TOR_V4),
        11.0,
        Anchor::Middle,
        "#111827",
    );
    s.text(
        width / 2.0,
        TOR_Y + 53.0,
        &format!("announces {}", plan::TOR_PREFIX_V4),
        11.0,
        Anchor::Middle,
        "#374151",
    );
    for i in 0..nodes {
        s.line(
            (width / 2.0, TOR_Y + 64.0),
            (centre(i), NODE_Y),
            "#d97706",
            1.5,
            false,
        );
    }
    s.text(
        width - 20.0,
        TOR_Y + 20.0,
        "eBGP to every node",
        11.0,
        Anchor::End,
        "#d97706",
    );
}

/// The LAN.
fn lan(s: &mut Svg, spec: &LabSpec, width: f64) {
    s.rect(20.0, LAN_Y, width - 40.0, 22.0, "#e5e7eb");
    s.text(
        30.0,
        LAN_Y + 15.0,
        &format!(
            "LAN 198.51.100.0/24{} (bridge in the switch namespace, gateway {})",
            if spec.ipv6 { ", 2001:db8:100::/64" } else { "" },
            plan::GATEWAY_V4
        ),
        11.0,
        Anchor::Start,
        "#111827",
    );
}

/// The mesh, as arcs under the LAN between every pair of nodes.
fn mesh(s: &mut Svg, width: f64, nodes: usize) {
    for a in 0..nodes {
        for b in a + 1..nodes {
            let (x1, x2) = (centre(a), centre(b));
            let depth = 8.0 + 8.0 * (b - a) as f64;
            let pts: Vec<(f64, f64)> = (0..=16)
                .map(|k| {
                    let t = k as f64 / 16.0;
                    (
                        x1 + (x2 - x1) * t,
                        NODE_Y - 4.0 - depth * 4.0 * t * (1.0 - t),
                    )
                })
                .collect();
            s.polyline(&pts, "#2563eb", 1.0);
        }
    }
    s.text(
        width - 20.0,
        LAN_Y + 40.0,
        "iBGP node-to-node mesh",
        11.0,
        Anchor::End,
        "#2563eb",
    );
}

/// A node's box: name, role, addresses and blocks.
fn node_box(s: &mut Svg, node: &plan::NodePlan, x: f64) {
    let fill = if node.kind == NodeKind::Tern {
        "#dbeafe"
    } else {
        "#dcfce7"
    };
    s.rect(x, NODE_Y, NODE_W, 96.0, fill);
    let what = match (node.kind, node.reflector) {
        (NodeKind::Tern, true) => "tern, route reflector",
        (NodeKind::Tern, false) => "tern",
        (NodeKind::CalicoBird, _) => "BIRD as Calico runs it",
    };
    s.bold(
        x + 8.0,
        NODE_Y + 18.0,
        &format!("{} ({what})", node.name),
        12.0,
        Anchor::Start,
        "#111827",
    );
    s.text(
        x + 8.0,
        NODE_Y + 36.0,
        &node.v4,
        11.0,
        Anchor::Start,
        "#111827",
    );
    if let Some(v6) = &node.v6 {
        s.text(x + 8.0, NODE_Y + 52.0, v6, 11.0, Anchor::Start, "#111827");
    }
    s.text(
        x + 8.0,
        NODE_Y + 70.0,
        &format!("block {}", node.block_v4),
        11.0,
        Anchor::Start,
        "#1e3a8a",
    );
    if let Some(b6) = &node.block_v6 {
        s.text(x + 8.0, NODE_Y + 86.0, b6, 10.0, Anchor::Start, "#1e3a8a");
    }
}

/// A node's pods, under its box; borrowed addresses marked.
fn pods(s: &mut Svg, node: &plan::NodePlan, x: f64) {
    for (j, pod) in node.pods.iter().enumerate() {
        let py = NODE_Y + 120.0 + j as f64 * 46.0;
        s.line(
            (x + 20.0, NODE_Y + 96.0),
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
