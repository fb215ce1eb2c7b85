//! Image references (`docker://HOST[:PORT]/PATH[:TAG|@sha256:HEX]`) and pull
//! destinations (`oci:DIR[:TAG]`). Pure parsers: `&str` in, typed value out.

pub mod cstorage;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::digest::Sha256Digest;
use crate::error::{Kind, fail, quoted};

const DEFAULT_DOMAIN: &str = "docker.io";
const DEFAULT_TAG: &str = "latest";
/// The docker reference grammar limits a repository name to this many bytes.
const NAME_TOTAL_MAX: usize = 255;
const TAG_MAX: usize = 128;
/// containers-transports(5) names that are not a registry; refused with a clear message.
const OTHER_TRANSPORTS: &[&str] = &[
    "oci",
    "oci-archive",
    "docker-archive",
    "docker-daemon",
    "containers-storage",
    "dir",
    "ostree",
    "sif",
    "ostree-unverified-image",
    "ostree-unverified-registry",
    "ostree-remote-image",
    "ostree-image-signed",
];

/// A registry image: `domain/path` plus a tag or a digest.
#[derive(Debug, Clone)]
pub struct ImageRef {
    /// `host[:port]`, e.g. `quay.io` or `127.0.0.1:5000`.
    pub domain: String,
    /// The repository path below the domain, e.g. `fedora/fedora-bootc`.
    pub path: String,
    /// The tag; `latest` when neither tag nor digest is given.
    pub tag: Option<String>,
    /// The digest it is pinned by, if any.
    pub digest: Option<Sha256Digest>,
    /// The name as given, without tag or digest, when it named no registry
    /// (`fedora` for `fedora:40`, `library/fedora`): docker.io's here, but
    /// registries.conf's short-name settings may resolve it elsewhere.
    pub short_name: Option<String>,
}

/// The same image however it was typed: `short_name` says how, not which.
impl PartialEq for ImageRef {
    fn eq(&self, o: &Self) -> bool {
        (&self.domain, &self.path, &self.tag, &self.digest)
            == (&o.domain, &o.path, &o.tag, &o.digest)
    }
}

impl Eq for ImageRef {}

/// The refusal of a reference with `USER[:PASSWORD]@` before its host; it
/// quotes nothing of the reference.
const CREDENTIALS_IN_REFERENCE: &str = "invalid image reference: it holds credentials \
    (USER:PASSWORD@HOST/…), which are never taken from a reference: give them with \
    --authfile, --pull-secret or --registry-token";

/// Why a registry at an IPv6 address is refused, and how to reach it.
const IPV6_HOST: &str = "the registry is an IPv6 address, which no skopeo can pull from \
    (its reference grammar has none, skopeo#631): name it with --add-host NAME:IP and pull \
    NAME[:PORT]/PATH, with a certificate for NAME";

/// Why `domain` names no registry that skopeo can pull from, if it does not.
fn unusable_domain(domain: &str) -> Option<&'static str> {
    // No skopeo's reference grammar has an IPv6 address (skopeo#631).
    match domain.starts_with('[') {
        true => Some(IPV6_HOST),
        false => (!valid_domain(domain)).then_some("invalid registry host"),
    }
}

/// Whether a reference (without its transport) starts with `USER[:PASSWORD]@`,
/// as a URL's userinfo: an `@` before any `/`, with a path after it, or after
/// a `USER:PASSWORD` when what follows is no sha256 digest. The docker
/// reference grammar has `@` only before a digest (`NAME@sha256:HEX`).
fn holds_credentials(s: &str) -> bool {
    let Some((before, after)) = s.split_once('@') else {
        return false;
    };
    !before.contains('/')
        && (after.contains('/') || before.contains(':') && !after.starts_with("sha256:"))
}

/// `invalid WHAT: WHY: "INPUT"`, the input quoted last and cut.
fn invalid<T>(what: &str, why: &str, input: &str) -> anyhow::Result<T> {
    fail(
        Kind::Usage,
        format!("invalid {what}: {why}: {}", quoted(input)),
    )
}

