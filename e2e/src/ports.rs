//! Free loopback ports for the binaries a test starts, reserved across test processes.
//!
//! A port is free when asked and bound by the child later. nextest runs every test in its
//! own process, so two tests could be handed the same port in that gap. Each would then
//! start a binary on it: the second fails to bind, and the test talks to the other test's
//! process (it answered `/readyz` for it). So [`free_port`] also reserves the port for
//! [`RESERVED_FOR`] with a file created exclusively in a directory every test process
//! shares, and hands out no reserved port. The reservation also covers a test that stops
//! a binary and starts it again on the same port.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Once;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// How long a port stays reserved: longer than any test runs.
pub const RESERVED_FOR: Duration = Duration::from_secs(30 * 60);

/// Ports asked of the OS before giving up (each one reserved by another test).
const ATTEMPTS: usize = 256;

/// The shared directory of reservations: one empty file per port.
fn dir() -> PathBuf {
    std::env::temp_dir().join("karmada-quota-e2e-ports")
}

/// Whether the reservation file `path` is older than [`RESERVED_FOR`] (or unreadable).
fn stale(path: &std::path::Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map(|t| t.elapsed().unwrap_or_default() > RESERVED_FOR)
        .unwrap_or(true)
}

/// Removes the stale reservations, once per process.
fn sweep() {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| {
        let Ok(entries) = std::fs::read_dir(dir()) else {
            return;
        };
        for e in entries.flatten() {
            if stale(&e.path()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    });
}

/// A free TCP port on 127.0.0.1, reserved for this test process (bind it soon).
pub fn free_port() -> Result<u16> {
    let dir = dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    sweep();
    for _ in 0..ATTEMPTS {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("binding 127.0.0.1:0")?
            .port();
        let path = dir.join(port.to_string());
        if path.exists() && stale(&path) {
            let _ = std::fs::remove_file(&path);
        }
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => return Ok(port),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("reserving {}", path.display())),
        }
    }
    bail!(
        "no free port on 127.0.0.1 in {ATTEMPTS} tries: every one was reserved by another test \
         (reservations in {})",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_handed_out_once_while_reserved() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ports.len(),
            "a port handed out twice: {ports:?}"
        );
        for p in ports {
            assert!(dir().join(p.to_string()).exists(), "port {p} not reserved");
            TcpListener::bind(("127.0.0.1", p)).expect("a reserved port is free to bind");
        }
    }
}
