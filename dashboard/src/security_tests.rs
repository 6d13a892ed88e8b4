//! Router tests that attack the login flow and the dashboard's bounds: the cookie never
//! holds the token, a forged / expired / unknown / logged-out session is the login form,
//! a POST without its CSRF token is 403, every response carries the security headers, a
//! large body is 413 before it is read, and live streams beyond the caps are 503.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::auth::fake::FakeReviewer;
use crate::auth::{Access, CachePolicy};
use crate::auth_tests::{Answer, send};
use crate::session::SessionPolicy;
use crate::streams::StreamLimits;
use crate::tests::snapshot;
use crate::{Dashboard, Settings, router};

/// A token long enough to be recognised anywhere it leaks.
const TOKEN_A: &str = "eyJhbGciOiJSUzI1NiJ9.team-a-secret-token.c2lnbmF0dXJl";

fn reviewer() -> Arc<FakeReviewer> {
    let mut f = FakeReviewer::teams();
    f.tokens.insert(TOKEN_A.into(), "team-a".into());
    Arc::new(f)
}

fn dashboard_with(settings: Settings) -> (Arc<FakeReviewer>, Dashboard) {
    let (_tx, rx) = watch::channel(Arc::new(snapshot()));
    let f = reviewer();
    let access = Access::new(f.clone(), CachePolicy::default());
    (f, Dashboard::new(rx, settings).unwrap().with_access(access))
}

fn dashboard() -> Dashboard {
    dashboard_with(Settings::default()).1
}

impl Answer {
    fn cookies(&self) -> Vec<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }

    /// The value a `Set-Cookie` of this answer gives `name`.
    fn cookie(&self, name: &str) -> Option<String> {
        self.cookies().iter().find_map(|c| {
            let (kv, _) = c.split_once(';').unwrap_or((c, ""));
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| v.to_owned())
        })
    }

    /// The value of the hidden form field `name`.
    fn field(&self, name: &str) -> Option<String> {
        let marker = format!(r#"name="{name}" value=""#);
        let rest = &self.body[self.body.find(&marker)? + marker.len()..];
        Some(rest[..rest.find('"')?].to_owned())
    }
}

async fn get_with_cookie(d: &Dashboard, path: &str, cookie: &str) -> Answer {
    send(
        d,
        Request::get(path)
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

fn post(path: &str, cookie: Option<&str>, body: String) -> Request<Body> {
    let mut r =
        Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, c);
    }
    r.body(Body::from(body)).unwrap()
}

/// The login form's CSRF cookie (`kq_csrf=…`) and field.
async fn login_form(d: &Dashboard) -> (String, String) {
    let form = send(d, Request::get("/login").body(Body::empty()).unwrap()).await;
    assert_eq!(form.code, StatusCode::OK);
    let nonce = form
        .cookie("kq_csrf")
        .expect("the form sets its CSRF cookie");
    let set = form.cookies().join("\n");
    assert!(
        set.contains("Path=/; HttpOnly; SameSite=Strict; Max-Age=3600"),
        "{set}"
    );
    (format!("kq_csrf={nonce}"), form.field("csrf").unwrap())
}

