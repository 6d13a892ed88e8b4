//! The container image `make image` exports, unpacked and run without a container
//! engine: its root filesystem, entered as a runtime would enter it.
//!
//! ```text
//!  archive()     $KQ_IMAGE_ARCHIVE, else <target>/image/karmada-quota-<appVersion>.oci.tar
//!       │        (or .docker.tar: what hack/image.sh wrote with docker)
//!       ▼
//!  unpack()      tar -xf → OCI layout (index.json → manifest → layers) or docker-archive
//!       │        (manifest.json → layers); the layers extracted in order into rootfs/;
//!       │        the config (User, Entrypoint) and the manifest's digest
//!       ▼
//!  Sandbox::prepare(rootfs, binds, hosts, resolv.conf)
//!       │        mount points a runtime would create (proc/, dev/ with runc's device
//!       │        nodes, etc/hosts, etc/resolv.conf, each bind's path); bin/<name> for
//!       │        each binary of the image:
//!       │          unshare --mount (private) → sh enter.sh:
//!       │            rootfs bind-mounted read-only onto itself, proc, /etc/hosts and
//!       │            /etc/resolv.conf and every bind read-only at the same path,
//!       │            exec chroot --userspec=65532:65532 rootfs /usr/local/bin/<name> …
//!       │        each step an exec: the pid the harness holds is the binary's own
//!       ▼
//!  E2E_BIN_DIR=<sandbox>/bin: Webhook::builder() and Controller::builder() start the
//!  image's binaries; identity(pid) reads what the kernel says about them
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_json::Value;

use crate::chart::{chart_yaml, run_tool};
use crate::env::target_dir;

/// Variable naming the image archive to test (OCI archive or docker-archive).
pub const ENV_IMAGE_ARCHIVE: &str = "KQ_IMAGE_ARCHIVE";
/// The image's user and group (the chart's securityContext runs as the same ids).
pub const IMAGE_UID: u32 = 65532;
/// The binaries the image holds, under /usr/local/bin.
pub const IMAGE_BINARIES: &[&str] = &["karmada-quota-webhook", "karmada-quota-controller"];

/// The archive to test: [`ENV_IMAGE_ARCHIVE`], else the one hack/image.sh exports for the
/// chart's appVersion; `None` when neither exists.
pub fn archive() -> Result<Option<PathBuf>> {
    if let Some(p) = std::env::var_os(ENV_IMAGE_ARCHIVE).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        ensure!(
            p.is_file(),
            "{ENV_IMAGE_ARCHIVE}={} does not exist",
            p.display()
        );
        return Ok(Some(p));
    }
    let version = app_version()?;
    let dir = target_dir()?.join("image");
    Ok(["oci", "docker"]
        .iter()
        .map(|kind| dir.join(format!("karmada-quota-{version}.{kind}.tar")))
        .find(|p| p.is_file()))
}

/// The chart's appVersion: the image's tag.
pub fn app_version() -> Result<String> {
    chart_yaml()?["appVersion"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("Chart.yaml has no appVersion"))
}

