//! Multi-template workloads priced by rules written from their kinds' public CRD
//! specifications: the components a binding of theirs carries when Karmada's
//! `MultiplePodTemplatesScheduling` is on (`spec.components[]`: name, replicas, per-replica
//! request), so `check`, the what-if and the PropagationPolicy review price them before
//! they apply instead of adding nothing.
//!
//! | kind (group) | components: replicas × pod template |
//! |---|---|
//! | RayCluster (`ray.io`) | `ray-head` (the name Karmada v1.18 gives it): 1 × `spec.headGroupSpec.template`; each `spec.workerGroupSpecs[]` (`groupName`): `replicas` (absent: 0) × `numOfHosts` (absent: 1) × `template`; a suspended cluster or group: 0 |
//! | RayJob (`ray.io`) | the RayCluster rules over `spec.rayClusterSpec`; the submitter when `spec.submitterPodTemplate` is given (1 ×) |
//! | PyTorchJob, TFJob, XGBoostJob, PaddleJob (`kubeflow.org`), MPIJob (`kubeflow.org`) | each entry of `spec.<kind>ReplicaSpecs` (`pytorchReplicaSpecs`, `tfReplicaSpecs`, `xgbReplicaSpecs`, `paddleReplicaSpecs`, `mpiReplicaSpecs`), named by its type in lower case: `replicas` (absent: 1) × `template` |
//! | Job (`batch.volcano.sh`) | each `spec.tasks[]` (`name`): `replicas` (absent: 0) × `template` |
//! | FlinkDeployment (`flink.apache.org`) | `jobmanager`: `spec.jobManager.replicas` (absent: 1) × `resource`; `taskmanager`: `spec.taskManager.replicas`, else ⌈`spec.job.parallelism` / `taskmanager.numberOfTaskSlots`⌉ (absent: 1 slot) × `resource`; `resource.cpu` in cores, `resource.memory` in Flink's syntax (`2048m` = 2048 MiB, units b/k/m/g/t, binary) |
//!
//! A pod template is read as the default interpreter reads one (`pod::pod_request`).
//! What is not read: sidecars a Flink `podTemplate` adds, the default submitter pod of a
//! RayJob without `submitterPodTemplate`, autoscaling beyond `replicas`. A kind not listed
//! here (SparkApplication among them) has no components: its binding is an uncountable
//! workload, reported as such (never priced 0).

use std::collections::BTreeMap;

use karmada_quota_core::binding::{Component, ComponentReplicaRequirements};
use karmada_quota_core::quantity::{Format, Quantity};
use karmada_quota_core::resources::ResourceList;

use crate::pod::{PodSpec, PodTemplate, RawQuantity, pod_request};

/// A RayCluster's spec (also a RayJob's `spec.rayClusterSpec`).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RayClusterSpec {
    /// The head group.
    pub head_group_spec: Option<RayGroup>,
    /// The worker groups.
    pub worker_group_specs: Vec<RayGroup>,
    /// A suspended cluster runs no pods.
    pub suspend: Option<bool>,
}

/// A Ray head or worker group.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RayGroup {
    /// Worker group name.
    pub group_name: String,
    /// Workers (absent: 0).
    pub replicas: Option<i32>,
    /// Hosts per replica (multi-host groups; absent: 1).
    pub num_of_hosts: Option<i32>,
    /// A suspended group runs no pods.
    pub suspend: Option<bool>,
    /// The pod template.
    pub template: Option<PodTemplate>,
}

/// One entry of a Kubeflow `<kind>ReplicaSpecs` or a Volcano task.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaSpec {
    /// Volcano task name.
    pub name: String,
    /// Replicas.
    pub replicas: Option<i32>,
    /// The pod template.
    pub template: Option<PodTemplate>,
}

/// A FlinkDeployment's job manager or task manager.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FlinkComponent {
    /// Replicas.
    pub replicas: Option<i32>,
    /// `cpu` (cores) and `memory` (Flink's memory syntax).
    pub resource: FlinkResource,
}

/// A Flink component's resources.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FlinkResource {
    /// Cores (a number).
    pub cpu: Option<RawQuantity>,
    /// `2048m`, `2g`, `1024` (bytes): binary units.
    pub memory: Option<String>,
}

/// A FlinkDeployment's job (its parallelism sizes the task managers).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FlinkJob {
    /// Parallelism.
    pub parallelism: Option<i32>,
}

