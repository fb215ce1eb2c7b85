//! Credentials: every source an image-based host has, resolved on root's side
//! to the one credential this pull needs, and the least-privilege authfile the
//! worker gets: the image's registry and nothing else.
//!
//! Matching follows the documented rules: containers-auth.json(5) for authfiles
//! (the most specific of `host/ns/…/repo`, …, `host` wins), kubelet's for pull
//! secrets and kubelet's config.json (equal port, as many host labels with `*`
//! globbing one, a path prefix, the longest key first). Sources are tried in
//! order, the first match wins: the command line's in the order given, then the
//! host's defaults.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{Failure, Kind, fail};
use crate::plan::imgref::ImageRef;

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
        prefix: String,
        file: PathBuf,
        username: String,
    },
}

/// The credential chosen for a host, and where it came from (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub host: String,
    /// base64 of `user:password`, as auth.json holds it.
    pub auth: String,
    pub source: String,
    pub key: String,
}

/// Parse `--registry-token HOST[:PORT][/PATH]=FILE`.
pub fn parse_token(arg: &str, username: &str) -> anyhow::Result<Source> {
    let Some((prefix, file)) = arg.split_once('=') else {
        return fail(
            Kind::Usage,
            format!("invalid --registry-token {arg:?}: expected HOST[:PORT][/PATH]=FILE"),
        );
    };
    let host = prefix.split('/').next().unwrap_or_default();
    if !crate::plan::imgref::valid_domain(host) {
        return fail(
            Kind::Usage,
            format!("invalid --registry-token {arg:?}: {host:?} is not HOST[:PORT]"),
        );
    }
    Ok(Source::Token {
        prefix: prefix.to_owned(),
        file: file.into(),
        username: username.to_owned(),
    })
}

