//! Resource templates read the way Karmada's default resource interpreter reads them: what
//! the detector would put in a ResourceBinding's `replicas` and
//! `replicaRequirements.resourceRequest`.
//!
//! The rules, as Karmada v1.14's `pkg/resourceinterpreter/default/native/replica.go` and
//! `pkg/util/resource.go` implement them:
//!
//! | kind (apiVersion) | replicas | per-replica request from |
//! |---|---|---|
//! | Deployment, StatefulSet (`apps/v1`) | `spec.replicas` (absent: 0) | `spec.template.spec` |
//! | Job (`batch/v1`) | `spec.parallelism`, at most `spec.completions` when set | `spec.template.spec` |
//! | Pod (`v1`) | 1 | `spec` |
//! | the multi-template kinds of [`crate::workload_kinds`] (RayCluster, PyTorchJob, FlinkDeployment, …) | `spec.components[]`, as with `MultiplePodTemplatesScheduling` | each component's pod template |
//! | anything else (ReplicaSet, CronJob, ConfigMap, custom kinds…) | none: an object | — |
//!
//! Karmada v1.14 has no default replica interpreter for ReplicaSet or CronJob: their
//! bindings carry no replicas, so they are charged as objects only (a Lua customization in
//! the cluster changes that: the caller fills [`Template::interpreted`], which wins).
//!
//! Per-replica request (Karmada's `AddPodTemplateRequest`): each container's requests, a
//! limit standing in for a request it lacks; the sum over app containers, then per
//! resource the larger of that sum and each init container (restartable sidecars are not
//! told apart, as in Karmada), plus `spec.overhead`. cpu is rounded up to millicores and
//! every other resource up to whole units; only cpu, memory, ephemeral-storage, pods and
//! "scalar" names (extended `domain/name`, `hugepages-*`, `attachable-volumes-*`) are kept;
//! zeros are dropped; nothing left means no `replicaRequirements`.

use std::collections::BTreeMap;

use karmada_quota_core::binding::{ObjectReference, ReplicaRequirements, ResourceBindingSpec};

use crate::pod::{PodSpec, PodTemplate, pod_level_requests, pod_request};

/// A resource template: only the fields the interpreter reads; the rest is ignored.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Template {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Name, namespace, labels, uid.
    pub metadata: TemplateMeta,
    /// The fields of every supported kind's spec (each kind reads its own).
    pub spec: TemplateSpec,
    /// What a ResourceInterpreterCustomization's Lua made of this template (filled by the
    /// caller, `karmada-quota-interpreter`): when set it wins over the built-in rules, as a
    /// customization does in Karmada.
    #[serde(skip)]
    pub interpreted: Option<Interpreted>,
}

/// A template's replicas and requirements as a customization's Lua gave them
/// (`GetReplicas`, or `GetComponents`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interpreted {
    /// `GetReplicas`' replicas (0 with components).
    pub replicas: i32,
    /// `GetReplicas`' per-replica requirements.
    pub replica_requirements: Option<ReplicaRequirements>,
    /// `GetComponents`' components.
    pub components: Vec<karmada_quota_core::binding::Component>,
}

/// `metadata` of a template.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TemplateMeta {
    /// metadata.name.
    pub name: String,
    /// metadata.namespace (empty for a cluster-scoped template).
    pub namespace: String,
    /// metadata.labels.
    pub labels: BTreeMap<String, String>,
    /// metadata.uid.
    pub uid: String,
}

/// The union of the spec fields the supported kinds use.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TemplateSpec {
    /// Deployment, StatefulSet.
    pub replicas: Option<i32>,
    /// Job.
    pub parallelism: Option<i32>,
    /// Job.
    pub completions: Option<i32>,
    /// Deployment, StatefulSet, Job: the pod template.
    pub template: Option<PodTemplate>,
    /// Pod: the pod spec's fields, inline.
    #[serde(flatten)]
    pub pod: PodSpec,
    /// The multi-template kinds' fields (`crate::workload_kinds`).
    #[serde(flatten)]
    pub multi: crate::workload_kinds::MultiSpec,
}

/// Why a template cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {namespace}/{name}: {field}: {message}")]
pub struct TemplateError {
    /// Template kind.
    pub kind: String,
    /// Template namespace.
    pub namespace: String,
    /// Template name.
    pub name: String,
    /// The field, e.g. `spec.template.spec.containers[0].resources.requests[cpu]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// How Karmada reads a kind: `Some(path of the pod spec)` for the kinds with a replica
/// interpreter, `None` for objects.
fn pod_spec_path(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet") | ("batch/v1", "Job") => {
            Some("spec.template.spec")
        }
        ("v1", "Pod") => Some("spec"),
        _ => None,
    }
}

