//! Which template kinds run pods nobody counts: what tells an uncountable workload (a DaemonSet, a
//! CronJob, a custom kind Karmada has no interpreter for) from an object that runs nothing
//! (a ConfigMap, a Service, a Role) when a binding carries no replica requirements.
//!
//! Kubernetes' own API groups are known kind by kind; Karmada's groups run nothing; any
//! other group is a custom resource, which may run pods through its operator (a
//! RayCluster's, a PyTorchJob's), so it counts as a workload unless the webhook is told its
//! group runs none (`--pod-less-groups`).

/// Kinds of Kubernetes' own groups that run pods Karmada does not count: its native
/// interpreter gives replicas (and replica requirements) only for Deployment, StatefulSet,
/// Job and Pod, so a binding of one of these has neither, whatever it runs.
const UNCOUNTED_POD_KINDS: &[(&str, &str)] = &[
    ("", "ReplicationController"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("batch", "CronJob"),
];

/// Groups of Kubernetes itself besides those ending in `.k8s.io` (which are its own too).
const KUBERNETES_GROUPS: &[&str] = &["", "apps", "batch", "policy", "autoscaling"];

/// Groups ending in `.k8s.io` that are not Kubernetes' own API but operators' custom
/// resources running pods (the Spark operator's SparkApplication).
const OPERATOR_K8S_IO_GROUPS: &[&str] = &["sparkoperator.k8s.io"];

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Whether a binding of a template of `api_version`/`kind` that carries no replicas may
/// still run pods nobody counts: one of [`UNCOUNTED_POD_KINDS`], or any kind of a group
/// that is neither Kubernetes' nor Karmada's nor listed in `pod_less_groups` (a custom
/// resource whose operator may run pods; with an interpreter customization Karmada gives
/// it replicas or components, and it is a counted workload). A Deployment, StatefulSet,
/// Job or Pod without replicas runs none.
pub fn runs_uncounted_pods(api_version: &str, kind: &str, pod_less_groups: &[String]) -> bool {
    let group = group_of(api_version);
    if KUBERNETES_GROUPS.contains(&group)
        || (group.ends_with(".k8s.io") && !OPERATOR_K8S_IO_GROUPS.contains(&group))
    {
        return UNCOUNTED_POD_KINDS.contains(&(group, kind));
    }
    if group == "karmada.io" || group.ends_with(".karmada.io") {
        return false;
    }
    !pod_less_groups.iter().any(|g| g == group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_kinds_are_known_one_by_one_and_only_uncounted_ones_qualify() {
        for (v, k) in [
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "ReplicaSet"),
            ("batch/v1", "CronJob"),
            ("v1", "ReplicationController"),
        ] {
            assert!(runs_uncounted_pods(v, k, &[]), "{v} {k}");
        }
        for (v, k) in [
            // Counted by Karmada: without replicas they run nothing.
            ("apps/v1", "Deployment"),
            ("apps/v1", "StatefulSet"),
            ("batch/v1", "Job"),
            ("v1", "Pod"),
            ("v1", "ConfigMap"),
            ("v1", "Service"),
            ("apps/v1", "ControllerRevision"),
            ("networking.k8s.io/v1", "Ingress"),
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("policy/v1", "PodDisruptionBudget"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("policy.karmada.io/v1alpha1", "PropagationPolicy"),
        ] {
            assert!(!runs_uncounted_pods(v, k, &[]), "{v} {k}");
        }
    }

    #[test]
    fn a_custom_kind_runs_uncounted_pods_unless_its_group_is_said_to_run_none() {
        assert!(runs_uncounted_pods("ray.io/v1", "RayCluster", &[]));
        // An operator's group under k8s.io is not Kubernetes' own API.
        assert!(runs_uncounted_pods(
            "sparkoperator.k8s.io/v1beta2",
            "SparkApplication",
            &[]
        ));
        assert!(runs_uncounted_pods(
            "cert-manager.io/v1",
            "Certificate",
            &[]
        ));
        let pod_less = ["cert-manager.io".to_owned()];
        assert!(!runs_uncounted_pods(
            "cert-manager.io/v1",
            "Certificate",
            &pod_less
        ));
        assert!(runs_uncounted_pods("ray.io/v1", "RayCluster", &pod_less));
    }

    #[test]
    fn the_group_is_the_part_before_the_version() {
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("flink.apache.org/v1beta1"), "flink.apache.org");
    }
}
