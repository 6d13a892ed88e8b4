//! The listener under attack on 127.0.0.1: each test opens real sockets against
//! [`serve`] and checks the bound holds (the times are functional timeouts with slack,
//! never performance assertions).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};

use super::*;

fn testdata(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/listener")
        .join(file)
}

/// `/ok`: "ok"; `/len`: the body's length (limit 1 MiB); `/wait`: answers once `gate`
/// is notified.
fn router(gate: Arc<Notify>) -> Router {
    Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/len",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
        .route(
            "/wait",
            get(move || {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    "done"
                }
            }),
        )
        .layer(DefaultBodyLimit::max(1024 * 1024))
}

struct Server {
    addr: SocketAddr,
    gate: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(limits: Limits, tls: Option<ServerTls>) -> Server {
        let tcp = bind("127.0.0.1:0".parse().unwrap(), "test").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let gate = Arc::new(Notify::new());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(serve(
            "test",
            tcp,
            router(gate.clone()),
            limits,
            tls,
            async move {
                let _ = stopped.await;
            },
        ));
        Server {
            addr,
            gate,
            stop: Some(stop),
            done,
        }
    }
}

fn quick(limits: Limits) -> Limits {
    Limits {
        tls_handshake_timeout: Duration::from_millis(300),
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(300),
        ..limits
    }
}

/// Reads until EOF or error; the bytes read and whether it ended within `within`.
async fn read_to_close<S: AsyncRead + Unpin>(s: &mut S, within: Duration) -> (String, bool) {
    let mut buf = Vec::new();
    let ended = tokio::time::timeout(within, async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&buf).into_owned(), ended)
}

async fn request<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, head: &str) -> String {
    s.write_all(head.as_bytes()).await.unwrap();
    read_to_close(s, Duration::from_secs(5)).await.0
}

