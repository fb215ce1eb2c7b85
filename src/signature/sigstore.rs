//! Sigstore (cosign) attachments: fetched through the worker, verified here.

use serde::Deserialize;

use std::collections::BTreeMap;

use sha2::Digest as _;
use x509_cert::Certificate;

use super::gpg::MAX_SIGNATURES;
use super::identity::{COSIGN, check_payload};
use super::rekor::{pem_der, verify_set};
use super::x509::{self, utc};
use crate::digest::{self, Sha256Digest};
use crate::error::{Failure, Kind, failure};
use crate::imgref::ImageRef;
use crate::manifest::{Descriptor, MANIFEST_MAX};
use crate::plan::policy::{
    Fulcio, Identity, Pki, PublicKey, Rekor, Signer, parse_pem_certificates,
};
use crate::sandbox::Worker;

/// A sigstore attachment layer: its blob is the payload, its annotations the
/// signature and what vouches for its key (internal/signature/sigstore.go).
const COSIGN_PAYLOAD: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub(super) const COSIGN_SIGNATURE: &str = "dev.cosignproject.cosign/signature";
/// The Rekor SET.
const COSIGN_BUNDLE: &str = "dev.sigstore.cosign/bundle";
/// The signing certificate (PEM).
const COSIGN_CERTIFICATE: &str = "dev.sigstore.cosign/certificate";
/// Its chain (PEM): every certificate but the last is taken as an intermediate.
const COSIGN_CHAIN: &str = "dev.sigstore.cosign/chain";

/// One sigstore signature: the payload and its layer's annotations.
#[derive(Debug, Clone)]
pub(super) struct Attached {
    pub(super) digest: Sha256Digest,
    pub(super) payload: Vec<u8>,
    pub(super) annotations: BTreeMap<String, String>,
}

impl Attached {
    fn annotation(&self, key: &str) -> Result<&str, String> {
        self.annotations
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("missing {key} annotation"))
    }

    /// The base64 signature over the payload.
    pub(super) fn signature(&self) -> Result<&str, String> {
        self.annotation(COSIGN_SIGNATURE)
    }

    /// The signing certificate: exactly one.
    fn leaf(&self) -> Result<(Certificate, Vec<u8>), String> {
        let pem = self.annotation(COSIGN_CERTIFICATE)?;
        let certs = parse_pem_certificates(pem.as_bytes())
            .map_err(|e| format!("parsing leaf certificate: {e}"))?;
        match <[Certificate; 1]>::try_from(certs) {
            Ok([leaf]) => Ok((leaf, pem_der(pem.as_bytes(), "the certificate")?)),
            Err(v) if v.is_empty() => {
                Err("no certificate found in signature certificate data".into())
            }
            Err(_) => {
                Err("unexpected multiple certificates present in signature certificate data".into())
            }
        }
    }

    /// The untrusted intermediates of the chain annotation: all but its last.
    fn intermediates(&self) -> Result<Vec<Certificate>, String> {
        let Some(pem) = self.annotations.get(COSIGN_CHAIN) else {
            return Ok(Vec::new());
        };
        let mut certs = parse_pem_certificates(pem.as_bytes())
            .map_err(|e| format!("loading certificate chain: {e}"))?;
        certs.pop();
        Ok(certs)
    }
}

/// What vouches for a signature's key: its certificate and chain, and
/// Rekor's promise that it was logged. An attachment's annotations carry them,
/// and so does a cosign bundle's `verificationMaterial`.
pub(super) trait Evidence {
    /// Whether it has a Rekor entry at all (checked first, as
    /// containers/image does for the SET annotation).
    fn has_log(&self) -> Result<(), String>;
    /// The signing certificate (and its DER): exactly one.
    fn leaf(&self) -> Result<(Certificate, Vec<u8>), String>;
    /// The untrusted intermediates that come with it.
    fn intermediates(&self) -> Result<Vec<Certificate>, String>;
    /// The integrated time of a Rekor entry, signed by one of `keys`, that
    /// logs this signature by `key_or_cert` (DER).
    fn logged(&self, keys: &[PublicKey], key_or_cert: &[u8]) -> Result<i64, String>;
}

