//! `sigstoreSigned` made ready to check: public keys, Fulcio or a PKI, and
//! Rekor keys, as containers/image's `prepareTrustRoot`
//! (signature/policy_eval_sigstore.go). Keys and certificates are read and
//! parsed now, so a broken policy fails before anything is fetched.

use std::fmt;
use std::path::Path;

use x509_cert::Certificate;

use super::parse::{Keys, RawFulcio, RawPki};
use super::{Identity, Requirement, bad_policy, read_keys};
use crate::plan::host::Host;

/// A sigstore public key: the policy's own, a Rekor key, or a certificate's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// ECDSA P-256.
    P256(p256::ecdsa::VerifyingKey),
    /// ECDSA P-384.
    P384(p384::ecdsa::VerifyingKey),
    /// ed25519.
    Ed25519(ed25519_dalek::VerifyingKey),
    /// RSA (PKCS #1 v1.5 signatures).
    Rsa(Box<rsa::RsaPublicKey>),
}

impl PublicKey {
    /// A DER SubjectPublicKeyInfo of ECDSA P-256 or P-384, ed25519 or RSA.
    pub fn from_spki_der(der: &[u8]) -> Option<Self> {
        use p256::pkcs8::DecodePublicKey as _;
        p256::ecdsa::VerifyingKey::from_public_key_der(der)
            .map(Self::P256)
            .or_else(|_| p384::ecdsa::VerifyingKey::from_public_key_der(der).map(Self::P384))
            .or_else(|_| ed25519_dalek::VerifyingKey::from_public_key_der(der).map(Self::Ed25519))
            .ok()
            .or_else(|| {
                rsa::RsaPublicKey::from_public_key_der(der)
                    .ok()
                    .map(|k| Self::Rsa(Box::new(k)))
            })
    }

    /// A PEM `PUBLIC KEY` (one SubjectPublicKeyInfo), as `from_spki_der`.
    pub fn from_pem(pem: &str) -> Option<Self> {
        let (label, der) = x509_cert::der::pem::decode_vec(pem.trim().as_bytes()).ok()?;
        (label == "PUBLIC KEY").then_some(())?;
        Self::from_spki_der(&der)
    }

    /// The key as a DER SubjectPublicKeyInfo.
    pub fn spki_der(&self) -> Vec<u8> {
        use p256::pkcs8::EncodePublicKey as _;
        let der = match self {
            Self::P256(k) => k.to_public_key_der(),
            Self::P384(k) => k.to_public_key_der(),
            Self::Ed25519(k) => k.to_public_key_der(),
            Self::Rsa(k) => k.to_public_key_der(),
        };
        der.map(|d| d.into_vec()).unwrap_or_default()
    }
}

/// Who may have made a sigstore signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// Any of the policy's public keys.
    Keys(Vec<PublicKey>),
    /// A Fulcio certificate (keyless signing).
    Fulcio(Box<Fulcio>),
    /// A certificate of an X.509 PKI.
    Pki(Box<Pki>),
}

/// `fulcio`: the signature's certificate must chain to `ca` and name the
/// OIDC issuer and the subject's email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fulcio {
    /// The trusted Fulcio CA certificates.
    pub ca: Vec<Certificate>,
    /// Where they came from, for messages.
    pub ca_source: String,
    /// The OIDC issuer the certificate must record.
    pub oidc_issuer: String,
    /// The email the certificate must name.
    pub subject_email: String,
}

/// `pki`: the signature's certificate must chain to `roots` (through the
/// signature's chain or `intermediates`) and name the subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pki {
    /// The trusted root certificates.
    pub roots: Vec<Certificate>,
    /// Trusted intermediate certificates.
    pub intermediates: Vec<Certificate>,
    /// Where they came from, for messages.
    pub source: String,
    /// An email the certificate must name, if set.
    pub subject_email: Option<String>,
    /// A host name the certificate must be valid for, if set.
    pub subject_hostname: Option<String>,
}

/// The Rekor keys whose signed entry timestamp a signature must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rekor {
    /// ECDSA keys (P-256 or P-384).
    pub keys: Vec<PublicKey>,
    /// Where they came from, for messages.
    pub source: String,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Keys(_) => f.write_str("keys"),
            Self::Fulcio(c) => write!(
                f,
                "a Fulcio certificate for {} from OIDC issuer {} (CA {})",
                c.subject_email, c.oidc_issuer, c.ca_source
            ),
            Self::Pki(p) => {
                let subject: Vec<String> = [
                    p.subject_email.as_ref().map(|e| format!("email {e}")),
                    p.subject_hostname.as_ref().map(|h| format!("host {h}")),
                ]
                .into_iter()
                .flatten()
                .collect();
                write!(
                    f,
                    "a PKI certificate for {} (CAs {})",
                    subject.join(" and "),
                    p.source
                )
            }
        }
    }
}

