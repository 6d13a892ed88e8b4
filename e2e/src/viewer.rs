//! Dashboard viewers for the auth tests: a ServiceAccount per viewer, RBAC that lets it
//! `list karmadaquotas` in chosen namespaces (or nowhere), and a bearer token of it from
//! the TokenRequest API (no controller-manager needed), which a TokenReview accepts.
//!
//! ```text
//!  Viewer::create(client, ns, "team-a", &[ns_a])
//!    ServiceAccount ns/team-a
//!    Role kq-viewer + RoleBinding kq-viewer-team-a in each ns_a: list/get/watch karmadaquotas
//!    TokenRequest ─► token  (user system:serviceaccount:ns:team-a)
//! ```

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::FIELD_MANAGER;

/// The Role each viewer's RoleBindings point at.
pub const VIEWER_ROLE: &str = "kq-viewer";

/// A ServiceAccount with a token.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// `system:serviceaccount:<ns>:<name>`.
    pub user: String,
    /// Its bearer token.
    pub token: String,
}

impl Viewer {
    /// ServiceAccount `ns/name`, allowed to list KarmadaQuotas in each of `grants` (none:
    /// nowhere), and a one-hour token of it.
    pub async fn create(client: &Client, ns: &str, name: &str, grants: &[&str]) -> Result<Viewer> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .patch(
                name,
                &pp,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": ns}})),
            )
            .await
            .with_context(|| format!("ServiceAccount {ns}/{name}"))?;
        for g in grants {
            Api::<Role>::namespaced(client.clone(), g)
                .patch(
                    VIEWER_ROLE,
                    &pp,
                    &Patch::Apply(json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": VIEWER_ROLE, "namespace": g},
                        "rules": [{"apiGroups": ["quota.karmada.io"],
                                   "resources": ["karmadaquotas"],
                                   "verbs": ["get", "list", "watch"]}]})),
                )
                .await
                .with_context(|| format!("Role {g}/{VIEWER_ROLE}"))?;
            let binding = format!("{VIEWER_ROLE}-{ns}-{name}");
            Api::<RoleBinding>::namespaced(client.clone(), g)
                .patch(
                    &binding,
                    &pp,
                    &Patch::Apply(json!({
                        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                        "metadata": {"name": binding, "namespace": g},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                    "name": VIEWER_ROLE},
                        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]})),
                )
                .await
                .with_context(|| format!("RoleBinding {g}/{binding}"))?;
        }
        let tr = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let answer = Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .create_token_request(name, &PostParams::default(), &tr)
            .await
            .with_context(|| format!("TokenRequest for ServiceAccount {ns}/{name}"))?;
        let token = answer
            .status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("TokenRequest for {ns}/{name} returned no token"))?;
        Ok(Viewer {
            user: format!("system:serviceaccount:{ns}:{name}"),
            token,
        })
    }

    /// The `Authorization` header of this viewer.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }
}
