//! policy.json as containers/image reads it (`NewPolicyFromBytes`,
//! signature/policy_config.go): every scope of every transport checked, the
//! `docker` transport's requirements kept.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use base64::Engine as _;
use serde::Deserialize;

use super::Identity;
use crate::imgref::ImageRef;

mod sigstore;

/// A JSON value as containers/image's `ParanoidUnmarshalJSONObject` reads
/// policy.json: an object keeps its keys in order, and a repeated key is an
/// error (serde_json's maps would keep the last one silently).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Json {
    Null,
    Bool(bool),
    Number,
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Json, E> {
        Ok(Json::Number)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Json, E> {
        Ok(Json::Number)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Json, E> {
        Ok(Json::Number)
    }
    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Json::Array(out))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out: Vec<(String, Json)> = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.iter().any(|(o, _)| *o == k) {
                return Err(serde::de::Error::custom(format!("Duplicate key {k:?}")));
            }
            let v = map.next_value()?;
            out.push((k, v));
        }
        Ok(Json::Object(out))
    }
}

pub(super) type Why = String;

/// An object's members, refusing keys outside `allowed`.
pub(super) fn object<'a>(
    v: &'a Json,
    what: &str,
    allowed: &[&str],
) -> Result<&'a [(String, Json)], Why> {
    let Json::Object(m) = v else {
        return Err(format!("{what}: JSON object expected"));
    };
    if let Some((k, _)) = m.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
        return Err(format!("{what}: Unknown key {k:?}"));
    }
    Ok(m)
}

pub(super) fn get<'a>(m: &'a [(String, Json)], key: &str) -> Option<&'a Json> {
    m.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A member that must be present, as in `ParanoidUnmarshalJSONObjectExactFields`.
pub(super) fn required<'a>(
    m: &'a [(String, Json)],
    key: &str,
    what: &str,
) -> Result<&'a Json, Why> {
    get(m, key).ok_or_else(|| format!("{what}: Key {key:?} missing in a JSON object"))
}

/// A JSON string. `null` is refused too: Go would read it as "" in some
/// places, which every such field then refuses or ignores.
pub(super) fn string<'a>(v: &'a Json, what: &str) -> Result<&'a str, Why> {
    match v {
        Json::String(s) => Ok(s),
        _ => Err(format!("{what} must be a string")),
    }
}

pub(super) fn strings(v: &Json, what: &str) -> Result<Vec<String>, Why> {
    match v {
        Json::Array(a) => a
            .iter()
            .map(|s| string(s, what).map(str::to_owned))
            .collect(),
        _ => Err(format!("{what} must be a list of strings")),
    }
}

/// Go's `[]byte`: standard base64 (line breaks ignored).
pub(super) fn bytes(v: &Json, what: &str) -> Result<Vec<u8>, Why> {
    let s: String = string(v, what)?
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n'))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|_| format!("{what} is not base64"))
}

/// Where a requirement's keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Keys {
    Path(PathBuf),
    Paths(Vec<PathBuf>),
    Data(Vec<u8>),
    Datas(Vec<Vec<u8>>),
    /// Keyless sigstore: Fulcio certificates.
    Fulcio(Box<RawFulcio>),
    /// Sigstore with an X.509 PKI.
    Pki(Box<RawPki>),
}

/// `fulcio` as containers/image parses it (`prSigstoreSignedFulcio`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawFulcio {
    /// `caPath` or `caData`.
    pub(super) ca: Keys,
    pub(super) oidc_issuer: String,
    pub(super) subject_email: String,
}

/// `pki` as containers/image parses it (`prSigstoreSignedPKI`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawPki {
    /// `caRootsPath` or `caRootsData`.
    pub(super) roots: Keys,
    /// `caIntermediatesPath` or `caIntermediatesData`.
    pub(super) intermediates: Option<Keys>,
    pub(super) subject_email: Option<String>,
    pub(super) subject_hostname: Option<String>,
}

/// One requirement as containers/image parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Raw {
    InsecureAcceptAnything,
    Reject,
    SignedBy {
        key_type: String,
        keys: Keys,
        identity: Identity,
    },
    SignedBaseLayer,
    SigstoreSigned {
        keys: Keys,
        /// `rekorPublicKey{Path,Paths,Data,Datas}`.
        rekor: Option<Keys>,
        identity: Identity,
    },
}

