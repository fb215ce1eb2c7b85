//! `sigstoreSigned` requirements (signature/policy_config_sigstore.go).

use std::path::PathBuf;

use super::{
    Json, Keys, Raw, RawFulcio, RawPki, Why, bytes, get, object, signed_identity, string, strings,
};

/// containers/image's `prSigstoreSigned.UnmarshalJSON` and `newPRSigstoreSigned`
/// (signature/policy_config_sigstore.go).
pub(super) fn sigstore(v: &Json, what: &str) -> Result<Raw, Why> {
    let m = object(
        v,
        what,
        &[
            "type",
            "keyPath",
            "keyPaths",
            "keyData",
            "keyDatas",
            "fulcio",
            "rekorPublicKeyPath",
            "rekorPublicKeyPaths",
            "rekorPublicKeyData",
            "rekorPublicKeyDatas",
            "pki",
            "signedIdentity",
        ],
    )?;
    let mut sources = key_sources(m, what)?;
    let mut rekor_sources = rekor_keys(m, what)?;
    let rekor = rekor_sources.len();
    if sources.len() != 1 {
        return Err(format!(
            "{what}: exactly one of keyPath, keyPaths, keyData, keyDatas, fulcio, and pki must be specified"
        ));
    }
    let keys = sources.remove(0);
    if rekor > 1 {
        return Err(format!(
            "{what}: at most one of rekorPublicKeyPath, rekorPublicKeyPaths, rekorPublicKeyData and rekorPublicKeyDatas can be used simultaneously"
        ));
    }
    if matches!(keys, Keys::Fulcio(_)) && rekor == 0 {
        return Err(format!(
            "{what}: At least one of rekorPublicKeyPath, rekorPublicKeyPaths, rekorPublicKeyData and rekorPublicKeyDatas must be specified if fulcio is used"
        ));
    }
    if matches!(keys, Keys::Pki(_)) && rekor > 0 {
        return Err(format!(
            "{what}: rekorPublicKeyPath, rekorPublicKeyPaths, rekorPublicKeyData and rekorPublicKeyDatas are not supported for pki"
        ));
    }
    Ok(Raw::SigstoreSigned {
        keys,
        rekor: rekor_sources.pop(),
        identity: signed_identity(get(m, "signedIdentity"), what)?,
    })
}

/// The public keys, Fulcio or PKI of a `sigstoreSigned` requirement: one
/// entry per field given (exactly one is valid).
fn key_sources(m: &[(String, Json)], what: &str) -> Result<Vec<Keys>, Why> {
    let nonempty = |k: &str, n: usize| {
        if n == 0 {
            Err(format!("{what}: {k:?} contains no entries"))
        } else {
            Ok(())
        }
    };
    let mut sources = Vec::new();
    if let Some(p) = get(m, "keyPath") {
        let p = string(p, "keyPath")?;
        if !p.is_empty() {
            sources.push(Keys::Path(p.into()));
        }
    }
    if let Some(p) = get(m, "keyPaths") {
        let p = strings(p, "keyPaths")?;
        nonempty("keyPaths", p.len())?;
        sources.push(Keys::Paths(p.into_iter().map(PathBuf::from).collect()));
    }
    if let Some(d) = get(m, "keyData") {
        sources.push(Keys::Data(bytes(d, "keyData")?));
    }
    if let Some(d) = get(m, "keyDatas") {
        let Json::Array(a) = d else {
            return Err(format!("{what}: keyDatas must be a list of base64 strings"));
        };
        nonempty("keyDatas", a.len())?;
        sources.push(Keys::Datas(
            a.iter()
                .map(|d| bytes(d, "keyDatas"))
                .collect::<Result<_, _>>()?,
        ));
    }
    if let Some(f) = get(m, "fulcio") {
        sources.push(Keys::Fulcio(Box::new(fulcio(f)?)));
    }
    if let Some(p) = get(m, "pki") {
        sources.push(Keys::Pki(Box::new(pki(p)?)));
    }
    Ok(sources)
}

