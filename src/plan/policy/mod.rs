//! Signature policy for one image: the requirements of containers-policy.json(5)
//! that apply to it, and where its signatures are, from containers-registries.d(5).
//! Reads files and parses keys; no network.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::{Failure, Kind, fail};
use crate::imgref::ImageRef;
use crate::plan::host::Host;

mod parse;
use parse::*;
mod sigstore;
pub use sigstore::{Fulcio, Pki, PublicKey, Rekor, Signer, parse_pem_certificates};

/// The default policy and registries.d, below the root.
pub const POLICY: &str = "etc/containers/policy.json";
/// The default registries.d directory, below the root.
pub const REGISTRIES_D: &str = "etc/containers/registries.d";

/// What the policy says about one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The policy file.
    pub file: PathBuf,
    /// The scope that matched: `HOST[/PATH][:TAG|@DIGEST]`, `docker` (the
    /// transport's default) or `default`.
    pub scope: String,
    /// Every one must be satisfied.
    pub requirements: Vec<Requirement>,
    /// The lookaside base URL for `signedBy`, from registries.d.
    pub lookaside: Option<String>,
    /// registries.d `use-sigstore-attachments` for this image.
    pub sigstore_attachments: bool,
}

impl Applied {
    /// Whether the policy lets the image in without any signature.
    pub fn accepts_anything(&self) -> bool {
        self.requirements
            .iter()
            .all(|r| *r == Requirement::InsecureAcceptAnything)
    }

    /// `REQUIREMENT[, …] (scope SCOPE in FILE)`, for messages and `plan`.
    pub fn describe(&self) -> String {
        let reqs: Vec<String> = self.requirements.iter().map(|r| r.to_string()).collect();
        format!(
            "{} (scope {:?} in {})",
            reqs.join(", "),
            self.scope,
            self.file.display()
        )
    }

    /// Where a `sigstoreSigned` requirement's signatures are read, for
    /// `plan`; none if no such requirement applies.
    pub fn sigstore_sources(&self) -> Option<String> {
        let sigstore = |r: &Requirement| matches!(r, Requirement::SigstoreSigned { .. });
        if !self.requirements.iter().any(sigstore) {
            return None;
        }
        Some(if self.sigstore_attachments {
            "attachments (tag sha256-HEX.sig) and cosign bundle referrers (tag sha256-HEX; \
             a bundle counts only for an image pinned by digest)"
                .to_owned()
        } else {
            "none: use-sigstore-attachments is not enabled in registries.d".to_owned()
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One requirement of the policy, ready to check.
pub enum Requirement {
    /// Any image, signed or not.
    InsecureAcceptAnything,
    /// No image.
    Reject,
    /// GPG simple signing: a binary (dearmored) keyring for gpgv.
    SignedBy {
        /// The keys, dearmored into one keyring.
        keyring: Vec<u8>,
        /// Where the keys came from, for messages.
        keys: String,
        /// How the signed reference must match the image.
        identity: Identity,
    },
    /// Sigstore (cosign) attachments checked with public keys, a Fulcio
    /// certificate or a PKI's certificate.
    SigstoreSigned {
        /// Who may have made a signature.
        signer: Signer,
        /// The Rekor keys whose signed entry timestamp a signature must carry.
        rekor: Option<Rekor>,
        /// Where the keys or certificates came from, for messages.
        source: String,
        /// How the signed reference must match the image.
        identity: Identity,
    },
    /// A requirement that no image satisfies, and why: what containers/image
    /// parses but does not implement either (`signedBaseLayer`, `keyType`
    /// other than `GPGKeys`). The image is rejected when it is evaluated.
    Unsatisfiable {
        /// The requirement, as the policy names it.
        what: String,
        /// Why nothing satisfies it.
        why: String,
    },
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InsecureAcceptAnything => f.write_str("insecureAcceptAnything"),
            Self::Reject => f.write_str("reject"),
            Self::SignedBy { keys, identity, .. } => {
                write!(f, "signedBy GPGKeys {keys}, {identity}")
            }
            Self::SigstoreSigned {
                signer,
                rekor,
                source,
                identity,
            } => {
                match signer {
                    Signer::Keys(_) => write!(f, "sigstoreSigned {source}")?,
                    _ => write!(f, "sigstoreSigned by {signer}")?,
                }
                if let Some(r) = rekor {
                    write!(f, ", logged in Rekor (keys {})", r.source)?;
                }
                write!(f, ", {identity}")
            }
            Self::Unsatisfiable { what, .. } => write!(f, "{what} (rejects every image)"),
        }
    }
}

/// `signedIdentity`: how the signature's `docker-reference` must relate to the
/// image. Parsed by `identity` below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The same repository, and the same tag unless pulled by digest.
    MatchRepoDigestOrExact,
    /// The same repository and tag (or digest).
    MatchExact,
    /// The same repository, any tag.
    MatchRepository,
    /// Exactly this reference.
    ExactReference {
        /// The reference the signature must name.
        docker_reference: String,
    },
    /// Exactly this repository.
    ExactRepository {
        /// The repository the signature must name.
        docker_repository: String,
    },
    /// An image under `prefix` is checked as if it were under `signed_prefix`
    /// (with `matchRepoDigestOrExact`): for mirrors that serve signed images
    /// under another name.
    RemapIdentity {
        /// The image's prefix.
        prefix: String,
        /// The prefix the signature names instead.
        signed_prefix: String,
    },
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MatchRepoDigestOrExact => f.write_str("matchRepoDigestOrExact"),
            Self::MatchExact => f.write_str("matchExact"),
            Self::MatchRepository => f.write_str("matchRepository"),
            Self::ExactReference { docker_reference } => {
                write!(f, "exactReference {docker_reference}")
            }
            Self::ExactRepository { docker_repository } => {
                write!(f, "exactRepository {docker_repository}")
            }
            Self::RemapIdentity {
                prefix,
                signed_prefix,
            } => write!(f, "remapIdentity {prefix} as {signed_prefix}"),
        }
    }
}

fn bad_policy<T>(file: &Path, why: &str) -> anyhow::Result<T> {
    fail(
        Kind::Usage,
        format!("invalid signature policy {}: {why}", file.display()),
    )
}

