//! A listener's TLS configuration from PEM files: the serving certificate and key, and
//! optionally a client CA (mutual TLS: a client certificate signed by it is required
//! during the handshake, and with allowed names one of them must be the certificate's CN
//! or a DNS subjectAltName). Every file is reloaded when it changes, so rotated
//! certificates and CA bundles need no restart.

use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ServerConfig, WebPkiClientVerifier};

use super::client_names::AllowedNames;

/// The files a TLS listener serves from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain served.
    pub cert: PathBuf,
    /// PEM private key of `cert`.
    pub key: PathBuf,
    /// Mutual TLS: which client certificates are accepted (`None`: no client certificate
    /// is asked for).
    pub client_auth: Option<ClientAuthFiles>,
}

/// Client authentication of a TLS listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuthFiles {
    /// PEM bundle of the CAs a client certificate must chain to.
    pub ca: PathBuf,
    /// When not empty, the client certificate's CN or one of its DNS subjectAltNames
    /// must be one of these (ASCII case ignored).
    pub allowed_names: Vec<String>,
}

/// Why a TLS configuration could not be built; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read the {what} {path}: {source}")]
    Pem {
        /// What the file is for (`certificate`, `private key`, `client CA bundle`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O or PEM error.
        source: rustls::pki_types::pem::Error,
    },
    /// A PEM file held no certificate.
    #[error("the {what} {path} holds no certificate")]
    Empty {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A client CA certificate was refused as a trust anchor.
    #[error("the client CA bundle {path} holds a certificate that is no usable CA: {source}")]
    BadCa {
        /// The bundle.
        path: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
    /// The client-certificate verifier could not be built.
    #[error("cannot verify client certificates with the CA bundle {path}: {source}")]
    Verifier {
        /// The bundle.
        path: PathBuf,
        /// What rustls said.
        source: rustls::server::VerifierBuilderError,
    },
    /// The certificate and key do not make a server configuration (e.g. they do not match).
    #[error("cannot serve the certificate {cert} with the key {key}: {source}")]
    Config {
        /// The certificate.
        cert: PathBuf,
        /// The key.
        key: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
}

/// A listener's current TLS configuration; clones share it. Each new connection gets
/// the configuration current when it was accepted.
#[derive(Clone, Debug)]
pub struct ServerTls {
    files: Arc<TlsFiles>,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl ServerTls {
    /// Load `files` (ring as the crypto provider, whatever the process default).
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let config = build(&files)?;
        Ok(Self {
            files: Arc::new(files),
            current: Arc::new(RwLock::new(Arc::new(config))),
        })
    }

    /// The configuration new connections get now.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }

    /// Whether a client certificate is required.
    pub fn client_auth_required(&self) -> bool {
        self.files.client_auth.is_some()
    }

    /// The files served.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Load the files again; on failure the current configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(build(&self.files)?);
        *self.current.write() = config;
        Ok(())
    }

    /// Poll the files' modification times every `interval` and reload when one changed
    /// (mounted Secrets change through a symlink swap; metadata follows it). A reload that
    /// fails (e.g. the key not yet rotated with the certificate) keeps the current
    /// configuration and is tried again on the next tick. Runs forever; spawn it.
    pub async fn reload_on_change(self, interval: Duration) {
        let mut seen = self.mtimes().await;
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = self.mtimes().await;
            if now.is_none() || now == seen {
                continue;
            }
            match self.reload() {
                Ok(()) => {
                    tracing::info!(cert = %self.files.cert.display(), client_ca = ?self.files.client_auth.as_ref().map(|c| c.ca.display().to_string()), "TLS certificate reloaded");
                    seen = now;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TLS reload failed; keeping the current configuration");
                }
            }
        }
    }

    async fn mtimes(&self) -> Option<Vec<SystemTime>> {
        let mut paths = vec![&self.files.cert, &self.files.key];
        if let Some(auth) = &self.files.client_auth {
            paths.push(&auth.ca);
        }
        let mut times = Vec::with_capacity(paths.len());
        for p in paths {
            times.push(tokio::fs::metadata(p).await.ok()?.modified().ok()?);
        }
        Some(times)
    }
}

fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        what,
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn build(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certificates(&files.cert, "certificate")?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| TlsError::Pem {
        what: "private key",
        path: files.key.clone(),
        source,
    })?;
    let config_error = |source| TlsError::Config {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?;
    let builder = match &files.client_auth {
        None => builder.with_no_client_auth(),
        Some(auth) => builder.with_client_cert_verifier(client_verifier(auth, provider)?),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(config_error)?;
    // HTTP/1.1 only: one request per connection at a time, so the connection cap bounds
    // requests, and the header timeout applies (see the module doc of `listener`).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn client_verifier(
    auth: &ClientAuthFiles,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in certificates(&auth.ca, "client CA bundle")? {
        roots.add(ca).map_err(|source| TlsError::BadCa {
            path: auth.ca.clone(),
            source,
        })?;
    }
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|source| TlsError::Verifier {
            path: auth.ca.clone(),
            source,
        })?;
    if auth.allowed_names.is_empty() {
        return Ok(inner);
    }
    Ok(Arc::new(AllowedNames {
        inner,
        names: auth.allowed_names.clone(),
    }))
}
