//! The registry's manifests as root sees them: strict parsing of untrusted bytes,
//! and the choice of one platform from an index. Pure functions.

use std::fmt;

use serde::Deserialize;

use crate::digest::Sha256Digest;
use crate::error::{Kind, fail};
use strict::{Json, Shape, strict};

mod strict;

/// A manifest or index larger than this is refused before it is parsed.
pub const MANIFEST_MAX: u64 = 4 << 20;
/// More layers than this is not an OS image but an attack on our memory and time.
pub const LAYERS_MAX: usize = 1024;
/// A config is small JSON; a huge one is refused like a huge manifest.
pub const CONFIG_MAX: u64 = 16 << 20;

/// The OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The Docker schema2 manifest media type.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The Docker schema2 manifest list media type (an index).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// A content descriptor: what a manifest says about one blob or manifest.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the blob is (config, layer, manifest).
    #[serde(default)]
    pub media_type: String,
    /// The blob's digest, checked by root.
    pub digest: Sha256Digest,
    /// The blob's size in bytes, checked by root.
    pub size: u64,
    /// Foreign URLs; refused when not empty.
    #[serde(default)]
    pub urls: Vec<String>,
    /// In an index: the platform of the manifest.
    pub platform: Option<Platform>,
    /// Annotations, kept as served.
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// An image manifest (OCI, or Docker schema2 read alike).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The declared media type, if any.
    #[serde(default)]
    pub media_type: Option<String>,
    /// The image configuration blob.
    pub config: Descriptor,
    /// The layer blobs, base first.
    pub layers: Vec<Descriptor>,
}

impl Manifest {
    /// Every blob this manifest needs: the config first, then the layers.
    pub fn blobs(&self) -> impl Iterator<Item = &Descriptor> {
        std::iter::once(&self.config).chain(&self.layers)
    }
}

/// An image index (OCI, or a Docker manifest list read alike).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// The declared media type, if any.
    #[serde(default)]
    pub media_type: Option<String>,
    /// One manifest per platform.
    pub manifests: Vec<Descriptor>,
}

/// What a registry's manifest bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A single-platform image, with its media type (OCI or Docker schema2).
    Manifest(Manifest, &'static str),
    /// An index, to choose a platform from.
    Index(Index),
}

/// Parse untrusted manifest bytes. Anything malformed is a verification failure (7).
///
/// The rule: what root verifies is exactly what the consumer reads. skopeo (and
/// so rpm-ostree and bootc) reads with Go's `encoding/json`, which matches keys
/// to fields regardless of case and lets the last of repeated keys win; serde
/// matches exactly and takes the first. So before the typed parse, `strict`
/// refuses every document the two could read differently: a key repeated, or
/// repeated in another case (`"Layers"` beside `"layers"`); a key that only
/// Go would take for a field (`"Digest"`); a document that is both a manifest
/// and an index (CVE-2021-41190); a value of the wrong JSON type where an
/// object belongs (serde would read an array positionally, Go refuses it).
pub fn parse(bytes: &[u8]) -> anyhow::Result<Parsed> {
    if bytes.len() as u64 > MANIFEST_MAX {
        return fail(Kind::Verify, "manifest is larger than 4 MiB");
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        schema_version: Option<u32>,
        media_type: Option<String>,
        manifests: Option<serde::de::IgnoredAny>,
    }
    let malformed = |e: serde_json::Error| {
        crate::error::Failure::new(Kind::Verify, format!("malformed manifest: {e}"))
    };
    let tree = Json::parse(bytes).map_err(malformed)?;
    if !matches!(tree, Json::Obj(_)) {
        return fail(Kind::Verify, "malformed manifest: not a JSON object");
    }
    let probe: Probe = serde_json::from_slice(bytes).map_err(malformed)?;
    if probe.schema_version != Some(2) {
        return fail(
            Kind::Verify,
            format!(
                "unsupported manifest schemaVersion {:?}: only schema 2 (OCI, Docker v2s2)",
                probe.schema_version
            ),
        );
    }
    let media_type = media_type(probe.media_type.as_deref(), probe.manifests.is_some())?;
    let shape = if media_type == OCI_INDEX {
        Shape::Index
    } else {
        Shape::Manifest
    };
    strict(&tree, shape, "manifest").map_err(|why| {
        crate::error::Failure::new(Kind::Verify, format!("malformed manifest: {why}"))
    })?;
    if media_type == OCI_INDEX {
        let index: Index = serde_json::from_slice(bytes).map_err(malformed)?;
        if index.manifests.is_empty() {
            return fail(Kind::Verify, "malformed manifest: index lists no manifests");
        }
        sizes(&index.manifests)?;
        return Ok(Parsed::Index(index));
    }
    let m: Manifest = serde_json::from_slice(bytes).map_err(malformed)?;
    limits(&m)?;
    Ok(Parsed::Manifest(
        m,
        if media_type == DOCKER_MANIFEST {
            DOCKER_MANIFEST
        } else {
            OCI_MANIFEST
        },
    ))
}

