//! The quota CRDs' schemas against the webhook's own validation (crds' `validate_spec` and
//! `validate_cluster_spec`, which `/validate/karmadaquota` and
//! `/validate/karmadaclusterquota` answer with): the schema never refuses a spec the
//! webhook admits, and it refuses every invalid spec a schema can express — through its
//! keywords (`enum`, `minLength`, `required`) on every apiserver, through its
//! x-kubernetes-validations rules (CEL) on 1.25+. What only the webhook can refuse (label
//! syntax, resource names, quantities) is named as such.
//!
//! A small validator walks a schema and an object the way the apiserver does for the
//! keywords these CRDs use, evaluating each rule with `self` bound to its node.

use karmada_quota_crds::convert::{validate_cluster_spec, validate_spec};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, KarmadaQuotaSpec};
use kube::CustomResourceExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use super::run_rule;

/// Why the schema refuses a value.
#[derive(Clone, Debug, PartialEq)]
enum Refusal {
    /// A keyword: `enum`, `minLength`, `maxItems`, `required` (every apiserver).
    Keyword(String),
    /// An x-kubernetes-validations rule (apiservers 1.25+).
    Rule(String),
}

/// The schema of `spec` in a generated CRD.
fn spec_schema(crd: &impl serde::Serialize) -> Value {
    let crd = serde_json::to_value(crd).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// Every refusal of `value` by `schema` at `path`.
fn refusals(schema: &Value, value: &Value, path: &str, out: &mut Vec<Refusal>) {
    if value.is_null() {
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        out.push(Refusal::Keyword(format!("{path}: {value} not in enum")));
    }
    if let (Some(min), Some(s)) = (schema["minLength"].as_u64(), value.as_str())
        && (s.chars().count() as u64) < min
    {
        out.push(Refusal::Keyword(format!("{path}: shorter than {min}")));
    }
    if let (Some(max), Some(items)) = (schema["maxItems"].as_u64(), value.as_array())
        && items.len() as u64 > max
    {
        out.push(Refusal::Keyword(format!("{path}: more than {max} items")));
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let source = rule["rule"].as_str().unwrap();
        match run_rule(source, value) {
            Ok(true) => {}
            Ok(false) => out.push(Refusal::Rule(format!("{path}: {}", rule["message"]))),
            Err(e) => panic!("{path}: rule {source} fails to evaluate: {e}"),
        }
    }
    match value {
        Value::Object(fields) => {
            for key in schema["required"].as_array().into_iter().flatten() {
                if !fields.contains_key(key.as_str().unwrap()) {
                    out.push(Refusal::Keyword(format!("{path}.{key}: required")));
                }
            }
            for (key, v) in fields {
                let child = format!("{path}.{key}");
                if let Some(s) = schema["properties"].get(key) {
                    refusals(s, v, &child, out);
                } else if schema["additionalProperties"].is_object() {
                    refusals(&schema["additionalProperties"], v, &child, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refusals(&schema["items"], v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// What the schema and the webhook make of a spec.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// Both admit it.
    Valid,
    /// Both refuse it; the schema by a keyword, on every apiserver.
    Keyword,
    /// Both refuse it; the schema by a validation rule (1.25+) and by nothing else.
    Rule,
    /// Only the webhook refuses it.
    WebhookOnly,
}

/// The verdict on `spec` of `schema` and of the webhook (`webhook_ok`).
fn verdict(schema: &Value, spec: &Value, webhook_ok: bool) -> Verdict {
    let mut out = Vec::new();
    refusals(schema, spec, "spec", &mut out);
    let keyword = out.iter().any(|r| matches!(r, Refusal::Keyword(_)));
    assert!(
        out.is_empty() || !webhook_ok,
        "the schema refuses a spec the webhook admits: {spec}: {out:?}"
    );
    match (webhook_ok, out.is_empty(), keyword) {
        (true, _, _) => Verdict::Valid,
        (false, true, _) => Verdict::WebhookOnly,
        (false, false, true) => Verdict::Keyword,
        (false, false, false) => Verdict::Rule,
    }
}

/// The KarmadaQuota webhook's verdict on `spec`.
fn quota_ok(spec: &Value) -> bool {
    let spec: KarmadaQuotaSpec = serde_json::from_value(spec.clone()).unwrap();
    validate_spec(&spec).is_ok()
}

/// The KarmadaClusterQuota webhook's verdict on `spec`.
fn cluster_ok(spec: &Value) -> bool {
    let q: KarmadaClusterQuota = serde_json::from_value(json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaClusterQuota",
        "metadata": {"name": "business-a"},
        "spec": spec
    }))
    .unwrap();
    validate_cluster_spec(&q).is_ok()
}

/// A KarmadaQuota spec with one scope requirement.
fn scoped(requirement: Value) -> Value {
    json!({"hard": {"requests.cpu": "1"}, "scopeSelector": {"matchExpressions": [requirement]}})
}

#[test]
fn the_quota_schema_refuses_what_the_webhook_refuses_where_a_schema_can_say_it() {
    use Verdict::*;
    let pc = |operator: &str, values: Option<Value>| {
        let mut r = json!({"scopeName": "PriorityClass", "operator": operator});
        if let Some(v) = values {
            r["values"] = v;
        }
        scoped(r)
    };
    let cases = [
        // The webhook's own cases (tests/router.rs, core's scope and quota tests).
        (
            "the example quota",
            json!({"hard": {"requests.cpu": "100", "pods": "500"}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": ["batch"]}]}}),
            Valid,
        ),
        ("operator Within", pc("Within", Some(json!(["a"]))), Keyword),
        ("In without values", pc("In", None), Rule),
        ("NotIn with no values", pc("NotIn", Some(json!([]))), Rule),
        (
            "Exists with values",
            pc("Exists", Some(json!(["high"]))),
            Rule,
        ),
        (
            "DoesNotExist with values",
            pc("DoesNotExist", Some(json!(["high"]))),
            Rule,
        ),
        (
            "scope Terminating",
            scoped(json!({"scopeName": "Terminating", "operator": "Exists"})),
            Keyword,
        ),
        ("an empty class name", pc("In", Some(json!([""]))), Keyword),
        ("Exists", pc("Exists", None), Valid),
        (
            "DoesNotExist with an empty list",
            pc("DoesNotExist", Some(json!([]))),
            Valid,
        ),
        (
            "In two classes",
            pc("In", Some(json!(["high", "low"]))),
            Valid,
        ),
        (
            "admission Queue, StrictFIFO",
            json!({"hard": {"pods": "5"}, "admission": {"mode": "Queue", "order": "StrictFIFO"}}),
            Valid,
        ),
        (
            "admission mode Sometimes",
            json!({"hard": {"pods": "5"}, "admission": {"mode": "Sometimes"}}),
            Keyword,
        ),
        (
            "admission order LIFO",
            json!({"hard": {"pods": "5"}, "admission": {"order": "LIFO"}}),
            Keyword,
        ),
        (
            "observedLimit Maybe",
            json!({"hard": {"pods": "5"}, "observedLimit": "Maybe"}),
            Keyword,
        ),
        (
            "unaccountedWorkloads Never",
            json!({"hard": {"pods": "5"}, "unaccountedWorkloads": "Never"}),
            Keyword,
        ),
        (
            "drainingReplicas Twice",
            json!({"hard": {"pods": "5"}, "drainingReplicas": "Twice"}),
            Keyword,
        ),
        // Beyond a schema: resource names and quantities.
        (
            "a negative quantity",
            json!({"hard": {"requests.cpu": "-1"}}),
            WebhookOnly,
        ),
        (
            "limits.cpu",
            json!({"hard": {"limits.cpu": "4"}}),
            WebhookOnly,
        ),
        (
            "a bare extended resource",
            json!({"hard": {"nvidia.com/gpu": "8"}}),
            WebhookOnly,
        ),
    ];
    let schema = spec_schema(&KarmadaQuota::crd());
    for (what, spec, want) in cases {
        assert_eq!(
            verdict(&schema, &spec, quota_ok(&spec)),
            want,
            "{what}: {spec}"
        );
    }
}

#[test]
fn the_cluster_quota_schema_refuses_what_the_webhook_refuses_where_a_schema_can_say_it() {
    use Verdict::*;
    let selecting =
        |selector: Value| json!({"namespaceSelector": selector, "hard": {"requests.cpu": "50"}});
    let expression = |operator: &str, values: Option<Value>| {
        let mut r = json!({"key": "env", "operator": operator});
        if let Some(v) = values {
            r["values"] = v;
        }
        selecting(json!({"matchExpressions": [r]}))
    };
    let cases = [
        // The webhook's own cases (tests/cluster.rs, core's selection tests).
        (
            "matchLabels business=a",
            selecting(json!({"matchLabels": {"business": "a"}})),
            Valid,
        ),
        (
            "no selector",
            json!({"hard": {"requests.cpu": "50"}}),
            Keyword,
        ),
        ("an empty selector", selecting(json!({})), Rule),
        (
            "empty matchLabels and matchExpressions",
            selecting(json!({"matchLabels": {}, "matchExpressions": []})),
            Rule,
        ),
        ("In without values", expression("In", None), Rule),
        (
            "NotIn with no values",
            expression("NotIn", Some(json!([]))),
            Rule,
        ),
        (
            "Exists with values",
            expression("Exists", Some(json!(["x"]))),
            Rule,
        ),
        ("operator Gt", expression("Gt", None), Keyword),
        (
            "In two values",
            expression("In", Some(json!(["a", "b"]))),
            Valid,
        ),
        ("DoesNotExist", expression("DoesNotExist", None), Valid),
        // The KarmadaQuota fields sit at the same paths.
        (
            "scope In without values",
            json!({"namespaceSelector": {"matchLabels": {"business": "a"}}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]}}),
            Rule,
        ),
        // Beyond a schema's rules: label syntax.
        (
            "a bad label key",
            selecting(json!({"matchLabels": {"bad key!": "a"}})),
            WebhookOnly,
        ),
        (
            "a bad label value",
            selecting(json!({"matchLabels": {"business": "-x"}})),
            WebhookOnly,
        ),
        (
            "a bad expression key",
            selecting(json!({"matchExpressions": [{"key": "Upper.Case/x", "operator": "Exists"}]})),
            WebhookOnly,
        ),
    ];
    let schema = spec_schema(&KarmadaClusterQuota::crd());
    for (what, spec, want) in cases {
        assert_eq!(
            verdict(&schema, &spec, cluster_ok(&spec)),
            want,
            "{what}: {spec}"
        );
    }
}

/// A requirement of `fields` (scopeName/key, operator) and `values` (`None`: absent).
fn requirement(fields: Value, values: Option<Vec<&str>>) -> Value {
    let mut r = fields;
    if let Some(v) = values {
        r["values"] = json!(v);
    }
    r
}

/// Values a requirement may carry: absent, empty, one, two, or with an empty string.
fn values() -> impl Strategy<Value = Option<Vec<&'static str>>> {
    proptest::option::of(prop::sample::select(vec![
        vec![],
        vec!["a"],
        vec!["a", "b"],
        vec!["a", ""],
    ]))
}

fn operator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist", "Gt"])
}

#[test]
fn on_random_selectors_the_schema_and_the_webhook_agree() {
    let quota = spec_schema(&KarmadaQuota::crd());
    let cluster = spec_schema(&KarmadaClusterQuota::crd());
    let scope = prop::collection::vec(
        (
            prop::sample::select(vec!["PriorityClass", "Namespace"]),
            operator(),
            values(),
        )
            .prop_map(|(scope, op, v)| requirement(json!({"scopeName": scope, "operator": op}), v)),
        0..3,
    );
    // Label keys and values are valid here: their syntax is the webhook's alone.
    let expressions = prop::collection::vec(
        (operator(), values()).prop_map(|(op, v)| {
            let v = v.map(|v| v.into_iter().filter(|s| !s.is_empty()).collect());
            requirement(json!({"key": "env", "operator": op}), v)
        }),
        0..3,
    );
    let labels = prop::sample::select(vec![json!({}), json!({"business": "a"})]);
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(scope, expressions, labels), |(scope, exprs, labels)| {
            let spec = json!({"hard": {"pods": "5"}, "scopeSelector": {"matchExpressions": scope}});
            let v = verdict(&quota, &spec, quota_ok(&spec));
            prop_assert_ne!(v, Verdict::WebhookOnly, "{}", spec);
            let mut spec = spec;
            spec["namespaceSelector"] = json!({"matchLabels": labels, "matchExpressions": exprs});
            let v = verdict(&cluster, &spec, cluster_ok(&spec));
            prop_assert_ne!(v, Verdict::WebhookOnly, "{}", spec);
            Ok(())
        })
        .unwrap();
}
