//! The Rekor signed entry timestamp (SET) of a sigstore signature, checked
//! offline as containers/image's `VerifyRekorSET`
//! (signature/internal/rekor_set.go): the SET is signed by one of the
//! policy's Rekor keys over the canonical JSON (RFC 8785) of its payload, and
//! the `hashedrekord` entry it logs names this signature, this payload and
//! this key or certificate. Its integrated time is when the entry was logged.

use base64::Engine as _;
use serde::Deserialize;
use sha2::Digest as _;

use super::x509::ecdsa_prehash;
use crate::plan::policy::PublicKey;

/// The annotation: `{"SignedEntryTimestamp": BASE64, "Payload": {…}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Set {
    #[serde(rename = "SignedEntryTimestamp")]
    signed_entry_timestamp: String,
    #[serde(rename = "Payload")]
    payload: SetPayload,
}

/// Exactly these fields, as containers/image's `UntrustedRekorPayload`.
/// Numbers must be integers (Rekor writes them so): their canonical form is
/// then their decimal digits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPayload {
    body: String,
    #[serde(rename = "integratedTime")]
    integrated_time: i64,
    #[serde(rename = "logIndex")]
    log_index: i64,
    #[serde(rename = "logID")]
    log_id: String,
}

impl SetPayload {
    /// RFC 8785: members sorted by name, no white space, strings as
    /// serde_json writes them (the same escapes: `\"`, `\\`, `\b`, `\f`,
    /// `\n`, `\r`, `\t`, other controls as lowercase `\u00xx`).
    fn canonical(&self) -> String {
        let s = |v: &str| serde_json::Value::from(v).to_string();
        format!(
            r#"{{"body":{},"integratedTime":{},"logID":{},"logIndex":{}}}"#,
            s(&self.body),
            self.integrated_time,
            s(&self.log_id),
            self.log_index
        )
    }
}

#[derive(Debug, Deserialize)]
struct HashedRekord {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    spec: Spec,
}

#[derive(Debug, Deserialize)]
struct Spec {
    data: Data,
    signature: Signature,
}

#[derive(Debug, Deserialize)]
struct Data {
    hash: Hash,
}

#[derive(Debug, Deserialize)]
struct Hash {
    algorithm: String,
    value: String,
}

#[derive(Debug, Deserialize)]
struct Signature {
    content: String,
    #[serde(rename = "publicKey")]
    public_key: Content,
}

#[derive(Debug, Deserialize)]
struct Content {
    content: String,
}

/// Go's `base64.StdEncoding`, which skips line breaks (cosign wraps long
/// signatures).
pub(super) fn b64(s: &str, what: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("{what} is not base64: {e}"))
}

/// One PEM block and nothing after it; its DER.
pub(super) fn pem_der(bytes: &[u8], what: &str) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{what} is not in PEM format"))?;
    if text.matches("-----BEGIN ").count() > 1 {
        return Err(format!("{what} has trailing data"));
    }
    let (_, der) = x509_cert::der::pem::decode_vec(text.trim_end_matches('\n').as_bytes())
        .map_err(|e| format!("{what} is not one PEM block: {e}"))?;
    Ok(der)
}

/// Checks `set` (the `dev.sigstore.cosign/bundle` annotation) against the
/// Rekor keys and what it must log: the signing key or certificate (its
/// DER), the base64 signature and the payload. Returns the integrated time
/// (seconds since the epoch).
pub(super) fn verify_set(
    keys: &[PublicKey],
    set: &str,
    key_or_cert: &[u8],
    signature_b64: &str,
    payload: &[u8],
) -> Result<i64, String> {
    let set: Set = serde_json::from_str(set).map_err(|e| format!("invalid Rekor SET: {e}"))?;
    let body = verify_promise(keys, &set.signed_entry_timestamp, &set.payload)?;
    let hash = sha2::Sha256::digest(payload);
    check_hashedrekord(&body, key_or_cert, signature_b64, &hash)?;
    Ok(set.payload.integrated_time)
}

/// The entry a SET promises to log, as a bundle's `tlogEntries` carry it.
#[derive(Debug)]
pub(super) struct Promise<'a> {
    /// The base64 SET.
    pub(super) signed_entry_timestamp: &'a str,
    /// The base64 entry.
    pub(super) body: &'a str,
    pub(super) integrated_time: i64,
    pub(super) log_index: i64,
    /// The log's key ID, in hex.
    pub(super) log_id: String,
}

impl Promise<'_> {
    /// Checks the SET against the Rekor keys; the logged entry, decoded.
    pub(super) fn verify(&self, keys: &[PublicKey]) -> Result<Vec<u8>, String> {
        let p = SetPayload {
            body: self.body.to_owned(),
            integrated_time: self.integrated_time,
            log_index: self.log_index,
            log_id: self.log_id.clone(),
        };
        verify_promise(keys, self.signed_entry_timestamp, &p)
    }
}

