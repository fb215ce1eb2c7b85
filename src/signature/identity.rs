//! The simple-signing payload and `signedIdentity`, as containers/image checks them.

use serde::Deserialize;

use crate::digest::Sha256Digest;
use crate::imgref::ImageRef;
use crate::plan::policy::Identity;

/// `critical.type` of GPG simple signing and of sigstore payloads.
pub const ATOMIC: &str = "atomic container signature";
/// The `critical.type` of a sigstore (cosign) signature payload.
pub const COSIGN: &str = "cosign container image signature";

/// The simple-signing payload (GPG and sigstore alike). Unknown fields in
/// `critical` make it invalid, as in containers/image.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    critical: Critical,
    #[serde(default)]
    #[allow(dead_code)]
    optional: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Critical {
    #[serde(rename = "type")]
    kind: String,
    image: PayloadImage,
    identity: PayloadIdentity,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PayloadImage {
    docker_manifest_digest: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PayloadIdentity {
    docker_reference: String,
}

/// A verified payload must be of `kind`, name `digest`, and carry an identity
/// that `rule` accepts for `image`.
pub fn check_payload(
    bytes: &[u8],
    kind: &str,
    digest: &Sha256Digest,
    image: &ImageRef,
    rule: &Identity,
) -> Result<(), String> {
    let p: Payload = serde_json::from_slice(bytes)
        .map_err(|e| format!("the signed payload is not a signature payload: {e}"))?;
    let c = p.critical;
    if c.kind != kind {
        return Err(format!("the payload's type is {:?}, not {kind:?}", c.kind));
    }
    if c.image.docker_manifest_digest != digest.as_str() {
        return Err(format!(
            "it signs manifest {}, not {digest}",
            c.image.docker_manifest_digest
        ));
    }
    let signed = &c.identity.docker_reference;
    if identity_matches(rule, image, signed) {
        Ok(())
    } else {
        Err(format!(
            "its identity {signed:?} does not match {image} ({rule})"
        ))
    }
}

/// A signature's `docker-reference`, and whether it named a tag or digest.
/// A bare reference, as Go's `reference.ParseNormalizedNamed` takes it: no
/// `docker://` (which hostpull's command line accepts).
fn parse_identity(s: &str) -> Option<(ImageRef, bool)> {
    if s.contains("://") {
        return None;
    }
    let r = ImageRef::parse(s).ok()?;
    let last = s.rsplit('/').next().unwrap_or(s);
    let name_only = !last.contains([':', '@']);
    Some((r, !name_only))
}

/// containers-policy.json(5) `signedIdentity`, as containers/image's
/// signature/policy_reference_match.go.
fn identity_matches(rule: &Identity, image: &ImageRef, signed: &str) -> bool {
    let Some((sig, tagged)) = parse_identity(signed) else {
        return false;
    };
    let same_repo = |r: &ImageRef| sig.repository() == r.repository();
    // matchRepoDigestOrExactReferenceValues: a tag needs the same reference, a
    // digest the same repository; a signature naming only a repository is
    // never enough.
    let repo_digest_or_exact = |r: &ImageRef| {
        tagged
            && if r.digest.is_some() {
                same_repo(r)
            } else {
                sig == *r
            }
    };
    match rule {
        Identity::MatchExact => tagged && sig == *image,
        Identity::MatchRepoDigestOrExact => repo_digest_or_exact(image),
        Identity::MatchRepository => same_repo(image),
        Identity::ExactReference { docker_reference } => {
            parse_identity(docker_reference).is_some_and(|(r, t)| t && tagged && r == sig)
        }
        Identity::ExactRepository { docker_repository } => {
            ImageRef::parse(docker_repository).is_ok_and(|r| same_repo(&r))
        }
        Identity::RemapIdentity {
            prefix,
            signed_prefix,
        } => remap(image, prefix, signed_prefix).is_some_and(|r| repo_digest_or_exact(&r)),
    }
}

/// remapIdentity's rewrite: an image whose repository is `prefix` or below
/// it, with `prefix` replaced by `signed_prefix`; the result must be a fully
/// qualified reference (None if not, which matches nothing). Other images
/// are unchanged.
fn remap(image: &ImageRef, prefix: &str, signed_prefix: &str) -> Option<ImageRef> {
    let name = image.repository();
    let rest = match name.strip_prefix(prefix) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => return Some(image.clone()),
    };
    let new_name = format!("{signed_prefix}{rest}");
    let full = image.to_string().replacen(prefix, signed_prefix, 1);
    ImageRef::parse(&full)
        .ok()
        .filter(|r| r.repository() == new_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    const D: &str = "sha256:e4ef000de7bdca22fa2c13eb97e38f6ca618ca3529e2ac1a97223828dc385707";

    #[test]
    fn identities() {
        use Identity::*;
        let exact_ref = |s: &str| ExactReference {
            docker_reference: s.into(),
        };
        let exact_repo = |s: &str| ExactRepository {
            docker_repository: s.into(),
        };
        let by_digest = format!("q.io/ns/app@{D}");
        for (rule, image, signed, want) in [
            (
                MatchRepoDigestOrExact,
                "q.io/ns/app:v1",
                "q.io/ns/app:v1",
                true,
            ),
            (
                MatchRepoDigestOrExact,
                "q.io/ns/app:v1",
                "q.io/ns/app:v2",
                false,
            ),
            (
                MatchRepoDigestOrExact,
                "q.io/ns/app:v1",
                "q.io/ns/app",
                false,
            ),
            (MatchRepoDigestOrExact, &by_digest, "q.io/ns/app:v7", true),
            (
                MatchRepoDigestOrExact,
                &by_digest,
                "q.io/ns/other:v7",
                false,
            ),
            (MatchExact, "q.io/ns/app:v1", "q.io/ns/app:v1", true),
            (MatchExact, &by_digest, "q.io/ns/app:v1", false),
            (MatchExact, "q.io/ns/app:latest", "q.io/ns/app", false),
            (MatchRepository, "q.io/ns/app:v1", "q.io/ns/app", true),
            (MatchRepository, "q.io/ns/app:v1", "q.io/ns/app:v9", true),
            (MatchRepository, "q.io/ns/app:v1", "r.io/ns/app:v1", false),
            (
                MatchRepository,
                "docker.io/library/busybox:1",
                "busybox:2",
                true,
            ),
            (
                exact_ref("m.io/app:prod"),
                "q.io/ns/app:v1",
                "m.io/app:prod",
                true,
            ),
            (
                exact_ref("m.io/app:prod"),
                "q.io/ns/app:v1",
                "m.io/app:dev",
                false,
            ),
            (
                exact_repo("m.io/app"),
                "q.io/ns/app:v1",
                "m.io/app:any",
                true,
            ),
            (
                exact_repo("m.io/app"),
                "q.io/ns/app:v1",
                "m.io/other:any",
                false,
            ),
            (MatchRepository, "q.io/ns/app:v1", "NOT A REF", false),
            (
                MatchRepository,
                "q.io/ns/app:v1",
                "docker://q.io/ns/app:v1",
                false,
            ),
        ] {
            assert_eq!(
                identity_matches(&rule, &img(image), signed),
                want,
                "{rule} {image} {signed}"
            );
        }
    }

    /// signature/policy_reference_match_test.go: its tables, through
    /// `identity_matches`. hostpull's image is always a reference with a tag
    /// or a digest and never both, so cases whose image side is not are left
    /// out; a reference with both a tag and a digest is refused as a signed
    /// identity too, so it matches nothing (containers/image matches it
    /// exactly: hostpull is stricter there).
    #[test]
    fn upstream_reference_match_tables() {
        const RHEL: &str = "registry.access.redhat.com/rhel7/rhel:7.2.3";
        const RHEL_UNTAGGED: &str = "registry.access.redhat.com/rhel7/rhel";
        const DS: &str = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        const DO: &str = "@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let c = |a: &str, b: &str| format!("{a}{b}");
        let s = |a: &str| a.to_owned();
        let exact: Vec<(String, String, bool)> = vec![
            (s("busybox:latest"), s("busybox:latest"), true),
            (s(RHEL), s(RHEL), true),
            (c("busybox", DS), c("busybox", DS), true),
            (s("library/busybox:latest"), s("busybox:latest"), true),
            (
                s("docker.io/library/busybox:latest"),
                s("busybox:latest"),
                true,
            ),
            (c("library/busybox", DS), c("busybox", DS), true),
            (s("busybox:latest"), s("busybox:notlatest"), false),
            (s("busybox:latest"), s("notbusybox:latest"), false),
            (
                s("busybox:latest"),
                s("hostname/library/busybox:notlatest"),
                false,
            ),
            (
                s("hostname/library/busybox:latest"),
                s("busybox:notlatest"),
                false,
            ),
            (s("busybox:latest"), s(RHEL), false),
            (c("busybox", DS), c("notbusybox", DS), false),
            (s("busybox:latest"), c("busybox", DS), false),
            (c("busybox", DS), c("busybox", DO), false),
            (s("busybox"), s("busybox:latest"), false),
            (s("busybox"), c("busybox", DS), false),
            (s("busybox"), s("busybox"), false),
            (c("busybox:latest", DS), c("busybox:latest", DS), true),
            (c("busybox:latest", DS), c("busybox:latest", DO), false),
            (c("busybox:latest", DS), c("busybox:notlatest", DS), false),
            (c("busybox:latest", DS), c("busybox", DS), false),
            (c("busybox:latest", DS), s("busybox:latest"), false),
            (
                s("UPPERCASE_IS_INVALID_IN_DOCKER_REFERENCES"),
                s("busybox:latest"),
                false,
            ),
            (s(""), s("UPPERCASE_IS_INVALID_IN_DOCKER_REFERENCES"), false),
            (s("INVALID"), s("INVALID"), false),
        ];
        let repository: Vec<(String, String, bool)> = vec![
            (s("busybox:latest"), s("busybox:latest"), true),
            (s(RHEL), s(RHEL), true),
            (c("busybox", DS), c("busybox", DS), true),
            (s("library/busybox:latest"), s("busybox:latest"), true),
            (
                s("docker.io/library/busybox:latest"),
                s("busybox:latest"),
                true,
            ),
            (c("library/busybox", DS), c("busybox", DS), true),
            (s("busybox:latest"), s("busybox:notlatest"), true),
            (c(RHEL, "tagsuffix"), s(RHEL), true),
            (s("library/busybox:latest"), s("busybox:notlatest"), true),
            (s("busybox:latest"), s("library/busybox:notlatest"), true),
            (
                s("docker.io/library/busybox:notlatest"),
                s("busybox:latest"),
                true,
            ),
            (
                s("busybox:notlatest"),
                s("docker.io/library/busybox:latest"),
                true,
            ),
            (s("busybox:latest"), c("busybox", DS), true),
            (c("busybox", DS), c("busybox", DO), true),
            (s("busybox"), s("busybox:notlatest"), true),
            (s(RHEL), s(RHEL_UNTAGGED), true),
            (s("busybox"), c("busybox", DS), true),
            (s("library/busybox"), s("busybox"), true),
            (s("docker.io/library/busybox"), s("busybox"), true),
            (s("busybox:latest"), s("notbusybox:latest"), false),
            (
                s("hostname/library/busybox:latest"),
                s("busybox:notlatest"),
                false,
            ),
            (s("busybox:latest"), s(RHEL), false),
            (c("busybox", DS), c("notbusybox", DS), false),
            (c("busybox:latest", DS), c("busybox:latest", DS), true),
            (c("busybox:latest", DS), c("busybox:latest", DO), true),
            (c("busybox:latest", DS), c("busybox:notlatest", DS), true),
            (c("busybox:latest", DS), c("busybox", DS), true),
            (c("busybox:latest", DS), s("busybox:latest"), true),
            (
                s("UPPERCASE_IS_INVALID_IN_DOCKER_REFERENCES"),
                s("busybox:latest"),
                false,
            ),
            (s(""), s("UPPERCASE_IS_INVALID_IN_DOCKER_REFERENCES"), false),
            (s("INVALID"), s("INVALID"), false),
        ];
        let repo_digest_or_exact: Vec<(String, String, bool)> = vec![
            (s("busybox:latest"), s("busybox:notlatest"), false),
            (c(RHEL, "tagsuffix"), s(RHEL), false),
            (s("library/busybox:latest"), s("busybox:notlatest"), false),
            (s("busybox:latest"), s("library/busybox:notlatest"), false),
            (
                s("docker.io/library/busybox:notlatest"),
                s("busybox:latest"),
                false,
            ),
            (
                s("busybox:notlatest"),
                s("docker.io/library/busybox:latest"),
                false,
            ),
            (s("busybox"), s("busybox:latest"), false),
            (s("busybox:latest"), s("busybox"), false),
            (s("busybox"), c("busybox", DS), false),
            (c("busybox", DS), s("busybox"), false),
            (s(RHEL), s(RHEL_UNTAGGED), false),
            (s("busybox"), s("busybox"), false),
            (s("busybox:latest"), c("busybox", DS), false),
            (c("busybox", DS), s("busybox:latest"), true),
            (c("busybox", DS), c("busybox", DO), true),
            (c("busybox:latest", DS), s("busybox:latest"), false),
            (c("busybox:latest", DS), s("busybox:notlatest"), false),
            (s("busybox:latest"), c("busybox:latest", DS), false),
            (c("busybox:latest", DS), c("busybox:latest", DO), false),
            (c("busybox:latest", DS), c("busybox:notlatest", DO), false),
        ];
        // Both a tag and a digest: refused by hostpull's reference parser.
        let both = |s: &str| {
            s.split_once('@')
                .is_some_and(|(n, _)| n.rsplit('/').next().unwrap_or(n).contains(':'))
        };
        // A usable image: a valid reference with exactly one of tag and digest.
        let image = |s: &str| -> Option<ImageRef> {
            let named = s.contains('@') || s.rsplit('/').next().is_some_and(|l| l.contains(':'));
            if !named || both(s) {
                return None;
            }
            ImageRef::parse(s).ok()
        };
        let want = |a: &str, b: &str, w: bool| w && !both(a) && !both(b);
        let any = img("q.io/unrelated:v1");
        let symmetric = |table: &[(String, String, bool)]| -> Vec<(String, String, bool)> {
            table
                .iter()
                .flat_map(|(a, b, w)| [(a.clone(), b.clone(), *w), (b.clone(), a.clone(), *w)])
                .collect()
        };
        let mut checked = 0;
        let digest_or_exact: Vec<_> = symmetric(&exact)
            .into_iter()
            .filter(|c| c.2)
            .chain(symmetric(&repository).into_iter().filter(|c| !c.2))
            .chain(repo_digest_or_exact)
            .collect();
        for (rule, cases) in [
            (Identity::MatchExact, symmetric(&exact)),
            (Identity::MatchRepository, symmetric(&repository)),
            (Identity::MatchRepoDigestOrExact, digest_or_exact),
        ] {
            for (i, sig, w) in cases {
                let Some(image) = image(&i) else { continue };
                let got = identity_matches(&rule, &image, &sig);
                assert_eq!(got, want(&i, &sig, w), "{rule}: {image} vs. {sig}");
                checked += 1;
                if rule != Identity::MatchRepoDigestOrExact {
                    continue;
                }
                // remapIdentity is matchRepoDigestOrExact after its rewrite
                // (prmRemapIdentityMRDOETestCase): without one, and with the
                // image's host renamed and mapped back.
                let never = Identity::RemapIdentity {
                    prefix: "never-causes-a-rewrite.example".into(),
                    signed_prefix: "never-causes-a-rewrite.example".into(),
                };
                assert_eq!(
                    identity_matches(&never, &image, &sig),
                    got,
                    "{image} vs. {sig}"
                );
                let domain = image.domain.clone();
                let renamed = format!("e{}", &domain[1..]);
                let moved = img(&image.to_string().replacen(&domain, &renamed, 1));
                let back = Identity::RemapIdentity {
                    prefix: renamed,
                    signed_prefix: domain,
                };
                assert_eq!(
                    identity_matches(&back, &moved, &sig),
                    got,
                    "{back}: {moved} vs. {sig}"
                );
            }
        }
        for (a, b, w) in symmetric(&exact) {
            let rule = Identity::ExactReference {
                docker_reference: a.clone(),
            };
            assert_eq!(
                identity_matches(&rule, &any, &b),
                want(&a, &b, w),
                "{rule}: {b}"
            );
            checked += 1;
        }
        for (a, b, w) in symmetric(&repository) {
            let rule = Identity::ExactRepository {
                docker_repository: a.clone(),
            };
            assert_eq!(
                identity_matches(&rule, &any, &b),
                want(&a, &b, w),
                "{rule}: {b}"
            );
            checked += 1;
        }
        assert!(checked > 150, "{checked}");
    }

    /// policy_reference_match_test.go: TestPRMRemapIdentityRefMatchesPrefix,
    /// TestPRMRemapIdentityRemapReferencePrefix and
    /// TestPRMRemapIdentityMatchesDockerReference (references with both a tag
    /// and a digest left out, as above).
    #[test]
    fn upstream_remap_identity() {
        let ds = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let c = |a: &str, b: &str| format!("{a}{b}");
        let signed = "docker.io/library/signed-prefix";
        for (r, prefix, want) in [
            ("docker.io/image".to_owned(), "docker.io", true),
            ("docker.io/image".into(), "example.com", false),
            ("example.com:5000/image".into(), "example.com:5000", true),
            ("example.com:50000/image".into(), "example.com:5000", false),
            ("example.com:5000/image".into(), "example.com", false),
            ("example.com/foo".into(), "example.com", true),
            ("example.com/foo/bar".into(), "example.com", true),
            ("example.com/foo/bar:baz".into(), "example.com", true),
            (c("example.com/foo/bar", ds), "example.com", true),
            ("docker.io/ns/image".into(), "docker.io/library", false),
            ("example.com/library".into(), "docker.io/library", false),
            (
                "docker.io/libraryy/image".into(),
                "docker.io/library",
                false,
            ),
            (
                "docker.io/library/busybox".into(),
                "docker.io/library",
                true,
            ),
            ("example.com/ns/image".into(), "example.com/ns", true),
            ("example.com/ns2/image".into(), "example.com/ns", false),
            ("example.com/n2/image".into(), "example.com/ns", false),
            ("example.com".into(), "example.com/library/busybox", false),
            ("example.com:5000/ns/image".into(), "example.com/ns", false),
            ("example.com/ns/image".into(), "example.com:5000/ns", false),
            (
                "docker.io/library/busybox".into(),
                "docker.io/library/busybox",
                true,
            ),
            (
                "example.com/library/busybox".into(),
                "docker.io/library/busybox",
                false,
            ),
            (
                "docker.io/library/busybox2".into(),
                "docker.io/library/busybox",
                false,
            ),
            ("example.com/ns/image".into(), "example.com/ns/image", true),
            ("example.com/ns/imag2".into(), "example.com/ns/image", false),
            (
                "example.com/ns/imagee".into(),
                "example.com/ns/image",
                false,
            ),
            (
                "example.com:5000/ns/image".into(),
                "example.com/ns/image",
                false,
            ),
            (
                "example.com/ns/image".into(),
                "example.com:5000/ns/image",
                false,
            ),
            (
                "example.com/ns/image:tag".into(),
                "example.com/ns/image",
                true,
            ),
            (c("example.com/ns/image", ds), "example.com/ns/image", true),
        ] {
            let i = img(&r);
            let got = remap(&i, prefix, signed).unwrap();
            assert_eq!(got != i, want, "{r} vs. {prefix}");
        }
        for (prefix, signed, r, want) in [
            (
                "mirror.example",
                "vendor.example",
                "mirror.example/ns/image:tag".to_owned(),
                Some("vendor.example/ns/image:tag".to_owned()),
            ),
            (
                "mirror.example",
                "vendor.example",
                "different.com/ns/image:tag".into(),
                Some("different.com/ns/image:tag".into()),
            ),
            (
                "mirror.example/ns",
                "vendor.example/vendor-ns",
                "mirror.example/different-ns/image:tag".into(),
                Some("mirror.example/different-ns/image:tag".into()),
            ),
            (
                "docker.io",
                "not-docker-signed.example/ns",
                "busybox".into(),
                Some("not-docker-signed.example/ns/library/busybox".into()),
            ),
            (
                "example.com/mirror",
                "example.com/vendor",
                "example.com/mirror/image:tag".into(),
                Some("example.com/vendor/image:tag".into()),
            ),
            (
                "example.com/ns/mirror",
                "example.com/ns/vendor",
                "example.com/ns/mirror:tag".into(),
                Some("example.com/ns/vendor:tag".into()),
            ),
            (
                "mirror.example",
                "vendor.example",
                "prefixmirror.example/ns/image:tag".into(),
                Some("prefixmirror.example/ns/image:tag".into()),
            ),
            (
                "docker.io",
                "not-docker-signed.example",
                "busybox".into(),
                Some("not-docker-signed.example/library/busybox".into()),
            ),
            (
                "docker.io/library",
                "not-docker-signed.example/ns",
                "busybox".into(),
                Some("not-docker-signed.example/ns/busybox".into()),
            ),
            (
                "docker.io/library/busybox",
                "not-docker-signed.example/ns/notbusybox",
                "busybox".into(),
                Some("not-docker-signed.example/ns/notbusybox".into()),
            ),
            (
                "mirror.example",
                "vendor.example",
                "mirror.example/image".into(),
                Some("vendor.example/image".into()),
            ),
            (
                "mirror.example",
                "vendor.example",
                "mirror.example/image:tag".into(),
                Some("vendor.example/image:tag".into()),
            ),
            (
                "mirror.example",
                "vendor.example",
                c("mirror.example/image", ds),
                Some(c("vendor.example/image", ds)),
            ),
            // Rewrites that do not give a fully qualified reference.
            (
                "mirror.example/ns/image",
                "vendor.example:5000",
                "mirror.example/ns/image:tag".into(),
                None,
            ),
            (
                "mirror.example/ns/image",
                "vendor.example:5000",
                c("mirror.example/ns/image", ds),
                None,
            ),
            (
                "mirror.example/ns/image",
                "notlocalhost",
                "mirror.example/ns/image:tag".into(),
                None,
            ),
        ] {
            assert_eq!(
                remap(&img(&r), prefix, signed),
                want.map(|w| img(&w)),
                "{prefix} {signed} {r}"
            );
        }
        let rule = |p: &str, s: &str| Identity::RemapIdentity {
            prefix: p.into(),
            signed_prefix: s.into(),
        };
        for (prefix, signed, i, sig, want) in [
            (
                "does-not-match.com",
                "does-not-match.rewritten",
                "busybox:latest",
                "busybox:latest",
                true,
            ),
            (
                "does-not-match.com",
                "does-not-match.rewritten",
                "busybox:latest",
                "notbusybox:latest",
                false,
            ),
            (
                "mirror.example",
                "public.com",
                "mirror.example/busybox:1",
                "public.com/busybox:1",
                true,
            ),
            (
                "mirror.example",
                "public.com",
                "mirror.example/busybox:1",
                "public.com/busybox:not1",
                false,
            ),
            (
                "mirror.example",
                "docker.io/library",
                "mirror.example/busybox:latest",
                "busybox:latest",
                true,
            ),
            (
                "mirror.example",
                "docker.io/library",
                "mirror.example/alpine:latest",
                "busybox:latest",
                false,
            ),
            (
                "docker.io/library",
                "original.com",
                "copied:latest",
                "original.com/copied:latest",
                true,
            ),
            (
                "docker.io/library",
                "original.com",
                "copied:latest",
                "original.com/ns/copied:latest",
                false,
            ),
            (
                "busybox",
                "example.com/busybox",
                "busybox:latest",
                "example.com/busybox:latest",
                false,
            ),
            (
                "docker.io/library/busybox",
                "busybox",
                "docker.io/library/busybox:latest",
                "busybox:latest",
                false,
            ),
            (
                "UPPERCASE",
                "example.com",
                "example.com/foo:latest",
                "example.com/foo:latest",
                true,
            ),
            (
                "example.com",
                "UPPERCASE",
                "example.com/foo:latest",
                "UPPERCASE/foo:latest",
                false,
            ),
            // Otherwise as matchRepoDigestOrExact (a few of its cases, rewritten).
            (
                "mirror.example",
                "q.io",
                &format!("mirror.example/ns/app{ds}"),
                "q.io/ns/app:v7",
                true,
            ),
            (
                "mirror.example",
                "q.io",
                &format!("mirror.example/ns/app{ds}"),
                "q.io/ns/app",
                false,
            ),
            (
                "mirror.example",
                "q.io",
                "mirror.example/ns/app:v1",
                "q.io/ns/app:v2",
                false,
            ),
        ] {
            let r = rule(prefix, signed);
            assert_eq!(
                identity_matches(&r, &img(i), sig),
                want,
                "{r}: {i} vs. {sig}"
            );
        }
    }

    fn payload(kind: &str, digest: &str, reference: &str) -> Vec<u8> {
        serde_json::json!({
            "critical": {
                "type": kind,
                "image": {"docker-manifest-digest": digest},
                "identity": {"docker-reference": reference},
            },
            "optional": {"creator": "test"},
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn payloads() {
        let d = Sha256Digest::parse(D).unwrap();
        let image = img("q.io/app:v1");
        let rule = Identity::MatchRepoDigestOrExact;
        let ok = payload(ATOMIC, D, "q.io/app:v1");
        assert_eq!(check_payload(&ok, ATOMIC, &d, &image, &rule), Ok(()));
        for (bytes, want) in [
            (payload(COSIGN, D, "q.io/app:v1"), "type is"),
            (payload(ATOMIC, &D.replace('e', "f"), "q.io/app:v1"), "it signs manifest"),
            (payload(ATOMIC, D, "q.io/app:v2"), "does not match"),
            (b"{}".to_vec(), "not a signature payload"),
            (
                br#"{"critical":{"type":"atomic container signature","image":{"docker-manifest-digest":"x"},"identity":{"docker-reference":"q.io/app:v1"},"extra":1}}"#.to_vec(),
                "unknown field",
            ),
        ] {
            let e = check_payload(&bytes, ATOMIC, &d, &image, &rule).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
