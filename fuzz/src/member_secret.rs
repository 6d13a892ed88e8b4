//! `member_secret`: a Cluster object and its Secret's `token` and `caBundle` (PEM), as the
//! controller turns them into a client for the member: `desired_members`, then
//! `config_from_secret`, then `kube::Client::try_from` (which parses the CA certificates).
//!
//! Input: `<Cluster JSON> 0xFF <token bytes> 0xFF <caBundle bytes>`; a missing part is a
//! missing Secret key (0xFF never occurs in JSON, UTF-8 text or PEM).
//!
//! Laws:
//! - a Cluster is a member exactly when it has a non-empty apiEndpoint and secretRef name;
//! - an accepted Secret gives a config with the trimmed token (never empty), the endpoint
//!   as URL, and one root certificate per `CERTIFICATE` block of a non-empty caBundle;
//! - a refused one is a `MemberConfig` error naming the cluster;
//! - building the client from an accepted config returns (a client or an error) — with
//!   a CA bundle or insecure, the cases where the input reaches TLS.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use karmada_quota_controller::Error;
use karmada_quota_controller::members::{
    MemberSource, SECRET_CA_KEY, SECRET_TOKEN_KEY, config_from_secret, desired_members,
};
use karmada_quota_crds::Cluster;
use kube::api::ObjectMeta;
use secrecy::ExposeSecret;

/// Separates the parts of an input.
const SEPARATOR: u8 = 0xFF;

/// kube's client spawns its request buffer on a tokio runtime: one for every run.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime starts")
    })
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut parts = data.splitn(3, |b| *b == SEPARATOR);
    let Ok(cluster) = serde_json::from_slice::<Cluster>(parts.next().unwrap_or_default()) else {
        return;
    };
    let token = parts.next();
    let ca = parts.next();

    let members = desired_members([&cluster], &[]);
    let spec = &cluster.spec;
    let expected = spec.api_endpoint.as_ref().is_some_and(|e| !e.is_empty())
        && spec.secret_ref.as_ref().is_some_and(|s| !s.name.is_empty());
    assert_eq!(
        members.len(),
        usize::from(expected),
        "{cluster:?} → {members:?}"
    );
    let Some((
        name,
        MemberSource::Cluster {
            endpoint,
            secret_namespace,
            secret_name,
            insecure,
        },
    )) = members.into_iter().next()
    else {
        return;
    };

    let mut data = BTreeMap::new();
    if let Some(t) = token {
        data.insert(SECRET_TOKEN_KEY.to_owned(), ByteString(t.to_vec()));
    }
    if let Some(c) = ca {
        data.insert(SECRET_CA_KEY.to_owned(), ByteString(c.to_vec()));
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name),
            namespace: Some(secret_namespace),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let config =
        match config_from_secret(&name, &endpoint, &secret, insecure, Duration::from_secs(1)) {
            Ok(config) => config,
            Err(Error::MemberConfig { cluster, message }) => {
                assert_eq!(cluster, name);
                assert!(!message.is_empty());
                return;
            }
            Err(e) => panic!("not a MemberConfig error: {e}"),
        };
    let token = std::str::from_utf8(token.expect("accepted without a token"))
        .expect("accepted a token that is not UTF-8")
        .trim();
    assert!(!token.is_empty(), "accepted an empty token");
    assert_eq!(
        config.auth_info.token.as_ref().map(|t| t.expose_secret()),
        Some(token),
        "the token is not the Secret's, trimmed"
    );
    let blocks = ca.filter(|c| !c.is_empty()).map(|c| {
        pem::parse_many(c)
            .expect("accepted a caBundle that is not PEM")
            .iter()
            .filter(|p| p.tag() == "CERTIFICATE")
            .count()
    });
    assert_eq!(config.root_cert.as_ref().map(Vec::len), blocks);
    assert_eq!(config.accept_invalid_certs, insecure);

    if config.root_cert.is_none() && !config.accept_invalid_certs {
        // The platform's roots: nothing of the input reaches TLS, and loading them for
        // every input would make this target a hundred times slower.
        return;
    }
    let rt = runtime();
    let _guard = rt.enter();
    let client = kube::Client::try_from(config);
    drop(client);
    // Let the request buffer of a built client see its last handle go and end.
    rt.block_on(tokio::task::yield_now());
}