impl Evidence for Attached {
    fn has_log(&self) -> Result<(), String> {
        self.annotation(COSIGN_BUNDLE).map(|_| ())
    }

    fn leaf(&self) -> Result<(Certificate, Vec<u8>), String> {
        Attached::leaf(self)
    }

    fn intermediates(&self) -> Result<Vec<Certificate>, String> {
        Attached::intermediates(self)
    }

    fn logged(&self, keys: &[PublicKey], key_or_cert: &[u8]) -> Result<i64, String> {
        let set = self.annotation(COSIGN_BUNDLE)?;
        verify_set(keys, set, key_or_cert, self.signature()?, &self.payload)
    }
}

/// Who made `a`, if it satisfies a `sigstoreSigned` requirement for `image`;
/// or why it does not.
#[allow(clippy::too_many_arguments)]
pub(super) fn accepted(
    signer: &Signer,
    rekor: Option<&Rekor>,
    source: &str,
    identity: &Identity,
    image: &ImageRef,
    a: &Attached,
    now: u64,
) -> Result<String, String> {
    let (keys, who) = signer_keys(signer, rekor, source, a, now)?;
    sigstore_verify(&keys, &a.payload, a.signature()?)?;
    check_payload(&a.payload, COSIGN, &a.digest, image, identity)?;
    Ok(who)
}

/// `accepted` for one attachment layer given as its annotations and payload:
/// the entry point of the fuzz target of certificate, chain and SET parsing.
#[allow(clippy::too_many_arguments)]
pub fn verify_attachment(
    signer: &Signer,
    rekor: Option<&Rekor>,
    identity: &Identity,
    image: &ImageRef,
    digest: &Sha256Digest,
    annotations: BTreeMap<String, String>,
    payload: Vec<u8>,
    now: u64,
) -> Result<String, String> {
    let a = Attached {
        digest: digest.clone(),
        payload,
        annotations,
    };
    accepted(signer, rekor, "fuzz", identity, image, &a, now)
}

/// The keys `a`'s payload signature may be checked with under `signer` and
/// `rekor`, and who they stand for; or why none may. `now` (seconds since
/// the epoch) is when a PKI certificate must be valid; a Fulcio one must be
/// valid when Rekor logged it.
pub(super) fn signer_keys(
    signer: &Signer,
    rekor: Option<&Rekor>,
    source: &str,
    a: &dyn Evidence,
    now: u64,
) -> Result<(Vec<PublicKey>, String), String> {
    match (signer, rekor) {
        (Signer::Keys(keys), None) => Ok((keys.clone(), format!("sigstore {source}"))),
        (Signer::Keys(keys), Some(r)) => {
            let mut why = Vec::new();
            for k in keys {
                match a.logged(&r.keys, &k.spki_der()) {
                    Ok(_) => return Ok((vec![k.clone()], format!("sigstore {source}, in Rekor"))),
                    Err(e) => why.push(e),
                }
            }
            Err(format!(
                "no public key verified against the Rekor SET: {}",
                why.join(", ")
            ))
        }
        (Signer::Fulcio(f), Some(r)) => fulcio(f, r, a),
        (Signer::Fulcio(_), None) => Err("Fulcio is specified without a Rekor public key".into()),
        (Signer::Pki(p), _) => pki(p, a, now),
    }
}

fn fulcio(f: &Fulcio, r: &Rekor, a: &dyn Evidence) -> Result<(Vec<PublicKey>, String), String> {
    a.has_log()?;
    let (leaf, der) = a.leaf()?;
    let at = a.logged(&r.keys, &der)?;
    let at = u64::try_from(at).map_err(|_| format!("Rekor integrated time {at} is negative"))?;
    x509::verify_chain(&leaf, &a.intermediates()?, &f.ca, at)?;
    let issuer = x509::fulcio_issuer(&leaf)?;
    if issuer != f.oidc_issuer {
        return Err(format!("unexpected Fulcio OIDC issuer {issuer:?}"));
    }
    let emails = x509::emails(&leaf)?;
    if !emails.contains(&f.subject_email) {
        return Err(format!(
            "required email {:?} not found (got {emails:?})",
            f.subject_email
        ));
    }
    let who = format!(
        "sigstore fulcio {} from {issuer}, in Rekor at {}",
        f.subject_email,
        utc(at)
    );
    Ok((vec![x509::public_key(&leaf)?], who))
}