/// The spec fields of the multi-template kinds (the template's spec carries them all,
/// each kind reads its own).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MultiSpec {
    /// RayCluster.
    #[serde(flatten)]
    pub ray: RayClusterSpec,
    /// RayJob.
    pub ray_cluster_spec: Option<RayClusterSpec>,
    /// RayJob.
    pub submitter_pod_template: Option<PodTemplate>,
    /// PyTorchJob.
    pub pytorch_replica_specs: Option<BTreeMap<String, ReplicaSpec>>,
    /// TFJob.
    pub tf_replica_specs: Option<BTreeMap<String, ReplicaSpec>>,
    /// XGBoostJob.
    pub xgb_replica_specs: Option<BTreeMap<String, ReplicaSpec>>,
    /// PaddleJob.
    pub paddle_replica_specs: Option<BTreeMap<String, ReplicaSpec>>,
    /// MPIJob.
    pub mpi_replica_specs: Option<BTreeMap<String, ReplicaSpec>>,
    /// Volcano Job.
    pub tasks: Vec<ReplicaSpec>,
    /// FlinkDeployment.
    pub job_manager: Option<FlinkComponent>,
    /// FlinkDeployment.
    pub task_manager: Option<FlinkComponent>,
    /// FlinkDeployment.
    pub job: Option<FlinkJob>,
    /// FlinkDeployment.
    pub flink_configuration: BTreeMap<String, ConfigValue>,
}

/// A value of Flink's configuration map (strings, numbers or booleans in the wild).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    /// Text.
    Text(String),
    /// A number.
    Number(f64),
    /// Anything else (ignored).
    Other(serde::de::IgnoredAny),
}

/// Why a component cannot be priced: (field, message).
pub type FieldError = (String, String);

/// Whether Karmada's interpreter knows components for `(api_version, kind)` by the rules of
/// this module.
pub fn is_multi_template(api_version: &str, kind: &str) -> bool {
    multi_kind(api_version, kind).is_some()
}

/// Reads one `<kind>ReplicaSpecs` field of a spec.
type ReplicaSpecsOf = fn(&MultiSpec) -> Option<&BTreeMap<String, ReplicaSpec>>;

#[derive(Clone, Copy)]
enum MultiKind {
    RayCluster,
    RayJob,
    /// The field's name (for errors) and how to read it.
    Kubeflow(&'static str, ReplicaSpecsOf),
    Volcano,
    Flink,
}

fn multi_kind(api_version: &str, kind: &str) -> Option<MultiKind> {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    Some(match (group, kind) {
        ("ray.io", "RayCluster") => MultiKind::RayCluster,
        ("ray.io", "RayJob") => MultiKind::RayJob,
        ("kubeflow.org", "PyTorchJob") => {
            MultiKind::Kubeflow("pytorchReplicaSpecs", |s| s.pytorch_replica_specs.as_ref())
        }
        ("kubeflow.org", "TFJob") => {
            MultiKind::Kubeflow("tfReplicaSpecs", |s| s.tf_replica_specs.as_ref())
        }
        ("kubeflow.org", "XGBoostJob") => {
            MultiKind::Kubeflow("xgbReplicaSpecs", |s| s.xgb_replica_specs.as_ref())
        }
        ("kubeflow.org", "PaddleJob") => {
            MultiKind::Kubeflow("paddleReplicaSpecs", |s| s.paddle_replica_specs.as_ref())
        }
        ("kubeflow.org", "MPIJob") => {
            MultiKind::Kubeflow("mpiReplicaSpecs", |s| s.mpi_replica_specs.as_ref())
        }
        ("batch.volcano.sh", "Job") => MultiKind::Volcano,
        ("flink.apache.org", "FlinkDeployment") => MultiKind::Flink,
        _ => return None,
    })
}

/// The components of a template of a multi-template kind (`None` for other kinds), in the
/// order the spec lists them; `Err((field, message))` names a value that does not parse.
pub fn components(
    api_version: &str,
    kind: &str,
    spec: &MultiSpec,
) -> Option<Result<Vec<Component>, FieldError>> {
    let kind = multi_kind(api_version, kind)?;
    Some(match kind {
        MultiKind::RayCluster => ray(&spec.ray, "spec"),
        MultiKind::RayJob => {
            let cluster = spec.ray_cluster_spec.clone().unwrap_or_default();
            ray(&cluster, "spec.rayClusterSpec").and_then(|mut out| {
                if let Some(t) = &spec.submitter_pod_template {
                    out.push(component(
                        "submitter",
                        1,
                        &t.spec,
                        "spec.submitterPodTemplate.spec",
                    )?);
                }
                Ok(out)
            })
        }
        MultiKind::Kubeflow(field, read) => read(spec)
            .into_iter()
            .flatten()
            .map(|(ty, r)| {
                component(
                    &ty.to_lowercase(),
                    r.replicas.unwrap_or(1),
                    pod(r.template.as_ref()),
                    &format!("spec.{field}.{ty}.template.spec"),
                )
            })
            .collect(),
        MultiKind::Volcano => spec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let name = if t.name.is_empty() {
                    format!("task-{i}")
                } else {
                    t.name.clone()
                };
                component(
                    &name,
                    t.replicas.unwrap_or(0),
                    pod(t.template.as_ref()),
                    &format!("spec.tasks[{i}].template.spec"),
                )
            })
            .collect(),
        MultiKind::Flink => flink(spec),
    })
}

