//! The objects the webhook's tests send: ResourceBindings as Karmada's scheduler leaves
//! them ([`Rb`]), KarmadaQuotas ([`quota`], [`quota_scoped`]), and the ResourceBinding
//! API without discovery ([`bindings`]).

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The ResourceBinding API resource (no discovery per call: the load loops create many).
pub fn binding_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("work.karmada.io", "v1alpha2", "ResourceBinding"),
        "resourcebindings",
    )
}

/// ResourceBindings of `ns`.
pub fn bindings(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &binding_resource())
}

/// A KarmadaQuota `name` in `ns` with `hard`.
pub fn quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> Value {
    let hard: serde_json::Map<String, Value> = hard
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": hard}
    })
}

/// [`quota`] with one PriorityClass scope expression.
pub fn quota_scoped(
    ns: &str,
    name: &str,
    hard: &[(&str, &str)],
    operator: &str,
    values: &[&str],
) -> Value {
    let mut q = quota(ns, name, hard);
    let mut expr = json!({"scopeName": "PriorityClass", "operator": operator});
    if !values.is_empty() {
        expr["values"] = json!(values);
    }
    q["spec"]["scopeSelector"] = json!({"matchExpressions": [expr]});
    q
}

/// A ResourceBinding as Karmada's scheduler leaves it: a template, desired replicas,
/// per-replica requests and a placement.
#[derive(Clone, Debug)]
pub struct Rb {
    name: String,
    api_version: String,
    kind: String,
    replicas: i32,
    request: Vec<(String, String)>,
    priority_class: Option<String>,
    clusters: Option<Vec<(String, i32)>>,
    evictions: Vec<(String, Option<i32>)>,
}

impl Rb {
    /// A Deployment's binding, `replicas` replicas, no requests yet, all in `member1`.
    pub fn deployment(name: &str, replicas: i32) -> Rb {
        Rb {
            name: name.to_owned(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            replicas,
            request: Vec::new(),
            priority_class: None,
            clusters: None,
            evictions: Vec::new(),
        }
    }

    /// A ConfigMap's binding: no replicas, charged object counts only.
    pub fn configmap(name: &str) -> Rb {
        Rb {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            ..Rb::deployment(name, 0)
        }
    }

    /// A binding of any template kind, without replicas (a DaemonSet's, a CronJob's, a
    /// custom kind's that Karmada has no interpreter for).
    pub fn template(name: &str, api_version: &str, kind: &str) -> Rb {
        Rb {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Rb::deployment(name, 0)
        }
    }

    /// Adds a per-replica request (`cpu`, `500m`).
    pub fn request(mut self, name: &str, quantity: &str) -> Rb {
        self.request.push((name.to_owned(), quantity.to_owned()));
        self
    }

    /// Sets the PriorityClass of the workload.
    pub fn priority_class(mut self, class: &str) -> Rb {
        self.priority_class = Some(class.to_owned());
        self
    }

    /// Sets the placement (cluster, replicas); default: all replicas in `member1`.
    pub fn clusters(mut self, clusters: &[(&str, i32)]) -> Rb {
        self.clusters = Some(
            clusters
                .iter()
                .map(|(c, r)| ((*c).to_owned(), *r))
                .collect(),
        );
        self
    }

    /// Adds a graceful-eviction task as Karmada's taint manager writes one on a failover:
    /// the workload left `cluster`, whose old `replicas` (absent: not said) drain there.
    pub fn evicted_from(mut self, cluster: &str, replicas: Option<i32>) -> Rb {
        self.evictions.push((cluster.to_owned(), replicas));
        self
    }

    /// The object, in namespace `ns`.
    pub fn json(&self, ns: &str) -> Value {
        let mut spec = json!({
            "resource": {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": self.name,
                "namespace": ns,
            },
        });
        if self.replicas > 0 {
            spec["replicas"] = json!(self.replicas);
        }
        if !self.request.is_empty() || self.priority_class.is_some() {
            let request: serde_json::Map<String, Value> = self
                .request
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            let mut rr = json!({"resourceRequest": request});
            if let Some(pc) = &self.priority_class {
                rr["priorityClassName"] = json!(pc);
            }
            spec["replicaRequirements"] = rr;
        }
        let clusters: Vec<Value> = match &self.clusters {
            Some(cs) => cs
                .iter()
                .map(|(c, r)| json!({"name": c, "replicas": r}))
                .collect(),
            None if self.replicas > 0 => {
                vec![json!({"name": "member1", "replicas": self.replicas})]
            }
            None => vec![json!({"name": "member1"})],
        };
        spec["clusters"] = json!(clusters);
        if !self.evictions.is_empty() {
            let tasks: Vec<Value> = self
                .evictions
                .iter()
                .map(|(from, replicas)| {
                    let mut t = json!({
                        "fromCluster": from,
                        "purgeMode": "Gracefully",
                        "reason": "TaintUntolerated",
                        "message": format!("cluster {from} is not ready"),
                        "producer": "TaintManager",
                        "creationTimestamp": "2026-11-20T10:02:10Z",
                    });
                    if let Some(r) = replicas {
                        t["replicas"] = json!(r);
                    }
                    t
                })
                .collect();
            spec["gracefulEvictionTasks"] = json!(tasks);
        }
        json!({
            "apiVersion": "work.karmada.io/v1alpha2",
            "kind": "ResourceBinding",
            "metadata": {"name": self.name, "namespace": ns},
            "spec": spec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_default_to_one_cluster_holding_every_replica() {
        let rb = Rb::deployment("web", 3).request("cpu", "1").json("ns");
        assert_eq!(rb["spec"]["replicas"], 3);
        assert_eq!(
            rb["spec"]["clusters"],
            json!([{"name": "member1", "replicas": 3}])
        );
        assert_eq!(
            rb["spec"]["replicaRequirements"]["resourceRequest"]["cpu"],
            "1"
        );
        let cm = Rb::configmap("settings").json("ns");
        assert!(cm["spec"].get("replicas").is_none());
        assert!(cm["spec"].get("replicaRequirements").is_none());
    }
}
