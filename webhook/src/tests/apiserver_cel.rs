//! A CEL engine (the `cel` crate) standing in for the apiserver's: the chart's
//! matchConditions (evaluated by kube-apiserver 1.28+; `matching`) and the CRDs'
//! x-kubernetes-validations rules (1.25+; `crd`) are run here against the webhook's own
//! answers, with no such apiserver at hand (docs/decisions/0003-apiserver-versions.md).
//!
//! JSON converts the way the apiserver hands an unstructured object to CEL: objects are
//! maps (`has()` and `in` tell an absent field), integers are `int`, other numbers
//! `double`, `null` is `null`. An expression that does not yield a bool is an error, as
//! it is for the apiserver.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

mod crd;
mod matching;
mod replay;

/// `v` as the CEL value the apiserver would bind.
pub fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(f)) => cel::Value::Float(f),
            (None, None) => cel::Value::Null,
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<String, cel::Value> =
                fields.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(map)
        }
    }
}

/// The x-kubernetes-validations rule `rule` evaluated with `self` bound to `value`: its
/// bool, or why it has none (it does not parse, it fails, it yields another type).
pub fn run_rule(rule: &str, value: &Value) -> Result<bool, String> {
    let program = cel::Program::compile(rule).map_err(|e| format!("{e}"))?;
    run(&program, &[("self", value)])
}

/// Kubernetes' `<list>.sum()` (its CEL list library, in every environment the apiserver
/// evaluates matchConditions in): the sum of a list of ints as an int, of doubles as a
/// double, 0 for an empty list; any other element, or an int sum past 64 bits, is an error.
fn sum(
    cel::extractors::This(list): cel::extractors::This<Arc<Vec<cel::Value>>>,
) -> Result<cel::Value, cel::ExecutionError> {
    let fail = |why: String| cel::ExecutionError::function_error("sum", why);
    match list.first() {
        None | Some(cel::Value::Int(_)) => list
            .iter()
            .try_fold(0i64, |acc, v| match v {
                cel::Value::Int(i) => acc.checked_add(*i).ok_or_else(|| fail("overflow".into())),
                other => Err(fail(format!(
                    "no such overload: an int list holds {other:?}"
                ))),
            })
            .map(cel::Value::Int),
        Some(cel::Value::Float(_)) => list
            .iter()
            .try_fold(0f64, |acc, v| match v {
                cel::Value::Float(f) => Ok(acc + f),
                other => Err(fail(format!(
                    "no such overload: a double list holds {other:?}"
                ))),
            })
            .map(cel::Value::Float),
        Some(other) => Err(fail(format!("no such overload for a list of {other:?}"))),
    }
}

/// `program` run with `vars` bound: its bool, or why it has none.
fn run(program: &cel::Program, vars: &[(&str, &Value)]) -> Result<bool, String> {
    let mut ctx = cel::Context::default();
    ctx.add_function("sum", sum)
        .expect("the standard CEL functions have no `sum`");
    for (name, value) in vars {
        ctx.add_variable_from_value(*name, to_cel(value));
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("not a bool: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The repository's root (the webhook crate's parent).
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the webhook crate sits in the workspace")
        .to_path_buf()
}

/// The chart's default values (`charts/karmada-quota/values.yaml`).
pub fn chart_values() -> Value {
    let path = repo_root().join("charts/karmada-quota/values.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The matchConditions of the chart's ResourceBinding webhook, parsed once.
pub struct MatchConditions {
    /// (name, expression, program).
    conditions: Vec<(String, String, cel::Program)>,
}

impl MatchConditions {
    /// The conditions `values.yaml` gives the webhook at `path`.
    pub fn of(path: &str) -> Self {
        let values = chart_values();
        let hook = values["webhook"]["validatingWebhooks"]
            .as_array()
            .and_then(|hooks| hooks.iter().find(|h| h["path"] == path))
            .unwrap_or_else(|| panic!("values.yaml registers no webhook at {path}"))
            .clone();
        let conditions: Vec<(String, String, cel::Program)> = hook["matchConditions"]
            .as_array()
            .unwrap_or_else(|| panic!("the webhook at {path} has no matchConditions"))
            .iter()
            .map(|c| {
                let name = c["name"].as_str().unwrap().to_owned();
                let expression = c["expression"].as_str().unwrap().to_owned();
                let program = cel::Program::compile(&expression)
                    .unwrap_or_else(|e| panic!("matchCondition {name} does not parse: {e}"));
                (name, expression, program)
            })
            .collect();
        assert!(!conditions.is_empty());
        Self { conditions }
    }

    /// The ResourceBinding webhook's.
    pub fn binding() -> Self {
        Self::of(crate::admission::RESOURCEBINDING_PATH)
    }

    /// Whether the apiserver sends the AdmissionReview `review`: every condition holds,
    /// evaluated over its request's `object`, `oldObject` and the request itself. An
    /// error is returned, not taken for either (under failurePolicy Fail the apiserver
    /// refuses the request).
    pub fn sent(&self, review: &Value) -> Result<bool, String> {
        let request = &review["request"];
        let vars = [
            ("object", &request["object"]),
            ("oldObject", &request["oldObject"]),
            ("request", request),
        ];
        let mut all = true;
        for (name, expression, program) in &self.conditions {
            all &= run(program, &vars)
                .map_err(|e| format!("matchCondition {name}: {e}\n{expression}"))?;
        }
        Ok(all)
    }
}
