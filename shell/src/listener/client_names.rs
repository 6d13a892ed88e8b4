//! Which names a client certificate carries (its subject's CN and its DNS subjectAltNames),
//! and [`AllowedNames`]: a client-certificate verifier that, after the chain checked out
//! against the CA, also requires one of those names to be on a list
//! (`--client-allowed-names`). webpki checks DNS names for servers only, hence the small
//! DER reader here; it reads, never trusts: any malformed certificate carries no name.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// DER tags this reader meets.
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
/// `[0] EXPLICIT` version of a TBSCertificate.
const VERSION: u8 = 0xa0;
/// `[3] EXPLICIT` extensions of a TBSCertificate.
const EXTENSIONS: u8 = 0xa3;
/// `dNSName [2] IMPLICIT IA5String` of a GeneralName.
const DNS_NAME: u8 = 0x82;
/// id-at-commonName, 2.5.4.3.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// id-ce-subjectAltName, 2.5.29.17.
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed value's contents.
fn elements(mut input: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, content, rest) = element(input)?;
        input = rest;
        Some((tag, content))
    })
}

/// The names of a DER certificate: the subject's CNs, then its DNS subjectAltNames.
/// Empty for anything that does not parse.
pub(super) fn certificate_names(der: &[u8]) -> Vec<String> {
    certificate_names_opt(der).unwrap_or_default()
}

fn certificate_names_opt(der: &[u8]) -> Option<Vec<String>> {
    let (SEQUENCE, cert, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(cert)? else {
        return None;
    };
    let mut fields = elements(tbs).peekable();
    if fields.peek().is_some_and(|(tag, _)| *tag == VERSION) {
        fields.next();
    }
    // serialNumber, signature, issuer, validity, subject
    let (tag, subject) = fields.nth(4)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut names = Vec::new();
    for (tag, rdn) in elements(subject) {
        if tag != SET {
            continue;
        }
        for (_, attribute) in elements(rdn) {
            let mut parts = elements(attribute);
            if let (Some((OID, OID_COMMON_NAME)), Some((_, value))) = (parts.next(), parts.next()) {
                names.push(String::from_utf8_lossy(value).into_owned());
            }
        }
    }
    if let Some((_, extensions)) = fields.find(|(tag, _)| *tag == EXTENSIONS) {
        let (SEQUENCE, list, _) = element(extensions)? else {
            return None;
        };
        for (_, extension) in elements(list) {
            let mut parts = elements(extension).filter(|(tag, _)| *tag != BOOLEAN);
            if let (Some((OID, OID_SUBJECT_ALT_NAME)), Some((OCTET_STRING, value))) =
                (parts.next(), parts.next())
            {
                let (SEQUENCE, general_names, _) = element(value)? else {
                    return None;
                };
                names.extend(
                    elements(general_names)
                        .filter(|(tag, _)| *tag == DNS_NAME)
                        .map(|(_, name)| String::from_utf8_lossy(name).into_owned()),
                );
            }
        }
    }
    Some(names)
}

/// A client-certificate verifier that requires, on top of `inner`'s chain check, a name
/// of the certificate (CN or DNS subjectAltName, ASCII case ignored, no wildcards) in
/// `names`.
#[derive(Debug)]
pub(super) struct AllowedNames {
    pub(super) inner: Arc<dyn ClientCertVerifier>,
    pub(super) names: Vec<String>,
}

impl AllowedNames {
    fn allows(&self, der: &[u8]) -> bool {
        certificate_names(der)
            .iter()
            .any(|n| self.names.iter().any(|a| a.eq_ignore_ascii_case(n)))
    }
}

impl ClientCertVerifier for AllowedNames {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.allows(end_entity) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .as_ref()
            .to_vec()
    }

    #[test]
    fn reads_the_common_name_of_a_certificate_without_alt_names() {
        let names = certificate_names(&der(include_str!("../../testdata/listener/client.pem")));
        assert_eq!(names, ["karmada-apiserver-webhook-client"]);
    }

    #[test]
    fn reads_the_common_name_and_every_dns_alt_name() {
        let names = certificate_names(&der(include_str!("../../testdata/listener/client-san.pem")));
        assert_eq!(
            names,
            ["someone-else", "apiserver.example", "other.example"]
        );
    }

    #[test]
    fn ip_alt_names_are_not_names() {
        let names = certificate_names(&der(include_str!("../../testdata/listener/server.pem")));
        assert_eq!(
            names,
            ["127.0.0.1"],
            "the CN only; the IP SAN is no DNS name"
        );
    }

    #[test]
    fn malformed_input_carries_no_name_and_never_panics() {
        let good = der(include_str!("../../testdata/listener/client-san.pem"));
        assert!(certificate_names(&[]).is_empty());
        assert!(certificate_names(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_empty());
        assert!(certificate_names(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_empty());
        // Every truncation and every single-byte corruption: no panic.
        for cut in 0..good.len() {
            let _ = certificate_names(&good[..cut]);
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = certificate_names(&bad);
        }
    }
}