/// The SET `set_b64` must be signed by one of `keys` over the canonical
/// `payload`; its body, decoded.
fn verify_promise(keys: &[PublicKey], set_b64: &str, p: &SetPayload) -> Result<Vec<u8>, String> {
    let sig = b64(set_b64, "SignedEntryTimestamp")?;
    let hash = sha2::Sha256::digest(p.canonical().as_bytes());
    if !keys.iter().any(|k| ecdsa_prehash(k, &hash, &sig)) {
        return Err("cryptographic signature verification of Rekor SET failed".into());
    }
    b64(&p.body, "the Rekor SET payload's body")
}

/// `body` must be a `hashedrekord` 0.0.1 entry of this signature by this key
/// or certificate, over a payload whose SHA-256 is `hash`.
pub(super) fn check_hashedrekord(
    body: &[u8],
    key_or_cert: &[u8],
    signature_b64: &str,
    hash: &[u8],
) -> Result<(), String> {
    let entry: HashedRekord = serde_json::from_slice(body)
        .map_err(|e| format!("decoding the body of a Rekor SET payload: {e}"))?;
    if entry.kind != "hashedrekord" {
        return Err(format!("invalid kind value: {:?}", entry.kind));
    }
    if entry.api_version != "0.0.1" {
        return Err(format!(
            "unsupported Rekor SET Payload hashedrekord version {:?}",
            entry.api_version
        ));
    }
    let logged = b64(&entry.spec.signature.public_key.content, "publicKey")?;
    let logged = pem_der(&logged, "publicKey in Rekor SET")?;
    if logged != key_or_cert {
        return Err("publicKey in Rekor SET does not match".into());
    }
    let ours = b64(signature_b64.trim(), "the signature")?;
    if b64(&entry.spec.signature.content, "signature.content")? != ours {
        return Err("signature in Rekor SET does not match".into());
    }
    if entry.spec.data.hash.algorithm != "sha256" {
        return Err(format!(
            "unexpected \"data.hash.algorithm\" value {:?}",
            entry.spec.data.hash.algorithm
        ));
    }
    let logged = hex::decode(&entry.spec.data.hash.value)
        .map_err(|e| format!("invalid \"data.hash.value\" field in hashedrekord: {e}"))?;
    if logged != hash {
        return Err("payload in Rekor SET does not match".into());
    }
    Ok(())
}

/// Rekor's `dsse` 0.0.1 entry (types/dsse/v0.0.1): the payload's hash and
/// each signature with its verifier (a base64 PEM key or certificate).
#[derive(Debug, Deserialize)]
struct DsseEntry {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    spec: DsseSpec,
}

#[derive(Debug, Deserialize)]
struct DsseSpec {
    #[serde(rename = "payloadHash")]
    payload_hash: Hash,
    signatures: Vec<DsseSignature>,
}

#[derive(Debug, Deserialize)]
struct DsseSignature {
    signature: String,
    verifier: String,
}

