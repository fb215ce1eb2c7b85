//! The certificate of a sigstore signature, checked as Go's crypto/x509
//! `Certificate.Verify` checks it for containers/image (signature/fulcio_cert.go,
//! pki_cert.go): a chain from the leaf to a trusted root through the
//! intermediates given, every certificate valid at the time given, each issuer
//! a CA allowed to sign certificates, path lengths kept, and code signing
//! among the extended key usages of every certificate that lists them. Then
//! Fulcio's OIDC issuer extension, or the subject's email and host name.
//! Parsing is x509-cert's (RustCrypto); nothing here is trusted before its
//! chain is.

use sha2::Digest as _;
use x509_cert::Certificate;
use x509_cert::certificate::Version;
use x509_cert::der::asn1::Utf8StringRef;
use x509_cert::der::oid::ObjectIdentifier as Oid;
use x509_cert::der::{Decode, Encode};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, KeyUsages, SubjectAltName,
};

use crate::plan::policy::PublicKey;

/// The longest chain built: the leaf and this many issuers.
const MAX_DEPTH: usize = 8;

const KEY_USAGE: Oid = Oid::new_unwrap("2.5.29.15");
const SUBJECT_ALT_NAME: Oid = Oid::new_unwrap("2.5.29.17");
const BASIC_CONSTRAINTS: Oid = Oid::new_unwrap("2.5.29.19");
const NAME_CONSTRAINTS: Oid = Oid::new_unwrap("2.5.29.30");
const EXT_KEY_USAGE: Oid = Oid::new_unwrap("2.5.29.37");
/// What Go's parser handles, so that their being critical is fine.
const HANDLED: [&str; 10] = [
    "2.5.29.14",
    "2.5.29.15",
    "2.5.29.17",
    "2.5.29.19",
    "2.5.29.30",
    "2.5.29.31",
    "2.5.29.32",
    "2.5.29.35",
    "2.5.29.37",
    "1.3.6.1.5.5.7.1.1",
];
const CODE_SIGNING: Oid = Oid::new_unwrap("1.3.6.1.5.5.7.3.3");
const ANY_USAGE: Oid = Oid::new_unwrap("2.5.29.37.0");
/// Fulcio's OIDC issuer: v1 holds the raw string, v2 a DER UTF8String.
const FULCIO_ISSUER_V1: Oid = Oid::new_unwrap("1.3.6.1.4.1.57264.1.1");
const FULCIO_ISSUER_V2: Oid = Oid::new_unwrap("1.3.6.1.4.1.57264.1.8");

/// The extensions the checks read, decoded.
#[derive(Debug, Default)]
struct Extensions {
    basic: Option<BasicConstraints>,
    key_usage: Option<KeyUsage>,
    ext_key_usage: Option<Vec<Oid>>,
    names: Vec<GeneralName>,
    name_constraints: bool,
    unhandled_critical: Option<Oid>,
}

