//! `sigstoreSigned` requirements (signature/policy_config_sigstore.go).

use std::path::PathBuf;

use super::{Json, Keys, Raw, Why, bytes, get, object, signed_identity, string, strings};

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
        fulcio(f)?;
        sources.push(Keys::Fulcio);
    }
    if let Some(p) = get(m, "pki") {
        pki(p)?;
        sources.push(Keys::Pki);
    }
    let rekor = rekor_keys(m, what)?;
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
    if keys == Keys::Fulcio && rekor == 0 {
        return Err(format!(
            "{what}: At least one of rekorPublicKeyPath, rekorPublicKeyPaths, rekorPublicKeyData and rekorPublicKeyDatas must be specified if fulcio is used"
        ));
    }
    if keys == Keys::Pki && rekor > 0 {
        return Err(format!(
            "{what}: rekorPublicKeyPath, rekorPublicKeyPaths, rekorPublicKeyData and rekorPublicKeyDatas are not supported for pki"
        ));
    }
    Ok(Raw::SigstoreSigned {
        keys,
        rekor: rekor > 0,
        identity: signed_identity(get(m, "signedIdentity"), what)?,
    })
}

/// `fulcio`, checked (keyless sigstore: validated, not supported).
fn fulcio(f: &Json) -> Result<(), Why> {
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
    match (path.filter(|p| !p.is_empty()), data) {
        (Some(_), Some(_)) => {
            return Err("fulcio: caPath and caData cannot be used simultaneously".into());
        }
        (None, None) => {
            return Err("fulcio: At least one of caPath and caData must be specified".into());
        }
        _ => {}
    }
    for k in ["oidcIssuer", "subjectEmail"] {
        if get(f, k)
            .map(|v| string(v, k))
            .transpose()?
            .is_none_or(str::is_empty)
        {
            return Err(format!("fulcio: {k} not specified"));
        }
    }
    Ok(())
}

/// `pki`, checked (an X.509 PKI: validated, not supported).
fn pki(p: &Json) -> Result<(), Why> {
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
    match (s("caRootsPath")?, b("caRootsData")?) {
        (Some(_), Some(_)) => {
            return Err("pki: caRootsPath and caRootsData cannot be used simultaneously".into());
        }
        (None, None) => {
            return Err(
                "pki: At least one of caRootsPath and caRootsData must be specified".into(),
            );
        }
        _ => {}
    }
    let (path, data) = (s("caIntermediatesPath")?, b("caIntermediatesData")?);
    if path.is_some() && data.is_some() {
        return Err(
            "pki: caIntermediatesPath and caIntermediatesData cannot be used simultaneously".into(),
        );
    }
    if s("subjectEmail")?.is_none() && s("subjectHostname")?.is_none() {
        return Err("pki: At least one of subjectEmail, subjectHostname must be specified".into());
    }
    Ok(())
}

/// How many of the `rekorPublicKey*` fields are set, each checked.
fn rekor_keys(m: &[(String, Json)], what: &str) -> Result<usize, Why> {
    let nonempty = |k: &str, n: usize| {
        if n == 0 {
            Err(format!("{what}: {k:?} contains no entries"))
        } else {
            Ok(())
        }
    };
    let mut rekor = 0;
    for k in [
        "rekorPublicKeyPath",
        "rekorPublicKeyPaths",
        "rekorPublicKeyData",
        "rekorPublicKeyDatas",
    ] {
        let Some(v) = get(m, k) else { continue };
        let counts = match k {
            "rekorPublicKeyPath" => !string(v, k)?.is_empty(),
            "rekorPublicKeyData" => {
                bytes(v, k)?;
                true
            }
            _ => {
                let Json::Array(a) = v else {
                    return Err(format!("{what}: {k} must be a list"));
                };
                nonempty(k, a.len())?;
                for e in a {
                    if k == "rekorPublicKeyPaths" {
                        string(e, k)?;
                    } else {
                        bytes(e, k)?;
                    }
                }
                true
            }
        };
        rekor += usize::from(counts);
    }
    Ok(rekor)
}