const GET_OK: &str = "GET /ok HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn a_connection_over_the_cap_is_closed_at_once_when_every_slot_is_established() {
    let server = Server::start(
        Limits {
            max_connections: 2,
            ..Limits::default()
        },
        None,
    )
    .await;
    // A first byte establishes a plain connection; the rest of the head never comes.
    let mut held1 = TcpStream::connect(server.addr).await.unwrap();
    let mut held2 = TcpStream::connect(server.addr).await.unwrap();
    held1.write_all(b"G").await.unwrap();
    held2.write_all(b"G").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    let (text, closed) = read_to_close(&mut third, Duration::from_secs(1)).await;
    assert!(
        closed && text.is_empty(),
        "the third connection was served: {text:?}"
    );
    drop(held1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = TcpStream::connect(server.addr).await.unwrap();
    let answer = request(&mut again, GET_OK).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Silent connections (no byte sent, as a TCP flood that never starts a handshake) hold
/// at most the pending slots and lose them to new arrivals: a client that sends its
/// request at once is served through an endless flood of them, on TLS and plain HTTP.
#[tokio::test]
async fn idle_connections_cannot_take_the_slots_of_clients_that_talk() {
    for tls in [None, Some(server_tls(None, &[]))] {
        let on_tls = tls.is_some();
        let server = Server::start(
            Limits {
                max_connections: 16,
                max_pending_connections: 4,
                ..Limits::default()
            },
            tls,
        )
        .await;
        let mut idle = Vec::new();
        for round in 0..5 {
            for _ in 0..40 {
                if let Ok(s) = TcpStream::connect(server.addr).await {
                    idle.push(s);
                }
            }
            let answer = if on_tls {
                tls_get(server.addr, None).await
            } else {
                let mut c = TcpStream::connect(server.addr).await.unwrap();
                request(&mut c, GET_OK).await
            };
            assert!(
                answer.starts_with("HTTP/1.1 200"),
                "tls {on_tls}, round {round}: {answer:?}"
            );
        }
        assert_eq!(idle.len(), 200);
    }
    assert!(
        metrics::evicted_count("test") > 0,
        "the evictions are counted"
    );
}

/// One source address holds at most --max-connections-per-peer; another address still
/// connects (127.0.0.2 and 127.0.0.3 are loopback sources of their own).
#[tokio::test]
async fn one_source_address_holds_at_most_its_share() {
    let server = Server::start(
        Limits {
            max_connections: 16,
            max_connections_per_peer: 3,
            ..Limits::default()
        },
        None,
    )
    .await;
    let from = |ip: [u8; 4]| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(std::net::SocketAddr::from((ip, 0))).unwrap();
        socket.connect(server.addr).await.unwrap()
    };
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = from([127, 0, 0, 2]).await;
        s.write_all(b"G").await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut fourth = from([127, 0, 0, 2]).await;
    let (text, closed) = read_to_close(&mut fourth, Duration::from_secs(1)).await;
    assert!(
        closed && text.is_empty(),
        "a fourth connection of one address: {text:?}"
    );
    let mut other = from([127, 0, 0, 3]).await;
    let answer = request(&mut other, GET_OK).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn headers_dripped_byte_by_byte_are_cut_at_the_header_timeout() {
    let server = Server::start(quick(Limits::default()), None).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let mut closed_after = None;
    for b in GET_OK.bytes().cycle().take(200) {
        if s.write_all(&[b]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut one = [0u8; 256];
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(50), s.read(&mut one)).await {
            // EOF, or the 408 hyper sends before closing.
            closed_after = Some(started.elapsed());
            break;
        }
    }
    let after = closed_after.expect("the dripping connection stayed open for 10 s");
    assert!(
        after < Duration::from_millis(300) + Duration::from_secs(1),
        "closed only after {after:?}"
    );
}

#[tokio::test]
async fn an_idle_connection_is_closed_at_the_handshake_timeout() {
    let server = Server::start(quick(Limits::default()), None).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let (_, closed) = read_to_close(&mut s, Duration::from_millis(1300)).await;
    assert!(closed, "a connection that never sends a byte stays open");
}

#[tokio::test]
async fn a_body_one_byte_short_is_answered_408_and_its_connection_closed() {
    let server = Server::start(quick(Limits::default()), None).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"POST /len HTTP/1.1\r\nhost: t\r\ncontent-length: 10\r\n\r\n123456789")
        .await
        .unwrap();
    let started = Instant::now();
    let (text, closed) = read_to_close(&mut s, Duration::from_secs(2)).await;
    assert!(closed, "the connection stayed open: {text:?}");
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_millis(1300));
}

#[tokio::test]
async fn a_whole_body_within_the_timeout_is_served_and_the_connection_kept() {
    let server = Server::start(quick(Limits::default()), None).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    for _ in 0..2 {
        s.write_all(b"POST /len HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("\r\n5"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn requests_over_the_in_flight_cap_are_answered_503() {
    let server = Server::start(
        Limits {
            max_requests_in_flight: 1,
            ..Limits::default()
        },
        None,
    )
    .await;
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first
        .write_all(b"GET /wait HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    let answer = request(&mut second, GET_OK).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    server.gate.notify_one();
    let answer = read_to_close(&mut first, Duration::from_secs(5)).await.0;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    let answer = request(&mut third, GET_OK).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the slot was not freed: {answer}"
    );
}

#[tokio::test]
async fn bodies_held_open_cannot_take_more_than_the_body_budget() {
    let server = Server::start(
        Limits {
            max_body_bytes_in_flight: 1000,
            ..Limits::default()
        },
        None,
    )
    .await;
    // 800 bytes of a 900-byte body, held: charged until the request ends.
    let mut holder = TcpStream::connect(server.addr).await.unwrap();
    holder
        .write_all(b"POST /len HTTP/1.1\r\nhost: t\r\ncontent-length: 900\r\n\r\n")
        .await
        .unwrap();
    holder.write_all(&[b'x'; 800]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /len HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-length: 300\r\n\r\n";
    let answer = request(&mut second, &format!("{head}{}", "y".repeat(300))).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // Ending the held body frees its charge.
    holder.write_all(&[b'x'; 100]).await.unwrap();
    let mut buf = [0u8; 512];
    let n = holder.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).ends_with("\r\n900"));
    let mut third = TcpStream::connect(server.addr).await.unwrap();
    let answer = request(&mut third, &format!("{head}{}", "y".repeat(300))).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the charge was not released: {answer}"
    );
}