fn extensions(cert: &Certificate) -> Result<Extensions, String> {
    let mut out = Extensions::default();
    let exts = cert
        .tbs_certificate
        .extensions
        .as_deref()
        .unwrap_or_default();
    for (i, e) in exts.iter().enumerate() {
        if exts[..i].iter().any(|o| o.extn_id == e.extn_id) {
            return Err(format!(
                "certificate has a duplicate extension {}",
                e.extn_id
            ));
        }
        let v = e.extn_value.as_bytes();
        fn bad(what: &'static str) -> impl Fn(x509_cert::der::Error) -> String {
            move |err| format!("invalid {what} extension: {err}")
        }
        match e.extn_id {
            BASIC_CONSTRAINTS => {
                out.basic = Some(BasicConstraints::from_der(v).map_err(bad("basic constraints"))?)
            }
            KEY_USAGE => out.key_usage = Some(KeyUsage::from_der(v).map_err(bad("key usage"))?),
            EXT_KEY_USAGE => {
                let eku = ExtendedKeyUsage::from_der(v).map_err(bad("extended key usage"))?;
                out.ext_key_usage = Some(eku.0);
            }
            SUBJECT_ALT_NAME => {
                out.names = SubjectAltName::from_der(v)
                    .map_err(bad("subject alternative name"))?
                    .0
            }
            NAME_CONSTRAINTS => out.name_constraints = true,
            id if e.critical && !HANDLED.contains(&id.to_string().as_str()) => {
                out.unhandled_critical.get_or_insert(id);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Whether `cert` is valid at `at` (seconds since the epoch).
fn valid_at(cert: &Certificate, at: u64) -> Result<(), String> {
    let v = &cert.tbs_certificate.validity;
    let (from, until) = (
        v.not_before.to_unix_duration().as_secs(),
        v.not_after.to_unix_duration().as_secs(),
    );
    if at < from || at > until {
        return Err(format!(
            "certificate {} has expired or is not yet valid: it is valid from {} to {}, checked at {}",
            subject(cert),
            utc(from),
            utc(until),
            utc(at)
        ));
    }
    Ok(())
}

fn subject(cert: &Certificate) -> String {
    let s = cert.tbs_certificate.subject.to_string();
    if s.is_empty() {
        "(no subject)".into()
    } else {
        format!("{s:?}")
    }
}

/// Whether `key` made `sig` over `msg` with the X.509 algorithm `alg`.
fn verify_alg(key: &PublicKey, alg: &Oid, msg: &[u8], sig: &[u8]) -> Result<(), String> {
    let hash: Vec<u8> = match alg.to_string().as_str() {
        "1.2.840.10045.4.3.2" | "1.2.840.113549.1.1.11" => sha2::Sha256::digest(msg).to_vec(),
        "1.2.840.10045.4.3.3" | "1.2.840.113549.1.1.12" => sha2::Sha384::digest(msg).to_vec(),
        "1.2.840.10045.4.3.4" | "1.2.840.113549.1.1.13" => sha2::Sha512::digest(msg).to_vec(),
        "1.3.101.112" => Vec::new(),
        other => return Err(format!("unsupported signature algorithm {other}")),
    };
    let rsa_hash = match alg.to_string().as_str() {
        "1.2.840.113549.1.1.11" => Some(rsa::Pkcs1v15Sign::new::<rsa::sha2::Sha256>()),
        "1.2.840.113549.1.1.12" => Some(rsa::Pkcs1v15Sign::new::<rsa::sha2::Sha384>()),
        "1.2.840.113549.1.1.13" => Some(rsa::Pkcs1v15Sign::new::<rsa::sha2::Sha512>()),
        _ => None,
    };
    let ok = match (key, rsa_hash) {
        (PublicKey::Rsa(k), Some(scheme)) => k.verify(scheme, &hash, sig).is_ok(),
        (PublicKey::Ed25519(k), None) if hash.is_empty() => {
            ed25519_dalek::Signature::from_slice(sig)
                .is_ok_and(|s| k.verify_strict(msg, &s).is_ok())
        }
        (PublicKey::P256(_) | PublicKey::P384(_), None) if !hash.is_empty() => {
            ecdsa_prehash(key, &hash, sig)
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err("bad certificate signature".into())
    }
}

/// An ASN.1 ECDSA signature over a digest.
pub(super) fn ecdsa_prehash(key: &PublicKey, hash: &[u8], sig: &[u8]) -> bool {
    use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
    match key {
        PublicKey::P256(k) => {
            p256::ecdsa::Signature::from_der(sig).is_ok_and(|s| k.verify_prehash(hash, &s).is_ok())
        }
        PublicKey::P384(k) => {
            p384::ecdsa::Signature::from_der(sig).is_ok_and(|s| k.verify_prehash(hash, &s).is_ok())
        }
        _ => false,
    }
}

/// The key a certificate certifies.
pub(super) fn public_key(cert: &Certificate) -> Result<PublicKey, String> {
    cert.tbs_certificate
        .subject_public_key_info
        .to_der()
        .ok()
        .and_then(|d| PublicKey::from_spki_der(&d))
        .ok_or_else(|| format!("certificate {}: unsupported public key", subject(cert)))
}

/// Whether `issuer` issued `child`, `depth` certificates below it being in
/// the chain, at `at`: Go's `isValid` and `CheckSignatureFrom`.
fn issued(child: &Certificate, issuer: &Certificate, depth: usize, at: u64) -> Result<(), String> {
    if child.tbs_certificate.issuer != issuer.tbs_certificate.subject {
        return Err("certificate signed by unknown authority".into());
    }
    let ext = extensions(issuer)?;
    let v3 = issuer.tbs_certificate.version == Version::V3;
    if v3 && !ext.basic.as_ref().is_some_and(|b| b.ca) {
        return Err(format!("certificate {} is not a CA", subject(issuer)));
    }
    if ext
        .key_usage
        .is_some_and(|k| !k.0.contains(KeyUsages::KeyCertSign))
    {
        return Err(format!(
            "certificate {} may not sign certificates",
            subject(issuer)
        ));
    }
    if ext.name_constraints {
        return Err(format!(
            "certificate {} has name constraints, which hostpull does not check",
            subject(issuer)
        ));
    }
    if let Some(max) = ext.basic.and_then(|b| b.path_len_constraint)
        && depth - 1 > usize::from(max)
    {
        return Err(format!("too many intermediates for {}", subject(issuer)));
    }
    valid_at(issuer, at)?;
    let tbs = child.tbs_certificate.to_der().map_err(|e| e.to_string())?;
    let sig = child
        .signature
        .as_bytes()
        .ok_or("certificate signature is not whole bytes")?;
    verify_alg(
        &public_key(issuer)?,
        &child.signature_algorithm.oid,
        &tbs,
        sig,
    )
}

/// Builds a chain from `chain`'s last certificate up to one of `roots`.
fn build<'a>(
    chain: &mut Vec<&'a Certificate>,
    intermediates: &'a [Certificate],
    roots: &'a [Certificate],
    at: u64,
) -> Result<(), String> {
    let Some(&child) = chain.last() else {
        return Err("empty chain".into());
    };
    let mut why = None;
    for root in roots {
        match issued(child, root, chain.len(), at) {
            Ok(()) => {
                let mut all = chain.clone();
                all.push(root);
                return code_signing(&all);
            }
            Err(e) => why = why.or(Some(e)),
        }
    }
    if chain.len() < MAX_DEPTH {
        for i in intermediates {
            if chain.contains(&i) {
                continue;
            }
            match issued(child, i, chain.len(), at) {
                Ok(()) => {
                    chain.push(i);
                    let r = build(chain, intermediates, roots, at);
                    chain.pop();
                    match r {
                        Ok(()) => return Ok(()),
                        Err(e) => why = Some(e),
                    }
                }
                Err(e) => why = why.or(Some(e)),
            }
        }
    }
    Err(why.unwrap_or_else(|| "certificate signed by unknown authority".into()))
}

/// Go's `checkChainForKeyUsage` for code signing: every certificate that
/// lists extended key usages lists it (or any).
fn code_signing(chain: &[&Certificate]) -> Result<(), String> {
    for c in chain {
        if let Some(eku) = extensions(c)?.ext_key_usage
            && !eku.iter().any(|u| *u == CODE_SIGNING || *u == ANY_USAGE)
        {
            return Err(format!(
                "certificate {} does not allow code signing",
                subject(c)
            ));
        }
    }
    Ok(())
}

/// The leaf's chain to `roots` at `at`, through `intermediates`.
pub(super) fn verify_chain(
    leaf: &Certificate,
    intermediates: &[Certificate],
    roots: &[Certificate],
    at: u64,
) -> Result<(), String> {
    if let Some(id) = extensions(leaf)?.unhandled_critical {
        return Err(format!(
            "certificate has an unhandled critical extension {id}"
        ));
    }
    valid_at(leaf, at)?;
    build(&mut vec![leaf], intermediates, roots, at)
        .map_err(|e| format!("verifying the signing certificate failed: {e}"))
}

/// The emails of the leaf's subject alternative names.
pub(super) fn emails(leaf: &Certificate) -> Result<Vec<String>, String> {
    Ok(extensions(leaf)?
        .names
        .iter()
        .filter_map(|n| match n {
            GeneralName::Rfc822Name(e) => Some(e.to_string()),
            _ => None,
        })
        .collect())
}

/// Go's `VerifyHostname` for a DNS name (a `*.` first label matches one
/// label) or an IP address.
pub(super) fn valid_for_host(leaf: &Certificate, host: &str) -> Result<bool, String> {
    let names = extensions(leaf)?.names;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        let want = match ip {
            std::net::IpAddr::V4(a) => a.octets().to_vec(),
            std::net::IpAddr::V6(a) => a.octets().to_vec(),
        };
        return Ok(names
            .iter()
            .any(|n| matches!(n, GeneralName::IpAddress(a) if a.as_bytes() == want)));
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    Ok(names.iter().any(|n| match n {
        GeneralName::DnsName(d) => {
            let pattern = d.to_string().trim_end_matches('.').to_ascii_lowercase();
            match pattern.strip_prefix("*.") {
                Some(rest) => host
                    .split_once('.')
                    .is_some_and(|(first, tail)| !first.is_empty() && tail == rest),
                None => pattern == host,
            }
        }
        _ => false,
    }))
}

/// Fulcio's OIDC issuer extension (v1 or v2; both must agree), as
/// containers/image's `fulcioIssuerInCertificate`.
pub(super) fn fulcio_issuer(leaf: &Certificate) -> Result<String, String> {
    let exts = leaf
        .tbs_certificate
        .extensions
        .as_deref()
        .unwrap_or_default();
    let find = |oid: Oid| exts.iter().find(|e| e.extn_id == oid);
    let v1 = find(FULCIO_ISSUER_V1)
        .map(|e| String::from_utf8(e.extn_value.as_bytes().to_vec()))
        .transpose()
        .map_err(|_| "invalid OIDC issuer v1 extension: not UTF-8".to_owned())?;
    let v2 = find(FULCIO_ISSUER_V2)
        .map(|e| Utf8StringRef::from_der(e.extn_value.as_bytes()).map(|s| s.to_string()))
        .transpose()
        .map_err(|e| format!("invalid ASN.1 in OIDC issuer v2 extension: {e}"))?;
    match (v1, v2) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "inconsistent OIDC issuer extension values: v1 {a:?}, v2 {b:?}"
        )),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err("Fulcio certificate is missing the issuer extension".into()),
    }
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`, for messages.
pub(super) fn utc(secs: u64) -> String {
    let dt = x509_cert::der::DateTime::from_unix_duration(std::time::Duration::from_secs(secs));
    dt.map_or_else(|_| format!("{secs}"), |d| d.to_string())
}
