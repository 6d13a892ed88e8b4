//! What Karmada would make of a resource template and a PropagationPolicy, so the quota
//! engine (`karmada-quota-core`) can price it before Karmada does.
//!
//! ```text
//!  template (JSON/YAML) ─► template::Template::binding   (Karmada's default interpreter:
//!        │                  pod: a replica's requests;    one pod template per kind,
//!        │                  workload_kinds: components)   components of multi-template kinds)
//!        │  a kind a ResourceInterpreterCustomization targets:
//!        │  Customizations::interpret (Lua) ─► Interpreted ─► Template::interpreted
//!        ▼
//!  ResourceBindingSpec ◄── policy::Policy::binding_for (selection; the policy's placement,
//!        │                   clusters::candidate_clusters among the known clusters)
//!        ▼
//!  core's usage::BindingCharge (the same price as the webhook's)
//!  whatif: templates × policies against quotas — a dry run of core's decision
//! ```
//!
//! The Lua part runs a customization's `GetReplicas` (`replicaResource`) or
//! `GetComponents` (`componentResource`) over a template in a sandboxed Lua 5.1 (Karmada
//! runs gopher-lua, a Lua 5.1):
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
//!
//! A binding's own placement (`spec.placement`) and which kinds run pods a member counts
//! stay in core: the charge of a binding reads them.

pub mod clusters;
pub mod convert;
pub mod customization;
pub mod kube;
pub mod patterns;
pub mod pod;
pub mod policy;
pub mod read;
pub mod sandbox;
pub mod template;
pub mod whatif;
pub mod workload_kinds;

#[cfg(test)]
mod testutil;

pub use customization::{Customization, Customizations, Script, Scripts, is_customization};
pub use sandbox::Limits;
pub use template::Interpreted;

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