#[tokio::test]
async fn shutdown_drains_with_connection_close_then_finishes_the_open_request_and_accepts_nothing_new()
 {
    let mut server = Server::start(Limits::default(), None).await;
    let mut open = TcpStream::connect(server.addr).await.unwrap();
    open.write_all(b"GET /wait HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Draining: still served, but every answer closes its connection (a client never
    // reuses it, so no request races the server closing an idle keep-alive connection).
    let mut late = TcpStream::connect(server.addr)
        .await
        .expect("not accepting while draining");
    late.write_all(b"GET /ok HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    let (answer, closed) = read_to_close(&mut late, Duration::from_secs(5)).await;
    assert!(
        answer.starts_with("HTTP/1.1 200")
            && answer.to_ascii_lowercase().contains("connection: close")
            && closed,
        "{answer}"
    );
    tokio::time::sleep(SHUTDOWN_DRAIN + Duration::from_millis(300)).await;
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "still accepting after the drain"
    );
    server.gate.notify_one();
    let (answer, closed) = read_to_close(&mut open, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200") && closed, "{answer}");
    tokio::time::timeout(Duration::from_secs(5), server.done)
        .await
        .expect("serve did not return after its last connection closed")
        .unwrap()
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// TLS and client certificates
// ---------------------------------------------------------------------------------------

fn server_tls(client_ca: Option<&str>, allowed: &[&str]) -> ServerTls {
    ServerTls::load(TlsFiles {
        cert: testdata("server.pem"),
        key: testdata("server.key"),
        client_auth: client_ca.map(|ca| ClientAuthFiles {
            ca: testdata(ca),
            allowed_names: allowed.iter().map(|s| (*s).to_owned()).collect(),
        }),
    })
    .unwrap()
}

/// Connect over TLS (trusting the test server CA), presenting `client` (`<name>.pem` and
/// `<name>.key`) if given; a GET /ok; the raw answer ("" when refused).
async fn tls_get(addr: SocketAddr, client: Option<&str>) -> String {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(testdata("server-ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(name) => {
            let certs = CertificateDer::pem_file_iter(testdata(&format!("{name}.pem")))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(testdata(&format!("{name}.key"))).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let Ok(mut tls) = connector.connect(name, tcp).await else {
        return String::new();
    };
    if tls.write_all(GET_OK.as_bytes()).await.is_err() {
        return String::new();
    }
    read_to_close(&mut tls, Duration::from_secs(5)).await.0
}

#[tokio::test]
async fn tls_without_client_auth_serves_anyone() {
    let server = Server::start(Limits::default(), Some(server_tls(None, &[]))).await;
    assert!(tls_get(server.addr, None).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_client_ca_refuses_clients_without_a_certificate_it_signed() {
    let server = Server::start(
        Limits::default(),
        Some(server_tls(Some("client-ca.pem"), &[])),
    )
    .await;
    assert_eq!(tls_get(server.addr, None).await, "", "no certificate");
    assert_eq!(
        tls_get(server.addr, Some("stranger")).await,
        "",
        "another CA"
    );
    assert!(
        tls_get(server.addr, Some("client"))
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        tls_get(server.addr, Some("client-san"))
            .await
            .starts_with("HTTP/1.1 200")
    );
}

#[tokio::test]
async fn allowed_names_admit_a_listed_cn_or_dns_alt_name_only() {
    let by_cn = Server::start(
        Limits::default(),
        Some(server_tls(
            Some("client-ca.pem"),
            &["KARMADA-apiserver-webhook-client"],
        )),
    )
    .await;
    assert!(
        tls_get(by_cn.addr, Some("client"))
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert_eq!(
        tls_get(by_cn.addr, Some("client-san")).await,
        "",
        "unlisted names"
    );
    assert_eq!(
        tls_get(by_cn.addr, Some("stranger")).await,
        "",
        "listed CN, other CA"
    );

    let by_san = Server::start(
        Limits::default(),
        Some(server_tls(Some("client-ca.pem"), &["other.example"])),
    )
    .await;
    assert!(
        tls_get(by_san.addr, Some("client-san"))
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert_eq!(tls_get(by_san.addr, Some("client")).await, "");
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_cut_at_the_handshake_timeout() {
    // The header timeout is long: the handshake has its own, shorter one.
    let limits = Limits {
        header_read_timeout: Duration::from_secs(30),
        ..quick(Limits::default())
    };
    let server = Server::start(limits, Some(server_tls(None, &[]))).await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(&[0x16, 0x03, 0x01]).await.unwrap(); // a ClientHello that never comes
    let (_, closed) = read_to_close(&mut s, Duration::from_millis(1300)).await;
    assert!(closed, "the half-done handshake stays open");
}

#[tokio::test]
async fn a_changed_client_ca_bundle_is_picked_up_by_reload() {
    let dir = std::env::temp_dir().join(format!("kq-listener-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bundle = dir.join("ca.pem");
    std::fs::copy(testdata("client-ca.pem"), &bundle).unwrap();
    let tls = ServerTls::load(TlsFiles {
        cert: testdata("server.pem"),
        key: testdata("server.key"),
        client_auth: Some(ClientAuthFiles {
            ca: bundle.clone(),
            allowed_names: Vec::new(),
        }),
    })
    .unwrap();
    let server = Server::start(Limits::default(), Some(tls.clone())).await;
    assert_eq!(tls_get(server.addr, Some("stranger")).await, "");
    std::fs::copy(testdata("other-ca.pem"), &bundle).unwrap();
    tls.reload().unwrap();
    assert!(
        tls_get(server.addr, Some("stranger"))
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert_eq!(
        tls_get(server.addr, Some("client")).await,
        "",
        "the old CA still trusted"
    );
    // A broken bundle keeps the configuration in force.
    std::fs::write(&bundle, "not a certificate").unwrap();
    let err = tls.reload().unwrap_err().to_string();
    assert!(err.contains(&bundle.display().to_string()), "{err}");
    assert!(
        tls_get(server.addr, Some("stranger"))
            .await
            .starts_with("HTTP/1.1 200")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_that_do_not_load_are_named_in_the_error() {
    let missing = testdata("missing.pem");
    let err = ServerTls::load(TlsFiles {
        cert: missing.clone(),
        key: testdata("server.key"),
        client_auth: None,
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("certificate") && err.contains(&missing.display().to_string()),
        "{err}"
    );
    let err = ServerTls::load(TlsFiles {
        cert: testdata("server.pem"),
        key: testdata("client.key"),
        client_auth: None,
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("server.pem") && err.contains("client.key"),
        "{err}"
    );
}

#[test]
fn flags_default_to_the_documented_bounds() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        listener: ListenerArgs,
    }
    let cli = Cli::try_parse_from(["t"]).unwrap();
    assert_eq!(cli.listener.limits(), Limits::default());
    let cli =
        Cli::try_parse_from(["t", "--header-read-timeout=1s", "--max-connections=7"]).unwrap();
    assert_eq!(cli.listener.limits().max_connections, 7);
    assert_eq!(
        cli.listener.limits().header_read_timeout,
        Duration::from_secs(1)
    );
    assert!(Cli::try_parse_from(["t", "--max-connections=0"]).is_err());
    let cli = Cli::try_parse_from([
        "t",
        "--tls-handshake-timeout=500ms",
        "--max-pending-connections=8",
        "--max-connections-per-peer=9",
    ])
    .unwrap();
    let l = cli.listener.limits();
    assert_eq!(
        (
            l.tls_handshake_timeout,
            l.max_pending_connections,
            l.max_connections_per_peer
        ),
        (Duration::from_millis(500), 8, 9)
    );
    assert!(Cli::try_parse_from(["t", "--max-pending-connections=0"]).is_err());
}
