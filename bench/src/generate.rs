//! Generated ResourceBindings for the in-process benches: deterministic, Karmada-shaped
//! JSON (metadata, labels, owner reference, placement, status as Karmada writes them), so
//! that deserializing them costs what the controller's watch pays.

use serde_json::{Value, json};

/// Member clusters the generated bindings are placed on.
pub const CLUSTERS: [&str; 3] = ["member1", "member2", "member3"];

/// SplitMix64: a tiny deterministic generator (no dependency, same bindings every run).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The namespace of binding `i` among `namespaces`.
pub fn namespace(i: usize, namespaces: usize) -> String {
    format!("ns-{:03}", i % namespaces.max(1))
}

/// An RFC 4122-shaped uid for binding `i`.
pub fn uid(i: usize) -> String {
    let a = mix(i as u64);
    let b = mix(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

/// Binding `i` at `generation` (the replica count moves with the generation, as a scale
/// does): a Deployment of 1–5 replicas with cpu and memory requests, Divided over one to
/// three members. With `distinct`, its cpu request is its own (`100+i` millicores), so no
/// two bindings cost the same.
pub fn binding_with(i: usize, namespaces: usize, generation: i64, distinct: bool) -> Value {
    let h = mix(i as u64 ^ 0x5eed);
    let ns = namespace(i, namespaces);
    let name = format!("app-{i:07}");
    let replicas = 1 + (h.wrapping_add(generation.unsigned_abs()) % 5) as i64;
    let own_cpu = format!("{}m", 100 + i);
    let cpu = if distinct {
        own_cpu.as_str()
    } else {
        ["100m", "250m", "500m", "1", "2"][(h >> 8) as usize % 5]
    };
    let memory = ["128Mi", "256Mi", "512Mi", "1Gi"][(h >> 16) as usize % 4];
    let spread = 1 + (h >> 24) as usize % 3;
    let first = (h >> 32) as usize % CLUSTERS.len();
    let mut clusters = Vec::new();
    let mut left = replicas;
    for k in 0..spread {
        let share = if k + 1 == spread {
            left
        } else {
            replicas / spread as i64
        };
        left -= share;
        if share > 0 {
            clusters
                .push(json!({"name": CLUSTERS[(first + k) % CLUSTERS.len()], "replicas": share}));
        }
    }
    let template_uid = uid(i ^ 0x00ff_ffff);
    json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {
            "name": format!("{name}-deployment"),
            "namespace": ns,
            "uid": uid(i),
            "resourceVersion": (1000 + i as i64 * 3 + generation).to_string(),
            "generation": generation,
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {
                "propagationpolicy.karmada.io/permanent-id": uid(i ^ 0x0abc_def0),
                "resourcebinding.karmada.io/permanent-id": uid(i ^ 0x0123_4567),
            },
            "annotations": {
                "policy.karmada.io/applied-placement": "{\"clusterAffinity\":{\"clusterNames\":[\"member1\",\"member2\",\"member3\"]},\"replicaScheduling\":{\"replicaSchedulingType\":\"Divided\",\"replicaDivisionPreference\":\"Weighted\"}}",
                "propagationpolicy.karmada.io/name": "default",
                "propagationpolicy.karmada.io/namespace": ns,
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                "uid": template_uid, "controller": true, "blockOwnerDeletion": true,
            }],
            "finalizers": ["karmada.io/binding-controller"],
        },
        "spec": {
            "resource": {
                "apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": name,
                "uid": template_uid, "resourceVersion": (500 + i).to_string(),
            },
            "replicas": replicas,
            "replicaRequirements": {"resourceRequest": {"cpu": cpu, "memory": memory}},
            "clusters": clusters,
            "placement": {
                "clusterAffinity": {"clusterNames": CLUSTERS},
                "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"},
            },
            "schedulerName": "default-scheduler",
            "conflictResolution": "Abort",
        },
        "status": {
            "schedulerObservedGeneration": generation,
            "lastScheduledTime": "2026-11-20T08:00:01Z",
            "conditions": [
                {"type": "Scheduled", "status": "True", "reason": "Success", "message": "Binding has been scheduled successfully.", "lastTransitionTime": "2026-11-20T08:00:01Z"},
                {"type": "FullyApplied", "status": "True", "reason": "FullyAppliedSuccess", "message": "All works have been successfully applied", "lastTransitionTime": "2026-11-20T08:00:02Z"},
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_crds::ResourceBinding;

    #[test]
    fn bindings_are_deterministic_and_decode_with_their_placement() {
        assert_eq!(
            binding_with(7, 100, 1, false),
            binding_with(7, 100, 1, false)
        );
        assert_ne!(uid(1), uid(2));
        let rb: ResourceBinding = serde_json::from_value(binding_with(42, 100, 2, false)).unwrap();
        assert_eq!(rb.metadata.namespace.as_deref(), Some("ns-042"));
        assert_eq!(rb.metadata.generation, Some(2));
        let placed: i32 = rb.spec.clusters.iter().map(|c| c.replicas).sum();
        assert_eq!(placed, rb.spec.replicas);
        for i in 0..1000 {
            let rb: ResourceBinding =
                serde_json::from_value(binding_with(i, 100, 1, i % 2 == 0)).unwrap();
            assert!(
                (1..=5).contains(&rb.spec.replicas),
                "{i}: {}",
                rb.spec.replicas
            );
            let placed: i32 = rb.spec.clusters.iter().map(|c| c.replicas).sum();
            assert_eq!(placed, rb.spec.replicas);
        }
        assert!(
            rb.spec
                .clusters
                .iter()
                .all(|c| CLUSTERS.contains(&c.name.as_str()))
        );
    }
}
