//! A member's client configuration: from Karmada's Secret (`token`, `caBundle`) or a kubeconfig file.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::error::Error;

/// Secret data key of the member's bearer token (as Karmada stores it).
pub const SECRET_TOKEN_KEY: &str = "token";
/// Secret data key of the member API server's CA bundle, PEM (as Karmada stores it).
pub const SECRET_CA_KEY: &str = "caBundle";

/// A client configuration for a member from Karmada's Secret (`token`, `caBundle`),
/// without connecting.
pub fn config_from_secret(
    cluster: &str,
    endpoint: &str,
    secret: &Secret,
    insecure: bool,
    connect_timeout: Duration,
) -> Result<kube::Config, Error> {
    let err = |message: String| Error::MemberConfig {
        cluster: cluster.to_owned(),
        message,
    };
    let secret_name = format!(
        "{}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    let data = secret.data.as_ref();
    let token = secret_token(data, &secret_name).map_err(err)?;
    let uri = endpoint
        .parse()
        .map_err(|e| err(format!("invalid apiEndpoint {endpoint:?}: {e}")))?;
    let mut config = kube::Config::new(uri);
    config.auth_info.token = Some(token.into());
    config.accept_invalid_certs = insecure;
    config.connect_timeout = Some(connect_timeout);
    // No CA: the platform's roots verify the member (like client-go with no caData).
    if let Some(ca) = data.and_then(|d| d.get(SECRET_CA_KEY))
        && !ca.0.is_empty()
    {
        config.root_cert = Some(secret_roots(&ca.0, &secret_name).map_err(err)?);
    }
    Ok(config)
}

/// The bearer token of Secret `secret_name` (its `data`): present, UTF-8, not empty, a
/// valid header value (kube's client panics on one that cannot be an Authorization
/// header).
fn secret_token(
    data: Option<&std::collections::BTreeMap<String, k8s_openapi::ByteString>>,
    secret_name: &str,
) -> Result<String, String> {
    let token = data
        .and_then(|d| d.get(SECRET_TOKEN_KEY))
        .ok_or_else(|| format!("Secret {secret_name} has no {SECRET_TOKEN_KEY:?} key"))?;
    let token = std::str::from_utf8(&token.0)
        .map_err(|_| format!("Secret {secret_name}: {SECRET_TOKEN_KEY:?} is not UTF-8"))?
        .trim()
        .to_owned();
    if token.is_empty() {
        return Err(format!(
            "Secret {secret_name}: {SECRET_TOKEN_KEY:?} is empty"
        ));
    }
    if axum::http::HeaderValue::from_str(&token).is_err() {
        return Err(format!(
            "Secret {secret_name}: {SECRET_TOKEN_KEY:?} holds control characters"
        ));
    }
    Ok(token)
}

/// The CERTIFICATE blocks of Secret `secret_name`'s CA bundle `ca` (PEM), at least one.
fn secret_roots(ca: &[u8], secret_name: &str) -> Result<Vec<Vec<u8>>, String> {
    let certs: Vec<Vec<u8>> = pem::parse_many(ca)
        .map_err(|e| format!("Secret {secret_name}: {SECRET_CA_KEY:?} is not PEM: {e}"))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect();
    if certs.is_empty() {
        return Err(format!(
            "Secret {secret_name}: {SECRET_CA_KEY:?} holds no CERTIFICATE block"
        ));
    }
    Ok(certs)
}

/// A client configuration from a kubeconfig file (its current context), without connecting.
pub async fn config_from_kubeconfig(
    cluster: &str,
    path: &std::path::Path,
    connect_timeout: Duration,
) -> Result<kube::Config, Error> {
    let err = |message: String| Error::MemberConfig {
        cluster: cluster.to_owned(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| err(format!("cannot read kubeconfig {}: {e}", path.display())))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| err(format!("invalid kubeconfig {}: {e}", path.display())))?;
    config.connect_timeout = Some(connect_timeout);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn ca() -> String {
        pem::encode(&pem::Pem::new(
            "CERTIFICATE",
            vec![0x30, 0x03, 0x02, 0x01, 0x01],
        ))
    }

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("member1".into()),
                namespace: Some("karmada-cluster".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn secret_with_token_and_ca_bundle_builds_a_config() {
        let s = secret(&[("token", b"abc.def\n"), ("caBundle", ca().as_bytes())]);
        let c = config_from_secret(
            "member1",
            "https://127.0.0.1:6443",
            &s,
            false,
            Duration::from_secs(3),
        )
        .unwrap();
        assert_eq!(c.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(c.root_cert.as_ref().map(Vec::len), Some(1));
        assert!(!c.accept_invalid_certs);
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(3)));
        assert!(c.auth_info.token.is_some());
    }

    #[test]
    fn insecure_cluster_needs_no_ca() {
        let s = secret(&[("token", b"t")]);
        let c = config_from_secret(
            "m",
            "https://10.0.0.1:6443",
            &s,
            true,
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(c.accept_invalid_certs);
        assert!(c.root_cert.is_none());
    }

    #[test]
    fn bad_secrets_are_named_errors() {
        let no_token = secret(&[("caBundle", ca().as_bytes())]);
        let e = config_from_secret(
            "member1",
            "https://x:1",
            &no_token,
            false,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("member1") && e.contains("\"token\""), "{e}");
        let bad_ca = secret(&[("token", b"t"), ("caBundle", b"not pem")]);
        let e = config_from_secret(
            "member1",
            "https://x:1",
            &bad_ca,
            false,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("caBundle"), "{e}");
        let ok = secret(&[("token", b"t")]);
        let e = config_from_secret(
            "member1",
            "not a url at all",
            &ok,
            false,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("apiEndpoint"), "{e}");
        // Found by the member_secret fuzz target: kube's client panicked on it.
        let control = secret(&[("token", b"abc\x00def")]);
        let e = config_from_secret("m", "https://x:1", &control, true, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"token\" holds control characters"), "{e}");
    }
}
