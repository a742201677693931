//! Reading Secrets, Services and EndpointSlices: accepted without warnings, their
//! mistakes named by origin and field, secret values never printed.

use crate::cluster::{
    AddressFamily, Cluster, ConfigErrors, PasswordSource, ServiceType, TrafficPolicy,
};
use crate::datastore::Document;
use crate::error::Warning;

/// Loads one document per (origin, text), as the Kubernetes datastore hands them over.
fn load(docs: &[(&str, &str)]) -> Result<(Cluster, Vec<Warning>), ConfigErrors> {
    let docs: Vec<Document> = docs
        .iter()
        .map(|(o, t)| Document {
            origin: (*o).into(),
            text: (*t).into(),
        })
        .collect();
    Cluster::from_documents(&docs)
}

fn errors(docs: &[(&str, &str)]) -> String {
    match load(docs) {
        Ok(_) => panic!("accepted: {docs:?}"),
        Err(e) => e.to_string(),
    }
}

// "s3cret" and "other" in base64.
const SECRET: &str = "apiVersion: v1\nkind: Secret\ntype: Opaque\nmetadata: {name: bgp-secrets, namespace: calico-system, uid: x}\ndata: {tor: czNjcmV0, spare: b3RoZXI=}\n";
const SERVICE: &str = r#"{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7"},
 "spec": {"type": "LoadBalancer", "clusterIP": "198.51.100.200", "clusterIPs": ["198.51.100.200", "2001:db8:5::200"],
          "externalIPs": ["203.0.113.7"], "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Cluster",
          "ports": [{"port": 80}], "selector": {"app": "web"}, "sessionAffinity": "None"},
 "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.50"}, {"hostname": "lb.example"}]}}}"#;
const SLICE: &str = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-abcde\n  namespace: shop\n  labels: {kubernetes.io/service-name: web}\naddressType: IPv4\nports: [{port: 80}]\nendpoints:\n- addresses: [198.18.0.5]\n  nodeName: node-a\n  conditions: {ready: true, serving: true}\n- addresses: [198.18.1.5]\n  nodeName: node-b\n";

fn secret_ref(name: &str, key: &str) -> PasswordSource {
    PasswordSource::SecretKeyRef {
        name: name.into(),
        key: key.into(),
    }
}

