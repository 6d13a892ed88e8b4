//! The tests' X.509 certificates, made in process with rcgen: a [`Ca`] and the leaves it
//! signs ([`Issued`]), written as PEM files; and what the tests read back from a
//! certificate: its SHA-256 [`fingerprint`] and its [`subject`] (x509-parser).
//!
//! ```text
//!  Ca::new(cn, days)            self-signed, basicConstraints critical CA:TRUE, subject CN=<cn>
//!    └─ ca.issue(&leaf(subject, serial, days))   signed by the CA (authority key id), the
//!         │                                      caller adding SANs and key usages
//!         └─ Issued::write(cert, key)            certificate PEM, PKCS#8 key PEM (0600)
//! ```
//!
//! Every key is EC P-256, every signature ECDSA-SHA256, every validity starts now: the
//! certificates `openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1` and
//! `openssl x509 -req -days <n> -set_serial <serial> -extfile …` make. A leaf apart from
//! its CA satisfies both Go's verifier (the apiserver) and webpki (rustls), which refuses a
//! CA certificate presented as a peer's own.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, anyhow};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// One day, the unit of `-days`.
const DAY: Duration = Duration::from_secs(24 * 3600);

/// A self-signed CA and its key, to sign leaves with.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    /// A CA with subject `CN=<cn>`, valid from now for `days` days.
    pub fn new(cn: &str, days: u32) -> Result<Ca> {
        let mut params = validity(days)?;
        params.distinguished_name = name(&[(DnType::CommonName, cn)]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().context("generating the CA's key")?;
        let pem = params
            .self_signed(&key)
            .with_context(|| format!("self-signing the CA {cn}"))?
            .pem();
        Ok(Ca {
            issuer: Issuer::new(params, key),
            pem,
        })
    }

    /// The CA certificate (PEM).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Writes the CA certificate (PEM) to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, &self.pem).with_context(|| format!("writing {}", path.display()))
    }

    /// `params` signed by this CA for a fresh key.
    pub fn issue(&self, params: &CertificateParams) -> Result<Issued> {
        let key = KeyPair::generate().context("generating a leaf key")?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .context("signing a leaf certificate")?;
        Ok(Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// A certificate a [`Ca`] signed and its private key, both PEM.
pub struct Issued {
    /// The certificate (PEM).
    pub cert: String,
    /// Its private key (PKCS#8 PEM).
    pub key: String,
}

impl Issued {
    /// Writes the certificate to `cert` and the key to `key` (mode 0600).
    pub fn write(&self, cert: &Path, key: &Path) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::write(cert, &self.cert).with_context(|| format!("writing {}", cert.display()))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(key)
            .and_then(|mut f| f.write_all(self.key.as_bytes()))
            .with_context(|| format!("writing {}", key.display()))
    }
}

/// The parameters of a leaf: `subject` (attributes in the order written, e.g. O then CN),
/// serial `serial`, valid from now for `days` days, basicConstraints CA:FALSE, and the
/// issuer's key identifier. The caller adds its SANs and key usages.
pub fn leaf(subject: &[(DnType, &str)], serial: u64, days: u32) -> Result<CertificateParams> {
    let mut params = validity(days)?;
    params.distinguished_name = name(subject);
    params.serial_number = Some(serial.into());
    params.is_ca = IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// Default parameters valid from now for `days` days.
fn validity(days: u32) -> Result<CertificateParams> {
    let now = SystemTime::now();
    let mut params = CertificateParams::default();
    params.not_before = now.into();
    params.not_after = now
        .checked_add(DAY * days)
        .ok_or_else(|| anyhow!("{days} days from now is out of range"))?
        .into();
    Ok(params)
}

fn name(attributes: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (ty, value) in attributes {
        dn.push(ty.clone(), *value);
    }
    dn
}

/// The DER of the first certificate in `pem`.
pub fn der(pem: &[u8]) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem).map_err(|e| anyhow!("no certificate in the PEM: {e}"))
}

