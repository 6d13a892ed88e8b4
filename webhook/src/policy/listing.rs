//! Reading templates from the API within bounds. A selector's templates are listed in
//! pages of `--policy-list-page-size` objects (`limit`/`continue`); each response body is
//! read chunk by chunk, every chunk charged to the webhook's template budget
//! (`--policy-template-bytes-in-flight`, shared by all checks) while its page is held —
//! the capacity of the buffer it is read into, which a growing buffer makes up to twice
//! the bytes read (`Fetched::push`) — and
//! one selector's listing reads at most `--policy-max-template-bytes`. Each page is decoded
//! straight into typed templates (metadata and the spec fields pricing reads; a
//! ConfigMap's data is passed over) and dropped before the next page is asked for: no
//! generic JSON tree of a listed object is built, except the one a customization's Lua
//! reads for the object it prices.
//!
//! With customizations, pages are decoded and priced by their Lua on blocking threads, at
//! most `--policy-max-concurrent-lua` at once over all checks (`off_the_workers`).
//!
//! Past a bound the check is skipped (the policy allowed with a warning saying why): the
//! check is advisory, and the ResourceBinding review still enforces every quota.

use std::sync::Arc;

use http_body_util::BodyExt;
use karmada_quota_interpreter::Customizations;
use karmada_quota_interpreter::template::Template;
use karmada_quota_shell::untrusted::clip;
use kube::Client;
use kube::api::GetParams;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::core::Request;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Skip, template_from_json};

/// `--policy-list-page-size`' default.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// `--policy-max-template-bytes`' default.
pub const DEFAULT_MAX_TEMPLATE_BYTES: usize = 8 * 1024 * 1024;
/// `--policy-template-bytes-in-flight`' default.
pub const DEFAULT_TEMPLATE_BYTES_IN_FLIGHT: usize = 32 * 1024 * 1024;
/// `--policy-max-concurrent-lua`' default.
pub const DEFAULT_LUA_RUNS: usize = 2;

/// The bounds of reading templates; clones share the in-flight budget and the Lua slots.
#[derive(Clone, Debug)]
pub struct TemplateLimits {
    page_size: u32,
    max_bytes: usize,
    in_flight: Arc<Semaphore>,
    /// Threads pricing templates with customizations' Lua at once.
    lua: Arc<Semaphore>,
}

impl TemplateLimits {
    /// Pages of `page_size` objects, at most `max_bytes` read per selector, at most
    /// `in_flight` bytes held over all checks.
    pub fn new(page_size: u32, max_bytes: usize, in_flight: usize) -> Self {
        Self {
            page_size: page_size.max(1),
            max_bytes: max_bytes.max(1),
            in_flight: Arc::new(Semaphore::new(in_flight.clamp(1, u32::MAX as usize))),
            lua: Arc::new(Semaphore::new(DEFAULT_LUA_RUNS)),
        }
    }

    /// The same bounds, with at most `runs` threads running Lua at once (over all checks).
    #[must_use]
    pub fn with_lua_runs(mut self, runs: usize) -> Self {
        self.lua = Arc::new(Semaphore::new(runs.clamp(1, Semaphore::MAX_PERMITS)));
        self
    }

    /// Bytes of the in-flight budget not held now.
    pub fn available(&self) -> usize {
        self.in_flight.available_permits()
    }
}

impl Default for TemplateLimits {
    fn default() -> Self {
        Self::new(
            DEFAULT_PAGE_SIZE,
            DEFAULT_MAX_TEMPLATE_BYTES,
            DEFAULT_TEMPLATE_BYTES_IN_FLIGHT,
        )
    }
}

/// One response body, charged to the budget while held: the charge is the buffer's
/// capacity, not the bytes read (a buffer grown by doubling holds up to twice them), and
/// is taken before the buffer grows.
struct Fetched {
    bytes: Vec<u8>,
    charge: Option<OwnedSemaphorePermit>,
}