#[test]
fn kubernetes_kinds_are_read_without_warnings() {
    let (c, w) = load(&[
        ("kubernetes Secret calico-system/bgp-secrets", SECRET),
        ("kubernetes Service shop/web", SERVICE),
        ("kubernetes EndpointSlice shop/web-abcde", SLICE),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(w.is_empty(), "{w:?}");
    let s = &c.services[0];
    assert_eq!((s.namespace.as_str(), s.name.as_str()), ("shop", "web"));
    assert_eq!(s.service_type, ServiceType::LoadBalancer);
    assert_eq!(
        s.cluster_ips,
        vec![
            "198.51.100.200".parse::<std::net::IpAddr>().unwrap(),
            "2001:db8:5::200".parse().unwrap()
        ]
    );
    assert_eq!(
        s.external_ips,
        vec!["203.0.113.7".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        s.load_balancer_ips,
        vec!["203.0.113.50".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(s.external_policy, Some(TrafficPolicy::Local));
    assert_eq!(s.internal_policy, Some(TrafficPolicy::Cluster));
    let e = &c.endpoint_slices[0];
    assert_eq!(e.service.as_deref(), Some("web"));
    assert_eq!(e.family, Some(AddressFamily::Ipv4));
    // An endpoint without conditions counts as ready.
    let eps: Vec<(Option<&str>, bool)> = e
        .endpoints
        .iter()
        .map(|e| (e.node.as_deref(), e.ready))
        .collect();
    assert_eq!(eps, vec![(Some("node-a"), true), (Some("node-b"), true)]);
}

#[test]
fn a_headless_service_has_no_cluster_ip() {
    let headless = "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: shop}\nspec: {clusterIP: None, clusterIPs: [None]}\n";
    let (c, _) =
        load(&[("kubernetes Service shop/db", headless)]).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.services[0].cluster_ips.is_empty());
    assert_eq!(c.services[0].service_type, ServiceType::ClusterIp);
}

#[test]
fn malformed_objects_name_origin_and_field() {
    let bad_ready = SLICE.replace("ready: true", "ready: maybe");
    let e = errors(&[("kubernetes EndpointSlice shop/web-abcde", &bad_ready)]);
    assert!(e.contains("kubernetes EndpointSlice shop/web-abcde"), "{e}");
    assert!(e.contains("EndpointSlice shop/web-abcde)"), "{e}");
    assert!(e.contains("field `endpoints[0].conditions.ready`"), "{e}");

    let bad_ip = SERVICE.replace("\"2001:db8:5::200\"", "\"2001:db8:5::zz\"");
    let e = errors(&[("kubernetes Service shop/web", &bad_ip)]);
    assert!(e.contains("kubernetes Service shop/web"), "{e}");
    assert!(
        e.contains("field `spec.clusterIPs[1]`: \"2001:db8:5::zz\" is not an IP address"),
        "{e}"
    );

    let bad_policy = SERVICE.replace("\"Local\"", "\"Nearby\"");
    let e = errors(&[("kubernetes Service shop/web", &bad_policy)]);
    assert!(e.contains("field `spec.externalTrafficPolicy`"), "{e}");

    let bad_type = SLICE.replace("addressType: IPv4", "addressType: IPv5");
    let e = errors(&[("kubernetes EndpointSlice shop/web-abcde", &bad_type)]);
    assert!(e.contains("field `addressType`"), "{e}");

    let bad_data = SECRET.replace("tor: czNjcmV0", "tor: [1, 2]");
    let e = errors(&[("kubernetes Secret calico-system/bgp-secrets", &bad_data)]);
    assert!(e.contains("field `data.tor`"), "{e}");

    let bad_version = SERVICE.replace("\"apiVersion\": \"v1\"", "\"apiVersion\": \"v2\"");
    let e = errors(&[("kubernetes Service shop/web", &bad_version)]);
    assert!(
        e.contains("field `apiVersion`") && e.contains("use v1"),
        "{e}"
    );
}

#[test]
fn secret_key_refs_resolve_from_the_snapshot() {
    let (c, _) = load(&[("kubernetes Secret calico-system/bgp-secrets", SECRET)]).unwrap();
    let s = c
        .secrets
        .lookup(&secret_ref("bgp-secrets", "tor"))
        .unwrap()
        .unwrap();
    assert_eq!(s.expose(), "s3cret");
    // Another secret name is not in the snapshot: the mounted file is read instead.
    assert!(c.secrets.lookup(&secret_ref("elsewhere", "tor")).is_none());
    assert!(c.secrets.lookup(&PasswordSource::Env("X".into())).is_none());
    // Nothing prints a value, in plain text or base64.
    let debug = format!("{c:?}");
    for leak in ["s3cret", "czNjcmV0", "other", "b3RoZXI="] {
        assert!(!debug.contains(leak), "{leak} in {debug}");
    }
}

#[test]
fn a_missing_key_or_bad_base64_is_an_error_naming_secret_and_key() {
    let text = SECRET.replace("spare: b3RoZXI=", "spare: 'not base64!'");
    let (c, _) = load(&[("kubernetes Secret calico-system/bgp-secrets", &text)]).unwrap();
    let e = c
        .secrets
        .lookup(&secret_ref("bgp-secrets", "nope"))
        .unwrap()
        .unwrap_err();
    assert!(
        e.starts_with("secret calico-system/bgp-secrets key nope: no such key"),
        "{e}"
    );
    assert!(e.contains("spare, tor"), "{e}");
    let e = c
        .secrets
        .lookup(&secret_ref("bgp-secrets", "spare"))
        .unwrap()
        .unwrap_err();
    assert_eq!(
        e,
        "secret calico-system/bgp-secrets key spare: the value is not valid base64"
    );
    // An empty value is no TCP-MD5 key.
    let text = SECRET.replace("spare: b3RoZXI=", "spare: ''");
    let (c, _) = load(&[("kubernetes Secret calico-system/bgp-secrets", &text)]).unwrap();
    let e = c
        .secrets
        .lookup(&secret_ref("bgp-secrets", "spare"))
        .unwrap()
        .unwrap_err();
    assert!(
        e.contains("secret calico-system/bgp-secrets key spare") && e.contains("1-80 bytes"),
        "{e}"
    );
}

#[test]
fn one_secret_name_in_two_namespaces_is_refused() {
    let other = SECRET.replace("calico-system", "kube-system");
    let e = errors(&[
        ("kubernetes Secret calico-system/bgp-secrets", SECRET),
        ("kubernetes Secret kube-system/bgp-secrets", &other),
    ]);
    assert!(e.contains("a second Secret named \"bgp-secrets\""), "{e}");
    assert!(!e.contains("s3cret") && !e.contains("czNjcmV0"), "{e}");
}
