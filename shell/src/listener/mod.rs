//! Hardened listeners: every HTTP(S) port of both binaries (the webhook's HTTPS port, the
//! admin ports, the dashboard) is served here, so each has the same bounds.
//!
//! ```text
//!  TcpListener::accept ─► slots (slots.rs): --max-connections-per-peer per source (IPv4, IPv6 /64; past
//!        │ it, that IP's oldest silent pending connection is evicted, else the new one
//!        │ closed at once); --max-connections in all, --max-pending-connections of them
//!        │ pending: when full, the oldest silent pending connection is evicted for the
//!        │ new one (established ones never; all established → closed at once)
//!        ▼  one task per connection, holding its slot, pending until:
//!  [TLS] rustls handshake (ServerTls: certificate reloaded on change; with a client CA the
//!        │ handshake fails without a certificate it signed / a name --client-allowed-names
//!        │ lists), bounded by --tls-handshake-timeout; plain HTTP: its first byte, in the
//!        │ same time
//!        ▼  established
//!  hyper HTTP/1.1: the request head must arrive within --header-read-timeout (also the
//!        │ idle time allowed between two requests of a kept-alive connection)
//!        ▼
//!  guard::handle: in-flight cap (--max-requests-in-flight → 503), the body wrapped so that
//!        │ it must end within --body-read-timeout (→ 408, connection closed) and every byte
//!        │ buffered is charged to the listener's body budget (--max-body-bytes-in-flight →
//!        │ 503, connection closed) until the response is produced
//!        ▼
//!  the component's axum Router (its own per-route body limits apply on top; each request
//!  carries the client's address as `axum::extract::ConnectInfo<SocketAddr>`)
//! ```
//!
//! Saturation is logged (rate-limited: evictions of pending connections, refusals per
//! peer and when every slot is established) and counted (`metrics`:
//! `kq_listener_pending_evicted_total`, `kq_listener_connections_refused_total`), and
//! `/readyz` does not turn 503 for it: an
//! attacker who can fill one replica's slots can fill every replica's, and readiness
//! going 503 would take each out of the Service, turning a degraded webhook into none
//! (with `failurePolicy: Fail`, every binding refused). Evicting pending connections
//! keeps the apiserver's connections passing instead.
//!
//! Only HTTP/1.1 is served (ALPN offers `http/1.1`): one request in flight per connection,
//! so the connection cap bounds the requests, and hyper's header timeout applies.
//! Shutdown stops accepting, asks every connection to finish its request and close, and
//! waits for them at most [`GRACEFUL_SHUTDOWN`].

mod client_names;
mod guard;
pub mod metrics;
mod slots;
pub mod tls;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use slots::{Refused, Slot, SlotLimits, Slots};

pub use tls::{ClientAuthFiles, ServerTls, TlsError, TlsFiles};

/// How long open requests may finish after shutdown was requested.
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(10);

/// After shutdown is requested, how long the listener still serves, answering every
/// request with `Connection: close`, before it stops accepting. A keep-alive connection
/// closed by the server while idle races a request the client sends on it at that moment
/// (the client gets EOF: with `failurePolicy: Fail`, a refused admission during a
/// rollout); a connection closed after a response that says so is never reused. So
/// clients that keep sending (the apiserver under load) move to fresh connections (the
/// new pod, once the endpoint is gone) before anything is cut.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);

/// Largest read buffer of one connection (hyper's default is ~400 KiB): request heads of
/// these APIs are a few KiB, and 512 connections × 64 KiB stays small.
const MAX_READ_BUFFER: usize = 64 * 1024;

/// Refused handshakes and connections over the cap are logged at most once per this
/// interval per listener (an attacker must not be able to flood the log).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Listener limit flags, flattened into each binary's flags; every listener of the binary
/// gets its own set of these bounds.
#[derive(Clone, Debug, clap::Args)]
pub struct ListenerArgs {
    /// Most TCP connections one listener holds open at once (webhook HTTPS, admin,
    /// dashboard each have their own); a connection over it is closed at once.
    #[arg(long, env = "KQ_MAX_CONNECTIONS", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Most connections of one source IP (an IPv6 source: its /64) a listener holds at
    /// once, pending and established: one address cannot take every slot (past it, the address's own oldest
    /// silent pending connection is evicted; all established: the new one is closed).
    /// Behind a NAT or a proxy every client shares an address: raise it there.
    #[arg(long, env = "KQ_MAX_CONNECTIONS_PER_PEER", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_peer: u32,

