//! Faults to inject into the control plane: an API group whose discovery fails.
//!
//! ```text
//!  UnservedApi::register   APIService v1.<group> → Service kq-e2e-nowhere/nothing (absent)
//!       │                  GET /apis/<group>/v1 answers 503: discovery of the group fails
//!       ▼                  (not 404: the group exists, its server does not answer)
//!  UnservedApi::remove     the APIService deleted: the group is simply not served (404)
//! ```
//!
//! Deleted on drop too (on a thread of its own, as the other fixtures), so a failing test
//! leaves no broken group behind for the tests that run after it.

use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use crate::env::cleanup_from_drop;
use crate::try_wait_for;

/// An aggregated API group served by nobody; see the module docs.
#[derive(Debug)]
pub struct UnservedApi {
    group: String,
    armed: bool,
}

fn api_services(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

impl UnservedApi {
    /// Registers `v1.<group>` with a Service that does not exist.
    pub async fn register(client: &Client, group: &str) -> Result<UnservedApi> {
        let name = format!("v1.{group}");
        let obj = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": name},
            "spec": {
                "group": group,
                "version": "v1",
                "service": {"namespace": "kq-e2e-nowhere", "name": "nothing", "port": 443},
                "insecureSkipTLSVerify": true,
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
            },
        });
        // A create, not a server-side apply: kube-apiserver 1.20's aggregator has no field
        // manager for APIServices (an apply makes it panic).
        let obj: DynamicObject = serde_json::from_value(obj)?;
        api_services(client)
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating APIService {name}"))?;
        let api = UnservedApi {
            group: group.to_owned(),
            armed: true,
        };
        // Until the aggregator has taken the group in, its discovery is a plain 404.
        let version = api.api_version();
        try_wait_for(
            &format!("discovery of {version} answering 503"),
            Duration::from_secs(20),
            || async {
                match client.list_api_group_resources(&version).await {
                    Err(kube::Error::Api(s)) if s.code == 503 => Ok(Some(())),
                    Err(kube::Error::Api(_)) => Ok(None),
                    Err(e) => Err(e),
                    Ok(_) => Ok(None),
                }
            },
        )
        .await?;
        Ok(api)
    }

    /// The `apiVersion` of objects of this group (`<group>/v1`).
    pub fn api_version(&self) -> String {
        format!("{}/v1", self.group)
    }

    /// Deletes the APIService: from then on the group is not served at all.
    pub async fn remove(mut self, client: &Client) -> Result<()> {
        self.armed = false;
        delete(client, &self.group).await
    }
}

async fn delete(client: &Client, group: &str) -> Result<()> {
    match api_services(client)
        .delete(&format!("v1.{group}"), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting APIService v1.{group}")),
    }
}

impl Drop for UnservedApi {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let group = self.group.clone();
        cleanup_from_drop("deleting the test's APIService", move |client| async move {
            delete(&client, &group).await
        });
    }
}
