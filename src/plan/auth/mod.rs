//! Credentials: every source an image-based host has, resolved on root's side
//! to the credentials this pull may try, and the least-privilege authfile the
//! worker gets for each try: the image's registry and nothing else.
//!
//! Matching follows the documented rules: containers-auth.json(5) for authfiles
//! (the most specific of `host/ns/…/repo`, …, `host` wins), kubelet's keyring
//! (`pkg/credentialprovider/keyring.go`) for pull secrets, kubelet's
//! config.json and credential provider answers. Every match is a candidate, in
//! order: the command line's sources in the order given (all pull secrets
//! together as one keyring, as kubelet merges them), then the host's defaults.
//! A pull tries the next candidate only when the registry refuses one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{Failure, Kind, fail, quoted};
use crate::plan::host::{Host, PluginCall};

mod keyring;
use crate::imgref::ImageRef;
pub use crate::secret::Secret;
pub use keyring::{Keyring, urls_match};
#[cfg(test)]
use keyring::{glob, glob_steps, is_default_registry};

/// The host's own credential files, tried in this order when no source is
/// given (or always, after the given ones, unless `--no-default-creds`).
pub const DEFAULT_SOURCES: &[(&str, Matching)] = &[
    ("run/ostree/auth.json", Matching::Containers),
    ("etc/ostree/auth.json", Matching::Containers),
    ("usr/lib/ostree/auth.json", Matching::Containers),
    ("var/lib/kubelet/config.json", Matching::Kubelet),
];

/// How a source's keys match an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    /// containers-auth.json(5).
    Containers,
    /// kubelet's credential keys.
    Kubelet,
}

/// Where credentials may come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// containers-auth.json: `--authfile`, `REGISTRY_AUTH_FILE`, ostree's auth.json.
    Authfile(PathBuf),
    /// A Kubernetes pull secret (dockerconfigjson or dockercfg, YAML or JSON, or
    /// the bare content); kubelet's config.json is read the same way.
    PullSecret(PathBuf),
    /// A service-account token for `HOST[:PORT][/PATH]`, re-read on every pull.
    Token {
        /// The `HOST[:PORT][/PATH]` it is for, matched as an authfile key.
        prefix: String,
        /// The file holding the token.
        file: PathBuf,
        /// The user name sent with it (`--registry-token-user`).
        username: String,
    },
}

/// The credential chosen for a host, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The registry host (`host[:port]`) it is for.
    pub host: String,
    /// base64 of `user:password`, as auth.json holds it.
    pub auth: Secret,
    /// Where it came from: a file, `credential provider NAME`.
    pub source: String,
    /// The key it matched in its source.
    pub key: String,
}

/// Parse `--registry-token HOST[:PORT][/PATH]=FILE`.
pub fn parse_token(arg: &str, username: &str) -> anyhow::Result<Source> {
    let Some((prefix, file)) = arg.split_once('=') else {
        return fail(
            Kind::Usage,
            format!(
                "invalid --registry-token: expected HOST[:PORT][/PATH]=FILE: {}",
                quoted(arg)
            ),
        );
    };
    let host = prefix.split('/').next().unwrap_or_default();
    if !crate::imgref::valid_domain(host) {
        return fail(
            Kind::Usage,
            format!(
                "invalid --registry-token: not HOST[:PORT]: {}",
                quoted(host)
            ),
        );
    }
    Ok(Source::Token {
        prefix: prefix.to_owned(),
        file: file.into(),
        username: username.to_owned(),
    })
}

/// One auth.json entry: `auth` (base64 user:pass) or `username`/`password`.
/// Every field is a string, as kubelet's `DockerConfigEntry` types them, so
/// that `"email": false` fails the file as it fails kubelet.
#[derive(Debug, Default, Deserialize)]
struct Entry {
    auth: Option<Secret>,
    username: Option<String>,
    password: Option<Secret>,
    #[allow(dead_code)]
    email: Option<String>,
}

/// Go's `base64.StdEncoding` and `RawStdEncoding`: padding required or
/// refused, non-zero trailing bits accepted (Go is not `Strict` by default).
const GO_STD: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
);
const GO_RAW: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
);

/// Go's decoders skip `\r` and `\n` anywhere in the input.
fn go_decode(engine: &base64::engine::GeneralPurpose, s: &str) -> Option<Vec<u8>> {
    let s: String = s.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    engine.decode(s).ok()
}

/// `user:password`, re-encoded the one way skopeo reads it.
fn user_colon_password(decoded: &[u8]) -> Option<Secret> {
    decoded
        .contains(&b':')
        .then(|| Secret::from(B64.encode(decoded)))
}

impl Entry {
    /// kubelet's `decodeDockerConfigFieldAuth`: padded base64 when it ends in
    /// `=`, else unpadded, and it must hold a `:`. `auth` overrides
    /// `username`/`password`. `Ok(None)`: the entry holds no credential.
    fn kubelet_auth(&self) -> Result<Option<Secret>, &'static str> {
        match self.auth.as_ref().map(Secret::expose) {
            Some(a) if !a.is_empty() => {
                let engine = if a.trim().ends_with('=') {
                    &GO_STD
                } else {
                    &GO_RAW
                };
                let decoded = go_decode(engine, a).ok_or("auth is not base64")?;
                user_colon_password(&decoded)
                    .map(Some)
                    .ok_or("auth is not base64 of user:password")
            }
            _ => Ok(self.basic()),
        }
    }

    /// containers/image's `decodeDockerAuth`: padded base64; without a `:`
    /// the entry holds no credential, with a warning, as docker does.
    fn containers_auth(&self) -> Result<Option<Secret>, &'static str> {
        match self.auth.as_ref().map(Secret::expose) {
            Some(a) if !a.is_empty() => {
                let decoded = go_decode(&GO_STD, a).ok_or("auth is not base64")?;
                Ok(user_colon_password(&decoded))
            }
            _ => Ok(self.basic()),
        }
    }

    fn basic(&self) -> Option<Secret> {
        match (&self.username, &self.password) {
            (None, None) => None,
            (u, p) => Some(basic(
                u.as_deref().unwrap_or_default(),
                p.as_ref().map(Secret::expose).unwrap_or_default(),
            )),
        }
    }
}

