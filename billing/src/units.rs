//! The unit a report shows a resource in, and its resource-hours: CPU in cores
//! (core-hours), memory and storage in GiB (GiB-hours), GPUs (GPU-hours), pods
//! (pod-hours), object counts (object-hours), anything else in its own units (unit-hours).
//!
//! The controller exports base units (cores, bytes, counts); `scale` turns them into the
//! shown unit. `requests.` and `limits.` prefixes keep their own rows (a quota may track
//! both), with the unit of the resource they name.

use karmada_quota_core::resources::COUNT_PREFIX;

const GIB: f64 = 1_073_741_824.0;

/// How one resource is shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit {
    /// The unit of average and peak (`cores`, `GiB`, `GPUs`, `pods`, `objects`, `units`).
    pub unit: &'static str,
    /// The unit of the time integral (`core-hours`, `GiB-hours`, …).
    pub hours: &'static str,
    /// Shown value = exported value × scale.
    pub scale: f64,
}

const CORES: Unit = Unit {
    unit: "cores",
    hours: "core-hours",
    scale: 1.0,
};
const GIBS: Unit = Unit {
    unit: "GiB",
    hours: "GiB-hours",
    scale: 1.0 / GIB,
};
const GPUS: Unit = Unit {
    unit: "GPUs",
    hours: "GPU-hours",
    scale: 1.0,
};
const PODS: Unit = Unit {
    unit: "pods",
    hours: "pod-hours",
    scale: 1.0,
};
const OBJECTS: Unit = Unit {
    unit: "objects",
    hours: "object-hours",
    scale: 1.0,
};
const UNITS: Unit = Unit {
    unit: "units",
    hours: "unit-hours",
    scale: 1.0,
};

/// The unit of a quota resource name.
pub fn unit_of(resource: &str) -> Unit {
    if resource.starts_with(COUNT_PREFIX) {
        return OBJECTS;
    }
    let base = resource
        .strip_prefix("requests.")
        .or_else(|| resource.strip_prefix("limits."))
        .unwrap_or(resource);
    match base {
        "cpu" => CORES,
        "memory" | "ephemeral-storage" => GIBS,
        "pods" => PODS,
        _ if base.starts_with("hugepages-") => GIBS,
        // An extended resource (`domain/name`) whose domain or name says GPU:
        // nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915.
        _ if base.contains('/') && base.to_ascii_lowercase().contains("gpu") => GPUS,
        _ => UNITS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_resource_name_gets_its_unit() {
        for (resource, unit, hours, scale) in [
            ("requests.cpu", "cores", "core-hours", 1.0),
            ("limits.cpu", "cores", "core-hours", 1.0),
            ("cpu", "cores", "core-hours", 1.0),
            ("requests.memory", "GiB", "GiB-hours", 1.0 / GIB),
            ("memory", "GiB", "GiB-hours", 1.0 / GIB),
            ("requests.ephemeral-storage", "GiB", "GiB-hours", 1.0 / GIB),
            ("hugepages-2Mi", "GiB", "GiB-hours", 1.0 / GIB),
            ("requests.nvidia.com/gpu", "GPUs", "GPU-hours", 1.0),
            ("requests.gpu.intel.com/i915", "GPUs", "GPU-hours", 1.0),
            ("pods", "pods", "pod-hours", 1.0),
            ("count/deployments.apps", "objects", "object-hours", 1.0),
            ("requests.example.com/fpga", "units", "unit-hours", 1.0),
            ("requests.gpu-like", "units", "unit-hours", 1.0),
        ] {
            let u = unit_of(resource);
            assert_eq!(
                (u.unit, u.hours, u.scale),
                (unit, hours, scale),
                "{resource}"
            );
        }
        assert!((4.0 * GIB * GIBS.scale - 4.0).abs() < 1e-12);
    }
}