fn pod(t: Option<&PodTemplate>) -> &PodSpec {
    static EMPTY: std::sync::OnceLock<PodSpec> = std::sync::OnceLock::new();
    t.map_or_else(|| EMPTY.get_or_init(PodSpec::default), |t| &t.spec)
}

fn component(
    name: &str,
    replicas: i32,
    spec: &PodSpec,
    path: &str,
) -> Result<Component, FieldError> {
    let request =
        pod_request(spec).map_err(|(field, message)| (format!("{path}.{field}"), message))?;
    Ok(with_request(
        name,
        replicas,
        request,
        &spec.priority_class_name,
    ))
}

fn with_request(name: &str, replicas: i32, request: ResourceList, class: &str) -> Component {
    Component {
        name: name.to_owned(),
        replicas: replicas.max(0),
        replica_requirements: (!request.is_empty()).then(|| ComponentReplicaRequirements {
            resource_request: request,
            priority_class_name: class.to_owned(),
        }),
    }
}

fn ray(spec: &RayClusterSpec, path: &str) -> Result<Vec<Component>, FieldError> {
    let suspended = spec.suspend == Some(true);
    let mut out = Vec::new();
    if let Some(head) = &spec.head_group_spec {
        let n = if suspended { 0 } else { 1 };
        out.push(component(
            "ray-head",
            n,
            pod(head.template.as_ref()),
            &format!("{path}.headGroupSpec.template.spec"),
        )?);
    }
    for (i, g) in spec.worker_group_specs.iter().enumerate() {
        let name = if g.group_name.is_empty() {
            format!("worker-{i}")
        } else {
            g.group_name.clone()
        };
        let n = if suspended || g.suspend == Some(true) {
            0
        } else {
            g.replicas
                .unwrap_or(0)
                .max(0)
                .saturating_mul(g.num_of_hosts.unwrap_or(1).max(1))
        };
        out.push(component(
            &name,
            n,
            pod(g.template.as_ref()),
            &format!("{path}.workerGroupSpecs[{i}].template.spec"),
        )?);
    }
    Ok(out)
}

fn flink(spec: &MultiSpec) -> Result<Vec<Component>, FieldError> {
    let slots = match spec
        .flink_configuration
        .get("taskmanager.numberOfTaskSlots")
    {
        Some(ConfigValue::Text(t)) => t.trim().parse::<i32>().map_err(|e| {
            (
                "spec.flinkConfiguration[taskmanager.numberOfTaskSlots]".to_owned(),
                format!("{t:?}: {e}"),
            )
        })?,
        Some(ConfigValue::Number(n)) => *n as i32,
        _ => 1,
    }
    .max(1);
    let mut out = Vec::new();
    if let Some(jm) = &spec.job_manager {
        out.push(flink_component(
            "jobmanager",
            jm.replicas.unwrap_or(1),
            jm,
            "spec.jobManager",
        )?);
    }
    if let Some(tm) = &spec.task_manager {
        let replicas = tm.replicas.unwrap_or_else(|| {
            let p = spec
                .job
                .as_ref()
                .and_then(|j| j.parallelism)
                .unwrap_or(0)
                .max(0);
            (p + slots - 1) / slots
        });
        out.push(flink_component(
            "taskmanager",
            replicas,
            tm,
            "spec.taskManager",
        )?);
    }
    Ok(out)
}

