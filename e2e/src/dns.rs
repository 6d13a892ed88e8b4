//! A DNS server on a loopback address, answering A queries for the names it is given:
//! the cluster DNS of a test that runs a binary with a `resolv.conf` of its own (the
//! image test: member endpoints and the apiserver reached by name from inside the image).
//!
//! ```text
//!  DnsServer::start(&[("kubernetes.default.svc", 127.0.0.1)])
//!       binds 127.53.<a>.<b>:53 (UDP; port 53 because resolv.conf names no port)
//!       A of a known name → its address; AAAA of a known name → no answer (NOERROR);
//!       anything else → NXDOMAIN
//!  .resolv_conf()      "nameserver 127.53.<a>.<b>" and short timeouts
//!  .queries(name)      how many queries for `name` arrived (either type)
//! ```

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use anyhow::{Context, Result};
use parking_lot::Mutex;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
/// Header flags of an answer: QR, RD, RA; the RCODE is or-ed in.
const FLAGS_ANSWER: u16 = 0x8180;
const RCODE_NXDOMAIN: u16 = 3;

/// The server; stops when dropped.
#[derive(Debug)]
pub struct DnsServer {
    addr: SocketAddr,
    queries: Arc<Mutex<BTreeMap<String, usize>>>,
    task: JoinHandle<()>,
}

impl DnsServer {
    /// Serves `names` (lower case, no trailing dot) on a loopback address of its own.
    pub async fn start(names: &[(&str, Ipv4Addr)]) -> Result<DnsServer> {
        let pid = std::process::id();
        let ip = Ipv4Addr::new(127, 53, ((pid >> 8) % 250) as u8 + 1, (pid % 250) as u8 + 2);
        let addr = SocketAddr::from((ip, 53));
        let socket = UdpSocket::bind(addr)
            .await
            .with_context(|| format!("binding the test DNS server to {addr} (needs root)"))?;
        let table: BTreeMap<String, Ipv4Addr> =
            names.iter().map(|(n, a)| ((*n).to_owned(), *a)).collect();
        let queries = Arc::new(Mutex::new(BTreeMap::new()));
        let seen = queries.clone();
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let Some((name, answer)) = respond(&buf[..n], &table) else {
                    continue;
                };
                *seen.lock().entry(name).or_insert(0) += 1;
                let _ = socket.send_to(&answer, peer).await;
            }
        });
        Ok(DnsServer {
            addr,
            queries,
            task,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A `resolv.conf` naming only this server.
    pub fn resolv_conf(&self) -> String {
        format!(
            "nameserver {}\noptions timeout:1 attempts:2\n",
            self.addr.ip()
        )
    }

    /// Queries received for `name` (A and AAAA).
    pub fn queries(&self, name: &str) -> usize {
        self.queries.lock().get(name).copied().unwrap_or(0)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The queried name (lower case) and the answer to `query`; `None` for a packet that is
/// not one well-formed question.
fn respond(query: &[u8], table: &BTreeMap<String, Ipv4Addr>) -> Option<(String, Vec<u8>)> {
    if query.len() < 12 || u16::from_be_bytes([query[4], query[5]]) != 1 {
        return None;
    }
    let mut labels = Vec::new();
    let mut i = 12;
    loop {
        let len = usize::from(*query.get(i)?);
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        let label = query.get(i + 1..i + 1 + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        i += 1 + len;
    }
    let question_end = i + 5;
    let tail = query.get(i + 1..question_end)?;
    let qtype = u16::from_be_bytes([tail[0], tail[1]]);
    let qclass = u16::from_be_bytes([tail[2], tail[3]]);
    let name = labels.join(".");
    let known = table.get(&name);
    let address = known.filter(|_| qtype == TYPE_A && qclass == CLASS_IN);
    let rcode = if known.is_some() { 0 } else { RCODE_NXDOMAIN };
    let mut answer = Vec::with_capacity(question_end + 16);
    answer.extend_from_slice(&query[..2]);
    answer.extend_from_slice(&(FLAGS_ANSWER | rcode).to_be_bytes());
    answer.extend_from_slice(&1u16.to_be_bytes());
    answer.extend_from_slice(&u16::from(address.is_some()).to_be_bytes());
    answer.extend_from_slice(&[0, 0, 0, 0]);
    answer.extend_from_slice(&query[12..question_end]);
    if let Some(a) = address {
        // A pointer to the question's name, type A, class IN, TTL 5 s, 4 bytes.
        answer.extend_from_slice(&[0xc0, 0x0c]);
        answer.extend_from_slice(&TYPE_A.to_be_bytes());
        answer.extend_from_slice(&CLASS_IN.to_be_bytes());
        answer.extend_from_slice(&5u32.to_be_bytes());
        answer.extend_from_slice(&4u16.to_be_bytes());
        answer.extend_from_slice(&a.octets());
    }
    Some((name, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    #[test]
    fn answers_known_names_and_refuses_others() {
        let table = BTreeMap::from([("a.b".to_owned(), Ipv4Addr::new(127, 0, 0, 1))]);
        let (name, a) = respond(&query("A.b", TYPE_A), &table).unwrap();
        assert_eq!(name, "a.b");
        assert_eq!(&a[..2], &[0x12, 0x34]);
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 1, "one answer");
        assert_eq!(&a[a.len() - 4..], &[127, 0, 0, 1]);
        let (_, aaaa) = respond(&query("a.b", 28), &table).unwrap();
        assert_eq!(u16::from_be_bytes([aaaa[2], aaaa[3]]) & 0xf, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([aaaa[6], aaaa[7]]), 0, "no AAAA");
        let (_, nx) = respond(&query("c.d", TYPE_A), &table).unwrap();
        assert_eq!(u16::from_be_bytes([nx[2], nx[3]]) & 0xf, RCODE_NXDOMAIN);
        assert!(respond(&[0; 5], &table).is_none(), "a short packet");
        assert!(
            respond(&query("a.b", TYPE_A)[..14], &table).is_none(),
            "cut"
        );
    }
}
