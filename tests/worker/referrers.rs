//! Issue 23 part 3: cosign bundles attached as OCI referrers (tests/sign.sh
//! `make_bundles`: the referrers tag fallback `sha256-HEX`, since the rig's
//! docker-registry 2.8 has no referrers API), found and fetched through the
//! worker and verified on root's side under the same `sigstoreSigned`
//! requirements as attachments.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::signatures::{
    EMAIL, ISSUER, assert_rejected, file_lookaside, fulcio, pki, policy, registries_d, sigstore_key,
};
use crate::util::*;

/// `hostpull/REPO` pinned by the digest its bundles sign.
fn pinned(repo: &str) -> String {
    format!(
        "{}/hostpull/{repo}@{}",
        var("RIG_REGISTRY"),
        var("RIG_BUNDLED_DIGEST")
    )
}

/// Pull `image` into `dir/out` (tag `v1`) under `reqs`, with attachments
/// enabled or not.
fn pull_under(dir: &Path, image: &str, reqs: Value, attachments: bool) -> (Run, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let rd = registries_d(dir, &file_lookaside(), attachments);
    let out = dir.join("out");
    let mut c = with_rig_creds(pull_cmd(image, &oci_tag(&out, "v1")));
    c.arg("--policy")
        .arg(policy(dir, reqs))
        .arg("--registries.d")
        .arg(rd);
    (run(&mut c), out)
}

/// An image whose only signature is a bundle referrer pulls under a policy
/// that requires a sigstore signature: by key, by Fulcio certificate with its
/// Rekor entry, by PKI.
#[test]
fn bundle_referrers_satisfy_sigstore_signed() {
    let s = scratch();
    let root = "fulcio-root.crt";
    let cases = [
        (
            "bundled",
            sigstore_key("cosign.pub"),
            format!("sigstore {}/cosign.pub", var("RIG_SIG_DIR")),
        ),
        (
            "bundled-keyless",
            fulcio(root, ISSUER, EMAIL, "rekor.pub"),
            format!("sigstore fulcio {EMAIL} from {ISSUER}, in Rekor at 20"),
        ),
        (
            "bundled-keyless",
            pki(root, json!({"subjectEmail": EMAIL})),
            format!("sigstore pki {EMAIL}"),
        ),
    ];
    for (i, (repo, reqs, by)) in cases.into_iter().enumerate() {
        let (r, out) = pull_under(&s.path().join(i.to_string()), &pinned(repo), reqs, true);
        let j = r.json();
        let got = j["signature"]["verified_by"][0].as_str().unwrap();
        assert!(got.starts_with(&by), "{repo}: {got}");
        assert!(got.contains(", cosign bundle sha256:"), "{got}");
        assert_eq!(j["manifest_digest"], var("RIG_BUNDLED_DIGEST"), "{j}");
        assert!(out.join("index.json").is_file(), "{repo}");
    }
}

/// Bundles that do not satisfy the requirement: exit 9, the reason, nothing
/// published.
#[test]
fn bundle_referrers_rejected() {
    let s = scratch();
    let root = "fulcio-root.crt";
    let other = registry_digest(var("RIG_IMG_SMALL2"));
    let cases = [
        (
            pinned("bundled"),
            sigstore_key("other-cosign.pub"),
            true,
            "not signed by a key the policy trusts".to_owned(),
        ),
        (
            pinned("bundled-other"),
            sigstore_key("cosign.pub"),
            true,
            format!(
                "it signs manifest {other}, not {}",
                var("RIG_BUNDLED_DIGEST")
            ),
        ),
        // The certificate's chain does not reach the policy's root.
        (
            pinned("bundled-keyless"),
            pki("other-root.crt", json!({"subjectEmail": EMAIL})),
            true,
            "certificate signed by unknown authority".into(),
        ),
        (
            pinned("bundled-keyless"),
            fulcio(root, ISSUER, EMAIL, "other-rekor.pub"),
            true,
            "verification of Rekor SET failed".into(),
        ),
        // A bundle names no image: a tag pull is not bound to it.
        (
            format!("{}/hostpull/bundled:v1", var("RIG_REGISTRY")),
            sigstore_key("cosign.pub"),
            true,
            "a cosign bundle names no image, only its digest".into(),
        ),
        (
            pinned("bundled"),
            sigstore_key("cosign.pub"),
            false,
            "use-sigstore-attachments is not enabled".into(),
        ),
        (
            pinned("bundled-junk-bundle"),
            sigstore_key("cosign.pub"),
            true,
            "the bundle is not valid".into(),
        ),
    ];
    for (i, (image, reqs, attachments, why)) in cases.into_iter().enumerate() {
        let (r, out) = pull_under(&s.path().join(i.to_string()), &image, reqs, attachments);
        assert_rejected(&r, &out, "sigstoreSigned", &why);
    }
}

/// A referrers index or bundle that is malformed or too large: one `error:`
/// line, its exit code, nothing published. (An index over 4 MiB, which
/// docker-registry 2.8.2 does not take: hostile::huge_referrers_index_is_refused.)
#[test]
fn bundle_referrer_faults() {
    let s = scratch();
    let cases = [
        ("bundled-huge-bundle", 7, "is larger than 4 MiB"),
        ("bundled-not-index", 9, "is not valid"),
    ];
    for (i, (repo, code, why)) in cases.into_iter().enumerate() {
        let d = s.path().join(i.to_string());
        let (r, out) = pull_under(&d, &pinned(repo), sigstore_key("cosign.pub"), true);
        r.assert_failure(code);
        let first = r.stderr.lines().next().unwrap_or_default();
        assert!(first.contains(why), "{repo}: {}", r.stderr);
        assert!(
            !out.exists(),
            "{repo}: a failed pull created {}",
            out.display()
        );
    }
}
