//! Attacks on the controller's two listeners (admin and dashboard), on the loopback
//! control plane, as someone inside the cluster would try them:
//!
//! ```text
//!  nobody (no token) ────────┐   every route of the dashboard's route table (GET, POST)
//!  team A's viewer ──────────┼─► + the old /api/v1/quotas paths, an unknown path
//!   (bearer and session)     │   on the dashboard AND the admin port
//!                            └─► bodies checked for team B's namespace, quota, numbers
//!  150 × POST /login, 2 MiB ───► 413 each; controller RSS growth bounded
//!  streams beyond the caps ────► 503
//!  --dashboard-auth=none on a non-loopback address ─► refuses to start
//! ```
//!
//! Each test fails if its control is removed: the admin port would serve every quota at
//! /api/v1/quotas, the login form would read 2 MiB bodies, streams would be unlimited, and
//! `--dashboard-auth=none` would start on any address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use karmada_quota_e2e::controller::{CONTROLLER_BIN, Controller, LEASE_NAMESPACE, held_lease};
use karmada_quota_e2e::viewer::Viewer;
use karmada_quota_e2e::webhook::{Rb, quota};
use karmada_quota_e2e::{Binary, free_port};
use karmada_quota_e2e::{Env, TestNs, accepts, wait_for};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn step(s: &str) {
    eprintln!("{s}");
}

/// One HTTP/1.1 exchange on loopback (`Connection: close`): the status and whatever body
/// arrived within `read_for` (a live stream never ends: its first event is enough).
async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
    read_for: Duration,
) -> Result<(u16, String, String)> {
    let stream = TcpStream::connect(addr).await?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    );
    let (mut rd, mut wr) = stream.into_split();
    // Written while the answer is read: a server that answers before it has read the
    // body (413) and closes makes the rest of the write fail, not the exchange.
    let write = async move {
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(body).await;
        wr
    };
    let read = async move {
        let mut raw = Vec::new();
        let deadline = tokio::time::Instant::now() + read_for;
        let mut buf = [0u8; 16 * 1024];
        loop {
            match tokio::time::timeout_at(deadline, rd.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
                Ok(Err(e)) if raw.is_empty() => return Err(e),
                Ok(Err(_)) => break,
            }
        }
        Ok(raw)
    };
    let (_wr, raw) = tokio::join!(write, read);
    let raw = raw?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{method} {path}: no status line in {head:?}"))?;
    Ok((code, head.to_owned(), body.to_owned()))
}

/// The value of `Set-Cookie: name=…` in a response head.
fn set_cookie(head: &str, name: &str) -> Option<String> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, v)| {
            let (kv, _) = v.trim().split_once(';')?;
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| v.to_owned())
        })
}

