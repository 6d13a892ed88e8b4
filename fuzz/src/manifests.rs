//! `manifests`: a file given to `kubectl karmada-quota check -f` — YAML or JSON, one or
//! more documents — as the plugin reads it (`cli::manifests::parse`), sorts it
//! (`check::Inputs::add_documents`: quotas, policies, clusters, templates, `List`s
//! unpacked) and checks it offline against zero usage (`check::check`, the interpreter crate's what-if).
//!
//! Input: UTF-8 text.
//!
//! Laws:
//! - the documents, written back as JSON, parse again to the same documents (JSON is
//!   YAML: the plugin reads a file the way it reads its JSON form);
//! - a refusal names a template of the input and says why; a check with errors or
//!   refusals does not fit;
//! - the report is JSON (what `--output json` prints).

use karmada_quota_cli::check::{Current, Inputs, check};
use karmada_quota_cli::manifests::parse;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(docs) = parse(text) else { return };
    for doc in &docs {
        let json = serde_json::to_string(doc).expect("a document is JSON");
        let again = parse(&json).unwrap_or_else(|e| panic!("{json}: {e:#}"));
        assert_eq!(again.as_slice(), std::slice::from_ref(doc), "{json}");
    }
    let mut inputs = Inputs::default();
    if inputs.add_documents("fuzz", docs).is_err() {
        return;
    }
    let report = check(&inputs, &Current::default());
    for r in &report.refused {
        assert!(
            inputs
                .templates
                .iter()
                .any(|t| r.template == karmada_quota_interpreter::whatif::describe(t)),
            "refused {} which is no template of the input",
            r.template
        );
        assert!(!r.message.is_empty(), "a refusal without a message");
    }
    if !report.errors.is_empty() || !report.refused.is_empty() {
        assert!(!report.fits(), "errors or refusals yet fits");
    }
    serde_json::to_string(&report).expect("a report is JSON");
}
