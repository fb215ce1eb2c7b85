//! Signature policy for one image: the requirements of containers-policy.json(5)
//! that apply to it, and where its signatures are, from containers-registries.d(5).
//! Reads files and parses keys; no network.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::{Failure, Kind, fail};
use crate::plan::imgref::ImageRef;

/// The default policy and registries.d, below the root.
pub const POLICY: &str = "etc/containers/policy.json";
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    InsecureAcceptAnything,
    Reject,
    /// GPG simple signing: a binary (dearmored) keyring for gpgv.
    SignedBy {
        keyring: Vec<u8>,
        keys: String,
        identity: Identity,
    },
    /// Sigstore (cosign) attachments checked with public keys.
    SigstoreSigned {
        keys: Vec<PublicKey>,
        source: String,
        identity: Identity,
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
                source, identity, ..
            } => write!(f, "sigstoreSigned {source}, {identity}"),
        }
    }
}

/// `signedIdentity`: how the signature's `docker-reference` must relate to the image.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum Identity {
    MatchRepoDigestOrExact,
    MatchExact,
    MatchRepository,
    #[serde(rename_all = "camelCase")]
    ExactReference {
        docker_reference: String,
    },
    #[serde(rename_all = "camelCase")]
    ExactRepository {
        docker_repository: String,
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
        }
    }
}

/// A sigstore public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

