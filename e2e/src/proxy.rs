//! A loopback TCP proxy that can be stopped and started again on the same port: a member
//! cluster "goes away" (connection refused, open connections cut) and comes back, without
//! touching the shared control plane's apiservers. In front of several backends it hands
//! each new connection to the next one in turn (two webhooks behind one URL).
//!
//! ```text
//!  controller ──TLS──▶ 127.0.0.1:<proxy port> ══ TcpProxy ══▶ 127.0.0.1:<member apiserver>
//!                         stop():  listener closed, every open connection cut
//!                         start(): listening again on the same port
//!  apiserver ──TLS──▶ 127.0.0.1:<proxy port> ══ TcpProxy::round_robin ══▶ webhook 1, 2, 1, …
//! ```
//!
//! TLS passes through untouched; the member's serving certificate is for 127.0.0.1 (and
//! the webhooks share theirs), so it verifies at the proxy's address as well.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// How long [`TcpProxy::start`] keeps retrying to bind its port again (a port a moment ago
/// in use by the same process is normally free at once; this only absorbs a slow close).
const REBIND_TIMEOUT: Duration = Duration::from_secs(5);

/// A proxy in front of `env`'s apiserver, and a kubeconfig through it (written to
/// `<log dir>/<label>-<pid>/kubeconfig-via-proxy`): a component started with it loses the
/// apiserver when the proxy stops, while the test's own client keeps it.
pub async fn apiserver_proxy(env: &crate::Env, label: &str) -> Result<(TcpProxy, PathBuf)> {
    let proxy = TcpProxy::start(server_addr(env.kubeconfig())?).await?;
    let dir = env
        .log_dir()
        .join(format!("{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let kubeconfig = dir.join("kubeconfig-via-proxy");
    kubeconfig_via(env.kubeconfig(), &proxy.url(), &kubeconfig)?;
    Ok((proxy, kubeconfig))
}

/// `kubeconfig` with its `server:` pointed at `server` (e.g. a proxy in front of the
/// apiserver), written to `path`.
pub fn kubeconfig_via(kubeconfig: &Path, server: &str, path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut replaced = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| match l.split_once("server:") {
            Some((indent, _)) => {
                replaced += 1;
                format!("{indent}server: {server}")
            }
            None => l.to_owned(),
        })
        .collect();
    if replaced != 1 {
        bail!("{} has {replaced} server lines", kubeconfig.display());
    }
    std::fs::write(path, out.join("\n") + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// The `host:port` of the `server:` of `kubeconfig`.
pub fn server_addr(kubeconfig: &Path) -> Result<std::net::SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.split_once("server:").map(|(_, s)| s.trim().to_owned()))
        .context("no server in the kubeconfig")?;
    server
        .trim_start_matches("https://")
        .parse()
        .with_context(|| format!("server {server}"))
}

/// A TCP proxy on 127.0.0.1 in front of one backend, or several taken in turn; stopped
/// when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    backends: Arc<[SocketAddr]>,
    accepted: Arc<AtomicU64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TcpProxy {
    /// Starts forwarding a free port of 127.0.0.1 to `backend`.
    pub async fn start(backend: SocketAddr) -> Result<TcpProxy> {
        TcpProxy::round_robin(vec![backend]).await
    }

    /// Starts forwarding a free port of 127.0.0.1 to `backends`, each new connection to
    /// the next one in turn.
    pub async fn round_robin(backends: Vec<SocketAddr>) -> Result<TcpProxy> {
        if backends.is_empty() {
            bail!("a proxy needs a backend");
        }
        let mut proxy = TcpProxy {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            backends: backends.into(),
            accepted: Arc::new(AtomicU64::new(0)),
            task: None,
        };
        proxy.listen().await?;
        Ok(proxy)
    }

    /// The proxy's address (the same across stop and start).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>`, for a Cluster's `apiEndpoint` or a kubeconfig.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The (first) backend connections are forwarded to.
    pub fn backend(&self) -> SocketAddr {
        self.backends[0]
    }

    /// Every backend, in the order connections are handed to them.
    pub fn backends(&self) -> &[SocketAddr] {
        &self.backends
    }

    /// Connections accepted so far (over every start).
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Whether it currently listens.
    pub fn is_running(&self) -> bool {
        self.task.is_some()
    }

    /// Stops listening and cuts every open connection: clients see connection refused (new
    /// connections) or a reset (open ones). Does nothing when already stopped.
    pub async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            // Aborting drops the listener and the JoinSet, which aborts every connection.
            let _ = task.await;
        }
    }

    /// Listens again on the same port. Does nothing when already running.
    pub async fn start_again(&mut self) -> Result<()> {
        if self.task.is_some() {
            return Ok(());
        }
        self.listen().await
    }

    async fn listen(&mut self) -> Result<()> {
        let started = std::time::Instant::now();
        let listener = loop {
            let bound = (|| {
                let socket = TcpSocket::new_v4()?;
                socket.set_reuseaddr(true)?;
                socket.bind(self.addr)?;
                socket.listen(128)
            })();
            match bound {
                Ok(l) => break l,
                Err(e) if self.addr.port() != 0 && started.elapsed() < REBIND_TIMEOUT => {
                    tracing::debug!(addr = %self.addr, error = %e, "proxy port busy; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("proxy: binding {}", self.addr));
                }
            }
        };
        self.addr = listener.local_addr()?;
        if self.addr.port() == 0 {
            bail!("proxy: bound to port 0");
        }
        let backends = self.backends.clone();
        let accepted = self.accepted.clone();
        self.task = Some(tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    res = listener.accept() => {
                        let Ok((inbound, _)) = res else { continue };
                        let n = accepted.fetch_add(1, Ordering::Relaxed);
                        let backend = backends[(n % backends.len() as u64) as usize];
                        conns.spawn(forward(inbound, backend));
                    }
                    // Reap finished connections so the set does not grow.
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        }));
        Ok(())
    }
}

