//! The image `make image` builds, run from its own root filesystem: unpacked from the
//! exported archive, entered read-only as uid 65532 with no capabilities (e2e/src/image.rs),
//! both binaries against the loopback control plane, reaching the apiserver by name.
//!
//! ```text
//!  webhook    --kubeconfig server https://kubernetes.default:<port>  ← the image's
//!             /etc/hosts (as a pod's hostAliases); admits one binding, refuses another
//!  controller --kubeconfig server https://kubernetes.default.svc:<port>,
//!             member1 https://kubernetes.default.svc:<member port>   ← DNS, a server on
//!             127.53.x.y:53 named by the image's /etc/resolv.conf; writes the status
//! ```
//!
//! The names are in the apiservers' serving certificates, so TLS verifies as it would in
//! a cluster. Without an archive (no `make image` yet), or without root, the test fails
//! unless `KQ_ALLOW_SKIP` names `image` (e2e/src/skip.rs); `make test` builds the archive
//! first and does not allow it.

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, ensure};
use karmada_quota_e2e::controller::{Controller, wait_synced};
use karmada_quota_e2e::dns::DnsServer;
use karmada_quota_e2e::image::{
    IMAGE_BINARIES, IMAGE_UID, Identity, Sandbox, archive, files, identity, recorded_meta,
    sha256_of, unpack,
};
use karmada_quota_e2e::skip::{IMAGE, prerequisite};
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, WebhookTls, binding_denied, create, expect_admitted, expect_refused,
    quota, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, accepts, use_bin_dir};

/// Resolved through the image's /etc/hosts (the webhook's apiserver).
const HOSTS_NAME: &str = "kubernetes.default";
/// Resolved through DNS (the controller's apiserver and its member).
const DNS_NAME: &str = "kubernetes.default.svc";

fn step(s: &str) {
    eprintln!("{s}");
}

/// `kubeconfig` with its `https://127.0.0.1:` server renamed to `https://<host>:`, written
/// to `out`.
fn by_name(kubeconfig: &Path, host: &str, out: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let from = "server: https://127.0.0.1:";
    ensure!(text.contains(from), "{}: no {from}", kubeconfig.display());
    ensure!(
        text.contains("certificate-authority-data:"),
        "{}: TLS is not verified, so a name would prove nothing",
        kubeconfig.display()
    );
    std::fs::write(out, text.replace(from, &format!("server: https://{host}:")))?;
    Ok(out.to_path_buf())
}