/// `input` without `docker://`; `Err(transport)` for another transport.
fn without_transport(input: &str) -> Result<&str, &str> {
    match input.split_once(':') {
        _ if input.starts_with("docker://") => Ok(&input["docker://".len()..]),
        Some((t, _)) if OTHER_TRANSPORTS.contains(&t) || input[t.len()..].starts_with("://") => {
            Err(t)
        }
        _ => Ok(input),
    }
}

impl ImageRef {
    /// Parse `docker://NAME[:TAG|@DIGEST]` or the same without `docker://`.
    pub fn parse(input: &str) -> anyhow::Result<Self> {
        let bad = |why: &str| invalid("image reference", why, input);
        // Before anything quotes it: the reference would carry the password.
        if holds_credentials(input.split_once("://").map_or(input, |(_, rest)| rest)) {
            return fail(Kind::Usage, CREDENTIALS_IN_REFERENCE);
        }
        let s = match without_transport(input) {
            Ok(s) => s,
            // The transport is quoted with the input, cut.
            Err(_) => return bad("unsupported transport, only docker://"),
        };
        if s.is_empty() {
            return bad("empty");
        }
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => match Sha256Digest::parse(d) {
                Some(d) => (n, Some(d)),
                None => return bad("digest must be sha256: and 64 lowercase hex digits"),
            },
            None => (s, None),
        };
        // A tag follows the last colon, if that colon is after the last slash.
        let (name, tag) = match name.rfind(':') {
            Some(i) if !name[i..].contains('/') => (&name[..i], Some(&name[i + 1..])),
            _ => (name, None),
        };
        if let Some(tag) = tag
            && !valid_docker_tag(tag)
        {
            return bad("invalid tag");
        }
        if tag.is_some() && digest.is_some() {
            return bad("a tag and a digest together are not supported");
        }
        let (domain, path, short_name) = match name.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':']) || first == "localhost" || first.starts_with('[') =>
            {
                (first.to_owned(), rest.to_owned(), None)
            }
            _ => (
                DEFAULT_DOMAIN.to_owned(),
                name.to_owned(),
                Some(name.to_owned()),
            ),
        };
        let domain = match domain.as_str() {
            "index.docker.io" | "registry-1.docker.io" => DEFAULT_DOMAIN.to_owned(),
            _ => domain,
        };
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if let Some(why) = unusable_domain(&domain) {
            return bad(why);
        }
        if path.is_empty() || !path.split('/').all(valid_path_component) {
            return bad(
                "repository path must be lowercase [a-z0-9] components separated by . _ __ - or /",
            );
        }
        if domain.len() + 1 + path.len() > NAME_TOTAL_MAX {
            return bad("repository name longer than 255 characters");
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_owned()),
            (None, None) => Some(DEFAULT_TAG.to_owned()),
            (None, Some(_)) => None,
        };
        Ok(Self {
            domain,
            path,
            tag,
            digest,
            short_name,
        })
    }

    /// `domain/path`, the repository without tag or digest.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The same repository pinned to `digest`, as the worker should open it.
    pub fn with_digest(&self, digest: &Sha256Digest) -> Self {
        Self {
            tag: None,
            digest: Some(digest.clone()),
            ..self.clone()
        }
    }

    /// The skopeo transport form, `docker://…`.
    pub fn to_transport(&self) -> String {
        format!("docker://{self}")
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.repository())?;
        if let Some(d) = &self.digest {
            write!(f, "@{d}")
        } else if let Some(t) = &self.tag {
            write!(f, ":{t}")
        } else {
            Ok(())
        }
    }
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
pub fn valid_docker_tag(t: &str) -> bool {
    let mut b = t.bytes();
    t.len() <= TAG_MAX
        && b.next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
pub fn valid_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    if !bytes.first().copied().is_some_and(alnum) || !bytes.last().copied().is_some_and(alnum) {
        return false;
    }
    // Split on separator runs and check each run is allowed.
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// A DNS name or IPv4 address, or a bracketed IPv6 address, optionally with `:port`.
pub fn valid_domain(d: &str) -> bool {
    let (host_ok, port) = match d.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) => (v6.parse::<std::net::Ipv6Addr>().is_ok(), port),
            None => return false,
        },
        None => {
            let (h, port) = d.split_at(d.find(':').unwrap_or(d.len()));
            (valid_hostname(h), port)
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .and_then(|p| p.parse::<u16>().ok())
            .is_some_and(|p| p > 0);
    host_ok && port_ok
}