/// What hack/image.sh recorded next to the archive (`karmada-quota-<v>.json`), if any.
pub fn recorded_meta(archive: &Path) -> Option<Value> {
    let name = archive.file_name()?.to_str()?;
    let stem = name
        .strip_suffix(".oci.tar")
        .or_else(|| name.strip_suffix(".docker.tar"))?;
    let text = std::fs::read_to_string(archive.with_file_name(format!("{stem}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// The recorded digest, relative to the repository root: the image `make image` built
/// from the commit that wrote it (the README cites it).
pub const RECORDED_DIGEST: &str = "hack/image/digest";

/// The digest the chart is installed with (`image.digest`) and where it came from: the
/// manifest digest hack/image.sh recorded for the archive it exported, else
/// [`RECORDED_DIGEST`].
pub fn image_digest() -> Result<(String, String)> {
    let built = archive()?.and_then(|a| {
        recorded_meta(&a)
            .and_then(|m| m["manifest_digest"].as_str().map(str::to_owned))
            .filter(|d| !d.is_empty())
            .map(|d| (d, a.display().to_string()))
    });
    if let Some(found) = built {
        return Ok(found);
    }
    let path = crate::Env::repo_root().join(RECORDED_DIGEST);
    let d = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned();
    ensure!(
        d.len() == 71 && d.starts_with("sha256:"),
        "{}: not a sha256 digest: {d:?}",
        path.display()
    );
    Ok((d, RECORDED_DIGEST.to_owned()))
}

/// An unpacked image.
#[derive(Debug)]
pub struct Unpacked {
    /// The root filesystem: every layer extracted in order.
    pub rootfs: PathBuf,
    /// The image configuration (`config.User`, `config.Entrypoint`, …).
    pub config: Value,
    /// `sha256:<hex>` of the manifest (OCI layout); `None` for a docker-archive.
    pub manifest_digest: Option<String>,
    /// Bytes of the layer blobs as stored (compressed) in the archive.
    pub layer_bytes: u64,
}

async fn tar_extract(archive: &Path, into: &Path) -> Result<()> {
    std::fs::create_dir_all(into).with_context(|| format!("creating {}", into.display()))?;
    let args = [
        "-xf".to_owned(),
        archive.display().to_string(),
        "-C".to_owned(),
        into.display().to_string(),
        "--no-same-owner".to_owned(),
    ];
    run_tool(Path::new("tar"), &args, &[]).await?;
    Ok(())
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `blobs/sha256/<hex>` of an OCI layout for `sha256:<hex>`.
fn blob(layout: &Path, digest: &str) -> Result<PathBuf> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| anyhow!("not a sha256 digest: {digest:?}"))?;
    Ok(layout.join("blobs/sha256").join(hex))
}

/// Unpacks `archive` (OCI archive or docker-archive) under `dir` (`layout/`, `rootfs/`).
pub async fn unpack(archive: &Path, dir: &Path) -> Result<Unpacked> {
    let layout = dir.join("layout");
    let rootfs = dir.join("rootfs");
    let _ = std::fs::remove_dir_all(dir);
    tar_extract(archive, &layout).await?;
    std::fs::create_dir_all(&rootfs)?;
    let (layers, config, manifest_digest) = if layout.join("index.json").is_file() {
        let index = read_json(&layout.join("index.json"))?;
        let digest = index["manifests"][0]["digest"]
            .as_str()
            .ok_or_else(|| anyhow!("{}: index.json names no manifest", archive.display()))?
            .to_owned();
        let manifest = read_json(&blob(&layout, &digest)?)?;
        let config = read_json(&blob(
            &layout,
            manifest["config"]["digest"].as_str().unwrap_or_default(),
        )?)?;
        let layers = manifest["layers"]
            .as_array()
            .ok_or_else(|| anyhow!("{}: the manifest has no layers", archive.display()))?
            .iter()
            .map(|l| blob(&layout, l["digest"].as_str().unwrap_or_default()))
            .collect::<Result<Vec<_>>>()?;
        (layers, config, Some(digest))
    } else if layout.join("manifest.json").is_file() {
        let manifest = read_json(&layout.join("manifest.json"))?;
        let first = &manifest[0];
        let config = read_json(&layout.join(first["Config"].as_str().unwrap_or_default()))?;
        let layers = first["Layers"]
            .as_array()
            .ok_or_else(|| anyhow!("{}: manifest.json lists no layers", archive.display()))?
            .iter()
            .map(|l| layout.join(l.as_str().unwrap_or_default()))
            .collect();
        (layers, config, None)
    } else {
        bail!(
            "{}: neither an OCI archive (index.json) nor a docker-archive (manifest.json)",
            archive.display()
        );
    };
    let mut layer_bytes = 0;
    for layer in &layers {
        layer_bytes += std::fs::metadata(layer)
            .with_context(|| format!("layer {}", layer.display()))?
            .len();
        // GNU tar recognises gzip by itself. A FROM scratch image has no whiteouts.
        tar_extract(layer, &rootfs).await?;
    }
    Ok(Unpacked {
        rootfs,
        config,
        manifest_digest,
        layer_bytes,
    })
}

/// `sha256:<hex>` of a file (sha256sum).
pub async fn sha256_of(path: &Path) -> Result<String> {
    let text = run_tool(Path::new("sha256sum"), &[path.display().to_string()], &[]).await?;
    let hex = text
        .split_whitespace()
        .next()
        .ok_or_else(|| anyhow!("sha256sum printed nothing"))?;
    Ok(format!("sha256:{hex}"))
}

/// Every file under `rootfs` (relative paths, sorted); directories left out.
pub fn files(rootfs: &Path) -> Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                walk(root, &path, out)?;
            } else {
                out.push(path.strip_prefix(root)?.display().to_string());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(rootfs, rootfs, &mut out)?;
    out.sort();
    Ok(out)
}

/// The device nodes every runtime gives a container (runc's default set), bound from the
/// host. A static glibc build needs /dev/urandom: the getrandom crate looks the libc
/// function up with dlsym, which finds nothing in a static binary, and falls back to the
/// file (without it the controller panics at start).
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// A root filesystem made ready to be entered, with a launcher per binary.
#[derive(Debug)]
pub struct Sandbox {
    /// The directory of the launchers (`bin/<binary>`): what `E2E_BIN_DIR` names.
    pub bin_dir: PathBuf,
    /// The root filesystem the launchers enter.
    pub rootfs: PathBuf,
}

/// A path safe to write into a shell script unquoted-by-accident: single-quoted.
fn shell_quote(p: &Path) -> Result<String> {
    let s = p
        .to_str()
        .ok_or_else(|| anyhow!("{} is not UTF-8", p.display()))?;
    ensure!(!s.contains('\''), "{s} holds a quote");
    Ok(format!("'{s}'"))
}

impl Sandbox {
    /// Prepares `rootfs` (unpacked in `work`) to be entered: the mount points a runtime
    /// creates, `hosts` and `resolv` as its /etc/hosts and /etc/resolv.conf, each of
    /// `binds` (absolute host directories: certificates, kubeconfigs) mounted read-only at
    /// the same path, and a launcher per binary in `work/bin`.
    pub fn prepare(
        work: &Path,
        rootfs: &Path,
        binds: &[&Path],
        hosts: &str,
        resolv: &str,
    ) -> Result<Sandbox> {
        for dir in ["proc", "dev"] {
            std::fs::create_dir_all(rootfs.join(dir))?;
        }
        for dev in DEVICES {
            std::fs::write(rootfs.join("dev").join(dev), "")?;
        }
        let etc_hosts = work.join("hosts");
        let etc_resolv = work.join("resolv.conf");
        std::fs::write(&etc_hosts, hosts)?;
        std::fs::write(&etc_resolv, resolv)?;
        for f in ["etc/hosts", "etc/resolv.conf"] {
            std::fs::write(rootfs.join(f), "")?;
        }
        let r = shell_quote(rootfs)?;
        let mut script = format!(
            "# Enters the image's root filesystem as a container runtime would (written by\n\
             # e2e/src/image.rs); run inside `unshare --mount`.\n\
             set -eu\n\
             r={r}\n\
             mount --bind \"$r\" \"$r\"\n\
             mount -o remount,bind,ro \"$r\"\n\
             mount -t proc -o nosuid,nodev,noexec proc \"$r/proc\"\n\
             mount --bind {hosts} \"$r/etc/hosts\"\n\
             mount -o remount,bind,ro \"$r/etc/hosts\"\n\
             mount --bind {resolv} \"$r/etc/resolv.conf\"\n\
             mount -o remount,bind,ro \"$r/etc/resolv.conf\"\n\
             for d in {devices}; do mount --bind \"/dev/$d\" \"$r/dev/$d\"; done\n",
            hosts = shell_quote(&etc_hosts)?,
            resolv = shell_quote(&etc_resolv)?,
            devices = DEVICES.join(" "),
        );
        for b in binds {
            ensure!(b.is_absolute(), "bind {} is not absolute", b.display());
            std::fs::create_dir_all(rootfs.join(b.strip_prefix("/")?))?;
            let q = shell_quote(b)?;
            script.push_str(&format!(
                "mount --bind {q} \"$r\"{q}\nmount -o remount,bind,ro \"$r\"{q}\n"
            ));
        }
        script.push_str(&format!(
            "exec chroot --userspec={IMAGE_UID}:{IMAGE_UID} --groups={IMAGE_UID} \"$r\" \"$@\"\n"
        ));
        let enter = work.join("enter.sh");
        std::fs::write(&enter, script)?;
        let bin_dir = work.join("bin");
        std::fs::create_dir_all(&bin_dir)?;
        for name in IMAGE_BINARIES {
            let launcher = bin_dir.join(name);
            std::fs::write(
                &launcher,
                format!(
                    "#!/bin/sh\n# /usr/local/bin/{name} of the image (e2e/src/image.rs)\n\
                     PATH=/usr/sbin:/usr/bin:/sbin:/bin\nexport PATH\n\
                     exec unshare --mount --propagation private /bin/sh {enter} \
                     /usr/local/bin/{name} \"$@\"\n",
                    enter = shell_quote(&enter)?
                ),
            )?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Sandbox {
            bin_dir,
            rootfs: rootfs.to_path_buf(),
        })
    }
}

/// What the kernel says about a running process.
#[derive(Debug)]
pub struct Identity {
    /// Real, effective, saved and filesystem uids.
    pub uids: Vec<u32>,
    /// Real, effective, saved and filesystem gids.
    pub gids: Vec<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The effective capability set (hex).
    pub cap_eff: String,
    /// Where the process's `root` link in /proc points (its root directory).
    pub root: PathBuf,
    /// Whether the process's `/` is mounted read-only.
    pub root_read_only: bool,
    /// The executable, as the process sees it (`/proc/<pid>/cmdline`'s first word).
    pub exe: String,
}

/// The [`Identity`] of `pid`.
pub fn identity(pid: u32) -> Result<Identity> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let status = std::fs::read_to_string(proc.join("status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Vec<String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let ids =
        |name: &str| -> Vec<u32> { field(name).iter().filter_map(|v| v.parse().ok()).collect() };
    let mountinfo = std::fs::read_to_string(proc.join("mountinfo"))
        .with_context(|| format!("reading /proc/{pid}/mountinfo"))?;
    // The last mount at "/" is the one the process sees (fields: id parent dev root
    // mountpoint options …).
    let root_options = mountinfo
        .lines()
        .rev()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(4) == Some(&"/")).then(|| f.get(5).copied().unwrap_or("").to_owned())
        })
        .ok_or_else(|| anyhow!("/proc/{pid}/mountinfo has no mount at /"))?;
    let cmdline = std::fs::read(proc.join("cmdline"))?;
    Ok(Identity {
        uids: ids("Uid:"),
        gids: ids("Gid:"),
        groups: ids("Groups:"),
        cap_eff: field("CapEff:").first().cloned().unwrap_or_default(),
        root: std::fs::read_link(proc.join("root"))
            .with_context(|| format!("reading the root link of /proc/{pid}"))?,
        root_read_only: root_options.split(',').any(|o| o == "ro"),
        exe: String::from_utf8_lossy(cmdline.split(|b| *b == 0).next().unwrap_or_default())
            .into_owned(),
    })
}