/// The SHA-256 fingerprint of a DER certificate, upper-case hex bytes joined by `:`
/// (`AB:CD:…`, as `openssl x509 -fingerprint -sha256` prints it).
pub fn fingerprint(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The subject of a DER certificate in RFC 2253 form: its RDNs last first, joined by `,`,
/// each `<short name>=<value>` (`CN=name,O=org`); a type without a short name is its
/// dotted OID, a value that is no string `#<hex of its DER>`.
pub fn subject(der: &[u8]) -> Result<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| anyhow!("not an X.509 certificate: {e}"))?;
    let registry = x509_parser::objects::oid_registry();
    let mut rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let ty = x509_parser::objects::oid2abbrev(attr.attr_type(), registry)
                        .map_or_else(|_| attr.attr_type().to_id_string(), str::to_owned);
                    let value = attr.as_str().map_or_else(
                        |_| format!("#{}", hex(attr.attr_value().as_bytes())),
                        escape,
                    );
                    format!("{ty}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.reverse();
    Ok(rdns.join(","))
}

/// An attribute value escaped as RFC 2253 asks: `,+"\<>;` always, `#` and a space at the
/// start, a space at the end.
fn escape(value: &str) -> String {
    let last = value.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{ExtendedKeyUsagePurpose, KeyUsagePurpose, SanType};
    use rustls::client::danger::ServerCertVerifier;
    use x509_parser::prelude::{FromDer, X509Certificate};

    fn server_leaf() -> CertificateParams {
        let mut p = leaf(
            &[
                (DnType::OrganizationName, "a, b"),
                (DnType::CommonName, "127.0.0.1"),
            ],
            0xA,
            30,
        )
        .unwrap();
        p.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p
    }

    #[test]
    fn a_leaf_carries_its_subject_serial_validity_and_issuer() {
        let ca = Ca::new("kq-test-ca", 2).unwrap();
        let issued = ca.issue(&server_leaf()).unwrap();
        let der = der(issued.cert.as_bytes()).unwrap();
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(cert.raw_serial(), &[0x0A]);
        assert_eq!(cert.issuer().to_string(), "CN=kq-test-ca");
        let days = cert.validity().time_to_expiration().unwrap().whole_days();
        assert!((29..=30).contains(&days), "{days} days left");
        assert!(!cert.is_ca());
        let ca_der = super::der(ca.pem().as_bytes()).unwrap();
        let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap();
        assert!(ca_cert.is_ca());
        // A rustls client of 127.0.0.1 that trusts the CA accepts the leaf.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(super::der(ca.pem().as_bytes()).unwrap()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots.into(),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let ip = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        verifier
            .verify_server_cert(&der, &[], &ip, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
        assert_eq!(subject(&der).unwrap(), "CN=127.0.0.1,O=a\\, b");
    }

    #[test]
    fn fingerprints_are_upper_case_hex_pairs_and_differ_per_certificate() {
        let ca = Ca::new("kq-test-ca", 2).unwrap();
        let (a, b) = (
            ca.issue(&server_leaf()).unwrap(),
            ca.issue(&server_leaf()).unwrap(),
        );
        let fa = fingerprint(&der(a.cert.as_bytes()).unwrap());
        assert_eq!(fa.len(), 32 * 3 - 1);
        assert!(fa.split(':').all(|p| {
            p.len() == 2
                && p.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        }));
        assert_ne!(fa, fingerprint(&der(b.cert.as_bytes()).unwrap()));
        // The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        assert!(fingerprint(b"abc").starts_with("BA:78:16:BF:8F:01:CF:EA"));
    }

    #[test]
    fn subjects_read_as_openssl_prints_them_in_rfc_2253() {
        // `openssl x509 -noout -subject -nameopt RFC2253` prints `subject=CN=someone-else,O=kq`.
        let pem = include_bytes!("../../shell/testdata/listener/client-san.pem");
        assert_eq!(subject(&der(pem).unwrap()).unwrap(), "CN=someone-else,O=kq");
        assert!(der(b"no certificate here").is_err());
        assert!(subject(b"\x30\x03\x02\x01\x01").is_err());
    }

    #[test]
    fn escape_quotes_what_rfc_2253_reserves() {
        assert_eq!(escape("plain"), "plain");
        assert_eq!(escape("a,b+c;d"), "a\\,b\\+c\\;d");
        assert_eq!(escape("#lead "), "\\#lead\\ ");
        assert_eq!(escape(""), "");
    }
}
