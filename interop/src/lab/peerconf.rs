//! Configurations of the non-tern routers in a lab: the top-of-rack router (BIRD, FRR or
//! GoBGP), a node running BIRD the way Calico's confd templates configure it, and a BIRD
//! route reflector. Pure text generation, unit-tested with the plan.

use std::fmt::Write as _;

use super::plan::{
    LabSpec, NodeKind, NodePlan, Topology, BIRD_RR_V4, CLUSTER_AS, POOL_V4, POOL_V6, TOR_AS,
    TOR_COMMUNITY, TOR_LARGE_COMMUNITY, TOR_PREFIX_V4, TOR_PREFIX_V6, TOR_V4, TOR_V6,
};
use crate::peers::Kind;

/// The ToR's neighbours: every node on the main subnet, IPv4 and (dual stack) IPv6,
/// with a name for the session.
fn tor_neighbours(spec: &LabSpec) -> Vec<(String, bool, String)> {
    let mut out = Vec::new();
    for n in spec.node_plans().iter().filter(|n| !n.far) {
        out.push((n.v4.clone(), false, format!("node_{}", n.index)));
        if let Some(v6) = &n.v6 {
            out.push((v6.clone(), true, format!("node_{}_v6", n.index)));
        }
    }
    out
}

/// The ToR's configuration for `kind` (AS 65001, announcing 198.18.100.0/24 and, dual
/// stack, 2001:db8:ff00::/48; learning everything). GoBGP's routes are added through
/// its CLI after it starts: see [`gobgp_announcements`].
pub fn tor_config(kind: Kind, spec: &LabSpec) -> String {
    let peers = tor_neighbours(spec);
    match kind {
        Kind::Bird => bird_tor(spec, &peers),
        Kind::Frr => frr_tor(spec, &peers),
        Kind::Gobgp => gobgp_tor(spec, &peers),
    }
}

/// A BIRD 2 ToR: static routes tagged with the ToR's communities, a session per node.
fn bird_tor(spec: &LabSpec, peers: &[(String, bool, String)]) -> String {
    let mut c = String::new();
    let _ = writeln!(
        c,
        "log stderr all;\nrouter id {TOR_V4};\nprotocol device {{ }}\n\
         protocol static {{ ipv4; route {TOR_PREFIX_V4} blackhole; }}"
    );
    if spec.ipv6 {
        let _ = writeln!(
            c,
            "protocol static {{ ipv6; route {TOR_PREFIX_V6} blackhole; }}"
        );
    }
    let (ca, cb) = TOR_COMMUNITY.split_once(':').unwrap_or(("65001", "100"));
    let large: Vec<&str> = TOR_LARGE_COMMUNITY.split(':').collect();
    let _ = writeln!(
        c,
        "filter tagged {{ if source = RTS_STATIC then {{ \
         bgp_community.add(({ca},{cb})); bgp_large_community.add(({})); accept; }} reject; }}",
        large.join(",")
    );
    let _ = writeln!(
        c,
        "template bgp node {{ local as {TOR_AS}; hold time 9; keepalive time 3; \
         connect retry time 1; error wait time 1,4; graceful restart on;{}{} }}",
        spec.tor_peer_password
            .as_ref()
            .map(|p| format!(" password \"{p}\";"))
            .unwrap_or_default(),
        if spec.tor_ttl_security {
            " ttl security on;"
        } else {
            ""
        }
    );
    for (addr, v6, name) in peers {
        let fam = if *v6 { "ipv6" } else { "ipv4" };
        let _ = writeln!(
            c,
            "protocol bgp {name} from node {{ neighbor {addr} as {CLUSTER_AS}; \
             {fam} {{ import all; export filter tagged; }}; }}"
        );
    }
    c
}

/// An FRR ToR: one `router bgp`, both families, a route-map that tags.
fn frr_tor(spec: &LabSpec, peers: &[(String, bool, String)]) -> String {
    let mut c = String::new();
    let _ = writeln!(
        c,
        "frr defaults traditional\nhostname tor\nlog stdout\nrouter bgp {TOR_AS}\n \
         bgp router-id {TOR_V4}\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n no bgp default ipv4-unicast\n \
         bgp graceful-restart\n timers bgp 3 9"
    );
    for (addr, _, _) in peers {
        let _ = writeln!(
            c,
            " neighbor {addr} remote-as {CLUSTER_AS}\n neighbor {addr} timers connect 1"
        );
        if let Some(p) = &spec.tor_peer_password {
            let _ = writeln!(c, " neighbor {addr} password {p}");
        }
        if spec.tor_ttl_security {
            let _ = writeln!(c, " neighbor {addr} ttl-security hops 1");
        }
    }
    let _ = writeln!(
        c,
        " address-family ipv4 unicast\n  network {TOR_PREFIX_V4} route-map tagged"
    );
    for (addr, _, _) in peers.iter().filter(|p| !p.1) {
        let _ = writeln!(c, "  neighbor {addr} activate");
    }
    c.push_str(" exit-address-family\n");
    if spec.ipv6 {
        let _ = writeln!(
            c,
            " address-family ipv6 unicast\n  network {TOR_PREFIX_V6} route-map tagged"
        );
        for (addr, _, _) in peers.iter().filter(|p| p.1) {
            let _ = writeln!(c, "  neighbor {addr} activate");
        }
        c.push_str(" exit-address-family\n");
    }
    let _ = writeln!(
        c,
        "route-map tagged permit 10\n set community {TOR_COMMUNITY} additive\n \
         set large-community {TOR_LARGE_COMMUNITY} additive"
    );
    c
}

