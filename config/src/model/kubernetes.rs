//! The Kubernetes core objects the Kubernetes datastore adds to Calico's resources:
//! `Secret` (BGP passwords), `Service` and `EndpointSlice` (service advertisement),
//! with only the fields tern reads, in Kubernetes' own shapes.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Metadata;

/// A Kubernetes `Secret` (`v1`): only the data is read. Values stay base64 text here;
/// [`crate::cluster`] decodes them into redacted secrets.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeSecret {
    /// Name and namespace.
    #[serde(default)]
    pub metadata: Metadata,
    /// Key → base64 value.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// Key → plain value, as a hand-written manifest may give it (Kubernetes merges
    /// it over `data` when writing; the API server never returns it).
    #[serde(default)]
    pub string_data: BTreeMap<String, String>,
}

impl std::fmt::Debug for KubeSecret {
    // The values are the passwords: only the keys are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSecret")
            .field("metadata", &self.metadata)
            .field("data", &self.data.keys().collect::<Vec<_>>())
            .field("string_data", &self.string_data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A Kubernetes `Service` (`v1`): the addresses and traffic policies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeService {
    /// Name and namespace.
    #[serde(default)]
    pub metadata: Metadata,
    /// `spec`.
    #[serde(default)]
    pub spec: KubeServiceSpec,
    /// `status`.
    #[serde(default)]
    pub status: KubeServiceStatus,
}

/// `Service.spec`, the fields route advertisement needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeServiceSpec {
    /// `ClusterIP` (the default), `NodePort`, `LoadBalancer` or `ExternalName`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The primary cluster IP, or `None` for a headless service.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// Every cluster IP (dual stack: one per family).
    #[serde(default, rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// External IPs.
    #[serde(default, rename = "externalIPs")]
    pub external_ips: Vec<String>,
    /// `Cluster` or `Local`.
    pub external_traffic_policy: Option<String>,
    /// `Cluster` or `Local` (read, not used: confd does not use it either).
    pub internal_traffic_policy: Option<String>,
}

/// `Service.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeServiceStatus {
    /// `loadBalancer`.
    #[serde(default)]
    pub load_balancer: KubeLoadBalancerStatus,
}

/// `status.loadBalancer`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct KubeLoadBalancerStatus {
    /// Addresses the load balancer was given.
    #[serde(default)]
    pub ingress: Vec<KubeIngress>,
}

/// One `status.loadBalancer.ingress` entry (`hostname` entries have no `ip`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct KubeIngress {
    /// The address.
    pub ip: Option<String>,
}

/// A Kubernetes `EndpointSlice` (`discovery.k8s.io/v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeEndpointSlice {
    /// Name, namespace and the `kubernetes.io/service-name` label.
    #[serde(default)]
    pub metadata: Metadata,
    /// `IPv4`, `IPv6` or `FQDN`.
    #[serde(default)]
    pub address_type: String,
    /// The endpoints.
    #[serde(default)]
    pub endpoints: Vec<KubeEndpoint>,
}

/// One endpoint of a slice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeEndpoint {
    /// Its addresses.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The node it runs on.
    pub node_name: Option<String>,
    /// Readiness.
    #[serde(default)]
    pub conditions: KubeEndpointConditions,
}

/// `conditions` of an endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct KubeEndpointConditions {
    /// Absent means ready (the API's documented meaning of a null `ready`).
    pub ready: Option<bool>,
}