/// One auth.json entry: `auth` (base64 user:pass) or `username`/`password`.
#[derive(Debug, Default, Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl Entry {
    fn auth(&self) -> Option<String> {
        match (&self.auth, &self.username, &self.password) {
            (Some(a), _, _) if !a.is_empty() => Some(a.clone()),
            (_, Some(u), Some(p)) => Some(B64.encode(format!("{u}:{p}"))),
            _ => None,
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

/// What one credentials file holds: `{key: entry}` and, in an authfile, the
/// `credHelpers` named per registry host.
#[derive(Debug, Default)]
struct FileCreds {
    entries: BTreeMap<String, Entry>,
    helpers: BTreeMap<String, String>,
}

/// Read an authfile, dockerconfigjson or dockercfg, bare or inside a Kubernetes
/// Secret (YAML or JSON).
fn read_creds(name: &Path, text: &str) -> anyhow::Result<FileCreds> {
    // YAML is a superset of JSON: one parser reads both. Errors never echo
    // the file, which holds secrets.
    let v: Value = serde_yaml::from_str(text).map_err(|_| bad(name, "not JSON or YAML"))?;
    let v = if v["kind"] == "Secret" {
        let data = &v["data"];
        let (field, inner) = match v["type"].as_str() {
            Some("kubernetes.io/dockerconfigjson") => {
                (".dockerconfigjson", &data[".dockerconfigjson"])
            }
            Some("kubernetes.io/dockercfg") => (".dockercfg", &data[".dockercfg"]),
            other => {
                return Err(bad(
                    name,
                    format!("a Secret of type {other:?}, not a docker config"),
                ));
            }
        };
        let decoded = inner
            .as_str()
            .and_then(|s| B64.decode(s.trim()).ok())
            .ok_or_else(|| bad(name, format!("data.{field} is not base64")))?;
        serde_json::from_slice(&decoded)
            .map_err(|_| bad(name, format!("data.{field} is not JSON")))?
    } else {
        v
    };
    // dockerconfigjson and auth.json have "auths"; dockercfg is the bare map.
    let map = if v.get("auths").is_some() {
        &v["auths"]
    } else {
        &v
    };
    let Some(obj) = map.as_object() else {
        return Err(bad(name, "no auths map"));
    };
    let entries = obj
        .iter()
        .filter(|(k, _)| v.get("auths").is_some() || k.as_str() != "credHelpers")
        .map(|(k, e)| {
            serde_json::from_value(e.clone())
                .map(|e| (k.clone(), e))
                .map_err(|_| bad(name, format!("entry {k:?} is malformed")))
        })
        .collect::<anyhow::Result<_>>()?;
    let helpers = match v.get("credHelpers") {
        None => BTreeMap::new(),
        Some(h) => {
            serde_json::from_value(h.clone()).map_err(|_| bad(name, "credHelpers is malformed"))?
        }
    };
    Ok(FileCreds { entries, helpers })
}

/// The most a credential helper or provider plugin may answer: an answer is a
/// few credentials, and a bigger one is refused rather than held in memory.
pub(crate) const PLUGIN_ANSWER_MAX: u64 = 1 << 20;

/// Run a credential helper or provider plugin as root: `input` on its stdin,
/// its stdout back, killed after `timeout`. Its stderr is dropped: it may hold
/// secrets. Its stdout is read while it runs (a pipe holds only 64 KiB, and a
/// plugin blocked on a full one never exits), and at most [`PLUGIN_ANSWER_MAX`]
/// of it. The error is a short reason, for the caller to put in context.
pub(crate) fn run_root_plugin(
    mut cmd: std::process::Command,
    input: &[u8],
    timeout: std::time::Duration,
) -> Result<Vec<u8>, String> {
    use std::io::{Read as _, Write as _};
    use std::process::Stdio;
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().map_err(|e| format!("{program}: {e}"))?;
    let start = std::time::Instant::now();
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut answer = Vec::new();
        let r = stdout.take(PLUGIN_ANSWER_MAX + 1).read_to_end(&mut answer);
        let _ = tx.send(r.map(|_| answer));
    });
    // A plugin that exits without reading its input is its own business.
    let _ = child.stdin.take().expect("piped").write_all(input);
    let stop = |child: &mut std::process::Child, why: String| {
        let _ = child.kill();
        let _ = child.wait();
        Err(why)
    };
    let no_answer = format!("no answer in {}s", timeout.as_secs());
    let answer = match rx.recv_timeout(timeout) {
        Ok(Ok(a)) if a.len() as u64 > PLUGIN_ANSWER_MAX => {
            return stop(
                &mut child,
                format!("its answer is larger than {} KiB", PLUGIN_ANSWER_MAX >> 10),
            );
        }
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return stop(&mut child, format!("reading its answer: {e}")),
        Err(_) => return stop(&mut child, no_answer),
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(answer),
            Ok(Some(status)) => return Err(format!("it exited with {status}")),
            Ok(None) if start.elapsed() > timeout => return stop(&mut child, no_answer),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(10)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// How long a credential helper may take.
const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Run `docker-credential-<helper> get` as root for `host`, as containers/image
/// does, with a timeout. Its answer is `{"Username": …, "Secret": …}`.
fn run_helper(helper: &str, host: &str) -> anyhow::Result<String> {
    let program = format!("docker-credential-{helper}");
    let mut c = std::process::Command::new(&program);
    c.arg("get");
    let stdout = run_root_plugin(c, host.as_bytes(), HELPER_TIMEOUT).map_err(|why| {
        Failure::new(
            Kind::Auth,
            format!("credential helper {program} for {host}: {why}"),
        )
    })?;
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        username: String,
        secret: String,
    }
    // Never echo the answer: it is the secret.
    let a: Answer = serde_json::from_slice(&stdout).map_err(|_| {
        Failure::new(
            Kind::Usage,
            format!("credential helper {program}: malformed answer"),
        )
    })?;
    Ok(B64.encode(format!("{}:{}", a.username, a.secret)))
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

/// kubelet's rules: the key gets `https://` if it has no scheme and loses a
/// leading `/v1/` or `/v2/`; ports are equal; hosts have as many labels, `*`
/// globbing one; the key's path is a string prefix of the image's path. Of
/// all matches, the longest key wins. An image with no registry host uses
/// `index.docker.io`'s entry.
pub fn match_kubelet<'a, T>(
    keys: &'a BTreeMap<String, T>,
    image: &ImageRef,
) -> Option<(&'a String, &'a T)> {
    let (img_host, img_port) = split_port(&image.domain);
    let img_host = if img_host == "docker.io" {
        "index.docker.io"
    } else {
        img_host
    };
    let matches = |key: &str| {
        let k = key.split_once("://").map_or(key, |(_, rest)| rest);
        let (hostport, path) = k.split_once('/').unwrap_or((k, ""));
        let path = path
            .strip_prefix("v1/")
            .or_else(|| path.strip_prefix("v2/"))
            .unwrap_or(path);
        let path = if path == "v1" || path == "v2" {
            ""
        } else {
            path
        };
        let (host, port) = split_port(hostport);
        let labels: Vec<&str> = host.split('.').collect();
        let img_labels: Vec<&str> = img_host.split('.').collect();
        port == img_port
            && labels.len() == img_labels.len()
            && labels.iter().zip(&img_labels).all(|(k, i)| glob(k, i))
            && image.path.starts_with(path.trim_end_matches('/'))
    };
    keys.iter()
        .filter(|(k, _)| matches(k))
        .max_by_key(|(k, _)| k.len())
}

fn split_port(hostport: &str) -> (&str, Option<&str>) {
    match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p)),
        _ => (hostport, None),
    }
}

