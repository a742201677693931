//! The Kubernetes manifests in deploy/kubernetes/, read into the API's own types
//! (k8s-openapi): every field is one the API knows, and the DaemonSet is what the
//! documentation promises: host network, exactly three capabilities, `tern health`
//! probes, NODENAME and NAMESPACE from the pod, the ConfigMap's tern.yaml at /etc/tern
//! (and valid for tern, with BIRD's sockets in /var/run/calico), /run/tern and
//! /var/run/calico from the host and writable, the service account of rbac.yaml. That
//! rbac.yaml grants exactly the API calls the store makes is the unit test
//! `rbac_yaml_grants_exactly_the_api_calls` in tern-config; this file checks that the
//! roles are well-formed and bound to the DaemonSet's account.
// A test that cannot read its fixtures has failed: unwrap says where.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::Value;
use tern_config::daemon::env::MapEnvironment;
use tern_config::{DaemonConfig, Datastore};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

/// The manifests kubectl applies: every `*.yaml` but kustomize's own file.
fn manifest_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    files.sort();
    files
}

/// Every document of every manifest, as (file, document).
fn documents() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for f in manifest_files() {
        let text = std::fs::read_to_string(dir().join(&f)).unwrap();
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{f}: not YAML: {e}"));
        out.extend(docs.into_iter().map(|d| (f.clone(), d)));
    }
    out
}

/// Reads `doc` as `T` and writes it back: k8s-openapi ignores fields it does not know,
/// so a misspelt field (`hostNetwrok`) shows up as a difference here.
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(file: &str, doc: &Value) -> T {
    let name = format!("{file}: {} {}", doc["kind"], doc["metadata"]["name"]);
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        &back, doc,
        "{name}: a field the API does not know, or a wrong type"
    );
    t
}

/// The manifests, typed; panics on a kind the test does not know.
#[derive(Default)]
struct Manifests {
    daemonsets: Vec<DaemonSet>,
    configmaps: Vec<ConfigMap>,
    accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    bindings: Vec<RoleBinding>,
}

fn manifests() -> Manifests {
    let mut m = Manifests::default();
    for (f, d) in documents() {
        match d["kind"].as_str().unwrap_or_default() {
            "DaemonSet" => m.daemonsets.push(typed(&f, &d)),
            "ConfigMap" => m.configmaps.push(typed(&f, &d)),
            "ServiceAccount" => m.accounts.push(typed(&f, &d)),
            "ClusterRole" => m.cluster_roles.push(typed(&f, &d)),
            "ClusterRoleBinding" => m.cluster_bindings.push(typed(&f, &d)),
            "Role" => m.roles.push(typed(&f, &d)),
            "RoleBinding" => m.bindings.push(typed(&f, &d)),
            other => panic!("{f}: a {other:?} the test does not check"),
        }
    }
    m
}

fn one<'a, T>(what: &str, v: &'a [T]) -> &'a T {
    assert_eq!(v.len(), 1, "exactly one {what}");
    &v[0]
}

