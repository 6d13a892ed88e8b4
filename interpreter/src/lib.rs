//! Prices a kind through the cluster's ResourceInterpreterCustomization Lua: runs a
//! customization's `GetReplicas` (`replicaResource`) or `GetComponents`
//! (`componentResource`) over a resource template in a sandboxed Lua 5.1 (Karmada runs
//! gopher-lua, a Lua 5.1) and returns core's [`Interpreted`] for
//! `karmada_quota_core::template::Template::interpreted`.
//!
//! ```text
//!  RIC objects ─► Customizations (by name; first script per target wins)
//!  template (JSON) ─► Sandbox (limits, kube lib) ─► GetComponents | GetReplicas
//!        ─► read the returned shape ─► Interpreted { replicas, requirements, components }
//! ```
//!
//! `componentResource` is used when a customization gives one (as Karmada does with
//! `MultiplePodTemplatesScheduling` on), else `replicaResource`. Every failure is a value
//! naming the customization, the function and the field; nothing here panics on a script.

pub mod convert;
pub mod customization;
pub mod kube;
pub mod read;
pub mod sandbox;

pub use customization::{Customization, Customizations, Script, Scripts, is_customization};
pub use karmada_quota_core::template::Interpreted;
pub use sandbox::Limits;

use mlua::MultiValue;
use serde_json::Value;

/// Why a customization could not price a template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ResourceInterpreterCustomization {customization}: {function}: {}{message}", field_prefix(.field))]
pub struct InterpretError {
    /// The customization's name.
    pub customization: String,
    /// `GetReplicas` or `GetComponents`.
    pub function: &'static str,
    /// The field of the returned value that is wrong (empty when the script failed).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl Customizations {
    /// Price `object` (a template as JSON) when a customization targets its apiVersion and
    /// kind; `None` when none does.
    pub fn interpret(
        &self,
        object: &Value,
        limits: Limits,
    ) -> Option<Result<Interpreted, InterpretError>> {
        let text = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
        let scripts = self.scripts(text("apiVersion"), text("kind"))?;
        Some(interpret(scripts, object, limits))
    }
}

/// Run the customization's pricing function over `object`: `GetComponents` when it has
/// one, else `GetReplicas`.
pub fn interpret(
    scripts: &Scripts,
    object: &Value,
    limits: Limits,
) -> Result<Interpreted, InterpretError> {
    let (script, function, chunk) = match (&scripts.components, &scripts.replicas) {
        (Some(s), _) => (s, "GetComponents", "componentResource.luaScript"),
        (None, Some(s)) => (s, "GetReplicas", "replicaResource.luaScript"),
        (None, None) => {
            return Err(InterpretError {
                customization: String::new(),
                function: "GetReplicas",
                field: String::new(),
                message: "no script".to_owned(),
            });
        }
    };
    let err = |field: String, message: String| InterpretError {
        customization: script.customization.clone(),
        function,
        field,
        message,
    };
    let sandbox = sandbox::Sandbox::new(limits)
        .map_err(|e| err(String::new(), format!("starting Lua: {e}")))?;
    let arg = convert::to_lua(&sandbox.lua, object).map_err(|e| {
        err(
            String::new(),
            format!("the template does not fit in Lua: {e}"),
        )
    })?;
    let results = sandbox
        .call(
            &script.source,
            chunk,
            function,
            MultiValue::from_iter([arg]),
        )
        .map_err(|m| err(String::new(), m))?;
    let mut results = results.into_iter();
    let first = results.next().unwrap_or(mlua::Value::Nil);
    let read = if function == "GetComponents" {
        read::components(&first).map(|components| Interpreted {
            components,
            ..Default::default()
        })
    } else {
        let second = results.next().unwrap_or(mlua::Value::Nil);
        read::replicas(&first, &second).map(|(replicas, replica_requirements)| Interpreted {
            replicas,
            replica_requirements,
            ..Default::default()
        })
    };
    read.map_err(|(field, message)| err(field, message))
}