fn bad(name: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    Failure::new(
        Kind::Usage,
        format!("invalid credentials file {}: {why}", name.display()),
    )
    .into()
}

/// JSON, which every writer of these files produces, else YAML (a Kubernetes
/// Secret as `kubectl get -o yaml` prints it). JSON first: YAML refuses some
/// valid JSON, such as a surrogate-pair escape or a key over 1024 characters.
/// The error is a short reason with the line and column that quotes nothing
/// of the text.
pub(crate) fn parse_json_or_yaml(text: &str) -> Result<Value, String> {
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    use crate::plan::nesting::{TOO_DEEP, yaml};
    match yaml(text) {
        Ok(v) => Ok(v),
        Err(why) if why == TOO_DEEP => Err(why),
        Err(_) => Err(crate::error::located::not_json_or_yaml(text)),
    }
}

/// What one credentials file holds: `{key: entry}` and, in an authfile, the
/// `credHelpers` named per registry host (kubelet ignores them).
#[derive(Debug, Default)]
struct FileCreds {
    entries: BTreeMap<String, Entry>,
    helpers: BTreeMap<String, String>,
}

/// Read an authfile, dockerconfigjson or dockercfg, bare or inside a Kubernetes
/// Secret (YAML or JSON). A Secret's `type` says which of the two it holds, as
/// kubelet's `secretsToTrackedDockerConfigs` reads it: a dockerconfigjson
/// without `auths` holds no credential, and in a dockercfg every key is a
/// registry. A Secret whose data key does not fit its type holds none either.
/// A bare file is a dockerconfigjson when it has `auths`. `credHelpers` are
/// read (and checked) only with `helpers`: for an authfile.
fn read_creds(name: &Path, text: &str, helpers: bool) -> anyhow::Result<FileCreds> {
    // Errors never echo the file, which holds secrets.
    let v = parse_json_or_yaml(text).map_err(|why| bad(name, why))?;
    let mut config_json = v.get("auths").is_some();
    let secret = v["kind"] == "Secret";
    let v = if secret {
        let field = match v["type"].as_str() {
            Some("kubernetes.io/dockerconfigjson") => ".dockerconfigjson",
            Some("kubernetes.io/dockercfg") => ".dockercfg",
            other => {
                return Err(bad(
                    name,
                    format!("a Secret of type {other:?}, not a docker config"),
                ));
            }
        };
        let inner = &v["data"][field];
        if inner.is_null() || inner == "" {
            tracing::warn!(
                "{}: a Secret of type {} without data.{field} holds no credential",
                name.display(),
                v["type"].as_str().unwrap_or_default()
            );
            return Ok(FileCreds::default());
        }
        let decoded = inner
            .as_str()
            .and_then(|s| B64.decode(s.trim()).ok())
            .ok_or_else(|| bad(name, format!("data.{field} is not base64")))?;
        config_json = field == ".dockerconfigjson";
        serde_json::from_slice(&decoded)
            .map_err(|_| bad(name, format!("data.{field} is not JSON")))?
    } else {
        v
    };
    // dockerconfigjson and auth.json have "auths"; dockercfg is the bare map.
    let empty = Value::Object(serde_json::Map::new());
    let map = match v.get("auths") {
        Some(Value::Null) | None if config_json => &empty,
        Some(auths) if config_json => auths,
        _ => &v,
    };
    let Some(obj) = map.as_object() else {
        return Err(bad(name, "no auths map"));
    };
    let entries = obj
        .iter()
        .filter(|(k, _)| config_json || k.as_str() != "credHelpers")
        .map(|(k, e)| {
            serde_json::from_value(e.clone())
                .map(|e| (k.clone(), e))
                .map_err(|_| match (secret, locate_entry(text, config_json, k)) {
                    (false, Some(l)) => bad(name, l),
                    _ => bad(name, format!("entry {k:?} is malformed")),
                })
        })
        .collect::<anyhow::Result<_>>()?;
    let helpers: BTreeMap<String, String> = match v.get("credHelpers") {
        Some(h) if helpers => {
            serde_json::from_value(h.clone()).map_err(|_| bad(name, "credHelpers is malformed"))?
        }
        _ => BTreeMap::new(),
    };
    if let Some((host, _)) = helpers
        .iter()
        .find(|(_, h)| h.is_empty() || h.contains('/'))
    {
        return Err(bad(
            name,
            format!("credHelpers.{host:?} is not a helper name"),
        ));
    }
    Ok(FileCreds { entries, helpers })
}

/// Where in `text` (a file that is itself the docker config, not a Secret
/// holding it) entry `key` fails: the entries read again from the text, into
/// their type, whose error has the place; none if that error is another's.
fn locate_entry(
    text: &str,
    config_json: bool,
    key: &str,
) -> Option<crate::error::located::Located> {
    use crate::error::located::json_or_yaml;
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct ConfigJson {
        auths: Option<BTreeMap<String, Entry>>,
    }
    let (e, at) = match config_json {
        true => (
            json_or_yaml::<ConfigJson>(text).err()?,
            format!("auths.{key}"),
        ),
        false => (
            json_or_yaml::<BTreeMap<String, Entry>>(text).err()?,
            key.to_owned(),
        ),
    };
    let rest = e.path.strip_prefix(&at)?;
    (rest.is_empty() || rest.starts_with('.')).then_some(e)
}

/// How long a credential helper may take.
const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Run `docker-credential-<helper> get` as root for `host`, as containers/image
/// does, with a timeout. Its answer is `{"Username": …, "Secret": …}`.
fn run_helper(h: &dyn Host, helper: &str, host: &str) -> anyhow::Result<Secret> {
    let program = format!("docker-credential-{helper}");
    let call = PluginCall {
        label: format!("credential helper {program}"),
        program: Path::new(&program),
        args: &["get".to_owned()],
        env: &[],
        input: host.as_bytes(),
        timeout: HELPER_TIMEOUT,
    };
    let stdout = h.run(&call).map_err(|why| {
        Failure::new(
            why.kind(Kind::Auth),
            format!("credential helper {program} for {host}: {why}"),
        )
    })?;
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        username: String,
        secret: Secret,
    }
    // Never echo the answer: it is the secret.
    let a: Answer = serde_json::from_slice(&stdout).map_err(|_| {
        Failure::new(
            Kind::Usage,
            format!("credential helper {program}: malformed answer"),
        )
    })?;
    Ok(basic(&a.username, a.secret.expose()))
}

