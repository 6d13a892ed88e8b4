//! Golden outputs of `get`, `describe` and `top` from status fixtures. Run with
//! `UPDATE_GOLDEN=1` to rewrite the files after an intended change, then review the diff.

use std::path::PathBuf;

use karmada_quota_cli::model::QuotaSummary;
use karmada_quota_cli::render::{self, EventRow, Output, Style};
use karmada_quota_crds::KarmadaQuota;

fn fixtures() -> Vec<QuotaSummary> {
    let text = include_str!("fixtures/quotas.yaml");
    let quotas: Vec<KarmadaQuota> = serde_saphyr::from_multiple(text).expect("fixture");
    quotas.iter().map(QuotaSummary::of).collect()
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(actual, expected, "{name} differs from its golden file");
}

const PLAIN: Style = Style { color: false };

#[test]
fn get_table_wide_and_csv() {
    let q = fixtures();
    golden("get.txt", &render::get(&q, Output::Table, PLAIN).unwrap());
    golden(
        "get-wide.txt",
        &render::get(&q, Output::Wide, PLAIN).unwrap(),
    );
    golden("get.csv", &render::get(&q, Output::Csv, PLAIN).unwrap());
}

#[test]
fn get_json_and_yaml_carry_the_same_numbers() {
    let q = fixtures();
    let json: serde_json::Value =
        serde_json::from_str(&render::get(&q, Output::Json, PLAIN).unwrap()).unwrap();
    let cpu = &json[0]["resources"][1];
    assert_eq!(cpu["resource"], "requests.cpu");
    assert_eq!(
        (cpu["used"].as_str(), cpu["reserved"].as_str()),
        (Some("5100m"), Some("4"))
    );
    assert_eq!(cpu["percent"], 91.0);
    let yaml: serde_json::Value =
        serde_saphyr::from_str(&render::get(&q, Output::Yaml, PLAIN).unwrap()).unwrap();
    assert_eq!(yaml, json);
}

#[test]
fn describe_like_kubectl_describe_resourcequota() {
    let q = fixtures();
    let events = [EventRow {
        type_: "Warning".into(),
        reason: "QuotaExceeded".into(),
        age: "2m".into(),
        count: 3,
        message: "exceeded quota: team-a-compute, requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8".into(),
    }];
    golden("describe.txt", &render::describe(&q[0], &events, PLAIN));
    golden(
        "describe-no-status.txt",
        &render::describe(&q[1], &[], PLAIN),
    );
}

#[test]
fn top_orders_by_the_most_pressed_resource() {
    let out = render::top(&fixtures(), 10, PLAIN);
    golden("top.txt", &out);
    let first = out.lines().nth(1).unwrap();
    assert!(first.starts_with("team-a"), "{out}");
    assert_eq!(render::top(&fixtures(), 1, PLAIN).lines().count(), 2);
}

#[test]
fn colour_marks_warning_and_critical_shares_only_when_asked() {
    let coloured = render::get(&fixtures(), Output::Table, Style { color: true }).unwrap();
    // requests.nvidia.com/gpu at 100% is critical (red), requests.cpu at 91% a warning.
    assert!(coloured.contains("\x1b[31m100%\x1b[0m"), "{coloured}");
    assert!(coloured.contains("\x1b[33m91%\x1b[0m"), "{coloured}");
    let plain = render::get(&fixtures(), Output::Table, PLAIN).unwrap();
    assert!(!plain.contains('\x1b'));
}

#[test]
fn describe_and_get_a_cluster_quota_with_its_selector_and_namespaces() {
    let q: karmada_quota_crds::KarmadaClusterQuota =
        serde_saphyr::from_str(include_str!("../../testdata/karmadaclusterquota.yaml"))
            .expect("the example parses");
    let s = QuotaSummary::of_cluster(&q);
    assert_eq!(s.selector.as_deref(), Some("business=a"));
    assert_eq!(s.namespace, "");
    assert_eq!(s.namespaces.len(), 2);
    let described = render::describe(&s, &[], PLAIN);
    golden("describe-cluster.txt", &described);
    assert!(
        described.contains("Kind:        KarmadaClusterQuota"),
        "{described}"
    );
    let listed = render::get(&[s], Output::Table, PLAIN).unwrap();
    golden("get-cluster.txt", &listed);
    assert!(
        listed.starts_with("NAME "),
        "cluster-scoped: no NAMESPACE column\n{listed}"
    );
}

#[test]
fn top_lists_a_cluster_quota_beside_the_namespaced_ones() {
    let q: karmada_quota_crds::KarmadaClusterQuota =
        serde_saphyr::from_str(include_str!("../../testdata/karmadaclusterquota.yaml"))
            .expect("the example parses");
    let mut all = fixtures();
    all.push(QuotaSummary::of_cluster(&q));
    let out = render::top(&all, 10, PLAIN);
    let row = out
        .lines()
        .find(|l| l.contains("business-a"))
        .unwrap_or_else(|| panic!("no cluster quota row:\n{out}"));
    assert!(row.starts_with(render::CLUSTER_SCOPED), "{out}");
}

#[test]
fn describe_and_get_wide_show_what_drains_per_member_after_a_failover() {
    let text = include_str!("fixtures/failover.yaml");
    let quota: KarmadaQuota = serde_saphyr::from_str(text).expect("fixture");
    let q = QuotaSummary::of(&quota);
    let member1 = &q.clusters[0];
    assert_eq!(
        member1
            .draining
            .as_ref()
            .and_then(|d| d.get("pods"))
            .map(String::as_str),
        Some("2")
    );
    // The old replicas member1 runs are expected while they drain: no drift.
    assert!(q.clusters.iter().all(|c| c.drift.is_empty()), "{q:?}");
    assert!(q.clusters[2].draining_unknown);
    let described = render::describe(&q, &[], PLAIN);
    golden("describe-failover.txt", &described);
    assert!(described.contains("Draining:    Count"));
    let wide = render::get(std::slice::from_ref(&q), Output::Wide, PLAIN).unwrap();
    golden("get-wide-failover.txt", &wide);
    assert!(wide.contains("0 (+200m draining)"), "{wide}");
    // JSON carries the numbers.
    let json = render::get(std::slice::from_ref(&q), Output::Json, PLAIN).unwrap();
    assert!(json.contains(r#""drainingReplicas": "Count""#), "{json}");
}
