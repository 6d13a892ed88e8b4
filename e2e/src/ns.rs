//! A fresh namespace per test.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use crate::TEST_LABEL;

/// A namespace created for one test, named `e2e-<test>-<random>` by the apiserver
/// (`generateName`) and labelled `e2e.karmada-quota/test=<test>`.
///
/// Never waited on when deleted: without a controller-manager a namespace stays
/// Terminating forever, so tests never reuse one.
#[derive(Debug, Clone)]
pub struct TestNs {
    name: String,
}

impl TestNs {
    /// Creates the namespace for the test named `test`.
    pub async fn new(client: &Client, test: &str) -> Result<TestNs> {
        let label = label_value(test);
        let ns = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("e2e-{}-", dns_label_prefix(&label))),
                labels: Some([(TEST_LABEL.to_owned(), label)].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating the namespace of test {test}"))?;
        Ok(TestNs {
            name: created.name_any(),
        })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks for deletion and returns at once (on the local control plane the namespace
    /// then stays Terminating; on a real cluster it goes away).
    pub async fn delete(self, client: &Client) -> Result<()> {
        Api::<Namespace>::all(client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting namespace {}", self.name))?;
        Ok(())
    }
}

impl std::fmt::Display for TestNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// `s` (a test's name, an owner) as a label value: at most 63 of `[A-Za-z0-9._-]`,
/// alphanumeric at both ends; `test` when nothing of `s` is left.
pub(crate) fn label_value(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "test".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// A prefix for a namespace name: lowercase `[a-z0-9-]`, short enough that `e2e-`, it, `-`
/// and the apiserver's 5 random characters stay within 63.
fn dns_label_prefix(label: &str) -> String {
    let mapped: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    mapped.trim_matches('-').to_owned()
}

/// Creates namespace `name` unless it exists (in any cluster: control plane or member).
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_valid() {
        assert_eq!(
            label_value("harness::crd_round_trip"),
            "harness--crd_round_trip"
        );
        assert_eq!(label_value("__x__"), "x");
        assert_eq!(label_value("::"), "test");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }

    #[test]
    fn namespace_prefixes_are_dns_labels() {
        assert_eq!(dns_label_prefix("Harness--CRD_x"), "harness--crd-x");
        assert!(dns_label_prefix(&"a".repeat(80)).len() <= 40);
    }
}