/// `docker.io`'s other spellings, as containers/image normalizes them.
fn normalize_host(h: &str) -> &str {
    match h {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        h => h,
    }
}

/// containers-auth.json(5): the most specific key of `host/a/b/repo`, `host/a/b`,
/// …, `host` that exists. A key may carry a scheme and `/v1/` (legacy docker).
pub fn match_containers<'a, T>(
    keys: &'a BTreeMap<String, T>,
    image: &ImageRef,
) -> Option<(&'a String, &'a T)> {
    let strip = |k: &str| {
        let k = k
            .strip_prefix("https://")
            .or_else(|| k.strip_prefix("http://"))
            .unwrap_or(k);
        let k = k.trim_end_matches('/');
        let k = k
            .strip_suffix("/v1")
            .or_else(|| k.strip_suffix("/v2"))
            .unwrap_or(k);
        let (host, path) = k.split_once('/').unwrap_or((k, ""));
        if path.is_empty() {
            normalize_host(host).to_owned()
        } else {
            format!("{}/{path}", normalize_host(host))
        }
    };
    let mut candidate = image.repository();
    loop {
        if let Some(hit) = keys.iter().find(|(k, _)| strip(k) == candidate) {
            return Some(hit);
        }
        candidate = candidate.rsplit_once('/')?.0.to_owned();
    }
}

/// Every credential for `image`'s registry, in the order a pull tries them:
/// each authfile's helper or most specific match and each token, in the order
/// given, and every kubelet source (pull secrets; kubelet's config.json) as
/// one keyring, at the place of the first. The same credential twice is
/// tried once.
pub fn resolve(
    host: &dyn Host,
    sources: &[(Source, Matching)],
    image: &ImageRef,
) -> anyhow::Result<Vec<Chosen>> {
    let chosen = |auth: Secret, source: &Path, key: String| Chosen {
        host: image.domain.clone(),
        auth,
        source: source.display().to_string(),
        key,
    };
    let mut out: Vec<Chosen> = Vec::new();
    let mut keyring_done = false;
    for (source, matching) in sources {
        match (source, matching) {
            (
                Source::Token {
                    prefix,
                    file,
                    username,
                },
                _,
            ) => {
                let keys = BTreeMap::from([(prefix.clone(), ())]);
                if match_containers(&keys, image).is_none() {
                    continue;
                }
                // Re-read on every pull: tokens rotate.
                let token = host.read_text(file).map_err(|e| {
                    Failure::new(
                        Kind::Usage,
                        format!("--registry-token {}: {e}", file.display()),
                    )
                })?;
                out.push(chosen(basic(username, token.trim()), file, prefix.clone()));
            }
            (Source::Authfile(path) | Source::PullSecret(path), Matching::Containers) => {
                let helpers = matches!(source, Source::Authfile(_));
                let creds = read_creds(path, &read(host, path)?, helpers)?;
                if let Some(helper) = creds.helpers.get(&image.domain) {
                    // A helper named for this registry answers for it.
                    let auth = run_helper(host, helper, &image.domain)?;
                    out.push(chosen(auth, path, format!("credHelpers.{}", image.domain)));
                } else if let Some((key, e)) = match_containers(&creds.entries, image) {
                    let auth = e
                        .containers_auth()
                        .map_err(|why| bad(path, format!("entry {key:?}: {why}")))?;
                    // `{}` is docker's marker for a helper; anything else is a mistake.
                    if auth.is_none() && e.auth.as_ref().is_some_and(|a| !a.expose().is_empty()) {
                        tracing::warn!(
                            "{}: entry {key:?} holds no user:password; no credential",
                            path.display()
                        );
                    }
                    out.extend(auth.map(|a| chosen(a, path, key.clone())));
                }
            }
            (_, Matching::Kubelet) if keyring_done => {}
            (_, Matching::Kubelet) => {
                keyring_done = true;
                for (key, path, auth) in kubelet_keyring(host, sources, image)? {
                    out.push(chosen(auth, path, key));
                }
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.auth.clone()));
    Ok(out)
}

/// Every kubelet source (pull secrets, kubelet's config.json) as one keyring:
/// `(key, file, auth)` for `image`, in kubelet's order.
fn kubelet_keyring<'a>(
    host: &dyn Host,
    sources: &'a [(Source, Matching)],
    image: &ImageRef,
) -> anyhow::Result<Vec<(String, &'a Path, Secret)>> {
    let mut keyring = Keyring::default();
    for (s, m) in sources {
        let (Source::Authfile(path) | Source::PullSecret(path), Matching::Kubelet) = (s, m) else {
            continue;
        };
        for (key, auth) in read_kubelet(host, path)? {
            keyring.add(&key, (path.as_path(), auth));
        }
    }
    Ok(keyring
        .lookup(&image.repository())
        .into_iter()
        .map(|(key, (path, auth))| (key.to_owned(), *path, auth.clone()))
        .collect())
}

/// A pull secret or kubelet's config.json, as kubelet reads it: every
/// `(key, auth)` that holds a credential. Any malformed entry, whatever its
/// host, fails the whole file, as in kubelet.
pub fn read_kubelet(host: &dyn Host, path: &Path) -> anyhow::Result<Vec<(String, Secret)>> {
    let mut out = Vec::new();
    for (key, e) in read_creds(path, &read(host, path)?, false)?.entries {
        let auth = e
            .kubelet_auth()
            .map_err(|why| bad(path, format!("entry {key:?}: {why}")))?;
        out.extend(auth.map(|a| (key, a)));
    }
    Ok(out)
}

fn read(host: &dyn Host, path: &Path) -> anyhow::Result<String> {
    host.read_text(path)
        .map_err(|e| Failure::new(Kind::Usage, format!("reading {}: {e}", path.display())).into())
}

/// Every credential one host may be tried with, in order. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCredentials {
    /// The registry host (`host[:port]`).
    pub host: String,
    candidates: Vec<Chosen>,
}

impl HostCredentials {
    /// The host's candidates; none without one.
    pub fn new(host: &str, candidates: Vec<Chosen>) -> Option<Self> {
        (!candidates.is_empty()).then(|| Self {
            host: host.to_owned(),
            candidates,
        })
    }