impl Fetched {
    fn new() -> Self {
        Self {
            bytes: Vec::new(),
            charge: None,
        }
    }

    /// Bytes of the budget this body holds.
    fn charged(&self) -> usize {
        self.charge
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Append `chunk`; when the buffer must grow, its new capacity (doubled, or what the
    /// chunk needs) is charged to `budget` first. `false` when the budget cannot give it.
    fn push(&mut self, chunk: &[u8], budget: &Arc<Semaphore>) -> bool {
        let needed = self.bytes.len() + chunk.len();
        if needed > self.bytes.capacity() {
            let target = needed.max(self.bytes.capacity().saturating_mul(2));
            if !self.charge_up_to(target, budget) {
                return false;
            }
            self.bytes.reserve_exact(target - self.bytes.len());
            // The allocator may give more than asked: that is charged too.
            if !self.charge_up_to(self.bytes.capacity(), budget) {
                return false;
            }
        }
        self.bytes.extend_from_slice(chunk);
        true
    }

    /// Hold `bytes` of the budget in all.
    fn charge_up_to(&mut self, bytes: usize, budget: &Arc<Semaphore>) -> bool {
        let more = bytes.saturating_sub(self.charged());
        if more == 0 {
            return true;
        }
        let Some(permit) = u32::try_from(more)
            .ok()
            .and_then(|n| budget.clone().try_acquire_many_owned(n).ok())
        else {
            return false;
        };
        match self.charge.as_mut() {
            Some(held) => held.merge(permit),
            None => self.charge = Some(permit),
        }
        true
    }
}

/// A LIST response as the pager reads it: the items as slices of the body.
#[derive(serde::Deserialize)]
struct Page<'a> {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

#[derive(serde::Deserialize, Default)]
struct PageMeta {
    #[serde(rename = "continue", default)]
    next: Option<String>,
}

/// One selector's reads: what it has read so far, against its bounds.
pub(super) struct Reader<'a> {
    pub(super) client: &'a Client,
    pub(super) limits: &'a TemplateLimits,
    pub(super) ar: ApiResource,
    /// The cluster's customizations: with any, pages are decoded (and priced by their Lua)
    /// off the async workers.
    pub(super) customizations: Arc<Customizations>,
    /// The selector's kind, for messages.
    pub(super) what: String,
    /// Lua may run until then.
    pub(super) lua_end: std::time::Instant,
    /// Body bytes read so far.
    pub(super) read: usize,
}

impl Reader<'_> {
    /// Every object of the list at `url` (optionally narrowed by `params`), at most
    /// `limit` of them (more is a [`Skip`]), page by page.
    pub(super) async fn list(
        &mut self,
        url: &str,
        params: ListParams,
        limit: usize,
    ) -> Result<Vec<Template>, Skip> {
        let mut templates = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut page_params = params.clone().limit(self.limits.page_size);
            if let Some(token) = next.take() {
                page_params = page_params.continue_token(&token);
            }
            let request = Request::new(url)
                .list(&page_params)
                .map_err(|e| Skip(format!("cannot list {}: {e}", self.what)))?;
            let Some(body) = self.fetch(request).await? else {
                return Ok(templates);
            };
            let (page, token) = self.decode(body, decode_page).await?;
            if templates.len() + page.len() > limit {
                return Err(Skip(format!(
                    "the policy selects more than {limit} {} objects (--policy-max-templates)",
                    self.what
                )));
            }
            templates.extend(page);
            match token {
                Some(token) => next = Some(token),
                None => return Ok(templates),
            }
        }
    }

    /// The object `name` at `url`, if it exists.
    pub(super) async fn get(&mut self, url: &str, name: &str) -> Result<Option<Template>, Skip> {
        let request = Request::new(url)
            .get(name, &GetParams::default())
            .map_err(|e| Skip(format!("cannot read {} {}: {e}", self.what, clip(name))))?;
        match self.fetch(request).await? {
            None => Ok(None),
            Some(body) => self.decode(body, decode_one).await.map(Some),
        }
    }

    /// `decode` of `body`, with the Lua of the customizations (if any) off the async
    /// workers; the body and its charge are dropped once decoded.
    async fn decode<T: Send + 'static>(
        &self,
        body: Fetched,
        decode: fn(&[u8], &Decoding) -> Result<T, Skip>,
    ) -> Result<T, Skip> {
        let how = Decoding {
            ar: self.ar.clone(),
            customizations: self.customizations.clone(),
            lua_end: self.lua_end,
            what: self.what.clone(),
        };
        if self.customizations.is_empty() {
            return decode(&body.bytes, &how);
        }
        let until = tokio::time::Instant::from_std(self.lua_end);
        off_the_workers(&self.limits.lua, until, move || decode(&body.bytes, &how)).await?
    }

    /// The body of `request`, read within the bounds; `None` on 404.
    async fn fetch(
        &mut self,
        request: axum::http::Request<Vec<u8>>,
    ) -> Result<Option<Fetched>, Skip> {
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(|e| {
                Skip(format!(
                    "cannot read {}: {}",
                    self.what,
                    clip(&e.to_string())
                ))
            })?;
        let status = response.status();
        if status == axum::http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(Skip(format!("cannot read {}: HTTP {status}", self.what)));
        }
        let mut body = response.into_body();
        let mut fetched = Fetched::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                Skip(format!(
                    "cannot read {}: {}",
                    self.what,
                    clip(&e.to_string())
                ))
            })?;
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            self.read += chunk.len();
            if self.read > self.limits.max_bytes {
                return Err(Skip(format!(
                    "the {} objects the policy selects are larger than {} bytes \
                     (--policy-max-template-bytes)",
                    self.what, self.limits.max_bytes
                )));
            }
            if !fetched.push(&chunk, &self.limits.in_flight) {
                return Err(Skip(
                    "the webhook is reading too many template bytes for other policy \
                     checks (--policy-template-bytes-in-flight); retry"
                        .to_owned(),
                ));
            }
        }
        Ok(Some(fetched))
    }
}