/// The media type a manifest declares (an index's when it lists manifests and
/// declares none), as one of the four hostpull reads.
fn media_type(declared: Option<&str>, lists_manifests: bool) -> anyhow::Result<&'static str> {
    Ok(match declared {
        Some(OCI_INDEX) | Some(DOCKER_LIST) => OCI_INDEX,
        Some(OCI_MANIFEST) => OCI_MANIFEST,
        Some(DOCKER_MANIFEST) => DOCKER_MANIFEST,
        None if lists_manifests => OCI_INDEX,
        None => OCI_MANIFEST,
        Some(other) => {
            return fail(
                Kind::Verify,
                format!("unsupported manifest media type {other:?}"),
            );
        }
    })
}

/// What root refuses in a well-formed manifest: sizes past JSON's exact
/// integers, too many layers, foreign URLs, an oversized config.
fn limits(m: &Manifest) -> anyhow::Result<()> {
    sizes(m.blobs())?;
    if m.layers.len() > LAYERS_MAX {
        return fail(
            Kind::Verify,
            format!(
                "manifest lists {} layers, more than the limit of {LAYERS_MAX}",
                m.layers.len()
            ),
        );
    }
    if let Some(foreign) = m.blobs().find(|l| !l.urls.is_empty()) {
        // A foreign blob asks the client to fetch from another server, maybe
        // without TLS or with our credentials. Everything comes from the
        // registry: the config too (`skopeo inspect` would fetch it there).
        return fail(
            Kind::Verify,
            format!(
                "{} {} names foreign URLs; hostpull fetches only from the registry",
                if std::ptr::eq(foreign, &m.config) {
                    "config"
                } else {
                    "layer"
                },
                foreign.digest
            ),
        );
    }
    if m.config.size > CONFIG_MAX {
        return fail(Kind::Verify, "image config is larger than 16 MiB");
    }
    Ok(())
}

/// A descriptor's size is Go's `int64`, and JSON numbers past 2^53 are not
/// exact in every reader (skopeo's proxy protocol passes sizes as JSON
/// numbers): a size beyond that (8 PiB) is a lie, not a blob.
pub const SIZE_MAX: u64 = 1 << 53;

fn sizes<'a>(ds: impl IntoIterator<Item = &'a Descriptor>) -> anyhow::Result<()> {
    match ds.into_iter().find(|d| d.size >= SIZE_MAX) {
        Some(d) => fail(
            Kind::Verify,
            format!(
                "malformed manifest: {} has size {}, beyond any blob (2^53)",
                d.digest, d.size
            ),
        ),
        None => Ok(()),
    }
}