/// The requirement for one parsed `sigstoreSigned`.
pub(super) fn requirement(
    host: &dyn Host,
    file: &Path,
    keys: &Keys,
    rekor: Option<&Keys>,
    identity: &Identity,
) -> anyhow::Result<Requirement> {
    let (signer, source) = match keys {
        Keys::Fulcio(raw) => fulcio(host, file, raw)?,
        Keys::Pki(raw) => pki(host, file, raw)?,
        keys => {
            let (files, names) = read_keys(host, file, keys, "key")?;
            let keys = public_keys(file, &files, &names, false)?;
            (Signer::Keys(keys), names)
        }
    };
    let rekor = match rekor {
        None => None,
        Some(r) => {
            let (files, source) = read_keys(host, file, r, "rekorPublicKey")?;
            let keys = public_keys(file, &files, &source, true)?;
            Some(Rekor { keys, source })
        }
    };
    Ok(Requirement::SigstoreSigned {
        signer,
        rekor,
        source,
        identity: identity.clone(),
    })
}

/// PEM public keys; Rekor's must be ECDSA, as in containers/image.
fn public_keys(
    file: &Path,
    files: &[Vec<u8>],
    names: &str,
    ecdsa: bool,
) -> anyhow::Result<Vec<PublicKey>> {
    files
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let key = std::str::from_utf8(k).ok().and_then(PublicKey::from_pem);
            match key {
                Some(k @ (PublicKey::P256(_) | PublicKey::P384(_))) => Ok(k),
                Some(_) if ecdsa => bad_policy(
                    file,
                    &format!("{names}: Rekor public key {} is not using ECDSA", i + 1),
                ),
                Some(k) => Ok(k),
                None => bad_policy(
                    file,
                    &format!(
                        "{names}: key {} is not a PEM ECDSA (P-256, P-384), ed25519 or RSA public key",
                        i + 1
                    ),
                ),
            }
        })
        .collect()
}

fn fulcio(host: &dyn Host, file: &Path, raw: &RawFulcio) -> anyhow::Result<(Signer, String)> {
    let (ca, ca_source) = certificates(host, file, &raw.ca, "fulcio.ca")?;
    let f = Fulcio {
        ca,
        ca_source,
        oidc_issuer: raw.oidc_issuer.clone(),
        subject_email: raw.subject_email.clone(),
    };
    let source = format!("fulcio {}", f.ca_source);
    Ok((Signer::Fulcio(Box::new(f)), source))
}

fn pki(host: &dyn Host, file: &Path, raw: &RawPki) -> anyhow::Result<(Signer, String)> {
    let (roots, mut source) = certificates(host, file, &raw.roots, "pki.caRoots")?;
    let mut intermediates = Vec::new();
    if let Some(i) = &raw.intermediates {
        let (certs, names) = certificates(host, file, i, "pki.caIntermediates")?;
        intermediates = certs;
        source = format!("{source} {names}");
    }
    let p = Pki {
        roots,
        intermediates,
        source,
        subject_email: raw.subject_email.clone(),
        subject_hostname: raw.subject_hostname.clone(),
    };
    let source = format!("pki {}", p.source);
    Ok((Signer::Pki(Box::new(p)), source))
}

/// PEM certificates, every block a certificate and at least one.
fn certificates(
    host: &dyn Host,
    file: &Path,
    keys: &Keys,
    field: &str,
) -> anyhow::Result<(Vec<Certificate>, String)> {
    let (files, names) = read_keys(host, file, keys, field)?;
    let mut out = Vec::new();
    for f in &files {
        match parse_pem_certificates(f) {
            Ok(certs) if !certs.is_empty() => out.extend(certs),
            Ok(_) => return bad_policy(file, &format!("{names}: no certificate found")),
            Err(e) => {
                return bad_policy(file, &format!("{names}: not PEM certificates: {e}"));
            }
        }
    }
    Ok((out, names))
}

/// Every `CERTIFICATE` block of a PEM file (whitespace between them only);
/// none in text without a PEM block, as sigstore's
/// `UnmarshalCertificatesFromPEM`.
pub fn parse_pem_certificates(bytes: &[u8]) -> Result<Vec<Certificate>, String> {
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Ok(Vec::new());
    }
    Certificate::load_pem_chain(bytes).map_err(|e| e.to_string())
}
