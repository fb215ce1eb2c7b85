//! cosign bundles (sigstore protobuf-specs `Bundle` v0.1 to v0.3, in JSON)
//! attached to an image as OCI referrers, as cosign 3 signs images: found
//! through the referrers tag fallback (`sha256-HEX`, an OCI index of the
//! referrers; cosign's specs/BUNDLE_SPEC.md), fetched through the worker like
//! the `.sig` attachments, and verified here against the same `sigstoreSigned`
//! requirement (keys, Fulcio, PKI) with the same certificate and Rekor checks.

use serde::Deserialize;
use x509_cert::Certificate;
use x509_cert::der::Decode as _;

use super::gpg::MAX_SIGNATURES;
use super::rekor::{Promise, b64, check_dsse_entry, check_hashedrekord};
use super::sigstore::{Evidence, signer_keys, sigstore_verify};
use super::x509;
use crate::digest::{self, Sha256Digest};
use crate::error::{Failure, Kind, failure};
use crate::imgref::ImageRef;
use crate::manifest::{Descriptor, MANIFEST_MAX};
use crate::plan::policy::{Identity, PublicKey, Rekor, Signer};
use crate::sandbox::Worker;
use crate::verify;

/// The media types of a bundle (`…bundle+json;version=0.1`, `….v0.3+json`).
const BUNDLE: &str = "application/vnd.dev.sigstore.bundle";
/// A DSSE envelope's payload type for an in-toto statement.
const IN_TOTO: &str = "application/vnd.in-toto+json";
/// The predicate of an image signature (cosign's pkg/types/predicate.go);
/// other predicates are attestations, not signatures.
const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
const STATEMENTS: [&str; 2] = [
    "https://in-toto.io/Statement/v1",
    "https://in-toto.io/Statement/v0.1",
];

fn is_bundle_type(t: &str) -> bool {
    t.starts_with(BUNDLE) && t.contains("+json")
}

/// One bundle found for `digest`, as the worker fetched it (its blob digest
/// checked by root).
#[derive(Debug, Clone)]
pub(super) struct Bundled {
    pub(super) digest: Sha256Digest,
    pub(super) bytes: Vec<u8>,
}