/// A glob of one DNS label: `*` matches any run of characters.
fn glob(pattern: &str, label: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern.eq_ignore_ascii_case(label),
        Some((pre, rest)) => {
            let lower = label.to_ascii_lowercase();
            lower.starts_with(&pre.to_ascii_lowercase())
                && (0..=lower.len().saturating_sub(pre.len()))
                    .any(|i| glob(rest, &lower[pre.len() + i..]))
        }
    }
}

/// The credential for `image`'s registry: the first source with a match.
pub fn resolve(sources: &[(Source, Matching)], image: &ImageRef) -> anyhow::Result<Option<Chosen>> {
    for (source, matching) in sources {
        let (path, found) = match source {
            Source::Token {
                prefix,
                file,
                username,
            } => {
                let keys = BTreeMap::from([(prefix.clone(), ())]);
                if match_containers(&keys, image).is_none() {
                    continue;
                }
                // Re-read on every pull: tokens rotate.
                let token = std::fs::read_to_string(file).map_err(|e| {
                    Failure::new(
                        Kind::Usage,
                        format!("--registry-token {}: {e}", file.display()),
                    )
                })?;
                let auth = B64.encode(format!("{username}:{}", token.trim()));
                (file, Some((prefix.clone(), auth)))
            }
            Source::Authfile(path) | Source::PullSecret(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Failure::new(Kind::Usage, format!("reading {}: {e}", path.display()))
                })?;
                let creds = read_creds(path, &text)?;
                if let Some(helper) = creds.helpers.get(&image.domain) {
                    // A helper named for this registry answers for it.
                    let auth = run_helper(helper, &image.domain)?;
                    (path, Some((format!("credHelpers.{}", image.domain), auth)))
                } else {
                    let hit = match matching {
                        Matching::Containers => match_containers(&creds.entries, image),
                        Matching::Kubelet => match_kubelet(&creds.entries, image),
                    };
                    (path, hit.and_then(|(k, e)| Some((k.clone(), e.auth()?))))
                }
            }
        };
        if let Some((key, auth)) = found {
            return Ok(Some(Chosen {
                host: image.domain.clone(),
                auth,
                source: path.display().to_string(),
                key,
            }));
        }
    }
    Ok(None)
}

/// `user:password` as auth.json's `auth` holds it.
pub fn basic(user: &str, password: &str) -> String {
    B64.encode(format!("{user}:{password}"))
}