/// Check an image config the consumer will parse: JSON, UTF-8, an object, not
/// deeper than serde_json's 128 levels, no key repeated (in any case, where Go
/// reads a struct), and readable as an OCI image configuration (what ostree-ext,
/// and so rpm-ostree and bootc, parse it as). Anything else is exit 7.
///
/// Gives the platform it declares: `os`, `architecture` (either may be empty:
/// the keys are required, not their values) and `variant` (an empty one is
/// none).
pub fn check_config(bytes: &[u8]) -> anyhow::Result<Platform> {
    let malformed = |why: &dyn fmt::Display| {
        crate::error::Failure::new(Kind::Verify, format!("malformed image config: {why}"))
    };
    if bytes.len() as u64 > CONFIG_MAX {
        return Err(malformed(&"larger than 16 MiB").into());
    }
    let tree = Json::parse(bytes).map_err(|e| malformed(&e))?;
    strict(&tree, Shape::Config, "config").map_err(|e| malformed(&e))?;
    serde_json::from_slice::<oci_spec::image::ImageConfiguration>(bytes)
        .map_err(|e| malformed(&e))?;
    let mut declared: Platform = serde_json::from_slice(bytes).map_err(|e| malformed(&e))?;
    declared.variant.take_if(|v| v.is_empty());
    Ok(declared)
}

/// Rewrite a verified Docker schema2 manifest as an OCI manifest, as `skopeo
/// copy` does for an `oci:` destination: skopeo 1.9.3 reads only OCI media types
/// from a layout's index. Only media types change; the config and layer blobs
/// stay byte for byte what the registry served, so their digests still hold.
pub fn docker_to_oci(raw: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(raw).map_err(|e| {
        crate::error::Failure::new(Kind::Verify, format!("malformed manifest: {e}"))
    })?;
    let convert = |mt: &mut serde_json::Value| {
        let oci = match mt.as_str() {
            Some("application/vnd.docker.container.image.v1+json") => {
                "application/vnd.oci.image.config.v1+json"
            }
            Some("application/vnd.docker.image.rootfs.diff.tar.gzip") => {
                "application/vnd.oci.image.layer.v1.tar+gzip"
            }
            Some("application/vnd.docker.image.rootfs.foreign.diff.tar.gzip") => {
                "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
            }
            Some(other) => {
                return fail(
                    Kind::Verify,
                    format!("cannot convert Docker media type {other:?} to OCI"),
                );
            }
            None => {
                return fail(
                    Kind::Verify,
                    "malformed manifest: a descriptor lacks its mediaType",
                );
            }
        };
        *mt = oci.into();
        Ok(())
    };
    // Not `v["config"]["mediaType"]`: IndexMut panics on a value that is not an object.
    let not_object = || {
        fail(
            Kind::Verify,
            "malformed manifest: not a Docker schema2 manifest",
        )
    };
    let Some(top) = v.as_object_mut() else {
        return not_object();
    };
    top.insert("mediaType".into(), OCI_MANIFEST.into());
    let Some(config) = top.get_mut("config").and_then(|c| c.as_object_mut()) else {
        return not_object();
    };
    convert(config.entry("mediaType").or_insert(serde_json::Value::Null))?;
    let Some(layers) = top.get_mut("layers").and_then(|l| l.as_array_mut()) else {
        return not_object();
    };
    for layer in layers {
        let Some(layer) = layer.as_object_mut() else {
            return not_object();
        };
        convert(layer.entry("mediaType").or_insert(serde_json::Value::Null))?;
    }
    Ok(serde_json::to_vec(&v)?)
}

/// `OS/ARCH[/VARIANT]`, with Go's names (`linux/amd64`, `linux/arm64/v8`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Platform {
    /// `GOOS`, e.g. `linux`.
    pub os: String,
    /// `GOARCH`, e.g. `amd64`.
    pub architecture: String,
    /// The CPU variant, e.g. `v8` for arm64.
    #[serde(default)]
    pub variant: Option<String>,
}

