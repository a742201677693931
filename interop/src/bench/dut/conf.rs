//! Each daemon's configuration for a run ([`DutSpec`]): tern's Calico resources, and
//! the closest native text for BIRD 2, FRR's bgpd and GoBGP. As a route reflector
//! (`reflector`), every peer is a client and the daemon exports what it learns.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::{DutSpec, DUT_AS, DUT_V4, DUT_V6};

impl DutSpec {
    fn ibgp(&self) -> bool {
        self.peers.first().is_some_and(|p| p.1 == DUT_AS)
    }

    fn local_for(addr: &IpAddr) -> IpAddr {
        if addr.is_ipv4() {
            IpAddr::V4(DUT_V4)
        } else {
            IpAddr::V6(DUT_V6)
        }
    }

    /// tern's `cluster.yaml`: the node, and either a BGPPeer per peer (eBGP) or a Node
    /// per peer with the node-to-node mesh (iBGP). As a reflector: the mesh off, the
    /// node with a `routeReflectorClusterID`, and a BGPPeer from it to `all()` nodes
    /// (Calico's own recipe; every node of the AS becomes a client).
    pub fn tern_cluster(&self) -> String {
        let mut y = String::new();
        let doc = |y: &mut String, kind: &str, name: &str, spec: &str| {
            let _ = write!(
                y,
                "---\napiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata: {{name: {name}}}\nspec:\n{spec}"
            );
        };
        doc(
            &mut y,
            "BGPConfiguration",
            "default",
            &format!(
                "  asNumber: {DUT_AS}\n  nodeToNodeMeshEnabled: {}\n",
                self.ibgp() && !self.reflector
            ),
        );
        let cluster_id = if self.reflector {
            format!("    routeReflectorClusterID: {DUT_V4}\n")
        } else {
            String::new()
        };
        doc(
            &mut y,
            "Node",
            "dut",
            &format!(
                "  bgp:\n    ipv4Address: {DUT_V4}/24\n    ipv6Address: \"{DUT_V6}/64\"\n{cluster_id}"
            ),
        );
        if self.reflector {
            doc(
                &mut y,
                "BGPPeer",
                "clients",
                "  node: dut\n  peerSelector: all()\n",
            );
            // Calico exports only what lies in its IP pools, a reflector's learnt
            // routes included: the pools the clients' blocks come from.
            for (name, cidr, block) in [
                ("v4", "198.18.0.0/15", 26),
                ("v6", "2001:db8:4000::/47", 122),
            ] {
                doc(
                    &mut y,
                    "IPPool",
                    name,
                    &format!("  cidr: \"{cidr}\"\n  blockSize: {block}\n"),
                );
            }
        }
        for (i, (addr, asn)) in self.peers.iter().enumerate() {
            if self.ibgp() {
                let a = match addr {
                    IpAddr::V4(a) => format!("    ipv4Address: {a}/24\n"),
                    IpAddr::V6(a) => format!("    ipv6Address: \"{a}/64\"\n"),
                };
                doc(
                    &mut y,
                    "Node",
                    &format!("peer-{i}"),
                    &format!("  bgp:\n{a}"),
                );
            } else {
                doc(
                    &mut y,
                    "BGPPeer",
                    &format!("feed-{i}"),
                    &format!("  peerIP: \"{addr}\"\n  asNumber: {asn}\n"),
                );
            }
        }
        y
    }

    /// BIRD's configuration: kernel protocols exporting everything (persisting over a
    /// restart, as Calico's), one BGP protocol per peer importing everything.
    pub fn bird_conf(&self) -> String {
        self.bird_conf_for(true)
    }

    /// BIRD's configuration, with the kernel protocols or (`kernel` false: RIB only)
    /// without them.
    pub fn bird_conf_for(&self, kernel: bool) -> String {
        let mut c = format!("log stderr all;\nrouter id {DUT_V4};\nprotocol device {{ }}\n");
        if kernel {
            c.push_str(
                "protocol kernel { ipv4 { import none; export all; }; merge paths on; persist; graceful restart; }\n\
                 protocol kernel { ipv6 { import none; export all; }; merge paths on; persist; graceful restart; }\n",
            );
        }
        let _ = writeln!(
            c,
            "template bgp feed {{ local as {DUT_AS}; hold time 90; connect delay time 1; connect retry time 1; graceful restart on; }}"
        );
        // iBGP is multihop in BIRD unless told the peer is directly connected.
        let direct = if self.ibgp() { " direct;" } else { "" };
        let (rr, export) = if self.reflector {
            (format!(" rr client; rr cluster id {DUT_V4};"), "all")
        } else {
            (String::new(), "none")
        };
        for (i, (addr, asn)) in self.peers.iter().enumerate() {
            let fam = if addr.is_ipv4() { "ipv4" } else { "ipv6" };
            let _ = writeln!(
                c,
                "protocol bgp p{i} from feed {{ local {} as {DUT_AS}; neighbor {addr} as {asn};{direct}{rr} \
                 {fam} {{ import all; export {export}; }}; }}",
                Self::local_for(addr)
            );
        }
        c
    }

    /// FRR's bgpd configuration: one peer group holding every peer.
    pub fn frr_conf(&self) -> String {
        let remote = if self.ibgp() {
            "internal".to_string()
        } else {
            self.peers.first().map(|p| p.1).unwrap_or(0).to_string()
        };
        let mut c = format!(
            "frr defaults traditional\nhostname dut\nlog stdout\nrouter bgp {DUT_AS}\n \
             bgp router-id {DUT_V4}\n no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n \
             neighbor FEED peer-group\n neighbor FEED remote-as {remote}\n \
             neighbor FEED timers connect 1\n"
        );
        if self.reflector {
            let _ = writeln!(c, " bgp cluster-id {DUT_V4}");
        }
        if self.frr_graceful_restart {
            c.push_str(" bgp graceful-restart\n bgp graceful-restart preserve-fw-state\n");
        }
        for (addr, _) in &self.peers {
            let _ = writeln!(c, " neighbor {addr} peer-group FEED");
        }
        let fam = if self.peers.first().is_some_and(|p| p.0.is_ipv6()) {
            "ipv6"
        } else {
            "ipv4"
        };
        let rr = if self.reflector {
            "  neighbor FEED route-reflector-client\n"
        } else {
            ""
        };
        let _ = writeln!(
            c,
            " address-family {fam} unicast\n  neighbor FEED activate\n{rr} exit-address-family"
        );
        c
    }

    /// GoBGP's configuration.
    pub fn gobgp_conf(&self) -> String {
        let mut c = format!(
            "[global.config]\n  as = {DUT_AS}\n  router-id = \"{DUT_V4}\"\n  \
             local-address-list = [\"{DUT_V4}\", \"{DUT_V6}\"]\n"
        );
        for (addr, asn) in &self.peers {
            let fam = if addr.is_ipv4() {
                "ipv4-unicast"
            } else {
                "ipv6-unicast"
            };
            let _ = writeln!(
                c,
                "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{addr}\"\n    \
                 peer-as = {asn}\n  [neighbors.transport.config]\n    local-address = \"{}\"\n  \
                 [neighbors.timers.config]\n    connect-retry = 1\n  \
                 [neighbors.graceful-restart.config]\n    enabled = true\n    restart-time = 120\n  \
                 [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"{fam}\"",
                Self::local_for(addr)
            );
            if self.reflector {
                let _ = writeln!(
                    c,
                    "  [neighbors.route-reflector.config]\n    route-reflector-client = true\n    \
                     route-reflector-cluster-id = \"{DUT_V4}\""
                );
            }
        }
        c
    }
}
