//! A Service on loopback: one address in front of endpoints the test changes while it
//! runs, as the endpoints controller changes a Service's endpoints during a rolling
//! update (a new pod added once ready, an old one removed when it terminates).
//!
//! ```text
//!  apiserver ──TLS──▶ 127.0.0.1:<service port> ══ Service ══▶ endpoints[n % len]
//!                        set_endpoints([old, new]) … set_endpoints([new])
//! ```
//!
//! Like kube-proxy, a connection stays with the endpoint it was handed to until either
//! end closes it: removing an endpoint stops new connections to it, and the pod's own
//! graceful shutdown ends the open ones. With no endpoint, a new connection is closed at
//! once (what a client of a Service without ready pods sees).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::proxy::forward;

/// The endpoints and how many connections each was handed.
#[derive(Debug, Default)]
struct Table {
    endpoints: Vec<SocketAddr>,
    handed: BTreeMap<SocketAddr, u64>,
    accepted: u64,
    without_endpoint: u64,
}

/// A loopback address forwarding each new connection to the next of its current
/// endpoints; stopped when dropped.
#[derive(Debug)]
pub struct Service {
    addr: SocketAddr,
    table: Arc<Mutex<Table>>,
    task: tokio::task::JoinHandle<()>,
}

impl Service {
    /// Listens on a free port of 127.0.0.1 in front of `endpoints`.
    pub async fn start(endpoints: Vec<SocketAddr>) -> Result<Service> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("service: binding 127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let table = Arc::new(Mutex::new(Table {
            endpoints,
            ..Table::default()
        }));
        let shared = table.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    res = listener.accept() => {
                        let Ok((inbound, _)) = res else { continue };
                        let backend = {
                            let mut t = shared.lock();
                            let n = t.accepted;
                            t.accepted += 1;
                            if t.endpoints.is_empty() {
                                t.without_endpoint += 1;
                                None
                            } else {
                                let b = t.endpoints[(n % t.endpoints.len() as u64) as usize];
                                *t.handed.entry(b).or_default() += 1;
                                Some(b)
                            }
                        };
                        // No endpoint: dropping the connection closes it.
                        if let Some(backend) = backend {
                            conns.spawn(forward(inbound, backend));
                        }
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(Service { addr, table, task })
    }

    /// The Service's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the endpoints new connections go to (open connections stay where they are).
    pub fn set_endpoints(&self, endpoints: Vec<SocketAddr>) {
        self.table.lock().endpoints = endpoints;
    }

    /// The current endpoints.
    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.table.lock().endpoints.clone()
    }

    /// Connections handed to `endpoint` so far.
    pub fn connections_to(&self, endpoint: SocketAddr) -> u64 {
        self.table
            .lock()
            .handed
            .get(&endpoint)
            .copied()
            .unwrap_or(0)
    }

    /// Connections closed at once because there was no endpoint.
    pub fn connections_without_endpoint(&self) -> u64 {
        self.table.lock().without_endpoint
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::tests::tagged;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    async fn tag_of(addr: SocketAddr) -> Option<u8> {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let mut tag = [0u8; 1];
        s.read_exact(&mut tag).await.ok()?;
        Some(tag[0])
    }

    #[tokio::test]
    async fn new_connections_follow_the_endpoints_as_they_change() {
        let (a, b) = (tagged(b'a').await, tagged(b'b').await);
        let svc = Service::start(vec![a]).await.unwrap();
        assert_eq!(tag_of(svc.addr()).await, Some(b'a'));
        svc.set_endpoints(vec![a, b]);
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(tag_of(svc.addr()).await.unwrap());
        }
        seen.sort_unstable();
        assert_eq!(seen, b"aabb");
        svc.set_endpoints(vec![b]);
        for _ in 0..3 {
            assert_eq!(tag_of(svc.addr()).await, Some(b'b'));
        }
        svc.set_endpoints(Vec::new());
        assert_eq!(tag_of(svc.addr()).await, None, "no endpoint: closed");
        assert_eq!(svc.connections_to(a), 3);
        assert_eq!(svc.connections_to(b), 5);
        assert_eq!(svc.connections_without_endpoint(), 1);
        assert!(svc.endpoints().is_empty());
    }
}
