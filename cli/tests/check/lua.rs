//! (A module of check.rs.) `check` pricing a custom kind through a ResourceInterpreterCustomization's Lua read
//! from the `-f` files, offline (`--usage none`): the customization wins over the
//! built-in rules; without it the kind is reported as unpriced, never as 0; a script that
//! fails or runs away fails the check naming the customization.

use std::process::Output;

use super::{plugin, stdout};

fn fixture(path: &str) -> String {
    super::fixture(&format!("lua/{path}"))
}

/// The fixture's Widget and quota with `script` as the customization's GetReplicas body
/// and `size` widgets, in a temporary directory.
fn with_script(tag: &str, size: u32, script: Option<&str>) -> (std::path::PathBuf, Output) {
    let dir = std::env::temp_dir().join(format!("kq-check-lua-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("widget.yaml"),
        std::fs::read_to_string(fixture("widget.yaml"))
            .unwrap()
            .replace("size: 3", &format!("size: {size}")),
    )
    .unwrap();
    if let Some(script) = script {
        let original = std::fs::read_to_string(fixture("customization.yaml")).unwrap();
        let head = original.split("luaScript: |").next().unwrap();
        let body: String = script.lines().map(|l| format!("        {l}\n")).collect();
        std::fs::write(
            dir.join("customization.yaml"),
            format!("{head}luaScript: |\n{body}"),
        )
        .unwrap();
    }
    let o = plugin(&["check", "-f", dir.to_str().unwrap(), "--usage", "none"]);
    (dir, o)
}

#[test]
fn a_custom_kind_is_priced_by_its_customizations_lua() {
    // 3 widgets × (1 cpu, 512Mi, 1 GPU) on member1 and member2: 6 pods, 6 cpu, 3Gi, 6 GPUs.
    let o = plugin(&["check", "-f", &fixture(""), "--usage", "none"]);
    let (out, err) = (stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains(
            "  adds:   pods=6, requests.cpu=6, requests.memory=3Gi, requests.nvidia.com/gpu=6\n"
        ),
        "{out}"
    );
    // Four widgets need 8 GPUs of 6: refused, saying what they would add.
    let (dir, o) = with_script(
        "four",
        4,
        Some(
            "local kube = require(\"kube\")\nfunction GetReplicas(obj)\n  return obj.spec.size, kube.accuratePodRequirements(obj.spec.podTemplate)\nend",
        ),
    );
    let out = stdout(&o);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "REFUSED Widget team-l/w by team-l/compute: exceeded quota: compute, requested: \
             requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=0, limited: \
             requests.nvidia.com/gpu=6\n  it would add: pods=8, requests.cpu=8, \
             requests.memory=4Gi, requests.nvidia.com/gpu=8\n"
        ),
        "{out}"
    );
}

#[test]
fn without_a_customization_the_kind_is_unpriced_never_zero() {
    let (dir, o) = with_script("none", 3, None);
    let out = stdout(&o);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("REFUSED Widget team-l/w by team-l/compute: Widget team-l/w (example.io/v1) runs pods that no replica count covers"),
        "{out}"
    );
}

#[test]
fn a_failing_or_runaway_script_fails_the_check_naming_the_customization() {
    for (tag, script, says) in [
        (
            "error",
            "function GetReplicas(obj)\n  error(\"widgets have no size\")\nend",
            "widgets have no size",
        ),
        (
            "loop",
            "function GetReplicas(obj)\n  while true do end\nend",
            "stopped:",
        ),
        (
            "shape",
            "function GetReplicas(obj)\n  return obj.spec.size, {resourceRequest = {cpu = \"lots\"}}\nend",
            "requirement.resourceRequest[cpu]",
        ),
        (
            "io",
            "function GetReplicas(obj)\n  return #io.open(\"/etc/passwd\"):read(\"*a\")\nend",
            "io",
        ),
    ] {
        let (dir, o) = with_script(tag, 3, Some(script));
        let out = stdout(&o);
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(o.status.code(), Some(1), "{tag}: {out}");
        assert!(
            out.contains(
                "Widget team-l/w: ResourceInterpreterCustomization widgets: GetReplicas: "
            ),
            "{tag}: {out}"
        );
        assert!(out.contains(says), "{tag}: {out}");
    }
}
