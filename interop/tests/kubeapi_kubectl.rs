//! The Kubernetes API server stand-in (`tern_interop::kubeapi`) checked by a real client,
//! kubectl (`$TERN_KUBECTL`, else `kubectl` on PATH; skipped loudly without one), and by
//! protocol tests with a small rustls client: watch history, 410 Gone after compaction,
//! BOOKMARKs, restarts, RBAC, metadata-only answers, token rotation.

#![cfg(target_os = "linux")]
// Setup helpers outside #[test] functions: a failed setup is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod kubeapi_support;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kubeapi_support::{get_json, request, rv_of, send, watch_events, TOKEN};
use serde_json::{json, Value};
use tern_interop::kubeapi::{fixtures_dir, ApiServer, ApiServerOptions};

fn server() -> ApiServer {
    server_with(|_| {})
}

fn server_with(f: impl FnOnce(&mut ApiServerOptions)) -> ApiServer {
    let mut opts = ApiServerOptions::new("127.0.0.1:0".parse().unwrap(), TOKEN);
    f(&mut opts);
    let s = ApiServer::start(opts).unwrap();
    s.load_fixtures(&fixtures_dir()).unwrap();
    s
}

fn node(name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "annotations": {"projectcalico.org/IPv4Address": format!("{ip}/24")}}})
}

// ---- kubectl ----

/// The kubectl to use, or `None` after a loud skip.
fn kubectl(test: &str) -> Option<String> {
    let k = std::env::var("TERN_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    if tern_interop::have_program(&k) {
        Some(k)
    } else {
        tern_interop::skip_or_fail(
            test,
            &format!("{k} is not installed (apt-get install kubernetes-client)"),
        );
        None
    }
}

/// A kubectl bound to one server: its own kubeconfig and discovery cache.
struct Kubectl {
    bin: String,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(bin: String, s: &ApiServer, token: &str) -> Kubectl {
        let dir = tempfile::tempdir().unwrap();
        s.write_kubeconfig(&dir.path().join("kubeconfig"), token)
            .unwrap();
        Kubectl { bin, dir }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_remove("KUBECONFIG");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs and expects success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}\n{out}\n{err}",
            o.status
        );
        out.into_owned()
    }

    /// Runs and expects failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(!o.status.success(), "kubectl {args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    fn file(&self, name: &str, v: &Value) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }
}

