//! One table entry per behaviour `PodRequests` v0.35's own tests check (cases of its
//! `TestPodRequestsAndLimits`, `TestPodResourceRequests` and `TestPodLevelResourceRequests`
//! that apply with the options a member's ResourceQuota uses), plus the 1.35 details those
//! tests leave implicit, each named for what it shows.

use super::*;
use crate::testutil::{mk_list, q};

type Pairs = &'static [(&'static str, &'static str)];

fn app(requests: Pairs) -> ContainerView {
    ContainerView {
        requests: mk_list(requests),
        ..Default::default()
    }
}

fn sidecar(requests: Pairs) -> ContainerView {
    ContainerView {
        restartable: true,
        ..app(requests)
    }
}

/// `c` with a container status whose `resources.requests` is `actual` and whose
/// `allocatedResources` is `allocated`.
fn resized(mut c: ContainerView, actual: Pairs, allocated: Pairs) -> ContainerView {
    c.status = Some(ContainerStatusView {
        actual: mk_list(actual),
        allocated: mk_list(allocated),
    });
    c
}

#[derive(Default)]
struct Pod {
    containers: Vec<ContainerView>,
    inits: Vec<ContainerView>,
    pod_level: Pairs,
    overhead: Pairs,
    infeasible: bool,
}

impl Pod {
    fn view(self) -> PodView {
        PodView {
            containers: self.containers,
            init_containers: self.inits,
            pod_level: mk_list(self.pod_level),
            overhead: mk_list(self.overhead),
            resize_infeasible: self.infeasible,
            ..Default::default()
        }
    }
}