impl Platform {
    /// `OS/ARCH[/VARIANT]`, e.g. `linux/arm64/v8`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok =
            |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match parts.as_slice() {
            [os, arch] if [os, arch].iter().all(|p| ok(p)) => Ok(Self::new(os, arch, None)),
            [os, arch, v] if [os, arch, v].iter().all(|p| ok(p)) => {
                Ok(Self::new(os, arch, Some(v)))
            }
            _ => fail(
                Kind::Usage,
                format!(
                    "invalid platform: expected OS/ARCH[/VARIANT]: {}",
                    crate::error::quoted(s)
                ),
            ),
        }
    }

    fn new(os: &str, arch: &str, variant: Option<&str>) -> Self {
        Self {
            os: os.to_owned(),
            architecture: arch.to_owned(),
            variant: variant.map(str::to_owned),
        }
    }

    /// This host's platform, in Go's naming, as skopeo would choose it.
    pub fn host() -> Self {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            "arm" => "arm",
            other => other,
        };
        Self::new("linux", arch, None)
    }
}

/// The variants the newer CPUs of an architecture run too, newest first, as
/// containers/image's `compatibility` lists them: an `arm/v7` host runs v6
/// and v5 images.
const OLDER_VARIANTS: &[(&str, &[&str])] = &[("arm", &["v7", "v6", "v5"]), ("arm64", &["v8"])];
/// The variant every CPU of an architecture runs (containers/image's
/// `baseVariants`): arm64's `v8`, which an image may name or leave out.
const BASE_VARIANTS: &[(&str, &str)] = &[("arm64", "v8")];

impl Platform {
    /// Where an image of `image`'s platform stands among those `self` takes,
    /// best first (`None`: not taken). OS and architecture must be the same;
    /// variants come in containers/image's `WantedPlatforms` order: a variant
    /// asked for, then the older ones its CPUs run (`OLDER_VARIANTS`), then an
    /// image that names none; with none asked for, one that names none, then
    /// the architecture's base variant (`BASE_VARIANTS`), and last any
    /// (where an index's only entries for it all name one).
    pub fn rank(&self, image: &Platform) -> Option<usize> {
        if image.os != self.os || image.architecture != self.architecture {
            return None;
        }
        let arch = self.architecture.as_str();
        let mut order: Vec<&str> = match self.variant.as_deref() {
            Some(v) => (OLDER_VARIANTS.iter())
                .find(|(a, _)| *a == arch)
                .and_then(|(_, l)| l.iter().position(|o| *o == v).map(|i| l[i..].to_vec()))
                .unwrap_or_else(|| vec![v]),
            None => vec![],
        };
        order.push("");
        if self.variant.is_none() {
            order.extend(
                BASE_VARIANTS
                    .iter()
                    .filter(|(a, _)| *a == arch)
                    .map(|(_, b)| *b),
            );
        }
        let theirs = image.variant.as_deref().unwrap_or("");
        let last = self.variant.is_none().then_some(order.len());
        order.iter().position(|o| *o == theirs).or(last)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        match &self.variant {
            Some(v) => write!(f, "/{v}"),
            None => Ok(()),
        }
    }
}

/// Choose the manifest for `want` from an index, as `skopeo copy` without `--all`
/// does: the entry [`Platform::rank`] puts first, the earliest of equals.
pub fn select<'a>(index: &'a Index, want: &Platform) -> anyhow::Result<&'a Descriptor> {
    let ranked = (index.manifests.iter())
        .filter_map(|d| Some((want.rank(d.platform.as_ref()?)?, d)))
        .min_by_key(|(rank, _)| *rank);
    match ranked {
        Some((_, d)) => Ok(d),
        None => {
            let have: Vec<String> = index
                .manifests
                .iter()
                .filter_map(|d| d.platform.as_ref().map(|p| p.to_string()))
                .collect();
            fail(
                Kind::NotFound,
                format!(
                    "no image for platform {want} in the index (it has: {})",
                    have.join(", ")
                ),
            )
        }
    }
}

