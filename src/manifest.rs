//! The registry's manifests as root sees them: strict parsing of untrusted bytes,
//! and the choice of one platform from an index. Pure functions.

use std::fmt;

use serde::Deserialize;

use crate::error::{Kind, fail};
use crate::plan::imgref::Sha256Digest;

/// A manifest or index larger than this is refused before it is parsed.
pub const MANIFEST_MAX: u64 = 4 << 20;
/// More layers than this is not an OS image but an attack on our memory and time.
pub const LAYERS_MAX: usize = 1024;
/// A config is small JSON; a huge one is refused like a huge manifest.
pub const CONFIG_MAX: u64 = 16 << 20;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Sha256Digest,
    pub size: u64,
    #[serde(default)]
    pub urls: Vec<String>,
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default)]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

impl Manifest {
    /// Every blob this manifest needs: the config first, then the layers.
    pub fn blobs(&self) -> impl Iterator<Item = &Descriptor> {
        std::iter::once(&self.config).chain(&self.layers)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    #[serde(default)]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

/// What a registry's manifest bytes turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A single-platform image, with its media type (OCI or Docker schema2).
    Manifest(Manifest, &'static str),
    Index(Index),
}

/// Parse untrusted manifest bytes. Anything malformed is a verification failure (7).
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
    let media_type = match probe.media_type.as_deref() {
        Some(OCI_INDEX) | Some(DOCKER_LIST) => OCI_INDEX,
        Some(OCI_MANIFEST) => OCI_MANIFEST,
        Some(DOCKER_MANIFEST) => DOCKER_MANIFEST,
        None if probe.manifests.is_some() => OCI_INDEX,
        None => OCI_MANIFEST,
        Some(other) => {
            return fail(
                Kind::Verify,
                format!("unsupported manifest media type {other:?}"),
            );
        }
    };
    if media_type == OCI_INDEX {
        let index: Index = serde_json::from_slice(bytes).map_err(malformed)?;
        if index.manifests.is_empty() {
            return fail(Kind::Verify, "malformed manifest: index lists no manifests");
        }
        return Ok(Parsed::Index(index));
    }
    let m: Manifest = serde_json::from_slice(bytes).map_err(malformed)?;
    if m.layers.len() > LAYERS_MAX {
        return fail(
            Kind::Verify,
            format!(
                "manifest lists {} layers, more than the limit of {LAYERS_MAX}",
                m.layers.len()
            ),
        );
    }
    if let Some(foreign) = m.layers.iter().find(|l| !l.urls.is_empty()) {
        // A foreign layer asks the client to fetch from another server, maybe
        // without TLS or with our credentials. Everything comes from the registry.
        return fail(
            Kind::Verify,
            format!(
                "layer {} names foreign URLs; hostpull fetches only from the registry",
                foreign.digest
            ),
        );
    }
    if m.config.size > CONFIG_MAX {
        return fail(Kind::Verify, "image config is larger than 16 MiB");
    }
    Ok(Parsed::Manifest(
        m,
        if media_type == DOCKER_MANIFEST {
            DOCKER_MANIFEST
        } else {
            OCI_MANIFEST
        },
    ))
}

/// Rewrite a verified Docker schema2 manifest as an OCI manifest, as `skopeo
/// copy` does for an `oci:` destination: skopeo 1.9.3 reads only OCI media types
/// from a layout's index. Only media types change; the config and layer blobs
/// stay byte for byte what the registry served, so their digests still hold.
pub fn docker_to_oci(raw: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(raw)?;
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
    v["mediaType"] = OCI_MANIFEST.into();
    convert(&mut v["config"]["mediaType"])?;
    for layer in v["layers"].as_array_mut().into_iter().flatten() {
        convert(&mut layer["mediaType"])?;
    }
    Ok(serde_json::to_vec(&v)?)
}

/// `OS/ARCH[/VARIANT]`, with Go's names (`linux/amd64`, `linux/arm64/v8`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl Platform {
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
                format!("invalid platform {s:?}: expected OS/ARCH[/VARIANT]"),
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
/// does: OS and architecture must match; a requested variant must match; without
/// one, an entry without a variant (or arm64's implicit `v8`) is preferred.
pub fn select<'a>(index: &'a Index, want: &Platform) -> anyhow::Result<&'a Descriptor> {
    let candidates = index.manifests.iter().filter(|d| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == want.os && p.architecture == want.architecture)
    });
    let variant = |d: &Descriptor| d.platform.as_ref().and_then(|p| p.variant.clone());
    let chosen = match &want.variant {
        Some(v) => candidates.clone().find(|d| variant(d).as_ref() == Some(v)),
        None => candidates
            .clone()
            .find(|d| matches!(variant(d).as_deref(), None | Some("v8")))
            .or_else(|| candidates.clone().next()),
    };
    match chosen {
        Some(d) => Ok(d),
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