    /// Most connections that have not completed their TLS handshake (plain HTTP: not sent
    /// a byte) a listener holds; a new connection past it, or past --max-connections,
    /// evicts the oldest silent one. Keeps the other slots for clients that proved
    /// themselves: idle connections cannot crowd out the apiserver. Half of
    /// --max-connections by default: a real burst of new connections fits.
    #[arg(long, env = "KQ_MAX_PENDING_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_connections: u32,

    /// A connection must complete its TLS handshake (plain HTTP: send its first byte)
    /// within this long; else it is closed. Short: a real client's ClientHello comes at
    /// once, and a pending slot held longer only serves whoever holds it idle.
    #[arg(long, env = "KQ_TLS_HANDSHAKE_TIMEOUT", default_value = "2s", value_parser = crate::duration::parse)]
    pub tls_handshake_timeout: Duration,

    /// After its handshake, a connection must send each request's headers within this
    /// long (also the idle time allowed between two requests on a kept-alive
    /// connection); else it is closed.
    #[arg(long, env = "KQ_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = crate::duration::parse)]
    pub header_read_timeout: Duration,

    /// A request's whole body must arrive within this long after its headers; else the
    /// request is answered 408 and its connection closed.
    #[arg(long, env = "KQ_BODY_READ_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub body_read_timeout: Duration,

    /// Most requests one listener handles at once; one more is answered 503 at once.
    #[arg(long, env = "KQ_MAX_REQUESTS_IN_FLIGHT", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_requests_in_flight: u32,

    /// Most request-body bytes one listener holds at once, over all its requests (a body
    /// is charged as it arrives, until its response is produced); a request that would
    /// exceed it is answered 503 and its connection closed. Bounds the memory a flood of
    /// large, slow bodies can take, whatever each route's own body limit.
    #[arg(long, env = "KQ_MAX_BODY_BYTES_IN_FLIGHT", default_value_t = 32 * 1024 * 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_body_bytes_in_flight: u32,
}

impl ListenerArgs {
    /// The limits these flags give.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            max_pending_connections: self.max_pending_connections,
            tls_handshake_timeout: self.tls_handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            max_requests_in_flight: self.max_requests_in_flight,
            max_body_bytes_in_flight: self.max_body_bytes_in_flight,
        }
    }
}

/// The bounds of one listener (see [`ListenerArgs`] for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at once.
    pub max_connections: u32,
    /// Open connections of one source IP at once.
    pub max_connections_per_peer: u32,
    /// Connections before their handshake (plain: their first byte) at once.
    pub max_pending_connections: u32,
    /// The TLS handshake (plain: the first byte).
    pub tls_handshake_timeout: Duration,
    /// Each request head (and keep-alive idle time).
    pub header_read_timeout: Duration,
    /// A request's whole body, from its head on.
    pub body_read_timeout: Duration,
    /// Requests handled at once.
    pub max_requests_in_flight: u32,
    /// Request-body bytes held at once.
    pub max_body_bytes_in_flight: u32,
}

impl Default for Limits {
    /// The flags' defaults.
    fn default() -> Self {
        Self {
            max_connections: 512,
            max_connections_per_peer: 256,
            max_pending_connections: 256,
            tls_handshake_timeout: Duration::from_secs(2),
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(10),
            max_requests_in_flight: 256,
            max_body_bytes_in_flight: 32 * 1024 * 1024,
        }
    }
}

/// Bind `addr` for the listener called `what` (named in the error).
pub async fn bind(addr: SocketAddr, what: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {what} address {addr}: {e}"),
        )
    })
}

