//! The webhook's TLS material in the tests: one CA and serving certificate for 127.0.0.1
//! per test process ([`WebhookTls::get`]), other pairs for rotation tests
//! ([`WebhookTls::generate_as`]), and certificate fingerprints (of a file, and of what an
//! address serves now), all made with `openssl`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, anyhow, bail};
use tokio::sync::OnceCell;

use crate::Env;

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
    /// The process's certificates, generated with `openssl` on first use into
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
    /// An empty `label` gives [`generate`](Self::generate)'s subjects.
    pub async fn generate_as(dir: &Path, label: &str, serial: u32) -> Result<WebhookTls> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca_subj, leaf_subj) = if label.is_empty() {
            (
                "/CN=karmada-quota-e2e-ca".to_owned(),
                "/CN=127.0.0.1".to_owned(),
            )
        } else {
            (
                format!("/CN=karmada-quota-e2e-ca-{label}"),
                format!("/O={label}/CN=127.0.0.1"),
            )
        };
        let serial = serial.to_string();
        let p = |f: &str| dir.join(f);
        let ext = p("leaf.ext");
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )?;
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-days", "30", "-subj", &ca_subj],
            ]
            .concat(),
            &[("-keyout", p("ca.key")), ("-out", p("ca.pem"))],
        )
        .await?;
        openssl(
            &[&["req"][..], &ec, &["-subj", &leaf_subj]].concat(),
            &[("-keyout", p("tls.key")), ("-out", p("tls.csr"))],
        )
        .await?;
        openssl(
            &["x509", "-req", "-days", "30", "-set_serial", &serial],
            &[
                ("-in", p("tls.csr")),
                ("-CA", p("ca.pem")),
                ("-CAkey", p("ca.key")),
                ("-extfile", ext),
                ("-out", p("tls.pem")),
            ],
        )
        .await?;
        let ca_pem = std::fs::read(p("ca.pem"))?;
        Ok(WebhookTls {
            ca_cert: p("ca.pem"),
            cert: p("tls.pem"),
            key: p("tls.key"),
            ca_bundle: crate::base64::encode(&ca_pem),
        })
    }
}

/// The SHA-256 fingerprint of the PEM certificate in `cert`, as
/// `openssl x509 -fingerprint -sha256` prints it (`AB:CD:…`).
pub async fn cert_fingerprint(cert: &Path) -> Result<String> {
    let out = tokio::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(cert)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running openssl (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "openssl x509 -fingerprint {} failed ({}): {}",
            cert.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_fingerprint(&String::from_utf8_lossy(&out.stdout))
}

/// The SHA-256 fingerprint of the certificate `addr` serves now (a fresh TLS handshake
/// with `openssl s_client`, SNI `127.0.0.1`, nothing verified).
pub async fn served_fingerprint(addr: SocketAddr) -> Result<String> {
    let script = format!(
        "openssl s_client -connect {addr} -servername {ip} </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256",
        ip = addr.ip()
    );
    let out = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .await
        .context("running openssl s_client")?;
    if !out.status.success() {
        bail!(
            "no certificate read from {addr} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_fingerprint(&String::from_utf8_lossy(&out.stdout))
}

/// `sha256 Fingerprint=AB:CD:…` (OpenSSL 3) or `SHA256 Fingerprint=…` (1.1) → `AB:CD:…`.
fn parse_fingerprint(text: &str) -> Result<String> {
    text.lines()
        .find_map(|l| {
            l.split_once("Fingerprint=")
                .map(|(_, f)| f.trim().to_owned())
        })
        .filter(|f| !f.is_empty())
        .ok_or_else(|| anyhow!("no fingerprint in openssl's output: {text:?}"))
}

async fn openssl(args: &[&str], paths: &[(&str, PathBuf)]) -> Result<()> {
    let mut cmd = tokio::process::Command::new("openssl");
    cmd.args(args);
    for (flag, path) in paths {
        cmd.arg(flag).arg(path);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .await
        .context("running openssl (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "openssl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fingerprint_takes_the_value_after_the_label() {
        assert_eq!(
            parse_fingerprint("sha256 Fingerprint=AB:CD:01\n").unwrap(),
            "AB:CD:01"
        );
        assert_eq!(
            parse_fingerprint("SHA256 Fingerprint=AB:CD\n").unwrap(),
            "AB:CD"
        );
        assert!(parse_fingerprint("").is_err());
        assert!(parse_fingerprint("sha256 Fingerprint=\n").is_err());
    }
}