impl PublicKey {
    /// A PEM `PUBLIC KEY` (SubjectPublicKeyInfo) of ECDSA P-256 or ed25519.
    fn from_pem(pem: &str) -> Option<Self> {
        use p256::pkcs8::DecodePublicKey as _;
        p256::ecdsa::VerifyingKey::from_public_key_pem(pem)
            .map(Self::P256)
            .or_else(|_| ed25519_dalek::VerifyingKey::from_public_key_pem(pem).map(Self::Ed25519))
            .ok()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    default: Vec<RawRequirement>,
    #[serde(default)]
    transports: BTreeMap<String, BTreeMap<String, Vec<RawRequirement>>>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
enum RawRequirement {
    // Struct variants, so that unknown fields are refused here too.
    InsecureAcceptAnything {},
    Reject {},
    #[serde(rename_all = "camelCase")]
    SignedBy {
        key_type: String,
        #[serde(flatten)]
        keys: RawKeys,
        signed_identity: Option<serde_json::Value>,
    },
    #[serde(rename_all = "camelCase")]
    SigstoreSigned {
        #[serde(flatten)]
        keys: RawKeys,
        fulcio: Option<serde_json::Value>,
        rekor_public_key_path: Option<serde_json::Value>,
        rekor_public_key_data: Option<serde_json::Value>,
        signed_identity: Option<serde_json::Value>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKeys {
    key_path: Option<PathBuf>,
    #[serde(default)]
    key_paths: Vec<PathBuf>,
    key_data: Option<String>,
}

impl RawKeys {
    /// Each key file's bytes, with a name for messages.
    fn read(&self, file: &Path) -> anyhow::Result<(Vec<Vec<u8>>, String)> {
        let given = usize::from(self.key_path.is_some())
            + usize::from(!self.key_paths.is_empty())
            + usize::from(self.key_data.is_some());
        if given != 1 {
            return bad_policy(
                file,
                "a requirement needs exactly one of keyPath, keyPaths and keyData",
            );
        }
        if let Some(data) = &self.key_data {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .or_else(|_| bad_policy(file, "keyData is not base64"))?;
            return Ok((vec![bytes], "keyData".into()));
        }
        let paths: Vec<&PathBuf> = self.key_path.iter().chain(&self.key_paths).collect();
        let mut keys = Vec::new();
        for p in &paths {
            let bytes = std::fs::read(p).map_err(|e| {
                Failure::new(
                    Kind::Usage,
                    format!(
                        "signature policy {}: reading key {}: {e}",
                        file.display(),
                        p.display()
                    ),
                )
            })?;
            keys.push(bytes);
        }
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        Ok((keys, names.join(" ")))
    }
}

fn bad_policy<T>(file: &Path, why: &str) -> anyhow::Result<T> {
    fail(
        Kind::Usage,
        format!("invalid signature policy {}: {why}", file.display()),
    )
}

/// Parse a policy and pick the requirements for `image`. Keys are read and
/// parsed now, so a broken policy fails before anything is fetched.
pub fn apply(file: &Path, text: &str, image: &ImageRef) -> anyhow::Result<Applied> {
    let raw: RawPolicy = serde_json::from_str(text)
        .or_else(|e| bad_policy(file, &crate::error::one_line(&e.to_string())))?;
    let docker = raw.transports.get("docker");
    let (scope, reqs) = match docker.and_then(|d| most_specific(d, image)) {
        Some((scope, reqs)) => (scope, reqs),
        None => match docker.and_then(|d| d.get("")) {
            Some(reqs) => ("docker".to_owned(), reqs),
            None => ("default".to_owned(), &raw.default),
        },
    };
    if reqs.is_empty() {
        return bad_policy(file, &format!("scope {scope:?} has no requirements"));
    }
    let requirements = reqs
        .iter()
        .map(|r| requirement(file, r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Applied {
        file: file.to_owned(),
        scope,
        requirements,
        lookaside: None,
        sigstore_attachments: false,
    })
}

fn requirement(file: &Path, raw: &RawRequirement) -> anyhow::Result<Requirement> {
    let identity = |v: &Option<serde_json::Value>| match v {
        None => Ok(Identity::MatchRepoDigestOrExact),
        Some(v) => Identity::deserialize(v).or_else(|e| {
            bad_policy(
                file,
                &format!("signedIdentity {v}: {e} (remapIdentity is not supported)"),
            )
        }),
    };
    Ok(match raw {
        RawRequirement::InsecureAcceptAnything {} => Requirement::InsecureAcceptAnything,
        RawRequirement::Reject {} => Requirement::Reject,
        RawRequirement::SignedBy {
            key_type,
            keys,
            signed_identity,
        } => {
            if key_type != "GPGKeys" {
                return bad_policy(
                    file,
                    &format!("signedBy keyType {key_type:?} is not supported, only GPGKeys"),
                );
            }
            let (files, names) = keys.read(file)?;
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
                identity: identity(signed_identity)?,
            }
        }
        RawRequirement::SigstoreSigned {
            keys,
            fulcio,
            rekor_public_key_path,
            rekor_public_key_data,
            signed_identity,
        } => {
            if fulcio.is_some()
                || rekor_public_key_path.is_some()
                || rekor_public_key_data.is_some()
            {
                return bad_policy(
                    file,
                    "sigstoreSigned with fulcio or rekor is not supported, only public keys",
                );
            }
            let (files, names) = keys.read(file)?;
            let keys = files
                .iter()
                .map(|k| {
                    std::str::from_utf8(k)
                        .ok()
                        .and_then(PublicKey::from_pem)
                        .ok_or_else(|| {
                            Failure::new(
                                Kind::Usage,
                                format!(
                                    "invalid signature policy {}: {names}: not a PEM ECDSA P-256 or ed25519 public key",
                                    file.display()
                                ),
                            )
                            .into()
                        })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Requirement::SigstoreSigned {
                keys,
                source: names,
                identity: identity(signed_identity)?,
            }
        }
    })
}

/// The scopes an image matches, most specific first: the reference as given,
/// the repository, each enclosing namespace, the host, then `*.domain`
/// wildcards of the host name.
pub fn scopes(image: &ImageRef) -> Vec<String> {
    let mut s = vec![image.to_string()];
    let mut repo = image.repository();
    loop {
        s.push(repo.clone());
        match repo.rfind('/') {
            Some(i) => repo.truncate(i),
            None => break,
        }
    }
    if !image.domain.contains([':', '[']) {
        let mut host = image.domain.as_str();
        while let Some((_, parent)) = host.split_once('.') {
            s.push(format!("*.{parent}"));
            host = parent;
        }
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
pub fn lookaside(applied: &mut Applied, dir: &Path, image: &ImageRef) -> anyhow::Result<()> {
    let mut all = RegistriesD::default();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
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
        let text = std::fs::read_to_string(&f).with_context_path(&f)?;
        let one: RegistriesD = match serde_yaml::from_str::<Option<RegistriesD>>(&text) {
            Ok(one) => one.unwrap_or_default(),
            Err(e) => return bad(crate::error::one_line(&e.to_string())),
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

    fn image(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    #[test]
    fn scopes_most_specific_first() {
        assert_eq!(
            scopes(&image("quay.example.com/ns/sub/repo:v1")),
            [
                "quay.example.com/ns/sub/repo:v1",
                "quay.example.com/ns/sub/repo",
                "quay.example.com/ns/sub",
                "quay.example.com/ns",
                "quay.example.com",
                "*.example.com",
                "*.com",
            ]
        );
        // No wildcards for a host with a port.
        assert_eq!(
            scopes(&image("127.0.0.1:5000/a/b:v1")),
            [
                "127.0.0.1:5000/a/b:v1",
                "127.0.0.1:5000/a/b",
                "127.0.0.1:5000/a",
                "127.0.0.1:5000"
            ]
        );
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
            let a = apply(f, &p, &image(img)).unwrap();
            assert_eq!(a.scope, scope, "{img}");
            assert_eq!(a.accepts_anything(), accepts, "{img}");
        }
        let a = apply(f, r#"{"default":[{"type":"reject"}]}"#, &image("q.io/a")).unwrap();
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
            (r#"{"transports":{}}"#, "missing field `default`"),
            (r#"{"default":[]}"#, "has no requirements"),
            (
                r#"{"default":[{"type":"bogus"}]}"#,
                "unknown variant `bogus`",
            ),
            (r#"{"default":[{"type":"reject","x":1}]}"#, "unknown field"),
            (
                r#"{"default":[{"type":"signedBy","keyType":"X509Certificates","keyPath":"/dev/null"}]}"#,
                "only GPGKeys",
            ),
            (
                r#"{"default":[{"type":"signedBy","keyType":"GPGKeys"}]}"#,
                "exactly one of keyPath",
            ),
            (
                r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/nonexistent/k"}]}"#,
                "reading key /nonexistent/k",
            ),
            (
                r#"{"default":[{"type":"sigstoreSigned","keyData":"aGVsbG8="}]}"#,
                "not a PEM ECDSA P-256 or ed25519 public key",
            ),
            (
                r#"{"default":[{"type":"sigstoreSigned","keyPath":"/dev/null","fulcio":{}}]}"#,
                "fulcio or rekor is not supported",
            ),
            (
                r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyData":"mQ==","signedIdentity":{"type":"remapIdentity","prefix":"a","signedPrefix":"b"}}]}"#,
                "remapIdentity is not supported",
            ),
        ] {
            let e = apply(f, text, &img).unwrap_err();
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
        let a = apply(Path::new("p"), &text, &image("q.io/a:v1")).unwrap();
        let [
            Requirement::SigstoreSigned {
                keys: k1,
                identity: i1,
                ..
            },
            Requirement::SigstoreSigned {
                keys: k2,
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
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("a.yaml"),
            "default-docker:\n  lookaside: file:///var/lib/sigs\ndocker:\n  q.io/ns:\n    use-sigstore-attachments: true\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("b.yaml"),
            "docker:\n  q.io/ns/repo:\n    lookaside: https://sigs.q.io/s\n",
        )
        .unwrap();
        std::fs::write(d.path().join("ignored.conf"), "{{{").unwrap();
        let mut a = apply(
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
            lookaside(&mut a, d.path(), &image(img)).unwrap();
            assert_eq!(a.lookaside.as_deref(), Some(url), "{img}");
            assert_eq!(a.sigstore_attachments, attach, "{img}");
        }
        std::fs::write(
            d.path().join("c.yaml"),
            "docker:\n  q.io/ns:\n    lookaside: file:///x\n",
        )
        .unwrap();
        let e = lookaside(&mut a, d.path(), &image("q.io/a")).unwrap_err();
        assert!(format!("{e}").contains("defined in another file"), "{e}");
        std::fs::remove_file(d.path().join("c.yaml")).unwrap();
        std::fs::write(
            d.path().join("c.yaml"),
            "docker:\n  z.io:\n    lookaside: ftp://x\n",
        )
        .unwrap();
        let e = lookaside(&mut a, d.path(), &image("z.io/a")).unwrap_err();
        assert!(format!("{e}").contains("must be a file://"), "{e}");
        // No directory: no lookaside.
        lookaside(&mut a, &d.path().join("none"), &image("q.io/a")).unwrap();
        assert_eq!(a.lookaside, None);
    }
}
