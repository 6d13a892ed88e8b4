//! The interpreter against scripts in Karmada's style: pricing by `kube`, wrong shapes,
//! failing scripts, and attacks on the sandbox (runaway loops, memory bombs, I/O).

use std::time::Duration;

use karmada_quota_core::ResourceList;
use karmada_quota_interpreter::template::Template;
use karmada_quota_interpreter::{
    Customization, Customizations, InterpretError, Interpreted, Limits, Scripts, interpret,
};
use serde_json::{Value, json};

const TARGET: &str = "example.io/v1";

fn widget(replicas: i64) -> Value {
    json!({
        "apiVersion": TARGET,
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {
            "size": replicas,
            "podTemplate": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {
                    "containers": [
                        {"resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}},
                        {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}}}
                    ],
                    "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
                    "nodeSelector": {"gpu": "yes"}
                }
            },
            "master": {"replicas": 1, "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}},
            "worker": {"replicas": 3, "template": {"spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}}}]}}}
        }
    })
}

const GET_REPLICAS: &str = r#"
local kube = require("kube")
function GetReplicas(obj)
  local requirement = kube.accuratePodRequirements(obj.spec.podTemplate)
  return obj.spec.size, requirement
end
"#;

const GET_COMPONENTS: &str = r#"
function GetComponents(obj)
  local kube = require("kube")
  local components = {}
  table.insert(components, {
    name = "master",
    replicas = obj.spec.master.replicas,
    replicaRequirements = kube.accuratePodRequirements(obj.spec.master.template)
  })
  table.insert(components, {
    name = "worker",
    replicas = obj.spec.worker.replicas,
    replicaRequirements = kube.accuratePodRequirements(obj.spec.worker.template)
  })
  return components
end
"#;

/// The scripts of customization `widgets` for Widget, with these sources.
fn scripts(replica_script: &str, component_script: &str) -> Scripts {
    Customizations::new(vec![Customization {
        name: "widgets".to_owned(),
        api_version: TARGET.to_owned(),
        kind: "Widget".to_owned(),
        replica_script: replica_script.to_owned(),
        component_script: component_script.to_owned(),
    }])
    .scripts(TARGET, "Widget")
    .cloned()
    .expect("scripts")
}

fn replicas_script(source: &str) -> Scripts {
    scripts(source, "")
}

fn components_script(source: &str) -> Scripts {
    scripts("", source)
}

fn run(source: &str) -> Result<Interpreted, InterpretError> {
    interpret(&replicas_script(source), &widget(3), Limits::default())
}

/// The defaults, with a clock that cannot fire first on a slow machine (the limit under
/// test must be the one that stops the script).
fn no_clock() -> Limits {
    Limits {
        timeout: Duration::from_secs(120),
        ..Limits::default()
    }
}

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    ResourceList::parse_map(pairs.iter().copied()).expect("list")
}

/// The per-replica request core's built-in rule gives the same pod spec in a Deployment.
fn core_request(pod_template: &Value) -> ResourceList {
    let t: Template = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "spec": {"replicas": 1, "template": pod_template}
    }))
    .expect("deployment");
    t.binding()
        .expect("binding")
        .replica_requirements
        .expect("requirements")
        .resource_request
}

#[test]
fn get_replicas_with_accurate_pod_requirements_prices_as_the_built_in_rule() {
    let got = run(GET_REPLICAS).expect("interpreted");
    assert_eq!(got.replicas, 3);
    let request = got
        .replica_requirements
        .expect("requirements")
        .resource_request;
    // The init container's 2 cpu beats the 1250m of the app containers; a limit stands in
    // for the missing request (Karmada's AddPodTemplateRequest, the crate's pod_request).
    assert_eq!(
        request,
        list(&[("cpu", "2"), ("memory", "128Mi"), ("nvidia.com/gpu", "1")])
    );
    assert_eq!(request, core_request(&widget(3)["spec"]["podTemplate"]));
    assert!(got.components.is_empty());
}

