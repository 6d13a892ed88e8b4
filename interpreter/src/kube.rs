//! The `kube` library a customization gets from `require("kube")`: the pricing helpers of
//! Karmada's Lua VM, implemented natively on karmada-quota-core's rules.
//!
//! | function | what it returns |
//! |---|---|
//! | `accuratePodRequirements(podTemplate)` | `{resourceRequest = {cpu = "500m", …}, nodeClaim = {…}}` for a pod template (`metadata` + `spec`), by the per-replica rule (`pod::pod_template_request`, Karmada's `AddPodTemplateRequest`); `nil` when it requests nothing and claims no node |
//! | `resourceAdd(q1, q2, …)` | the sum of quantity strings (`nil` counts 0) as a quantity string |
//! | `getResourceQuantity(q)` | a quantity string as a number (`"500m"` → 0.5) |
//!
//! `priorityClassName` is left out, as Karmada does without its `ResourceQuotaEstimate`
//! gate. `getPodDependencies` (dependencies, not pricing) is not offered.

use karmada_quota_core::Quantity;
use mlua::{Lua, Table, Value as LuaValue, Variadic};
use serde_json::{Map, Value};

use crate::convert::{from_lua, to_lua};
use crate::pod::{PodSpec, pod_template_request};

/// The `kube` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let kube = lua.create_table()?;
    kube.set(
        "accuratePodRequirements",
        lua.create_function(|lua, args: Variadic<LuaValue>| {
            let [template] = args.as_slice() else {
                return Err(fail(
                    "accuratePodRequirements",
                    "takes one argument, a pod template",
                ));
            };
            let LuaValue::Table(_) = template else {
                return Err(fail(
                    "accuratePodRequirements",
                    &format!("expects a pod template table, got {}", template.type_name()),
                ));
            };
            let json = from_lua(template, "podTemplate", 0)
                .map_err(|(f, m)| fail("accuratePodRequirements", &format!("{f}: {m}")))?;
            match requirements(&json) {
                Ok(Some(r)) => to_lua(lua, &r),
                Ok(None) => Ok(LuaValue::Nil),
                Err(e) => Err(fail("accuratePodRequirements", &e)),
            }
        })?,
    )?;
    kube.set(
        "resourceAdd",
        lua.create_function(|_, args: Variadic<LuaValue>| {
            let mut sum = Quantity::default();
            for (i, a) in args.iter().enumerate() {
                if let Some(q) = quantity_arg("resourceAdd", i, a)? {
                    // Saturates past ≈ 1.7 × 10²⁹ units, as every sum of quantities here.
                    sum = sum.saturating_add(q);
                }
            }
            Ok(sum.to_string())
        })?,
    )?;
    kube.set(
        "getResourceQuantity",
        lua.create_function(|_, args: Variadic<LuaValue>| {
            let [a] = args.as_slice() else {
                return Err(fail("getResourceQuantity", "takes one argument"));
            };
            let q = quantity_arg("getResourceQuantity", 0, a)?.unwrap_or_default();
            if q.is_negative() {
                return Err(fail("getResourceQuantity", &format!("{q} is negative")));
            }
            #[allow(clippy::cast_precision_loss)]
            Ok(q.nanos() as f64 / 1e9)
        })?,
    )?;
    Ok(kube)
}

fn fail(function: &str, message: &str) -> mlua::Error {
    mlua::Error::runtime(format!("kube.{function}: {message}"))
}

/// Argument `i` (0-based) as a quantity: a string, or `nil` for none.
fn quantity_arg(function: &str, i: usize, a: &LuaValue) -> mlua::Result<Option<Quantity>> {
    match a {
        LuaValue::Nil => Ok(None),
        LuaValue::String(s) => {
            let text = s.to_string_lossy();
            Quantity::read(&text)
                .map(Some)
                .map_err(|e| fail(function, &format!("argument {}: {text:?}: {e}", i + 1)))
        }
        other => Err(fail(
            function,
            &format!(
                "argument {}: expects a quantity string, got {}",
                i + 1,
                other.type_name()
            ),
        )),
    }
}

/// Karmada's `GenerateReplicaRequirements` over a pod template as JSON: `None` when it
/// requests nothing and claims no node; `Err` names the field that does not parse.
pub fn requirements(template: &Value) -> Result<Option<Value>, String> {
    let spec = template.get("spec").cloned().unwrap_or(Value::Null);
    let pod: PodSpec = if spec.is_null() {
        PodSpec::default()
    } else {
        serde_json::from_value(spec.clone()).map_err(|e| format!("podTemplate.spec: {e}"))?
    };
    let request = pod_template_request(&pod)
        .map_err(|(field, message)| format!("podTemplate.spec.{field}: {message}"))?;
    let mut out = Map::new();
    if let Some(claim) = node_claim(&spec) {
        out.insert("nodeClaim".to_owned(), claim);
    }
    if !request.is_empty() {
        let list: Map<String, Value> = request
            .iter()
            .map(|(n, q)| (n.to_owned(), Value::String(q.to_string())))
            .collect();
        out.insert("resourceRequest".to_owned(), Value::Object(list));
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

/// Karmada's node claim: the pod's nodeSelector, tolerations and required node affinity;
/// `None` without any.
fn node_claim(spec: &Value) -> Option<Value> {
    let selector = spec.get("nodeSelector").filter(|v| v.is_object());
    let tolerations = spec
        .get("tolerations")
        .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
    let affinity = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
        .filter(|v| !v.is_null());
    if selector.is_none() && tolerations.is_none() && affinity.is_none() {
        return None;
    }
    let mut claim = Map::new();
    for (name, v) in [
        ("nodeSelector", selector),
        ("tolerations", tolerations),
        ("hardNodeAffinity", affinity),
    ] {
        if let Some(v) = v.filter(|v| v.as_object().is_none_or(|o| !o.is_empty())) {
            claim.insert(name.to_owned(), v.clone());
        }
    }
    Some(Value::Object(claim))
}
