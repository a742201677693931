//! Which learnt routes tern writes to the kernel, and with what metric, so that it
//! never fights Felix over a route (Calico v3.32's confd `processIPPools` and the
//! `calico_kernel_programming` filter of `bird_ipam.cfg.template`):
//! - VXLAN pools (`vxlanMode` Always or CrossSubnet) are Felix's (`vxlan.calico`);
//! - with BGPConfiguration `programClusterRoutes: Disabled` every pool is Felix's
//!   (IPIP and unencapsulated alike); with `Enabled` (the default) tern programs IPIP
//!   pools (through `tunl0`) and unencapsulated pools;
//! - routes outside every pool (a fabric's) are always tern's, except one to the node's
//!   own subnet: in BIRD the `direct` protocol's route for it (preference 240) beats
//!   the BGP one, and BIRD's kernel protocol does not export device routes, so BIRD
//!   writes nothing for it and the kernel's connected route stays alone.
//!
//! The metric is what v3.32's BIRD sets as `krt_metric` for a BGP route
//! (`SetMetricForBGPRoutes` in confd's `populateNodeConfig`): `BIRD_INT_MAX -
//! LOCAL_PREF` when the route carries a LOCAL_PREF, else the family's normal route
//! priority (`ipv4NormalRoutePriority` / `ipv6NormalRoutePriority`, default 1024).
//! BIRD ignores a LOCAL_PREF received over eBGP (RFC 4271 5.1.5) but attaches its
//! default, 100, to every eBGP route, and so does tern's speaker: eBGP routes get
//! `BIRD_INT_MAX - 100` (2147483547), as a Calico node's BIRD 1.6 installs them
//! (`tests/side_by_side_lab.rs`). The normal priority reaches the kernel through the
//! LOCAL_PREF other nodes derive from it for their own routes.

use ipnet::IpNet;

use super::{Encapsulation, Intent};
use crate::cluster::{EncapMode, DEFAULT_INTERFACE_PREFIX};

/// The workload interface prefixes: FelixConfiguration's, else Felix's default.
pub(super) fn workload_prefixes(configured: &[String]) -> Vec<String> {
    if configured.is_empty() {
        vec![DEFAULT_INTERFACE_PREFIX.to_string()]
    } else {
        configured.to_vec()
    }
}

impl Intent {
    /// The pools whose routes Felix programs: VXLAN pools always, every pool when
    /// `programClusterRoutes` is `Disabled`.
    pub(super) fn felix_pools(&self) -> Vec<IpNet> {
        self.pools
            .iter()
            .filter(|p| p.vxlan != EncapMode::Never || !self.program_cluster_routes)
            .map(|p| p.cidr)
            .collect()
    }

    /// The subnets of the node's own addresses (its Node resource's prefix lengths).
    pub(super) fn connected(&self) -> Vec<IpNet> {
        let v4 = self
            .ipv4
            .and_then(|(a, l)| IpNet::new(std::net::IpAddr::V4(a), l).ok());
        let v6 = self.ipv6.and_then(|(a, l)| IpNet::new(a, l).ok());
        v4.into_iter().chain(v6).map(|n| n.trunc()).collect()
    }

    /// Whether `ifname` is a workload interface (starts with one of Felix's
    /// `interfacePrefix` entries).
    pub fn is_workload_interface(&self, ifname: &str) -> bool {
        self.workload_prefixes
            .iter()
            .any(|p| ifname.starts_with(p.as_str()))
    }
}

impl Encapsulation {
    /// Whether tern writes a learnt route to `net` to the kernel: false inside a pool
    /// whose routes Felix programs, and for the node's own subnet.
    pub fn programs(&self, net: &IpNet) -> bool {
        !self.felix_pools.iter().any(|p| p.contains(net)) && !self.connected.contains(net)
    }

    /// The kernel metric of a learnt route to `net`: `BIRD_INT_MAX - local_pref` for
    /// a route with a LOCAL_PREF, the family's normal route priority otherwise (see
    /// the module documentation).
    pub fn metric(&self, net: &IpNet, local_pref: Option<u32>) -> u32 {
        match local_pref {
            Some(lp) => tern_bgp::policy::BIRD_INT_MAX.saturating_sub(lp),
            None => self.priority.of(net),
        }
    }
}