/// A GoBGP ToR (TOML); its routes come through the CLI, see [`gobgp_announcements`].
fn gobgp_tor(spec: &LabSpec, peers: &[(String, bool, String)]) -> String {
    let mut c = String::new();
    let _ = writeln!(
        c,
        "[global.config]\n  as = {TOR_AS}\n  router-id = \"{TOR_V4}\"\n  \
         local-address-list = [\"{TOR_V4}\"{}]",
        if spec.ipv6 {
            format!(", \"{TOR_V6}\"")
        } else {
            String::new()
        }
    );
    for (addr, v6, _) in peers {
        let fam = if *v6 { "ipv6-unicast" } else { "ipv4-unicast" };
        let _ = writeln!(
            c,
            "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{addr}\"\n    \
             peer-as = {CLUSTER_AS}\n  [neighbors.timers.config]\n    hold-time = 9\n    \
             keepalive-interval = 3\n    connect-retry = 1\n  \
             [neighbors.graceful-restart.config]\n    enabled = true\n    \
             restart-time = 120\n  [[neighbors.afi-safis]]\n    \
             [neighbors.afi-safis.config]\n      afi-safi-name = \"{fam}\""
        );
        if let Some(p) = &spec.tor_peer_password {
            // GoBGP reads neighbors.config keys that follow the table header
            // only: a second [neighbors.config] would start a new table.
            c = c.replacen(
                &format!("neighbor-address = \"{addr}\"\n"),
                &format!("neighbor-address = \"{addr}\"\n    auth-password = \"{p}\"\n"),
                1,
            );
        }
        if spec.tor_ttl_security {
            let _ = writeln!(
                c,
                "  [neighbors.ttl-security.config]\n    enabled = true\n    ttl-min = 255"
            );
        }
    }
    c
}

/// The `gobgp` CLI commands that make a GoBGP ToR announce its prefixes.
pub fn gobgp_announcements(spec: &LabSpec) -> Vec<Vec<String>> {
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let tags = format!("community {TOR_COMMUNITY} large-community {TOR_LARGE_COMMUNITY}");
    let mut out = vec![words(&format!("global rib add {TOR_PREFIX_V4} {tags}"))];
    if spec.ipv6 {
        out.push(words(&format!(
            "global rib -a ipv6 add {TOR_PREFIX_V6} nexthop {TOR_V6} {tags}"
        )));
    }
    out
}

/// The ToR CLI words that show its route for `prefix` with its attributes; the answer
/// names the next hop and the communities.
pub fn tor_route_query(kind: Kind, prefix: &str) -> Vec<String> {
    let v6 = prefix.contains(':');
    let words: Vec<String> = match kind {
        Kind::Bird => vec!["show".into(), "route".into(), "all".into(), prefix.into()],
        Kind::Gobgp if v6 => vec![
            "global".into(),
            "rib".into(),
            "-a".into(),
            "ipv6".into(),
            prefix.into(),
        ],
        Kind::Gobgp => vec!["global".into(), "rib".into(), prefix.into()],
        Kind::Frr => vec![format!(
            "show bgp {} unicast {prefix}",
            if v6 { "ipv6" } else { "ipv4" }
        )],
    };
    words
}