fn pki(p: &Pki, a: &dyn Evidence, now: u64) -> Result<(Vec<PublicKey>, String), String> {
    let (leaf, _) = a.leaf()?;
    let mut intermediates = p.intermediates.clone();
    intermediates.extend(a.intermediates()?);
    x509::verify_chain(&leaf, &intermediates, &p.roots, now)?;
    let mut who = Vec::new();
    if let Some(want) = &p.subject_email {
        let emails = x509::emails(&leaf)?;
        if !emails.contains(want) {
            return Err(format!(
                "required email {want:?} not found (got {emails:?})"
            ));
        }
        who.push(want.clone());
    }
    if let Some(host) = &p.subject_hostname {
        if !x509::valid_for_host(&leaf, host)? {
            return Err(format!(
                "unexpected subject hostname: the certificate is not valid for {host:?}"
            ));
        }
        who.push(host.clone());
    }
    Ok((
        vec![x509::public_key(&leaf)?],
        format!("sigstore pki {}", who.join(" ")),
    ))
}

/// The sigstore attachments of each digest: the image `PATH:sha256-HEX.sig`
/// in the same repository, fetched through the worker like any image.
pub(super) async fn attachments(
    worker: &Worker,
    image: &ImageRef,
    digests: &[Sha256Digest],
) -> anyhow::Result<Vec<Attached>> {
    let mut out = Vec::new();
    for d in digests {
        let sig_image = ImageRef {
            tag: Some(format!("sha256-{}.sig", d.hex())),
            digest: None,
            ..image.clone()
        };
        let raw = match worker.inspect_raw(&sig_image, MANIFEST_MAX).await {
            Ok(raw) => raw,
            Err(e) if failure(&e).is_some_and(|f| f.kind == Kind::NotFound) => continue,
            Err(e) => return Err(e),
        };
        #[derive(Deserialize)]
        struct SigManifest {
            layers: Vec<Descriptor>,
        }
        let m: SigManifest = serde_json::from_slice(&raw).map_err(|e| {
            Failure::new(
                Kind::Signature,
                format!("sigstore attachment {sig_image} is not an image manifest: {e}"),
            )
        })?;
        let layers: Vec<Descriptor> = m
            .layers
            .into_iter()
            .filter(|l| l.media_type == COSIGN_PAYLOAD)
            .take(MAX_SIGNATURES)
            .collect();
        if layers.is_empty() {
            continue;
        }
        let pinned = sig_image.with_digest(&digest::sha256(&raw));
        let payloads = worker.proxy_session().fetch_small(&pinned, &layers).await?;
        for (l, payload) in layers.into_iter().zip(payloads) {
            out.push(Attached {
                digest: d.clone(),
                payload,
                annotations: l.annotations,
            });
        }
    }
    Ok(out)
}

