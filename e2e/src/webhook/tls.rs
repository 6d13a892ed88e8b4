//! The webhook's TLS material in the tests: one CA and serving certificate for 127.0.0.1
//! per test process ([`WebhookTls::get`]), other pairs for rotation tests
//! ([`WebhookTls::generate_as`]), and certificate fingerprints (of a file, and of what an
//! address serves now), made in process ([`crate::certs`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use rcgen::{DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio::sync::OnceCell;
use tokio_rustls::TlsConnector;

use crate::Env;
use crate::certs::{self, Ca};

/// How long the webhook's certificates are valid, in days.
const DAYS: u32 = 30;

/// A CA and a serving certificate for 127.0.0.1 signed by it, made once per test process.
#[derive(Debug)]
pub struct WebhookTls {
    /// The CA certificate (PEM): what the configuration's caBundle holds.
    pub ca_cert: PathBuf,
    /// The serving certificate (PEM), subjectAltName IP:127.0.0.1.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// base64 of the CA PEM, ready for `clientConfig.caBundle`.
    pub ca_bundle: String,
}

static TLS: OnceCell<Result<WebhookTls, String>> = OnceCell::const_new();

impl WebhookTls {
    /// The process's certificates, generated on first use into
    /// `<cp dir>/webhook-tls-<pid>/` (or the log dir for `E2E_KUBECONFIG`).
    pub async fn get(env: &Env) -> Result<&'static WebhookTls> {
        let tls = TLS
            .get_or_init(|| async {
                let base = env.cp_dir().unwrap_or(env.log_dir());
                let dir = base.join(format!("webhook-tls-{}", std::process::id()));
                WebhookTls::generate(&dir)
                    .await
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        tls.as_ref()
            .map_err(|e| anyhow!("webhook certificates unavailable: {e}"))
    }

    /// A CA (EC P-256) and a leaf for 127.0.0.1 signed by it, in `dir`. A leaf apart from
    /// its CA satisfies both Go's verifier (the apiserver) and webpki (rustls clients),
    /// which refuses a CA certificate presented as a server's own.
    pub async fn generate(dir: &Path) -> Result<WebhookTls> {
        Self::generate_as(dir, "", 1).await
    }

    /// [`generate`](Self::generate) with `label` in both subjects (CA
    /// `CN=karmada-quota-e2e-ca-<label>`, leaf `O=<label>, CN=127.0.0.1`) and the leaf's
    /// serial `serial`: a second, distinct pair, e.g. to rotate the served certificate.
    /// An empty `label` gives [`generate`](Self::generate)'s subjects. Both are valid
    /// for 30 days; the leaf has subjectAltName IP:127.0.0.1, basicConstraints CA:FALSE,
    /// keyUsage digitalSignature and keyEncipherment, extendedKeyUsage serverAuth.
    pub async fn generate_as(dir: &Path, label: &str, serial: u32) -> Result<WebhookTls> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca_cn, org) = if label.is_empty() {
            ("karmada-quota-e2e-ca".to_owned(), None)
        } else {
            (format!("karmada-quota-e2e-ca-{label}"), Some(label))
        };
        let subject: Vec<(DnType, &str)> = org
            .map(|o| (DnType::OrganizationName, o))
            .into_iter()
            .chain([(DnType::CommonName, "127.0.0.1")])
            .collect();
        let ca = Ca::new(&ca_cn, DAYS)?;
        let mut params = certs::leaf(&subject, serial.into(), DAYS)?;
        params.subject_alt_names = vec![SanType::IpAddress(Ipv4Addr::LOCALHOST.into())];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let p = |f: &str| dir.join(f);
        ca.write(&p("ca.pem"))?;
        ca.issue(&params)?.write(&p("tls.pem"), &p("tls.key"))?;
        Ok(WebhookTls {
            ca_cert: p("ca.pem"),
            cert: p("tls.pem"),
            key: p("tls.key"),
            ca_bundle: crate::base64::encode(ca.pem().as_bytes()),
        })
    }
}

/// The SHA-256 fingerprint of the PEM certificate in `cert` (`AB:CD:…`).
pub async fn cert_fingerprint(cert: &Path) -> Result<String> {
    let pem = std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
    let der = certs::der(&pem).with_context(|| format!("parsing {}", cert.display()))?;
    Ok(certs::fingerprint(&der))
}

/// The SHA-256 fingerprint of the certificate `addr` serves now: a fresh TLS handshake to
/// the address (no SNI: the name is an IP address) that verifies nothing, whichever CA
/// signed the certificate, and presents no client certificate. The certificate counts once
/// received, even when the server ends the handshake afterwards for want of a client
/// certificate.
pub async fn served_fingerprint(addr: SocketAddr) -> Result<String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyServerCert {
        provider: provider.clone(),
        seen: OnceLock::new(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let handshake = tokio::time::timeout(
        Duration::from_secs(10),
        TlsConnector::from(Arc::new(config)).connect(ServerName::from(addr.ip()), tcp),
    )
    .await;
    match (verifier.seen.get(), handshake) {
        (Some(leaf), _) => Ok(certs::fingerprint(leaf)),
        (None, Err(_)) => bail!("TLS handshake with {addr} took more than 10 s"),
        (None, Ok(Err(e))) => bail!("no certificate read from {addr}: {e}"),
        (None, Ok(Ok(_))) => bail!("{addr} completed a handshake without a certificate"),
    }
}

/// A server-certificate verifier that takes any certificate and keeps the first it is
/// shown (the handshake's signatures are still checked): what reads a served certificate
/// without trusting it.
#[derive(Debug)]
struct AnyServerCert {
    provider: Arc<CryptoProvider>,
    seen: OnceLock<Vec<u8>>,
}

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let _ = self.seen.set(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
