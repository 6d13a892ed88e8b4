//! How to reach a Prometheus as it is deployed: behind TLS with a private CA, a bearer
//! token (a file, re-read as it rotates), basic auth, a client certificate, and the tenant
//! header of multi-tenant front ends (Thanos, Cortex, Mimir: `X-Scope-OrgID`). One set of
//! flags (`--prometheus-*`, env `KQ_PROMETHEUS_*`) for `kubectl karmada-quota report` and
//! the controller's `--dashboard-prometheus`, applied to the kube HTTP stack's `Config`
//! the Prometheus client is built on ([`PrometheusAccess::apply`]).

use std::path::PathBuf;

/// Credentials and TLS settings for Prometheus.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct PrometheusAccess {
    /// A file holding a bearer token sent to Prometheus (`Authorization: Bearer …`); re-read
    /// about once a minute, so a rotated token is picked up (a file with a trailing newline
    /// is read once, trimmed).
    #[arg(long, env = "KQ_PROMETHEUS_BEARER_TOKEN_FILE", value_name = "PATH")]
    pub prometheus_bearer_token_file: Option<PathBuf>,

    /// PEM bundle of the CAs that sign Prometheus' serving certificate (default: the
    /// system's roots).
    #[arg(long, env = "KQ_PROMETHEUS_CA_FILE", value_name = "PATH")]
    pub prometheus_ca_file: Option<PathBuf>,

    /// PEM client certificate for Prometheus (mutual TLS); needs --prometheus-key-file.
    #[arg(long, env = "KQ_PROMETHEUS_CERT_FILE", value_name = "PATH")]
    pub prometheus_cert_file: Option<PathBuf>,

    /// PEM private key of --prometheus-cert-file.
    #[arg(long, env = "KQ_PROMETHEUS_KEY_FILE", value_name = "PATH")]
    pub prometheus_key_file: Option<PathBuf>,

    /// Basic auth user for Prometheus; the password comes from
    /// --prometheus-basic-auth-password-file.
    #[arg(long, env = "KQ_PROMETHEUS_BASIC_AUTH_USER", value_name = "USER")]
    pub prometheus_basic_auth_user: Option<String>,

    /// A file holding the basic auth password (its first line).
    #[arg(
        long,
        env = "KQ_PROMETHEUS_BASIC_AUTH_PASSWORD_FILE",
        value_name = "PATH"
    )]
    pub prometheus_basic_auth_password_file: Option<PathBuf>,

    /// An extra request header, NAME=VALUE (repeatable, or comma-separated in the env), e.g.
    /// the tenant of a Thanos/Cortex/Mimir front end: `X-Scope-OrgID=team-a`.
    #[arg(
        long = "prometheus-header",
        env = "KQ_PROMETHEUS_HEADERS",
        value_name = "NAME=VALUE",
        value_delimiter = ','
    )]
    pub prometheus_headers: Vec<String>,
}

impl PrometheusAccess {
    /// Set `config`'s TLS roots, credentials and headers; an error names the flag and
    /// says what is wrong (unreadable file, a certificate without a key, two kinds of
    /// credentials, a header that is not `NAME=VALUE`).
    pub fn apply(&self, config: &mut kube::Config) -> Result<(), String> {
        if self.prometheus_bearer_token_file.is_some() && self.prometheus_basic_auth_user.is_some()
        {
            return Err(
                "--prometheus-bearer-token-file and --prometheus-basic-auth-user are \
                        two kinds of credentials: give one"
                    .into(),
            );
        }
        if let Some(path) = &self.prometheus_ca_file {
            let pem = read(path, "--prometheus-ca-file")?;
            let ders = pem_certificates(&pem);
            if ders.is_empty() {
                return Err(format!(
                    "--prometheus-ca-file {}: no PEM certificate in it",
                    path.display()
                ));
            }
            config.root_cert = Some(ders);
        }
        if let Some(path) = &self.prometheus_bearer_token_file {
            let token = read(path, "--prometheus-bearer-token-file")?;
            if token.trim().is_empty() {
                return Err(format!(
                    "--prometheus-bearer-token-file {}: the file is empty",
                    path.display()
                ));
            }
            if token == token.trim() {
                // Re-read by kube as it rotates.
                config.auth_info.token_file = Some(path.display().to_string());
            } else {
                // `echo token > file` leaves a newline no header may carry: read it once,
                // trimmed (such a file is not re-read; write rotating tokens without one).
                config.auth_info.token = Some(token.trim().to_owned().into());
            }
        }
        match (&self.prometheus_cert_file, &self.prometheus_key_file) {
            (Some(cert), Some(key)) => {
                read(cert, "--prometheus-cert-file")?;
                read(key, "--prometheus-key-file")?;
                config.auth_info.client_certificate = Some(cert.display().to_string());
                config.auth_info.client_key = Some(key.display().to_string());
            }
            (None, None) => {}
            _ => {
                return Err("--prometheus-cert-file and --prometheus-key-file go together".into());
            }
        }
        match (
            &self.prometheus_basic_auth_user,
            &self.prometheus_basic_auth_password_file,
        ) {
            (Some(user), Some(path)) => {
                let password = read(path, "--prometheus-basic-auth-password-file")?;
                let password = password.lines().next().unwrap_or_default().to_owned();
                config.auth_info.username = Some(user.clone());
                config.auth_info.password = Some(password.into());
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err("--prometheus-basic-auth-user needs \
                            --prometheus-basic-auth-password-file"
                    .into());
            }
            (None, Some(_)) => {
                return Err("--prometheus-basic-auth-password-file needs \
                            --prometheus-basic-auth-user"
                    .into());
            }
        }
        for h in &self.prometheus_headers {
            let (name, value) = h.split_once('=').ok_or_else(|| {
                format!("--prometheus-header {h:?}: expected NAME=VALUE, e.g. X-Scope-OrgID=team-a")
            })?;
            let name = http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|e| format!("--prometheus-header {h:?}: {e}"))?;
            if name == http::header::AUTHORIZATION {
                return Err(format!(
                    "--prometheus-header {h:?}: use --prometheus-bearer-token-file or basic \
                     auth for Authorization (a header is logged in clear by proxies' debug \
                     output and never rotates)"
                ));
            }
            let value = http::HeaderValue::from_str(value.trim())
                .map_err(|e| format!("--prometheus-header {h:?}: {e}"))?;
            config.headers.push((name, value));
        }
        Ok(())
    }
}