fn check_identity(name: &str, id: &Identity, rootfs: &Path) -> Result<()> {
    eprintln!("{name}: {id:?}");
    ensure!(
        id.uids.len() == 4 && id.uids.iter().all(|u| *u == IMAGE_UID),
        "{name} runs with uids {:?}",
        id.uids
    );
    ensure!(
        id.gids.len() == 4 && id.gids.iter().all(|g| *g == IMAGE_UID),
        "{name} runs with gids {:?}",
        id.gids
    );
    ensure!(
        id.groups.iter().all(|g| *g == IMAGE_UID),
        "{name} keeps supplementary groups {:?}",
        id.groups
    );
    ensure!(
        u64::from_str_radix(&id.cap_eff, 16) == Ok(0),
        "{name} has capabilities {}",
        id.cap_eff
    );
    ensure!(
        id.root == rootfs,
        "{name}'s root is {}, not the image's",
        id.root.display()
    );
    ensure!(id.root_read_only, "{name}'s / is writable");
    ensure!(
        id.exe == format!("/usr/local/bin/{name}"),
        "{name} runs {}",
        id.exe
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs root, the loopback control plane and the image archive: make image runs it"]
async fn the_images_binaries_run_from_its_root_filesystem_read_only_as_nonroot() -> Result<()> {
    let Some(archive) = archive()? else {
        return prerequisite(
            IMAGE,
            "the image: no image archive under <target>/image or in KQ_IMAGE_ARCHIVE; \
             `make image` builds it and runs this test",
        );
    };
    if identity(std::process::id())?.uids.get(1) != Some(&0) {
        return prerequisite(
            IMAGE,
            "the image: entering it needs root (a mount namespace, chroot)",
        );
    }
    let work = std::env::temp_dir().join(format!("kq-image-{}", std::process::id()));
    run(&archive, &work).await
}

async fn run(archive: &Path, work: &Path) -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;

    step(&format!("[Unpack] {}", archive.display()));
    let image = unpack(archive, work).await?;
    let all = files(&image.rootfs)?;
    eprintln!(
        "image: {} files, layers {} bytes compressed, config user {}, manifest {:?}",
        all.len(),
        image.layer_bytes,
        image.config["config"]["User"],
        image.manifest_digest
    );
    // Nothing but the binaries and their few files: no shell, no libc, no loader.
    let mut want: Vec<String> = IMAGE_BINARIES
        .iter()
        .map(|b| format!("usr/local/bin/{b}"))
        .chain(
            [
                "etc/group",
                "etc/nsswitch.conf",
                "etc/passwd",
                "etc/ssl/certs/ca-certificates.crt",
            ]
            .map(str::to_owned),
        )
        .collect();
    want.sort();
    ensure!(all == want, "the image holds {all:?}, want {want:?}");
    ensure!(
        image.config["config"]["User"] == format!("{IMAGE_UID}:{IMAGE_UID}"),
        "the image runs as {}",
        image.config["config"]["User"]
    );
    let passwd = std::fs::read_to_string(image.rootfs.join("etc/passwd"))?;
    ensure!(
        passwd
            .lines()
            .any(|l| l.starts_with(&format!("nonroot:x:{IMAGE_UID}:{IMAGE_UID}:"))),
        "/etc/passwd has no user {IMAGE_UID}: {passwd}"
    );
    if let (Some(meta), Some(digest)) = (recorded_meta(archive), &image.manifest_digest) {
        ensure!(
            meta["manifest_digest"] == digest.as_str(),
            "hack/image.sh recorded {}, the archive's manifest is {digest}",
            meta["manifest_digest"]
        );
        let manifest = work
            .join("layout/blobs/sha256")
            .join(digest.trim_start_matches("sha256:"));
        ensure!(
            sha256_of(&manifest).await? == *digest,
            "the manifest blob does not hash to its digest"
        );
    }

    step("[Prepare] kubeconfigs by name; a DNS server for kubernetes.default.svc; /etc/hosts");
    let dns = DnsServer::start(&[(DNS_NAME, Ipv4Addr::LOCALHOST)]).await?;
    let secrets = work.join("secrets");
    std::fs::create_dir_all(&secrets)?;
    let webhook_kc = by_name(
        env.kubeconfig(),
        HOSTS_NAME,
        &secrets.join("webhook-kubeconfig"),
    )?;
    let controller_kc = by_name(
        env.kubeconfig(),
        DNS_NAME,
        &secrets.join("controller-kubeconfig"),
    )?;
    let member = env
        .member_kubeconfigs()
        .first()
        .ok_or_else(|| anyhow!("the control plane has no member apiserver"))?;
    let member_kc = by_name(member, DNS_NAME, &secrets.join("member1-kubeconfig"))?;
    // The serving pair as a Secret volume with fsGroup gives it: owned by, and readable
    // only to, the image's user; the kubeconfigs too.
    let tls = WebhookTls::get(env).await?;
    let (cert, key) = (secrets.join("tls.crt"), secrets.join("tls.key"));
    std::fs::copy(&tls.cert, &cert)?;
    std::fs::copy(&tls.key, &key)?;
    for f in [&cert, &key, &webhook_kc, &controller_kc, &member_kc] {
        std::os::unix::fs::chown(f, Some(IMAGE_UID), Some(IMAGE_UID))?;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o400))?;
    }
    let sandbox = Sandbox::prepare(
        work,
        &image.rootfs,
        &[&secrets],
        &format!("127.0.0.1 localhost\n127.0.0.1 {HOSTS_NAME}\n"),
        &dns.resolv_conf(),
    )?;
    use_bin_dir(&sandbox.bin_dir)?;
    let test_ns = TestNs::new(&client, "image").await?;
    let ns = test_ns.name().to_owned();

    step("[Start] the image's controller (DNS) and webhook (/etc/hosts)");
    let mut controller = Controller::builder()
        .namespace(&ns)
        .kubeconfig(&controller_kc)
        .clusters_from_api(false)
        .member_kubeconfig("member1", &member_kc)
        .start(env)
        .await?;
    let mut webhook = Webhook::builder()
        .tls_files(&cert, &key)
        .arg(format!("--kubeconfig={}", webhook_kc.display()))
        .start(env)
        .await?;
    for (name, pid) in [
        ("karmada-quota-controller", controller.binary().pid()),
        ("karmada-quota-webhook", webhook.binary().pid()),
    ] {
        let pid = pid.ok_or_else(|| anyhow!("{name} has exited"))?;
        check_identity(name, &identity(pid)?, &sandbox.rootfs)?;
    }
    ensure!(
        dns.queries(DNS_NAME) > 0,
        "the controller reached {DNS_NAME} without asking the DNS server at {}",
        dns.addr()
    );
    eprintln!(
        "DNS queries: {DNS_NAME}: {}, {HOSTS_NAME}: {} (the hosts file answers it first)",
        dns.queries(DNS_NAME),
        dns.queries(HOSTS_NAME)
    );
    ensure!(
        dns.queries(HOSTS_NAME) == 0,
        "{HOSTS_NAME} is in the image's /etc/hosts, yet DNS was asked: nsswitch order lost"
    );

    step("[Status] KarmadaQuota q: requests.cpu=2 → the controller writes its status");
    accepts(&client, &quota(&ns, "q", &[("requests.cpu", "2")])).await?;
    let q = wait_synced(&client, &ns, "q").await?;
    eprintln!(
        "status written by the image's controller: {}",
        serde_json::to_string(&q.status)?
    );

    step("[Admission] register the image's webhook; one binding fits, one is over");
    let registration = Registration::register(&client, &webhook.url(), &[&ns], &[&webhook]).await?;
    let small = Rb::deployment("small", 1).request("cpu", "1").json(&ns);
    wait_until_status_seen(&client, &small).await?;
    expect_admitted(create(&client, &small).await?)?;
    let big = Rb::deployment("big", 2).request("cpu", "1").json(&ns);
    expect_refused(
        &create(&client, &big).await?,
        403,
        &binding_denied(
            "exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=1, \
             limited: requests.cpu=2",
        ),
    )?;

    registration.cleanup().await?;
    webhook.kill().await?;
    controller.kill().await?;
    test_ns.delete(&client).await?;
    let _ = std::fs::remove_dir_all(work);
    Ok(())
}
