//! What the real apiserver answers the requests of the controller's binding watch
//! (controller/src/cache_list/, docs/decisions/0003-apiserver-versions.md), on the loopback
//! control plane's kube-apiserver 1.20:
//!
//! ```text
//!  GET bindings (no resourceVersion, no limit)      ─► a consistent list, at etcd's R
//!  GET bindings?resourceVersion=0                   ─► the watch cache's list, at C ≤ R
//!  GET bindings?resourceVersion=C&resourceVersionMatch=NotOlderThan
//!                                                   ─► 200, a list at C or later
//!  GET bindings?resourceVersion=R+10⁹&resourceVersionMatch=NotOlderThan
//!                                                   ─► 504 Too large resource version,
//!                                                      after the cache's wait
//!  GET bindings?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan…
//!                                                   ─► 422 (no streaming lists: list)
//! ```
//!
//! The requests are built as the watch builds them (kube's `ListParams` and
//! `WatchParams`); the test's client does not retry a 504, so the answer is the server's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use karmada_quota_crds::ResourceBinding;
use karmada_quota_e2e::Env;
use kube::api::{Api, ListParams, VersionMatch, WatchParams};
use kube::core::Request;

fn step(s: &str) {
    eprintln!("{s}");
}

#[derive(serde::Deserialize)]
struct ListMeta {
    metadata: Meta,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    resource_version: String,
}

fn bounded(url: &str, bound: &str) -> Result<axum::http::Request<Vec<u8>>> {
    let params = ListParams {
        resource_version: Some(bound.to_owned()),
        version_match: Some(VersionMatch::NotOlderThan),
        ..ListParams::default()
    };
    Ok(Request::new(url).list(&params)?)
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn watch_list_protocol() -> Result<()> {
    let env = Env::get().await?;
    // Without kube's retry of 429/503/504 (`Env::client`).
    let client = env.client()?;
    let api: Api<ResourceBinding> = Api::all(client.clone());
    let url = api.resource_url().to_owned();

    // The cache's resourceVersion first, etcd's after it: other tests write to the shared
    // control plane meanwhile, so only that order makes "the cache is not ahead of etcd"
    // a claim that holds.
    let cached: ListMeta = client
        .request(Request::new(&url).list(&ListParams::default().match_any())?)
        .await
        .context("the resourceVersion=0 list")?;
    let cache_at: u64 = cached.metadata.resource_version.parse()?;

    step("[Consistent list] no resourceVersion, no limit: etcd's state");
    let consistent = Request::new(&url).list(&ListParams::default())?;
    ensure!(!consistent.uri().to_string().contains("resourceVersion"));
    let current: ListMeta = client
        .request(consistent)
        .await
        .context("the consistent list")?;
    let bound: u64 = current.metadata.resource_version.parse()?;
    ensure!(
        cache_at <= bound,
        "the cache at {cache_at}, etcd at {bound} read after it"
    );

    step("[List] not older than the watch cache's own resourceVersion: served at it or later");
    let list: ListMeta = client
        .request(bounded(&url, &cache_at.to_string())?)
        .await
        .context("the bounded list")?;
    let at: u64 = list.metadata.resource_version.parse()?;
    ensure!(
        at >= cache_at,
        "a list at {at}, older than its bound {cache_at}"
    );

    step("[List] a bound ahead of etcd: 504 Too large resource version, after the cache's wait");
    let ahead = (bound + 1_000_000_000).to_string();
    let started = Instant::now();
    match client.request::<ListMeta>(bounded(&url, &ahead)?).await {
        Ok(l) => bail!(
            "a list at {} for a bound of {ahead}",
            l.metadata.resource_version
        ),
        Err(kube::Error::Api(s)) => {
            ensure!(s.code == 504, "{s:?}");
            ensure!(s.message.contains("Too large resource version"), "{s:?}");
        }
        Err(e) => bail!("not an apiserver answer: {e}"),
    }
    ensure!(
        started.elapsed() >= Duration::from_secs(2),
        "answered in {:?}: the cache did not wait for the bound",
        started.elapsed()
    );

    step("[Streaming list] refused before any event (400 or 422): the watch lists instead");
    let params = WatchParams::default().timeout(5).initial_events();
    let watch = Request::new(&url).watch(&params, "")?;
    let uri = watch.uri().to_string();
    ensure!(
        uri.contains("sendInitialEvents=true") && uri.contains("resourceVersionMatch=NotOlderThan"),
        "{uri}"
    );
    match client.request_text(watch).await {
        Ok(body) => bail!("1.20 answered a streaming list: {body}"),
        Err(kube::Error::Api(s)) => {
            ensure!(matches!(s.code, 400 | 422), "{s:?}");
            ensure!(s.message.contains("resourceVersionMatch"), "{s:?}");
        }
        Err(e) => bail!("not an apiserver answer: {e}"),
    }
    Ok(())
}