fn read(path: &std::path::Path, flag: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

/// The DER bytes of every `CERTIFICATE` block of a PEM bundle (rustls' PEM reader, as the
/// listeners use).
fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|c| c.to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        access: PrometheusAccess,
    }

    fn parse(args: &[&str]) -> PrometheusAccess {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .expect("parses")
            .access
    }

    fn config() -> kube::Config {
        kube::Config::new("https://127.0.0.1:9090".parse().unwrap())
    }

    fn file(dir: &std::path::Path, name: &str, text: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kq-prom-access-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_token_file_a_ca_and_a_tenant_header_reach_the_config() {
        let d = tmp("token");
        let token = file(&d, "token", "s3cret");
        // "hello" as a DER stand-in: the bundle is only split and decoded here.
        let ca = file(
            &d,
            "ca.pem",
            "junk\n-----BEGIN CERTIFICATE-----\naGVs\nbG8=\n-----END CERTIFICATE-----\n",
        );
        let a = parse(&[
            "--prometheus-bearer-token-file",
            &token,
            "--prometheus-ca-file",
            &ca,
            "--prometheus-header",
            "X-Scope-OrgID=team-a",
        ]);
        let mut c = config();
        a.apply(&mut c).unwrap();
        assert_eq!(c.auth_info.token_file.as_deref(), Some(token.as_str()));
        assert_eq!(c.root_cert, Some(vec![b"hello".to_vec()]));
        assert_eq!(c.headers.len(), 1);
        assert_eq!(c.headers[0].0.as_str(), "x-scope-orgid");
        assert_eq!(c.headers[0].1, "team-a");
        // `echo s3cret > token`: read once, without the newline no header may carry.
        let echoed = file(&d, "echoed", "s3cret\n");
        let mut c = config();
        parse(&["--prometheus-bearer-token-file", &echoed])
            .apply(&mut c)
            .unwrap();
        use secrecy::ExposeSecret;
        assert_eq!(c.auth_info.token_file, None);
        assert_eq!(
            c.auth_info
                .token
                .as_ref()
                .map(|t| t.expose_secret().to_owned()),
            Some("s3cret".to_owned())
        );
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn basic_auth_and_client_certificates_reach_the_config() {
        let d = tmp("basic");
        let pw = file(&d, "pw", "hunter2\nignored\n");
        let (cert, key) = (file(&d, "c.pem", "c"), file(&d, "k.pem", "k"));
        let a = parse(&[
            "--prometheus-basic-auth-user=alice",
            "--prometheus-basic-auth-password-file",
            &pw,
            "--prometheus-cert-file",
            &cert,
            "--prometheus-key-file",
            &key,
        ]);
        let mut c = config();
        a.apply(&mut c).unwrap();
        assert_eq!(c.auth_info.username.as_deref(), Some("alice"));
        use secrecy::ExposeSecret;
        assert_eq!(
            c.auth_info
                .password
                .as_ref()
                .map(|p| p.expose_secret().to_owned()),
            Some("hunter2".to_owned())
        );
        assert_eq!(
            c.auth_info.client_certificate.as_deref(),
            Some(cert.as_str())
        );
        std::fs::remove_dir_all(d).ok();
    }

    #[test]
    fn mistakes_name_the_flag() {
        let d = tmp("bad");
        let token = file(&d, "token", "t");
        let empty = file(&d, "empty", " \n");
        let cases: Vec<(Vec<String>, &str)> = vec![
            (
                vec![
                    "--prometheus-bearer-token-file".into(),
                    "/nonexistent/token".into(),
                ],
                "--prometheus-bearer-token-file /nonexistent/token:",
            ),
            (
                vec!["--prometheus-bearer-token-file".into(), empty.clone()],
                "the file is empty",
            ),
            (
                vec!["--prometheus-ca-file".into(), token.clone()],
                "no PEM certificate",
            ),
            (
                vec!["--prometheus-cert-file".into(), token.clone()],
                "go together",
            ),
            (
                vec!["--prometheus-basic-auth-user=a".into()],
                "needs --prometheus-basic-auth-password-file",
            ),
            (
                vec![
                    "--prometheus-bearer-token-file".into(),
                    token.clone(),
                    "--prometheus-basic-auth-user=a".into(),
                ],
                "give one",
            ),
            (
                vec!["--prometheus-header=X-Scope-OrgID".into()],
                "expected NAME=VALUE",
            ),
            (
                vec!["--prometheus-header=Authorization=Bearer x".into()],
                "use --prometheus-bearer-token-file",
            ),
        ];
        for (args, want) in cases {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let err = parse(&args).apply(&mut config()).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        std::fs::remove_dir_all(d).ok();
    }
}