impl Template {
    /// What Karmada's detector would put in the binding of this template: the resource
    /// reference, and for a workload its replicas and per-replica requirements. No
    /// placement and no clusters (a policy adds those).
    pub fn binding(&self) -> Result<ResourceBindingSpec, TemplateError> {
        let resource = ObjectReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
            uid: self.metadata.uid.clone(),
            ..Default::default()
        };
        if let Some(i) = &self.interpreted {
            return Ok(ResourceBindingSpec {
                resource,
                replicas: i.replicas,
                replica_requirements: i.replica_requirements.clone(),
                components: i.components.clone(),
                ..Default::default()
            });
        }
        let Some(path) = pod_spec_path(&self.api_version, &self.kind) else {
            let components =
                crate::workload_kinds::components(&self.api_version, &self.kind, &self.spec.multi)
                    .transpose()
                    .map_err(|(field, message)| TemplateError {
                        kind: self.kind.clone(),
                        namespace: self.metadata.namespace.clone(),
                        name: self.metadata.name.clone(),
                        field,
                        message,
                    })?
                    .unwrap_or_default();
            return Ok(ResourceBindingSpec {
                resource,
                components,
                ..Default::default()
            });
        };
        let replicas = match self.kind.as_str() {
            "Pod" => 1,
            "Job" => {
                let parallelism = self.spec.parallelism.unwrap_or(0);
                let completions = self.spec.completions.unwrap_or(parallelism);
                parallelism.min(completions)
            }
            _ => self.spec.replicas.unwrap_or(0),
        };
        let pod = self.pod_spec();
        let request = pod_request(pod).map_err(|(field, message)| TemplateError {
            kind: self.kind.clone(),
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
            field: format!("{path}.{field}"),
            message,
        })?;
        Ok(ResourceBindingSpec {
            resource,
            replicas,
            replica_requirements: (!request.is_empty()).then(|| ReplicaRequirements {
                resource_request: request,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// The pod-level requests (`spec.resources.requests`: cpu, memory, hugepages) of this
    /// template's pod spec, which its binding leaves out (Karmada v1.18 reads the
    /// containers only); empty for a kind a customization or the components price.
    pub fn pod_level_requests(&self) -> Vec<&str> {
        if self.interpreted.is_some() {
            return Vec::new();
        }
        pod_spec_path(&self.api_version, &self.kind)
            .map_or_else(Vec::new, |_| pod_level_requests(self.pod_spec()))
    }

    /// The pod spec this template runs: a Pod's own, else its pod template's.
    fn pod_spec(&self) -> &PodSpec {
        if self.kind == "Pod" {
            &self.spec.pod
        } else {
            self.pod_template()
        }
    }

    fn pod_template(&self) -> &PodSpec {
        static EMPTY: std::sync::OnceLock<PodSpec> = std::sync::OnceLock::new();
        self.spec
            .template
            .as_ref()
            .map_or_else(|| EMPTY.get_or_init(PodSpec::default), |t| &t.spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::resources::ResourceList;

    use crate::testutil::mk_list;

    fn template(yaml: &str) -> Template {
        serde_saphyr::from_str(yaml).expect("template")
    }

    fn binding(yaml: &str) -> (i32, Option<ResourceList>) {
        let b = template(yaml).binding().expect("binding");
        (
            b.replicas,
            b.replica_requirements.map(|r| r.resource_request),
        )
    }

    const DEPLOYMENT: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team-a}
spec:
  replicas: 3
  template:
    spec:
      containers:
        - resources: {requests: {cpu: 250m, memory: 128Mi}}
        - resources: {limits: {cpu: '1', nvidia.com/gpu: 1}}
      initContainers:
        - resources: {requests: {cpu: '2', memory: 64Mi}}
";

    /// One row per kind of Karmada's default interpreter (v1.14 replica.go): kind →
    /// (replicas, per-replica request).
    #[test]
    fn replicas_and_requests_per_kind_as_karmadas_default_interpreter() {
        // Deployment: requests summed (a limit stands in for the missing cpu request of
        // the second container), the init container's 2 cpu is larger than the 1250m sum.
        assert_eq!(
            binding(DEPLOYMENT),
            (
                3,
                Some(mk_list(&[
                    ("cpu", "2"),
                    ("memory", "128Mi"),
                    ("nvidia.com/gpu", "1")
                ]))
            )
        );
        type Row<'a> = (&'a str, i32, Option<&'a [(&'a str, &'a str)]>);
        let table: [Row<'_>; 8] = [
            (
                "{apiVersion: apps/v1, kind: StatefulSet, spec: {replicas: 2, template: {spec: {containers: [{resources: {requests: {cpu: 100m}}}]}}}}",
                2,
                Some(&[("cpu", "100m")]),
            ),
            // Absent replicas: 0 (Karmada reads the pointer, the apiserver defaults it to 1
            // before the detector sees it).
            (
                "{apiVersion: apps/v1, kind: Deployment, spec: {template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}}",
                0,
                Some(&[("cpu", "1")]),
            ),
            // Job: parallelism, at most the completions.
            (
                "{apiVersion: batch/v1, kind: Job, spec: {parallelism: 5, completions: 2, template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}}",
                2,
                Some(&[("cpu", "1")]),
            ),
            (
                "{apiVersion: batch/v1, kind: Job, spec: {parallelism: 4, template: {spec: {containers: [{resources: {requests: {memory: 1Gi}}}]}}}}",
                4,
                Some(&[("memory", "1Gi")]),
            ),
            // Pod: one replica; overhead added.
            (
                "{apiVersion: v1, kind: Pod, spec: {containers: [{resources: {requests: {cpu: 100m}}}], overhead: {cpu: 50m}}}",
                1,
                Some(&[("cpu", "150m")]),
            ),
            // No requests at all: no replicaRequirements (still a workload by replicas).
            (
                "{apiVersion: apps/v1, kind: Deployment, spec: {replicas: 2, template: {spec: {containers: [{}]}}}}",
                2,
                None,
            ),
            // Kinds without a default replica interpreter in v1.14: objects.
            (
                "{apiVersion: apps/v1, kind: ReplicaSet, spec: {replicas: 3, template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}}",
                0,
                None,
            ),
            (
                "{apiVersion: batch/v1, kind: CronJob, spec: {jobTemplate: {spec: {parallelism: 2}}}}",
                0,
                None,
            ),
        ];
        for (yaml, replicas, request) in table {
            assert_eq!(binding(yaml), (replicas, request.map(mk_list)), "{yaml}");
        }
    }

    #[test]
    fn rounding_and_names_as_karmada() {
        // cpu rounded up to millicores, memory up to bytes; unknown bare names dropped;
        // kubernetes.io-prefixed and hugepages names kept.
        let yaml = "
apiVersion: v1
kind: Pod
spec:
  containers:
    - resources:
        requests: {cpu: 100500u, memory: 1.5, example: 3, hugepages-2Mi: 4Mi, example.com/foo: 2}
";
        let (_, request) = binding(yaml);
        assert_eq!(
            request.unwrap(),
            mk_list(&[
                ("cpu", "101m"),
                ("memory", "2"),
                ("hugepages-2Mi", "4Mi"),
                ("example.com/foo", "2")
            ])
        );
    }

    #[test]
    fn pod_level_requests_are_not_read_as_karmada_reads_none() {
        // Karmada v1.18's AddPodTemplateRequest sums the containers and ignores
        // `spec.resources`: a pod template asking its cpu only at pod level gives a binding
        // without replicaRequirements (member pods are priced with it: core pod_requests).
        let yaml = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team-a}
spec:
  replicas: 3
  template:
    spec:
      resources: {requests: {cpu: '2', memory: 1Gi}}
      containers:
        - resources: {requests: {memory: 64Mi}}
        - {}
";
        assert_eq!(binding(yaml), (3, Some(mk_list(&[("memory", "64Mi")]))));
        assert_eq!(template(yaml).pod_level_requests(), ["cpu", "memory"]);
        let without_container_requests = yaml.replace("{requests: {memory: 64Mi}}", "{}");
        assert_eq!(binding(&without_container_requests), (3, None));
    }

    #[test]
    fn a_quantity_that_does_not_parse_names_the_field() {
        let err = template(
            "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: a}, spec: {template: {spec: {containers: [{}, {resources: {limits: {cpu: lots}}}]}}}}",
        )
        .binding()
        .unwrap_err();
        assert_eq!(
            err.field,
            "spec.template.spec.containers[1].resources.limits[cpu]"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "Deployment a/web: spec.template.spec.containers[1].resources.limits[cpu]: {}",
                err.message
            )
        );
    }

    #[test]
    fn the_binding_charges_what_a_detector_made_binding_charges() {
        use karmada_quota_core::scope::ScopeSelector;
        use karmada_quota_core::usage::BindingCharge;
        let spec = template(DEPLOYMENT).binding().unwrap();
        let usage = BindingCharge::compute(&spec, Some("count/deployments.apps"))
            .scoped(&ScopeSelector::default())
            .unwrap();
        assert_eq!(
            usage.total.to_string(),
            "count/deployments.apps=1,cpu=6,memory=384Mi,pods=3,requests.cpu=6,\
             requests.memory=384Mi,requests.nvidia.com/gpu=3"
        );
    }
}
