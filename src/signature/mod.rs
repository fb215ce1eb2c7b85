//! Signature policy, enforced on root's side before anything is published.
//! skopeo 1.9.3's proxy enforces no policy and returns no signatures, and the
//! worker is untrusted anyway: it only fetches signature bytes; root verifies
//! them (gpgv for GPG simple signing, RustCrypto for sigstore keys) and checks
//! that each signs this image's manifest digest under an accepted identity.

use std::path::Path;

use serde::Serialize;

use crate::digest::Sha256Digest;
use crate::error::{Kind, fail};
use crate::imgref::ImageRef;
use crate::plan::Plan;
use crate::plan::policy::{Identity, Requirement};
use crate::sandbox::Worker;

mod bundle;
mod gpg;
mod identity;
mod rekor;
mod sigstore;
mod x509;

pub use bundle::verify_bundle;
use bundle::{Bundled, referrers};
use gpg::{gpg_verify, lookaside};
pub use identity::{ATOMIC, COSIGN, check_payload};
pub use sigstore::verify_attachment;
use sigstore::{Attached, accepted, attachments};

/// What `--json` says about signatures.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The policy scope that applied.
    pub scope: String,
    /// The requirements of that scope.
    pub requirement: String,
    /// Who signed, one entry per satisfied signature requirement:
    /// `gpg FINGERPRINT` or `sigstore KEY`.
    pub verified_by: Vec<String>,
}

/// The image's manifest digests that a signature may name: the manifest the
/// registry served for the reference (an index, for a multi-platform image)
/// and the one chosen from it.
pub async fn check(
    worker: &Worker,
    plan: &Plan,
    digests: &[Sha256Digest],
) -> anyhow::Result<Verdict> {
    let policy = &plan.policy;
    let reqs: Vec<String> = policy.requirements.iter().map(|r| r.to_string()).collect();
    let mut verdict = Verdict {
        scope: policy.scope.clone(),
        requirement: reqs.join(", "),
        verified_by: Vec::new(),
    };
    let image = &plan.image;
    let mut gpg: Option<Vec<(Sha256Digest, Vec<u8>)>> = None;
    let mut sigstore = Sigstore::default();
    for req in &policy.requirements {
        // Each signature's verdict: who signed it, or why it does not count.
        let checked: Vec<Result<String, String>> = match req {
            Requirement::InsecureAcceptAnything => continue,
            Requirement::Reject => return rejected(plan, req, "the policy rejects this image"),
            Requirement::Unsatisfiable { why, .. } => return rejected(plan, req, why),
            Requirement::SignedBy {
                keyring, identity, ..
            } => {
                let Some(base) = &policy.lookaside else {
                    return rejected(
                        plan,
                        req,
                        "no lookaside is configured for it in registries.d",
                    );
                };
                if gpg.is_none() {
                    gpg = Some(lookaside(worker, base, image, digests).await?);
                }
                let sigs = gpg.as_deref().unwrap_or_default();
                gpg_checked(worker.scratch(), image, sigs, keyring, identity).await?
            }
            Requirement::SigstoreSigned {
                signer,
                rekor,
                source,
                identity,
            } => {
                if !policy.sigstore_attachments {
                    return rejected(
                        plan,
                        req,
                        "use-sigstore-attachments is not enabled for it in registries.d",
                    );
                }
                let check = |a: Found<'_>| match a {
                    Found::Attached(a) => {
                        accepted(signer, rekor.as_ref(), source, identity, image, a, now())
                    }
                    Found::Bundled(b) => {
                        bundle::accepted(signer, rekor.as_ref(), source, identity, image, b, now())
                    }
                };
                sigstore.checked(worker, image, digests, check).await?
            }
        };
        if let Some(by) = checked.iter().find_map(|r| r.as_ref().ok()) {
            verdict.verified_by.push(by.clone());
            continue;
        }
        return rejected(plan, req, &why_none(&checked));
    }
    Ok(verdict)
}

/// The sigstore signatures of the image, fetched once for every requirement
/// that reads them: the attachments, and the bundle referrers only when no
/// attachment satisfies a requirement (an attachment-signed image costs no
/// more worker runs than before bundles were read).
#[derive(Debug, Default)]
struct Sigstore {
    attached: Option<Vec<Attached>>,
    bundled: Option<Vec<Bundled>>,
}

/// One sigstore signature, attached or a bundle.
enum Found<'a> {
    Attached(&'a Attached),
    Bundled(&'a Bundled),
}

impl Sigstore {
    /// Each signature's verdict under `check`, as far as needed: the
    /// attachments', then, if none is accepted, the bundles' too.
    async fn checked(
        &mut self,
        worker: &Worker,
        image: &ImageRef,
        digests: &[Sha256Digest],
        check: impl Fn(Found<'_>) -> Result<String, String>,
    ) -> anyhow::Result<Vec<Result<String, String>>> {
        if self.attached.is_none() {
            self.attached = Some(attachments(worker, image, digests).await?);
        }
        let attached = self.attached.as_deref().unwrap_or_default();
        let mut out: Vec<_> = attached.iter().map(|a| check(Found::Attached(a))).collect();
        if out.iter().any(Result::is_ok) {
            return Ok(out);
        }
        if self.bundled.is_none() {
            self.bundled = Some(referrers(worker, image, digests).await?);
        }
        let bundled = self.bundled.as_deref().unwrap_or_default();
        out.extend(bundled.iter().map(|b| check(Found::Bundled(b))));
        Ok(out)
    }
}

/// Each lookaside signature's verdict under `keyring`: who signed it, or why
/// it does not count.
async fn gpg_checked(
    scratch: &Path,
    image: &ImageRef,
    sigs: &[(Sha256Digest, Vec<u8>)],
    keyring: &[u8],
    identity: &Identity,
) -> anyhow::Result<Vec<Result<String, String>>> {
    let mut checked = Vec::new();
    for (d, sig) in sigs {
        let r = gpg_verify(scratch, keyring, sig).await?;
        checked.push(r.and_then(|(fpr, payload)| {
            check_payload(&payload, ATOMIC, d, image, identity)?;
            Ok(format!("gpg {fpr}"))
        }));
    }
    Ok(checked)
}

/// Seconds since the epoch, when a PKI certificate must be valid.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why no signature satisfied a requirement, from each one's verdict.
fn why_none(checked: &[Result<String, String>]) -> String {
    if checked.is_empty() {
        return "no signature found".to_owned();
    }
    let tried: Vec<&str> = checked
        .iter()
        .filter_map(|r| r.as_ref().err())
        .map(String::as_str)
        .collect();
    format!(
        "none of {} signature(s) is acceptable: {}",
        tried.len(),
        tried.join("; ")
    )
}

fn rejected<T>(plan: &Plan, req: &Requirement, why: &str) -> anyhow::Result<T> {
    fail(
        Kind::Signature,
        format!(
            "signature policy rejected {}: {req} (scope {:?} in {}): {why}",
            plan.image,
            plan.policy.scope,
            plan.policy.file.display()
        ),
    )
}