/// `body` must be a `dsse` 0.0.1 entry of an envelope whose payload is
/// `payload`, holding this signature by this key or certificate.
pub(super) fn check_dsse_entry(
    body: &[u8],
    key_or_cert: &[u8],
    signature_b64: &str,
    payload: &[u8],
) -> Result<(), String> {
    let entry: DsseEntry = serde_json::from_slice(body)
        .map_err(|e| format!("decoding the body of a Rekor dsse entry: {e}"))?;
    if entry.kind != "dsse" || entry.api_version != "0.0.1" {
        return Err(format!(
            "unsupported Rekor entry {:?} version {:?}",
            entry.kind, entry.api_version
        ));
    }
    let h = &entry.spec.payload_hash;
    if h.algorithm != "sha256"
        || !h
            .value
            .eq_ignore_ascii_case(&hex::encode(sha2::Sha256::digest(payload)))
    {
        return Err("payload in Rekor entry does not match".into());
    }
    let ours = b64(signature_b64.trim(), "the signature")?;
    let logged = entry.spec.signatures.iter().any(|s| {
        b64(&s.signature, "signature").is_ok_and(|sig| sig == ours)
            && b64(&s.verifier, "verifier")
                .and_then(|pem| pem_der(&pem, "verifier"))
                .is_ok_and(|der| der == key_or_cert)
    });
    if logged {
        Ok(())
    } else {
        Err("signature or key in Rekor entry does not match".into())
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn rekor_key() -> PublicKey {
        PublicKey::from_pem(std::str::from_utf8(&fixture("rekor.pub")).unwrap()).unwrap()
    }

    /// signature/internal/rekor_set_test.go, TestVerifyRekorSET, with its
    /// recorded SET (testdata/rekor-*).
    #[test]
    fn upstream_verify_rekor_set() {
        let set = String::from_utf8(fixture("rekor-set")).unwrap();
        let cert_pem = fixture("rekor-cert");
        let cert = pem_der(&cert_pem, "cert").unwrap();
        let sig = String::from_utf8(fixture("rekor-sig")).unwrap();
        let payload = fixture("rekor-payload");
        let mismatching = PublicKey::P256(*test_key(3).verifying_key());
        for keys in [
            vec![rekor_key()],
            vec![rekor_key(), mismatching.clone()],
            vec![mismatching.clone(), rekor_key()],
        ] {
            assert_eq!(
                verify_set(&keys, &set, &cert, &sig, &payload),
                Ok(1670870899)
            );
        }
        let keys = [rekor_key()];
        for bad in ["", "invalid signature"] {
            assert!(verify_set(&keys, bad, &cert, &sig, &payload).is_err());
        }
        let sk = test_key(4);
        let ours = [PublicKey::P256(*sk.verifying_key())];
        // A payload with a duplicate field.
        let dup = set_over(
            &sk,
            r#"{"logIndex":1, "integratedTime":2,"body":"abc","logID":"def","body":"ABC"}"#,
        );
        assert!(
            verify_set(&ours, &dup, &cert, &sig, &payload)
                .unwrap_err()
                .contains("duplicate field")
        );
        for keys in [
            vec![ours[0].clone()],
            vec![ours[0].clone(), mismatching.clone()],
        ] {
            let e = verify_set(&keys, &set, &cert, &sig, &payload).unwrap_err();
            assert!(e.contains("verification of Rekor SET failed"), "{e}");
        }
        assert!(verify_set(&ours, &set_over(&sk, "{}"), &cert, &sig, &payload).is_err());
        // A correctly signed entry, each way invalid.
        let valid = entry(&cert_pem, &sig, &payload);
        assert_eq!(
            verify_set(&ours, &test_set(&sk, &valid, 1), &cert, &sig, &payload),
            Ok(1)
        );
        type Edit = Box<dyn Fn(&mut serde_json::Value)>;
        let set_at = |path: &'static [&'static str], v: serde_json::Value| -> Edit {
            Box::new(move |e: &mut serde_json::Value| {
                let (last, parents) = path.split_last().unwrap();
                let mut o = e;
                for p in parents {
                    o = &mut o[*p];
                }
                o[*last] = v.clone();
            })
        };
        let delete = |path: &'static [&'static str]| -> Edit {
            Box::new(move |e: &mut serde_json::Value| {
                let (last, parents) = path.split_last().unwrap();
                let mut o = e;
                for p in parents {
                    o = &mut o[*p];
                }
                o.as_object_mut().unwrap().remove(*last);
            })
        };
        use serde_json::json;
        let sha512 = {
            use sha2::Digest as _;
            hex::encode(sha2::Sha512::digest(&payload))
        };
        let other_pem = {
            use p256::pkcs8::EncodePublicKey as _;
            test_key(5)
                .verifying_key()
                .to_public_key_pem(Default::default())
                .unwrap()
        };
        let edits: Vec<Edit> = vec![
            delete(&["apiVersion"]),
            delete(&["kind"]),
            delete(&["spec"]),
            set_at(&["apiVersion"], json!(null)),
            set_at(&["apiVersion"], json!(1)),
            set_at(&["apiVersion"], json!({})),
            set_at(&["apiVersion"], json!("99.0.99")),
            set_at(&["kind"], json!(null)),
            set_at(&["kind"], json!(1)),
            set_at(&["kind"], json!("notHashedRekord")),
            set_at(&["spec"], json!(null)),
            set_at(&["spec"], json!(1)),
            delete(&["spec", "data"]),
            delete(&["spec", "signature"]),
            set_at(&["spec", "data"], json!(null)),
            set_at(&["spec", "data"], json!(1)),
            delete(&["spec", "data", "hash"]),
            set_at(&["spec", "data", "hash"], json!(null)),
            set_at(&["spec", "data", "hash"], json!(1)),
            delete(&["spec", "data", "hash", "algorithm"]),
            delete(&["spec", "data", "hash", "value"]),
            set_at(&["spec", "data", "hash", "algorithm"], json!(null)),
            set_at(&["spec", "data", "hash", "algorithm"], json!(1)),
            set_at(&["spec", "data", "hash", "value"], json!(null)),
            set_at(&["spec", "data", "hash", "value"], json!(1)),
            set_at(&["spec", "data", "hash", "value"], json!("a".repeat(63))),
            set_at(&["spec", "data", "hash", "value"], json!("a".repeat(64))),
            Box::new(move |e| {
                e["spec"]["data"]["hash"] = json!({"algorithm": "sha512", "value": sha512});
            }),
            set_at(&["spec", "signature"], json!(null)),
            set_at(&["spec", "signature"], json!(1)),
            delete(&["spec", "signature", "content"]),
            delete(&["spec", "signature", "publicKey"]),
            set_at(&["spec", "signature", "content"], json!(null)),
            set_at(&["spec", "signature", "content"], json!(1)),
            set_at(&["spec", "signature", "content"], json!("")),
            set_at(&["spec", "signature", "content"], json!("+")),
            set_at(
                &["spec", "signature", "content"],
                json!(b64e(b"does not match")),
            ),
            set_at(&["spec", "signature", "publicKey"], json!(null)),
            set_at(&["spec", "signature", "publicKey"], json!(1)),
            delete(&["spec", "signature", "publicKey", "content"]),
            set_at(&["spec", "signature", "publicKey", "content"], json!(null)),
            set_at(&["spec", "signature", "publicKey", "content"], json!(1)),
            set_at(&["spec", "signature", "publicKey", "content"], json!("")),
            set_at(&["spec", "signature", "publicKey", "content"], json!("+")),
            set_at(
                &["spec", "signature", "publicKey", "content"],
                json!(b64e(b"not PEM")),
            ),
            set_at(
                &["spec", "signature", "publicKey", "content"],
                json!(b64e(&cert_pem.repeat(2))),
            ),
            set_at(
                &["spec", "signature", "publicKey", "content"],
                json!(b64e(other_pem.as_bytes())),
            ),
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut e = valid.clone();
            edit(&mut e);
            let r = verify_set(&ours, &test_set(&sk, &e, 1), &cert, &sig, &payload);
            assert!(r.is_err(), "edit {i}: {e}");
        }
        // The signature to match, truncated; the key or certificate, not one PEM block.
        assert!(
            verify_set(
                &keys,
                &set,
                &cert,
                &sig[..sig.trim_end().len() - 1],
                &payload
            )
            .is_err()
        );
        for c in [&b""[..], b"this is not PEM", &cert_pem.repeat(2)] {
            assert!(pem_der(c, "cert").is_err(), "{c:?}");
        }
    }

    /// RFC 8785's rules as they apply to the payload's strings.
    #[test]
    fn canonical_strings() {
        let p = SetPayload {
            body: "a\"\\/\u{8}\u{c}\n\r\t\u{1}\u{7f}é€😀".into(),
            integrated_time: -1,
            log_index: 0,
            log_id: String::new(),
        };
        assert_eq!(
            p.canonical(),
            "{\"body\":\"a\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\u{7f}é€😀\",\"integratedTime\":-1,\"logID\":\"\",\"logIndex\":0}"
        );
    }
}

