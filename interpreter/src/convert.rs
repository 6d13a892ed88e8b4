//! Values across the Lua boundary: a template (JSON) into Lua tables, and what a script
//! returns back into JSON, as Karmada's gopher-lua bridge does (JSON `null` is `nil`; a
//! table with keys 1..n is a list, one with string keys an object, an empty one either).

use mlua::{Lua, Value as LuaValue};
use serde_json::{Map, Number, Value};

/// Deepest nesting read back from Lua: a table that contains itself stops here.
pub const MAX_DEPTH: usize = 64;

/// `value` as a Lua value (`null` → `nil`).
pub fn to_lua(lua: &Lua, value: &Value) -> mlua::Result<LuaValue> {
    Ok(match value {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => LuaValue::Integer(i),
            None => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, v) in map {
                if !v.is_null() {
                    t.raw_set(k.as_str(), to_lua(lua, v)?)?;
                }
            }
            LuaValue::Table(t)
        }
    })
}

/// A Lua value as JSON; `Err((path, message))` for what JSON cannot hold (functions,
/// mixed or sparse keys, NaN, non-UTF-8 strings, nesting deeper than [`MAX_DEPTH`]).
/// An empty table is an empty list (the reader takes it for an empty object too).
pub fn from_lua(value: &LuaValue, path: &str, depth: usize) -> Result<Value, (String, String)> {
    let err = |m: &str| Err((path.to_owned(), m.to_owned()));
    match value {
        LuaValue::Nil => Ok(Value::Null),
        LuaValue::Boolean(b) => Ok(Value::Bool(*b)),
        LuaValue::Integer(i) => Ok(Value::from(*i)),
        LuaValue::Number(n) => {
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                // Whole numbers read as integers, as gopher-json prints them.
                #[allow(clippy::cast_possible_truncation)]
                return Ok(Value::from(*n as i64));
            }
            Number::from_f64(*n)
                .map_or_else(|| err("not a finite number"), |n| Ok(Value::Number(n)))
        }
        LuaValue::String(s) => match s.to_str() {
            Ok(s) => Ok(Value::String(s.to_owned())),
            Err(_) => err("a string that is not UTF-8"),
        },
        LuaValue::Table(t) => {
            if depth >= MAX_DEPTH {
                return err(&format!("nested deeper than {MAX_DEPTH} tables (a cycle?)"));
            }
            let mut strings = Map::new();
            let mut indexed: Vec<(i64, Value)> = Vec::new();
            for pair in t.pairs::<LuaValue, LuaValue>() {
                let (k, v) = pair.map_err(|e| (path.to_owned(), e.to_string()))?;
                match k {
                    LuaValue::String(k) => {
                        let key = k
                            .to_str()
                            .map_err(|_| (path.to_owned(), "a key that is not UTF-8".to_owned()))?
                            .to_owned();
                        let child = from_lua(&v, &join(path, &key), depth + 1)?;
                        strings.insert(key, child);
                    }
                    LuaValue::Integer(i) => {
                        indexed.push((i, from_lua(&v, &format!("{path}[{i}]"), depth + 1)?));
                    }
                    #[allow(clippy::cast_possible_truncation)]
                    LuaValue::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
                        let i = n as i64;
                        indexed.push((i, from_lua(&v, &format!("{path}[{i}]"), depth + 1)?));
                    }
                    other => {
                        return err(&format!(
                            "a key of type {} (JSON keys are strings)",
                            other.type_name()
                        ));
                    }
                }
            }
            match (strings.is_empty(), indexed.is_empty()) {
                (true, true) => Ok(Value::Array(Vec::new())),
                (false, true) => Ok(Value::Object(strings)),
                (true, false) => {
                    indexed.sort_by_key(|(i, _)| *i);
                    let n = indexed.len();
                    if indexed
                        .iter()
                        .enumerate()
                        .any(|(pos, (i, _))| usize::try_from(*i).ok() != Some(pos + 1))
                    {
                        return err(&format!("a list whose keys are not 1..{n}"));
                    }
                    Ok(Value::Array(indexed.into_iter().map(|(_, v)| v).collect()))
                }
                (false, false) => err("a table with both list items and named fields"),
            }
        }
        other => err(&format!("a {} (not a JSON value)", other.type_name())),
    }
}

/// `a.b` (or `b` at the root).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}