    /// In the order tried.
    pub fn candidates(&self) -> &[Chosen] {
        &self.candidates
    }

    /// Try `n`'s candidate and its index: the `n`-th, or the last one when
    /// there are fewer.
    pub fn for_try(&self, n: usize) -> (usize, &Chosen) {
        let i = n.min(self.candidates.len() - 1);
        (i, &self.candidates[i])
    }
}

/// How many credential sets a pull may try: the most candidates of any host.
pub fn attempts(all: &[HostCredentials]) -> usize {
    all.iter().map(|h| h.candidates.len()).max().unwrap_or(0)
}

/// The credential set of try `n`: each host's candidate for it
/// ([`HostCredentials::for_try`]). One credential per host, so each try's
/// authfile is as narrow as the first's.
pub fn attempt(all: &[HostCredentials], n: usize) -> Vec<Chosen> {
    all.iter().map(|h| h.for_try(n).1.clone()).collect()
}

/// `user:password` as auth.json's `auth` holds it.
pub fn basic(user: &str, password: &str) -> Secret {
    Secret::from(B64.encode(format!("{user}:{password}")))
}

/// The worker's authfile: exact keys for exactly the chosen hosts.
pub fn minimal_authfile(chosen: &[Chosen]) -> Vec<u8> {
    let auths: serde_json::Map<String, Value> = chosen
        .iter()
        .map(|c| (c.host.clone(), json!({ "auth": c.auth.expose() })))
        .collect();
    serde_json::to_vec_pretty(&json!({ "auths": auths })).expect("JSON of strings")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::MemHost;

    /// A secret prints as `<redacted>` wherever it sits: in a credential, a
    /// provider's answer or its configuration's env.
    #[test]
    fn secrets_never_print() {
        let c = Chosen {
            host: "h.io".into(),
            auth: basic("u", "s3cr3t"),
            source: "/auth.json".into(),
            key: "h.io".into(),
        };
        let shown = format!("{c:?} {} {:?}", c.auth, [&c]);
        assert!(!shown.contains(c.auth.expose()), "{shown}");
        assert!(shown.contains("auth: <redacted>"), "{shown}");
        let r = crate::plan::provider::parse_answer(
            "p",
            br#"{"kind":"CredentialProviderResponse","auth":{"h.io":{"username":"u","password":"s3cr3t"}}}"#,
        )
        .unwrap();
        assert!(!format!("{r:?}").contains("s3cr3t"), "{r:?}");
        let e: Entry = serde_json::from_str(r#"{"auth": "s3cr3t", "password": "s3cr3t"}"#).unwrap();
        assert!(!format!("{e:?}").contains("s3cr3t"), "{e:?}");
    }

    fn img(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    fn keys(k: &[&str]) -> BTreeMap<String, ()> {
        k.iter().map(|k| (k.to_string(), ())).collect()
    }

    fn keyring(k: &[(&str, &'static str)]) -> Keyring<&'static str> {
        let mut r = Keyring::default();
        for (key, v) in k {
            r.add(key, *v);
        }
        r
    }

    fn lookup(r: &Keyring<&'static str>, target: &str) -> Vec<&'static str> {
        r.lookup(target).into_iter().map(|(_, v)| *v).collect()
    }

    #[test]
    fn containers_most_specific_wins() {
        let k = keys(&[
            "quay.io",
            "quay.io/org",
            "quay.io/org/repo",
            "docker.io",
            "reg:5000",
        ]);
        let cases = [
            ("quay.io/org/repo:v1", Some("quay.io/org/repo")),
            ("quay.io/org/other", Some("quay.io/org")),
            ("quay.io/else/x", Some("quay.io")),
            ("index.docker.io/library/fedora", Some("docker.io")),
            ("fedora", Some("docker.io")),
            ("reg:5000/a", Some("reg:5000")),
            ("reg:5001/a", None),
            ("reg/a", Some("docker.io")),
            ("other.io/a", None),
        ];
        for (i, want) in cases {
            assert_eq!(
                match_containers(&k, &img(i)).map(|(k, _)| k.as_str()),
                want,
                "{i}"
            );
        }
        let legacy = keys(&["https://index.docker.io/v1/"]);
        assert!(match_containers(&legacy, &img("fedora")).is_some());
    }

    /// kubernetes pkg/credentialprovider/keyring_test.go, TestUrlsMatch.
    #[test]
    fn kubelet_urls_match() {
        let cases = [
            ("*.kubernetes.io", "prefix.kubernetes.io", true),
            ("prefix.*.io", "prefix.kubernetes.io", true),
            ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
            ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
            ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true),
            ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true),
            (
                "*.kubernetes.io:1111/blah",
                "prefix.kubernetes.io:1111/blah",
                true,
            ),
            (
                "prefix.*.io:1111/foo",
                "prefix.kubernetes.io:1111/foo/bar",
                true,
            ),
            ("*.kubernetes.io", "kubernetes.io", false),
            ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
            ("*.*.kubernetes.io", "kubernetes.io", false),
            ("kubernetes.io", "kubernetes.com", false),
            ("k*.io", "quay.io", false),
            (
                "*.kubernetes.io:1234/blah",
                "prefix.kubernetes.io:1111/blah",
                false,
            ),
            (
                "prefix.*.io/foo",
                "prefix.kubernetes.io:1111/foo/bar",
                false,
            ),
        ];
        for (g, t, want) in cases {
            assert_eq!(urls_match(g, t), want, "{g} {t}");
        }
    }

    /// keyring_test.go, TestDockerKeyringForGlob and TestKeyringMiss: each key
    /// alone, looked up as `TARGET/foo/bar`.
    #[test]
    fn kubelet_keyring_glob_hits_and_misses() {
        let hits = [
            ("https://hello.kubernetes.io", "hello.kubernetes.io"),
            ("https://*.docker.io", "prefix.docker.io"),
            ("https://prefix.*.io", "prefix.docker.io"),
            ("https://prefix.docker.*", "prefix.docker.io"),
            ("https://*.docker.io/path", "prefix.docker.io/path"),
            ("https://prefix.*.io/path", "prefix.docker.io/path/subpath"),
            ("https://prefix.docker.*/path", "prefix.docker.io/path"),
            ("https://*.docker.io:8888", "prefix.docker.io:8888"),
            ("https://prefix.*.io:8888", "prefix.docker.io:8888"),
            ("https://prefix.docker.*:8888", "prefix.docker.io:8888"),
            (
                "https://*.docker.io/path:1111",
                "prefix.docker.io/path:1111",
            ),
            ("https://*.docker.io/v1/", "prefix.docker.io/path:1111"),
            ("https://*.docker.io/v2/", "prefix.docker.io/path:1111"),
            (
                "https://prefix.docker.*/path:1111",
                "prefix.docker.io/path:1111",
            ),
            ("prefix.docker.io:1111", "prefix.docker.io:1111/path"),
            ("*.docker.io:1111", "prefix.docker.io:1111/path"),
        ];
        for (key, target) in hits {
            let r = keyring(&[(key, "foo:bar")]);
            assert_eq!(
                lookup(&r, &format!("{target}/foo/bar")),
                ["foo:bar"],
                "{key}"
            );
        }
        let misses = [
            ("https://hello.kubernetes.io", "world.mesos.org/foo/bar"),
            ("https://*.docker.com", "prefix.docker.io"),
            ("https://suffix.*.io", "prefix.docker.io"),
            ("https://prefix.docker.c*", "prefix.docker.io"),
            (
                "https://prefix.*.io/path:1111",
                "prefix.docker.io/path/subpath:1111",
            ),
            ("suffix.*.io", "prefix.docker.io"),
            // TestKeyringMissWithDockerHubCredentials.
            ("https://index.docker.io/v1/", "world.mesos.org"),
        ];
        for (key, target) in misses {
            let r = keyring(&[(key, "foo:bar")]);
            assert!(lookup(&r, &format!("{target}/foo/bar")).is_empty(), "{key}");
        }
    }

    /// keyring_test.go, TestDockerKeyringLookup and TestIssue3797: every
    /// matching key, the more specific first.
    #[test]
    fn kubelet_keyring_order() {
        let r = keyring(&[
            ("bar.example.com/pong", "grace"),
            ("bar.example.com", "ada"),
        ]);
        let cases: [(&str, &[&str]); 7] = [
            ("bar.example.com", &["ada"]),
            ("bar.example.com/pong", &["grace", "ada"]),
            ("bar.example.com/ping", &["ada"]),
            ("bar.example.com/pongz", &["grace", "ada"]),
            ("bar.example.com/pong/pang", &["grace", "ada"]),
            ("example.com", &[]),
            ("foo.example.com", &[]),
        ];
        for (target, want) in cases {
            assert_eq!(lookup(&r, target), want, "{target}");
        }
        let r = keyring(&[("https://quay.io/v1/", "rex")]);
        for target in ["quay.io", "quay.io/foo", "quay.io/foo/bar"] {
            assert_eq!(lookup(&r, target), ["rex"], "{target}");
        }
        // Index order, not key length: `*.example.com` sorts before
        // `reg.example.com`, and one key's values keep the order they came in.
        let r = keyring(&[
            ("*.example.com", "glob"),
            ("reg.example.com", "first"),
            ("https://reg.example.com", "second"),
            ("reg.example.com/team", "team"),
        ]);
        assert_eq!(
            lookup(&r, "reg.example.com/team/app"),
            ["team", "first", "second", "glob"]
        );
    }

    /// Docker Hub: kubelet looks up the normalized `docker.io/library/NAME`;
    /// the exact key `index.docker.io` answers only when nothing else does.
    /// keyring_test.go, TestKeyringHitWith{Unqualified,UnqualifiedLibrary,
    /// Qualified}DockerHub and TestIsDefaultRegistryMatch.
    #[test]
    fn kubelet_docker_hub() {
        for (key, hit) in [
            ("docker.io", true),
            ("https://docker.io", true),
            ("docker.io/library", true),
            ("docker.io/library/nginx", true),
            ("docker.*", true),
            ("index.docker.io", true),
            ("https://index.docker.io/v1/", true),
            ("*.docker.io", false),
            ("index.docker.io/library", false),
            ("docker.io/other", false),
        ] {
            let r = keyring(&[(key, "hub")]);
            let want: &[&str] = if hit { &["hub"] } else { &[] };
            assert_eq!(lookup(&r, &img("nginx").repository()), want, "{key}");
        }
        let r = keyring(&[
            ("https://index.docker.io/v1/", "hub"),
            ("docker.io", "direct"),
        ]);
        assert_eq!(lookup(&r, &img("nginx").repository()), ["direct"]);
        let r = keyring(&[("https://index.docker.io/v1/", "hub")]);
        for image in [
            "google/docker-registry",
            "jenkins",
            "index.docker.io/google/docker-registry",
        ] {
            assert_eq!(lookup(&r, &img(image).repository()), ["hub"], "{image}");
        }
        for (image, hub) in [
            ("foo/bar", true),
            ("docker.io/foo/bar", true),
            ("index.docker.io/foo/bar", true),
            ("foo", true),
            ("registry.tld/foo/bar", false),
            ("registry:5000/foo/bar", false),
            ("myhostdocker.io/foo/bar", false),
            // kubelet says true (no `.` or `:`); hostpull never sends a Docker
            // Hub credential to localhost.
            ("localhost/foo", false),
        ] {
            assert_eq!(
                is_default_registry(&img(image).repository()),
                hub,
                "{image}"
            );
        }
    }

    /// kubernetes pkg/credentialprovider/config_test.go,
    /// TestDockerConfigEntryJSONDecode and TestDecodeDockerConfigFieldAuth.
    #[test]
    fn kubelet_entry_decoding() {
        let cases = [
            (
                r#"{"username": "foo", "password": "bar", "email": "foo@example.com"}"#,
                Some("foo:bar"),
            ),
            (
                r#"{"auth": "Zm9vOmJhcg==", "email": "foo@example.com"}"#,
                Some("foo:bar"),
            ),
            (
                r#"{"username": "foo", "password": "bar", "auth": "cGluZzpwb25n", "email": "foo@example.com"}"#,
                Some("ping:pong"),
            ),
            (r#"{"auth": "pants", "email": "foo@example.com"}"#, None),
            (r#"{"email": false}"#, None),
            (r#"{"auth": "cGFudHM="}"#, None),
            // Go's decoders: unpadded when it does not end in `=`, and `\n` skipped.
            (r#"{"auth": "Zm9vOmJhcg"}"#, Some("foo:bar")),
            (r#"{"auth": "Zm9vOm\nJhcg==\n"}"#, Some("foo:bar")),
            (r#"{"auth": "Zm9vOmJhcg="}"#, None),
            // Only newlines are skipped.
            (r#"{"auth": "Zm9vOmJhcg== "}"#, None),
        ];
        for (input, want) in cases {
            let got = serde_json::from_str::<Entry>(input)
                .ok()
                .and_then(|e| e.kubelet_auth().ok().flatten());
            assert_eq!(got, want.map(|w| Secret::from(B64.encode(w))), "{input}");
        }
        // containers/image: padded only; no `:` is no credential, not an error.
        let containers = |a: &str| {
            Entry {
                auth: Some(a.into()),
                ..Default::default()
            }
            .containers_auth()
        };
        assert_eq!(
            containers("Zm9vOmJhcg=="),
            Ok(Some(Secret::from(B64.encode("foo:bar"))))
        );
        assert_eq!(containers("cGFudHM="), Ok(None));
        assert!(containers("Zm9vOmJhcg").is_err());
    }

    /// A `*` per character against a long label: bounded steps, where the
    /// old recursive matcher took exponential time (issue 17, item 2).
    #[test]
    fn glob_is_polynomial() {
        let label = "a".repeat(250);
        for pattern in [
            "*a*a*a*a*a*a*a*a*b",
            &"*".repeat(40),
            &format!("{}b", "a*".repeat(30)),
        ] {
            let (hit, steps) = glob_steps(pattern, &label);
            assert!(!hit || !pattern.ends_with('b'), "{pattern}");
            let bound = (pattern.len() + 1) * (label.len() + 1);
            assert!(steps <= bound, "{pattern}: {steps} steps > {bound}");
        }
        assert!(glob_steps(&"*".repeat(40), &label).0);
        // The whole key too: many starred labels against a long host.
        let host = vec!["a".repeat(60); 4].join(".");
        assert!(!urls_match("*a*a*a*a*a*a*a*b.*.*.*", &host));
    }

    /// Go's `filepath.Match` syntax, as kubelet uses it per label.
    #[test]
    fn glob_syntax() {
        for (pattern, label, want) in [
            ("reg?", "reg1", true),
            ("reg?", "reg", false),
            ("reg[0-9]", "reg7", true),
            ("reg[^0-9]", "reg7", false),
            ("reg[^0-9]", "regx", true),
            ("[a-c]*", "bravo", true),
            ("r\\*g", "r*g", true),
            ("r\\*g", "rug", false),
            ("REG", "reg", true),
            // Malformed: no match, as kubelet ignores ErrBadPattern.
            ("reg[", "reg[", false),
            ("reg[]", "reg", false),
            ("reg\\", "reg", false),
            ("[-a]", "a", false),
        ] {
            assert_eq!(glob(pattern, label), want, "{pattern} {label}");
        }
    }

    /// A machine with these files: `/NAME`, its text.
    fn machine(files: &[(&str, &str)]) -> MemHost {
        files
            .iter()
            .fold(MemHost::new("/"), |h, (name, text)| h.file(name, text))
    }

    fn secret(kind: &str, key: &str, content: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/{kind}","data":{{"{key}":"{}"}}}}"#,
            B64.encode(content)
        )
    }

    /// The `user:password` of each credential for `image` from the pull
    /// secrets `/NAME` of `h`, as kubelet reads them.
    fn kubelet(h: &MemHost, names: &[&str], image: &str) -> anyhow::Result<Vec<String>> {
        let sources: Vec<_> = names
            .iter()
            .map(|n| {
                (
                    Source::PullSecret(Path::new("/").join(n)),
                    Matching::Kubelet,
                )
            })
            .collect();
        Ok(resolve(h, &sources, &img(image))?
            .into_iter()
            .map(|c| String::from_utf8(B64.decode(c.auth.expose()).unwrap()).unwrap())
            .collect())
    }

    /// kubernetes pkg/credentialprovider/secrets/secrets_test.go,
    /// Test_MakeDockerKeyring (the default keyring's cases are in
    /// plan::tests::kubelet_default_keyring), and several secrets as one keyring.
    #[test]
    fn kubelet_secrets() {
        let auth = r#"{"auth": "dXNlcjpwYXNzd29yZA=="}"#;
        let userpass = r#"{"username": "user", "password": "password"}"#;
        let cases = [
            (
                "dockerconfigjson",
                ".dockerconfigjson",
                format!(r#"{{"auths": {{"test.registry.io": {auth}}}}}"#),
                true,
            ),
            (
                "dockercfg",
                ".dockercfg",
                format!(r#"{{"test.registry.io": {auth}}}"#),
                true,
            ),
            (
                "dockerconfigjson",
                ".dockerconfigjson",
                format!(r#"{{"auths": {{"test.registry.io": {userpass}}}}}"#),
                true,
            ),
            (
                "dockercfg",
                ".dockercfg",
                format!(r#"{{"test.registry.io": {userpass}}}"#),
                true,
            ),
            // A data key that does not fit the type: skipped, no credential.
            (
                "dockercfg",
                ".dockerconfigjson",
                format!(r#"{{"auths": {{"test.registry.io": {auth}}}}}"#),
                false,
            ),
            (
                "dockerconfigjson",
                ".dockercfg",
                format!(r#"{{"test.registry.io": {auth}}}"#),
                false,
            ),
            (
                "dockerconfigjson",
                ".dockerconfigjson",
                format!(r#"{{"auths": {{"foobar.io": {auth}}}}}"#),
                false,
            ),
        ];
        for (kind, key, content, found) in &cases {
            let h = machine(&[("s", secret(kind, key, content).as_str())]);
            let want: &[&str] = if *found { &["user:password"] } else { &[] };
            assert_eq!(
                kubelet(&h, &["s"], "test.registry.io/x").unwrap(),
                want,
                "{kind} {key}"
            );
        }
        // Two secrets, one keyring: the second's more specific key comes
        // first, and the same key keeps the secrets' order.
        let a = format!(
            r#"{{"auths": {{"reg.io": {{"auth": "{}"}}}}}}"#,
            B64.encode("a:host")
        );
        let b = format!(
            r#"{{"auths": {{"reg.io/team": {{"auth": "{}"}}, "reg.io": {{"auth": "{}"}}}}}}"#,
            B64.encode("b:team"),
            B64.encode("b:host")
        );
        let h = machine(&[("a", a.as_str()), ("b", b.as_str())]);
        assert_eq!(
            kubelet(&h, &["a", "b"], "reg.io/team/app").unwrap(),
            ["b:team", "a:host", "b:host"]
        );
        assert_eq!(
            kubelet(&h, &["a", "b"], "reg.io/other").unwrap(),
            ["a:host", "b:host"]
        );
        // A malformed entry fails the pull, whatever host it is for, as in kubelet.
        for bad in [
            r#"{"auths": {"other.io": {"auth": "pants"}, "reg.io": {"auth": "dXNlcjpwYXNzd29yZA=="}}}"#,
            r#"{"auths": {"other.io": {"auth": "cGFudHM="}}}"#,
            r#"{"auths": {"other.io": {"username": "u", "password": "p", "email": false}}}"#,
            r#"{"auths": {"reg.io": 3}}"#,
        ] {
            let e = kubelet(&machine(&[("bad", bad)]), &["bad"], "reg.io/a").unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
        }
    }

    /// kubernetes pkg/credentialprovider/config_test.go,
    /// TestDockerConfigJsonJSONDecode, TestDockerConfigJSONDecode,
    /// TestReadDockerConfigFileFromBytes, TestReadDockerConfigJSONFileFromBytes
    /// and TestReadDockerConfigFile: a dockerconfigjson (`auths`) or a bare
    /// dockercfg map, every key with its credential; broken JSON fails.
    #[test]
    fn kubelet_config_files() {
        let foo = r#""http://foo.example.com":{"username": "foo", "password": "bar", "email": "foo@example.com"}"#;
        let bar = r#""http://bar.example.com":{"username": "bar", "password": "baz", "email": "bar@example.com"}"#;
        let both = [
            ("http://bar.example.com", "bar:baz"),
            ("http://foo.example.com", "foo:bar"),
        ];
        /// A file's text, and the keys with their `user:password`, or `None` for an error.
        type Case<'a> = (String, Option<&'a [(&'a str, &'a str)]>);
        let cases: [Case; 6] = [
            (format!(r#"{{"auths": {{{foo}, {bar}}}}}"#), Some(&both)),
            (format!(r#"{{{foo}, {bar}}}"#), Some(&both)),
            (
                format!(r#"{{{foo}}}"#),
                Some(&[("http://foo.example.com", "foo:bar")]),
            ),
            (format!(r#"{{{}"#, &foo[..foo.len() - 1]), None),
            (format!(r#"{{"auths": {{{foo}, {}"#, &bar[..bar.len() - 1]), None),
            (
                r#"{ "auths": { "http://foo.example.com":{"auth":"Zm9vOmJhcgo=","email":"foo@example.com"}}}"#.into(),
                Some(&[("http://foo.example.com", "foo:bar\n")]),
            ),
        ];
        for (text, want) in &cases {
            let h = machine(&[("c", text.as_str())]);
            let got = read_kubelet(&h, Path::new("/c")).map(|v| {
                v.into_iter()
                    .map(|(k, a)| {
                        (
                            k,
                            String::from_utf8(B64.decode(a.expose()).unwrap()).unwrap(),
                        )
                    })
                    .collect::<Vec<_>>()
            });
            match (got, want) {
                (Ok(got), Some(want)) => {
                    let want: Vec<(String, String)> = want
                        .iter()
                        .map(|(k, a)| (k.to_string(), a.to_string()))
                        .collect();
                    assert_eq!(got, want, "{text}");
                }
                (Err(e), None) => assert_eq!(crate::error::exit_code(&e), 2),
                (got, _) => panic!("{text}: {got:?}"),
            }
        }
    }

    /// kubelet reads a Secret by its `type` (secrets/secrets.go,
    /// secretsToTrackedDockerConfigs): a dockerconfigjson without `auths`
    /// holds no credential, and in a dockercfg `auths` is just a key. A
    /// Secret's or a bare pull secret's `credHelpers` are ignored, as kubelet
    /// ignores them; an authfile's are checked.
    #[test]
    fn kubelet_goes_by_the_secret_type_and_ignores_cred_helpers() {
        let auth = r#"{"auth": "dXNlcjpwYXNzd29yZA=="}"#;
        for (kind, key, content) in [
            (
                "dockerconfigjson",
                ".dockerconfigjson",
                format!(r#"{{"test.registry.io": {auth}}}"#),
            ),
            (
                "dockercfg",
                ".dockercfg",
                format!(r#"{{"auths": {{"test.registry.io": {auth}}}}}"#),
            ),
        ] {
            let h = machine(&[("s", secret(kind, key, &content).as_str())]);
            assert!(
                kubelet(&h, &["s"], "test.registry.io/x")
                    .unwrap()
                    .is_empty(),
                "{kind}"
            );
        }
        let bad_helpers = [
            r#""credHelpers": {"test.registry.io": "a/b"}"#,
            r#""credHelpers": 3"#,
        ];
        for helpers in bad_helpers {
            let json = format!(r#"{{"auths": {{"test.registry.io": {auth}}}, {helpers}}}"#);
            for text in [
                json.clone(),
                secret("dockerconfigjson", ".dockerconfigjson", &json),
            ] {
                let h = machine(&[("h", text.as_str())]);
                assert_eq!(
                    kubelet(&h, &["h"], "test.registry.io/x").unwrap(),
                    ["user:password"],
                    "{text}"
                );
                let e = resolve(
                    &h,
                    &[(Source::Authfile("/h".into()), Matching::Containers)],
                    &img("test.registry.io/x"),
                )
                .unwrap_err();
                assert_eq!(crate::error::exit_code(&e), 2, "{text}");
                assert!(e.to_string().contains("credHelpers"), "{e}");
            }
        }
    }

    /// Issue 26: a helper that is not on PATH, or answers more than
    /// `PLUGIN_ANSWER_MAX`, is the host's setup (exit 2, naming it); one that
    /// ran and failed is "authentication refused" (exit 3). An authfile
    /// nested 100 000 levels deep is refused at once (YAML's scanner took
    /// over 30 s).
    #[test]
    fn helper_failures_and_deep_files_have_their_exit_codes() {
        let huge = format!(r#"{{"Username":"u","Secret":"{}"}}"#, "s".repeat(1 << 20));
        // (what the plugin answers, none: not there; the exit code; the words)
        type Answer<'a> = Option<Result<&'a str, &'a str>>;
        let cases: [(Answer, i32, &str); 3] = [
            (None, 2, "docker-credential-x: No such file or directory"),
            (
                Some(Ok(&huge)),
                2,
                "docker-credential-x: its answer is larger than",
            ),
            (
                Some(Err("it exited with exit status: 1")),
                3,
                "exit status: 1",
            ),
        ];
        for (answer, code, want) in cases {
            let mut h = MemHost::new("/");
            if let Some(a) = answer {
                h = h.plugin("docker-credential-x", a);
            }
            let e = run_helper(&h, "x", "reg.io").unwrap_err();
            assert_eq!(crate::error::exit_code(&e), code, "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
        for deep in ["[".repeat(100_000), "{\"a\":".repeat(100_000)] {
            let t = std::time::Instant::now();
            let e = read_creds(Path::new("/auth.json"), &deep, true).unwrap_err();
            assert!(
                t.elapsed() < std::time::Duration::from_secs(1),
                "{:?}",
                t.elapsed()
            );
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(
                e.to_string().contains("/auth.json: nested more than 128"),
                "{e}"
            );
        }
    }

    #[test]
    fn secret_formats() {
        let auth = B64.encode("u:p");
        let cfgjson = format!(r#"{{"auths":{{"reg.io":{{"auth":"{auth}"}}}}}}"#);
        let cfg = format!(r#"{{"reg.io":{{"auth":"{auth}"}}}}"#);
        let cases = [
            cfgjson.clone(),
            cfg.clone(),
            format!(
                "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
                B64.encode(&cfgjson)
            ),
            secret("dockercfg", ".dockercfg", &cfg),
            r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#.to_owned(),
            // Valid JSON that YAML refuses (issue 17, item 10): a surrogate
            // pair, and a key over 1024 characters.
            format!(r#"{{"auths":{{"reg.io":{{"auth":"{auth}","email":"\ud83d\ude00"}}}}}}"#),
            format!(
                r#"{{"auths":{{"reg.io":{{"auth":"{auth}"}},"{}.io":{{"auth":"{auth}"}}}}}}"#,
                "k".repeat(1100)
            ),
        ];
        for text in &cases {
            let chosen = resolve(
                &machine(&[("s", text.as_str())]),
                &[(Source::PullSecret("/s".into()), Matching::Kubelet)],
                &img("reg.io/a/b"),
            )
            .unwrap();
            assert_eq!(
                chosen
                    .into_iter()
                    .map(|c| c.auth.expose().to_owned())
                    .collect::<Vec<_>>(),
                std::slice::from_ref(&auth),
                "{text}"
            );
        }
        for bad in [
            "{",
            "kind: Secret\ntype: Opaque\n",
            "kind: Secret\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: '!!'\n",
            r#"{"auths":{"reg.io":3}}"#,
        ] {
            let e = resolve(
                &machine(&[("bad", format!("{bad}\n# secret-marker").as_str())]),
                &[(Source::PullSecret("/bad".into()), Matching::Kubelet)],
                &img("reg.io/a"),
            )
            .unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(
                e.to_string().contains("bad") && !e.to_string().contains("secret-marker"),
                "{e}"
            );
        }
    }

    #[test]
    fn every_source_in_order_and_tokens_are_reread() {
        let a = format!(
            r#"{{"auths":{{"reg.io":{{"auth":"{}"}}}}}}"#,
            B64.encode("a:1")
        );
        let h = machine(&[("a.json", a.as_str()), ("token", "t0k3n\n")]);
        let sources = vec![
            (
                parse_token("reg.io/team=/token", "serviceaccount").unwrap(),
                Matching::Containers,
            ),
            (Source::Authfile("/a.json".into()), Matching::Containers),
            // The same credential again is not tried twice.
            (Source::Authfile("/a.json".into()), Matching::Containers),
        ];
        let auths = |h: &MemHost, image: &str| -> Vec<String> {
            resolve(h, &sources, &img(image))
                .unwrap()
                .into_iter()
                .map(|c| c.auth.expose().to_owned())
                .collect()
        };
        assert_eq!(
            auths(&h, "reg.io/team/app"),
            [B64.encode("serviceaccount:t0k3n"), B64.encode("a:1")]
        );
        // The same machine, its token rewritten.
        let h = h.file("/token", "rotated");
        assert_eq!(
            auths(&h, "reg.io/team/app")[0],
            B64.encode("serviceaccount:rotated")
        );
        // Outside the token's path, only the authfile answers.
        assert_eq!(auths(&h, "reg.io/other/app"), [B64.encode("a:1")]);
        assert!(auths(&h, "other.io/x").is_empty());
        let c = resolve(&h, &sources, &img("reg.io/other/app")).unwrap();
        let file: Value = serde_json::from_slice(&minimal_authfile(&c)).unwrap();
        assert_eq!(
            file,
            json!({"auths": {"reg.io": {"auth": B64.encode("a:1")}}})
        );
    }

    /// Each try has one credential per host: the n-th, or the host's last.
    #[test]
    fn attempts_take_the_next_candidate_per_host() {
        let c = |host: &str, auth: &str| Chosen {
            host: host.into(),
            auth: auth.into(),
            source: "s".into(),
            key: host.into(),
        };
        let all = [
            HostCredentials::new("mirror", vec![c("mirror", "m1")]).unwrap(),
            HostCredentials::new(
                "primary",
                vec![c("primary", "p1"), c("primary", "p2"), c("primary", "p3")],
            )
            .unwrap(),
        ];
        assert_eq!(HostCredentials::new("none", Vec::new()), None);
        assert_eq!(attempts(&all), 3);
        let auths = |n| {
            attempt(&all, n)
                .into_iter()
                .map(|c| c.auth.expose().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(auths(0), ["m1", "p1"]);
        assert_eq!(auths(1), ["m1", "p2"]);
        assert_eq!(auths(2), ["m1", "p3"]);
        assert_eq!(attempts(&[]), 0);
        assert!(attempt(&[], 0).is_empty());
    }
}