/// `work` (which runs Lua) on a blocking thread holding one of the `lua` slots, waiting
/// for a slot until `until` at most. The slot is held by the thread, not by the caller:
/// a review that gives up (its deadline) leaves the slot taken until its thread ends, so
/// at most as many threads as slots run Lua, whatever the reviews do.
async fn off_the_workers<T: Send + 'static>(
    lua: &Arc<Semaphore>,
    until: tokio::time::Instant,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Skip> {
    let slot = tokio::time::timeout_at(until, lua.clone().acquire_owned())
        .await
        .ok()
        .and_then(Result::ok)
        .ok_or_else(|| {
            Skip(
                "every slot for interpreter customizations' Lua is taken by other policy \
                 checks (--policy-max-concurrent-lua); retry"
                    .to_owned(),
            )
        })?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    })
    .await
    .map_err(|e| Skip(format!("pricing by interpreter customizations failed: {e}")))
}

/// What decoding a body needs (moved off the async workers with it).
struct Decoding {
    ar: ApiResource,
    customizations: Arc<Customizations>,
    lua_end: std::time::Instant,
    what: String,
}

impl Decoding {
    fn template(&self, json: &str) -> Result<Template, Skip> {
        template_from_json(&self.ar, json, &self.customizations, self.lua_end)
    }
}