#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use p256::ecdsa::signature::Signer as _;

    pub(super) fn fixture(name: &str) -> Vec<u8> {
        let p = format!(
            "{}/src/signature/testdata/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    pub(super) fn b64e(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    /// A test Rekor key (fixed, so that failures repeat).
    pub(crate) fn test_key(seed: u8) -> p256::ecdsa::SigningKey {
        p256::ecdsa::SigningKey::from_slice(&[seed; 32]).unwrap()
    }

    /// A SET over `payload` (the exact bytes signed), signed by `sk`.
    pub(super) fn set_over(sk: &p256::ecdsa::SigningKey, payload: &str) -> String {
        let sig: p256::ecdsa::Signature = sk.sign(payload.as_bytes());
        format!(
            r#"{{"SignedEntryTimestamp":"{}","Payload":{payload}}}"#,
            b64e(sig.to_der().as_bytes())
        )
    }

    /// A SET logging `entry` (a hashedrekord) at `integrated_time`.
    pub(crate) fn test_set(
        sk: &p256::ecdsa::SigningKey,
        entry: &serde_json::Value,
        integrated_time: i64,
    ) -> String {
        let p = SetPayload {
            body: b64e(entry.to_string().as_bytes()),
            integrated_time,
            log_index: 2,
            log_id: "logID".into(),
        };
        set_over(sk, &p.canonical())
    }

    /// The hashedrekord of a signature by `key_or_cert` (PEM).
    pub(crate) fn entry(key_or_cert: &[u8], sig_b64: &str, payload: &[u8]) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": hex::encode(sha2::Sha256::digest(payload))}},
                "signature": {"content": sig_b64, "publicKey": {"content": b64e(key_or_cert)}},
            },
        })
    }
}