/// A node running BIRD 2 the way Calico's confd templates (`bird.cfg`, `bird_aggr.cfg`,
/// `bird_ipam.cfg`, `bird6.cfg`) configure BIRD: the block as a static blackhole, the
/// export filter that sends the block and pool routes but nothing beneath the block,
/// after v3.32's preamble (LOCAL_PREF `BIRD_INT_MAX - krt_metric`, 1024 without one:
/// what tern sends too, so a node moving between BIRD and tern changes no attribute),
/// kernel learning (so routes to `cali*` workload interfaces are picked up) and
/// programming, `direct` without `cali*`, the mesh template (multihop, recursive
/// gateway, add paths, graceful restart, Calico's timers) and passive toward peers whose
/// address is greater as text, as the template decides.
pub fn calico_bird_config(spec: &LabSpec, me: &NodePlan) -> String {
    let nodes = spec.node_plans();
    let mut c = format!(
        "# Calico confd's bird.cfg / bird_aggr.cfg / bird_ipam.cfg, in BIRD 2 syntax.\n\
         log stderr all;\nrouter id {};\n",
        me.v4
    );
    let families: Vec<(&str, &str, &str, &str)> = {
        let mut f = vec![("ipv4", "", me.block_v4.as_str(), POOL_V4)];
        if let (Some(_), Some(b)) = (&me.v6, &me.block_v6) {
            f.push(("ipv6", "6", b.as_str(), POOL_V6));
        }
        f
    };
    for (fam, sfx, block, pool) in &families {
        let _ = write!(
            c,
            "protocol static blocks{sfx} {{ {fam}; route {block} blackhole; }}\n\
             filter calico_export_to_bgp_peers{sfx} {{\n  \
               if (!defined(krt_metric)) then {{ krt_metric = 1024; }}\n  \
               bgp_local_pref = 2147483647 - krt_metric;\n  \
               if ( net = {block} ) then accept;\n  \
               if ( net ~ {block} ) then reject;\n  \
               if ( net ~ {pool} ) then accept;\n  reject;\n}}\n\
             filter calico_kernel_programming{sfx} {{ accept; }}\n\
             protocol kernel kernel_routes{sfx} {{\n  learn;\n  persist;\n  scan time 2;\n  \
               graceful restart;\n  merge paths on;\n  \
               {fam} {{ import all; export filter calico_kernel_programming{sfx}; }};\n}}\n"
        );
    }
    let _ = write!(
        c,
        "protocol device {{ scan time 2; }}\n\
         protocol direct {{ ipv4;{} interface -\"cali*\", \"*\"; }}\n",
        if me.v6.is_some() { " ipv6;" } else { "" }
    );
    for (fam, sfx, _, _) in &families {
        let source = if *sfx == "6" {
            me.v6.clone().unwrap_or_default()
        } else {
            me.v4.clone()
        };
        let _ = write!(
            c,
            "template bgp bgp_template{sfx} {{\n  local as {CLUSTER_AS};\n  multihop;\n  \
               source address {source};\n  graceful restart;\n  connect delay time 2;\n  \
               connect retry time 5;\n  error wait time 5,30;\n  \
               {fam} {{ gateway recursive; import all; \
               export filter calico_export_to_bgp_peers{sfx}; add paths on; }};\n}}\n"
        );
    }
    // Mesh: every other node. Route reflectors: the reflectors only (Calico's BGPPeer
    // with a peerSelector becomes one `Node_` protocol per reflector).
    let (others, kind): (Vec<&NodePlan>, &str) = match spec.topology {
        Topology::RouteReflectors(_) => (nodes.iter().filter(|o| o.reflector).collect(), "Node"),
        _ => (
            nodes.iter().filter(|o| o.index != me.index).collect(),
            "Mesh",
        ),
    };
    for other in others {
        let mut pairs = vec![("", me.v4.clone(), other.v4.clone())];
        if let (Some(a), Some(b)) = (&me.v6, &other.v6) {
            pairs.push(("6", a.clone(), b.clone()));
        }
        for (sfx, mine, theirs) in pairs {
            let name = theirs.replace(['.', ':'], "_");
            // The comment goes after the brace: inside it would hide the brace.
            let (passive, why) = if kind == "Mesh" && theirs > mine {
                (
                    " passive on;",
                    " # Mesh is unidirectional, peer will connect to us.",
                )
            } else {
                ("", "")
            };
            let _ = writeln!(
                c,
                "protocol bgp {kind}_{name} from bgp_template{sfx} {{ neighbor {theirs} as {CLUSTER_AS};{passive} }}{why}"
            );
        }
    }
    if spec.tor.is_some() {
        let _ = writeln!(
            c,
            "protocol bgp Global_tor from bgp_template {{ neighbor {TOR_V4} as {TOR_AS}; }}"
        );
        if me.v6.is_some() {
            let _ = writeln!(
                c,
                "protocol bgp Global_tor6 from bgp_template6 {{ neighbor {TOR_V6} as {TOR_AS}; }}"
            );
        }
    }
    c
}

/// A BIRD route reflector for every tern node (its clients), IPv4 and dual-stack IPv6.
pub fn bird_reflector_config(spec: &LabSpec) -> String {
    let mut c = format!(
        "log stderr all;\nrouter id {BIRD_RR_V4};\nprotocol device {{ }}\n\
         protocol direct {{ ipv4;{} }}\n\
         template bgp rr_clients {{ local as {CLUSTER_AS}; rr client; rr cluster id {BIRD_RR_V4}; \
         hold time 9; keepalive time 3; connect retry time 1; error wait time 1,4; \
         graceful restart on; }}\n",
        if spec.ipv6 { " ipv6;" } else { "" }
    );
    for n in spec
        .node_plans()
        .iter()
        .filter(|n| n.kind == NodeKind::Tern && !n.far)
    {
        let _ = writeln!(
            c,
            "protocol bgp c{} from rr_clients {{ neighbor {} as {CLUSTER_AS}; \
             ipv4 {{ import all; export all; }}; }}",
            n.index, n.v4
        );
        if let Some(v6) = &n.v6 {
            let _ = writeln!(
                c,
                "protocol bgp c{}v6 from rr_clients {{ neighbor {v6} as {CLUSTER_AS}; \
                 ipv6 {{ import all; export all; }}; }}",
                n.index
            );
        }
    }
    c
}