fn pod(ds: &DaemonSet) -> &PodSpec {
    ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn tern_container(ds: &DaemonSet) -> &Container {
    let p = pod(ds);
    assert_eq!(p.containers.len(), 1, "one container");
    assert!(p.init_containers.is_none(), "no init containers");
    &p.containers[0]
}

#[test]
fn kustomization_lists_every_manifest() {
    let text = std::fs::read_to_string(dir().join("kustomization.yaml")).unwrap();
    let k: Value = serde_saphyr::from_str(&text).unwrap();
    let listed: BTreeSet<String> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    let files: BTreeSet<String> = manifest_files().into_iter().collect();
    assert_eq!(listed, files);
}

#[test]
fn daemonset_runs_tern_on_labelled_nodes_with_three_capabilities() {
    let m = manifests();
    let ds = one("DaemonSet", &m.daemonsets);
    let spec = ds.spec.as_ref().unwrap();
    let p = pod(ds);
    assert_eq!(p.host_network, Some(true));
    assert_eq!(p.service_account_name.as_deref(), Some("tern"));
    assert_eq!(
        p.node_selector.as_ref().unwrap().get("tern.dev/enabled"),
        Some(&"true".to_string()),
        "the opt-in label the migration guide uses"
    );
    assert_eq!(
        p.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    // calico-node's tolerations: every NoSchedule and NoExecute taint, CriticalAddonsOnly.
    let tol: BTreeSet<(Option<String>, Option<String>, Option<String>)> = p
        .tolerations
        .as_ref()
        .unwrap()
        .iter()
        .map(|t| (t.key.clone(), t.operator.clone(), t.effect.clone()))
        .collect();
    let exists = || Some("Exists".to_string());
    let want: BTreeSet<_> = [
        (None, exists(), Some("NoSchedule".into())),
        (None, exists(), Some("NoExecute".into())),
        (Some("CriticalAddonsOnly".into()), exists(), None),
    ]
    .into_iter()
    .collect();
    assert_eq!(tol, want);
    let grace = p.termination_grace_period_seconds.unwrap();
    assert!((10..=60).contains(&grace), "grace period {grace} s");
    let rolling = spec.update_strategy.as_ref().unwrap();
    assert_eq!(rolling.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(
        rolling.rolling_update.as_ref().unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    // The selector picks the template's pods.
    let sel = spec.selector.match_labels.as_ref().unwrap();
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    for (k, v) in sel {
        assert_eq!(labels.get(k), Some(v), "selector label {k}");
    }

    let c = tern_container(ds);
    // The name scripts/image.sh gives the image, of this version.
    let image = format!("localhost/tern:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(c.image.as_deref(), Some(image.as_str()));
    assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
    let sc = c.security_context.as_ref().unwrap();
    assert_ne!(sc.privileged, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    let added: BTreeSet<&str> = caps
        .add
        .as_ref()
        .unwrap()
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        added,
        BTreeSet::from(["NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"])
    );
    // And no other container could hold more.
    assert!(p.containers.iter().all(|c| c.name == "tern"));
}

#[test]
fn probes_and_command_run_the_tern_binary() {
    let m = manifests();
    let c = tern_container(one("DaemonSet", &m.daemonsets));
    let cmd = c.command.as_ref().unwrap();
    assert_eq!(
        cmd,
        &["/usr/sbin/tern", "run", "--config", "/etc/tern/tern.yaml"]
    );
    for (probe, flag) in [
        (&c.liveness_probe, "--live"),
        (&c.readiness_probe, "--ready"),
    ] {
        let exec = probe.as_ref().unwrap().exec.as_ref().unwrap();
        assert_eq!(
            exec.command.as_deref().unwrap(),
            &["/usr/sbin/tern", "health", flag],
            "the {flag} probe"
        );
    }
}

#[test]
fn environment_and_mounts_are_calico_nodes() {
    let m = manifests();
    let ds = one("DaemonSet", &m.daemonsets);
    let c = tern_container(ds);
    let env = c.env.as_ref().unwrap();
    let field = |name: &str| {
        let e = env
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no {name}"));
        e.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path
            .clone()
    };
    assert_eq!(field("NODENAME"), "spec.nodeName");
    assert_eq!(field("NAMESPACE"), "metadata.namespace");

    let volumes = pod(ds).volumes.as_ref().unwrap();
    let mounted = |path: &str| {
        let mount = c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.mount_path == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        volumes
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap()
            .clone()
    };
    // Both hold sockets tern creates: host paths, writable.
    for path in ["/run/tern", "/var/run/calico"] {
        let host = mounted(path)
            .host_path
            .unwrap_or_else(|| panic!("{path}: not a hostPath"));
        assert_eq!(host.path, path);
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == path);
        assert_ne!(
            mount.and_then(|m| m.read_only),
            Some(true),
            "{path} read-only"
        );
    }
    let cm = mounted("/etc/tern")
        .config_map
        .expect("/etc/tern: not a ConfigMap");
    let config = one("ConfigMap", &m.configmaps);
    assert_eq!(config.metadata.name.as_deref(), Some(cm.name.as_str()));
    assert!(config.data.as_ref().unwrap().contains_key("tern.yaml"));
}

#[test]
fn configmap_tern_yaml_is_valid_with_the_pods_environment() {
    let m = manifests();
    let cm = one("ConfigMap", &m.configmaps);
    let text = &cm.data.as_ref().unwrap()["tern.yaml"];
    let namespace = cm.metadata.namespace.clone().unwrap();
    let env = MapEnvironment::new([("NODENAME", "node-7"), ("NAMESPACE", namespace.as_str())]);
    let (config, warnings) =
        DaemonConfig::parse_with(text, "configmap.yaml tern.yaml", &env).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.node, "node-7");
    assert_eq!(
        config.datastore,
        Datastore::Kubernetes {
            kubeconfig: None,
            namespace: Some(namespace)
        }
    );
    // The probes ask `tern health` with its default socket: the daemon must listen there,
    // inside the hostPath mount.
    assert_eq!(config.control_socket, PathBuf::from("/run/tern/tern.sock"));
    // BIRD's sockets where calico-node's tools look, in the writable hostPath.
    assert_eq!(
        config.bird_socket,
        Some(PathBuf::from("/var/run/calico/bird.ctl"))
    );
    assert_eq!(
        config.bird6_socket,
        Some(PathBuf::from("/var/run/calico/bird6.ctl"))
    );

    // Without NODENAME it is refused, naming the field: the env entry matters.
    let none = MapEnvironment::new([]);
    let err = DaemonConfig::parse_with(text, "configmap.yaml tern.yaml", &none).unwrap_err();
    assert!(err.to_string().contains("NODENAME"), "{err}");
}

#[test]
fn everything_lives_in_one_namespace_with_the_tern_account() {
    let m = manifests();
    let ds = one("DaemonSet", &m.daemonsets);
    let sa = one("ServiceAccount", &m.accounts);
    let ns = sa.metadata.namespace.clone().unwrap();
    assert_eq!(sa.metadata.name.as_deref(), Some("tern"));
    assert_eq!(ds.metadata.namespace.as_ref(), Some(&ns));
    assert_eq!(
        one("ConfigMap", &m.configmaps).metadata.namespace.as_ref(),
        Some(&ns)
    );
    assert_eq!(one("Role", &m.roles).metadata.namespace.as_ref(), Some(&ns));

    let role = one("ClusterRole", &m.cluster_roles);
    let ns_role = one("Role", &m.roles);
    for (kind, role_name, subjects, role_ref) in [
        {
            let b = one("ClusterRoleBinding", &m.cluster_bindings);
            ("ClusterRole", &role.metadata.name, &b.subjects, &b.role_ref)
        },
        {
            let b = one("RoleBinding", &m.bindings);
            assert_eq!(b.metadata.namespace.as_ref(), Some(&ns));
            ("Role", &ns_role.metadata.name, &b.subjects, &b.role_ref)
        },
    ] {
        assert_eq!(role_ref.kind, kind);
        assert_eq!(Some(&role_ref.name), role_name.as_ref());
        let s = subjects.as_ref().unwrap();
        assert_eq!(s.len(), 1, "{kind}: one subject");
        assert_eq!(s[0].kind, "ServiceAccount");
        assert_eq!(s[0].name, "tern");
        assert_eq!(s[0].namespace.as_ref(), Some(&ns));
    }
    // Read-only: the store lists and watches (the exact list is checked against the
    // store's API_CALLS by tern-config's unit test).
    let rules = role
        .rules
        .iter()
        .flatten()
        .chain(ns_role.rules.iter().flatten());
    for r in rules {
        for v in &r.verbs {
            assert!(v == "list" || v == "watch", "verb {v} on {:?}", r.resources);
        }
    }
}
