//! PropagationPolicy admission against a real apiserver, through `kubectl apply`: a policy
//! whose bindings fit is admitted silently; one that would exceed a quota is admitted with
//! a warning kubectl prints, or refused with `--policy-enforcement=deny`.

use std::process::Output;

use anyhow::{Result, ensure};
use karmada_quota_e2e::accepts;
use karmada_quota_e2e::commands::text;
use karmada_quota_e2e::setup::{WebhookSetup, step};
use karmada_quota_e2e::webhook::{Webhook, WebhookBuilder, quota, seed_used};

/// One namespace routed to one webhook started by `builder`, with a KarmadaQuota
/// `compute` of 2 cpu of which 1 is used.
struct Setup {
    inner: WebhookSetup,
}

impl Setup {
    async fn new(test: &str, builder: WebhookBuilder) -> Result<Setup> {
        let inner = WebhookSetup::with_webhook(test, builder).await?;
        let (c, ns) = (&inner.client, inner.ns());
        step("[Create] KarmadaQuota compute: requests.cpu=2, status.used 1");
        accepts(c, &quota(ns, "compute", &[("requests.cpu", "2")])).await?;
        seed_used(c, ns, "compute", &[("requests.cpu", "1")]).await?;
        Ok(Setup { inner })
    }

    fn ns(&self) -> &str {
        self.inner.ns()
    }

    /// `kubectl apply -f -` of `yaml`: the whole output (warnings are on stderr).
    async fn apply(&self, yaml: &str) -> Result<Output> {
        karmada_quota_e2e::commands::kubectl_apply(self.inner.env, yaml).await
    }

    fn deployment(&self, name: &str, replicas: u32) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}, labels: {{app: {name}}}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers: [{{name: c, image: none, resources: {{requests: {{cpu: '1'}}}}}}]\n",
            ns = self.ns()
        )
    }

    fn policy(&self, name: &str, template: &str) -> String {
        format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: {template}}}]\n  placement: {{replicaScheduling: {{replicaSchedulingType: Divided}}}}\n",
            ns = self.ns()
        )
    }

    /// A Divided policy `name` with one resource selector (YAML flow map).
    fn policy_selecting(&self, name: &str, selector: &str) -> String {
        format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  resourceSelectors: [{selector}]\n  placement: {{replicaScheduling: {{replicaSchedulingType: Divided}}}}\n",
            ns = self.ns()
        )
    }

    async fn teardown(self) -> Result<()> {
        self.inner.teardown().await
    }
}

/// kubectl's warning line for a policy that places Deployment `big` (2 × 1 cpu) in `n`,
/// where quota compute has 1 of 2 cpu used.
fn big_exceeds(n: &str) -> String {
    format!(
        "Warning: this policy would exceed quota {n}/compute with Deployment {n}/big: exceeded \
         quota: compute, requested: requests.cpu=2, used: requests.cpu=1, limited: requests.cpu=2"
    )
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_policy_that_would_exceed_a_quota_is_admitted_with_a_warning() -> Result<()> {
    let s = Setup::new("policy_warn", Webhook::builder()).await?;
    let n = s.ns();

    step("[Create] Deployments small (1 × 1 cpu) and big (2 × 1 cpu): templates only");
    let o = s
        .apply(&format!(
            "{}---\n{}",
            s.deployment("small", 1),
            s.deployment("big", 2)
        ))
        .await?;
    ensure!(o.status.success(), "{}", text(&o));

    step("[Create] policy for small: 1 + 1 = 2 fits → admitted, no warning");
    let o = s.apply(&s.policy("small", "small")).await?;
    ensure!(o.status.success(), "{}", text(&o));
    ensure!(
        !text(&o).contains("Warning"),
        "unexpected warning: {}",
        text(&o)
    );

    step("[Create] policy for big: 1 + 2 = 3 > 2 → admitted with kubectl's Warning line");
    let o = s.apply(&s.policy("big", "big")).await?;
    let out = text(&o);
    ensure!(o.status.success(), "{out}");
    let want = big_exceeds(n);
    ensure!(out.contains(&want), "no warning {want:?} in:\n{out}");
    s.teardown().await
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn with_deny_enforcement_a_policy_that_would_exceed_is_refused() -> Result<()> {
    let s = Setup::new(
        "policy_deny",
        Webhook::builder().arg("--policy-enforcement=deny"),
    )
    .await?;
    let n = s.ns();
    let o = s.apply(&s.deployment("big", 2)).await?;
    ensure!(o.status.success(), "{}", text(&o));

    step("[Create] policy for big in deny mode → refused, not stored");
    let o = s.apply(&s.policy("big", "big")).await?;
    let out = text(&o);
    ensure!(!o.status.success(), "the policy was admitted: {out}");
    ensure!(
        out.contains(&format!(
            "PropagationPolicy {n}/big: this policy would exceed quota {n}/compute"
        )),
        "{out}"
    );
    let stored = s
        .inner
        .env
        .kubectl(&["get", "propagationpolicies", "-n", n, "-o", "name"])
        .await?;
    ensure!(
        stored.trim().is_empty(),
        "a refused policy was stored: {stored}"
    );

    step("[Create] a policy that fits is admitted in deny mode too");
    let o = s.apply(&s.deployment("small", 1)).await?;
    ensure!(o.status.success(), "{}", text(&o));
    let o = s.apply(&s.policy("small", "small")).await?;
    ensure!(o.status.success(), "{}", text(&o));
    s.teardown().await
}

/// The templates a LIST returns carry no apiVersion/kind: a policy selecting by label or
/// by kind alone still selects them, and is warned when one does not fit.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn policies_selecting_by_label_or_by_kind_alone_are_warned() -> Result<()> {
    let s = Setup::new("policy_selectors", Webhook::builder()).await?;
    let n = s.ns();
    step("[Create] Deployments small (1 × 1 cpu) and big (2 × 1 cpu), labelled app=<name>");
    let o = s
        .apply(&format!(
            "{}---\n{}",
            s.deployment("small", 1),
            s.deployment("big", 2)
        ))
        .await?;
    ensure!(o.status.success(), "{}", text(&o));
    let want = big_exceeds(n);
    for (name, selector) in [
        (
            "by-label",
            "{apiVersion: apps/v1, kind: Deployment, labelSelector: {matchLabels: {app: big}}}",
        ),
        ("by-kind", "{apiVersion: apps/v1, kind: Deployment}"),
    ] {
        step(&format!(
            "[Create] policy {name} selecting {selector}: big does not fit → kubectl's Warning line"
        ));
        let o = s.apply(&s.policy_selecting(name, selector)).await?;
        let out = text(&o);
        ensure!(o.status.success(), "{out}");
        ensure!(
            out.contains(&want),
            "{name}: no warning {want:?} in:\n{out}"
        );
    }
    step("[Create] policy by label app=small: 1 + 1 = 2 fits → no warning");
    let o = s
        .apply(&s.policy_selecting(
            "small-only",
            "{apiVersion: apps/v1, kind: Deployment, labelSelector: {matchLabels: {app: small}}}",
        ))
        .await?;
    ensure!(o.status.success(), "{}", text(&o));
    ensure!(
        !text(&o).contains("Warning"),
        "unexpected warning: {}",
        text(&o)
    );
    s.teardown().await
}