/// Refuse (exit 13) an image whose config declares `image`, a platform
/// `want` does not take ([`Platform::rank`]), the same rule as an index entry's.
pub fn check_platform(image: &Platform, want: &Platform) -> anyhow::Result<()> {
    match want.rank(image) {
        Some(_) => Ok(()),
        None => fail(
            Kind::Platform,
            format!("the image is for {image} (its config says so), not for {want}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn index(entries: &[(&str, &str, Option<&str>)]) -> Index {
        let manifests: Vec<_> = entries
            .iter()
            .enumerate()
            .map(|(i, (os, arch, v))| {
                let mut p = serde_json::json!({"os": os, "architecture": arch});
                if let Some(v) = v {
                    p["variant"] = (*v).into();
                }
                serde_json::json!({"mediaType": OCI_MANIFEST, "digest": d(char::from(b'a' + i as u8)), "size": 10, "platform": p})
            })
            .collect();
        let raw =
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
        match parse(raw.to_string().as_bytes()).unwrap() {
            Parsed::Index(i) => i,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn platform_selection() {
        let i = index(&[
            ("linux", "arm", Some("v7")),
            ("linux", "arm64", Some("v8")),
            ("linux", "amd64", None),
            ("linux", "arm", Some("v6")),
            ("windows", "amd64", None),
        ]);
        let cases = [
            ("linux/amd64", Some('c')),
            ("linux/arm64", Some('b')),
            ("linux/arm64/v8", Some('b')),
            ("linux/arm/v6", Some('d')),
            ("linux/arm", Some('a')),
            ("windows/amd64", Some('e')),
            ("linux/s390x", None),
            ("linux/arm/v5", None),
            ("linux/arm/v7", Some('a')),
        ];
        for (want, got) in cases {
            let r = select(&i, &Platform::parse(want).unwrap());
            match got {
                Some(c) => assert_eq!(r.unwrap().digest.as_str(), d(c), "{want}"),
                None => assert_eq!(crate::error::exit_code(&r.unwrap_err()), 4, "{want}"),
            }
        }
    }

    #[test]
    fn platform_variants_rank_as_containers_image_wants_them() {
        // arm64 with no variant is v8, asked for or served.
        let i = index(&[("linux", "arm64", None), ("linux", "arm64", Some("v9"))]);
        let got = select(&i, &Platform::parse("linux/arm64/v8").unwrap());
        assert_eq!(got.unwrap().digest.as_str(), d('a'));
        let i = index(&[("linux", "arm", Some("v5")), ("linux", "arm", Some("v6"))]);
        let got = select(&i, &Platform::parse("linux/arm/v7").unwrap());
        assert_eq!(got.unwrap().digest.as_str(), d('b'), "the newest a v7 runs");
        // (asked for, what the image's config declares, taken)
        let cases = [
            ("linux/amd64", "linux/amd64", true),
            ("linux/s390x", "linux/amd64", false),
            ("windows/amd64", "linux/amd64", false),
            ("linux/arm64", "linux/arm64/v8", true),
            ("linux/arm64/v8", "linux/arm64", true),
            ("linux/arm64/v8", "linux/arm64/v9", false),
            ("linux/arm/v7", "linux/arm/v6", true),
            ("linux/arm/v7", "linux/arm", true),
            ("linux/arm/v6", "linux/arm/v7", false),
            // amd64's levels have no such order in containers/image.
            ("linux/amd64/v3", "linux/amd64/v2", false),
            ("linux/amd64/v2", "linux/amd64/v3", false),
            ("linux/amd64/v3", "linux/amd64", true),
            // None asked for: any, as the choice from an index falls back to.
            ("linux/amd64", "linux/amd64/v3", true),
            ("linux/arm", "linux/arm/v7", true),
        ];
        for (want, image, taken) in cases {
            let (want, image) = (
                Platform::parse(want).unwrap(),
                Platform::parse(image).unwrap(),
            );
            match check_platform(&image, &want) {
                Ok(()) => assert!(taken, "{want} took {image}"),
                Err(e) => {
                    assert!(!taken, "{want} refused {image}");
                    assert_eq!(crate::error::exit_code(&e), 13);
                    let msg = format!("{e}");
                    assert!(msg.contains(&format!("for {image} ")), "{msg}");
                    assert!(msg.ends_with(&format!("not for {want}")), "{msg}");
                }
            }
        }
    }

    #[test]
    fn parse_kinds() {
        let layer = serde_json::json!({"mediaType": "x", "digest": d('a'), "size": 3});
        let m = |mt: Option<&str>| {
            let mut v =
                serde_json::json!({"schemaVersion": 2, "config": layer, "layers": [layer, layer]});
            if let Some(mt) = mt {
                v["mediaType"] = mt.into();
            }
            v.to_string()
        };
        assert!(matches!(
            parse(m(None).as_bytes()).unwrap(),
            Parsed::Manifest(_, OCI_MANIFEST)
        ));
        assert!(matches!(
            parse(m(Some(OCI_MANIFEST)).as_bytes()).unwrap(),
            Parsed::Manifest(_, OCI_MANIFEST)
        ));
        assert!(matches!(
            parse(m(Some(DOCKER_MANIFEST)).as_bytes()).unwrap(),
            Parsed::Manifest(_, DOCKER_MANIFEST)
        ));
        if let Parsed::Manifest(m, _) = parse(m(None).as_bytes()).unwrap() {
            assert_eq!(m.blobs().count(), 3);
        }
    }

    #[test]
    fn parse_rejects() {
        let layer = serde_json::json!({"mediaType": "x", "digest": d('a'), "size": 3});
        let many = serde_json::json!({"schemaVersion": 2, "config": layer, "layers": vec![layer.clone(); LAYERS_MAX + 1]});
        let huge = vec![b' '; MANIFEST_MAX as usize + 1];
        let cases: Vec<Vec<u8>> = vec![
            b"not json".to_vec(),
            b"{}".to_vec(),
            br#"{"schemaVersion":1,"fsLayers":[]}"#.to_vec(),
            br#"{"schemaVersion":2,"mediaType":"text/plain"}"#.to_vec(),
            br#"{"schemaVersion":2,"config":{"digest":"sha512:00","size":1},"layers":[]}"#.to_vec(),
            br#"{"schemaVersion":2,"config":{"digest":"sha256:00","size":1},"layers":[]}"#.to_vec(),
            serde_json::json!({"schemaVersion": 2, "config": {"digest": d('a'), "size": -1}, "layers": []}).to_string().into(),
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).to_string().into(),
            many.to_string().into(),
            huge,
            serde_json::json!({"schemaVersion": 2, "config": layer,
                "layers": [{"mediaType": "x", "digest": d('b'), "size": 3, "urls": ["http://elsewhere/b"]}]})
            .to_string()
            .into(),
        ];
        for bytes in cases {
            let e =
                parse(&bytes).expect_err(&String::from_utf8_lossy(&bytes[..bytes.len().min(80)]));
            assert_eq!(crate::error::exit_code(&e), 7, "{e}");
        }
    }

    /// Documents that serde and Go's encoding/json (skopeo) would read
    /// differently, or that a consumer cannot read: all exit 7.
    #[test]
    fn parser_differentials_are_refused() {
        let (a, b) = (d('a'), d('b'));
        let desc = |x: &str| format!(r#"{{"mediaType":"x","digest":"{x}","size":3}}"#);
        let (da, db) = (desc(&a), desc(&b));
        let mut bad_utf8 =
            format!(r#"{{"schemaVersion":2,"config":{da},"layers":[],"annotations":{{"x":"@"}}}}"#)
                .into_bytes();
        let at = bad_utf8.iter().position(|&c| c == b'@').unwrap();
        bad_utf8[at] = 0xff;
        let cases = [
            format!(r#"{{"schemaVersion":2,"config":{da},"layers":[{da}],"Layers":[{db}]}}"#),
            format!(r#"{{"schemaVersion":2,"config":{da},"Config":{db},"layers":[]}}"#),
            format!(r#"{{"schemaVersion":2,"CONFIG":{db},"config":{da},"layers":[]}}"#),
            format!(r#"{{"schemaVersion":2,"config":{da},"layers":[],"layers":[{db}]}}"#),
            format!(r#"{{"schemaVersion":2,"config":{da},"layerſ":[{db}],"layers":[]}}"#),
            format!(
                r#"{{"schemaVersion":2,"config":{{"mediaType":"x","digest":"{a}","Digest":"{b}","size":3}},"layers":[]}}"#
            ),
            format!(
                r#"{{"schemaVersion":2,"config":{{"mediaType":"x","digest":"{a}","size":3,"size":4}},"layers":[]}}"#
            ),
            // Only Go sees the field.
            format!(r#"{{"schemaVersion":2,"config":{da},"Layers":[{db}]}}"#),
            format!(r#"{{"SchemaVersion":2,"schemaVersion":2,"config":{da},"layers":[]}}"#),
            // Manifest and index at once (CVE-2021-41190), either way round.
            format!(
                r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{da},"layers":[],"manifests":[{db}]}}"#
            ),
            format!(
                r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{db}],"layers":[{da}],"config":{da}}}"#
            ),
            format!(r#"{{"schemaVersion":2,"manifests":[{db}],"Config":{da}}}"#),
            format!(r#"{{"schemaVersion":2,"config":{da},"layers":[],"fsLayers":[]}}"#),
            // Foreign URLs on the config, not only on layers.
            format!(
                r#"{{"schemaVersion":2,"config":{{"mediaType":"x","digest":"{a}","size":3,"urls":["https://elsewhere/c"]}},"layers":[]}}"#
            ),
            // Arrays where Go wants an object: serde reads them by position.
            format!(r#"[2,null,{da},[]]"#),
            format!(r#"{{"schemaVersion":2,"config":["x","{a}",3],"layers":[]}}"#),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"x","digest":"{a}","size":3,"platform":["linux","amd64"]}}]}}"#
            ),
            format!(r#"{{"schemaVersion":2,"config":{da},"layers":{da}}}"#),
            // Sizes no reader holds exactly (Go's int64; JSON numbers past 2^53).
            format!(
                r#"{{"schemaVersion":2,"config":{da},"layers":[{{"mediaType":"x","digest":"{b}","size":9007199254740992}}]}}"#
            ),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"x","digest":"{b}","size":18446744073709551615}}]}}"#
            ),
            // Deeper than any consumer should parse, in an annotation.
            format!(
                r#"{{"schemaVersion":2,"config":{da},"layers":[],"x-unknown":{{"x":{}{}}}}}"#,
                "[".repeat(10_000),
                "]".repeat(10_000)
            ),
        ];
        let cases = cases.map(String::into_bytes);
        for bytes in cases.iter().chain([&bad_utf8]) {
            let doc = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
            let e = parse(bytes).expect_err(&doc);
            assert_eq!(crate::error::exit_code(&e), 7, "{e}");
        }
    }

    /// What both read alike stays accepted: escapes, unknown keys, maps whose
    /// keys differ only in case (Go's maps are exact), key order.
    #[test]
    fn go_compatible_documents_are_accepted() {
        let a = d('a');
        let desc = format!(r#"{{"mediaType":"x","digest":"{a}","size":3}}"#);
        for doc in [
            format!(r#"{{"schemaVersion":2,"config":{desc},"layers":[{desc}]}}"#),
            format!(r#"{{"layers":[{desc}],"config":{desc},"schemaVersion":2}}"#),
            format!(r#"{{"schemaVersion":2,"config":{desc},"\u006cayers":[{desc}]}}"#),
            format!(
                r#"{{"schemaVersion":2,"config":{desc},"layers":[],"annotations":{{"A":"1","a":"2"}},"x-extra":{{"Y":1,"y":2}}}}"#
            ),
            format!(r#"{{"schemaVersion":2,"manifests":[{desc}],"annotations":{{}}}}"#),
        ] {
            parse(doc.as_bytes()).unwrap_or_else(|e| panic!("{doc}: {e}"));
        }
    }

    #[test]
    fn config_checks() {
        let ok = br#"{"architecture":"amd64","os":"linux","config":{"Labels":{"a":"1","A":"2"}},"rootfs":{"type":"layers","diff_ids":[]}}"#;
        assert_eq!(check_config(ok).unwrap().to_string(), "linux/amd64");
        for (config, declared) in [
            (
                r#"{"architecture":"arm64","os":"linux","variant":"v8","rootfs":{"type":"layers","diff_ids":[]}}"#,
                "linux/arm64/v8",
            ),
            (
                r#"{"architecture":"arm64","os":"linux","variant":"","rootfs":{"type":"layers","diff_ids":[]}}"#,
                "linux/arm64",
            ),
            (
                r#"{"architecture":"","os":"","rootfs":{"type":"layers","diff_ids":[]}}"#,
                "/",
            ),
        ] {
            assert_eq!(
                check_config(config.as_bytes()).unwrap().to_string(),
                declared
            );
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let mut bad_utf8 = ok.to_vec();
        let at = bad_utf8.iter().position(|&c| c == b'1').unwrap();
        bad_utf8[at] = 0xff;
        let cases: Vec<Vec<u8>> = vec![
            b"[]".to_vec(),
            b"{}".to_vec(),
            b"null".to_vec(),
            b"not json".to_vec(),
            deep.into_bytes(),
            format!(
                r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":[]}},"x":{}{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
            .into_bytes(),
            bad_utf8,
            br#"{"architecture":"amd64","Architecture":"arm64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec(),
            br#"{"architecture":"amd64","os":"linux","os":"windows","rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec(),
            br#"{"architecture":"amd64","os":"linux","config":{"labels":{"a":"1"}},"rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec(),
            br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[],"DIFF_IDS":["x"]}}"#.to_vec(),
            br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":"x"}}"#.to_vec(),
        ];
        for c in cases {
            let e = check_config(&c).expect_err(&String::from_utf8_lossy(&c[..c.len().min(120)]));
            assert_eq!(crate::error::exit_code(&e), 7, "{e}");
        }
    }

    #[test]
    fn docker_conversion_of_garbage_is_an_error() {
        for raw in [
            "[]",
            "{}",
            r#"{"config":"x","layers":[]}"#,
            r#"{"config":{},"layers":[1]}"#,
            "1",
        ] {
            let e = docker_to_oci(raw.as_bytes()).expect_err(raw);
            assert_eq!(crate::error::exit_code(&e), 7, "{raw}: {e}");
        }
    }

    #[test]
    fn docker_conversion() {
        let layer = |mt: &str| serde_json::json!({"mediaType": mt, "digest": d('a'), "size": 3});
        let raw = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": layer("application/vnd.docker.container.image.v1+json"),
            "layers": [layer("application/vnd.docker.image.rootfs.diff.tar.gzip")],
        });
        let oci = docker_to_oci(raw.to_string().as_bytes()).unwrap();
        let Parsed::Manifest(m, OCI_MANIFEST) = parse(&oci).unwrap() else {
            panic!()
        };
        assert_eq!(
            m.config.media_type,
            "application/vnd.oci.image.config.v1+json"
        );
        assert_eq!(
            m.layers[0].media_type,
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        assert_eq!(m.layers[0].digest.as_str(), d('a'), "blobs are unchanged");
        let bad = serde_json::json!({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
            "config": layer("text/plain"), "layers": []});
        assert_eq!(
            crate::error::exit_code(&docker_to_oci(bad.to_string().as_bytes()).unwrap_err()),
            7
        );
    }

    #[test]
    fn platform_parse() {
        assert_eq!(
            Platform::parse("linux/arm64/v8").unwrap().to_string(),
            "linux/arm64/v8"
        );
        for bad in ["linux", "linux/", "/amd64", "a/b/c/d", "linux/am d64"] {
            assert_eq!(
                crate::error::exit_code(&Platform::parse(bad).unwrap_err()),
                2,
                "{bad}"
            );
        }
    }
}
