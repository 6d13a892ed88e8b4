//! `make plugin-dist` (hack/plugin-dist.sh): the archive and krew manifest it writes are
//! installed the way krew installs a plugin — platform chosen by the manifest's selector,
//! the archive checked against its sha256, its `files` copied into a versioned store, the
//! `bin` linked into a bin directory on PATH — and kubectl then finds and runs the plugin.
//! Without kubectl the test fails unless `KQ_ALLOW_SKIP` names `kubectl`
//! (karmada_quota_e2e::skip); then it records the skip and runs the installed plugin
//! directly.

use std::path::{Path, PathBuf};
use std::process::Command;

use karmada_quota_e2e::skip::{KUBECTL, prerequisite};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kq-plugin-dist-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Install `manifest` into `prefix` as krew does; the path of the linked binary, or why not.
fn krew_install(manifest: &Value, prefix: &Path) -> Result<PathBuf, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let spec = &manifest["spec"];
    let platform = spec["platforms"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| {
            let l = &p["selector"]["matchLabels"];
            l["os"] == "linux" && l["arch"] == arch
        })
        .ok_or("no platform for this machine")?;
    let uri = platform["uri"].as_str().ok_or("no uri")?;
    let archive = PathBuf::from(uri.strip_prefix("file://").ok_or("not a file:// uri")?);
    let want = platform["sha256"].as_str().ok_or("no sha256")?;
    let got = sha256(&archive);
    if got != want {
        return Err(format!("sha256 mismatch: archive {got}, manifest {want}"));
    }
    let name = manifest["metadata"]["name"].as_str().ok_or("no name")?;
    let version = spec["version"].as_str().ok_or("no version")?;
    let unpacked = prefix.join("download");
    std::fs::create_dir_all(&unpacked).unwrap();
    let ok = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .map_err(|e| e.to_string())?;
    if !ok.success() {
        return Err("tar failed".into());
    }
    let store = prefix.join("store").join(name).join(version);
    std::fs::create_dir_all(&store).unwrap();
    for f in platform["files"].as_array().ok_or("no files")? {
        let from = f["from"].as_str().ok_or("file without from")?;
        let to = f["to"].as_str().ok_or("file without to")?;
        let src = unpacked.join(from);
        let dst = store.join(to).join(from);
        std::fs::copy(&src, &dst).map_err(|e| format!("{from}: {e}"))?;
    }
    let bin = platform["bin"].as_str().ok_or("no bin")?;
    let bin_dir = prefix.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let link = bin_dir.join(bin);
    std::os::unix::fs::symlink(store.join(bin), &link).map_err(|e| e.to_string())?;
    Ok(link)
}

#[test]
fn the_release_archive_installs_as_krew_does_and_kubectl_runs_it() {
    let out = tmp("out");
    let status = Command::new("bash")
        .arg(repo().join("hack/plugin-dist.sh"))
        .env("KQ_PLUGIN_BIN", env!("CARGO_BIN_EXE_kubectl-karmada_quota"))
        .env("OUT", &out)
        .status()
        .expect("run hack/plugin-dist.sh");
    assert!(status.success());
    let text = std::fs::read_to_string(out.join("karmada-quota.yaml")).unwrap();
    let manifest: Value = serde_saphyr::from_str(&text).expect("the manifest is YAML");
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    // krew runs `kubectl-<name with - as _>`: the manifest's name must map to the binary.
    assert_eq!(
        format!(
            "kubectl-{}",
            manifest["metadata"]["name"]
                .as_str()
                .unwrap()
                .replace('-', "_")
        ),
        manifest["spec"]["platforms"][0]["bin"].as_str().unwrap()
    );

    let prefix = tmp("prefix");
    let bin = krew_install(&manifest, &prefix).expect("installs");
    let path = format!(
        "{}:{}",
        prefix.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let has_kubectl = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    let help = if has_kubectl {
        let list = Command::new("kubectl")
            .args(["plugin", "list", "--name-only"])
            .env("PATH", &path)
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&list.stdout);
        assert!(
            listed.contains("kubectl-karmada_quota"),
            "kubectl plugin list: {listed}"
        );
        Command::new("kubectl")
            .args(["karmada-quota", "--help"])
            .env("PATH", &path)
            .output()
            .unwrap()
    } else {
        if let Err(e) = prerequisite(
            KUBECTL,
            "the plugin through kubectl: kubectl not found (the installed plugin runs directly)",
        ) {
            panic!("{e:#}");
        }
        Command::new(&bin).arg("--help").output().unwrap()
    };
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    assert!(text.contains("check") && text.contains("report"), "{text}");

    // A tampered archive is refused by the checksum.
    let archive = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "gz"))
        .unwrap();
    let mut bytes = std::fs::read(&archive).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&archive, bytes).unwrap();
    let tampered = tmp("tampered");
    let err = krew_install(&manifest, &tampered).unwrap_err();
    assert!(err.contains("sha256 mismatch"), "{err}");
    for d in [out, prefix, tampered] {
        std::fs::remove_dir_all(d).ok();
    }
}