fn flink_component(
    name: &str,
    replicas: i32,
    c: &FlinkComponent,
    path: &str,
) -> Result<Component, FieldError> {
    let mut request = ResourceList::new();
    if let Some(cpu) = &c.resource.cpu {
        let q = cpu
            .parse()
            .map_err(|e| (format!("{path}.resource.cpu"), e))?;
        request.insert("cpu", q.rounded_to_milli(Format::DecimalSI));
    }
    if let Some(memory) = &c.resource.memory {
        let bytes = flink_memory(memory).map_err(|e| (format!("{path}.resource.memory"), e))?;
        request.insert("memory", Quantity::from_units(bytes, Format::BinarySI));
    }
    Ok(with_request(name, replicas, request.without_zeros(), ""))
}

/// Flink's memory syntax (`MemorySize`): a number and an optional unit, binary multiples:
/// b/bytes, k/kb/kibibytes, m/mb/mebibytes, g/gb/gibibytes, t/tb/tebibytes (case-insensitive).
fn flink_memory(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{text:?}: not a Flink memory size (e.g. 2048m, 2g)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kibibytes" => 10,
        "m" | "mb" | "mebibytes" => 20,
        "g" | "gb" | "gibibytes" => 30,
        "t" | "tb" | "tebibytes" => 40,
        other => return Err(format!("{text:?}: unknown unit {other:?} (b, k, m, g, t)")),
    };
    n.checked_mul(1i64 << shift)
        .ok_or_else(|| format!("{text:?}: too large"))
}

#[cfg(test)]
mod tests {
    use karmada_quota_core::scope::ScopeSelector;
    use karmada_quota_core::usage::BindingCharge;

    use crate::template::Template;

    fn template(yaml: &str) -> Template {
        serde_saphyr::from_str(yaml).expect("template")
    }

    /// (name, replicas, per-replica request as `a=1,b=2`) of each component.
    fn components(yaml: &str) -> Vec<(String, i32, String)> {
        template(yaml)
            .binding()
            .expect("binding")
            .components
            .into_iter()
            .map(|c| {
                let request = c
                    .replica_requirements
                    .map(|r| r.resource_request.to_string())
                    .unwrap_or_default();
                (c.name, c.replicas, request)
            })
            .collect()
    }

    fn total(yaml: &str) -> String {
        let spec = template(yaml).binding().expect("binding");
        BindingCharge::compute(&spec, None)
            .scoped(&ScopeSelector::default())
            .expect("charged")
            .total
            .to_string()
    }

    const RAY: &str = "
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: llm, namespace: ai}
spec:
  headGroupSpec:
    template: {spec: {containers: [{resources: {requests: {cpu: '1', memory: 2Gi}}}]}}
  workerGroupSpecs:
    - groupName: gpu
      replicas: 3
      template:
        spec:
          containers: [{resources: {requests: {cpu: '2'}, limits: {nvidia.com/gpu: 1}}}]
";

    #[test]
    fn a_raycluster_is_its_head_and_its_worker_groups() {
        assert_eq!(
            components(RAY),
            [
                ("ray-head".to_owned(), 1, "cpu=1,memory=2Gi".to_owned()),
                ("gpu".to_owned(), 3, "cpu=2,nvidia.com/gpu=1".to_owned()),
            ]
        );
        // The example: head 1 × 1 cpu + workers 3 × (2 cpu, 1 GPU) = 7 cpu, 3 GPUs.
        assert_eq!(
            total(RAY),
            "cpu=7,memory=2Gi,pods=4,requests.cpu=7,requests.memory=2Gi,requests.nvidia.com/gpu=3"
        );
    }

    #[test]
    fn ray_multi_host_groups_suspension_and_rayjobs() {
        let multi = "
apiVersion: ray.io/v1
kind: RayCluster
spec:
  headGroupSpec: {template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}
  workerGroupSpecs:
    - {groupName: tpu, replicas: 2, numOfHosts: 4, template: {spec: {containers: [{resources: {requests: {google.com/tpu: 4}}}]}}}
    - {groupName: idle, replicas: 5, suspend: true, template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}
    - {template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}
";
        assert_eq!(
            components(multi)
                .into_iter()
                .map(|(n, r, _)| (n, r))
                .collect::<Vec<_>>(),
            [
                ("ray-head".to_owned(), 1),
                ("tpu".to_owned(), 8),
                ("idle".to_owned(), 0),
                ("worker-2".to_owned(), 0)
            ]
        );
        let suspended = RAY.replace(
            "spec:\n  headGroupSpec",
            "spec:\n  suspend: true\n  headGroupSpec",
        );
        assert!(components(&suspended).iter().all(|(_, r, _)| *r == 0));
        let job = "
apiVersion: ray.io/v1
kind: RayJob
spec:
  rayClusterSpec:
    headGroupSpec: {template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}
    workerGroupSpecs: [{groupName: w, replicas: 2, template: {spec: {containers: [{resources: {requests: {cpu: 2}}}]}}}]
  submitterPodTemplate: {spec: {containers: [{resources: {requests: {cpu: 500m}}}]}}
";
        assert_eq!(
            components(job),
            [
                ("ray-head".to_owned(), 1, "cpu=1".to_owned()),
                ("w".to_owned(), 2, "cpu=2".to_owned()),
                ("submitter".to_owned(), 1, "cpu=500m".to_owned()),
            ]
        );
    }

    #[test]
    fn kubeflow_jobs_are_their_replica_types_and_volcano_jobs_their_tasks() {
        let pytorch = "
apiVersion: kubeflow.org/v1
kind: PyTorchJob
spec:
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}
    Worker: {replicas: 4, template: {spec: {containers: [{resources: {limits: {nvidia.com/gpu: 2}}}]}}}