/// Serve `router` on `listener` within `limits`, over TLS when `tls` is given, until
/// `shutdown` resolves; then stop accepting and give open requests [`GRACEFUL_SHUTDOWN`].
/// `what` names the listener in logs. Errors of single connections are logged at debug
/// and never end the server.
pub async fn serve(
    what: &'static str,
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        listener = what,
        tls = tls.is_some(),
        client_auth = tls.as_ref().is_some_and(ServerTls::client_auth_required),
        max_connections = limits.max_connections,
        max_connections_per_peer = limits.max_connections_per_peer,
        max_pending_connections = limits.max_pending_connections,
        tls_handshake_timeout = ?limits.tls_handshake_timeout,
        header_read_timeout = ?limits.header_read_timeout,
        body_read_timeout = ?limits.body_read_timeout,
        "listening"
    );
    let slots = Slots::new(SlotLimits {
        max_connections: limits.max_connections,
        max_pending: limits.max_pending_connections,
        max_per_peer: limits.max_connections_per_peer,
    });
    let guards = Arc::new(guard::Guards::new(&limits));
    let saturated = Saturation::new(what);
    let refused = Arc::new(RateLog::new(what, "TLS handshake failed"));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (drain_tx, drain_rx) = watch::channel(false);
    let shutdown = async move {
        shutdown.await;
        tracing::info!(%addr, listener = what, drain = ?SHUTDOWN_DRAIN, "shutting down: answering with Connection: close");
        let _ = drain_tx.send(true);
        tokio::time::sleep(SHUTDOWN_DRAIN).await;
    };
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // EMFILE and the like: wait a little instead of spinning.
                    tracing::warn!(listener = what, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let evicted_before = slots.evicted();
        let (slot, evicted) = match slots.admit(peer.ip(), has_bytes(&stream)) {
            Ok(admitted) => admitted,
            Err(why) => {
                saturated.refused(why, &peer, &slots);
                drop(stream);
                continue;
            }
        };
        if slots.evicted() != evicted_before {
            saturated.evicted(&peer, &slots);
        }
        tokio::spawn(connection(Connection {
            stream,
            peer,
            slot,
            evicted,
            router: router.clone(),
            guards: guards.clone(),
            tls: tls.clone(),
            tls_handshake_timeout: limits.tls_handshake_timeout,
            header_read_timeout: limits.header_read_timeout,
            refused: refused.clone(),
            stop: stop_rx.clone(),
            draining: drain_rx.clone(),
        }));
        // Let the new connection's task (and those its bytes woke) run before the next
        // accept: a flood of accepts must not evict a connection whose ClientHello is
        // there but not yet seen.
        tokio::task::yield_now().await;
    }
    drop(listener);
    let _ = stop_tx.send(true);
    tracing::info!(%addr, listener = what, "stopped accepting; finishing open requests");
    let all = async {
        while slots.held() != (0, 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(GRACEFUL_SHUTDOWN, all).await.is_err() {
        tracing::warn!(%addr, listener = what, "open connections cut after the shutdown grace");
    }
    Ok(())
}

/// One accepted connection and what serving it needs.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    /// Released when the connection ends.
    slot: Slot,
    /// Fires when the slot, still pending, was given to a newer connection.
    evicted: slots::Evicted,
    router: Router,
    guards: Arc<guard::Guards>,
    tls: Option<ServerTls>,
    tls_handshake_timeout: Duration,
    header_read_timeout: Duration,
    refused: Arc<RateLog>,
    stop: watch::Receiver<bool>,
    /// Shutdown was requested: every response closes its connection.
    draining: watch::Receiver<bool>,
}

async fn connection(c: Connection) {
    let Connection {
        stream,
        peer,
        slot,
        evicted,
        tls,
        refused,
        tls_handshake_timeout,
        ..
    } = c;
    let serving = Serving {
        peer,
        router: c.router,
        guards: c.guards,
        header_read_timeout: c.header_read_timeout,
        stop: c.stop,
        draining: c.draining,
    };
    let _ = stream.set_nodelay(true);
    let pending = pending(stream, &slot, tls.as_ref());
    let ended = tokio::select! {
        _ = evicted => return, // the slot went to a newer connection (logged by the accept loop)
        r = tokio::time::timeout(tls_handshake_timeout, pending) => r,
    };
    let established = match ended {
        Ok(Ok(e)) => e,
        Ok(Err(why)) => return log_refused(tls.is_some(), &refused, &peer, &why),
        Err(_) => {
            let why = "not complete within --tls-handshake-timeout";
            return log_refused(tls.is_some(), &refused, &peer, why);
        }
    };
    if !slot.establish() {
        return;
    }
    match established {
        Established::Plain(s) => http(s, serving).await,
        Established::Tls(s) => http(*s, serving).await,
    }
    drop(slot);
}

/// A TLS connection that ended before its handshake completed is logged (rate-limited);
/// a plain one that never sent a byte is not (probes and scanners).
fn log_refused(tls: bool, refused: &RateLog, peer: &SocketAddr, why: &str) {
    if tls {
        refused.log(peer, why);
    }
}