/// The worker's authfile: exact keys for exactly the chosen hosts.
pub fn minimal_authfile(chosen: &[Chosen]) -> Vec<u8> {
    let auths: serde_json::Map<String, Value> = chosen
        .iter()
        .map(|c| (c.host.clone(), json!({ "auth": c.auth })))
        .collect();
    serde_json::to_vec_pretty(&json!({ "auths": auths })).expect("JSON of strings")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    fn keys(k: &[&str]) -> BTreeMap<String, ()> {
        k.iter().map(|k| (k.to_string(), ())).collect()
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

    #[test]
    fn kubelet_rules() {
        let k = keys(&[
            "*.example.com",
            "reg.example.com/team",
            "reg.example.com/teamx/app",
            "https://index.docker.io/v1/",
            "localhost:5000",
            "*.*.svc:5000",
        ]);
        let cases = [
            ("reg.example.com/team/app", Some("reg.example.com/team")),
            (
                "reg.example.com/teamx/app",
                Some("reg.example.com/teamx/app"),
            ),
            ("reg.example.com/other", Some("*.example.com")),
            ("a.b.example.com/x", None),
            ("example.com/x", None),
            ("fedora", Some("https://index.docker.io/v1/")),
            ("localhost:5000/x", Some("localhost:5000")),
            ("localhost:5001/x", None),
            (
                "image-registry.openshift-image-registry.svc:5000/ns/img",
                Some("*.*.svc:5000"),
            ),
            ("a.b.c.svc:5000/ns/img", None),
            ("registry.ns.svc:5000/ns/img", Some("*.*.svc:5000")),
        ];
        for (i, want) in cases {
            assert_eq!(
                match_kubelet(&k, &img(i)).map(|(k, _)| k.as_str()),
                want,
                "{i}"
            );
        }
        // The path is a plain string prefix: /foo matches /foobar.
        let k = keys(&["reg.io/foo"]);
        assert!(match_kubelet(&k, &img("reg.io/foobar/x")).is_some());
    }

    #[test]
    fn secret_formats() {
        let td = tempfile::tempdir().unwrap();
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
            format!(
                r#"{{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/dockercfg","data":{{".dockercfg":"{}"}}}}"#,
                B64.encode(&cfg)
            ),
            r#"{"auths":{"reg.io":{"username":"u","password":"p"}}}"#.to_owned(),
        ];
        for (i, text) in cases.iter().enumerate() {
            let f = td.path().join(format!("s{i}"));
            std::fs::write(&f, text).unwrap();
            let chosen = resolve(
                &[(Source::PullSecret(f), Matching::Kubelet)],
                &img("reg.io/a/b"),
            )
            .unwrap();
            assert_eq!(chosen.map(|c| c.auth), Some(auth.clone()), "{text}");
        }
        for bad in [
            "{",
            "kind: Secret\ntype: Opaque\n",
            "kind: Secret\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: '!!'\n",
            r#"{"auths":{"reg.io":3}}"#,
        ] {
            let f = td.path().join("bad");
            std::fs::write(&f, format!("{bad}\n# secret-marker")).unwrap();
            let e = resolve(
                &[(Source::PullSecret(f), Matching::Kubelet)],
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
    fn first_source_wins_and_tokens_are_reread() {
        let td = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| {
            let p = td.path().join(n);
            std::fs::write(&p, s).unwrap();
            p
        };
        let a = w(
            "a.json",
            &format!(
                r#"{{"auths":{{"reg.io":{{"auth":"{}"}}}}}}"#,
                B64.encode("a:1")
            ),
        );
        let token = w("token", "t0k3n\n");
        let sources = vec![
            (
                parse_token(
                    &format!("reg.io/team={}", token.display()),
                    "serviceaccount",
                )
                .unwrap(),
                Matching::Containers,
            ),
            (Source::Authfile(a), Matching::Containers),
        ];
        let c = resolve(&sources, &img("reg.io/team/app")).unwrap().unwrap();
        assert_eq!(c.auth, B64.encode("serviceaccount:t0k3n"));
        std::fs::write(&token, "rotated").unwrap();
        let c = resolve(&sources, &img("reg.io/team/app")).unwrap().unwrap();
        assert_eq!(c.auth, B64.encode("serviceaccount:rotated"));
        // Outside the token's path, the authfile answers.
        let c = resolve(&sources, &img("reg.io/other/app"))
            .unwrap()
            .unwrap();
        assert_eq!(c.auth, B64.encode("a:1"));
        assert!(resolve(&sources, &img("other.io/x")).unwrap().is_none());
        let file: Value = serde_json::from_slice(&minimal_authfile(&[c])).unwrap();
        assert_eq!(
            file,
            json!({"auths": {"reg.io": {"auth": B64.encode("a:1")}}})
        );
    }
}