/// Parse a policy, check all of it, and pick the requirements for `image`.
/// Keys are read and parsed now, so a broken policy fails before anything is
/// fetched.
pub fn apply(
    host: &dyn Host,
    file: &Path,
    text: &str,
    image: &ImageRef,
) -> anyhow::Result<Applied> {
    let raw = parse_policy(text).or_else(|why| bad_policy(file, &why))?;
    let docker = raw.docker.as_ref();
    let (scope, reqs) = match docker.and_then(|d| most_specific(d, image)) {
        Some((scope, reqs)) => (scope, reqs),
        None => match docker.and_then(|d| d.get("")) {
            Some(reqs) => ("docker".to_owned(), reqs),
            None => ("default".to_owned(), &raw.default),
        },
    };
    let requirements = reqs
        .iter()
        .map(|r| requirement_for(host, file, r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Applied {
        file: file.to_owned(),
        scope,
        requirements,
        lookaside: None,
        sigstore_attachments: false,
    })
}

/// Key files' bytes, with a name for messages: the paths, or `FIELDData(s)`.
fn read_keys(
    host: &dyn Host,
    file: &Path,
    keys: &Keys,
    field: &str,
) -> anyhow::Result<(Vec<Vec<u8>>, String)> {
    let paths: Vec<&PathBuf> = match keys {
        Keys::Data(d) => return Ok((vec![d.clone()], format!("{field}Data"))),
        Keys::Datas(d) => return Ok((d.clone(), format!("{field}Datas"))),
        Keys::Path(p) => vec![p],
        Keys::Paths(p) => p.iter().collect(),
        Keys::Fulcio(_) | Keys::Pki(_) => Vec::new(),
    };
    let mut out = Vec::new();
    for p in &paths {
        let bytes = host.read(p).map_err(|e| {
            Failure::new(
                Kind::Usage,
                format!(
                    "signature policy {}: reading key {}: {e}",
                    file.display(),
                    p.display()
                ),
            )
        })?;
        out.push(bytes);
    }
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    Ok((out, names.join(" ")))
}

/// What hostpull enforces for one parsed requirement of the image's scope.
/// What containers/image does not implement either (`signedBaseLayer`,
/// `keyType` other than `GPGKeys`) rejects the image, as there.
fn requirement_for(host: &dyn Host, file: &Path, raw: &Raw) -> anyhow::Result<Requirement> {
    Ok(match raw {
        Raw::InsecureAcceptAnything => Requirement::InsecureAcceptAnything,
        Raw::Reject => Requirement::Reject,
        Raw::SignedBaseLayer => Requirement::Unsatisfiable {
            what: "signedBaseLayer".into(),
            why: "signedBaseLayer is not implemented (containers/image rejects it too)".into(),
        },
        Raw::SignedBy { key_type, .. } if key_type != "GPGKeys" => Requirement::Unsatisfiable {
            what: format!("signedBy keyType {key_type}"),
            why: format!("keyType {key_type} is not implemented (containers/image rejects it too)"),
        },
        Raw::SignedBy { keys, identity, .. } => {
            let identity = identity.clone();
            let (files, names) = read_keys(host, file, keys, "key")?;
            if files.is_empty() {
                return Ok(Requirement::Unsatisfiable {
                    what: "signedBy with an empty keyPaths".into(),
                    why: "no key is trusted".into(),
                });
            }
            let mut keyring = Vec::new();
            for k in files {
                match dearmor(&k) {
                    Some(bin) => keyring.extend(bin),
                    None => return bad_policy(file, &format!("{names}: not an OpenPGP key")),
                }
            }
            Requirement::SignedBy {
                keyring,
                keys: names,
                identity,
            }
        }
        Raw::SigstoreSigned {
            keys,
            rekor,
            identity,
        } => sigstore::requirement(host, file, keys, rekor.as_ref(), identity)?,
    })
}

/// The scopes an image matches, most specific first, as containers/image's
/// `DockerReferenceIdentity` and `DockerReferenceNamespaces`
/// (docker/policyconfiguration/naming.go): the reference as given, the
/// repository, each enclosing namespace, the host, then `*.domain` wildcards
/// of the host name with its port stripped.
pub fn scopes(image: &ImageRef) -> Vec<String> {
    let mut s = vec![image.to_string()];
    let mut name = image.repository();
    loop {
        s.push(name.clone());
        match name.rfind('/') {
            Some(i) => name.truncate(i),
            None => break,
        }
    }
    let mut host = name.split(':').next().unwrap_or_default();
    while let Some(i) = host.find('.') {
        host = &host[i + 1..];
        s.push(format!("*.{host}"));
    }
    s
}

fn most_specific<'a, T>(map: &'a BTreeMap<String, T>, image: &ImageRef) -> Option<(String, &'a T)> {
    scopes(image)
        .into_iter()
        .find_map(|s| map.get(&s).map(|v| (s, v)))
}

