//! The policy check reads templates within bounds, against a fake API server on loopback
//! serving ConfigMaps: pages of the page size with `continue`, one selector's reads cut at
//! `--policy-max-template-bytes`, every check's bytes charged to
//! `--policy-template-bytes-in-flight` and given back, more than the template limit
//! refused after the pages that show it.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use karmada_quota_interpreter::policy::ResourceSelector;
use parking_lot::Mutex;
use serde_json::json;

use crate::policy::{KubePolicyWorld, PolicyWorld, TemplateLimits};

const NS: &str = "team-a";

/// A fake API server: `objects` ConfigMaps of `size` bytes of data each, in `NS`; the
/// query of every LIST is recorded.
struct Fake {
    objects: usize,
    size: usize,
    lists: Mutex<Vec<String>>,
}

fn config_map(i: usize, size: usize) -> serde_json::Value {
    json!({"metadata": {"name": format!("cm-{i}"), "namespace": NS, "labels": {"app": "big"}},
           "data": {"blob": "x".repeat(size)}})
}

fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

async fn serve(fake: Arc<Fake>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    if path == "/api/v1" {
        return axum::Json(
            json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "configmaps", "singularName": "configmap", "namespaced": true,
             "kind": "ConfigMap", "verbs": ["get", "list"]}]}),
        )
        .into_response();
    }
    if path != format!("/api/v1/namespaces/{NS}/configmaps") {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    }
    fake.lists.lock().push(query.clone());
    let limit: usize = query_value(&query, "limit").map_or(fake.objects, |l| l.parse().unwrap());
    let from: usize = query_value(&query, "continue").map_or(0, |c| c.parse().unwrap());
    let to = (from + limit).min(fake.objects);
    let items: Vec<_> = (from..to).map(|i| config_map(i, fake.size)).collect();
    let next = if to < fake.objects {
        to.to_string()
    } else {
        String::new()
    };
    axum::Json(json!({"kind": "ConfigMapList", "apiVersion": "v1",
                      "metadata": {"continue": next}, "items": items}))
    .into_response()
}

/// A world over a fake API server of `objects` × `size` ConfigMaps, within `limits`.
async fn world(
    objects: usize,
    size: usize,
    limits: TemplateLimits,
) -> (KubePolicyWorld, Arc<Fake>) {
    let fake = Arc::new(Fake {
        objects,
        size,
        lists: Mutex::new(Vec::new()),
    });
    let f = fake.clone();
    let app = Router::new().fallback(move |req: Request| serve(f.clone(), req));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    (KubePolicyWorld::new(client).with_limits(limits), fake)
}

fn config_maps() -> ResourceSelector {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap"})).unwrap()
}

#[tokio::test]
async fn templates_are_listed_page_by_page() {
    let limits = TemplateLimits::new(10, 8 << 20, 32 << 20);
    let (world, fake) = world(40, 1024, limits.clone()).await;
    let found = world
        .templates(&config_maps(), Some(NS), 200)
        .await
        .unwrap();
    assert_eq!(found.len(), 40);
    assert_eq!(
        (
            found[39].api_version.as_str(),
            found[39].kind.as_str(),
            found[39].metadata.name.as_str()
        ),
        ("v1", "ConfigMap", "cm-39")
    );
    let lists = fake.lists.lock().clone();
    assert_eq!(lists.len(), 4, "{lists:?}");
    assert!(
        lists.iter().all(|q| query_value(q, "limit") == Some("10")),
        "{lists:?}"
    );
    assert_eq!(query_value(&lists[3], "continue"), Some("30"), "{lists:?}");
    assert_eq!(
        limits.available(),
        32 << 20,
        "every page's charge given back"
    );
}

#[tokio::test]
async fn large_templates_skip_the_check_at_the_byte_ceiling() {
    let limits = TemplateLimits::new(50, 8 << 20, 32 << 20);
    let (world, fake) = world(40, 1 << 20, limits.clone()).await;
    let skip = world
        .templates(&config_maps(), Some(NS), 200)
        .await
        .expect_err("40 MiB of ConfigMaps were read");
    assert!(skip.0.contains("--policy-max-template-bytes"), "{}", skip.0);
    assert_eq!(fake.lists.lock().len(), 1);
    assert_eq!(limits.available(), 32 << 20);
}

#[tokio::test]
async fn concurrent_checks_share_the_in_flight_budget() {
    // 4 MiB of pages a check, 6 MiB for all: two checks at once cannot both hold theirs.
    let limits = TemplateLimits::new(4, 8 << 20, 6 << 20);
    let (world, _) = world(40, 1 << 20, limits.clone()).await;
    let world = Arc::new(world);
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let w = world.clone();
            tokio::spawn(async move { w.templates(&config_maps(), Some(NS), 200).await })
        })
        .collect();
    let mut over_budget = 0;
    for r in runs {
        if let Err(skip) = r.await.unwrap()
            && skip.0.contains("--policy-template-bytes-in-flight")
        {
            over_budget += 1;
        }
    }
    assert!(over_budget > 0, "four checks of 4 MiB pages fit in 6 MiB");
    assert_eq!(limits.available(), 6 << 20);
}

#[tokio::test]
async fn more_templates_than_the_limit_stop_the_listing() {
    let (world, fake) = world(1_000, 16, TemplateLimits::new(50, 8 << 20, 32 << 20)).await;
    let skip = world
        .templates(&config_maps(), Some(NS), 120)
        .await
        .unwrap_err();
    assert!(skip.0.contains("more than 120"), "{}", skip.0);
    assert_eq!(fake.lists.lock().len(), 3, "pages of 50 until past 120");
}
