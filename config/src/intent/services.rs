//! Per-service host routes (/32, /128), following the rule of Calico's confd route
//! generator for Kubernetes Services, on top of the aggregate ranges of
//! `serviceClusterIPs` / `serviceExternalIPs` / `serviceLoadBalancerIPs` that every
//! node originates:
//!
//! - nothing when none of the three ranges is configured, or when this node carries
//!   the label `node.kubernetes.io/exclude-from-external-load-balancers: "true"`;
//! - services of type `ExternalName`, and services without a cluster IP (headless,
//!   `clusterIP: None`), are skipped;
//! - with `externalTrafficPolicy: Local`, the service is advertised by the nodes that
//!   run one of its endpoints: an EndpointSlice of the service (its
//!   `kubernetes.io/service-name` label, same namespace) whose `addressType` is a family
//!   of the service's cluster IPs, with an endpoint whose `nodeName` is this node and
//!   whose `conditions.ready` is not `false`;
//! - with `externalTrafficPolicy: Cluster`, the service is advertised by *every* node
//!   only when one of its load-balancer IPs (type `LoadBalancer`) or external IPs lies
//!   in a single-address entry (/32, /128) of `serviceLoadBalancerIPs` /
//!   `serviceExternalIPs`; otherwise the aggregate ranges are enough and nothing more
//!   is advertised;
//! - an advertised service contributes a host route for each of its external IPs
//!   inside `serviceExternalIPs`, each load-balancer IP inside
//!   `serviceLoadBalancerIPs`, and each cluster IP inside `serviceClusterIPs`.
//!   (confd advertises every cluster IP as soon as `serviceClusterIPs` is set at all;
//!   tern asks the cluster IP to be inside a configured range, as for the other two.)
//!
//! `internalTrafficPolicy` plays no part, as in confd: it shapes kube-proxy's
//! forwarding of in-cluster traffic, not what is announced outside. The endpoint's
//! `nodeName` is compared with the tern node name, which is the Kubernetes node name
//! in the usual deployment (calico-node's `CALICO_K8S_NODE_REF` case is not covered).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::cluster::{AddressFamily, Cluster, Service, ServiceKind, ServiceType, TrafficPolicy};

/// The Node label that takes a node out of service advertisement.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The host routes `node` originates for services, with the range kind of each.
pub(super) fn routes(cluster: &Cluster, node: &str) -> BTreeMap<IpNet, ServiceKind> {
    let mut out = BTreeMap::new();
    let ranges = &cluster.bgp.services;
    let excluded = cluster
        .nodes
        .get(node)
        .and_then(|n| n.labels.get(EXCLUDE_LABEL))
        .is_some_and(|v| v == "true");
    if ranges.is_empty() || excluded {
        return out;
    }
    for svc in &cluster.services {
        if svc.service_type == ServiceType::ExternalName || svc.cluster_ips.is_empty() {
            continue;
        }
        let advertise = match svc.external_policy {
            Some(TrafficPolicy::Local) => has_local_endpoint(cluster, svc, node),
            Some(TrafficPolicy::Cluster) => has_single_address_entry(ranges, svc),
            None => false,
        };
        if !advertise {
            continue;
        }
        let groups = [
            (ServiceKind::ClusterIp, &svc.cluster_ips),
            (ServiceKind::ExternalIp, &svc.external_ips),
            (ServiceKind::LoadBalancerIp, &svc.load_balancer_ips),
        ];
        for (kind, addrs) in groups {
            for a in addrs.iter().filter(|a| in_range(ranges, kind, **a, false)) {
                out.entry(IpNet::from(*a)).or_insert(kind);
            }
        }
    }
    out
}

/// `addr` lies in a configured range of `kind` (with `single`: a /32 or /128 one).
fn in_range(
    ranges: &[(IpNet, ServiceKind)],
    kind: ServiceKind,
    addr: IpAddr,
    single: bool,
) -> bool {
    ranges.iter().any(|(net, k)| {
        *k == kind && net.contains(&addr) && (!single || net.prefix_len() == net.max_prefix_len())
    })
}

/// confd's exception for `Cluster` policy: a load-balancer or external IP that was
/// configured as a single address is announced from every node.
fn has_single_address_entry(ranges: &[(IpNet, ServiceKind)], svc: &Service) -> bool {
    let lb = svc.service_type == ServiceType::LoadBalancer
        && svc
            .load_balancer_ips
            .iter()
            .any(|a| in_range(ranges, ServiceKind::LoadBalancerIp, *a, true));
    lb || svc
        .external_ips
        .iter()
        .any(|a| in_range(ranges, ServiceKind::ExternalIp, *a, true))
}

/// A ready endpoint of `svc`, of one of its families, runs on `node`.
fn has_local_endpoint(cluster: &Cluster, svc: &Service, node: &str) -> bool {
    let families: Vec<AddressFamily> = svc
        .cluster_ips
        .iter()
        .map(|a| AddressFamily::of(*a))
        .collect();
    cluster
        .endpoint_slices
        .iter()
        .filter(|s| s.namespace == svc.namespace && s.service.as_deref() == Some(svc.name.as_str()))
        .filter(|s| s.family.is_some_and(|f| families.contains(&f)))
        .flat_map(|s| &s.endpoints)
        .any(|e| e.ready && e.node.as_deref() == Some(node))
}

#[cfg(test)]
#[path = "services_tests.rs"]
mod tests;