/// Copies bytes both ways between `inbound` and a new connection to `backend`; a backend
/// that refuses the connection closes `inbound`.
pub(crate) async fn forward(inbound: TcpStream, backend: SocketAddr) {
    let _ = inbound.set_nodelay(true);
    let Ok(outbound) = TcpStream::connect(backend).await else {
        return; // closing the inbound connection is the answer
    };
    let _ = outbound.set_nodelay(true);
    let (mut a, mut b) = (inbound, outbound);
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// An echo server: what it reads, it writes back.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await?;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn forwards_refuses_when_stopped_and_comes_back_on_the_same_port() {
        let mut proxy = TcpProxy::start(echo().await).await.unwrap();
        let addr = proxy.addr();
        assert_eq!(round_trip(addr).await.unwrap(), b"ping");

        // An open connection is cut by stop().
        let mut open = TcpStream::connect(addr).await.unwrap();
        open.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).await.unwrap();
        proxy.stop().await;
        assert!(!proxy.is_running());
        let mut rest = Vec::new();
        let cut = tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest))
            .await
            .expect("the open connection ends");
        assert!(cut.is_err() || rest.is_empty(), "{cut:?} {rest:?}");
        assert!(round_trip(addr).await.is_err(), "refused while stopped");

        proxy.start_again().await.unwrap();
        assert_eq!(proxy.addr(), addr);
        assert_eq!(round_trip(addr).await.unwrap(), b"ping");
        assert!(proxy.connections() >= 3);
    }

    /// A server that answers every connection with `tag` and closes it.
    pub(crate) async fn tagged(tag: u8) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(&[tag]).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn round_robin_hands_connections_to_each_backend_in_turn() {
        let proxy = TcpProxy::round_robin(vec![tagged(b'a').await, tagged(b'b').await])
            .await
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
            let mut tag = [0u8; 1];
            s.read_exact(&mut tag).await.unwrap();
            seen.push(tag[0]);
        }
        assert_eq!(seen, b"abab");
        assert_eq!(proxy.connections(), 4);
        assert!(TcpProxy::round_robin(Vec::new()).await.is_err());
    }
}
