//! How a target's input is cut into parts: `part 0xFF part 0xFF …` (0xFF never occurs in
//! JSON, UTF-8 text or PEM, so the fuzzer can grow each part alone), and the check every
//! AdmissionReview answer given without a request must pass.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};

/// Separates the parts of an input.
pub const SEPARATOR: u8 = 0xFF;

/// The first `N` parts of `data` (missing ones empty; the last takes the rest).
pub fn split<const N: usize>(data: &[u8]) -> [&[u8]; N] {
    let mut out = [&data[..0]; N];
    for (slot, part) in out.iter_mut().zip(data.splitn(N, |b| *b == SEPARATOR)) {
        *slot = part;
    }
    out
}

/// An answer given without a request: a refusal is 400 `BadRequest` with a message; any
/// answer encodes as an AdmissionReview that decodes again with the same verdict.
pub fn check_refusal(answer: &AdmissionResponse, reason: &str) {
    if !answer.allowed {
        assert_eq!(
            answer.result.code, 400,
            "refusal without code 400: {answer:?}"
        );
        assert_eq!(answer.result.reason, reason);
        assert!(
            !answer.result.message.is_empty(),
            "refusal without a message"
        );
    }
    let encoded = serde_json::to_vec(&answer.clone().into_review()).expect("a review encodes");
    let back: AdmissionReview<DynamicObject> =
        serde_json::from_slice(&encoded).expect("an encoded review decodes");
    let back = back.response.expect("an answer has a response");
    assert_eq!(back.allowed, answer.allowed);
    assert_eq!(back.result.code, answer.result.code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_fills_missing_parts_with_empty_and_keeps_the_rest_in_the_last() {
        assert_eq!(split::<3>(b"a\xffb"), [&b"a"[..], b"b", b""]);
        assert_eq!(split::<2>(b"a\xffb\xffc"), [&b"a"[..], b"b\xffc"]);
        assert_eq!(split::<2>(b""), [&b""[..], b""]);
    }
}