/// The whole file, checked: every scope of every transport, not only the
/// one an image uses. Only the `docker` transport's scopes are kept.
#[derive(Debug)]
pub(super) struct RawPolicy {
    pub(super) default: Vec<Raw>,
    pub(super) docker: Option<BTreeMap<String, Vec<Raw>>>,
}

/// containers/image's `NewPolicyFromBytes` (signature/policy_config.go):
/// the same structure, keys and values. Deliberate differences: `null` is
/// refused wherever a value is expected, and the scope names of transports
/// other than `docker` are not checked (hostpull pulls only from registries).
pub(super) fn parse_policy(text: &str) -> Result<RawPolicy, Why> {
    let v: Json = serde_json::from_str(text).map_err(|e| crate::error::one_line(&e.to_string()))?;
    let top = object(&v, "policy", &["default", "transports"])?;
    let default = requirements(
        get(top, "default").ok_or("Default policy is missing")?,
        "default",
    )?;
    let mut docker = None;
    if let Some(t) = get(top, "transports") {
        let Json::Object(transports) = t else {
            return Err("transports: JSON object expected".into());
        };
        for (transport, scopes) in transports {
            let Json::Object(scopes) = scopes else {
                return Err(format!("transports.{transport}: JSON object expected"));
            };
            let mut map = BTreeMap::new();
            for (scope, reqs) in scopes {
                map.insert(
                    scope.clone(),
                    requirements(reqs, &format!("transports.{transport}.{scope:?}"))?,
                );
            }
            if transport == "docker" {
                docker = Some(map);
            }
        }
    }
    Ok(RawPolicy { default, docker })
}

pub(super) fn requirements(v: &Json, what: &str) -> Result<Vec<Raw>, Why> {
    let Json::Array(a) = v else {
        return Err(format!("{what}: a list of requirements expected"));
    };
    if a.is_empty() {
        return Err(format!(
            "{what}: List of verification policy requirements must not be empty"
        ));
    }
    a.iter()
        .enumerate()
        .map(|(i, r)| requirement(r, &format!("{what}[{i}]")))
        .collect()
}

pub(super) fn requirement(v: &Json, what: &str) -> Result<Raw, Why> {
    let Json::Object(m) = v else {
        return Err(format!("{what}: JSON object expected"));
    };
    let kind = string(required(m, "type", what)?, &format!("{what}.type"))?;
    let what = &format!("{what} ({kind})");
    Ok(match kind {
        "insecureAcceptAnything" | "reject" => {
            object(v, what, &["type"])?;
            if kind == "reject" {
                Raw::Reject
            } else {
                Raw::InsecureAcceptAnything
            }
        }
        "signedBy" => signed_by(v, what)?,
        "signedBaseLayer" => {
            let m = object(v, what, &["type", "baseLayerIdentity"])?;
            identity(required(m, "baseLayerIdentity", what)?, what)?;
            Raw::SignedBaseLayer
        }
        "sigstoreSigned" => sigstore::sigstore(v, what)?,
        other => return Err(format!("{what}: Unknown policy requirement type {other:?}")),
    })
}

/// A `signedBy` requirement (signature/policy_config.go, `newPRSignedBy`).
fn signed_by(v: &Json, what: &str) -> Result<Raw, Why> {
    let m = object(
        v,
        what,
        &[
            "type",
            "keyType",
            "keyPath",
            "keyPaths",
            "keyData",
            "signedIdentity",
        ],
    )?;
    let key_type = match get(m, "keyType") {
        Some(k) => string(k, "keyType")?,
        None => "",
    };
    if !matches!(
        key_type,
        "GPGKeys" | "signedByGPGKeys" | "X509Certificates" | "signedByX509CAs"
    ) {
        return Err(format!("{what}: Unrecognized keyType value {key_type:?}"));
    }
    let given: Vec<&str> = ["keyPath", "keyPaths", "keyData"]
        .into_iter()
        .filter(|k| get(m, k).is_some())
        .collect();
    let keys = match given[..] {
        ["keyPath"] => match string(required(m, "keyPath", what)?, "keyPath")? {
            "" => {
                return Err(format!(
                    "{what}: exactly one of keyPath, keyPaths and keyData must be specified (keyPath is empty)"
                ));
            }
            p => Keys::Path(p.into()),
        },
        ["keyPaths"] => Keys::Paths(
            strings(required(m, "keyPaths", what)?, "keyPaths")?
                .into_iter()
                .map(PathBuf::from)
                .collect(),
        ),
        ["keyData"] => Keys::Data(bytes(required(m, "keyData", what)?, "keyData")?),
        [] => {
            return Err(format!(
                "{what}: Exactly one of keyPath, keyPaths and keyData must be specified, none of them present"
            ));
        }
        _ => {
            return Err(format!(
                "{what}: Exactly one of keyPath, keyPaths and keyData must be specified, more than one present"
            ));
        }
    };
    Ok(Raw::SignedBy {
        key_type: key_type.to_owned(),
        keys,
        identity: signed_identity(get(m, "signedIdentity"), what)?,
    })
}