/// A cosign signature over the payload bytes: ECDSA (P-256 or P-384) with
/// SHA-256 in ASN.1 DER, RSA PKCS #1 v1.5 with SHA-256, or ed25519; any of
/// `keys` may have made it.
pub fn sigstore_verify(keys: &[PublicKey], payload: &[u8], signature: &str) -> Result<(), String> {
    let sig = super::rekor::b64(signature.trim(), &format!("annotation {COSIGN_SIGNATURE}"))?;
    let hash = sha2::Sha256::digest(payload);
    let good = keys.iter().any(|k| match k {
        PublicKey::P256(_) | PublicKey::P384(_) => x509::ecdsa_prehash(k, &hash, &sig),
        PublicKey::Rsa(k) => k
            .verify(rsa::Pkcs1v15Sign::new::<rsa::sha2::Sha256>(), &hash, &sig)
            .is_ok(),
        PublicKey::Ed25519(k) => ed25519_dalek::Signature::from_slice(&sig)
            .is_ok_and(|s| k.verify_strict(payload, &s).is_ok()),
    });
    if good {
        Ok(())
    } else {
        Err("not signed by a key the policy trusts".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn sigstore_signatures() {
        use p256::ecdsa::signature::Signer as _;
        let payload = br#"{"critical":{"type":"cosign container image signature"}}"#.to_vec();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let sig: p256::ecdsa::Signature = sk.sign(&payload);
        let der = b64(sig.to_der().as_bytes());
        let ek = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
        let ed = b64(&ed25519_dalek::Signer::sign(&ek, &payload).to_bytes());
        let p = PublicKey::P256(*sk.verifying_key());
        let e = PublicKey::Ed25519(ek.verifying_key());
        let other = PublicKey::P256(
            *p256::ecdsa::SigningKey::from_slice(&[8u8; 32])
                .unwrap()
                .verifying_key(),
        );
        let one = std::slice::from_ref;
        assert_eq!(sigstore_verify(one(&p), &payload, &der), Ok(()));
        assert_eq!(
            sigstore_verify(&[other.clone(), e.clone()], &payload, &ed),
            Ok(())
        );
        assert!(sigstore_verify(one(&other), &payload, &der).is_err());
        assert!(sigstore_verify(one(&e), &payload, &der).is_err());
        let mut tampered = payload.clone();
        tampered[5] ^= 1;
        assert!(sigstore_verify(one(&p), &tampered, &der).is_err());
        assert!(
            sigstore_verify(one(&p), &payload, "!!")
                .unwrap_err()
                .contains("base64")
        );
    }
}

/// containers/image's own recorded signatures (signature/fixtures, see
/// testdata/README.md) through the whole check, as
/// policy_eval_sigstore_test.go's TestPRrSigstoreSignedIsSignatureAccepted.
#[cfg(test)]
mod upstream {
    use super::*;
    use base64::Engine as _;

    fn fixture(name: &str) -> Vec<u8> {
        let p = format!(
            "{}/src/signature/testdata/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn key(name: &str) -> PublicKey {
        PublicKey::from_pem(std::str::from_utf8(&fixture(name)).unwrap()).unwrap()
    }

    fn certs(name: &str) -> Vec<Certificate> {
        parse_pem_certificates(&fixture(name)).unwrap()
    }

    /// A `dir:` image's `signature-1` (`\0sigstore-json\n{…}`), for its
    /// manifest.
    pub(crate) fn attached(dir: &str) -> Attached {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Blob {
            mime_type: String,
            payload: String,
            annotations: BTreeMap<String, String>,
        }
        let blob = fixture(&format!("{dir}/signature-1"));
        let json = blob.strip_prefix(b"\0sigstore-json\n").unwrap();
        let b: Blob = serde_json::from_slice(json).unwrap();
        assert_eq!(b.mime_type, COSIGN_PAYLOAD);
        Attached {
            digest: digest::sha256(&fixture(&format!("{dir}/manifest.json"))),
            payload: base64::engine::general_purpose::STANDARD
                .decode(b.payload)
                .unwrap(),
            annotations: b.annotations,
        }
    }

    fn rekor(names: &[&str]) -> Option<Rekor> {
        Some(Rekor {
            keys: names.iter().map(|n| key(n)).collect(),
            source: names.join(" "),
        })
    }

    pub(crate) fn github_fulcio(ca: Vec<Certificate>, email: &str) -> Signer {
        Signer::Fulcio(Box::new(Fulcio {
            ca,
            ca_source: "fulcio_v1.crt.pem".into(),
            oidc_issuer: "https://github.com/login/oauth".into(),
            subject_email: email.into(),
        }))
    }

    fn linuxera(intermediates: bool, email: Option<&str>, host: Option<&str>) -> Signer {
        Signer::Pki(Box::new(Pki {
            roots: certs("pki_root_crts.pem"),
            intermediates: if intermediates {
                certs("pki_intermediate_crts.pem")
            } else {
                Vec::new()
            },
            source: "pki_root_crts.pem".into(),
            subject_email: email.map(Into::into),
            subject_hostname: host.map(Into::into),
        }))
    }

    /// Now, as the PKI checks run (its fixtures are valid until 2052).
    const NOW: u64 = 1_764_633_600;

    fn check(
        signer: &Signer,
        rekor: &Option<Rekor>,
        image: &str,
        a: &Attached,
    ) -> Result<String, String> {
        let image = ImageRef::parse(image).unwrap();
        accepted(
            signer,
            rekor.as_ref(),
            "s",
            &Identity::MatchRepository,
            &image,
            a,
            NOW,
        )
    }

    fn without(a: &Attached, key: &str) -> Attached {
        let mut a = a.clone();
        assert!(a.annotations.remove(key).is_some(), "{key}");
        a
    }

    fn with(a: &Attached, key: &str, value: &str) -> Attached {
        let mut a = a.clone();
        a.annotations.insert(key.into(), value.into());
        a
    }

    const KEY_IMAGE: &str = "192.168.64.2:5000/cosign-signed-single-sample";
    const KEY_REKOR_IMAGE: &str = "192.168.64.2:5000/cosign-signed/key-1";
    const FULCIO_IMAGE: &str = "192.168.64.2:5000/cosign-signed/fulcio-rekor-1";
    const PKI_IMAGE: &str = "localhost:5000/test";

    #[test]
    fn keys_with_rekor() {
        let a = attached("dir-img-cosign-key-rekor-valid");
        let keys = |names: &[&str]| Signer::Keys(names.iter().map(|n| key(n)).collect());
        for k in [
            &["cosign2.pub"][..],
            &["cosign2.pub", "cosign.pub"],
            &["cosign.pub", "cosign2.pub"],
        ] {
            for r in [
                &["rekor.pub"][..],
                &["rekor.pub", "cosign.pub"],
                &["cosign.pub", "rekor.pub"],
            ] {
                let who = check(&keys(k), &rekor(r), KEY_REKOR_IMAGE, &a).unwrap();
                assert_eq!(who, "sigstore s, in Rekor");
            }
            // A SET by another key than the policy's Rekor key.
            let e = check(&keys(k), &rekor(&["cosign.pub"]), KEY_REKOR_IMAGE, &a).unwrap_err();
            assert!(e.contains("verification of Rekor SET failed"), "{e}");
        }
        let pr = (keys(&["cosign2.pub"]), rekor(&["rekor.pub"]));
        let e = check(&pr.0, &pr.1, KEY_REKOR_IMAGE, &without(&a, COSIGN_BUNDLE)).unwrap_err();
        assert!(e.contains("missing dev.sigstore.cosign/bundle"), "{e}");
        let e = check(
            &pr.0,
            &pr.1,
            KEY_REKOR_IMAGE,
            &with(&a, COSIGN_BUNDLE, "this is not a valid SET"),
        )
        .unwrap_err();
        assert!(e.contains("invalid Rekor SET"), "{e}");
        // A valid SET for one accepted key on a signature by another.
        let other = with(
            &attached("dir-img-cosign-valid"),
            COSIGN_BUNDLE,
            &a.annotations[COSIGN_BUNDLE],
        );
        let both = keys(&["cosign.pub", "cosign2.pub"]);
        let e = check(&both, &pr.1, KEY_IMAGE, &other).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        // Without Rekor, the keys alone.
        let plain = attached("dir-img-cosign-valid");
        for k in [
            &["cosign.pub"][..],
            &["cosign.pub", "cosign2.pub"],
            &["cosign2.pub", "cosign.pub"],
        ] {
            assert_eq!(
                check(&keys(k), &None, KEY_IMAGE, &plain).unwrap(),
                "sigstore s"
            );
        }
        let e = check(&keys(&["cosign2.pub"]), &None, KEY_IMAGE, &plain).unwrap_err();
        assert!(e.contains("not signed by a key the policy trusts"), "{e}");
        let bad = with(&plain, COSIGN_SIGNATURE, "aW52YWxpZCBzaWduYXR1cmU=");
        assert!(check(&keys(&["cosign.pub"]), &None, KEY_IMAGE, &bad).is_err());
        let e = check(
            &keys(&["cosign.pub"]),
            &None,
            KEY_IMAGE,
            &without(&plain, COSIGN_SIGNATURE),
        )
        .unwrap_err();
        assert!(
            e.contains("missing dev.cosignproject.cosign/signature"),
            "{e}"
        );
    }

    #[test]
    fn fulcio_with_rekor() {
        let a = attached("dir-img-cosign-fulcio-rekor-valid");
        let ca = certs("fulcio_v1.crt.pem");
        let f = github_fulcio(ca.clone(), "mitr@redhat.com");
        for r in [
            &["rekor.pub"][..],
            &["rekor.pub", "cosign.pub"],
            &["cosign.pub", "rekor.pub"],
        ] {
            let who = check(&f, &rekor(r), FULCIO_IMAGE, &a).unwrap();
            assert_eq!(
                who,
                "sigstore fulcio mitr@redhat.com from https://github.com/login/oauth, in Rekor at 2023-01-20T20:51:33Z"
            );
        }
        let r = rekor(&["rekor.pub"]);
        for (a, why) in [
            (
                without(&a, COSIGN_BUNDLE),
                "missing dev.sigstore.cosign/bundle",
            ),
            (
                without(&a, COSIGN_CERTIFICATE),
                "missing dev.sigstore.cosign/certificate",
            ),
            // No path to the trusted CA without the chain's intermediate.
            (without(&a, COSIGN_CHAIN), "unknown authority"),
            (
                with(&a, COSIGN_CERTIFICATE, "this is not a valid certificate"),
                "no certificate found",
            ),
            (
                with(&a, COSIGN_BUNDLE, "this is not a valid SET"),
                "invalid Rekor SET",
            ),
        ] {
            let e = check(&f, &r, FULCIO_IMAGE, &a).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // Fulcio without Rekor is refused when the policy is read; here too.
        let e = check(&f, &None, FULCIO_IMAGE, &a).unwrap_err();
        assert!(e.contains("without a Rekor public key"), "{e}");
        // The intermediates trusted directly: no chain annotation needed.
        let direct = github_fulcio(
            parse_pem_certificates(a.annotations[COSIGN_CHAIN].as_bytes()).unwrap(),
            "mitr@redhat.com",
        );
        check(&direct, &r, FULCIO_IMAGE, &without(&a, COSIGN_CHAIN)).unwrap();
        // Another subject, another issuer, a SET by another key, another CA.
        let e = check(
            &github_fulcio(ca.clone(), "this-does-not-match@example.com"),
            &r,
            FULCIO_IMAGE,
            &a,
        )
        .unwrap_err();
        assert!(e.contains("required email \"this-does-not-match@example.com\" not found (got [\"mitr@redhat.com\"])"), "{e}");
        let Signer::Fulcio(mut google) = f.clone() else {
            unreachable!()
        };
        google.oidc_issuer = "https://accounts.google.com".into();
        let e = check(&Signer::Fulcio(google), &r, FULCIO_IMAGE, &a).unwrap_err();
        assert!(
            e.contains("unexpected Fulcio OIDC issuer \"https://github.com/login/oauth\""),
            "{e}"
        );
        let e = check(&f, &rekor(&["cosign.pub"]), FULCIO_IMAGE, &a).unwrap_err();
        assert!(e.contains("verification of Rekor SET failed"), "{e}");
        let e = check(
            &github_fulcio(certs("pki_root_crts.pem"), "mitr@redhat.com"),
            &r,
            FULCIO_IMAGE,
            &a,
        )
        .unwrap_err();
        assert!(e.contains("unknown authority"), "{e}");
        // The image's identity still counts.
        let e = check(&f, &r, KEY_IMAGE, &a).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
    }

    #[test]
    fn pki() {
        let a = attached("dir-img-cosign-pki-valid");
        let who = check(
            &linuxera(true, Some("qiwan@redhat.com"), Some("myhost.example.com")),
            &None,
            PKI_IMAGE,
            &a,
        )
        .unwrap();
        assert_eq!(who, "sigstore pki qiwan@redhat.com myhost.example.com");
        check(
            &linuxera(true, Some("qiwan@redhat.com"), None),
            &None,
            PKI_IMAGE,
            &a,
        )
        .unwrap();
        check(
            &linuxera(true, None, Some("MyHost.example.com.")),
            &None,
            PKI_IMAGE,
            &a,
        )
        .unwrap();
        // The chain annotation is not needed when the intermediate is trusted …
        check(
            &linuxera(true, Some("qiwan@redhat.com"), None),
            &None,
            PKI_IMAGE,
            &without(&a, COSIGN_CHAIN),
        )
        .unwrap();
        // … and carries it when not.
        check(
            &linuxera(false, Some("qiwan@redhat.com"), None),
            &None,
            PKI_IMAGE,
            &a,
        )
        .unwrap();
        for (signer, a, why) in [
            (
                linuxera(true, Some("qiwan@redhat.com"), None),
                without(&a, COSIGN_CERTIFICATE),
                "missing dev.sigstore.cosign/certificate",
            ),
            (
                linuxera(false, Some("qiwan@redhat.com"), None),
                without(&a, COSIGN_CHAIN),
                "unknown authority",
            ),
            (
                linuxera(true, Some("other@redhat.com"), None),
                a.clone(),
                "required email \"other@redhat.com\" not found",
            ),
            (
                linuxera(true, None, Some("otherhost.example.com")),
                a.clone(),
                "not valid for \"otherhost.example.com\"",
            ),
            (
                linuxera(true, None, Some("example.com")),
                a.clone(),
                "not valid for",
            ),
        ] {
            let e = check(&signer, &None, PKI_IMAGE, &a).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // Judged now: long after its certificates expire, it is rejected.
        let image = ImageRef::parse(PKI_IMAGE).unwrap();
        let s = linuxera(true, Some("qiwan@redhat.com"), None);
        let e = accepted(
            &s,
            None,
            "s",
            &Identity::MatchRepository,
            &image,
            &a,
            2_900_000_000,
        )
        .unwrap_err();
        assert!(e.contains("has expired or is not yet valid"), "{e}");
    }

    /// The Fulcio certificate is judged when Rekor logged it: SETs of our own
    /// Rekor key over the recorded signature, at times around the
    /// certificate's ten minutes (2023-01-20 20:51:31 to 21:01:31 UTC).
    #[test]
    fn fulcio_judged_at_integration_time() {
        use crate::signature::rekor::testing::{entry, test_key, test_set};
        let a = attached("dir-img-cosign-fulcio-rekor-valid");
        let f = github_fulcio(certs("fulcio_v1.crt.pem"), "mitr@redhat.com");
        let sk = test_key(6);
        let r = Some(Rekor {
            keys: vec![PublicKey::P256(*sk.verifying_key())],
            source: "test".into(),
        });
        let e = entry(
            a.annotations[COSIGN_CERTIFICATE].as_bytes(),
            &a.annotations[COSIGN_SIGNATURE],
            &a.payload,
        );
        for (t, ok) in [
            (1_674_247_891, true),
            (1_674_248_491, true),
            (1_674_247_890, false),
            (1_674_248_492, false),
            (NOW as i64, false),
        ] {
            let a = with(&a, COSIGN_BUNDLE, &test_set(&sk, &e, t));
            match check(&f, &r, FULCIO_IMAGE, &a) {
                Ok(_) => assert!(ok, "{t}"),
                Err(e) => {
                    assert!(!ok, "{t}: {e}");
                    assert!(e.contains("has expired or is not yet valid"), "{e}");
                }
            }
        }
        // The same SETs, by a key the policy does not trust.
        let a = with(
            &a,
            COSIGN_BUNDLE,
            &test_set(&test_key(7), &e, 1_674_247_891),
        );
        let e = check(&f, &r, FULCIO_IMAGE, &a).unwrap_err();
        assert!(e.contains("verification of Rekor SET failed"), "{e}");
    }
}