/// `fulcio`, checked (keyless sigstore).
fn fulcio(f: &Json) -> Result<RawFulcio, Why> {
    let f = object(
        f,
        "fulcio",
        &["caPath", "caData", "oidcIssuer", "subjectEmail"],
    )?;
    let path = get(f, "caPath")
        .map(|p| string(p, "fulcio.caPath"))
        .transpose()?;
    let data = get(f, "caData")
        .map(|d| bytes(d, "fulcio.caData"))
        .transpose()?;
    let ca = match (path.filter(|p| !p.is_empty()), data) {
        (Some(_), Some(_)) => {
            return Err("fulcio: caPath and caData cannot be used simultaneously".into());
        }
        (None, None) => {
            return Err("fulcio: At least one of caPath and caData must be specified".into());
        }
        (Some(p), None) => Keys::Path(p.into()),
        (None, Some(d)) => Keys::Data(d),
    };
    let mut fields = Vec::new();
    for k in ["oidcIssuer", "subjectEmail"] {
        match get(f, k).map(|v| string(v, k)).transpose()? {
            Some(v) if !v.is_empty() => fields.push(v.to_owned()),
            _ => return Err(format!("fulcio: {k} not specified")),
        }
    }
    let subject_email = fields.pop().unwrap_or_default();
    let oidc_issuer = fields.pop().unwrap_or_default();
    Ok(RawFulcio {
        ca,
        oidc_issuer,
        subject_email,
    })
}

/// `pki`, checked (an X.509 PKI).
fn pki(p: &Json) -> Result<RawPki, Why> {
    let p = object(
        p,
        "pki",
        &[
            "caRootsPath",
            "caRootsData",
            "caIntermediatesPath",
            "caIntermediatesData",
            "subjectEmail",
            "subjectHostname",
        ],
    )?;
    let s = |k: &str| -> Result<Option<String>, Why> {
        Ok(get(p, k)
            .map(|v| string(v, k))
            .transpose()?
            .filter(|s| !s.is_empty())
            .map(str::to_owned))
    };
    let b = |k: &str| get(p, k).map(|v| bytes(v, k)).transpose();
    let roots = match (s("caRootsPath")?, b("caRootsData")?) {
        (Some(_), Some(_)) => {
            return Err("pki: caRootsPath and caRootsData cannot be used simultaneously".into());
        }
        (None, None) => {
            return Err(
                "pki: At least one of caRootsPath and caRootsData must be specified".into(),
            );
        }
        (Some(p), None) => Keys::Path(p.into()),
        (None, Some(d)) => Keys::Data(d),
    };
    let intermediates = match (s("caIntermediatesPath")?, b("caIntermediatesData")?) {
        (Some(_), Some(_)) => {
            return Err(
                "pki: caIntermediatesPath and caIntermediatesData cannot be used simultaneously"
                    .into(),
            );
        }
        (Some(p), None) => Some(Keys::Path(p.into())),
        (None, Some(d)) => Some(Keys::Data(d)),
        (None, None) => None,
    };
    let (subject_email, subject_hostname) = (s("subjectEmail")?, s("subjectHostname")?);
    if subject_email.is_none() && subject_hostname.is_none() {
        return Err("pki: At least one of subjectEmail, subjectHostname must be specified".into());
    }
    Ok(RawPki {
        roots,
        intermediates,
        subject_email,
        subject_hostname,
    })
}

/// The `rekorPublicKey*` fields that are set, each checked.
fn rekor_keys(m: &[(String, Json)], what: &str) -> Result<Vec<Keys>, Why> {
    let nonempty = |k: &str, n: usize| {
        if n == 0 {
            Err(format!("{what}: {k:?} contains no entries"))
        } else {
            Ok(())
        }
    };
    let mut rekor = Vec::new();
    for k in [
        "rekorPublicKeyPath",
        "rekorPublicKeyPaths",
        "rekorPublicKeyData",
        "rekorPublicKeyDatas",
    ] {
        let Some(v) = get(m, k) else { continue };
        let keys = match k {
            "rekorPublicKeyPath" => match string(v, k)? {
                "" => continue,
                p => Keys::Path(p.into()),
            },
            "rekorPublicKeyData" => Keys::Data(bytes(v, k)?),
            _ => {
                let Json::Array(a) = v else {
                    return Err(format!("{what}: {k} must be a list"));
                };
                nonempty(k, a.len())?;
                if k == "rekorPublicKeyPaths" {
                    Keys::Paths(
                        a.iter()
                            .map(|e| string(e, k).map(PathBuf::from))
                            .collect::<Result<_, _>>()?,
                    )
                } else {
                    Keys::Datas(a.iter().map(|e| bytes(e, k)).collect::<Result<_, _>>()?)
                }
            }
        };
        rekor.push(keys);
    }
    Ok(rekor)
}