/// One registries.d file.
#[derive(Debug, Default, Deserialize)]
struct RegistriesD {
    #[serde(rename = "default-docker")]
    default_docker: Option<Lookaside>,
    #[serde(default)]
    docker: BTreeMap<String, Lookaside>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Lookaside {
    lookaside: Option<String>,
    /// The older name of `lookaside`.
    sigstore: Option<String>,
    use_sigstore_attachments: Option<bool>,
}

impl Lookaside {
    fn url(&self) -> Option<&String> {
        self.lookaside.as_ref().or(self.sigstore.as_ref())
    }
}

/// Fill in the lookaside and `use-sigstore-attachments` for `image` from the
/// `*.yaml` files in `dir`: for each, the most specific entry that sets it,
/// then `default-docker`.
pub fn lookaside(
    host: &dyn Host,
    applied: &mut Applied,
    dir: &Path,
    image: &ImageRef,
) -> anyhow::Result<()> {
    let mut all = RegistriesD::default();
    let mut files: Vec<PathBuf> = match host.list(dir) {
        Ok(names) => names
            .into_iter()
            .map(|n| dir.join(n))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context_path(dir),
    };
    files.sort();
    for f in files {
        let bad = |why: String| {
            fail::<()>(
                Kind::Usage,
                format!("invalid registries.d file {}: {why}", f.display()),
            )
        };
        let text = host.read_text(&f).with_context_path(&f)?;
        if crate::plan::nesting::too_deep(&text, crate::plan::nesting::MAX_DEPTH) {
            return bad(crate::plan::nesting::TOO_DEEP.to_owned());
        }
        let one: RegistriesD = match crate::error::located::yaml::<Option<RegistriesD>>(&text) {
            Ok(one) => one.unwrap_or_default(),
            Err(e) => return bad(e.to_string()),
        };
        if let Some(d) = one.default_docker {
            if all.default_docker.is_some() {
                bad("default-docker is defined in another file too".into())?;
            }
            all.default_docker = Some(d);
        }
        for (k, v) in one.docker {
            if all.docker.insert(k.clone(), v).is_some() {
                bad(format!("docker {k:?} is defined in another file too"))?;
            }
        }
    }
    let chain: Vec<&Lookaside> = scopes(image)
        .iter()
        .filter_map(|s| all.docker.get(s))
        .chain(all.default_docker.as_ref())
        .collect();
    applied.lookaside = chain.iter().find_map(|l| l.url().cloned());
    applied.sigstore_attachments = chain
        .iter()
        .find_map(|l| l.use_sigstore_attachments)
        .unwrap_or(false);
    if let Some(url) = &applied.lookaside
        && !["file://", "http://", "https://"]
            .iter()
            .any(|s| url.starts_with(s))
    {
        return fail(
            Kind::Usage,
            format!(
                "registries.d in {}: lookaside {url:?} must be a file://, http:// or https:// URL",
                dir.display()
            ),
        );
    }
    Ok(())
}

trait WithPath<T> {
    fn with_context_path(self, p: &Path) -> anyhow::Result<T>;
}

impl<T> WithPath<T> for std::io::Result<T> {
    fn with_context_path(self, p: &Path) -> anyhow::Result<T> {
        self.map_err(|e| Failure::new(Kind::Usage, format!("reading {}: {e}", p.display())).into())
    }
}

/// An OpenPGP key as gpgv's `--keyring` wants it: binary. ASCII armor
/// (`-----BEGIN PGP PUBLIC KEY BLOCK-----`) is decoded; anything else is
/// taken as binary if it starts like an OpenPGP packet.
pub fn dearmor(key: &[u8]) -> Option<Vec<u8>> {
    let Ok(text) = std::str::from_utf8(key) else {
        return (key.first()? & 0x80 != 0).then(|| key.to_vec());
    };
    if !text.contains("-----BEGIN PGP PUBLIC KEY BLOCK-----") {
        return (key.first()? & 0x80 != 0).then(|| key.to_vec());
    }
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(l) = lines.next() {
        if l != "-----BEGIN PGP PUBLIC KEY BLOCK-----" {
            continue;
        }
        // Armor headers end at the first empty line.
        for h in lines.by_ref() {
            if h.is_empty() {
                break;
            }
        }
        let mut b64 = String::new();
        for l in lines.by_ref() {
            if l.starts_with("-----END") {
                break;
            }
            if l.starts_with('=') {
                continue; // the CRC-24 checksum
            }
            b64.push_str(l);
        }
        out.extend(base64::engine::general_purpose::STANDARD.decode(b64).ok()?);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::MemHost;

    /// A machine without a file: a key file a policy names is not there.
    fn bare() -> MemHost {
        MemHost::new("/")
    }

    fn image(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    /// docker/policyconfiguration/naming_test.go, TestDockerReference:
    /// the identity, then the namespaces; wildcards of the host name with its
    /// port stripped (so `*.example.com` covers `yet.another.example.com:8443`).
    #[test]
    fn upstream_docker_reference_namespaces() {
        let digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for (input, want) in [
            (
                "example.com/ns/repo",
                &[
                    "example.com/ns/repo",
                    "example.com/ns",
                    "example.com",
                    "*.com",
                ][..],
            ),
            (
                "example.com/repo",
                &["example.com/repo", "example.com", "*.com"],
            ),
            (
                "localhost/ns/repo",
                &["localhost/ns/repo", "localhost/ns", "localhost"],
            ),
            ("localhost/repo", &["localhost/repo", "localhost"]),
            (
                "notlocalhost/repo",
                &[
                    "docker.io/notlocalhost/repo",
                    "docker.io/notlocalhost",
                    "docker.io",
                    "*.io",
                ],
            ),
            (
                "docker.io/ns/repo",
                &["docker.io/ns/repo", "docker.io/ns", "docker.io", "*.io"],
            ),
            (
                "docker.io/library/repo",
                &[
                    "docker.io/library/repo",
                    "docker.io/library",
                    "docker.io",
                    "*.io",
                ],
            ),
            (
                "docker.io/repo",
                &[
                    "docker.io/library/repo",
                    "docker.io/library",
                    "docker.io",
                    "*.io",
                ],
            ),
            (
                "ns/repo",
                &["docker.io/ns/repo", "docker.io/ns", "docker.io", "*.io"],
            ),
            (
                "library/repo",
                &[
                    "docker.io/library/repo",
                    "docker.io/library",
                    "docker.io",
                    "*.io",
                ],
            ),
            (
                "repo",
                &[
                    "docker.io/library/repo",
                    "docker.io/library",
                    "docker.io",
                    "*.io",
                ],
            ),
            (
                "yet.another.example.com:8443/ns/repo",
                &[
                    "yet.another.example.com:8443/ns/repo",
                    "yet.another.example.com:8443/ns",
                    "yet.another.example.com:8443",
                    "*.another.example.com",
                    "*.example.com",
                    "*.com",
                ],
            ),
        ] {
            for suffix in [":tag", digest] {
                let got = scopes(&image(&format!("{input}{suffix}")));
                let mut expected = vec![format!("{}{suffix}", want[0])];
                expected.extend(want.iter().map(|s| s.to_string()));
                assert_eq!(got, expected, "{input}{suffix}");
            }
        }
        // An IP address gets the same treatment as there.
        assert_eq!(
            scopes(&image("127.0.0.1:5000/a:v1"))[3..],
            ["*.0.0.1", "*.0.1", "*.1"]
        );
    }

    /// policy_eval_test.go, TestPolicyContextRequirementsForImageRef (the
    /// docker transport's cases; hostpull pulls nothing else).
    #[test]
    fn upstream_requirements_for_image_ref() {
        let scopes = [
            "",
            "unmatched",
            "deep.com",
            "*.very.deep.com",
            "*.deep.com",
            "deep.com/n1",
            "deep.com/n1/n2",
            "deep.com/n1/n2/n3",
            "deep.com/n1/n2/n3/repo",
            "deep.com/n1/n2/n3/repo:tag2",
        ];
        let docker: Vec<String> = scopes
            .iter()
            .map(|s| format!(r#""{s}":[{{"type":"reject"}}]"#))
            .collect();
        let text = format!(
            r#"{{"default":[{{"type":"reject"}}],"transports":{{"docker":{{{}}},"atomic":{{"unmatched":[{{"type":"reject"}}]}}}}}}"#,
            docker.join(",")
        );
        for (input, matched) in [
            ("deep.com/n1/n2/n3/repo:tag2", "deep.com/n1/n2/n3/repo:tag2"),
            ("deep.com/n1/n2/n3/repo:nottag2", "deep.com/n1/n2/n3/repo"),
            ("deep.com/n1/n2/n3/notrepo:tag2", "deep.com/n1/n2/n3"),
            ("deep.com/n1/n2/notn3/repo:tag2", "deep.com/n1/n2"),
            ("deep.com/n1/notn2/n3/repo:tag2", "deep.com/n1"),
            ("deep.com/notn1/n2/n3/repo:tag2", "deep.com"),
            ("very.deep.com/n1/n2/n3/repo:tag2", "*.deep.com"),
            ("not.very.deep.com/n1/n2/n3/repo:tag2", "*.very.deep.com"),
            // The transport's "" scope.
            ("this.does-not/match:anything", "docker"),
            // And with a port, which hostpull used to skip to "" for.
            (
                "not.very.deep.com:8443/n1/n2/n3/repo:tag2",
                "*.very.deep.com",
            ),
        ] {
            let a = apply(&bare(), Path::new("p"), &text, &image(input)).unwrap();
            assert_eq!(a.scope, matched, "{input}");
        }
    }

    /// signature/fixtures/policy.json, copied unchanged (see testdata/README.md):
    /// the whole file is valid; what each image gets from it.
    #[test]
    fn upstream_fixture_policy() {
        let file = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/plan/testdata/policy.json"
        ));
        let text = std::fs::read_to_string(file).unwrap();
        parse_policy(&text).unwrap();
        let unsatisfiable =
            |a: &Applied| matches!(a.requirements[..], [Requirement::Unsatisfiable { .. }]);
        for (img, scope, want) in [
            (
                "example.com/playground/x:1",
                "example.com/playground",
                "accept",
            ),
            ("other.example/x:1", "default", "reject"),
            // *.com: a host with a port is covered by the wildcard.
            ("quay.example.com:8443/x:1", "*.com", "unsatisfiable"),
            (
                "a.access.redhat.com/x:1",
                "*.access.redhat.com",
                "unsatisfiable",
            ),
            ("a.redhat.com/x:1", "*.redhat.com", "unsatisfiable"),
            (
                "registry.access.redhat.com/rhel7:1",
                "registry.access.redhat.com",
                "unsatisfiable",
            ),
            // These two scopes are not normalized names: no image matches
            // them, there as here.
            ("bogus/key-data-example:1", "default", "reject"),
            ("bogus/signed-identity-example:1", "default", "reject"),
            (
                "example.com/hardened-x509/x:1",
                "example.com/hardened-x509",
                "unsatisfiable2",
            ),
            // Key files that do not exist here and a bogus key: exit 2.
            (
                "example.com/production/x:1",
                "",
                "reading key /keys/employee-gpg-keyring",
            ),
            (
                "example.com/hardened/x:1",
                "",
                "reading key /keys/employee-gpg-keyring",
            ),
            (
                "registry.redhat.io/beta/x:1",
                "",
                "reading key /keys/RH-production-signing-key-gpg-keyring",
            ),
            (
                "private-mirror:5000/vendor-mirror/x:1",
                "",
                "reading key /keys/vendor-gpg-keyring",
            ),
            (
                "example.com/sigstore/key-data-example:1",
                "",
                "is not a PEM ECDSA (P-256, P-384), ed25519 or RSA public key",
            ),
            (
                "example.com/sigstore/key-path-example:1",
                "",
                "reading key /keys/public-key",
            ),
        ] {
            match (apply(&bare(), file, &text, &image(img)), want) {
                (Ok(a), "accept") => {
                    assert!(a.accepts_anything() && a.scope == scope, "{img}: {a:?}")
                }
                (Ok(a), "reject") => {
                    assert_eq!(
                        (a.scope.as_str(), &a.requirements[..]),
                        (scope, &[Requirement::Reject][..]),
                        "{img}"
                    )
                }
                (Ok(a), "unsatisfiable") => {
                    assert!(a.scope == scope && unsatisfiable(&a), "{img}: {a:?}")
                }
                (Ok(a), "unsatisfiable2") => assert!(
                    a.scope == scope
                        && a.requirements.len() == 2
                        && a.requirements
                            .iter()
                            .all(|r| matches!(r, Requirement::Unsatisfiable { .. })),
                    "{img}: {a:?}"
                ),
                (Err(e), why) => {
                    assert!(format!("{e:#}").contains(why), "{img}: {e:#}");
                    assert_eq!(crate::error::exit_code(&e), 2, "{img}");
                }
                (r, _) => panic!("{img}: {r:?}"),
            }
        }
    }

    const KEY: &str = r#""keyType":"GPGKeys","keyData":"YWJj""#;

    /// The cases of signature/policy_config_test.go and
    /// policy_config_sigstore_test.go: each invalid file is refused whole,
    /// whichever scope holds the fault, with the reason.
    #[test]
    fn upstream_invalid_policies() {
        let signed_by = |extra: &str| format!(r#"{{"type":"signedBy",{KEY}{extra}}}"#);
        let with_identity = |id: &str| signed_by(&format!(r#","signedIdentity":{id}"#));
        let sigstore = |fields: &str| format!(r#"{{"type":"sigstoreSigned",{fields}}}"#);
        let fulcio = r#""fulcio":{"caPath":"/c","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"}"#;
        let pki = r#""pki":{"caRootsPath":"/r","caIntermediatesPath":"/i","subjectHostname":"example.com"}"#;
        // Requirements, each placed in an unused scope of an otherwise valid policy.
        let reqs: Vec<(String, &str)> = vec![
            ("1".into(), "JSON object expected"),
            ("{}".into(), "Key \"type\" missing"),
            (r#"{"type":1}"#.into(), "type must be a string"),
            (r#"{"type":"this is invalid"}"#.into(), "Unknown policy requirement type \"this is invalid\""),
            (r#"{"type":"insecureAcceptAnything","unknown":"foo"}"#.into(), "Unknown key \"unknown\""),
            (r#"{"type":"reject","unknown":"foo"}"#.into(), "Unknown key \"unknown\""),
            (r#"{"type":"reject","type":"reject"}"#.into(), "Duplicate key \"type\""),
            // signedBy
            (signed_by(r#","unexpected":1"#), "Unknown key \"unexpected\""),
            (r#"{"type":"signedBy","keyData":"YWJj"}"#.into(), "Unrecognized keyType value \"\""),
            (r#"{"type":"signedBy","keyType":"this is invalid","keyData":"YWJj"}"#.into(), "Unrecognized keyType value"),
            (r#"{"type":"signedBy","keyType":"GPGKeys"}"#.into(), "none of them present"),
            (signed_by(r#","keyPath":"/foo/bar","keyPaths":["/1","/2"]"#), "more than one present"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyPath":"/foo/bar","keyPaths":["/1","/2"]}"#.into(), "more than one present"),
            (signed_by(r#","keyPath":"/foo/bar""#), "more than one present"),
            (signed_by(r#","keyPaths":["/1","/2"]"#), "more than one present"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyPath":1}"#.into(), "keyPath must be a string"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyPath":""}"#.into(), "keyPath is empty"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyPaths":1}"#.into(), "keyPaths must be a list of strings"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyPaths":[1]}"#.into(), "keyPaths must be a string"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyData":1}"#.into(), "keyData must be a string"),
            (r#"{"type":"signedBy","keyType":"GPGKeys","keyData":"this is invalid base64"}"#.into(), "keyData is not base64"),
            (with_identity(r#""this is invalid""#), "signedIdentity: JSON object expected"),
            (with_identity("null"), "signedIdentity: JSON object expected"),
            (signed_by(r#","keyType":"GPGKeys""#), "Duplicate key \"keyType\""),
            (signed_by(r#","keyData":"YWJj""#), "Duplicate key \"keyData\""),
            (with_identity(r#"{"type":"matchExact"},"signedIdentity":{"type":"matchExact"}"#), "Duplicate key \"signedIdentity\""),
            // signedBaseLayer
            (r#"{"type":"signedBaseLayer"}"#.into(), "Key \"baseLayerIdentity\" missing"),
            (r#"{"type":"signedBaseLayer","baseLayerIdentity":{"type":"matchExact"},"unexpected":1}"#.into(), "Unknown key \"unexpected\""),
            (r#"{"type":"signedBaseLayer","baseLayerIdentity":"this is invalid"}"#.into(), "JSON object expected"),
            (r#"{"type":"signedBaseLayer","baseLayerIdentity":null}"#.into(), "JSON object expected"),
            // Identities, field by field.
            (with_identity("{}"), "Unknown policy reference match type \"\""),
            (with_identity(r#"{"type":1}"#), "Unknown policy reference match type \"\""),
            (with_identity(r#"{"type":"this is invalid"}"#), "Unknown policy reference match type \"this is invalid\""),
            (with_identity(r#"{"type":"matchExact","unknown":"foo"}"#), "Unknown key \"unknown\""),
            (with_identity(r#"{"type":"matchRepository","unknown":"foo"}"#), "Unknown key \"unknown\""),
            (with_identity(r#"{"type":"matchRepoDigestOrExact","type":"matchExact"}"#), "Duplicate key \"type\""),
            (with_identity(r#"{"type":"exactReference"}"#), "Key \"dockerReference\" missing"),
            (with_identity(r#"{"type":"exactReference","dockerReference":1}"#), "dockerReference must be a string"),
            (with_identity(r#"{"type":"exactReference","dockerReference":""}"#), "Invalid format of dockerReference"),
            (with_identity(r#"{"type":"exactReference","dockerReference":"INVALIDUPPERCASE:latest"}"#), "Invalid format of dockerReference"),
            (with_identity(r#"{"type":"exactReference","dockerReference":"library/busybox"}"#), "contains neither a tag nor digest"),
            (with_identity(r#"{"type":"exactReference","dockerReference":"docker://busybox:latest"}"#), "not a bare reference"),
            (with_identity(r#"{"type":"exactRepository","dockerRepository":"docker://busybox"}"#), "not a bare reference"),
            (with_identity(r#"{"type":"exactReference","dockerReference":"a.io/b:1","x":1}"#), "Unknown key \"x\""),
            (with_identity(r#"{"type":"exactRepository"}"#), "Key \"dockerRepository\" missing"),
            (with_identity(r#"{"type":"exactRepository","dockerRepository":1}"#), "dockerRepository must be a string"),
            (with_identity(r#"{"type":"exactRepository","dockerRepository":""}"#), "Invalid format of dockerRepository"),
            (with_identity(r#"{"type":"exactRepository","dockerRepository":"INVALIDUPPERCASE"}"#), "Invalid format of dockerRepository"),
            (with_identity(r#"{"type":"remapIdentity","prefix":"example.com/docker-library"}"#), "Key \"signedPrefix\" missing"),
            (with_identity(r#"{"type":"remapIdentity","prefix":1,"signedPrefix":"docker.io/library"}"#), "prefix must be a string"),
            (with_identity(r#"{"type":"remapIdentity","prefix":"this is invalid","signedPrefix":"docker.io/library"}"#), "prefix \"this is invalid\" is not valid"),
            (with_identity(r#"{"type":"remapIdentity","prefix":"example.com","signedPrefix":"example.com/UPPERCASEISINVALID"}"#), "signedPrefix \"example.com/UPPERCASEISINVALID\" is not valid"),
            // sigstoreSigned
            (sigstore(r#""keyData":"YWJj","unexpected":1"#), "Unknown key \"unexpected\""),
            (r#"{"type":"sigstoreSigned"}"#.into(), "exactly one of keyPath, keyPaths, keyData, keyDatas, fulcio, and pki"),
            (sigstore(r#""keyData":"YWJj","keyPath":"/foo/bar""#), "exactly one of keyPath"),
            (sigstore(r#""keyData":"YWJj","keyPaths":["/foo/bar","/foo/baz"]"#), "exactly one of keyPath"),
            (sigstore(r#""keyData":"YWJj","keyDatas":["YWJj","ZGVm"]"#), "exactly one of keyPath"),
            (sigstore(&format!(r#""keyData":"YWJj",{fulcio}"#)), "exactly one of keyPath"),
            (sigstore(&format!(r#""keyData":"YWJj",{pki}"#)), "exactly one of keyPath"),
            (sigstore(r#""keyPath":1"#), "keyPath must be a string"),
            (sigstore(r#""keyPaths":1"#), "keyPaths must be a list of strings"),
            (sigstore(r#""keyPaths":{}"#), "keyPaths must be a list of strings"),
            (sigstore(r#""keyPaths":[]"#), "\"keyPaths\" contains no entries"),
            (sigstore(r#""keyData":1"#), "keyData must be a string"),
            (sigstore(r#""keyData":"this is invalid base64""#), "keyData is not base64"),
            (sigstore(r#""keyDatas":1"#), "keyDatas must be a list"),
            (sigstore(r#""keyDatas":{}"#), "keyDatas must be a list"),
            (sigstore(r#""keyDatas":[]"#), "\"keyDatas\" contains no entries"),
            (sigstore(r#""fulcio":1"#), "fulcio: JSON object expected"),
            (sigstore(r#""fulcio":{}"#), "fulcio: At least one of caPath and caData"),
            (sigstore(r#""fulcio":null"#), "fulcio: JSON object expected"),
            (sigstore(r#""pki":1"#), "pki: JSON object expected"),
            (sigstore(r#""pki":{}"#), "pki: At least one of caRootsPath and caRootsData"),
            (sigstore(r#""pki":null"#), "pki: JSON object expected"),
            (sigstore(fulcio), "must be specified if fulcio is used"),
            (sigstore(&format!(r#"{pki},"rekorPublicKeyPath":"/r""#)), "are not supported for pki"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyPath":"/foo/baz","rekorPublicKeyData":"""#), "at most one of rekorPublicKeyPath"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyPath":1"#), "rekorPublicKeyPath must be a string"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyPath":"/foo/baz","rekorPublicKeyPaths":["/baz/a","/baz/b"]"#), "at most one of rekorPublicKeyPath"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyPaths":1"#), "rekorPublicKeyPaths must be a list"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyPaths":{}"#), "rekorPublicKeyPaths must be a list"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyPaths":[]"#), "contains no entries"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyData":1"#), "rekorPublicKeyData must be a string"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyData":"this is invalid base64""#), "rekorPublicKeyData is not base64"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyData":"YQ==","rekorPublicKeyDatas":["YQ==","Yg=="]"#), "at most one of rekorPublicKeyPath"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyDatas":1"#), "rekorPublicKeyDatas must be a list"),
            (sigstore(r#""keyData":"YWJj","rekorPublicKeyDatas":[]"#), "contains no entries"),
            (sigstore(r#""keyData":"YWJj","signedIdentity":"this is invalid""#), "JSON object expected"),
            (sigstore(r#""keyData":"YWJj","signedIdentity":null"#), "JSON object expected"),
            (sigstore(r#""keyData":"YWJj","keyData":"YWJj""#), "Duplicate key \"keyData\""),
            // Fulcio and PKI objects.
            (sigstore(r#""fulcio":{"caPath":"/c","oidcIssuer":"https://example.com","subjectEmail":"a@example.com","unexpected":1},"rekorPublicKeyPath":"/r""#), "fulcio: Unknown key \"unexpected\""),
            (sigstore(r#""fulcio":{"caPath":"/c","caData":"","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"},"rekorPublicKeyPath":"/r""#), "caPath and caData cannot be used simultaneously"),
            (sigstore(r#""fulcio":{"caPath":1,"oidcIssuer":"https://example.com","subjectEmail":"a@example.com"},"rekorPublicKeyPath":"/r""#), "fulcio.caPath must be a string"),
            (sigstore(r#""fulcio":{"caPath":"/c","subjectEmail":"a@example.com"},"rekorPublicKeyPath":"/r""#), "oidcIssuer not specified"),
            (sigstore(r#""fulcio":{"caPath":"/c","oidcIssuer":1,"subjectEmail":"a@example.com"},"rekorPublicKeyPath":"/r""#), "oidcIssuer must be a string"),
            (sigstore(r#""fulcio":{"caPath":"/c","oidcIssuer":"https://example.com"},"rekorPublicKeyPath":"/r""#), "subjectEmail not specified"),
            (sigstore(r#""fulcio":{"caData":"this is invalid base64","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"},"rekorPublicKeyPath":"/r""#), "fulcio.caData is not base64"),
            (sigstore(r#""pki":{"caRootsPath":"/r","subjectHostname":"h","unexpected":1}"#), "pki: Unknown key \"unexpected\""),
            (sigstore(r#""pki":{"caRootsPath":"/r","caRootsData":"","subjectHostname":"h"}"#), "caRootsPath and caRootsData cannot be used simultaneously"),
            (sigstore(r#""pki":{"caRootsPath":1,"subjectHostname":"h"}"#), "caRootsPath must be a string"),
            (sigstore(r#""pki":{"caRootsPath":"/r","caIntermediatesPath":"/i","caIntermediatesData":"","subjectHostname":"h"}"#), "caIntermediatesPath and caIntermediatesData"),
            (sigstore(r#""pki":{"caRootsPath":"/r","subjectHostname":1}"#), "subjectHostname must be a string"),
            (sigstore(r#""pki":{"caRootsPath":"/r","subjectEmail":1}"#), "subjectEmail must be a string"),
            (sigstore(r#""pki":{"caRootsPath":"/r","caIntermediatesPath":"/i"}"#), "At least one of subjectEmail, subjectHostname"),
            (sigstore(r#""pki":{"caRootsData":1,"subjectHostname":"h"}"#), "caRootsData must be a string"),
            (sigstore(r#""pki":{"caRootsData":"this is invalid base64","subjectHostname":"h"}"#), "caRootsData is not base64"),
            (sigstore(r#""pki":{"caRootsData":"YWJj","caIntermediatesData":1,"subjectHostname":"h"}"#), "caIntermediatesData must be a string"),
        ];
        let mut files: Vec<(String, String)> = reqs
            .into_iter()
            .map(|(r, why)| {
                (
                    format!(r#"{{"default":[{{"type":"reject"}}],"transports":{{"docker":{{"unused.example/x":[{r}]}}}}}}"#),
                    why.to_owned(),
                )
            })
            .collect();
        // The file's structure (TestPolicyUnmarshalJSON,
        // TestPolicyTransportScopesWithTransportUnmarshalJSON,
        // TestPolicyRequirementsUnmarshalJSON).
        let r = r#"[{"type":"reject"}]"#;
        for (text, why) in [
            ("&".to_owned(), "expected value"),
            ("1".into(), "policy: JSON object expected"),
            (r#"{"transports":{}}"#.into(), "Default policy is missing"),
            (
                format!(r#"{{"default":{r},"unexpected":1}}"#),
                "Unknown key \"unexpected\"",
            ),
            (r#"{"default":1}"#.into(), "a list of requirements expected"),
            (
                r#"{"default":{}}"#.into(),
                "a list of requirements expected",
            ),
            (
                r#"{"default":null}"#.into(),
                "a list of requirements expected",
            ),
            (r#"{"default":[]}"#.into(), "must not be empty"),
            (r#"{"default":[1]}"#.into(), "JSON object expected"),
            (
                format!(r#"{{"default":{r},"transports":1}}"#),
                "transports: JSON object expected",
            ),
            (
                format!(r#"{{"default":{r},"transports":[]}}"#),
                "transports: JSON object expected",
            ),
            (
                format!(r#"{{"default":{r},"default":{r}}}"#),
                "Duplicate key \"default\"",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{}},"transports":{{}}}}"#),
                "Duplicate key \"transports\"",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{}},"docker":{{}}}}}}"#),
                "Duplicate key \"docker\"",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":1}}}}"#),
                "JSON object expected",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"a.io":1}}}}}}"#),
                "a list of requirements expected",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"a.io":{{}}}}}}}}"#),
                "a list of requirements expected",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"":1}}}}}}"#),
                "a list of requirements expected",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"a.io":[]}}}}}}"#),
                "must not be empty",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"":[]}}}}}}"#),
                "must not be empty",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"a.io":{r},"a.io":{r}}}}}}}"#),
                "Duplicate key \"a.io\"",
            ),
            (
                format!(r#"{{"default":{r},"transports":{{"docker":{{"":{r},"":{r}}}}}}}"#),
                "Duplicate key \"\"",
            ),
            (
                format!(
                    r#"{{"default":{r},"transports":{{"atomic":{{"a":[{{"type":"bogus"}}]}}}}}}"#
                ),
                "Unknown policy requirement type \"bogus\"",
            ),
            (format!(r#"{{"default":{r}}} {{}}"#), "trailing characters"),
        ] {
            files.push((text, why.to_owned()));
        }
        for (text, why) in files {
            let Err(e) = apply(&bare(), Path::new("p.json"), &text, &image("q.io/a:v1")) else {
                panic!("accepted: {text}");
            };
            let msg = format!("{e:#}");
            assert!(msg.contains(why.as_str()), "{text}: {msg}");
            assert!(msg.contains("invalid signature policy p.json"), "{msg}");
            assert_eq!(crate::error::exit_code(&e), 2, "{text}");
        }
    }

    /// What containers/image accepts, hostpull parses too (the valid objects
    /// and "allowed modifications" of the same tests).
    #[test]
    fn upstream_valid_policies() {
        let r = r#"[{"type":"reject"}]"#;
        for text in [
            format!(r#"{{"default":{r}}}"#),
            format!(r#"{{"default":{r},"transports":{{}}}}"#),
            format!(r#"{{"default":{r},"transports":{{"docker":{{}}}}}}"#),
            format!(r#"{{"default":{r},"transports":{{"docker":{{"a.io":{r}}},"unknown":{{"x":{r}}}}}}}"#),
            format!(r#"{{"default":[{{"type":"signedBy",{KEY}}}]}}"#),
            format!(r#"{{"default":[{{"type":"signedBy",{KEY},"signedIdentity":{{"type":"matchRepoDigestOrExact"}}}}]}}"#),
            r#"{"default":[{"type":"signedBy","keyType":"signedByGPGKeys","keyPaths":["/1","/2"]}]}"#.into(),
            r#"{"default":[{"type":"signedBy","keyType":"X509Certificates","keyPath":"/foo/bar"}]}"#.into(),
            r#"{"default":[{"type":"signedBaseLayer","baseLayerIdentity":{"type":"exactReference","dockerReference":"registry.access.redhat.com/rhel7/rhel:7.2.3"}}]}"#.into(),
            r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/k","signedIdentity":{"type":"exactRepository","dockerRepository":"library/busybox:latest"}}]}"#.into(),
            r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/k","signedIdentity":{"type":"remapIdentity","prefix":"example.com/docker-library","signedPrefix":"docker.io/library"}}]}"#.into(),
            r#"{"default":[{"type":"sigstoreSigned","keyDatas":["YWJj","ZGVm"]}]}"#.into(),
            r#"{"default":[{"type":"sigstoreSigned","keyPath":"/k","rekorPublicKeyPaths":["/a","/b"]}]}"#.into(),
            r#"{"default":[{"type":"sigstoreSigned","fulcio":{"caData":"YWJj","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"},"rekorPublicKeyDatas":["YWJj"]}]}"#.into(),
            r#"{"default":[{"type":"sigstoreSigned","pki":{"caRootsData":"YWJj","caIntermediatesData":"ZGVm","subjectHostname":"h","subjectEmail":"e"}}]}"#.into(),
        ] {
            parse_policy(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }

    /// policy_config_test.go, TestValidateIdentityRemappingPrefix.
    #[test]
    fn upstream_remap_prefixes() {
        for s in [
            "localhost",
            "example.com",
            "example.com:80",
            "example.com/repo",
            "example.com/ns1/ns2/ns3/repo.with.dots-dashes_underscores",
            "example.com:80/ns1/ns2/ns3/repo.with.dots-dashes_underscores",
            "shortname",
            "ns/shortname",
        ] {
            assert!(valid_remap_prefix(s), "{s}");
        }
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for s in [
            "",
            "repo_with_underscores",
            "example.com/",
            "example.com/UPPERCASEISINVALID",
            "example.com/repo/",
            "example.com/repo:tag",
            &format!("example.com/repo@{d}"),
            &format!("example.com/repo:tag@{d}"),
        ] {
            assert!(!valid_remap_prefix(s), "{s}");
        }
    }

    /// Issue 14: sigstoreSigned with public keys.
    #[test]
    fn sigstore_key_sources() {
        let p256 = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYS/00/JBdLxyVqE5aPi0i2kAX18e\nwKePsScfMRPxQiLKjMoz7pxXIh1lPT5BwrDOin+NCw2ViOfUCrk12v2iqQ==\n-----END PUBLIC KEY-----\n";
        let ed = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAE/0nKLcfbfmh49BhEus0HK8PdvJg3vDMbB129oOUuWM=\n-----END PUBLIC KEY-----\n";
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let text = format!(
            r#"{{"default":[{{"type":"sigstoreSigned","keyDatas":["{}","{}"]}}]}}"#,
            b64(p256),
            b64(ed)
        );
        let a = apply(&bare(), Path::new("p"), &text, &image("q.io/a:v1")).unwrap();
        let [
            Requirement::SigstoreSigned {
                signer: Signer::Keys(keys),
                source,
                ..
            },
        ] = &a.requirements[..]
        else {
            panic!("{a:?}")
        };
        assert!(
            matches!(keys[..], [PublicKey::P256(_), PublicKey::Ed25519(_)]),
            "{keys:?}"
        );
        assert_eq!(source, "keyDatas");
        let key = Signer::Keys(keys.clone());
        assert_eq!(key.to_string(), "keys");
    }

    fn testdata(name: &str) -> String {
        format!(
            "{}/src/signature/testdata/{name}",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    /// Issue 23: Fulcio, PKI and Rekor keys are read and parsed with the
    /// policy (containers/image's fixtures), and `plan` says each in words.
    #[test]
    fn sigstore_certificates_and_rekor() {
        let b64 = |name: &str| {
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(testdata(name)).unwrap())
        };
        // The fixtures the policies name by path, at those paths.
        let h = [
            "fulcio_v1.crt.pem",
            "rekor.pub",
            "cosign.pub",
            "some-rsa-key.pub",
        ]
        .into_iter()
        .fold(bare(), |h, name| {
            h.file(testdata(name), std::fs::read(testdata(name)).unwrap())
        });
        let get = |req: String| {
            let text = format!(r#"{{"default":[{req}]}}"#);
            apply(&h, Path::new("p"), &text, &image("q.io/a:v1"))
        };
        let fulcio = format!(
            r#"{{"type":"sigstoreSigned","fulcio":{{"caPath":"{}","oidcIssuer":"https://github.com/login/oauth","subjectEmail":"mitr@redhat.com"}},"rekorPublicKeyPaths":["{}","{}"]}}"#,
            testdata("fulcio_v1.crt.pem"),
            testdata("rekor.pub"),
            testdata("cosign.pub")
        );
        let a = get(fulcio).unwrap();
        let [
            Requirement::SigstoreSigned {
                signer: Signer::Fulcio(f),
                rekor: Some(r),
                ..
            },
        ] = &a.requirements[..]
        else {
            panic!("{a:?}")
        };
        assert_eq!((f.ca.len(), r.keys.len()), (1, 2));
        assert_eq!(
            a.requirements[0].to_string(),
            format!(
                "sigstoreSigned by a Fulcio certificate for mitr@redhat.com from OIDC issuer https://github.com/login/oauth (CA {}), logged in Rekor (keys {} {}), matchRepoDigestOrExact",
                testdata("fulcio_v1.crt.pem"),
                testdata("rekor.pub"),
                testdata("cosign.pub")
            )
        );
        let pki = format!(
            r#"{{"type":"sigstoreSigned","pki":{{"caRootsData":"{}","caIntermediatesData":"{}","subjectEmail":"qiwan@redhat.com","subjectHostname":"myhost.example.com"}},"signedIdentity":{{"type":"matchRepository"}}}}"#,
            b64("pki_root_crts.pem"),
            b64("pki_intermediate_crts.pem")
        );
        let a = get(pki).unwrap();
        assert_eq!(
            a.requirements[0].to_string(),
            "sigstoreSigned by a PKI certificate for email qiwan@redhat.com and host myhost.example.com (CAs pki.caRootsData pki.caIntermediatesData), matchRepository"
        );
        let keyed = format!(
            r#"{{"type":"sigstoreSigned","keyData":"{}","rekorPublicKeyData":"{}"}}"#,
            b64("cosign.pub"),
            b64("rekor.pub")
        );
        assert_eq!(
            get(keyed).unwrap().requirements[0].to_string(),
            "sigstoreSigned keyData, logged in Rekor (keys rekorPublicKeyData), matchRepoDigestOrExact"
        );
        // policy_eval_sigstore_test.go's prepareTrustRoot failures.
        for (req, why) in [
            (
                format!(
                    r#"{{"type":"sigstoreSigned","fulcio":{{"caData":"YWJj","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"}},"rekorPublicKeyData":"{}"}}"#,
                    b64("rekor.pub")
                ),
                "fulcio.caData: no certificate found",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","fulcio":{{"caPath":"{}","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"}},"rekorPublicKeyData":"{}"}}"#,
                    testdata("cosign.pub"),
                    b64("rekor.pub")
                ),
                "not PEM certificates",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","fulcio":{{"caPath":"/this/does/not/exist","oidcIssuer":"https://example.com","subjectEmail":"a@example.com"}},"rekorPublicKeyData":"{}"}}"#,
                    b64("rekor.pub")
                ),
                "reading key /this/does/not/exist",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","keyData":"{}","rekorPublicKeyData":"dGhpcyBpcyBpbnZhbGlk"}}"#,
                    b64("cosign.pub")
                ),
                "rekorPublicKeyData: key 1 is not a PEM",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","keyData":"{}","rekorPublicKeyPaths":["{}","{}"]}}"#,
                    b64("cosign.pub"),
                    testdata("rekor.pub"),
                    testdata("fulcio_v1.crt.pem")
                ),
                "key 2 is not a PEM",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","keyData":"{}","rekorPublicKeyPath":"{}"}}"#,
                    b64("cosign.pub"),
                    testdata("some-rsa-key.pub")
                ),
                "Rekor public key 1 is not using ECDSA",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","pki":{{"caRootsData":"{}","caIntermediatesData":"YWJj","subjectEmail":"e"}}}}"#,
                    b64("pki_root_crts.pem")
                ),
                "pki.caIntermediatesData: no certificate found",
            ),
            (
                format!(
                    r#"{{"type":"sigstoreSigned","pki":{{"caRootsPath":"{}","subjectEmail":"e"}}}}"#,
                    testdata("cosign.pub")
                ),
                "not PEM certificates",
            ),
        ] {
            let e = get(req.clone()).unwrap_err();
            assert!(format!("{e:#}").contains(why), "{req}: {e:#}");
            assert_eq!(crate::error::exit_code(&e), 2);
        }
        // An RSA public key is fine for keyPath (containers/image's cryptoutils takes it).
        let rsa = format!(
            r#"{{"type":"sigstoreSigned","keyPath":"{}"}}"#,
            testdata("some-rsa-key.pub")
        );
        let a = get(rsa).unwrap();
        assert!(
            matches!(&a.requirements[..], [Requirement::SigstoreSigned { signer: Signer::Keys(k), .. }] if matches!(k[..], [PublicKey::Rsa(_)])),
            "{a:?}"
        );
    }

    /// signedBaseLayer and the keyTypes containers/image parses but does not
    /// implement: the file is valid, and an image in their scope is rejected
    /// at evaluation with the reason (an image elsewhere is not affected).
    #[test]
    fn unimplemented_requirements_reject_only_their_scope() {
        let text = r#"{"default":[{"type":"insecureAcceptAnything"}],"transports":{"docker":{
            "q.io/base":[{"type":"signedBaseLayer","baseLayerIdentity":{"type":"matchExact"}}],
            "q.io/x509":[{"type":"signedBy","keyType":"X509Certificates","keyPath":"/nonexistent"}]}}}"#;
        let a = apply(&bare(), Path::new("p"), text, &image("q.io/other:v1")).unwrap();
        assert!(a.accepts_anything());
        for (img, why) in [
            ("q.io/base/a:v1", "signedBaseLayer is not implemented"),
            (
                "q.io/x509/a:v1",
                "keyType X509Certificates is not implemented",
            ),
        ] {
            let a = apply(&bare(), Path::new("p"), text, &image(img)).unwrap();
            assert!(
                !a.accepts_anything(),
                "--require-signature must not accept it"
            );
            let [Requirement::Unsatisfiable { why: w, .. }] = &a.requirements[..] else {
                panic!("{a:?}")
            };
            assert!(w.contains(why), "{w}");
            assert!(
                a.describe().contains("rejects every image"),
                "{}",
                a.describe()
            );
        }
    }

    fn policy(docker: &str) -> String {
        format!(r#"{{"default":[{{"type":"reject"}}],"transports":{{"docker":{{{docker}}}}}}}"#)
    }

    #[test]
    fn scope_selection() {
        let p = policy(
            r#""q.io":[{"type":"insecureAcceptAnything"}],
               "q.io/ns":[{"type":"reject"}],
               "q.io/ns/repo":[{"type":"insecureAcceptAnything"}],
               "":[{"type":"insecureAcceptAnything"}]"#,
        );
        let f = Path::new("p.json");
        for (img, scope, accepts) in [
            ("q.io/ns/repo:v1", "q.io/ns/repo", true),
            ("q.io/ns/other:v1", "q.io/ns", false),
            ("q.io/x/y", "q.io", true),
            ("r.io/x/y", "docker", true),
        ] {
            let a = apply(&bare(), f, &p, &image(img)).unwrap();
            assert_eq!(a.scope, scope, "{img}");
            assert_eq!(a.accepts_anything(), accepts, "{img}");
        }
        let a = apply(
            &bare(),
            f,
            r#"{"default":[{"type":"reject"}]}"#,
            &image("q.io/a"),
        )
        .unwrap();
        assert_eq!(
            (a.scope.as_str(), &a.requirements[..]),
            ("default", &[Requirement::Reject][..])
        );
    }

    #[test]
    fn bad_policies_are_usage_errors() {
        let f = Path::new("p.json");
        let img = image("q.io/a:v1");
        for (text, want) in [
            ("{", "invalid signature policy p.json"),
            (
                r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/nonexistent/k"}]}"#,
                "reading key /nonexistent/k",
            ),
            (
                r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyData":"aGVsbG8="}]}"#,
                "not an OpenPGP key",
            ),
            (
                r#"{"default":[{"type":"sigstoreSigned","keyData":"aGVsbG8="}]}"#,
                "is not a PEM ECDSA (P-256, P-384), ed25519 or RSA public key",
            ),
        ] {
            let e = apply(&bare(), f, text, &img).unwrap_err();
            let msg = format!("{e:#}");
            assert!(msg.contains(want), "{text}: {msg}");
            assert_eq!(crate::error::exit_code(&e), 2, "{text}");
        }
    }

    #[test]
    fn sigstore_keys_and_identities() {
        // A P-256 and an ed25519 public key, as openssl writes them.
        let p256 = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEYS/00/JBdLxyVqE5aPi0i2kAX18e\nwKePsScfMRPxQiLKjMoz7pxXIh1lPT5BwrDOin+NCw2ViOfUCrk12v2iqQ==\n-----END PUBLIC KEY-----\n";
        let ed = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAE/0nKLcfbfmh49BhEus0HK8PdvJg3vDMbB129oOUuWM=\n-----END PUBLIC KEY-----\n";
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let text = format!(
            r#"{{"default":[{{"type":"sigstoreSigned","keyData":"{}","signedIdentity":{{"type":"matchRepository"}}}},
                           {{"type":"sigstoreSigned","keyData":"{}"}}]}}"#,
            b64(p256),
            b64(ed)
        );
        let a = apply(&bare(), Path::new("p"), &text, &image("q.io/a:v1")).unwrap();
        let [
            Requirement::SigstoreSigned {
                signer: Signer::Keys(k1),
                identity: i1,
                ..
            },
            Requirement::SigstoreSigned {
                signer: Signer::Keys(k2),
                identity: i2,
                ..
            },
        ] = &a.requirements[..]
        else {
            panic!("{a:?}")
        };
        assert!(matches!(k1[..], [PublicKey::P256(_)]));
        assert!(matches!(k2[..], [PublicKey::Ed25519(_)]));
        assert_eq!(
            (i1, i2),
            (
                &Identity::MatchRepository,
                &Identity::MatchRepoDigestOrExact
            )
        );
        assert!(!a.accepts_anything());
    }

    #[test]
    fn dearmor_keys() {
        let bin = [0x98u8, 0x33, 0x04, 1, 2, 3];
        let b64 = base64::engine::general_purpose::STANDARD.encode(bin);
        let armored = format!(
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\nComment: x\n\n{}\n{}\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n",
            &b64[..4],
            &b64[4..]
        );
        assert_eq!(dearmor(armored.as_bytes()).unwrap(), bin);
        assert_eq!(dearmor(&bin).unwrap(), bin);
        assert_eq!(dearmor(b"hello"), None);
        assert_eq!(dearmor(b""), None);
    }

    #[test]
    fn lookaside_from_registries_d() {
        let d = Path::new("/registries.d");
        let h = bare()
            .file(
                d.join("a.yaml"),
                "default-docker:\n  lookaside: file:///var/lib/sigs\ndocker:\n  q.io/ns:\n    use-sigstore-attachments: true\n",
            )
            .file(
                d.join("b.yaml"),
                "docker:\n  q.io/ns/repo:\n    lookaside: https://sigs.q.io/s\n",
            )
            .file(d.join("ignored.conf"), "{{{");
        let mut a = apply(
            &bare(),
            Path::new("p"),
            r#"{"default":[{"type":"reject"}]}"#,
            &image("q.io/a:v1"),
        )
        .unwrap();
        for (img, url, attach) in [
            ("q.io/ns/repo:v1", "https://sigs.q.io/s", true),
            ("q.io/ns/other:v1", "file:///var/lib/sigs", true),
            ("r.io/x:v1", "file:///var/lib/sigs", false),
        ] {
            lookaside(&h, &mut a, d, &image(img)).unwrap();
            assert_eq!(a.lookaside.as_deref(), Some(url), "{img}");
            assert_eq!(a.sigstore_attachments, attach, "{img}");
        }
        let h = h.file(
            d.join("c.yaml"),
            "docker:\n  q.io/ns:\n    lookaside: file:///x\n",
        );
        let e = lookaside(&h, &mut a, d, &image("q.io/a")).unwrap_err();
        assert!(format!("{e}").contains("defined in another file"), "{e}");
        // c.yaml rewritten.
        let h = h.file(
            d.join("c.yaml"),
            "docker:\n  z.io:\n    lookaside: ftp://x\n",
        );
        let e = lookaside(&h, &mut a, d, &image("z.io/a")).unwrap_err();
        assert!(format!("{e}").contains("must be a file://"), "{e}");
        // No directory: no lookaside.
        lookaside(&h, &mut a, &d.join("none"), &image("q.io/a")).unwrap();
        assert_eq!(a.lookaside, None);
    }
}
