//! Sigstore (cosign) attachments: fetched through the worker, verified here.

use base64::Engine as _;
use serde::Deserialize;

use super::gpg::MAX_SIGNATURES;
use crate::digest::{self, Sha256Digest};
use crate::error::{Failure, Kind, failure};
use crate::manifest::{Descriptor, MANIFEST_MAX};
use crate::plan::imgref::ImageRef;
use crate::plan::policy::PublicKey;
use crate::sandbox::Worker;

/// A sigstore attachment layer: its blob is the payload, its annotation the signature.
const COSIGN_PAYLOAD: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const COSIGN_SIGNATURE: &str = "dev.cosignproject.cosign/signature";

/// One sigstore signature: the payload and its base64 signature.
#[derive(Debug)]
pub(super) struct Attached {
    pub(super) digest: Sha256Digest,
    pub(super) payload: Vec<u8>,
    pub(super) signature: String,
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
        let payloads = worker
            .proxy_session()?
            .fetch_small(&pinned, &layers)
            .await?;
        for (l, payload) in layers.into_iter().zip(payloads) {
            out.push(Attached {
                digest: d.clone(),
                payload,
                signature: l
                    .annotations
                    .get(COSIGN_SIGNATURE)
                    .cloned()
                    .unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

/// A cosign signature over the payload bytes: ECDSA P-256 with SHA-256 in
/// ASN.1 DER, or ed25519; any of the policy's keys may have made it.
pub fn sigstore_verify(keys: &[PublicKey], payload: &[u8], signature: &str) -> Result<(), String> {
    use p256::ecdsa::signature::Verifier as _;
    let sig = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .map_err(|_| format!("annotation {COSIGN_SIGNATURE} is missing or not base64"))?;
    let good = keys.iter().any(|k| match k {
        PublicKey::P256(k) => {
            p256::ecdsa::DerSignature::from_bytes(&sig).is_ok_and(|s| k.verify(payload, &s).is_ok())
        }
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