fn cases() -> Vec<(&'static str, Pod, Pairs)> {
    vec![
        // Containers, init containers, sidecars, overhead (no status, no pod level).
        (
            "a pod without containers requests nothing",
            Pod::default(),
            &[],
        ),
        (
            "overhead alone is requested",
            Pod {
                containers: vec![app(&[])],
                overhead: &[("cpu", "5"), ("memory", "5")],
                ..Default::default()
            },
            &[("cpu", "5"), ("memory", "5")],
        ),
        (
            "overhead adds to the containers' requests",
            Pod {
                containers: vec![app(&[("cpu", "1"), ("memory", "10")])],
                overhead: &[("cpu", "5"), ("memory", "5")],
                ..Default::default()
            },
            &[("cpu", "6"), ("memory", "15")],
        ),
        (
            "containers' requests add up",
            Pod {
                containers: vec![
                    app(&[("cpu", "1"), ("memory", "5")]),
                    app(&[("cpu", "4"), ("memory", "12")]),
                ],
                ..Default::default()
            },
            &[("cpu", "5"), ("memory", "17")],
        ),
        (
            "an init container larger than the containers sets the request",
            Pod {
                containers: vec![app(&[("cpu", "1")])],
                inits: vec![app(&[("cpu", "4")])],
                ..Default::default()
            },
            &[("cpu", "4")],
        ),
        (
            "the largest init container counts, not their sum",
            Pod {
                containers: vec![
                    app(&[("cpu", "1"), ("memory", "5")]),
                    app(&[("cpu", "4"), ("memory", "12")]),
                ],
                inits: vec![
                    app(&[("cpu", "1"), ("memory", "5")]),
                    app(&[("cpu", "40"), ("memory", "120")]),
                ],
                ..Default::default()
            },
            &[("cpu", "40"), ("memory", "120")],
        ),
        (
            "containers larger than the init container set the request",
            Pod {
                containers: vec![app(&[("cpu", "2")]), app(&[("cpu", "3")])],
                inits: vec![app(&[("cpu", "2")])],
                ..Default::default()
            },
            &[("cpu", "5")],
        ),
        (
            "overhead is added to the larger of containers and init containers",
            Pod {
                containers: vec![app(&[("cpu", "2")]), app(&[("cpu", "3")])],
                inits: vec![app(&[("cpu", "2")])],
                overhead: &[("cpu", "1"), ("memory", "1Gi")],
                ..Default::default()
            },
            &[("cpu", "6"), ("memory", "1Gi")],
        ),
        (
            "a sidecar runs beside the containers: their requests add up",
            Pod {
                containers: vec![app(&[("cpu", "1")])],
                inits: vec![sidecar(&[("cpu", "1")])],
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
        (
            "sidecars add up with the containers over an earlier larger init container",
            Pod {
                containers: vec![app(&[("cpu", "1")])],
                inits: vec![
                    app(&[("cpu", "5")]),
                    sidecar(&[("cpu", "1")]),
                    sidecar(&[("cpu", "2")]),
                    sidecar(&[("cpu", "3")]),
                ],
                ..Default::default()
            },
            &[("cpu", "7")],
        ),
        (
            "an init container adds the sidecars started before it, not those after",
            Pod {
                containers: vec![app(&[("cpu", "1")])],
                inits: vec![
                    app(&[("cpu", "5")]),
                    sidecar(&[("cpu", "1")]),
                    sidecar(&[("cpu", "2")]),
                    app(&[("cpu", "5")]),
                    sidecar(&[("cpu", "3")]),
                ],
                ..Default::default()
            },
            &[("cpu", "8")],
        ),
        (
            "an init container after a sidecar peaks at both",
            Pod {
                containers: vec![app(&[("cpu", "100")])],
                inits: vec![sidecar(&[("cpu", "10")]), app(&[("cpu", "200")])],
                ..Default::default()
            },
            &[("cpu", "210")],
        ),
        (
            "a sidecar and a later init container peak name by name",
            Pod {
                containers: vec![app(&[("memory", "3Mi"), ("cpu", "2m")])],
                inits: vec![
                    sidecar(&[("memory", "5Mi"), ("cpu", "4m")]),
                    app(&[("memory", "6Mi"), ("cpu", "8m")]),
                ],
                ..Default::default()
            },
            &[("memory", "11Mi"), ("cpu", "12m")],
        ),
        // In-place resize: a container status with `resources` set.
        (
            "resize infeasible: what the container runs with counts, not its spec",
            Pod {
                containers: vec![resized(app(&[("cpu", "4")]), &[("cpu", "2")], &[])],
                infeasible: true,
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
        (
            "resize infeasible: the larger of what runs and what is allocated",
            Pod {
                containers: vec![resized(
                    app(&[("cpu", "6")]),
                    &[("cpu", "2")],
                    &[("cpu", "4")],
                )],
                infeasible: true,
                ..Default::default()
            },
            &[("cpu", "4")],
        ),
        (
            "resize pending or in progress: the spec counts when it is the largest",
            Pod {
                containers: vec![resized(app(&[("cpu", "4")]), &[("cpu", "2")], &[])],
                ..Default::default()
            },
            &[("cpu", "4")],
        ),
        (
            "resized down, not yet applied: what the container runs with counts",
            Pod {
                containers: vec![resized(app(&[("cpu", "1")]), &[("cpu", "2")], &[])],
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
        (
            "allocated larger than the spec counts",
            Pod {
                containers: vec![resized(
                    app(&[("cpu", "1")]),
                    &[("cpu", "1")],
                    &[("cpu", "3")],
                )],
                ..Default::default()
            },
            &[("cpu", "3")],
        ),
        (
            "resized: the largest of spec, actual and allocated, name by name",
            Pod {
                containers: vec![resized(
                    app(&[
                        ("cpu", "30m"),
                        ("memory", "20M"),
                        ("ephemeral-storage", "10G"),
                    ]),
                    &[
                        ("cpu", "10m"),
                        ("memory", "30M"),
                        ("ephemeral-storage", "20G"),
                    ],
                    &[
                        ("cpu", "20m"),
                        ("memory", "10M"),
                        ("ephemeral-storage", "30G"),
                    ],
                )],
                ..Default::default()
            },
            &[
                ("cpu", "30m"),
                ("memory", "30M"),
                ("ephemeral-storage", "30G"),
            ],
        ),
        (
            "1.35 takes the largest per container, then sums them",
            Pod {
                containers: vec![
                    resized(app(&[("cpu", "1")]), &[], &[("cpu", "2")]),
                    resized(app(&[("cpu", "2")]), &[], &[("cpu", "1")]),
                ],
                ..Default::default()
            },
            &[("cpu", "4")],
        ),
        (
            "resized sidecar, infeasible: what it runs with counts",
            Pod {
                inits: vec![resized(sidecar(&[("cpu", "4")]), &[("cpu", "2")], &[])],
                infeasible: true,
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
        (
            "resized sidecar, resize not infeasible: its spec counts when the largest",
            Pod {
                inits: vec![resized(sidecar(&[("cpu", "4")]), &[("cpu", "2")], &[])],
                ..Default::default()
            },
            &[("cpu", "4")],
        ),
        (
            "a regular init container is priced by its spec, never its status",
            Pod {
                containers: vec![app(&[("cpu", "1")])],
                inits: vec![resized(
                    app(&[("cpu", "2")]),
                    &[("cpu", "5")],
                    &[("cpu", "5")],
                )],
                infeasible: true,
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
        (
            "a container without a status keeps its spec when the pod's resize is infeasible",
            Pod {
                containers: vec![
                    app(&[("cpu", "1")]),
                    resized(app(&[("cpu", "4")]), &[("cpu", "2")], &[]),
                ],
                infeasible: true,
                ..Default::default()
            },
            &[("cpu", "3")],
        ),
        // Pod-level requests (`spec.resources.requests`).
        (
            "pod-level memory alone is the pod's memory",
            Pod {
                pod_level: &[("memory", "2Mi")],
                ..Default::default()
            },
            &[("memory", "2Mi")],
        ),
        (
            "pod-level cpu with containers requesting nothing: the pod-level cpu",
            Pod {
                containers: vec![app(&[]), app(&[])],
                pod_level: &[("cpu", "2")],
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
        (
            "pod-level memory and container cpu: each name from its own level",
            Pod {
                containers: vec![app(&[("cpu", "2m")])],
                pod_level: &[("memory", "2Mi")],
                ..Default::default()
            },
            &[("memory", "2Mi"), ("cpu", "2m")],
        ),
        (
            "a pod-level name Kubernetes ignores leaves the containers' value",
            Pod {
                containers: vec![app(&[("storage", "3Mi")])],
                pod_level: &[("storage", "2Mi")],
                ..Default::default()
            },
            &[("storage", "3Mi")],
        ),
        (
            "only an ignored name at pod level: the containers count",
            Pod {
                containers: vec![app(&[("memory", "3Mi")])],
                pod_level: &[("ephemeral-storage", "2Mi")],
                ..Default::default()
            },
            &[("memory", "3Mi")],
        ),
        (
            "pod-level cpu and memory replace the containers' sum, even a smaller one",
            Pod {
                containers: vec![app(&[("memory", "3Mi"), ("cpu", "2m")])],
                pod_level: &[("memory", "6Mi"), ("cpu", "8m")],
                ..Default::default()
            },
            &[("memory", "6Mi"), ("cpu", "8m")],
        ),
        (
            "pod level replaces the aggregate of containers, sidecars and init containers",
            Pod {
                containers: vec![app(&[("memory", "3Mi"), ("cpu", "2m")])],
                inits: vec![
                    sidecar(&[("memory", "5Mi"), ("cpu", "4m")]),
                    app(&[("memory", "6Mi"), ("cpu", "8m")]),
                ],
                pod_level: &[("memory", "15Mi"), ("cpu", "18m")],
                ..Default::default()
            },
            &[("memory", "15Mi"), ("cpu", "18m")],
        ),
        (
            "pod-level hugepages of one page size",
            Pod {
                pod_level: &[("memory", "10Mi"), ("hugepages-2Mi", "2Mi")],
                ..Default::default()
            },
            &[("memory", "10Mi"), ("hugepages-2Mi", "2Mi")],
        ),
        (
            "pod-level hugepages of several page sizes",
            Pod {
                pod_level: &[
                    ("cpu", "1"),
                    ("hugepages-2Mi", "2Mi"),
                    ("hugepages-1Gi", "1Gi"),
                ],
                ..Default::default()
            },
            &[
                ("cpu", "1"),
                ("hugepages-2Mi", "2Mi"),
                ("hugepages-1Gi", "1Gi"),
            ],
        ),
        (
            "pod-level hugepages replace the containers' of the same page size",
            Pod {
                containers: vec![app(&[("hugepages-2Mi", "6Mi")])],
                pod_level: &[("cpu", "1"), ("hugepages-2Mi", "10Mi")],
                ..Default::default()
            },
            &[("cpu", "1"), ("hugepages-2Mi", "10Mi")],
        ),
        (
            "a page size only the containers request keeps their value",
            Pod {
                containers: vec![app(&[("memory", "4Mi"), ("hugepages-1Gi", "1Gi")])],
                pod_level: &[("cpu", "1"), ("hugepages-2Mi", "10Mi")],
                ..Default::default()
            },
            &[
                ("cpu", "1"),
                ("memory", "4Mi"),
                ("hugepages-2Mi", "10Mi"),
                ("hugepages-1Gi", "1Gi"),
            ],
        ),
        (
            "overhead is added on top of the pod-level requests",
            Pod {
                pod_level: &[("cpu", "2")],
                overhead: &[("cpu", "250m")],
                ..Default::default()
            },
            &[("cpu", "2250m")],
        ),
        (
            "pod-level requests win over a resized container (pod-level resize is alpha, off)",
            Pod {
                containers: vec![resized(
                    app(&[("cpu", "1")]),
                    &[("cpu", "3")],
                    &[("cpu", "3")],
                )],
                pod_level: &[("cpu", "2")],
                ..Default::default()
            },
            &[("cpu", "2")],
        ),
    ]
}

#[test]
fn pod_requests_follow_kubernetes_1_35() {
    let mut failures = Vec::new();
    for (name, pod, want) in cases() {
        let got = pod_requests(&pod.view());
        if got != mk_list(want) {
            failures.push(format!("{name}: got {got}, want {}", mk_list(want)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_first_resize_pending_condition_decides_infeasible() {
    let table: [(&str, Pairs, bool); 6] = [
        ("no condition", &[], false),
        (
            "pending, infeasible",
            &[("PodResizePending", "Infeasible")],
            true,
        ),
        (
            "pending, deferred",
            &[("PodResizePending", "Deferred")],
            false,
        ),
        ("in progress", &[("PodResizeInProgress", "")], false),
        (
            "other conditions before it",
            &[("Ready", "Infeasible"), ("PodResizePending", "Infeasible")],
            true,
        ),
        (
            "the first of two decides",
            &[
                ("PodResizePending", "Deferred"),
                ("PodResizePending", "Infeasible"),
            ],
            false,
        ),
    ];
    for (name, conditions, want) in table {
        assert_eq!(
            resize_infeasible(conditions.iter().copied()),
            want,
            "{name}"
        );
    }
}

#[test]
fn only_cpu_memory_and_hugepages_are_pod_level_names() {
    for (name, want) in [
        ("cpu", true),
        ("memory", true),
        ("hugepages-2Mi", true),
        ("hugepages-1Gi", true),
        ("ephemeral-storage", false),
        ("nvidia.com/gpu", false),
    ] {
        assert_eq!(is_pod_level_name(name), want, "{name}");
    }
}

#[test]
fn pod_usage_expands_names_and_counts_one_pod() {
    let pod = Pod {
        containers: vec![
            app(&[("cpu", "250m"), ("nvidia.com/gpu", "1")]),
            app(&[("cpu", "250m"), ("memory", "1Gi")]),
        ],
        ..Default::default()
    };
    assert_eq!(
        pod_usage(&pod.view()),
        mk_list(&[
            ("cpu", "500m"),
            ("requests.cpu", "500m"),
            ("memory", "1Gi"),
            ("requests.memory", "1Gi"),
            ("requests.nvidia.com/gpu", "1"),
            ("pods", "1"),
        ])
    );
}

#[test]
fn pod_usage_of_pod_level_requests_is_charged_under_both_names() {
    let pod = Pod {
        containers: vec![app(&[])],
        pod_level: &[("cpu", "2")],
        ..Default::default()
    };
    let usage = pod_usage(&pod.view());
    assert_eq!(usage.get("cpu"), Some(&q("2")));
    assert_eq!(usage.get("requests.cpu"), Some(&q("2")));
    assert_eq!(usage.get("pods"), Some(&q("1")));
}

#[test]
fn a_terminal_pod_uses_nothing() {
    let mut pod = Pod {
        containers: vec![app(&[("cpu", "1")])],
        ..Default::default()
    }
    .view();
    assert_eq!(pod_usage(&pod).get("cpu"), Some(&q("1")));
    pod.terminal = true;
    assert_eq!(pod_usage(&pod), ResourceList::new());
}

#[test]
fn a_negative_request_is_counted_as_zero() {
    let pod = Pod {
        containers: vec![app(&[("cpu", "-1")])],
        ..Default::default()
    };
    assert_eq!(pod_usage(&pod.view()).get("requests.cpu"), Some(&q("0")));
}