/// `signedIdentity`: absent is `matchRepoDigestOrExact`; present (even `null`)
/// must be a valid identity object.
pub(super) fn signed_identity(v: Option<&Json>, what: &str) -> Result<Identity, Why> {
    match v {
        None => Ok(Identity::MatchRepoDigestOrExact),
        Some(v) => identity(v, &format!("{what}.signedIdentity")),
    }
}

/// Whether a reference names a tag or a digest, not only a repository.
pub(super) fn has_tag_or_digest(s: &str) -> bool {
    s.contains('@') || s.rsplit('/').next().is_some_and(|last| last.contains(':'))
}

/// containers/image's `validateIdentityRemappingPrefix`: a host, or a
/// repository name that starts with one.
pub(super) fn valid_remap_prefix(s: &str) -> bool {
    crate::imgref::valid_domain(s)
        || s.split_once('/').is_some_and(|(d, rest)| {
            crate::imgref::valid_domain(d)
                && rest.split('/').all(crate::imgref::valid_path_component)
        })
}

/// containers/image's `newPolicyReferenceMatchFromJSON`: exact fields per type,
/// and references that parse.
pub(super) fn identity(v: &Json, what: &str) -> Result<Identity, Why> {
    let Json::Object(m) = v else {
        return Err(format!("{what}: JSON object expected"));
    };
    let kind = match get(m, "type") {
        Some(Json::String(s)) => s.as_str(),
        _ => "",
    };
    let exact = |fields: &[&str]| -> Result<(), Why> {
        object(v, what, fields)?;
        for f in fields {
            required(m, f, what)?;
        }
        Ok(())
    };
    let reference = |key: &str| -> Result<String, Why> {
        let s = string(required(m, key, what)?, key)?;
        if s.contains("://") {
            return Err(format!(
                "{what}: Invalid format of {key} {s:?}: not a bare reference"
            ));
        }
        ImageRef::parse(s)
            .map(|_| s.to_owned())
            .map_err(|e| format!("{what}: Invalid format of {key} {s:?}: {e}"))
    };
    Ok(match kind {
        "matchExact" | "matchRepoDigestOrExact" | "matchRepository" => {
            exact(&["type"])?;
            match kind {
                "matchExact" => Identity::MatchExact,
                "matchRepository" => Identity::MatchRepository,
                _ => Identity::MatchRepoDigestOrExact,
            }
        }
        "exactReference" => {
            exact(&["type", "dockerReference"])?;
            let r = reference("dockerReference")?;
            if !has_tag_or_digest(&r) {
                return Err(format!(
                    "{what}: dockerReference {r:?} contains neither a tag nor digest"
                ));
            }
            Identity::ExactReference {
                docker_reference: r,
            }
        }
        "exactRepository" => {
            exact(&["type", "dockerRepository"])?;
            Identity::ExactRepository {
                docker_repository: reference("dockerRepository")?,
            }
        }
        "remapIdentity" => {
            exact(&["type", "prefix", "signedPrefix"])?;
            for k in ["prefix", "signedPrefix"] {
                let p = string(required(m, k, what)?, k)?;
                if !valid_remap_prefix(p) {
                    return Err(format!("{what}: {k} {p:?} is not valid"));
                }
            }
            Identity::RemapIdentity {
                prefix: string(required(m, "prefix", what)?, "prefix")?.to_owned(),
                signed_prefix: string(required(m, "signedPrefix", what)?, "signedPrefix")?
                    .to_owned(),
            }
        }
        other => {
            return Err(format!(
                "{what}: Unknown policy reference match type {other:?}"
            ));
        }
    })
}