#[test]
fn the_override_is_what_the_templates_binding_carries() {
    let mut t: Template = serde_json::from_value(widget(3)).expect("template");
    let before = t.binding().expect("binding");
    assert_eq!(
        (before.replicas, before.replica_requirements.is_some()),
        (0, false)
    );
    t.interpreted = Some(run(GET_REPLICAS).expect("interpreted"));
    let after = t.binding().expect("binding");
    assert_eq!(after.replicas, 3);
    assert_eq!(
        after
            .replica_requirements
            .expect("requirements")
            .resource_request,
        list(&[("cpu", "2"), ("memory", "128Mi"), ("nvidia.com/gpu", "1")])
    );
    assert_eq!(after.resource.name, "w");
}

#[test]
fn accurate_pod_requirements_returns_karmadas_table_shape() {
    let got = run(r#"
local kube = require("kube")
function GetReplicas(obj)
  local r = kube.accuratePodRequirements(obj.spec.podTemplate)
  local none = kube.accuratePodRequirements({spec = {containers = {{}}}})
  assert(none == nil, "a template that requests nothing gives nil")
  assert(r.nodeClaim.nodeSelector.gpu == "yes", "nodeClaim.nodeSelector")
  assert(r.priorityClassName == nil, "no priorityClassName without ResourceQuotaEstimate")
  return 1, {resourceRequest = {cpu = r.resourceRequest.cpu, memory = r.resourceRequest.memory}}
end
"#)
    .expect("interpreted");
    assert_eq!(
        got.replica_requirements
            .expect("requirements")
            .resource_request,
        list(&[("cpu", "2"), ("memory", "128Mi")])
    );
}

#[test]
fn resource_add_and_get_resource_quantity() {
    let got = run(r#"
local kube = require("kube")
function GetReplicas(obj)
  local cpu = kube.resourceAdd("250m", "1", nil, "750m")
  assert(kube.getResourceQuantity("500m") == 0.5, "getResourceQuantity")
  return 2, {resourceRequest = {cpu = cpu, memory = 1073741824}, priorityClassName = "high"}
end
"#)
    .expect("interpreted");
    assert_eq!(got.replicas, 2);
    let rr = got.replica_requirements.expect("requirements");
    assert_eq!(
        rr.resource_request,
        list(&[("cpu", "2"), ("memory", "1Gi")])
    );
    assert_eq!(rr.priority_class_name, "high");
}

/// A request past 2⁶³−1 (Kubernetes stores `12E` as given), from a template or a script,
/// is priced as asked, not refused: a workload asking it must be charged (core's
/// `Quantity::read`).
#[test]
fn a_request_past_the_largest_quantity_is_priced_as_asked() {
    let got = run(r#"
local kube = require("kube")
function GetReplicas(obj)
  local cpu = kube.resourceAdd("12E", "1")
  assert(kube.resourceAdd("1e300", "1") == kube.resourceAdd("1e300"), "a sum saturates")
  assert(kube.getResourceQuantity("12E") == 1.2e19, "getResourceQuantity")
  local pod = kube.accuratePodRequirements({spec = {containers = {
    {name = "c", resources = {requests = {memory = "12E", cpu = "-12E"}}}}}})
  return 1, {resourceRequest = {cpu = cpu, memory = pod.resourceRequest.memory,
    ["example.com/widget"] = pod.resourceRequest.cpu}}
end
"#)
    .expect("interpreted");
    let rr = got.replica_requirements.expect("requirements");
    assert_eq!(
        rr.resource_request.get_or_zero("cpu").to_string(),
        "12000000000000000001"
    );
    // The per-replica rule keeps a request past int64 whole (Karmada would hold it in an
    // int64), the same as the built-in rule; a negative one stays negative.
    let template = serde_json::json!({"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"memory": "12E", "cpu": "-12E"}}}
    ]}});
    let built_in = core_request(&template);
    let twelve_e = karmada_quota_core::Quantity::read("12E").unwrap();
    assert_eq!(built_in.get_or_zero("memory"), twelve_e); // printed 11444091796875Mi
    // Through Lua it travels as the string `11444091796875Mi`, which reads back clamped to
    // the largest quantity as Kubernetes reads a BinarySI past it: still above any `hard`.
    assert_eq!(
        rr.resource_request.get_or_zero("memory"),
        karmada_quota_core::Quantity::from_units(
            karmada_quota_core::Quantity::MAX_UNITS,
            karmada_quota_core::Format::BinarySI
        )
    );
    assert_eq!(built_in.get_or_zero("cpu"), -twelve_e);
    assert_eq!(
        rr.resource_request.get_or_zero("example.com/widget"),
        built_in.get_or_zero("cpu")
    );
}

#[test]
fn get_components_prices_each_component() {
    let got = interpret(
        &components_script(GET_COMPONENTS),
        &widget(3),
        Limits::default(),
    )
    .expect("interpreted");
    let summary: Vec<(String, i32, ResourceList)> = got
        .components
        .into_iter()
        .map(|c| {
            (
                c.name,
                c.replicas,
                c.replica_requirements
                    .expect("requirements")
                    .resource_request,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "master".to_owned(),
                1,
                list(&[("cpu", "1"), ("memory", "1Gi")])
            ),
            ("worker".to_owned(), 3, list(&[("cpu", "500m")])),
        ]
    );
}

#[test]
fn components_win_over_replicas_and_the_first_customization_by_name_wins() {
    let c = |name: &str, replicas: &str, components: &str| Customization {
        name: name.to_owned(),
        api_version: TARGET.to_owned(),
        kind: "Widget".to_owned(),
        replica_script: replicas.to_owned(),
        component_script: components.to_owned(),
    };
    let set = Customizations::new(vec![
        c("b-second", "function GetReplicas(o) return 9 end", ""),
        c("a-first", "function GetReplicas(o) return 4 end", ""),
    ]);
    let got = set
        .interpret(&widget(3), Limits::default())
        .expect("targeted");
    assert_eq!(got.expect("interpreted").replicas, 4);
    let set = Customizations::new(vec![
        c("a-first", "function GetReplicas(o) return 4 end", ""),
        c("b-second", "", GET_COMPONENTS),
    ]);
    let got = set
        .interpret(&widget(3), Limits::default())
        .expect("targeted")
        .expect("interpreted");
    assert_eq!((got.replicas, got.components.len()), (0, 2));
    // Another kind is not targeted.
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
    assert!(set.interpret(&other, Limits::default()).is_none());
}

#[test]
fn customization_objects_are_read_from_their_manifest() {
    let doc: Value = serde_saphyr::from_str(
        r#"
apiVersion: config.karmada.io/v1alpha1
kind: ResourceInterpreterCustomization
metadata: {name: widgets}
spec:
  target: {apiVersion: example.io/v1, kind: Widget}
  customizations:
    replicaResource:
      luaScript: |
        function GetReplicas(obj) return obj.spec.size, nil end
"#,
    )
    .expect("yaml");
    assert!(karmada_quota_interpreter::is_customization(&doc));
    let c = Customization::from_object(&doc).expect("customization");
    assert_eq!((c.name.as_str(), c.kind.as_str()), ("widgets", "Widget"));
    let got = Customizations::new(vec![c])
        .interpret(&widget(5), Limits::default())
        .expect("targeted")
        .expect("interpreted");
    assert_eq!((got.replicas, got.replica_requirements), (5, None));
    let err =
        Customization::from_object(&json!({"metadata": {"name": "x"}, "spec": {}})).unwrap_err();
    assert!(err.contains("spec.target"), "{err}");
}

fn error(source: &str) -> InterpretError {
    run(source).expect_err("an error")
}

/// `source` is stopped by the limit `says` names, and the error names the customization.
fn assert_stopped(source: &str, says: &str) {
    let e = interpret(&replicas_script(source), &widget(3), no_clock()).expect_err("stopped");
    assert_eq!(e.customization, "widgets");
    assert!(e.message.contains(says), "{source}: {e}");
}

#[test]
fn a_failing_script_names_the_customization_and_the_function() {
    let e = error("function GetReplicas(obj) error('no size here') end");
    assert_eq!(
        (e.customization.as_str(), e.function),
        ("widgets", "GetReplicas")
    );
    assert!(e.message.contains("no size here"), "{e}");
    assert!(
        e.to_string()
            .starts_with("ResourceInterpreterCustomization widgets: GetReplicas: "),
        "{e}"
    );
    assert!(
        error("function GetReplicas(obj) return obj.spec.nothing.deeper end")
            .message
            .contains("index")
    );
    assert!(
        error("function GetReplicas(obj) return 1")
            .message
            .contains("syntax error")
    );
    assert!(
        error("function Other(obj) return 1 end")
            .message
            .contains("defines no function GetReplicas")
    );
    // A quantity kube cannot parse names the field under the pod template.
    let e = error(
        r#"
local kube = require("kube")
function GetReplicas(obj)
  return 1, kube.accuratePodRequirements({spec = {containers = {{resources = {requests = {cpu = "lots"}}}}}})
end"#,
    );
    assert!(
        e.message.contains(
            "kube.accuratePodRequirements: podTemplate.spec.containers[0].resources.requests[cpu]"
        ),
        "{e}"
    );
}

#[test]
fn wrong_shapes_name_the_field() {
    type Case = (fn(&str) -> Scripts, &'static str, &'static str);
    let replicas: fn(&str) -> Scripts = replicas_script;
    let components: fn(&str) -> Scripts = components_script;
    let cases: [Case; 12] = [
        (
            replicas,
            "function GetReplicas(o) return '3' end",
            "replica",
        ),
        (replicas, "function GetReplicas(o) return -1 end", "replica"),
        (
            replicas,
            "function GetReplicas(o) return 1, 5 end",
            "requirement",
        ),
        (
            replicas,
            "function GetReplicas(o) return 1, {resourceRequest = {cpu = 'lots'}} end",
            "requirement.resourceRequest[cpu]",
        ),
        (
            replicas,
            "function GetReplicas(o) return 1, {resourceRequest = {cpu = true}} end",
            "requirement.resourceRequest[cpu]",
        ),
        (
            replicas,
            "function GetReplicas(o) return 1, {resourceRequest = {'1', '2'}} end",
            "requirement.resourceRequest",
        ),
        (
            replicas,
            "function GetReplicas(o) return 1, {priorityClassName = function() end} end",
            "requirement.priorityClassName",
        ),
        (
            components,
            "function GetComponents(o) return 'x' end",
            "components",
        ),
        (
            components,
            "function GetComponents(o) return {a = {}} end",
            "components",
        ),
        (
            components,
            "function GetComponents(o) return {{replicas = 1}} end",
            "components[0].name",
        ),
        (
            components,
            "function GetComponents(o) return {{name = 'a', replicas = 1.5}} end",
            "components[0].replicas",
        ),
        (
            components,
            "function GetComponents(o) return {{name = 'a', replicas = 1, replicaRequirements = {resourceRequest = {memory = '1Zi'}}}} end",
            "components[0].replicaRequirements.resourceRequest[memory]",
        ),
    ];
    for (scripts, source, field) in cases {
        let e = interpret(&scripts(source), &widget(1), Limits::default()).expect_err("an error");
        assert_eq!(e.field, field, "{source}: {e}");
        let function = if source.contains("GetComponents") {
            "GetComponents"
        } else {
            "GetReplicas"
        };
        assert_eq!(e.function, function, "{source}");
    }
    // A table that contains itself is refused, not followed forever.
    let e = error("function GetReplicas(o) local t = {} t.me = t return 1, t end");
    assert!(e.message.contains("nested deeper"), "{e}");
    // nil components: none (a valid answer in Karmada).
    let none = interpret(
        &components_script("function GetComponents(o) return nil end"),
        &widget(1),
        Limits::default(),
    )
    .expect("interpreted");
    assert!(none.components.is_empty());
}

#[test]
fn a_runaway_loop_is_stopped_by_the_instruction_limit() {
    for source in [
        "function GetReplicas(o) while true do end end",
        // pcall cannot swallow the stop.
        "function GetReplicas(o) while true do pcall(function() while true do end end) end end",
        "function GetReplicas(o) while true do xpcall(function() while true do end end, function(e) return e end) end end",
        // Top-level code runs under the same limit.
        "while true do end",
        // Tail recursion never overflows the stack.
        "local function f() return f() end function GetReplicas(o) return f() end",
    ] {
        assert_stopped(source, "stopped: more than 10000000 Lua instructions");
    }
}

#[test]
fn a_slow_script_is_stopped_by_the_timeout() {
    let limits = Limits {
        instructions: u64::MAX,
        timeout: Duration::from_millis(50),
        ..Limits::default()
    };
    let e = interpret(
        &replicas_script("function GetReplicas(o) while true do end end"),
        &widget(1),
        limits,
    )
    .expect_err("stopped");
    assert!(e.message.contains("stopped: ran longer than 50ms"), "{e}");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

#[test]
fn a_memory_bomb_is_stopped_by_the_memory_limit() {
    let before = rss_kib();
    for source in [
        // One huge string.
        "function GetReplicas(o) return #string.rep('x', 2^30) end",
        // Many small allocations, doubling.
        "function GetReplicas(o) local s = 'xxxxxxxx' while true do s = s .. s end end",
        "function GetReplicas(o) local t = {} for i = 1, 1e9 do t[i] = {i} end end",
        // pcall cannot swallow it either.
        "function GetReplicas(o) local t = {} while true do pcall(function() t[#t + 1] = string.rep('y', 4096) .. #t end) end end",
    ] {
        assert_stopped(source, "stopped: allocated more than 33554432 bytes");
    }
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    // 32 MiB per state, freed with it; a bound lost would take GiBs.
    assert!(grown_mib < 256, "RSS grew {grown_mib} MiB");
}

#[test]
fn io_os_debug_and_loaders_are_unavailable() {
    for (source, says) in [
        (
            "function GetReplicas(o) os.execute('true') return 1 end",
            "os",
        ),
        (
            "function GetReplicas(o) io.open('/etc/passwd') return 1 end",
            "io",
        ),
        (
            "function GetReplicas(o) require('os') return 1 end",
            "only \"kube\"",
        ),
        (
            "function GetReplicas(o) require('io') return 1 end",
            "only \"kube\"",
        ),
        (
            "function GetReplicas(o) debug.getinfo(1) return 1 end",
            "debug",
        ),
        (
            "function GetReplicas(o) package.loadlib('x', 'y') return 1 end",
            "package",
        ),
        (
            "function GetReplicas(o) loadstring('return 1')() return 1 end",
            "loadstring is not available",
        ),
        (
            "function GetReplicas(o) load(function() return nil end) return 1 end",
            "load is not available",
        ),
        (
            "function GetReplicas(o) dofile('/etc/passwd') return 1 end",
            "dofile is not available",
        ),
        (
            "function GetReplicas(o) string.dump(GetReplicas) return 1 end",
            "dump",
        ),
        (
            "function GetReplicas(o) setmetatable({}, {}) return 1 end",
            "setmetatable is not available",
        ),
        (
            "function GetReplicas(o) coroutine.create(function() end) return 1 end",
            "coroutine",
        ),
    ] {
        let e = error(source);
        assert!(e.message.contains(says), "{source}: {e}");
    }
    // Precompiled bytecode is refused as a script.
    let e = error("\x1bLua\x51\x00");
    assert!(!e.message.is_empty(), "{e}");
    assert!(
        e.message.contains("binary") || e.message.contains("mode"),
        "{e}"
    );
}

/// Runs `source`'s GetReplicas in a thread of its own and waits at most `wait`: `None`
/// when it was still running (the thread is left behind; before the bound on patterns a
/// catastrophic pattern ran there for minutes).
fn within(source: &str, wait: Duration) -> Option<Result<Interpreted, InterpretError>> {
    let scripts = replicas_script(source);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(interpret(&scripts, &widget(1), Limits::default()));
    });
    rx.recv_timeout(wait).ok()
}