/// An RFC 1123 host name (which includes dotted IPv4 addresses).
pub fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Where a pull goes: an OCI image layout directory and the tag inside it, or
/// an ostree repository (the pull is staged in a layout, then imported), or
/// containers-storage. Parsed where it is given: by clap for `--dest`, by
/// serde for a profile's `dest` ([`Dest::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum Dest {
    /// `oci:DIR[:TAG]`.
    Oci {
        /// The layout directory.
        dir: PathBuf,
        /// The tag written, if given.
        tag: Option<String>,
    },
    /// `ostree:REPO[:REF]`: the repository to import into.
    Ostree(OstreeDest),
    /// `containers-storage:[STORE]NAME[:TAG]`.
    Storage(cstorage::StorageDest),
}

/// Where a planned pull goes, and the tag its layout gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `oci:DIR[:TAG]`: the layout `dir` gets `tag` (the image's when none
    /// is given).
    Oci {
        /// The layout directory; absolute under `plan::Request::absolute_dest`.
        dir: PathBuf,
        /// The tag the layout gets.
        tag: String,
    },
    /// `ostree:REPO[:REF]`: the pull goes into a staging layout, chosen when
    /// the pull starts (`store::ostree::Staging`), which is imported into
    /// REPO afterwards.
    Ostree {
        /// The repository, and the ref to point at the imported commit.
        dest: OstreeDest,
        /// The staging layout's tag, which nobody else sees.
        tag: String,
    },
    /// `containers-storage:[STORE]NAME[:TAG]`: the pull goes into a staging
    /// layout, which containers/storage's own code copies into the store
    /// once the pull has verified it (`store::cstorage`).
    Storage {
        /// The store, and the name the image is written under.
        dest: cstorage::StorageRef,
        /// The staging layout's tag, which nobody else sees.
        tag: String,
        /// How root writes the store.
        writer: cstorage::Writer,
    },
}

impl Target {
    /// The tag the pull's layout gets.
    pub fn tag(&self) -> &str {
        match self {
            Self::Oci { tag, .. } | Self::Ostree { tag, .. } | Self::Storage { tag, .. } => tag,
        }
    }

    /// The layout's directory, or the repository, or the store's graph root
    /// (root's default, `/var/lib/containers/storage`, when the destination
    /// names none: what the host's storage.conf says is containers/storage's
    /// to read).
    pub fn path(&self) -> &Path {
        match self {
            Self::Oci { dir, .. } => dir,
            Self::Ostree { dest, .. } => &dest.repo,
            Self::Storage { dest, .. } => dest
                .graph_root()
                .unwrap_or(Path::new(cstorage::DEFAULT_GRAPH_ROOT)),
        }
    }
}

/// `ostree:REPO[:REF]`: the repository, and the ref to point at the imported commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OstreeDest {
    /// The existing ostree repository.
    pub repo: PathBuf,
    #[serde(rename = "ref")]
    /// A ref to point at the imported commit.
    pub ostree_ref: Option<String>,
}

impl std::str::FromStr for Dest {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        Self::parse(s)
    }
}

impl TryFrom<String> for Dest {
    type Error = anyhow::Error;
    fn try_from(s: String) -> anyhow::Result<Self> {
        Self::parse(&s)
    }
}

impl Dest {
    /// `oci:DIR`, for a layout given as a directory (`rebase --layout`). A
    /// colon in it is refused: the consumer names the layout to its own
    /// skopeo as `oci:DIR:TAG`, where DIR ends at the first colon.
    pub fn layout(dir: &Path) -> anyhow::Result<Self> {
        let text = dir.to_string_lossy();
        if text.is_empty() || text.contains(':') {
            return invalid("layout directory", "empty or holds a colon", &text);
        }
        Ok(Self::Oci {
            dir: dir.to_owned(),
            tag: None,
        })
    }