/// A referrers index entry, or a referrer's layer.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    artifact_type: String,
    digest: Sha256Digest,
    size: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReferrersIndex {
    schema_version: u32,
    #[serde(default)]
    media_type: Option<String>,
    manifests: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Referrer {
    #[serde(default)]
    artifact_type: String,
    layers: Vec<Entry>,
    subject: Option<Entry>,
}

/// The referrers of `index` that are bundles, from the tag fallback's index.
fn bundle_referrers(raw: &[u8]) -> Result<Vec<Entry>, String> {
    let i: ReferrersIndex = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    let oci_index = crate::manifest::OCI_INDEX;
    if i.schema_version != 2 || i.media_type.as_deref().is_some_and(|t| t != oci_index) {
        return Err(format!(
            "not an OCI image index (schemaVersion 2, {oci_index})"
        ));
    }
    Ok(i.manifests
        .into_iter()
        .filter(|m| is_bundle_type(&m.artifact_type))
        .take(MAX_SIGNATURES)
        .collect())
}

/// The bundle layer of a referrer manifest of `subject`.
fn bundle_layer(raw: &[u8], subject: &Sha256Digest) -> Result<Option<Descriptor>, String> {
    let r: Referrer = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    match &r.subject {
        Some(s) if s.digest == *subject => {}
        Some(s) => return Err(format!("its subject is {}, not {subject}", s.digest)),
        None => return Err("it has no subject".into()),
    }
    if !is_bundle_type(&r.artifact_type) {
        return Ok(None);
    }
    let layer = r.layers.into_iter().find(|l| is_bundle_type(&l.media_type));
    Ok(layer.map(|l| Descriptor {
        media_type: l.media_type,
        digest: l.digest,
        size: l.size,
        urls: Vec::new(),
        platform: None,
        annotations: Default::default(),
    }))
}

/// The bundles attached to each digest as referrers, through the tag
/// fallback: the index at `PATH:sha256-HEX`, each bundle referrer's manifest
/// by digest and its bundle blob, all through the worker; every size bounded
/// (4 MiB for each document, 64 referrers), every digest checked here.
pub(super) async fn referrers(
    worker: &Worker,
    image: &ImageRef,
    digests: &[Sha256Digest],
) -> anyhow::Result<Vec<Bundled>> {
    let bad = |what: String| Failure::new(Kind::Signature, what);
    let mut out = Vec::new();
    for d in digests {
        let tagged = ImageRef {
            tag: Some(format!("sha256-{}", d.hex())),
            digest: None,
            ..image.clone()
        };
        let raw = match worker.inspect_raw(&tagged, MANIFEST_MAX).await {
            Ok(raw) => raw,
            Err(e) if failure(&e).is_some_and(|f| f.kind == Kind::NotFound) => continue,
            Err(e) => return Err(e),
        };
        let entries = bundle_referrers(&raw)
            .map_err(|e| bad(format!("referrers index {tagged} is not valid: {e}")))?;
        for r in entries {
            if r.size > MANIFEST_MAX {
                let big = format!("referrer {} of {image} is larger than 4 MiB", r.digest);
                return Err(Failure::new(Kind::Verify, big).into());
            }
            let pinned = image.with_digest(&r.digest);
            let raw = worker.inspect_raw(&pinned, MANIFEST_MAX).await?;
            verify::check_bytes("referrer manifest", &raw, &r.digest, r.size)?;
            let layer = bundle_layer(&raw, d)
                .map_err(|e| bad(format!("referrer {pinned} is not a bundle of {d}: {e}")))?;
            let Some(layer) = layer else { continue };
            let blobs = worker
                .proxy_session()
                .fetch_small(&pinned, std::slice::from_ref(&layer))
                .await?;
            out.extend(blobs.into_iter().map(|bytes| Bundled {
                digest: d.clone(),
                bytes,
            }));
        }
    }
    Ok(out)
}

/// The bundle, as protobuf-specs' JSON mapping writes it (camelCase, 64-bit
/// numbers as strings, bytes in base64).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    media_type: String,
    verification_material: Material,
    message_signature: Option<MessageSignature>,
    dsse_envelope: Option<Envelope>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    /// A key named by a hint only: the policy's keys are what count.
    #[serde(default)]
    #[allow(dead_code)]
    public_key: Option<serde_json::Value>,
    /// v0.1 and v0.2: the leaf first.
    x509_certificate_chain: Option<Chain>,
    /// v0.3: the leaf alone.
    certificate: Option<RawBytes>,
    #[serde(default)]
    tlog_entries: Vec<TlogEntry>,
}