#[test]
fn kubectl_lists_nodes_and_calico_resources() {
    let Some(bin) = kubectl("kubectl_lists_nodes_and_calico_resources") else {
        return;
    };
    let s = server();
    let k = Kubectl::new(bin, &s, TOKEN);
    let out = k.ok(&["get", "nodes"]);
    for n in ["node-1", "node-2", "node-3"] {
        assert!(out.contains(n), "{n} missing from:\n{out}");
    }
    let peers: Value =
        serde_json::from_str(&k.ok(&["get", "bgppeers.crd.projectcalico.org", "-o", "json"]))
            .unwrap();
    let items = peers["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{peers}");
    let tor = items
        .iter()
        .find(|p| p["metadata"]["name"] == "tor-r1")
        .unwrap();
    assert_eq!(tor["kind"], "BGPPeer");
    assert_eq!(
        tor["spec"]["password"]["secretKeyRef"]["name"],
        "bgp-secrets"
    );
    let secret: Value = serde_json::from_str(&k.ok(&[
        "get",
        "secret",
        "-n",
        "calico-system",
        "bgp-secrets",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(secret["data"]["tor-r1"], "bGFiLXRvci1yMS1wYXNzd29yZA==");
    let aff = k.ok(&["get", "blockaffinities.crd.projectcalico.org", "-o", "json"]);
    assert!(aff.contains(r#""deleted": "false""#), "{aff}");
}

#[test]
fn kubectl_watch_shows_an_applied_node() {
    let Some(bin) = kubectl("kubectl_watch_shows_an_applied_node") else {
        return;
    };
    let s = server();
    let k = Kubectl::new(bin, &s, TOKEN);
    let mut child = k
        .command(&["get", "nodes", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                if l.contains(what) {
                    return true;
                }
            }
        }
        false
    };
    let listed = wait_for("node-3");
    // The node comes after kubectl listed: only its watch can report it.
    s.apply(node("node-4", "198.51.100.13")).unwrap();
    let watched = wait_for("node-4");
    child.kill().unwrap();
    let _ = child.wait();
    assert!(listed, "kubectl did not list node-3");
    assert!(watched, "kubectl --watch did not show node-4");
    assert!(s
        .requests()
        .iter()
        .any(|r| r.verb == "watch" && r.resource == "nodes" && r.status == 200));
}

/// kubectl 1.20 says "(Unauthorized)", newer ones "(the server has asked for the client
/// to provide credentials)", as against a real server; both lead with this.
fn assert_unauthorized(stderr: &str) {
    assert!(
        stderr.contains("You must be logged in to the server"),
        "{stderr}"
    );
}

#[test]
fn kubectl_with_a_wrong_or_rotated_token_is_unauthorized() {
    let Some(bin) = kubectl("kubectl_with_a_wrong_or_rotated_token_is_unauthorized") else {
        return;
    };
    let s = server();
    let bad = Kubectl::new(bin.clone(), &s, "not-the-token");
    let err = bad.fails(&["get", "nodes"]);
    assert_unauthorized(&err);
    let good = Kubectl::new(bin.clone(), &s, TOKEN);
    good.ok(&["get", "nodes"]);
    s.set_token("lab-token-2");
    let err = good.fails(&["get", "nodes"]);
    assert_unauthorized(&err);
    Kubectl::new(bin, &s, "lab-token-2").ok(&["get", "nodes"]);
}

#[test]
fn kubectl_create_replace_delete() {
    let Some(bin) = kubectl("kubectl_create_replace_delete") else {
        return;
    };
    let s = server();
    let k = Kubectl::new(bin, &s, TOKEN);
    let peer = json!({"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
        "metadata": {"name": "extra"}, "spec": {"peerIP": "203.0.113.9", "asNumber": 65009}});
    let f = k.file("peer.json", &peer);
    let f = f.to_str().unwrap();
    k.ok(&["create", "-f", f]);
    let err = k.fails(&["create", "-f", f]);
    assert!(err.contains("AlreadyExists"), "{err}");
    let mut changed = peer.clone();
    changed["spec"]["asNumber"] = json!(65010);
    let f2 = k.file("peer2.json", &changed);
    k.ok(&["replace", "-f", f2.to_str().unwrap()]);
    let got: Value = serde_json::from_str(&k.ok(&[
        "get",
        "bgppeers.crd.projectcalico.org",
        "extra",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(got["spec"]["asNumber"], 65010);
    k.ok(&["delete", "bgppeers.crd.projectcalico.org", "extra"]);
    let err = k.fails(&["get", "bgppeers.crd.projectcalico.org", "extra"]);
    assert!(err.contains("NotFound"), "{err}");
    let verbs: Vec<(String, u16)> = s
        .requests()
        .into_iter()
        .filter(|r| r.resource == "bgppeers")
        .map(|r| (r.verb, r.status))
        .collect();
    for want in [
        ("create", 201),
        ("create", 409),
        ("update", 200),
        ("delete", 200),
    ] {
        assert!(
            verbs.iter().any(|(v, c)| v == want.0 && *c == want.1),
            "{want:?} not in {verbs:?}"
        );
    }
}

#[test]
fn kubectl_chunked_list_returns_every_item() {
    let Some(bin) = kubectl("kubectl_chunked_list_returns_every_item") else {
        return;
    };
    let s = server();
    for i in 0..5 {
        s.apply(node(
            &format!("extra-{i}"),
            &format!("198.51.100.{}", 50 + i),
        ))
        .unwrap();
    }
    let k = Kubectl::new(bin, &s, TOKEN);
    let out = k.ok(&["get", "nodes", "--chunk-size=1", "-o", "name"]);
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(names.len(), 8, "{out}");
    let lists = s
        .requests()
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "nodes")
        .count();
    assert!(lists >= 8, "{lists} list requests: kubectl did not page");
}

// ---- protocol, with a small rustls client (kubeapi_support) ----

#[test]
fn watch_resumes_from_history_then_gets_410_after_compaction() {
    let s = server();
    let before = s.resource_version();
    s.apply(node("node-5", "198.51.100.14")).unwrap();
    s.apply(node("node-5", "198.51.100.15")).unwrap();
    s.delete("v1", "Node", None, "node-5").unwrap();
    let path = format!("/api/v1/nodes?watch=1&resourceVersion={before}&timeoutSeconds=2");
    let events = watch_events(&s, &path, |e| e.len() == 3);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    assert!(events
        .iter()
        .all(|e| e["object"]["metadata"]["name"] == "node-5"));

    s.compact();
    let events = watch_events(&s, &path, |_| false);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    let status = &events[0]["object"];
    assert_eq!(
        (&status["kind"], &status["code"], &status["reason"]),
        (&json!("Status"), &json!(410), &json!("Expired"))
    );
    // A list at that exact version is gone as well (a list answers 410 itself).
    let (code, body) = get_json(
        &s,
        &format!("/api/v1/nodes?resourceVersion={before}&resourceVersionMatch=Exact"),
        None,
    );
    assert_eq!((code, &body["reason"]), (410, &json!("Expired")));
    // From the current version the watch works again.
    let now = s.resource_version();
    let events = watch_events(
        &s,
        &format!("/api/v1/nodes?watch=1&resourceVersion={now}&timeoutSeconds=1"),
        |_| false,
    );
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn continue_token_from_before_compaction_is_gone() {
    let s = server();
    let (code, page) = get_json(&s, "/api/v1/nodes?limit=1", None);
    assert_eq!(code, 200);
    assert_eq!(page["kind"], "NodeList");
    assert_eq!(page["items"][0]["kind"], "Node");
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    let (code, next) = get_json(&s, &format!("/api/v1/nodes?limit=1&continue={token}"), None);
    assert_eq!(code, 200);
    assert_ne!(
        next["items"][0]["metadata"]["name"],
        page["items"][0]["metadata"]["name"]
    );
    s.apply(node("node-6", "198.51.100.16")).unwrap();
    s.compact();
    let (code, body) = get_json(&s, &format!("/api/v1/nodes?limit=1&continue={token}"), None);
    assert_eq!((code, &body["reason"]), (410, &json!("Expired")), "{body}");
}

#[test]
fn bookmarks_arrive_and_timeout_ends_the_watch() {
    let s = server_with(|o| o.bookmark_interval = Duration::from_millis(300));
    let rv = s.resource_version();
    let path = format!(
        "/apis/crd.projectcalico.org/v1/bgppeers?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3"
    );
    // Read until the server ends the stream at timeoutSeconds.
    let events = watch_events(&s, &path, |_| false);
    let marks: Vec<&Value> = events.iter().filter(|e| e["type"] == "BOOKMARK").collect();
    assert!(marks.len() >= 2, "{events:?}");
    for m in marks {
        assert_eq!(rv_of(&m["object"]), rv);
        assert_eq!(m["object"]["kind"], "BGPPeer");
    }
    // Without allowWatchBookmarks there are none.
    let path = format!(
        "/apis/crd.projectcalico.org/v1/bgppeers?watch=true&resourceVersion={rv}&timeoutSeconds=1"
    );
    assert!(watch_events(&s, &path, |_| false).is_empty());
}

#[test]
fn restart_keeps_objects_and_versions_and_drops_watches() {
    let mut s = server();
    let (_, before) = get_json(&s, "/api/v1/nodes/node-1", None);
    let rv = s.resource_version();
    let (code, watch) = request(
        &s,
        "GET",
        &format!("/api/v1/nodes?watch=1&resourceVersion={rv}"),
        TOKEN,
        None,
    );
    assert_eq!(code, 200);
    let addr = s.addr();
    s.restart().unwrap();
    assert_eq!(s.addr(), addr);
    // The open watch ended: the restart closed its connection.
    let rest: Vec<String> = watch.lines().map_while(Result::ok).collect();
    assert!(rest.is_empty(), "{rest:?}");
    let (code, after) = get_json(&s, "/api/v1/nodes/node-1", None);
    assert_eq!(code, 200);
    assert_eq!(rv_of(&after), rv_of(&before));
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(s.resource_version(), rv);
    // History survives: a watch from before the restart resumes.
    s.apply(node("node-7", "198.51.100.17")).unwrap();
    let events = watch_events(
        &s,
        &format!("/api/v1/nodes?watch=1&resourceVersion={rv}&timeoutSeconds=2"),
        |e| !e.is_empty(),
    );
    assert_eq!(events[0]["object"]["metadata"]["name"], "node-7");
}

const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: tern
rules:
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: tern
  namespace: calico-system
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get]
"#;

#[test]
fn rbac_denies_what_no_rule_grants_with_403() {
    let s = server_with(|o| o.rbac_yaml = Some(RBAC.to_string()));
    assert_eq!(get_json(&s, "/api/v1/nodes", None).0, 200);
    assert_eq!(
        get_json(
            &s,
            "/api/v1/namespaces/calico-system/secrets/bgp-secrets",
            None
        )
        .0,
        200
    );
    let (code, body) = get_json(&s, "/api/v1/secrets", None);
    assert_eq!((code, &body["reason"]), (403, &json!("Forbidden")));
    assert_eq!(
        body["message"],
        "secrets is forbidden: User \"system:serviceaccount:calico-system:tern\" cannot list \
         resource \"secrets\" in API group \"\" at the cluster scope"
    );
    let (code, _) = get_json(&s, "/apis/crd.projectcalico.org/v1/bgppeers", None);
    assert_eq!(code, 403);
    let (code, _) = request(&s, "DELETE", "/api/v1/nodes/node-1", TOKEN, None);
    assert_eq!(code, 403);
    assert!(s
        .requests()
        .iter()
        .any(|r| r.verb == "delete" && r.resource == "nodes" && r.status == 403));
}

#[test]
fn metadata_only_answers_and_status_objects() {
    let s = server();
    let (code, list) = get_json(
        &s,
        "/apis/crd.projectcalico.org/v1/ipamblocks",
        Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
    );
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert!(items
        .iter()
        .all(|i| i["kind"] == "PartialObjectMetadata" && i.get("spec").is_none()));
    let rv = s.resource_version();
    s.apply(node("node-8", "198.51.100.18")).unwrap();
    let (_, r) = request(
        &s,
        "GET",
        &format!("/api/v1/nodes?watch=1&resourceVersion={rv}&timeoutSeconds=2"),
        TOKEN,
        Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
    );
    let first: Value = serde_json::from_str(&r.lines().next().unwrap().unwrap()).unwrap();
    assert_eq!(first["object"]["kind"], "PartialObjectMetadata");
    assert!(first["object"].get("status").is_none());

    let (code, mut r) = request(&s, "GET", "/api/v1/nodes", "wrong", None);
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(code, 401);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    let (code, body) = get_json(&s, "/apis/apps/v1/deployments", None);
    assert_eq!((code, &body["kind"]), (404, &json!("Status")));
    let (code, body) = get_json(&s, "/api/v1/nodes/nope", None);
    assert_eq!((code, &body["reason"]), (404, &json!("NotFound")));
}

#[test]
fn malformed_and_mismatched_writes_get_400() {
    let s = server();
    let good = node("n", "198.51.100.30").to_string();
    for body in [
        "[1, 2]".to_string(),
        r#"{"apiVersion": "v1", "kind": "Node", "metadata": "x"}"#.to_string(),
        "not json".to_string(),
        good.replace(r#""Node""#, r#""Secret""#),
    ] {
        let (code, _) = send(&s, "POST", "/api/v1/nodes", &body);
        assert_eq!(code, 400, "{body}");
    }
    let (code, _) = send(&s, "PUT", "/api/v1/nodes/other", &good);
    assert_eq!(code, 400);
    let (code, created) = send(&s, "POST", "/api/v1/nodes", &good);
    assert_eq!((code, &created["kind"]), (201, &json!("Node")));
    // A replace carrying a stale resourceVersion is a conflict, as on the real server.
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!("2");
    let (code, body) = send(&s, "PUT", "/api/v1/nodes/n", &stale.to_string());
    assert_eq!((code, &body["reason"]), (409, &json!("Conflict")));
    let (code, _) = send(&s, "PUT", "/api/v1/nodes/n", &created.to_string());
    assert_eq!(code, 200);
}

#[test]
fn serves_inside_a_lab_namespace_on_a_lab_address() {
    if let Err(reason) = tern_interop::lab_available() {
        tern_interop::skip_or_fail("serves_inside_a_lab_namespace_on_a_lab_address", &reason);
        return;
    }
    let ns = tern_interop::netns::Netns::create("tkapi-ns").unwrap();
    ns.add_addr("lo", "198.51.100.80/32").unwrap();
    let mut opts = ApiServerOptions::new("198.51.100.80:6443".parse().unwrap(), TOKEN);
    opts.netns = Some(ns.name().to_string());
    let s = ApiServer::start(opts).unwrap();
    s.load_fixtures(&fixtures_dir()).unwrap();
    assert_eq!(s.url(), "https://198.51.100.80:6443");
    // Only a thread inside the namespace reaches it.
    let name = ns.name().to_string();
    let code = std::thread::scope(|sc| {
        sc.spawn(|| {
            tern_interop::netns::enter_thread(&name).unwrap();
            get_json(&s, "/api/v1/nodes", None).0
        })
        .join()
        .unwrap()
    });
    assert_eq!(code, 200);
    drop(s);
    drop(ns);
}

/// The fixtures use documentation and benchmark addresses only.
#[test]
fn fixtures_use_only_lab_addresses() {
    let objects = tern_interop::kubeapi::read_fixtures(&fixtures_dir()).unwrap();
    assert!(objects.len() >= 15);
    let text = serde_json::to_string(&objects).unwrap();
    let mut bad = Vec::new();
    for token in text.split(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == ':')) {
        let addr = token.trim_matches(|c| c == ':' || c == '.');
        if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
            let ok = tern_interop::netns::check_lab_address(&ip.to_string()).is_ok()
                || ip.is_unspecified();
            if !ok {
                bad.push(ip);
            }
        }
    }
    assert!(bad.is_empty(), "non-lab addresses in fixtures: {bad:?}");
}