    /// Parse `oci:DIR[:TAG]`, `ostree:REPO[:REF]` or
    /// `containers-storage:[STORE]NAME[:TAG]`. As in containers/image, DIR
    /// ends at the first colon.
    pub fn parse(input: &str) -> anyhow::Result<Self> {
        let bad = |why: &str| invalid("destination", why, input);
        if let Some(rest) = input.strip_prefix(cstorage::PREFIX) {
            return cstorage::StorageDest::parse(rest, input).map(Self::Storage);
        }
        let (ostree, rest) = match (input.strip_prefix("oci:"), input.strip_prefix("ostree:")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => {
                return bad(
                    "only oci:DIR[:TAG], ostree:REPO[:REF] and containers-storage:[STORE]NAME[:TAG] are supported",
                );
            }
        };
        let (dir, tag) = match rest.split_once(':') {
            Some((d, t)) => (d, Some(t)),
            None => (rest, None),
        };
        if dir.is_empty() {
            return bad("empty directory");
        }
        if ostree {
            if let Some(r) = tag
                && !valid_ostree_ref(r)
            {
                return bad(
                    "REF must be an ostree ref: /-separated [A-Za-z0-9_][A-Za-z0-9._-]* parts, not under ostree/",
                );
            }
            return Ok(Self::Ostree(OstreeDest {
                repo: dir.into(),
                ostree_ref: tag.map(str::to_owned),
            }));
        }
        if let Some(t) = tag
            && !valid_oci_ref_name(t)
        {
            return bad(
                "tag must be an OCI ref name: [A-Za-z0-9] runs separated by one of - . _ : @ + or --",
            );
        }
        Ok(Self::Oci {
            dir: dir.into(),
            tag: tag.map(str::to_owned),
        })
    }
}

/// An ostree ref name (libostree's `ostree_validate_rev`), outside `ostree/`,
/// where ostree-ext keeps the images and layers it manages.
pub fn valid_ostree_ref(r: &str) -> bool {
    r.len() <= 255
        && r.split('/').next() != Some("ostree")
        && r.split('/').all(|part| {
            let mut b = part.bytes();
            b.next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
        })
}