#[derive(Debug, Deserialize)]
struct Chain {
    certificates: Vec<RawBytes>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytes {
    raw_bytes: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TlogEntry {
    log_index: Int64,
    log_id: LogId,
    integrated_time: Int64,
    inclusion_promise: Option<InclusionPromise>,
    canonicalized_body: String,
}

/// protobuf's JSON writes an int64 as a string, and reads a number too.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Int64 {
    Text(String),
    Number(i64),
}

impl Int64 {
    fn get(&self, what: &str) -> Result<i64, String> {
        match self {
            Int64::Number(n) => Ok(*n),
            Int64::Text(s) => s
                .parse()
                .map_err(|_| format!("{what} {s:?} is not an integer")),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogId {
    key_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InclusionPromise {
    signed_entry_timestamp: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageSignature {
    message_digest: MessageDigest,
    signature: String,
}

#[derive(Debug, Deserialize)]
struct MessageDigest {
    algorithm: String,
    digest: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    payload: String,
    payload_type: String,
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Deserialize)]
struct EnvelopeSignature {
    sig: String,
}

/// What a bundle signs.
#[derive(Debug)]
enum Content {
    /// A DSSE envelope: the payload (an in-toto statement) and the signature
    /// over its PAE.
    Dsse { payload: Vec<u8>, sig: String },
    /// A message signature: the SHA-256 of the message (the manifest) and the
    /// signature over it.
    Message { digest: Vec<u8>, sig: String },
}

/// A parsed bundle: what it signs and what vouches for the signer.
#[derive(Debug)]
struct Parsed {
    material: Material,
    content: Content,
}

/// DSSE's pre-authentication encoding of `payload`.
fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    v.extend_from_slice(payload);
    v
}

fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    let b: Bundle =
        serde_json::from_slice(bytes).map_err(|e| format!("the bundle is not valid: {e}"))?;
    if !b.media_type.starts_with(BUNDLE) {
        return Err(format!("the bundle's media type is {:?}", b.media_type));
    }
    let content = match (b.dsse_envelope, b.message_signature) {
        (Some(e), None) => {
            if e.payload_type != IN_TOTO {
                return Err(format!("the bundle's payload type is {:?}", e.payload_type));
            }
            let [s] = <[EnvelopeSignature; 1]>::try_from(e.signatures)
                .map_err(|v| format!("the bundle's envelope has {} signatures, not 1", v.len()))?;
            Content::Dsse {
                payload: b64(&e.payload, "the bundle's payload")?,
                sig: s.sig,
            }
        }
        (None, Some(m)) => {
            if m.message_digest.algorithm != "SHA2_256" {
                return Err(format!(
                    "the bundle's message digest is {:?}, not SHA2_256",
                    m.message_digest.algorithm
                ));
            }
            Content::Message {
                digest: b64(&m.message_digest.digest, "the bundle's message digest")?,
                sig: m.signature,
            }
        }
        _ => {
            return Err(
                "the bundle has not exactly one of dsseEnvelope and messageSignature".into(),
            );
        }
    };
    Ok(Parsed {
        material: b.verification_material,
        content,
    })
}

impl Content {
    /// The signature must be by one of `keys`.
    fn verify(&self, keys: &[PublicKey]) -> Result<(), String> {
        match self {
            Content::Dsse { payload, sig } => sigstore_verify(keys, &pae(IN_TOTO, payload), sig),
            Content::Message { digest, sig } => {
                let sig = b64(sig.trim(), "the bundle's signature")?;
                let good = keys.iter().any(|k| match k {
                    PublicKey::P256(_) | PublicKey::P384(_) => x509::ecdsa_prehash(k, digest, &sig),
                    PublicKey::Rsa(k) => k
                        .verify(rsa::Pkcs1v15Sign::new::<rsa::sha2::Sha256>(), digest, &sig)
                        .is_ok(),
                    // ed25519 signs the message, not its digest.
                    PublicKey::Ed25519(_) => false,
                });
                good.then_some(())
                    .ok_or_else(|| "not signed by a key the policy trusts".to_owned())
            }
        }
    }

    /// What it signs must be `want`: the statement's subject (and it must be
    /// an image signature), or the message digest.
    fn check_subject(&self, want: &Sha256Digest) -> Result<(), String> {
        let named: Vec<String> = match self {
            Content::Message { digest, .. } => vec![format!("sha256:{}", hex::encode(digest))],
            Content::Dsse { payload, .. } => statement_subjects(payload)?,
        };
        if named.iter().any(|n| n == want.as_str()) {
            return Ok(());
        }
        Err(format!(
            "it signs manifest {}, not {want}",
            named.join(", ")
        ))
    }

    /// `body` (a Rekor entry) must log this signature by `key_or_cert`.
    fn check_logged(&self, body: &[u8], key_or_cert: &[u8]) -> Result<(), String> {
        match self {
            Content::Dsse { payload, sig } => check_dsse_entry(body, key_or_cert, sig, payload),
            Content::Message { digest, sig } => check_hashedrekord(body, key_or_cert, sig, digest),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Statement {
    #[serde(rename = "_type")]
    kind: String,
    subject: Vec<Subject>,
    predicate_type: String,
}

#[derive(Debug, Deserialize)]
struct Subject {
    digest: std::collections::BTreeMap<String, String>,
}

/// The `sha256:HEX` digests an in-toto image-signature statement names.
fn statement_subjects(payload: &[u8]) -> Result<Vec<String>, String> {
    let s: Statement = serde_json::from_slice(payload)
        .map_err(|e| format!("the bundle's payload is not an in-toto statement: {e}"))?;
    if !STATEMENTS.contains(&s.kind.as_str()) {
        return Err(format!("the bundle's statement type is {:?}", s.kind));
    }
    if s.predicate_type != SIGN_PREDICATE {
        return Err(format!(
            "the bundle is an attestation ({:?}), not an image signature",
            s.predicate_type
        ));
    }
    Ok(s.subject
        .iter()
        .filter_map(|s| s.digest.get("sha256"))
        .map(|h| format!("sha256:{}", h.to_ascii_lowercase()))
        .collect())
}

impl Evidence for Parsed {
    fn has_log(&self) -> Result<(), String> {
        if self.material.tlog_entries.is_empty() {
            return Err("the bundle has no Rekor entry".into());
        }
        Ok(())
    }

    fn leaf(&self) -> Result<(Certificate, Vec<u8>), String> {
        let m = &self.material;
        let raw = match (&m.certificate, &m.x509_certificate_chain) {
            (Some(c), None) => c,
            (None, Some(chain)) => chain
                .certificates
                .first()
                .ok_or("the bundle's certificate chain is empty")?,
            _ => return Err("the bundle has no signing certificate".into()),
        };
        let der = b64(&raw.raw_bytes, "the bundle's certificate")?;
        let cert = Certificate::from_der(&der)
            .map_err(|e| format!("parsing the bundle's certificate: {e}"))?;
        Ok((cert, der))
    }

    fn intermediates(&self) -> Result<Vec<Certificate>, String> {
        let Some(chain) = &self.material.x509_certificate_chain else {
            return Ok(Vec::new());
        };
        chain
            .certificates
            .iter()
            .skip(1)
            .map(|c| {
                let der = b64(&c.raw_bytes, "the bundle's certificate chain")?;
                Certificate::from_der(&der)
                    .map_err(|e| format!("loading the bundle's certificate chain: {e}"))
            })
            .collect()
    }

    fn logged(&self, keys: &[PublicKey], key_or_cert: &[u8]) -> Result<i64, String> {
        let mut why = Vec::new();
        for e in &self.material.tlog_entries {
            let Some(p) = &e.inclusion_promise else {
                why.push("a Rekor entry without a SET (inclusion promise)".to_owned());
                continue;
            };
            let promise = Promise {
                signed_entry_timestamp: &p.signed_entry_timestamp,
                body: &e.canonicalized_body,
                integrated_time: e.integrated_time.get("integratedTime")?,
                log_index: e.log_index.get("logIndex")?,
                log_id: hex::encode(b64(&e.log_id.key_id, "logId")?),
            };
            match promise
                .verify(keys)
                .and_then(|body| self.content.check_logged(&body, key_or_cert))
            {
                Ok(()) => return Ok(promise.integrated_time),
                Err(e) => why.push(e),
            }
        }
        if why.is_empty() {
            return Err("the bundle has no Rekor entry".into());
        }
        Err(why.join(", "))
    }
}

/// A bundle names only the manifest digest, never an image: it satisfies
/// the default `matchRepoDigestOrExact` of an image pinned by that digest
/// (what the user named is then exactly what it signs), and nothing else.
fn check_identity(identity: &Identity, image: &ImageRef) -> Result<(), String> {
    match (identity, &image.digest) {
        (Identity::MatchRepoDigestOrExact, Some(_)) => Ok(()),
        _ => Err(format!(
            "a cosign bundle names no image, only its digest: it counts only for an image \
             pinned by digest under matchRepoDigestOrExact, not for {image} under {identity}"
        )),
    }
}

/// Who made bundle `b`, if it satisfies a `sigstoreSigned` requirement for
/// `image`; or why it does not.
#[allow(clippy::too_many_arguments)]
pub(super) fn accepted(
    signer: &Signer,
    rekor: Option<&Rekor>,
    source: &str,
    identity: &Identity,
    image: &ImageRef,
    b: &Bundled,
    now: u64,
) -> Result<String, String> {
    let bundle = parse(&b.bytes)?;
    let (keys, who) = signer_keys(signer, rekor, source, &bundle, now)?;
    bundle.content.verify(&keys)?;
    bundle.content.check_subject(&b.digest)?;
    check_identity(identity, image)?;
    Ok(format!("{who}, cosign bundle {}", digest::sha256(&b.bytes)))
}

/// `accepted` for one bundle given as its bytes: the entry point of the fuzz
/// target of bundle, certificate and Rekor entry parsing.
#[allow(clippy::too_many_arguments)]
pub fn verify_bundle(
    signer: &Signer,
    rekor: Option<&Rekor>,
    identity: &Identity,
    image: &ImageRef,
    digest: &Sha256Digest,
    bytes: Vec<u8>,
    now: u64,
) -> Result<String, String> {
    let b = Bundled {
        digest: digest.clone(),
        bytes,
    };
    accepted(signer, rekor, "fuzz", identity, image, &b, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::rekor::testing::test_key;
    use base64::Engine as _;
    use p256::ecdsa::signature::Signer as _;
    use serde_json::json;

    fn b64e(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    const HEX: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    fn digest(hex: &str) -> Sha256Digest {
        Sha256Digest::parse(&format!("sha256:{hex}")).unwrap()
    }

    fn statement(hex: &str, predicate: &str) -> Vec<u8> {
        json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": hex}}],
            "predicateType": predicate,
            "predicate": {},
        })
        .to_string()
        .into_bytes()
    }

    fn sign(sk: &p256::ecdsa::SigningKey, msg: &[u8]) -> String {
        let sig: p256::ecdsa::Signature = sk.sign(msg);
        b64e(sig.to_der().as_bytes())
    }

    /// A v0.3 bundle of a DSSE envelope over `payload`, signed by `sk`, with
    /// `material` as its verificationMaterial.
    fn dsse(sk: &p256::ecdsa::SigningKey, payload: &[u8], material: serde_json::Value) -> Vec<u8> {
        json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": material,
            "dsseEnvelope": {
                "payload": b64e(payload),
                "payloadType": IN_TOTO,
                "signatures": [{"sig": sign(sk, &pae(IN_TOTO, payload)), "keyid": ""}],
            },
        })
        .to_string()
        .into_bytes()
    }

    fn keys(sk: &p256::ecdsa::SigningKey) -> Signer {
        Signer::Keys(vec![PublicKey::P256(*sk.verifying_key())])
    }

    fn check(
        signer: &Signer,
        rekor: Option<&Rekor>,
        image: &str,
        bytes: Vec<u8>,
    ) -> Result<String, String> {
        let image = ImageRef::parse(image).unwrap();
        let b = Bundled {
            digest: digest(HEX),
            bytes,
        };
        accepted(
            signer,
            rekor,
            "k",
            &Identity::MatchRepoDigestOrExact,
            &image,
            &b,
            0,
        )
    }

    fn pinned() -> String {
        format!("reg.test/ns/img@sha256:{HEX}")
    }

    /// DSSE's own example (secure-systems-lab/dsse, protocol.md).
    #[test]
    fn pre_authentication_encoding() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }

    #[test]
    fn dsse_bundles_by_key() {
        let sk = test_key(1);
        let hint = json!({"publicKey": {"hint": ""}});
        let good = dsse(&sk, &statement(HEX, SIGN_PREDICATE), hint.clone());
        let who = check(&keys(&sk), None, &pinned(), good.clone()).unwrap();
        assert!(
            who.starts_with("sigstore k, cosign bundle sha256:"),
            "{who}"
        );
        for (signer, image, bytes, why) in [
            (
                keys(&test_key(2)),
                pinned(),
                good.clone(),
                "not signed by a key the policy trusts",
            ),
            (
                keys(&sk),
                pinned(),
                dsse(&sk, &statement(OTHER, SIGN_PREDICATE), hint.clone()),
                "it signs manifest sha256:2222",
            ),
            (
                keys(&sk),
                pinned(),
                dsse(
                    &sk,
                    &statement(HEX, "https://slsa.dev/provenance/v1"),
                    hint.clone(),
                ),
                "an attestation",
            ),
            (
                keys(&sk),
                "reg.test/ns/img:v1".into(),
                good.clone(),
                "names no image",
            ),
            (
                keys(&sk),
                pinned(),
                b"{".to_vec(),
                "the bundle is not valid",
            ),
            (
                keys(&sk),
                pinned(),
                good[..good.len() - 1].to_vec(),
                "the bundle is not valid",
            ),
        ] {
            let e = check(&signer, None, &image, bytes).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // Other identities need an image the bundle does not name.
        let image = ImageRef::parse(&pinned()).unwrap();
        let b = Bundled {
            digest: digest(HEX),
            bytes: good,
        };
        let e = accepted(
            &keys(&sk),
            None,
            "k",
            &Identity::MatchRepository,
            &image,
            &b,
            0,
        )
        .unwrap_err();
        assert!(e.contains("not for reg.test/ns/img@sha256:1111"), "{e}");
    }

    /// Structure: exactly one content, one envelope signature, the in-toto
    /// payload type, a bundle media type.
    #[test]
    fn malformed_bundles() {
        let sk = test_key(1);
        let good: serde_json::Value =
            serde_json::from_slice(&dsse(&sk, &statement(HEX, SIGN_PREDICATE), json!({}))).unwrap();
        type Edit = fn(&mut serde_json::Value);
        let edits: [(Edit, &str); 6] = [
            (|b| b["mediaType"] = json!("application/json"), "media type"),
            (
                |b| {
                    b.as_object_mut().unwrap().remove("dsseEnvelope");
                },
                "not exactly one",
            ),
            (
                |b| b["messageSignature"] = json!({"messageDigest": {"algorithm": "SHA2_256", "digest": ""}, "signature": ""}),
                "not exactly one",
            ),
            (
                |b| {
                    let s = b["dsseEnvelope"]["signatures"][0].clone();
                    b["dsseEnvelope"]["signatures"] = json!([s.clone(), s]);
                },
                "2 signatures, not 1",
            ),
            (
                |b| b["dsseEnvelope"]["payloadType"] = json!("text/plain"),
                "payload type",
            ),
            (|b| b["dsseEnvelope"]["payload"] = json!("!"), "not base64"),
        ];
        for (edit, why) in edits {
            let mut b = good.clone();
            edit(&mut b);
            let e = check(&keys(&sk), None, &pinned(), b.to_string().into_bytes()).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    /// A message signature signs the manifest's digest itself.
    #[test]
    fn message_signature_bundles() {
        use p256::ecdsa::signature::hazmat::PrehashSigner as _;
        let sk = test_key(1);
        let bundle = |hex: &str| {
            let d = hex::decode(hex).unwrap();
            let sig: p256::ecdsa::Signature = sk.sign_prehash(&d).unwrap();
            json!({
                "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.2",
                "verificationMaterial": {"publicKey": {"hint": "x"}},
                "messageSignature": {
                    "messageDigest": {"algorithm": "SHA2_256", "digest": b64e(&d)},
                    "signature": b64e(sig.to_der().as_bytes()),
                },
            })
            .to_string()
            .into_bytes()
        };
        check(&keys(&sk), None, &pinned(), bundle(HEX)).unwrap();
        let e = check(&keys(&sk), None, &pinned(), bundle(OTHER)).unwrap_err();
        assert!(e.contains("it signs manifest sha256:2222"), "{e}");
        let e = check(&keys(&test_key(2)), None, &pinned(), bundle(HEX)).unwrap_err();
        assert!(e.contains("not signed by a key"), "{e}");
    }

    /// Keys with Rekor: a tlog entry of kind `dsse` whose SET is by the
    /// policy's Rekor key and which logs this signature by this key.
    #[test]
    fn rekor_entries_of_bundles() {
        use p256::pkcs8::EncodePublicKey as _;
        let (sk, rk) = (test_key(1), test_key(6));
        let payload = statement(HEX, SIGN_PREDICATE);
        let sig = sign(&sk, &pae(IN_TOTO, &payload));
        let pem = sk
            .verifying_key()
            .to_public_key_pem(Default::default())
            .unwrap();
        let entry = |sig: &str, pem: &str, payload: &[u8]| {
            use sha2::Digest as _;
            json!({"apiVersion": "0.0.1", "kind": "dsse", "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": "00"},
                "payloadHash": {"algorithm": "sha256", "value": hex::encode(sha2::Sha256::digest(payload))},
                "signatures": [{"signature": sig, "verifier": b64e(pem.as_bytes())}],
            }})
        };
        let tlog = |by: &p256::ecdsa::SigningKey, body: serde_json::Value| {
            let body = b64e(body.to_string().as_bytes());
            let canonical =
                format!(r#"{{"body":"{body}","integratedTime":5,"logID":"0102","logIndex":7}}"#);
            json!({"tlogEntries": [{
                "logIndex": "7", "logId": {"keyId": b64e(&[1, 2])},
                "kindVersion": {"kind": "dsse", "version": "0.0.1"}, "integratedTime": "5",
                "inclusionPromise": {"signedEntryTimestamp": sign(by, canonical.as_bytes())},
                "canonicalizedBody": body,
            }]})
        };
        let rekor = Rekor {
            keys: vec![PublicKey::P256(*rk.verifying_key())],
            source: "rekor.pub".into(),
        };
        let good = entry(&sig, &pem, &payload);
        let who = check(
            &keys(&sk),
            Some(&rekor),
            &pinned(),
            dsse(&sk, &payload, tlog(&rk, good.clone())),
        );
        assert!(
            who.unwrap()
                .starts_with("sigstore k, in Rekor, cosign bundle")
        );
        let other_pem = test_key(3)
            .verifying_key()
            .to_public_key_pem(Default::default())
            .unwrap();
        for (material, why) in [
            (tlog(&test_key(7), good), "verification of Rekor SET failed"),
            (
                tlog(&rk, entry(&sig, &other_pem, &payload)),
                "does not match",
            ),
            (
                tlog(&rk, entry(&sign(&sk, b"x"), &pem, &payload)),
                "does not match",
            ),
            (
                tlog(&rk, entry(&sig, &pem, b"another payload")),
                "payload in Rekor entry does not match",
            ),
            (json!({}), "no Rekor entry"),
        ] {
            let e = check(
                &keys(&sk),
                Some(&rekor),
                &pinned(),
                dsse(&sk, &payload, material),
            )
            .unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn referrers_indexes_and_manifests() {
        let entry = |t: &str| {
            json!({"mediaType": crate::manifest::OCI_MANIFEST, "artifactType": t,
            "digest": format!("sha256:{HEX}"), "size": 9})
        };
        let index = |m: serde_json::Value| {
            json!({"schemaVersion": 2, "mediaType": crate::manifest::OCI_INDEX, "manifests": m})
                .to_string()
        };
        let found = bundle_referrers(
            index(json!([
                entry("application/vnd.dev.sigstore.bundle.v0.3+json"),
                entry("application/spdx+json"),
                entry("application/vnd.dev.sigstore.bundle+json;version=0.1")
            ]))
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(found.len(), 2);
        let many = index(json!(vec![entry(BUNDLE_V03); 100]));
        assert_eq!(
            bundle_referrers(many.as_bytes()).unwrap().len(),
            MAX_SIGNATURES
        );
        for bad in [
            json!({"schemaVersion": 2, "mediaType": crate::manifest::OCI_MANIFEST, "manifests": []}).to_string(),
            json!({"schemaVersion": 1, "manifests": []}).to_string(),
            json!({"schemaVersion": 2, "layers": []}).to_string(),
            "[]".into(),
        ] {
            assert!(bundle_referrers(bad.as_bytes()).is_err(), "{bad}");
        }
        let referrer = |subject: &str| {
            json!({"schemaVersion": 2, "artifactType": BUNDLE_V03,
                "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": format!("sha256:{OTHER}"), "size": 2},
                "layers": [{"mediaType": BUNDLE_V03, "digest": format!("sha256:{OTHER}"), "size": 5}],
                "subject": {"mediaType": crate::manifest::OCI_MANIFEST, "digest": format!("sha256:{subject}"), "size": 3}})
            .to_string()
        };
        let layer = bundle_layer(referrer(HEX).as_bytes(), &digest(HEX))
            .unwrap()
            .unwrap();
        assert_eq!((layer.digest, layer.size), (digest(OTHER), 5));
        let e = bundle_layer(referrer(OTHER).as_bytes(), &digest(HEX)).unwrap_err();
        assert!(e.contains("its subject is sha256:2222"), "{e}");
    }

    const BUNDLE_V03: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
}
