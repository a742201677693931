//! Kubernetes `Service`s and `EndpointSlice`s, validated into what service route
//! advertisement needs (see `crate::intent::services` for the rule): a service's type,
//! addresses and external traffic policy, and where its endpoints run.

use std::net::IpAddr;

use super::parse::RawDoc;
use super::AddressFamily;
use crate::error::ConfigError;
use crate::model::{KubeEndpointSlice, KubeService};

/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `Service.spec.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServiceType {
    /// `ClusterIP` (also when absent, Kubernetes' default).
    #[default]
    ClusterIp,
    /// `NodePort`.
    NodePort,
    /// `LoadBalancer`.
    LoadBalancer,
    /// `ExternalName`: a DNS alias, no addresses to route.
    ExternalName,
}

/// `externalTrafficPolicy` / `internalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficPolicy {
    /// Any node forwards to any endpoint.
    Cluster,
    /// A node forwards only to its own endpoints.
    Local,
}

/// A validated Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Type.
    pub service_type: ServiceType,
    /// Cluster IPs (`clusterIPs`, or `clusterIP` when that is absent); empty for a
    /// headless service (`None`).
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip`.
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.externalTrafficPolicy`, when set.
    pub external_policy: Option<TrafficPolicy>,
    /// `spec.internalTrafficPolicy`, when set (read for completeness: Calico's route
    /// generator does not use it, so neither does tern).
    pub internal_policy: Option<TrafficPolicy>,
}

/// One endpoint of a slice: where it runs and whether it is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `nodeName`.
    pub node: Option<String>,
    /// `conditions.ready`, absent counting as ready.
    pub ready: bool,
}

/// A validated EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSlice {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The Service it belongs to (its `kubernetes.io/service-name` label).
    pub service: Option<String>,
    /// `addressType`: the family, or `None` for `FQDN`.
    pub family: Option<AddressFamily>,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
}

/// Reads one Service document.
pub(super) fn service(d: &RawDoc, errors: &mut Vec<ConfigError>) -> Option<Service> {
    let s: KubeService = d.parse_kubernetes().map_err(|e| errors.push(e)).ok()?;
    let before = errors.len();
    let service_type = match s.spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIp,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => ServiceType::ExternalName,
        Some(other) => {
            errors.push(d.error(
                "spec.type",
                format!("{other:?} is not a Service type; use ClusterIP, NodePort, LoadBalancer or ExternalName"),
            ));
            ServiceType::ClusterIp
        }
    };
    // `clusterIPs` repeats `clusterIP` first; an older object may have only the latter.
    let (field, indexed, texts) = if s.spec.cluster_ips.is_empty() {
        (
            "spec.clusterIP",
            false,
            s.spec.cluster_ip.iter().cloned().collect(),
        )
    } else {
        ("spec.clusterIPs", true, s.spec.cluster_ips)
    };
    let texts: Vec<String> = texts
        .into_iter()
        .filter(|t| !t.is_empty() && t != "None")
        .collect();
    let cluster_ips = addresses(d, field, indexed, &texts, errors);
    let external_ips = addresses(d, "spec.externalIPs", true, &s.spec.external_ips, errors);
    let mut load_balancer_ips = Vec::new();
    for (n, ingress) in s.status.load_balancer.ingress.iter().enumerate() {
        // An ingress may carry only a hostname: nothing to route.
        let Some(text) = ingress.ip.as_deref().filter(|t| !t.is_empty()) else {
            continue;
        };
        let field = format!("status.loadBalancer.ingress[{n}].ip");
        load_balancer_ips.extend(addresses(d, &field, false, &[text.to_string()], errors));
    }
    let external_policy = policy(
        d,
        "spec.externalTrafficPolicy",
        &s.spec.external_traffic_policy,
        errors,
    );
    let internal_policy = policy(
        d,
        "spec.internalTrafficPolicy",
        &s.spec.internal_traffic_policy,
        errors,
    );
    (errors.len() == before).then_some(Service {
        namespace: s.metadata.namespace,
        name: s.metadata.name,
        service_type,
        cluster_ips,
        external_ips,
        load_balancer_ips,
        external_policy,
        internal_policy,
    })
}

/// Parses the addresses of `field` (named `field[i]` when it is a list).
fn addresses(
    d: &RawDoc,
    field: &str,
    indexed: bool,
    texts: &[String],
    errors: &mut Vec<ConfigError>,
) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for (n, t) in texts.iter().enumerate() {
        match t.parse::<IpAddr>() {
            Ok(a) => out.push(a),
            Err(_) => {
                let field = if indexed {
                    format!("{field}[{n}]")
                } else {
                    field.to_string()
                };
                errors.push(d.error(&field, format!("{t:?} is not an IP address")));
            }
        }
    }
    out
}

fn policy(
    d: &RawDoc,
    field: &str,
    v: &Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Option<TrafficPolicy> {
    match v.as_deref() {
        None | Some("") => None,
        Some("Cluster") => Some(TrafficPolicy::Cluster),
        Some("Local") => Some(TrafficPolicy::Local),
        Some(other) => {
            errors.push(d.error(
                field,
                format!("{other:?} is not a traffic policy; use Cluster or Local"),
            ));
            None
        }
    }
}

/// Reads one EndpointSlice document.
pub(super) fn endpoint_slice(d: &RawDoc, errors: &mut Vec<ConfigError>) -> Option<EndpointSlice> {
    let s: KubeEndpointSlice = d.parse_kubernetes().map_err(|e| errors.push(e)).ok()?;
    let family = match s.address_type.as_str() {
        "IPv4" => Some(AddressFamily::Ipv4),
        "IPv6" => Some(AddressFamily::Ipv6),
        "FQDN" => None,
        other => {
            errors.push(d.error(
                "addressType",
                format!("{other:?} is not an address type; use IPv4, IPv6 or FQDN"),
            ));
            return None;
        }
    };
    Some(EndpointSlice {
        service: s.metadata.labels.get(SERVICE_NAME_LABEL).cloned(),
        namespace: s.metadata.namespace,
        name: s.metadata.name,
        family,
        endpoints: s
            .endpoints
            .into_iter()
            .map(|e| Endpoint {
                node: e.node_name,
                ready: e.conditions.ready != Some(false),
            })
            .collect(),
    })
}