/// One component of the OCI `org.opencontainers.image.ref.name` grammar:
/// `[A-Za-z0-9]+(([-._:@+]|--)[A-Za-z0-9]+)*`. A `/` is refused on purpose:
/// a tag names one image, never a path.
pub fn valid_oci_ref_name(t: &str) -> bool {
    let b = t.as_bytes();
    if t.is_empty() || t.len() > TAG_MAX || !b[0].is_ascii_alphanumeric() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let sep_len = if b[i] == b'-' && b.get(i + 1) == Some(&b'-') {
            2
        } else if matches!(b[i], b'-' | b'.' | b'_' | b':' | b'@' | b'+') {
            1
        } else {
            return false;
        };
        i += sep_len;
        if !b.get(i).is_some_and(|c| c.is_ascii_alphanumeric()) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parse_valid() {
        let cases: &[(&str, &str, &str, Option<&str>, bool)] = &[
            (
                "docker://127.0.0.1:5000/a/b:v1",
                "127.0.0.1:5000",
                "a/b",
                Some("v1"),
                false,
            ),
            (
                "127.0.0.1:5000/a/b:v1",
                "127.0.0.1:5000",
                "a/b",
                Some("v1"),
                false,
            ),
            (
                "quay.io/fedora/fedora-bootc",
                "quay.io",
                "fedora/fedora-bootc",
                Some("latest"),
                false,
            ),
            ("localhost/x", "localhost", "x", Some("latest"), false),
            (
                "localhost:5000/x",
                "localhost:5000",
                "x",
                Some("latest"),
                false,
            ),
            (
                "fedora:40",
                "docker.io",
                "library/fedora",
                Some("40"),
                false,
            ),
            (
                "index.docker.io/user/img",
                "docker.io",
                "user/img",
                Some("latest"),
                false,
            ),
            (
                "registry.example.com/a__b/c-d.e:x_Y.1-2",
                "registry.example.com",
                "a__b/c-d.e",
                Some("x_Y.1-2"),
                false,
            ),
        ];
        for &(input, domain, path, tag, _) in cases {
            let r = ImageRef::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(
                (r.domain.as_str(), r.path.as_str(), r.tag.as_deref()),
                (domain, path, tag),
                "{input}"
            );
            // Only a name without a registry is a short name, as typed.
            let short = (input == "fedora:40").then_some("fedora");
            assert_eq!(r.short_name.as_deref(), short, "{input}");
            assert_eq!(r.digest, None);
        }
        let r = ImageRef::parse(&format!("docker://quay.io/a/b@{D}")).unwrap();
        assert_eq!(r.digest.as_ref().map(|d| d.as_str()), Some(D));
        assert_eq!(r.tag, None);
        assert_eq!(r.to_transport(), format!("docker://quay.io/a/b@{D}"));
    }

    /// A name names a registry when its first component has a `.` or `:` or is
    /// `localhost`, as containers/image's `parseUnnormalizedShortName`
    /// (pkg/shortnames/shortnames.go) decides it.
    #[test]
    fn short_names() {
        let pinned = format!("fedora@{D}");
        for (input, short) in [
            ("fedora", Some("fedora")),
            ("docker://fedora:40", Some("fedora")),
            ("library/fedora", Some("library/fedora")),
            ("org/team/app:v1", Some("org/team/app")),
            (pinned.as_str(), Some("fedora")),
            ("docker.io/fedora", None),
            ("docker.io/library/fedora:40", None),
            ("index.docker.io/library/fedora", None),
            ("localhost/fedora", None),
            ("reg:5000/fedora", None),
            ("quay.io/fedora/fedora", None),
        ] {
            let r = ImageRef::parse(input).unwrap();
            assert_eq!(r.short_name.as_deref(), short, "{input}");
            if short.is_some() {
                assert_eq!(r.domain, "docker.io", "{input}");
                // The same image as its fully qualified name.
                assert_eq!(r, ImageRef::parse(&r.to_string()).unwrap(), "{input}");
            }
        }
    }

    /// An IPv6 registry is refused as the worker would refuse it, saying how
    /// to reach it by name.
    #[test]
    fn ipv6_registries_are_refused_with_a_way_round() {
        for input in ["[::1]:5000/x:t", "docker://[fd00::5]/a/b", "[::1]/x"] {
            let e = ImageRef::parse(input).unwrap_err();
            let f = crate::error::failure(&e).unwrap();
            assert_eq!(f.kind, Kind::Usage, "{input}");
            assert!(f.message.contains("--add-host NAME:IP"), "{input}: {e}");
        }
    }

    #[test]
    fn a_layout_directory_is_an_oci_destination_without_a_colon() {
        assert_eq!(
            Dest::layout(Path::new("/var/lib/x")).unwrap(),
            Dest::Oci {
                dir: "/var/lib/x".into(),
                tag: None
            }
        );
        for bad in ["/var/lib/x:y", ""] {
            let e = Dest::layout(Path::new(bad)).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(
                e.to_string().starts_with("invalid layout directory: "),
                "{e}"
            );
        }
    }

    #[test]
    fn parse_invalid() {
        let cases = [
            "",
            "docker://",
            "oci:/tmp/x:tag",
            "containers-storage:quay.io/a/b",
            "dir://x/y",
            "quay.io/A/b",
            "quay.io/a//b",
            "quay.io/a/b:",
            "quay.io/a/b:-x",
            "quay.io/a/b:t@sha256:00",
            &format!("quay.io/a/b:t@{D}"),
            "quay.io/a/b@sha512:00",
            "quay.io/a/b@sha256:ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789",
            "quay.io:99999/a",
            "quay.io:/a",
            "quay..io/a",
            "-quay.io/a",
            "quay.io/a b",
            "quay.io/a/.b",
            "quay.io/a/b-",
            &format!("quay.io/{}", "a".repeat(300)),
            &format!("quay.io/a:{}", "t".repeat(129)),
        ];
        for input in cases {
            let e = ImageRef::parse(input).expect_err(input);
            assert_eq!(crate::error::exit_code(&e), 2, "{input}: {e}");
            assert!(!e.to_string().contains('\n'));
        }
    }

    /// Issue 26: credentials in a reference are refused naming where they
    /// go, and never quoted back; a digest is not mistaken for them.
    #[test]
    fn credentials_in_a_reference_are_refused_unquoted() {
        for input in [
            "docker://bob:S3CRET@quay.io/a/b",
            "bob:S3CRET@quay.io/a/b:v1",
            "docker://bob:S3CRET@quay.io",
            "docker://bob:S3CRET@quay.io:5000",
            "https://bob:S3CRET@quay.io/a/b",
            "docker://S3CRET@quay.io/a/b",
            &format!("docker://bob:S3CRET@quay.io/a/b@{D}"),
        ] {
            let e = ImageRef::parse(input).expect_err(input);
            assert_eq!(crate::error::exit_code(&e), 2, "{input}");
            let e = e.to_string();
            assert!(!e.contains("S3CRET"), "{input}: {e}");
            assert!(e.contains("--authfile"), "{input}: {e}");
        }
        for input in [format!("fedora@{D}"), format!("quay.io/a/b@{D}")] {
            ImageRef::parse(&input).unwrap();
        }
        let e = ImageRef::parse(&format!("fedora:40@{D}")).unwrap_err();
        assert!(e.to_string().contains("a tag and a digest"), "{e}");
    }

    /// The reason comes first, and what is quoted of a long input is cut.
    #[test]
    fn long_inputs_are_cut_after_the_reason() {
        let long = format!("quay.io/{}", "a".repeat(10_000));
        for e in [
            ImageRef::parse(&long).unwrap_err(),
            Dest::parse(&format!("oci:/x:{}", "t".repeat(10_000))).unwrap_err(),
            Dest::parse(&format!("dir:{}", "x".repeat(10_000))).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.len() < 250, "{} bytes: {e}", e.len());
            let (reason, quoted) = e.split_once(": \"").unwrap();
            assert!(
                reason.starts_with("invalid ") && reason.contains(": "),
                "{e}"
            );
            assert!(quoted.ends_with(" bytes)"), "{e}");
        }
        let e = ImageRef::parse("quay.io/A").unwrap_err().to_string();
        assert!(e.ends_with(r#": "quay.io/A""#), "{e}");
    }

    #[test]
    fn dest_parse() {
        let oci = |dir: &str, tag: Option<&str>| Dest::Oci {
            dir: dir.into(),
            tag: tag.map(str::to_owned),
        };
        let d = Dest::parse("oci:/var/lib/x:v1.0-rc_1").unwrap();
        assert_eq!(d, oci("/var/lib/x", Some("v1.0-rc_1")));
        assert_eq!(Dest::parse("oci:rel").unwrap(), oci("rel", None));
        for bad in [
            "oci:",
            "dir:/x",
            "/x",
            "oci:/x:",
            "oci:/x:a/b",
            "oci:/x:a..b",
            "oci:/x:a b",
            "oci:/x:.a",
            "oci:/x:a-",
            "ostree:",
            "ostree::ref",
            "ostree:/r:",
            "ostree:/r:a//b",
            "ostree:/r:a/",
            "ostree:/r:-a",
            "ostree:/r:a:b",
            "ostree:/r:a b",
            "ostree:/r:ostree/container/image/x",
            "ostree:/r:ostree",
            "ostree/r",
        ] {
            let e = Dest::parse(bad).expect_err(bad);
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
        }
    }

    #[test]
    fn ostree_dest_parse() {
        let o = |repo: &str, r: Option<&str>| OstreeDest {
            repo: repo.into(),
            ostree_ref: r.map(str::to_owned),
        };
        let cases = [
            (
                "ostree:/sysroot/ostree/repo",
                o("/sysroot/ostree/repo", None),
            ),
            (
                "ostree:repo:fcos/x86_64/stable",
                o("repo", Some("fcos/x86_64/stable")),
            ),
            ("ostree:/r:_a.b-c", o("/r", Some("_a.b-c"))),
        ];
        for (input, want) in cases {
            let d = Dest::parse(input).unwrap();
            assert_eq!(d, Dest::Ostree(want), "{input}");
        }
    }

    #[test]
    fn oci_ref_names() {
        for ok in ["v1", "a--b", "a:b@c+d", "1.0", "A_b"] {
            assert!(valid_oci_ref_name(ok), "{ok}");
        }
        for bad in ["", "a/b", "a..b", "a---b", "a ", "_a", "a.", "é"] {
            assert!(!valid_oci_ref_name(bad), "{bad}");
        }
    }
}
