//! What a script returned, read into core's types with the checks Karmada's conversion
//! makes (`GetReplicas`: a number and a table or nil; `GetComponents`: a list or nil of
//! `{name, replicas, replicaRequirements}`); `Err((field, message))` names the field.

use karmada_quota_core::binding::{Component, ComponentReplicaRequirements, ReplicaRequirements};
use karmada_quota_core::{Quantity, ResourceList};
use mlua::Value as LuaValue;
use serde_json::{Map, Value};

use crate::convert::{from_lua, join};

type Fail = (String, String);

/// `GetReplicas`' `replica, requirement`.
pub fn replicas(
    replica: &LuaValue,
    requirement: &LuaValue,
) -> Result<(i32, Option<ReplicaRequirements>), Fail> {
    let n = match replica {
        LuaValue::Integer(i) => i32::try_from(*i).ok(),
        #[allow(clippy::cast_possible_truncation)]
        LuaValue::Number(f) if f.is_finite() && f.trunc().abs() <= f64::from(i32::MAX) => {
            // Karmada: int32(the number), fractions truncated.
            Some(f.trunc() as i32)
        }
        LuaValue::Number(_) => None,
        other => {
            return Err((
                "replica".to_owned(),
                format!("expected a number, got {}", other.type_name()),
            ));
        }
    };
    let n = match n {
        Some(n) if n >= 0 => n,
        _ => {
            return Err((
                "replica".to_owned(),
                "not a replica count (0 to 2147483647)".to_owned(),
            ));
        }
    };
    let requirements = match requirement {
        LuaValue::Nil => None,
        LuaValue::Table(_) => {
            let json = from_lua(requirement, "requirement", 0)?;
            let map = object(&json, "requirement")?;
            let (resource_request, priority_class_name) = request_and_class(&map, "requirement")?;
            Some(ReplicaRequirements {
                resource_request,
                priority_class_name,
                namespace: string(&map, "requirement", "namespace")?,
            })
        }
        other => {
            return Err((
                "requirement".to_owned(),
                format!("expected a table or nil, got {}", other.type_name()),
            ));
        }
    };
    Ok((n, requirements))
}

/// `GetComponents`' list.
pub fn components(result: &LuaValue) -> Result<Vec<Component>, Fail> {
    let json = match result {
        LuaValue::Nil => return Ok(Vec::new()),
        LuaValue::Table(_) => from_lua(result, "components", 0)?,
        other => {
            return Err((
                "components".to_owned(),
                format!("expected a list or nil, got {}", other.type_name()),
            ));
        }
    };
    let Value::Array(items) = json else {
        return Err((
            "components".to_owned(),
            "expected a list, got a table with named fields".to_owned(),
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("components[{i}]");
        let map = object(item, &path)?;
        let name = string(&map, &path, "name")?;
        if name.is_empty() {
            return Err((join(&path, "name"), "missing".to_owned()));
        }
        let replicas = match map.get("replicas") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    (
                        join(&path, "replicas"),
                        format!("{v} is not a replica count (a whole number, 0 to 2147483647)"),
                    )
                })?,
        };
        let rr_path = join(&path, "replicaRequirements");
        let replica_requirements = match map.get("replicaRequirements") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let rr = object(v, &rr_path)?;
                let (resource_request, priority_class_name) = request_and_class(&rr, &rr_path)?;
                Some(ComponentReplicaRequirements {
                    resource_request,
                    priority_class_name,
                })
            }
        };
        out.push(Component {
            name,
            replicas,
            replica_requirements,
        });
    }
    Ok(out)
}

/// An object (an empty Lua table reads as an empty list: taken as an empty object).
fn object(v: &Value, path: &str) -> Result<Map<String, Value>, Fail> {
    match v {
        Value::Object(m) => Ok(m.clone()),
        Value::Array(a) if a.is_empty() => Ok(Map::new()),
        other => Err((
            path.to_owned(),
            format!("expected a table with named fields, got {}", kind(other)),
        )),
    }
}

fn string(map: &Map<String, Value>, path: &str, key: &str) -> Result<String, Fail> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err((
            join(path, key),
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

/// `resourceRequest` (name → quantity string or number) and `priorityClassName`.
fn request_and_class(map: &Map<String, Value>, path: &str) -> Result<(ResourceList, String), Fail> {
    let rr_path = join(path, "resourceRequest");
    let mut request = ResourceList::new();
    if let Some(v) = map.get("resourceRequest").filter(|v| !v.is_null()) {
        for (name, q) in object(v, &rr_path)? {
            let field = format!("{rr_path}[{name}]");
            let text = match &q {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => return Err((field, format!("expected a quantity, got {}", kind(other)))),
            };
            let q = Quantity::read(&text).map_err(|e| (field.clone(), format!("{text:?}: {e}")))?;
            request.insert(name, q);
        }
    }
    Ok((request, string(map, path, "priorityClassName")?))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}
