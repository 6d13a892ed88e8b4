//! ResourceInterpreterCustomization objects (`config.karmada.io/v1alpha1`, cluster-scoped)
//! and which script prices a kind, by Karmada's rule: customizations sorted by name, per
//! target (`spec.target.apiVersion` + `kind`) and per operation the first non-empty
//! `luaScript` wins.

use std::collections::BTreeMap;

use serde_json::Value;

/// The API group, kind and plural of the customizations.
pub const GROUP: &str = "config.karmada.io";
/// Kind.
pub const KIND: &str = "ResourceInterpreterCustomization";
/// Resource (plural).
pub const PLURAL: &str = "resourceinterpretercustomizations";

/// One customization: the parts pricing reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Customization {
    /// metadata.name.
    pub name: String,
    /// spec.target.apiVersion.
    pub api_version: String,
    /// spec.target.kind.
    pub kind: String,
    /// spec.customizations.replicaResource.luaScript (`GetReplicas`).
    pub replica_script: String,
    /// spec.customizations.componentResource.luaScript (`GetComponents`).
    pub component_script: String,
}

/// Whether `doc` is a ResourceInterpreterCustomization.
pub fn is_customization(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some(KIND)
        && doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.split_once('/').is_some_and(|(g, _)| g == GROUP))
}

impl Customization {
    /// Read one object; `Err` says which field is missing or wrong.
    pub fn from_object(doc: &Value) -> Result<Customization, String> {
        let text = |pointer: &str| -> Result<String, String> {
            match doc.pointer(pointer) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("{}: not a string", &pointer[1..].replace('/', "."))),
            }
        };
        let name = text("/metadata/name")?;
        let c = Customization {
            api_version: text("/spec/target/apiVersion")?,
            kind: text("/spec/target/kind")?,
            replica_script: text("/spec/customizations/replicaResource/luaScript")?,
            component_script: text("/spec/customizations/componentResource/luaScript")?,
            name: name.clone(),
        };
        if c.api_version.is_empty() || c.kind.is_empty() {
            return Err(format!(
                "{KIND} {name}: spec.target needs apiVersion and kind"
            ));
        }
        Ok(c)
    }
}

/// A script and the customization it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// The customization's name (named in every error).
    pub customization: String,
    /// The Lua source.
    pub source: String,
}

/// The scripts that price one target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scripts {
    /// `GetReplicas`.
    pub replicas: Option<Script>,
    /// `GetComponents`.
    pub components: Option<Script>,
}

/// Every customization's pricing scripts, by target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Customizations {
    by_target: BTreeMap<(String, String), Scripts>,
}

impl Customizations {
    /// Merge as Karmada's config manager does: by name, the first non-empty script per
    /// target and operation wins.
    pub fn new(mut list: Vec<Customization>) -> Customizations {
        list.sort_by(|a, b| a.name.cmp(&b.name));
        let mut by_target: BTreeMap<(String, String), Scripts> = BTreeMap::new();
        for c in list {
            let scripts = by_target
                .entry((c.api_version.clone(), c.kind.clone()))
                .or_default();
            let script = |source: &str| {
                (!source.trim().is_empty()).then(|| Script {
                    customization: c.name.clone(),
                    source: source.to_owned(),
                })
            };
            if scripts.replicas.is_none() {
                scripts.replicas = script(&c.replica_script);
            }
            if scripts.components.is_none() {
                scripts.components = script(&c.component_script);
            }
        }
        by_target.retain(|_, s| s.replicas.is_some() || s.components.is_some());
        Customizations { by_target }
    }

    /// The scripts that price `apiVersion`/`kind`, if any customization does.
    pub fn scripts(&self, api_version: &str, kind: &str) -> Option<&Scripts> {
        self.by_target
            .get(&(api_version.to_owned(), kind.to_owned()))
    }

    /// Whether no customization prices anything.
    pub fn is_empty(&self) -> bool {
        self.by_target.is_empty()
    }
}