/// Logs in with `token` through the form: the answer.
async fn login(d: &Dashboard, token: &str, extra: &[(&str, &str)]) -> Answer {
    let (cookie, csrf) = login_form(d).await;
    let body = format!(
        "csrf={csrf}&token={}&next=%2Fquotas%2Fml-train%2Fgpus",
        form_urlencoded::byte_serialize(token.as_bytes()).collect::<String>()
    );
    let mut req = post("/login", Some(&cookie), body);
    for (k, v) in extra {
        req.headers_mut().insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    send(d, req).await
}

fn session_of(a: &Answer) -> String {
    a.cookie("kq_session").expect("a session cookie")
}

#[tokio::test]
async fn the_session_cookie_is_random_and_never_the_token() {
    let d = dashboard();
    let a = login(&d, TOKEN_A, &[]).await;
    assert_eq!(a.code, StatusCode::SEE_OTHER, "{}", a.body);
    assert_eq!(a.headers[header::LOCATION], "/quotas/ml-train/gpus");
    let id = session_of(&a);
    assert_eq!(id.len(), 64);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    let all: String = a.cookies().join("\n");
    assert!(
        !all.contains(TOKEN_A) && !all.contains("team-a-secret"),
        "{all}"
    );
    assert!(!a.body.contains("secret"));
    assert_eq!(
        a.cookies()
            .iter()
            .find(|c| c.starts_with("kq_session="))
            .unwrap(),
        &format!("kq_session={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age=28800")
    );
    // A second login is another id.
    assert_ne!(session_of(&login(&d, TOKEN_A, &[]).await), id);

    // The session opens the pages; the page's logout form carries the session's token.
    let page = get_with_cookie(
        &d,
        "/quotas/ml-train/gpus",
        &format!("theme=x; kq_session={id}"),
    )
    .await;
    assert_eq!(page.code, StatusCode::OK);
    assert!(
        page.body
            .contains(r#"signed in as <b id="user">team-a</b>"#)
    );
    assert!(page.body.contains(
        r#"<form method="post" action="/logout"><input type="hidden" name="csrf" value=""#
    ));
    assert!(!page.body.contains(TOKEN_A));
}

#[tokio::test]
async fn the_cookie_is_secure_over_tls_and_behind_an_https_proxy() {
    let d = dashboard();
    let plain = login(&d, "ta", &[]).await;
    assert!(plain.cookies().iter().all(|c| !c.contains("Secure")));
    let proxied = login(&d, "ta", &[("x-forwarded-proto", "https")]).await;
    assert!(
        proxied
            .cookies()
            .iter()
            .any(|c| c.starts_with("kq_session=") && c.ends_with("; Secure"))
    );
    let (_, tls) = dashboard_with(Settings {
        secure_cookies: true,
        ..Settings::default()
    });
    let a = login(&tls, "ta", &[]).await;
    assert!(
        a.cookies().iter().all(|c| c.ends_with("; Secure")),
        "{:?}",
        a.cookies()
    );
    let form = send(&tls, Request::get("/login").body(Body::empty()).unwrap()).await;
    assert!(form.cookies()[0].ends_with("; Secure"));
}

#[tokio::test]
async fn a_token_a_forged_or_an_unknown_session_in_the_cookie_gets_the_login_form() {
    let d = dashboard();
    // The old scheme (the token itself in a cookie) is no session any more.
    for cookie in [
        format!("kq_token={TOKEN_A}"),
        format!("kq_session={TOKEN_A}"),
        "kq_session=ta".to_owned(),
        format!("kq_session={}", "0".repeat(64)),
        format!("kq_session={}", "ab".repeat(32)),
    ] {
        for path in ["/", "/api/v1/snapshot", "/events"] {
            let a = get_with_cookie(&d, path, &cookie).await;
            assert_eq!(a.code, StatusCode::UNAUTHORIZED, "{cookie} {path}");
            assert!(!a.body.contains("ml-train/gpus|"), "{cookie} {path}");
        }
        let page = get_with_cookie(&d, "/clusters", &cookie).await;
        assert!(page.body.contains(r#"<form method="post" action="/login""#));
    }
}

#[tokio::test]
async fn idle_old_and_logged_out_sessions_end() {
    for policy in [
        SessionPolicy {
            idle_timeout: Duration::ZERO,
            ..SessionPolicy::default()
        },
        SessionPolicy {
            max_age: Duration::ZERO,
            ..SessionPolicy::default()
        },
    ] {
        let (_, d) = dashboard_with(Settings {
            sessions: policy,
            ..Settings::default()
        });
        let id = session_of(&login(&d, "ta", &[]).await);
        let a = get_with_cookie(&d, "/", &format!("kq_session={id}")).await;
        assert_eq!(a.code, StatusCode::UNAUTHORIZED, "{policy:?}");
        assert!(a.body.contains("Your session ended"), "{}", a.body);
    }

    let d = dashboard();
    let id = session_of(&login(&d, "ta", &[]).await);
    let cookie = format!("kq_session={id}");
    let page = get_with_cookie(&d, "/", &cookie).await;
    let csrf = page.field("csrf").unwrap();
    let out = send(&d, post("/logout", Some(&cookie), format!("csrf={csrf}"))).await;
    assert_eq!(out.code, StatusCode::SEE_OTHER);
    assert_eq!(out.headers[header::LOCATION], "/login");
    assert!(
        out.cookies()[0].starts_with("kq_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    );
    assert_eq!(
        get_with_cookie(&d, "/", &cookie).await.code,
        StatusCode::UNAUTHORIZED,
        "logout deleted the session server-side: the old cookie is worthless"
    );
}

#[tokio::test]
async fn a_token_no_longer_accepted_ends_its_session() {
    let f = Arc::new(FakeReviewer::teams());
    let (_tx, rx) = watch::channel(Arc::new(snapshot()));
    let access = Access::new(
        f.clone(),
        CachePolicy {
            ttl: Duration::ZERO,
            refused_ttl: Duration::ZERO,
            ..CachePolicy::default()
        },
    );
    let d = Dashboard::new(rx, Settings::default())
        .unwrap()
        .with_access(access);
    let id = session_of(&login(&d, "ta", &[]).await);
    assert_eq!(d.sessions.len(), 1);
    // The same dashboard, its reviewer now refusing every token (revoked).
    let revoked = Dashboard {
        access: Some(Arc::new(Access::new(
            Arc::new(FakeReviewer::default()),
            CachePolicy::default(),
        ))),
        ..d.clone()
    };
    let a = get_with_cookie(&revoked, "/", &format!("kq_session={id}")).await;
    assert_eq!(a.code, StatusCode::UNAUTHORIZED);
    assert!(d.sessions.is_empty(), "the session is gone");
}

#[tokio::test]
async fn posts_without_a_valid_csrf_token_are_403() {
    let (f, d) = dashboard_with(Settings::default());
    let (cookie, csrf) = login_form(&d).await;
    let (other_cookie, other_csrf) = login_form(&d).await;
    for (cookie, body) in [
        (None, "token=ta".to_owned()),
        (Some(cookie.as_str()), "token=ta".to_owned()),
        (None, format!("csrf={csrf}&token=ta")),
        (Some(cookie.as_str()), format!("csrf={other_csrf}&token=ta")),
        (Some(other_cookie.as_str()), format!("csrf={csrf}&token=ta")),
        (Some(cookie.as_str()), "csrf=00&token=ta".to_owned()),
        (Some("kq_csrf=zz"), "csrf=zz&token=ta".to_owned()),
    ] {
        let a = send(&d, post("/login", cookie, body.clone())).await;
        assert_eq!(a.code, StatusCode::FORBIDDEN, "{cookie:?} {body}");
        assert!(a.cookie("kq_session").is_none());
        assert!(
            a.body.contains("did not come from this dashboard"),
            "{}",
            a.body
        );
    }
    assert_eq!(f.calls().0, 0, "no token was even reviewed");

    let id = session_of(&login(&d, "ta", &[]).await);
    let session = format!("kq_session={id}");
    let other = session_of(&login(&d, "tb", &[]).await);
    let their_csrf = get_with_cookie(&d, "/", &format!("kq_session={other}"))
        .await
        .field("csrf")
        .unwrap();
    for (cookie, body) in [
        (Some(session.as_str()), String::new()),
        (Some(session.as_str()), "csrf=".to_owned()),
        (Some(session.as_str()), format!("csrf={their_csrf}")),
        (None, format!("csrf={their_csrf}")),
    ] {
        let a = send(&d, post("/logout", cookie, body.clone())).await;
        assert_eq!(a.code, StatusCode::FORBIDDEN, "{cookie:?} {body}");
    }
    assert_eq!(
        get_with_cookie(&d, "/", &session).await.code,
        StatusCode::OK,
        "a forged logout ended nothing"
    );
}

/// Every route of the table with its parameters filled in, and a path no route has.
fn every_path() -> Vec<String> {
    let mut paths: Vec<String> = crate::route_paths()
        .iter()
        .map(|p| {
            p.replace("{namespace}", "ml-train")
                .replace("{name}", "gpus")
        })
        .collect();
    paths.push("/no/such/page".to_owned());
    paths
}

#[tokio::test]
async fn every_response_carries_the_security_headers() {
    let (_tx, rx) = watch::channel(Arc::new(snapshot()));
    let open = Dashboard::new(rx, Settings::default()).unwrap();
    let d = dashboard();
    let id = session_of(&login(&d, "ta", &[]).await);
    for (d, cookie) in [
        (&open, String::new()),
        (&d, String::new()),
        (&d, format!("kq_session={id}")),
    ] {
        for path in every_path() {
            for method in ["GET", "POST"] {
                let req = Request::builder()
                    .method(method)
                    .uri(&path)
                    .header(header::COOKIE, &cookie)
                    .body(Body::empty())
                    .unwrap();
                let resp = router(d.clone()).oneshot(req).await.unwrap();
                let h = resp.headers();
                let what = format!("{method} {path} ({})", resp.status());
                let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
                assert!(csp.starts_with("default-src 'self';"), "{what}: {csp}");
                assert!(csp.contains("frame-ancestors 'none'"), "{what}");
                assert!(!csp.contains("unsafe"), "{what}");
                assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{what}");
                assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
                assert_eq!(h[header::REFERRER_POLICY], "no-referrer", "{what}");
                let cache = h[header::CACHE_CONTROL].to_str().unwrap();
                if path.starts_with("/assets/") {
                    assert!(cache.starts_with("public"), "{what}");
                } else {
                    assert_eq!(cache, "no-store", "{what}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_large_body_is_413_before_it_is_read() {
    let d = dashboard();
    let (cookie, csrf) = login_form(&d).await;
    let big = format!("csrf={csrf}&token={}", "a".repeat(2 * 1024 * 1024));
    let a = send(&d, post("/login", Some(&cookie), big)).await;
    assert_eq!(a.code, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(d.sessions.is_empty());
    // A form just under the limit is read (and here refused: no such token).
    let fits = format!(
        "csrf={csrf}&token={}",
        "a".repeat(crate::FORM_BODY_LIMIT - 200)
    );
    assert_eq!(
        send(&d, post("/login", Some(&cookie), fits)).await.code,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn live_streams_beyond_the_caps_are_503() {
    let (_, d) = dashboard_with(Settings {
        streams: StreamLimits {
            max_total: 3,
            max_per_user: 2,
        },
        ..Settings::default()
    });
    let open = |token: &'static str| {
        let d = d.clone();
        async move {
            router(d)
                .oneshot(
                    Request::get("/events")
                        .header(header::AUTHORIZATION, format!("Bearer {token}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap()
        }
    };
    let a1 = open("ta").await;
    let a2 = open("ta").await;
    assert_eq!((a1.status(), a2.status()), (StatusCode::OK, StatusCode::OK));
    let a3 = open("ta").await;
    assert_eq!(
        a3.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "team-a's share"
    );
    let body = a3.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("team-a has 2 live streams open"));
    let b1 = open("tb").await;
    assert_eq!(b1.status(), StatusCode::OK);
    assert_eq!(
        open("adm").await.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "total"
    );
    assert_eq!(d.streams.open_now(), 3);
    drop(a1);
    assert_eq!(d.streams.open_now(), 2, "a closed stream frees its slot");
    assert_eq!(open("adm").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_login_page_met_elsewhere_keeps_the_forms_csrf_nonce() {
    // A browser that shows the login form also asks for /favicon.ico (a 401 login page):
    // that page must not mint a new nonce, or the form on screen would be refused.
    let d = dashboard();
    let (cookie, csrf) = login_form(&d).await;
    let elsewhere = get_with_cookie(&d, "/favicon.ico", &cookie).await;
    assert_eq!(elsewhere.code, StatusCode::UNAUTHORIZED);
    assert!(
        elsewhere.cookie("kq_csrf").is_none(),
        "{:?}",
        elsewhere.cookies()
    );
    let a = send(
        &d,
        post(
            "/login",
            Some(&cookie),
            format!("csrf={csrf}&token=ta&next=%2F"),
        ),
    )
    .await;
    assert_eq!(a.code, StatusCode::SEE_OTHER, "{}", a.body);
}

/// One token logging in 10,000 times (it took 4.2 s and, past the per-user cap, ended
/// every other session of its user): past `--dashboard-logins-per-user-per-minute` each
/// login is a 429 that creates and ends nothing; the user's session on another device and
/// another team's session stay.
#[tokio::test]
async fn one_token_logging_in_ten_thousand_times_ends_no_session() {
    let d = dashboard();
    let elsewhere = format!("kq_session={}", session_of(&login(&d, TOKEN_A, &[]).await));
    let team_b = format!("kq_session={}", session_of(&login(&d, "tb", &[]).await));
    let (cookie, csrf) = login_form(&d).await;
    let body = format!("csrf={csrf}&token=ta&next=%2F");
    let started = std::time::Instant::now();
    let (mut created, mut refused) = (0usize, 0usize);
    for _ in 0..10_000 {
        let a = send(&d, post("/login", Some(&cookie), body.clone())).await;
        match a.code {
            StatusCode::SEE_OTHER => created += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(a.body.contains("Too many logins of team-a"), "{}", a.body);
                assert_eq!(a.headers[header::RETRY_AFTER], "6");
                assert!(a.cookie("kq_session").is_none());
                refused += 1;
            }
            other => panic!("{other}: {}", a.body),
        }
    }
    // The first login took one of the burst of 10; one more comes back every 6 s.
    let refills = (started.elapsed().as_secs_f64() / 6.0).ceil() as usize;
    assert!(created <= 9 + refills, "{created} logins accepted");
    assert_eq!(created + refused, 10_000);
    assert!(
        d.sessions.len() <= 2 + 9 + refills,
        "{} sessions",
        d.sessions.len()
    );
    for (who, cookie) in [("team-a elsewhere", &elsewhere), ("team-b", &team_b)] {
        assert_eq!(
            get_with_cookie(&d, "/", cookie).await.code,
            StatusCode::OK,
            "{who} was logged out by the flood"
        );
    }
}

/// One address cycling through 200 users' tokens (each user under its own per-user rate):
/// past `--dashboard-logins-per-peer-per-minute` (30) every attempt from that address —
/// IPv4, or any address of one IPv6 /64 — is a 429 before its token is reviewed, and
/// another address still logs in.
#[tokio::test]
async fn one_address_trying_many_users_tokens_is_limited_before_any_review() {
    use axum::extract::ConnectInfo;
    use std::net::SocketAddr;
    let mut f = FakeReviewer::teams();
    for i in 0..200 {
        f.tokens.insert(format!("tok-{i}"), format!("user-{i}"));
    }
    let f = Arc::new(f);
    let (_tx, rx) = watch::channel(Arc::new(snapshot()));
    // New tokens are reviewed at any rate here: only the per-address limit is tested.
    let policy = CachePolicy {
        new_tokens: crate::rate::Rate::per_second(10_000),
        ..CachePolicy::default()
    };
    let access = Access::new(f.clone(), policy);
    let d = Dashboard::new(rx, Settings::default())
        .unwrap()
        .with_access(access);
    let (cookie, csrf) = login_form(&d).await;
    let from = |peer: &str, token: &str| {
        let mut req = post(
            "/login",
            Some(&cookie),
            format!("csrf={csrf}&token={token}&next=%2F"),
        );
        let peer: SocketAddr = peer.parse().unwrap();
        req.extensions_mut().insert(ConnectInfo(peer));
        req
    };
    let started = std::time::Instant::now();
    for (i, peer) in [(0, "10.0.0.9:40000"), (100, "[2001:db8:0:7::1]:40000")] {
        let (reviews_before, _) = f.calls();
        let (mut created, mut refused) = (0usize, 0usize);
        for n in i..i + 100 {
            // IPv6: a new address of the same /64 for every attempt.
            let peer = peer.replace("::1]", &format!("::{:x}]", n + 1));
            let a = send(&d, from(&peer, &format!("tok-{n}"))).await;
            match a.code {
                StatusCode::SEE_OTHER => created += 1,
                StatusCode::TOO_MANY_REQUESTS => {
                    assert!(
                        a.body.contains("Too many logins from this address"),
                        "{}",
                        a.body
                    );
                    assert_eq!(a.headers[header::RETRY_AFTER], "2");
                    assert!(a.cookie("kq_session").is_none());
                    refused += 1;
                }
                other => panic!("{other}: {}", a.body),
            }
        }
        let refills = (started.elapsed().as_secs_f64() / 2.0).ceil() as usize;
        assert!(created <= 30 + refills, "{peer}: {created} logins accepted");
        assert!(refused >= 70 - refills, "{peer}: {refused} refused");
        let (reviews, _) = f.calls();
        assert!(
            reviews - reviews_before <= 30 + refills,
            "{peer}: {} TokenReviews",
            reviews - reviews_before
        );
    }
    let other = send(&d, from("10.0.0.10:40000", "tb")).await;
    assert_eq!(other.code, StatusCode::SEE_OTHER, "{}", other.body);
}
