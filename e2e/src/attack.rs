//! What the attack tests do to a listener, on 127.0.0.1 only: raw TLS clients with or
//! without a client certificate, requests dripped or held one byte short, floods of held
//! connections (bounded in count and time), and the target's resident memory
//! (`VmRSS` of /proc/<pid>/status) sampled while it lasts.
//!
//! ```text
//!  tls_connector(server CA, client cert?) ─► raw_request(addr, tls?, bytes): the answer,
//!                                            or the error that ended the exchange
//!  drip(addr, tls?, bytes, every)        ─► how long until the server closed
//!  flood(addr, tls?, n, head, body_len)  ─► n connections at once, each sending a body one
//!                                            byte short and holding it: which were closed
//!                                            at once, which were served, the peak RSS
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rcgen::{DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::certs::{self, Ca};

/// One MiB.
pub const MIB: u64 = 1024 * 1024;

/// `VmRSS` of process `pid`, in bytes.
pub fn vm_rss(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS line in {path}"))?;
    Ok(kb * 1024)
}

/// Samples the RSS of `pid` every 50 ms until dropped; [`RssPeak::peak`] is the highest.
pub struct RssPeak {
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssPeak {
    /// Start sampling.
    pub fn start(pid: u32) -> RssPeak {
        let peak = Arc::new(AtomicU64::new(vm_rss(pid).unwrap_or(0)));
        let task = tokio::spawn({
            let peak = peak.clone();
            async move {
                loop {
                    if let Ok(rss) = vm_rss(pid) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        RssPeak { peak, task }
    }

    /// The highest RSS seen so far, in bytes.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssPeak {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TLS client configuration that trusts the CA in `server_ca` (PEM) and presents
/// `client` (certificate and key PEM files) when given.
pub fn tls_connector(server_ca: &Path, client: Option<(&Path, &Path)>) -> Result<TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(server_ca)
        .with_context(|| format!("reading {}", server_ca.display()))?
    {
        roots
            .add(cert.with_context(|| format!("parsing {}", server_ca.display()))?)
            .with_context(|| format!("trusting {}", server_ca.display()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .with_context(|| format!("reading {}", cert.display()))?
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("parsing {}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("reading {}", key.display()))?;
            builder.with_client_auth_cert(certs, key)?
        }
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A connection to a listener, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Connects to `addr`, over TLS (SNI 127.0.0.1) when `tls` is given.
pub async fn connect(addr: SocketAddr, tls: Option<&TlsConnector>) -> Result<Box<dyn Io>> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::try_from(addr.ip().to_string())?;
    let stream = tokio::time::timeout(Duration::from_secs(10), tls.connect(name, tcp))
        .await
        .map_err(|_| anyhow!("TLS handshake with {addr} took more than 10 s"))?
        .with_context(|| format!("TLS handshake with {addr}"))?;
    Ok(Box::new(stream))
}

/// Reads until the peer closes or `within` passes: (what was read, whether it closed; an
/// error counts as closed and is returned as the third element).
pub async fn read_until_closed(
    io: &mut (impl AsyncRead + Unpin + ?Sized),
    within: Duration,
) -> (String, bool, Option<String>) {
    let mut buf = Vec::new();
    let mut error = None;
    let closed = tokio::time::timeout(within, async {
        let mut chunk = [0u8; 8192];
        loop {
            match io.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&buf).into_owned(), closed, error)
}

/// Sends `request` (a whole HTTP/1.1 request with `connection: close`) and returns the raw
/// answer; an `Err` says how the exchange failed before any answer (e.g. the handshake
/// refused the client's certificate).
pub async fn raw_request(
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    request: &[u8],
) -> Result<String> {
    let mut io = connect(addr, tls).await?;
    io.write_all(request)
        .await
        .with_context(|| format!("sending to {addr}"))?;
    io.flush().await?;
    let (answer, _, error) = read_until_closed(&mut io, Duration::from_secs(10)).await;
    match error {
        Some(e) if answer.is_empty() => bail!("{addr} answered nothing: {e}"),
        _ if answer.is_empty() => bail!("{addr} closed the connection without an answer"),
        _ => Ok(answer),
    }
}

/// An HTTP/1.1 POST of `body` (JSON) to `path`, closing the connection after the answer.
pub fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// Sends `bytes` one at a time, `every` apart, until the server closes the connection;
/// the time from the first byte to the close (`None`: still open after `give_up`).
pub async fn drip(
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    bytes: &[u8],
    every: Duration,
    give_up: Duration,
) -> Result<Option<Duration>> {
    let mut io = connect(addr, tls).await?;
    let started = Instant::now();
    for b in bytes.iter().cycle() {
        if started.elapsed() > give_up {
            return Ok(None);
        }
        if io.write_all(&[*b]).await.is_err() || io.flush().await.is_err() {
            return Ok(Some(started.elapsed()));
        }
        let mut one = [0u8; 512];
        match tokio::time::timeout(every, io.read(&mut one)).await {
            // EOF, an error, or the 408 hyper sends as it closes.
            Ok(_) => return Ok(Some(started.elapsed())),
            Err(_) => continue,
        }
    }
    Ok(None)
}

/// How one connection of a [`flood`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FloodConn {
    /// Closed before a byte of the request was taken (over the connection cap).
    ClosedAtOnce,
    /// Served: the status line it got (e.g. 503 when the body budget was full, 408 at the
    /// body timeout), or empty when the server closed without one.
    Answered(String),
    /// Still held open by the server when the flood was released.
    Held,
}

/// Outcome of a [`flood`].
#[derive(Debug)]
pub struct Flood {
    /// Each connection's outcome.
    pub conns: Vec<FloodConn>,
    /// The target's RSS before the flood, bytes.
    pub rss_before: u64,
    /// The highest RSS sampled while the flood lasted, bytes.
    pub rss_peak: u64,
}

impl Flood {
    /// How many connections ended as `pred` says.
    pub fn count(&self, pred: impl Fn(&FloodConn) -> bool) -> usize {
        self.conns.iter().filter(|c| pred(c)).count()
    }

    /// Connections closed at once.
    pub fn closed_at_once(&self) -> usize {
        self.count(|c| *c == FloodConn::ClosedAtOnce)
    }

    /// Peak RSS growth over the RSS before, in MiB.
    pub fn growth_mib(&self) -> f64 {
        self.rss_peak.saturating_sub(self.rss_before) as f64 / MIB as f64
    }
}

/// `n` connections to `addr` at once, each sending `head` (request head ending in an empty
/// line, declaring `content-length: body_len`) and then `body_len - 1` bytes, and holding
/// the request open for `hold`; the RSS of `pid` is sampled throughout. Every connection
/// is dropped before this returns.
pub async fn flood(
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    n: usize,
    head: &str,
    body_len: usize,
    hold: Duration,
    pid: u32,
) -> Result<Flood> {
    let rss_before = vm_rss(pid)?;
    let sampler = RssPeak::start(pid);
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let body = Arc::new(vec![b'x'; body_len.saturating_sub(1)]);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (tls, head, body) = (tls.cloned(), head.to_owned(), body.clone());
        let mut release = release_rx.clone();
        tasks.push(tokio::spawn(async move {
            let conn = async {
                let Ok(mut io) = connect(addr, tls.as_ref()).await else {
                    return FloodConn::ClosedAtOnce;
                };
                if tls.is_none() {
                    // A plain connection over the cap reads EOF at once.
                    let mut probe = [0u8; 1];
                    if let Ok(Ok(0) | Err(_)) =
                        tokio::time::timeout(Duration::from_millis(300), io.read(&mut probe)).await
                    {
                        return FloodConn::ClosedAtOnce;
                    }
                }
                if io.write_all(head.as_bytes()).await.is_err() {
                    return FloodConn::ClosedAtOnce;
                }
                for chunk in body.chunks(64 * 1024) {
                    if io.write_all(chunk).await.is_err() {
                        break;
                    }
                }
                let (answer, _, _) = read_until_closed(&mut io, Duration::from_secs(3600)).await;
                FloodConn::Answered(answer.lines().next().unwrap_or_default().to_owned())
            };
            tokio::select! {
                outcome = conn => outcome,
                _ = release.wait_for(|r| *r) => FloodConn::Held,
            }
        }));
    }
    tokio::time::sleep(hold).await;
    let rss_peak = sampler.peak();
    let _ = release_tx.send(true);
    let mut conns = Vec::with_capacity(n);
    for t in tasks {
        conns.push(t.await.context("a flood connection panicked")?);
    }
    Ok(Flood {
        conns,
        rss_before,
        rss_peak: rss_peak.max(sampler.peak()),
    })
}

/// A client certificate (CN `cn`, serial 7, basicConstraints CA:FALSE, keyUsage
/// digitalSignature, extendedKeyUsage clientAuth) signed by a CA made for it alone
/// (`CN=kq-e2e-foreign-ca`), both valid for 2 days, in `dir`: (CA, certificate, key) PEM
/// paths. A certificate the webhook's client CA never signed.
pub async fn foreign_client_cert(dir: &Path, cn: &str) -> Result<(PathBuf, PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let p = |f: &str| dir.join(f);
    let ca = Ca::new("kq-e2e-foreign-ca", 2)?;
    let mut client = certs::leaf(&[(DnType::CommonName, cn)], 7, 2)?;
    client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    ca.write(&p("ca.pem"))?;
    ca.issue(&client)?
        .write(&p("client.pem"), &p("client.key"))
        .context("foreign client certificate")?;
    Ok((p("ca.pem"), p("client.pem"), p("client.key")))
}
