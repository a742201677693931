//! RBAC enforcement for the stand-in: the rules of the ClusterRoles and Roles in a YAML
//! text (multi-document; other kinds, such as bindings and ServiceAccounts, are skipped)
//! are taken as granted to the one user the token authenticates, and any resource
//! request no rule grants is denied with the real server's 403 message. Discovery
//! (`/api`, `/apis`, `/version`) stays open, as `system:discovery` keeps it.

use serde_json::Value;

/// One rule of a role; `namespace` is `None` for a ClusterRole's.
#[derive(Debug, Clone)]
struct Rule {
    namespace: Option<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
}

/// What a request asks for, in RBAC's terms.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// get, list, watch, create, update, patch, delete.
    pub verb: &'a str,
    /// API group (`""` for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
    /// The namespace of the request, if any.
    pub namespace: Option<&'a str>,
    /// The object's name, for requests on one object.
    pub name: Option<&'a str>,
}

/// The granted rules.
#[derive(Debug, Clone)]
pub struct Rbac {
    rules: Vec<Rule>,
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    v.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn matches(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

impl Rbac {
    /// The rules of every ClusterRole and Role in `yaml`.
    pub fn parse(yaml: &str) -> Result<Rbac, String> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)
            .map_err(|e| format!("RBAC YAML does not parse: {e}"))?;
        let mut rules = Vec::new();
        for doc in docs.iter().filter(|d| !d.is_null()) {
            let namespace = match doc.get("kind").and_then(Value::as_str) {
                Some("ClusterRole") => None,
                Some("Role") => Some(
                    doc["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("default")
                        .to_string(),
                ),
                _ => continue,
            };
            let role = doc["metadata"]["name"].as_str().unwrap_or("(unnamed)");
            let list = match doc.get("rules") {
                None | Some(Value::Null) => continue,
                Some(Value::Array(a)) => a,
                Some(_) => return Err(format!("role {role}: rules is not a list")),
            };
            for r in list {
                rules.push(Rule {
                    namespace: namespace.clone(),
                    groups: strings(r, "apiGroups"),
                    resources: strings(r, "resources"),
                    verbs: strings(r, "verbs"),
                    names: strings(r, "resourceNames"),
                });
            }
        }
        Ok(Rbac { rules })
    }

    /// Whether some rule grants `a`.
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        self.rules.iter().any(|r| {
            let ns_ok = match (&r.namespace, a.namespace) {
                (None, _) => true,
                (Some(rn), Some(n)) => rn == n,
                (Some(_), None) => false,
            };
            // resourceNames limit a rule to requests on those objects only.
            let name_ok =
                r.names.is_empty() || a.name.is_some_and(|n| r.names.iter().any(|x| x == n));
            ns_ok
                && name_ok
                && matches(&r.groups, a.group)
                && matches(&r.resources, a.resource)
                && matches(&r.verbs, a.verb)
        })
    }
}

/// The real server's message for a denied request of `user`.
pub fn forbidden_message(user: &str, a: &Attributes<'_>) -> String {
    let qualified = if a.group.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let subject = match a.name {
        Some(n) => format!("{qualified} {n:?}"),
        None => qualified,
    };
    let scope = match a.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    format!(
        "{subject} is forbidden: User {user:?} cannot {} resource {:?} in API group {:?} {scope}",
        a.verb, a.resource, a.group
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: tern, namespace: calico-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: tern
rules:
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list, watch]
  - apiGroups: [crd.projectcalico.org]
    resources: ["*"]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tern-secrets, namespace: calico-system}
rules:
  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [bgp-password]
    verbs: [get]
"#;

    fn a<'a>(verb: &'a str, group: &'a str, resource: &'a str) -> Attributes<'a> {
        Attributes {
            verb,
            group,
            resource,
            namespace: None,
            name: None,
        }
    }

    #[test]
    fn rules_grant_what_they_say_and_nothing_else() {
        let r = Rbac::parse(YAML).unwrap();
        assert!(r.allows(&a("list", "", "nodes")));
        assert!(!r.allows(&a("delete", "", "nodes")));
        assert!(r.allows(&a("watch", "crd.projectcalico.org", "bgppeers")));
        assert!(!r.allows(&a("get", "crd.projectcalico.org", "bgppeers")));
        let mut s = a("get", "", "secrets");
        s.namespace = Some("calico-system");
        assert!(!r.allows(&s));
        s.name = Some("bgp-password");
        assert!(r.allows(&s));
        s.namespace = Some("default");
        assert!(!r.allows(&s));
    }

    #[test]
    fn messages_match_the_real_server() {
        assert_eq!(
            forbidden_message(
                "system:serviceaccount:calico-system:tern",
                &a("list", "", "nodes")
            ),
            "nodes is forbidden: User \"system:serviceaccount:calico-system:tern\" cannot list \
             resource \"nodes\" in API group \"\" at the cluster scope"
        );
        let mut s = a("get", "", "secrets");
        s.namespace = Some("calico-system");
        s.name = Some("p");
        assert_eq!(
            forbidden_message("u", &s),
            "secrets \"p\" is forbidden: User \"u\" cannot get resource \"secrets\" in API \
             group \"\" in the namespace \"calico-system\""
        );
    }
}