";
        assert_eq!(
            components(pytorch),
            [
                ("master".to_owned(), 1, "cpu=1".to_owned()),
                ("worker".to_owned(), 4, "nvidia.com/gpu=2".to_owned()),
            ]
        );
        let mpi = "{apiVersion: kubeflow.org/v2beta1, kind: MPIJob, spec: {mpiReplicaSpecs: {Launcher: {replicas: 1}, Worker: {replicas: 2, template: {spec: {containers: [{resources: {requests: {cpu: 3}}}]}}}}}}";
        assert_eq!(
            components(mpi),
            [
                ("launcher".to_owned(), 1, String::new()),
                ("worker".to_owned(), 2, "cpu=3".to_owned()),
            ]
        );
        let volcano = "{apiVersion: batch.volcano.sh/v1alpha1, kind: Job, spec: {tasks: [{name: ps, replicas: 1, template: {spec: {containers: [{resources: {requests: {cpu: 1}}}]}}}, {name: worker, replicas: 3, template: {spec: {containers: [{resources: {requests: {cpu: 2}}}]}}}]}}";
        assert_eq!(total(volcano), "cpu=7,pods=4,requests.cpu=7");
    }

    #[test]
    fn a_flinkdeployment_is_its_job_manager_and_its_task_managers() {
        let flink = "
apiVersion: flink.apache.org/v1beta1
kind: FlinkDeployment
spec:
  flinkConfiguration: {taskmanager.numberOfTaskSlots: '2', high-availability: true}
  jobManager: {resource: {cpu: 1, memory: 2048m}}
  taskManager: {resource: {cpu: 0.5, memory: 4g}}
  job: {parallelism: 5}
";
        // ⌈5 / 2⌉ = 3 task managers; Flink's 2048m is 2 GiB, not 2 milli-bytes.
        assert_eq!(
            components(flink),
            [
                ("jobmanager".to_owned(), 1, "cpu=1,memory=2Gi".to_owned()),
                (
                    "taskmanager".to_owned(),
                    3,
                    "cpu=500m,memory=4Gi".to_owned()
                ),
            ]
        );
        let fixed = flink.replace(
            "taskManager: {resource",
            "taskManager: {replicas: 2, resource",
        );
        assert_eq!(components(&fixed)[1].1, 2);
    }

    #[test]
    fn a_value_that_does_not_parse_names_its_field_and_other_kinds_have_no_components() {
        let bad = "{apiVersion: flink.apache.org/v1beta1, kind: FlinkDeployment, metadata: {name: f, namespace: a}, spec: {jobManager: {resource: {memory: 2 parsecs}}}}";
        let err = template(bad).binding().unwrap_err();
        assert_eq!(err.field, "spec.jobManager.resource.memory");
        let bad_ray = "{apiVersion: ray.io/v1, kind: RayCluster, spec: {workerGroupSpecs: [{groupName: g, replicas: 1, template: {spec: {containers: [{resources: {requests: {cpu: lots}}}]}}}]}}";
        assert_eq!(
            template(bad_ray).binding().unwrap_err().field,
            "spec.workerGroupSpecs[0].template.spec.containers[0].resources.requests[cpu]"
        );
        // SparkApplication: not priced here (its binding is an uncountable workload).
        let spark = "{apiVersion: sparkoperator.k8s.io/v1beta2, kind: SparkApplication, spec: {executor: {instances: 4, cores: 2}}}";
        let spec = template(spark).binding().unwrap();
        assert!(spec.components.is_empty());
        assert!(BindingCharge::compute(&spec, None).unaccounted.is_some());
    }
}