/// The value of the hidden form field `name` in a page.
fn hidden(body: &str, name: &str) -> Option<String> {
    let marker = format!(r#"name="{name}" value=""#);
    let rest = &body[body.find(&marker)? + marker.len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Logs `viewer` in through the form (GET /login for the CSRF cookie and field, POST):
/// the session cookie header.
async fn login(dash: SocketAddr, viewer: &Viewer) -> Result<String> {
    let (code, head, body) =
        exchange(dash, "GET", "/login", &[], b"", Duration::from_secs(5)).await?;
    ensure!(code == 200, "GET /login: {code}");
    let nonce = set_cookie(&head, "kq_csrf").context("no kq_csrf cookie")?;
    let csrf = hidden(&body, "csrf").context("no csrf field")?;
    let form = format!("csrf={csrf}&next=%2F&token={}", viewer.token);
    let (code, head, body) = exchange(
        dash,
        "POST",
        "/login",
        &[
            ("Cookie", format!("kq_csrf={nonce}")),
            ("Content-Type", "application/x-www-form-urlencoded".into()),
        ],
        form.as_bytes(),
        Duration::from_secs(5),
    )
    .await?;
    ensure!(code == 303, "POST /login: {code} {body}");
    let session = set_cookie(&head, "kq_session").context("no session cookie")?;
    ensure!(
        !head.contains(&viewer.token),
        "the token went back to the browser"
    );
    Ok(format!("kq_session={session}"))
}

/// Two teams' namespaces with a quota each (team B's with a number found nowhere else),
/// their viewers, and a follower controller over every namespace with
/// `--dashboard-auth=kubernetes` and `extra` flags.
struct Teams {
    a: TestNs,
    b: TestNs,
    team_a: Viewer,
    team_b: Viewer,
    ctl: Controller,
    lease: String,
}

/// Team B's quota name, and its memory limit: strings no page of team A may hold.
const B_QUOTA: &str = "bquota-plans";
const B_NUMBER: &str = "7777Mi";

impl Teams {
    async fn start(env: &'static Env, tag: &str, extra: &[&str]) -> Result<Teams> {
        let client = env.client()?;
        let a = TestNs::new(&client, &format!("{tag}-a")).await?;
        let b = TestNs::new(&client, &format!("{tag}-b")).await?;
        accepts(
            &client,
            &quota(a.name(), "compute", &[("requests.cpu", "10")]),
        )
        .await?;
        accepts(
            &client,
            &quota(
                b.name(),
                B_QUOTA,
                &[("requests.cpu", "4"), ("requests.memory", B_NUMBER)],
            ),
        )
        .await?;
        let web = Rb::deployment("web", 2)
            .request("cpu", "1")
            .clusters(&[("member1", 2)]);
        accepts(&client, &web.json(a.name())).await?;
        let job = Rb::deployment("job", 1)
            .request("cpu", "1")
            .request("memory", "1Gi")
            .clusters(&[("member1", 1)]);
        accepts(&client, &job.json(b.name())).await?;
        let team_a = Viewer::create(&client, a.name(), "team-a", &[a.name()]).await?;
        let team_b = Viewer::create(&client, b.name(), "team-b", &[b.name()]).await?;
        let lease = format!("kq-e2e-attacks-{}", a.name());
        held_lease(&client, &lease).await?;
        let mut builder = Controller::builder()
            .lease_name(&lease)
            .clusters_from_api(false)
            .arg("--dashboard-auth=kubernetes");
        for e in extra {
            builder = builder.arg(*e);
        }
        let ctl = builder.start(env).await?;
        Ok(Teams {
            a,
            b,
            team_a,
            team_b,
            ctl,
            lease,
        })
    }

    async fn cleanup(self, env: &'static Env) -> Result<()> {
        let client = env.client()?;
        drop(self.ctl);
        let _ = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
            .delete(&self.lease, &Default::default())
            .await;
        self.a.delete(&client).await?;
        self.b.delete(&client).await
    }
}

/// Every path to try on every listener: the dashboard's route table with its parameters
/// set to team B's quota (and to team A's), the old admin JSON paths, an unknown path.
fn every_path(a: &str, b: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for route in karmada_quota_dashboard::route_paths() {
        for (ns, name) in [(b, B_QUOTA), (a, "compute")] {
            let p = route.replace("{namespace}", ns).replace("{name}", name);
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
    }
    for p in [
        "/api/v1/quotas".to_owned(),
        format!("/api/v1/quotas/{b}"),
        format!("/api/v1/quotas/{b}/{B_QUOTA}"),
        "/no/such/page".to_owned(),
    ] {
        paths.push(p);
    }
    paths
}

/// `body` without what merely echoes the path asked for (the login form's `next`, a
/// not-found page naming the quota asked for): names the asker typed are no leak.
fn echo_free(body: &str, path: &str, a: &str, b: &str) -> String {
    let mut out = body.replace(path, "");
    for echo in [
        format!("{b}/{B_QUOTA}"),
        format!("{a}/compute"),
        format!("KarmadaClusterQuota {B_QUOTA}"),
        "KarmadaClusterQuota compute".to_owned(),
    ] {
        if path.contains(&echo.replace("KarmadaClusterQuota ", "")) {
            out = out.replace(&echo, "");
        }
    }
    out
}

/// Routes anyone may reach on the dashboard (they hold no quota data).
fn public(path: &str) -> bool {
    path == "/login" || path.starts_with("/assets/")
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn every_route_on_every_listener_as_team_a_and_as_nobody() -> Result<()> {
    let env = Env::get().await?;
    let t = Teams::start(env, "atk-walk", &[]).await?;
    let res = walk(&t).await;
    let cleanup = t.cleanup(env).await;
    res.and(cleanup)
}

async fn walk(t: &Teams) -> Result<()> {
    let (a, b) = (t.a.name(), t.b.name());
    let dash = t.ctl.dashboard_addr();
    let admin = t.ctl.admin_addr();
    let short = Duration::from_secs(3);

    step("[Get] team B's data is on the dashboard (for team B): what must not leak exists");
    let b_path = format!("/api/v1/quotas/{b}/{B_QUOTA}");
    let b_path = b_path.as_str();
    let b_auth = [("Authorization", t.team_b.bearer())];
    let b_auth = &b_auth;
    wait_for(
        "team B sees its quota",
        Duration::from_secs(30),
        || async move {
            let (code, _, body) = exchange(dash, "GET", b_path, b_auth, b"", short)
                .await
                .ok()?;
            (code == 200 && body.contains(B_NUMBER)).then_some(())
        },
    )
    .await?;

    let session = login(dash, &t.team_a).await?;
    let as_a_bearer = vec![("Authorization", t.team_a.bearer())];
    let as_a_session = vec![("Cookie", session)];
    let nobody: Vec<(&str, String)> = Vec::new();
    let leaks = |body: &str| -> Option<&'static str> {
        [
            (b, "team B's namespace"),
            (B_QUOTA, "team B's quota"),
            (B_NUMBER, "team B's limit"),
        ]
        .into_iter()
        .find(|(s, _)| body.contains(*s))
        .map(|(_, what)| what)
    };

    let paths = every_path(a, b);
    step(&format!(
        "[Get] {} paths × GET/POST on the dashboard {dash} and the admin port {admin}, as nobody and as team A (bearer, session)",
        paths.len()
    ));
    let mut walked = 0;
    for path in &paths {
        for method in ["GET", "POST"] {
            // The dashboard.
            let (code, _, body) = exchange(dash, method, path, &nobody, b"", short).await?;
            walked += 1;
            let seen = echo_free(&body, path, a, b);
            ensure!(
                !seen.contains(a) && leaks(&seen).is_none(),
                "nobody reads quota data at {method} {path} ({code}): {body}"
            );
            let expected: &[u16] = match (method, public(path), path.as_str()) {
                ("GET", true, _) => &[200],
                ("GET", _, "/logout") => &[405],
                ("POST", _, "/login" | "/logout") => &[403],
                ("POST", _, _) => &[401, 405],
                _ => &[401],
            };
            ensure!(
                expected.contains(&code),
                "nobody: {method} {path} answered {code}, want {expected:?}: {body}"
            );
            for who in [&as_a_bearer, &as_a_session] {
                let (code, _, body) = exchange(dash, method, path, who, b"", short).await?;
                walked += 1;
                if let Some(what) = leaks(&echo_free(&body, path, a, b)) {
                    bail!("team A reads {what} at {method} {path} ({code}): {body}");
                }
                ensure!(code != 500, "{method} {path}: 500 {body}");
            }
            // The admin port: health, readiness and metrics only, for anyone.
            let (code, _, body) = exchange(admin, method, path, &as_a_bearer, b"", short).await?;
            walked += 1;
            ensure!(
                code == 404 || code == 405,
                "the admin port answers {method} {path} with {code}: {body}"
            );
        }
    }
    for path in ["/livez", "/readyz"] {
        let (code, _, body) = exchange(admin, "GET", path, &nobody, b"", short).await?;
        ensure!(
            code == 200 && leaks(&body).is_none() && !body.contains(a),
            "{path}: {code} {body}"
        );
    }
    let (code, _, _) = exchange(admin, "GET", "/metrics", &nobody, b"", short).await?;
    ensure!(
        code == 200,
        "/metrics (the scraper's door, NetworkPolicy-guarded): {code}"
    );

    step("[Get] positive control: team A sees its own quota on the overview and the API");
    let (code, _, body) = exchange(dash, "GET", "/", &as_a_session, b"", short).await?;
    ensure!(
        code == 200 && body.contains(&format!("{a}/compute")),
        "{code}"
    );
    let (code, _, body) =
        exchange(dash, "GET", "/api/v1/snapshot", &as_a_bearer, b"", short).await?;
    ensure!(code == 200 && body.contains(a), "{code} {body}");
    eprintln!(
        "    ✓ {walked} requests: nobody got 401/403/404/405, team A read nothing of team B, the admin port only /livez /readyz /metrics"
    );
    Ok(())
}

/// The resident set of process `pid`, in KiB (`VmRSS` of /proc/<pid>/status).
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

/// Login floods: at most this much RSS growth.
const LOGIN_FLOOD_BOUND_MIB: u64 = 32;

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_login_flood_of_2_mib_bodies_is_413_and_memory_stays_bounded() -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    let ns = TestNs::new(&client, "atk-login").await?;
    let mut ctl = Controller::builder()
        .namespace(ns.name())
        .arg("--dashboard-auth=kubernetes")
        .start(env)
        .await?;
    let dash = ctl.dashboard_addr();
    let pid = ctl.binary().pid().context("controller pid")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid)?;
    step(&format!(
        "[Create] 150 concurrent unauthenticated POST /login, 2 MiB body each (RSS before {} MiB)",
        before / 1024
    ));
    let body = {
        let mut b = b"next=%2F&token=".to_vec();
        b.resize(2 * 1024 * 1024, b'a');
        std::sync::Arc::new(b)
    };
    let started = Instant::now();
    let floods = (0..150).map(|_| {
        let body = body.clone();
        async move {
            exchange(
                dash,
                "POST",
                "/login",
                &[("Content-Type", "application/x-www-form-urlencoded".into())],
                &body,
                Duration::from_secs(20),
            )
            .await
        }
    });
    let mut peak = before;
    let answers = {
        let all = futures::future::join_all(floods);
        tokio::pin!(all);
        loop {
            tokio::select! {
                answers = &mut all => break answers,
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    peak = peak.max(rss_kib(pid)?);
                }
            }
        }
    };
    let mut codes = std::collections::BTreeMap::new();
    for a in answers {
        let code = match a {
            Ok((code, _, _)) => code.to_string(),
            Err(e) => format!("error: {e}"),
        };
        *codes.entry(code).or_insert(0) += 1;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib(pid)?;
    peak = peak.max(after);
    eprintln!(
        "    {:.1?}: answers {codes:?}; RSS before {} KiB, peak {} KiB, after {} KiB (+{} KiB)",
        started.elapsed(),
        before,
        peak,
        after,
        after.saturating_sub(before)
    );
    ctl.binary().check_running()?;
    ensure!(
        codes.get("413") == Some(&150),
        "every 2 MiB login body is refused with 413: {codes:?}"
    );
    ensure!(
        peak.saturating_sub(before) < LOGIN_FLOOD_BOUND_MIB * 1024,
        "RSS grew by {} KiB (bound {LOGIN_FLOOD_BOUND_MIB} MiB)",
        peak - before
    );
    drop(ctl);
    ns.delete(&client).await
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn live_streams_beyond_the_caps_are_refused() -> Result<()> {
    let env = Env::get().await?;
    let t = Teams::start(
        env,
        "atk-sse",
        &[
            "--dashboard-max-streams=4",
            "--dashboard-max-streams-per-user=2",
        ],
    )
    .await?;
    let res = streams(&t).await;
    let cleanup = t.cleanup(env).await;
    res.and(cleanup)
}

/// Opens `GET /events` as `who` and keeps it open: the status and the connection.
async fn open_stream(dash: SocketAddr, who: &Viewer) -> Result<(u16, TcpStream)> {
    let mut s = TcpStream::connect(dash).await?;
    s.write_all(
        format!(
            "GET /events HTTP/1.1\r\nHost: {dash}\r\nAuthorization: {}\r\n\r\n",
            who.bearer()
        )
        .as_bytes(),
    )
    .await?;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await??;
    let head = String::from_utf8_lossy(&buf[..n]);
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status line: {head:?}"))?;
    Ok((code, s))
}

async fn streams(t: &Teams) -> Result<()> {
    let dash = t.ctl.dashboard_addr();
    step("[Create] team A opens 2 streams (its share), a third is 503");
    let a1 = open_stream(dash, &t.team_a).await?;
    let a2 = open_stream(dash, &t.team_a).await?;
    ensure!(a1.0 == 200 && a2.0 == 200, "{} {}", a1.0, a2.0);
    let (code, _) = open_stream(dash, &t.team_a).await?;
    ensure!(code == 503, "team A's third stream: {code}");
    step("[Create] team B opens 2 (the total of 4 is reached), a fifth is 503 for anyone");
    let b1 = open_stream(dash, &t.team_b).await?;
    let b2 = open_stream(dash, &t.team_b).await?;
    ensure!(b1.0 == 200 && b2.0 == 200, "{} {}", b1.0, b2.0);
    let (code, _) = open_stream(dash, &t.team_b).await?;
    ensure!(code == 503, "a fifth stream: {code}");
    step("[Delete] team A closes its streams: its slots come back");
    drop((a1, a2));
    let reopened = wait_for("a slot to come back", Duration::from_secs(30), || async {
        let (code, s) = open_stream(dash, &t.team_a).await.ok()?;
        (code == 200).then_some(s)
    })
    .await?;
    drop((reopened, b1, b2));
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn an_unauthenticated_dashboard_on_a_remote_address_refuses_to_start() -> Result<()> {
    let env = Env::get().await?;
    // 192.0.2.1 (TEST-NET-1) is not loopback and not an address of this machine: the
    // check must refuse it before any bind (code without the check logs a bind error and
    // runs on without its dashboard).
    let remote = format!("--dashboard-listen=192.0.2.1:{}", free_port()?);
    let admin = format!("--admin-listen=127.0.0.1:{}", free_port()?);
    let mut refused = Binary::builder(CONTROLLER_BIN)
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .arg(&admin)
        .arg(&remote)
        .arg("--dashboard-auth=none")
        .arg("--no-leader-election")
        .start(env)?;
    // Code without the check runs on: exit_message fails after 20 s.
    let msg = refused.exit_message(Duration::from_secs(20)).await?;
    ensure!(
        msg.contains("--dashboard-auth=none on --dashboard-listen=192.0.2.1")
            && msg.contains("--dashboard-allow-unauthenticated-remote"),
        "the error names the flags: {msg}"
    );
    step(
        "[Get] with --dashboard-allow-unauthenticated-remote it starts (the dashboard cannot bind 192.0.2.1 and says so)",
    );
    let admin_port = free_port()?;
    let mut allowed = Binary::builder(CONTROLLER_BIN)
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
        .arg(&remote)
        .arg("--dashboard-auth=none")
        .arg("--dashboard-allow-unauthenticated-remote")
        .arg("--no-leader-election")
        .arg("--namespace=atk-remote-none")
        .start(env)?;
    allowed
        .wait_admin(
            SocketAddr::from(([127, 0, 0, 1], admin_port)),
            "/livez",
            Duration::from_secs(30),
        )
        .await?;
    allowed.check_running()?;
    Ok(())
}