/// A connection's pending stage: its first byte (marking it talking), then its TLS
/// handshake when the listener has TLS; the error says why it ended there.
async fn pending(
    stream: TcpStream,
    slot: &Slot,
    tls: Option<&ServerTls>,
) -> Result<Established, String> {
    let mut first = [0u8; 1];
    if !matches!(stream.peek(&mut first).await, Ok(n) if n > 0) {
        return Err("closed before its first byte".to_owned());
    }
    slot.talking();
    match tls {
        None => Ok(Established::Plain(stream)),
        Some(tls) => tokio_rustls::TlsAcceptor::from(tls.config())
            .accept(stream)
            .await
            .map(|s| Established::Tls(Box::new(s)))
            .map_err(|e| e.to_string()),
    }
}

/// A connection past its pending stage.
enum Established {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// Whether bytes from the peer are already waiting on `stream` (checked without waiting).
fn has_bytes(stream: &TcpStream) -> bool {
    let mut one = [0u8; 1];
    let mut buf = tokio::io::ReadBuf::new(&mut one);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    matches!(stream.poll_peek(&mut cx, &mut buf), std::task::Poll::Ready(Ok(n)) if n > 0)
}

/// What serving HTTP on one connection needs.
struct Serving {
    /// The client's address, given to every request as `axum::extract::ConnectInfo`.
    peer: SocketAddr,
    router: Router,
    guards: Arc<guard::Guards>,
    header_read_timeout: Duration,
    stop: watch::Receiver<bool>,
    draining: watch::Receiver<bool>,
}

async fn http<I>(io: I, serving: Serving)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Serving {
        peer,
        router,
        guards,
        header_read_timeout,
        mut stop,
        draining,
    } = serving;
    let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
        let (router, guards, draining) = (router.clone(), guards.clone(), draining.clone());
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        async move {
            let mut resp = guard::handle(router, guards, req).await?;
            if *draining.borrow() {
                resp.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(MAX_READ_BUFFER);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = async { let _ = stop.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The rate-limited log lines that say a listener is saturated.
struct Saturation {
    evicted: RateLog,
    peer_full: RateLog,
    full: RateLog,
}

impl Saturation {
    fn new(what: &'static str) -> Self {
        Self {
            evicted: RateLog::new(
                what,
                "listener saturated: a pending connection (no TLS handshake yet) evicted for a \
                 newer one (--max-pending-connections, --max-connections)",
            ),
            peer_full: RateLog::new(
                what,
                "connection closed: its source IP holds --max-connections-per-peer",
            ),
            full: RateLog::new(
                what,
                "listener saturated: connection closed, every slot is held by an established \
                 connection (--max-connections)",
            ),
        }
    }

    fn evicted(&self, peer: &SocketAddr, slots: &Slots) {
        metrics::evicted(self.evicted.what);
        self.evicted.log(peer, &held(slots));
    }

    fn refused(&self, why: Refused, peer: &SocketAddr, slots: &Slots) {
        match why {
            Refused::PeerFull => {
                metrics::refused(self.peer_full.what, "peer_full");
                self.peer_full.log(peer, &held(slots));
            }
            Refused::Full => {
                metrics::refused(self.full.what, "full");
                self.full.log(peer, &held(slots));
            }
        }
    }
}

fn held(slots: &Slots) -> String {
    let (pending, established) = slots.held();
    format!("pending {pending}, established {established}")
}

/// A log line that an attacker cannot multiply: at most one per [`LOG_EVERY`], with the
/// number of occurrences since the last line.
struct RateLog {
    what: &'static str,
    message: &'static str,
    started: Instant,
    /// Milliseconds after `started` of the last line (0: none yet).
    last_ms: AtomicU64,
    skipped: AtomicU64,
}

impl RateLog {
    fn new(what: &'static str, message: &'static str) -> Self {
        Self {
            what,
            message,
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    fn log(&self, peer: &SocketAddr, detail: &str) {
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && now - last < LOG_EVERY.as_millis() as u64 {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let skipped = self.skipped.swap(0, Ordering::Relaxed);
        // rustls' messages are short and fixed; still, never log more than a line.
        let detail: String = detail.chars().take(200).collect();
        tracing::warn!(listener = self.what, %peer, detail, skipped_since_last = skipped, "{}", self.message);
    }
}
