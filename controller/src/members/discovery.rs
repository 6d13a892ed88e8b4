//! Which members to watch: Cluster objects with an apiEndpoint and a secretRef, and `--member-kubeconfig` flags.

use std::collections::BTreeMap;
use std::path::PathBuf;

use karmada_quota_crds::Cluster;
use kube::ResourceExt;

/// `--member-kubeconfig NAME=PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberKubeconfig {
    /// Member cluster name (as in `spec.clusters[].name` of bindings).
    pub name: String,
    /// Kubeconfig file of that member.
    pub path: PathBuf,
}

/// Parse `NAME=PATH`.
pub fn parse_member_kubeconfig(s: &str) -> Result<MemberKubeconfig, String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PATH, got {s:?}"))?;
    let name = name.trim();
    let path = path.trim();
    if name.is_empty() || path.is_empty() {
        return Err(format!(
            "expected NAME=PATH with both parts non-empty, got {s:?}"
        ));
    }
    Ok(MemberKubeconfig {
        name: name.to_owned(),
        path: PathBuf::from(path),
    })
}

/// Where a member's connection details come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberSource {
    /// A Cluster object: API endpoint and a Secret with `token` and `caBundle`.
    Cluster {
        /// `spec.apiEndpoint`.
        endpoint: String,
        /// `spec.secretRef.namespace`.
        secret_namespace: String,
        /// `spec.secretRef.name`.
        secret_name: String,
        /// `spec.insecureSkipTLSVerification`.
        insecure: bool,
    },
    /// `--member-kubeconfig NAME=PATH`.
    Kubeconfig(PathBuf),
}

/// The members to watch: every Cluster with an apiEndpoint and a secretRef, and every
/// `--member-kubeconfig` (which wins over a Cluster of the same name).
pub fn desired_members<'a>(
    clusters: impl IntoIterator<Item = &'a Cluster>,
    flags: &[MemberKubeconfig],
) -> BTreeMap<String, MemberSource> {
    let mut out = BTreeMap::new();
    for c in clusters {
        let spec = &c.spec;
        let (Some(endpoint), Some(secret)) = (spec.api_endpoint.as_ref(), spec.secret_ref.as_ref())
        else {
            continue;
        };
        if endpoint.is_empty() || secret.name.is_empty() {
            continue;
        }
        out.insert(
            c.name_any(),
            MemberSource::Cluster {
                endpoint: endpoint.clone(),
                secret_namespace: secret.namespace.clone(),
                secret_name: secret.name.clone(),
                insecure: spec.insecure_skip_tls_verification,
            },
        );
    }
    for f in flags {
        out.insert(f.name.clone(), MemberSource::Kubeconfig(f.path.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn desired_members_take_clusters_with_endpoint_and_secret_and_flags_win() {
        let c1 = mk_cluster(
            "member1",
            Some("https://a:1"),
            Some(("karmada-cluster", "member1")),
        );
        let pull = mk_cluster("member2", None, None);
        let c3 = mk_cluster(
            "member3",
            Some("https://c:1"),
            Some(("karmada-cluster", "member3")),
        );
        let flags = [MemberKubeconfig {
            name: "member3".into(),
            path: "/k3".into(),
        }];
        let d = desired_members([&c1, &pull, &c3], &flags);
        assert_eq!(d.len(), 2);
        assert_eq!(
            d["member1"],
            MemberSource::Cluster {
                endpoint: "https://a:1".into(),
                secret_namespace: "karmada-cluster".into(),
                secret_name: "member1".into(),
                insecure: false,
            }
        );
        assert_eq!(d["member3"], MemberSource::Kubeconfig("/k3".into()));
    }
}