/// A LIST page: its templates and the token of the next page.
fn decode_page(bytes: &[u8], how: &Decoding) -> Result<(Vec<Template>, Option<String>), Skip> {
    let page: Page<'_> = serde_json::from_slice(bytes).map_err(|e| {
        Skip(format!(
            "cannot read the list of {}: {}",
            how.what,
            clip(&e.to_string())
        ))
    })?;
    let templates = page
        .items
        .iter()
        .map(|item| how.template(item.get()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((templates, page.metadata.next.filter(|t| !t.is_empty())))
}

/// A GET: its template.
fn decode_one(bytes: &[u8], how: &Decoding) -> Result<Template, Skip> {
    let json =
        std::str::from_utf8(bytes).map_err(|e| Skip(format!("cannot read {}: {e}", how.what)))?;
    how.template(json)
}

/// The URL path of `ar`'s objects, in `namespace` or in every namespace.
pub(super) fn url(ar: &ApiResource, namespace: Option<&str>) -> String {
    <DynamicObject as kube::Resource>::url_path(ar, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the buffer allocates is what the budget holds, chunk after chunk: a body read
    /// in 1000-byte chunks grows its buffer by doubling, and every byte of capacity is
    /// charged (counting the chunks alone left up to half of it uncharged).
    #[test]
    fn a_body_is_charged_its_buffers_capacity() {
        let budget = Arc::new(Semaphore::new(1 << 20));
        let mut f = Fetched::new();
        let chunk = [b'x'; 1000];
        for i in 1..=300 {
            assert!(f.push(&chunk, &budget));
            assert_eq!(f.bytes.len(), i * 1000);
            assert!(
                f.charged() >= f.bytes.capacity(),
                "after {i} chunks: {} charged, {} allocated",
                f.charged(),
                f.bytes.capacity()
            );
            assert_eq!(budget.available_permits(), (1 << 20) - f.charged());
        }
        drop(f);
        assert_eq!(
            budget.available_permits(),
            1 << 20,
            "given back when dropped"
        );
    }

    /// Twelve checks pricing at once, each run holding its thread 50 ms: never more than
    /// the two slots run at once, and a check that cannot get a slot by its end is
    /// skipped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_the_lua_slots_run_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;
        let lua = TemplateLimits::default().with_lua_runs(2).lua;
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        let runs = (0..12).map(|_| {
            let (running, most) = (running.clone(), most.clone());
            off_the_workers(&lua, until, move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                running.fetch_sub(1, Ordering::SeqCst);
            })
        });
        let done = futures::future::join_all(runs).await;
        assert!(done.iter().all(Result::is_ok));
        assert_eq!(most.load(Ordering::SeqCst), 2);
        // A run that outlives its caller (a runaway whose review gave up) keeps its slot:
        // the next caller waits for it, and gets it once the thread ends.
        let lua = TemplateLimits::default().with_lua_runs(1).lua;
        let (release, released) = std::sync::mpsc::channel::<()>();
        let far = tokio::time::Instant::now() + Duration::from_secs(30);
        let long = tokio::spawn({
            let lua = lua.clone();
            async move {
                off_the_workers(&lua, far, move || {
                    let _ = released.recv();
                })
                .await
            }
        });
        while lua.available_permits() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        long.abort();
        let soon = tokio::time::Instant::now() + Duration::from_millis(100);
        let refused = off_the_workers(&lua, soon, || ()).await;
        assert!(
            refused.is_err_and(|s| s.0.contains("--policy-max-concurrent-lua")),
            "the abandoned run still holds the only slot"
        );
        release.send(()).unwrap();
        assert!(off_the_workers(&lua, far, || ()).await.is_ok());
    }

    #[test]
    fn a_body_whose_buffer_would_outgrow_the_budget_is_refused() {
        // The buffer doubles up to 1,024,000 bytes of capacity within 1 MiB; the next
        // doubling does not fit, and the chunk that needs it is refused.
        let budget = Arc::new(Semaphore::new(1 << 20));
        let mut f = Fetched::new();
        let chunk = [b'x'; 1000];
        let mut pushed = 0;
        while f.push(&chunk, &budget) {
            pushed += 1;
            assert!(pushed <= 1 << 20, "never refused");
        }
        assert_eq!((f.bytes.len(), f.bytes.capacity()), (1_024_000, 1_024_000));
        assert_eq!(f.charged(), 1_024_000);
    }
}