/// Pattern matching runs in C, where the instruction hook never fires: each of these ran
/// at full CPU far past the 1 s limit. Each is refused before it runs, well within the
/// bound, with a message naming the function and why.
#[test]
fn a_catastrophic_pattern_in_a_c_function_is_stopped_within_the_bound() {
    for source in [
        "function GetReplicas(o) return string.find(string.rep('a', 20000), '.-.-.-.-.-b') or 1 end",
        "function GetReplicas(o) local s = string.rep('a', 5000) return (s:match('(.*)(.*)(.*)(.*)x')) or 1 end",
        "function GetReplicas(o) return select(2, string.gsub(string.rep('a', 3000), 'a-a-a-a-a-b', '')) + 1 end",
        "function GetReplicas(o) for x in string.gmatch(string.rep('ab', 5000), '(.-)(.-)(.-)c') do end return 1 end",
        // A plain find of a long needle in a long haystack is n × m in C too.
        "function GetReplicas(o) local h = string.rep('a', 4000000) return string.find(h, string.rep('a', 400) .. 'b', 1, true) or 1 end",
        // string.rep of an empty string never allocates: two billion turns of a C loop.
        "function GetReplicas(o) return #string.rep('', 2^31 - 1) + 1 end",
        "function GetReplicas(o) return #(''):rep(1e300) + 1 end",
        // pcall cannot turn the refusal into a retry loop that runs away: every call is refused.
        "function GetReplicas(o) for i = 1, 100 do pcall(string.find, string.rep('a', 20000), '.-.-.-.-.-b') end return 1 end",
    ] {
        let started = std::time::Instant::now();
        let result = within(source, Duration::from_secs(2))
            .unwrap_or_else(|| panic!("still running after 2 s: {source}"));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{source}: {:?}",
            started.elapsed()
        );
        if source.contains("pcall") {
            assert_eq!(result.expect("pcall caught each refusal").replicas, 1);
            continue;
        }
        let e = result.expect_err("refused");
        let says = if source.contains("rep('', ") || source.contains(":rep(") {
            "repetitions of an empty string are refused"
        } else {
            "matching steps"
        };
        assert!(e.message.contains(says), "{source}: {e}");
        assert!(e.message.contains("refused"), "{e}");
    }
}

#[test]
fn patterns_over_what_templates_carry_still_work() {
    let got = run(r#"
        function GetReplicas(o)
          local n = 0
          local image = "registry.example.com/team/app:1.2.3"
          local repo, tag = image:match("^(.-):([%w%.%-]+)$")
          if repo == "registry.example.com/team/app" and tag == "1.2.3" then n = n + 1 end
          local trimmed = ("  500m  "):match("^%s*(.-)%s*$")
          if trimmed == "500m" then n = n + 1 end
          if string.find("a.b", ".", 1, true) == 2 then n = n + 1 end
          local s, count = string.gsub("a b  c", "%s+", " ")
          if s == "a b c" and count == 2 then n = n + 1 end
          for k, v in string.gmatch("cpu=1,memory=2", "(%w+)=(%w+)") do n = n + 1 end
          if string.find(12345, "34") == 3 then n = n + 1 end
          return n
        end"#)
    .expect("runs");
    assert_eq!(got.replicas, 7);
}

#[test]
fn a_pattern_longer_than_the_limit_is_refused() {
    let e = error("function GetReplicas(o) return string.find('x', string.rep('x?', 100000)) end");
    assert!(
        e.message.contains("pattern of 200000 bytes is refused"),
        "{e}"
    );
}
