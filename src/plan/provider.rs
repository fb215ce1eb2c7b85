//! kubelet's credential provider exec plugins (`credentialprovider.kubelet.k8s.io/v1`):
//! run as root, with the configured args and env and a timeout, for the images
//! their `matchImages` cover; their answers are cached root-only on disk for as
//! long as they say (`cacheKeyType`, `cacheDuration`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Failure, Kind};
use crate::imgref::ImageRef;
use crate::plan::auth::{Chosen, Keyring, Secret, basic, urls_match};
use crate::plan::host::{Host, PluginCall};

const REQUEST_API: &str = "credentialprovider.kubelet.k8s.io/v1";
/// How long a plugin may take.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
/// kubelet's `CredentialProviderConfig`.
pub struct ProviderConfig {
    /// Its providers, in order.
    pub providers: Vec<Provider>,
    /// The file it was read from, for errors.
    #[serde(skip)]
    pub path: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
/// One provider: an exec plugin in the bin dir and the images it answers for.
pub struct Provider {
    /// The plugin's file name in the bin dir.
    pub name: String,
    /// The images it answers for (kubelet's URL globs).
    pub match_images: Vec<String>,
    #[serde(default)]
    /// How long its answers are cached when they do not say.
    pub default_cache_duration: Option<String>,
    /// The protocol version it speaks.
    pub api_version: String,
    /// Its arguments (they may hold secrets).
    #[serde(default)]
    pub args: Vec<Secret>,
    /// Variables added to its environment.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// KEP-4412: the plugin wants the pod's service-account token. A host
    /// pull has none, so such a provider is refused when an image matches
    /// it (never sent an empty token); it does not stop the others.
    #[serde(default)]
    pub token_attributes: Option<serde_json::Value>,
}

/// One variable of a provider's environment.
#[derive(Debug, Clone, Deserialize)]
pub struct EnvVar {
    /// Its name.
    pub name: String,
    /// Its value (it may hold a secret).
    pub value: Secret,
}

/// A plugin's answer (fields private: they hold the secret).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    #[serde(default)]
    cache_key_type: Option<String>,
    #[serde(default)]
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, AuthConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct AuthConfig {
    username: String,
    password: Secret,
}

fn bad(name: &Path, why: impl std::fmt::Display) -> anyhow::Error {
    Failure::new(
        Kind::Usage,
        format!(
            "invalid credential provider config {}: {why}",
            name.display()
        ),
    )
    .into()
}

/// Read and check a `CredentialProviderConfig` (YAML or JSON); no error quotes its values.
pub fn load_config(host: &dyn Host, path: &Path) -> anyhow::Result<ProviderConfig> {
    let text = host.read_text(path).map_err(|e| bad(path, e))?;
    let v = crate::plan::auth::parse_json_or_yaml(&text).map_err(|why| bad(path, why))?;
    if v["kind"] != "CredentialProviderConfig" {
        return Err(bad(path, "kind is not CredentialProviderConfig"));
    }
    // Its args and env may hold secrets: serde's error must not quote them.
    // The text read again into the type has the error's place.
    let mut c: ProviderConfig = serde_path_to_error::deserialize(v).map_err(|e| {
        let at = match crate::error::located::json_or_yaml::<ProviderConfig>(&text) {
            Err(l) if l.path == e.path().to_string() => l.at,
            _ => None,
        };
        let why = crate::error::located::Located {
            at,
            path: e.path().to_string(),
            message: crate::error::serde_redacted(e.inner()),
        };
        bad(path, why)
    })?;
    c.path = path.to_owned();
    // Providers by their place, not their name or values: the file may hold
    // secrets, and no error quotes it.
    for (i, p) in c.providers.iter().enumerate() {
        // kubelet's validateCredentialProviderConfig: the name is a file in
        // the bin dir, so not `.`, `..`, nor with `/` or a space.
        if p.name.is_empty() || p.name == "." || p.name == ".." || p.name.contains(['/', ' ', '\0'])
        {
            return Err(bad(
                path,
                format!("providers[{i}]: its name is not a file name"),
            ));
        }
        if p.api_version != REQUEST_API {
            return Err(bad(
                path,
                format!("providers[{i}]: apiVersion is not {REQUEST_API}"),
            ));
        }
        if p.match_images.is_empty() {
            return Err(bad(path, format!("providers[{i}]: matchImages is empty")));
        }
    }
    Ok(c)
}

/// A Go duration such as `12h`, `5m30s` or `0`. As Go's `time.ParseDuration`,
/// one over `i64::MAX` nanoseconds (about 292 years) is invalid: never a panic.
pub fn parse_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let (mut total, mut rest) = (0f64, s);
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    const GO_MAX_SECS: f64 = i64::MAX as f64 / 1e9;
    if total.is_nan() || total > GO_MAX_SECS {
        return None;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// The credentials for `image`, every one in kubelet's order, each named by
/// its provider (`credential provider NAME`) and the key it matched: each
/// provider whose `matchImages` covers the image is asked (its answer from
/// the cache while it is fresh), and all answers form one keyring, as
/// kubelet's `providersDockerKeyring` does.
pub fn credentials(
    host: &dyn Host,
    config: &ProviderConfig,
    bin_dir: &Path,
    image: &ImageRef,
) -> anyhow::Result<Vec<Chosen>> {
    // kubelet matches and asks with the repository, without tag or digest.
    let target = image.repository();
    let mut keyring = Keyring::default();
    for (i, p) in config.providers.iter().enumerate() {
        if !p.match_images.iter().any(|m| urls_match(m, &target)) {
            continue;
        }
        // By its place, not its name or values: the file may hold secrets.
        if p.token_attributes.is_some() {
            return Err(bad(
                &config.path,
                format!(
                    "providers[{i}] matches {target} but wants tokenAttributes (a pod's \
                     service-account token, KEP-4412), which a host pull does not have"
                ),
            ));
        }
        let response = match cached(host, p, image) {
            Some(r) => r,
            None => {
                let r = exec(host, p, bin_dir, &target)?;
                store(host, p, image, &r)?;
                r
            }
        };
        for (key, a) in response.auth {
            keyring.add(&key, (p.name.clone(), a));
        }
    }
    Ok(keyring
        .lookup(&target)
        .into_iter()
        .map(|(key, (name, a))| Chosen {
            host: image.domain.clone(),
            auth: basic(&a.username, a.password.expose()),
            source: format!("credential provider {name}"),
            key: key.to_owned(),
        })
        .collect())
}

fn exec(host: &dyn Host, p: &Provider, bin_dir: &Path, image: &str) -> anyhow::Result<Response> {
    let program = bin_dir.join(&p.name);
    let env: Vec<(String, String)> = p
        .env
        .iter()
        .map(|e| (e.name.clone(), e.value.expose().to_owned()))
        .collect();
    let args: Vec<String> = p.args.iter().map(|a| a.expose().to_owned()).collect();
    let request =
        json!({"apiVersion": REQUEST_API, "kind": "CredentialProviderRequest", "image": image})
            .to_string();
    let call = PluginCall {
        label: format!("credential provider {}", p.name),
        program: &program,
        args: &args,
        env: &env,
        input: request.as_bytes(),
        timeout: TIMEOUT,
    };
    let stdout = host.run(&call).map_err(|why| {
        Failure::new(
            why.kind(Kind::Auth),
            format!("credential provider {}: {why}", p.name),
        )
    })?;
    parse_answer(&p.name, &stdout)
}

/// A plugin's answer: a `CredentialProviderResponse`, or exit 2 without a word
/// of it (it holds the secret).
pub fn parse_answer(provider: &str, stdout: &[u8]) -> anyhow::Result<Response> {
    let malformed = || {
        Failure::new(
            Kind::Usage,
            format!("credential provider {provider}: malformed response"),
        )
    };
    let v: serde_json::Value = serde_json::from_slice(stdout).map_err(|_| malformed())?;
    if v["kind"] != "CredentialProviderResponse" {
        return Err(Failure::new(
            Kind::Usage,
            format!("credential provider {provider}: not a CredentialProviderResponse"),
        )
        .into());
    }
    Ok(serde_json::from_value(v).map_err(|_| malformed())?)
}

/// The cache entry's name: per provider and per key (the image, its registry,
/// or one for all, as the provider's `cacheKeyType` said).
fn cache_files(p: &Provider, image: &ImageRef) -> [(String, &'static str); 3] {
    let name = |key: &str| format!("{}-{}.json", p.name, hex::encode(key));
    [
        (name(&format!("image:{}", image.repository())), "Image"),
        (name(&format!("registry:{}", image.domain)), "Registry"),
        (name("global"), "Global"),
    ]
}

#[derive(Serialize, Deserialize)]
struct CacheEntry {
    expires: u64,
    response: Response,
}

fn now(host: &dyn Host) -> u64 {
    host.now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn cached(host: &dyn Host, p: &Provider, image: &ImageRef) -> Option<Response> {
    cache_files(p, image).into_iter().find_map(|(f, _)| {
        let e: CacheEntry = serde_json::from_slice(&host.cache_get(&f)?).ok()?;
        (e.expires > now(host)).then_some(e.response)
    })
}

fn store(host: &dyn Host, p: &Provider, image: &ImageRef, r: &Response) -> anyhow::Result<()> {
    let ttl = r
        .cache_duration
        .as_deref()
        .or(p.default_cache_duration.as_deref())
        .and_then(parse_duration)
        .unwrap_or(Duration::ZERO);
    if ttl.is_zero() {
        return Ok(());
    }
    let kind = r.cache_key_type.as_deref().unwrap_or("Image");
    let Some((file, _)) = cache_files(p, image).into_iter().find(|(_, k)| *k == kind) else {
        return Ok(());
    };
    let entry = CacheEntry {
        expires: now(host).saturating_add(ttl.as_secs()),
        response: r.clone(),
    };
    host.cache_put(&file, &serde_json::to_vec(&entry)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::MemHost;

    #[test]
    fn durations() {
        for (s, want) in [
            ("0", Some(0.0)),
            ("12h", Some(43200.0)),
            ("5m30s", Some(330.0)),
            ("1.5h", Some(5400.0)),
            ("500ms", Some(0.5)),
            ("x", None),
            ("5d", None),
            ("1us", Some(0.000001)),
            // Past Go's limit (i64 nanoseconds): invalid, not a panic.
            ("99999999999999999999h", None),
            ("2562048h", None),
            ("9".repeat(400).as_str(), None),
            (format!("{}s", "9".repeat(400)).as_str(), None),
            ("1.0.0s", None),
            (".s", None),
        ] {
            assert_eq!(parse_duration(s).map(|d| d.as_secs_f64()), want, "{s}");
        }
    }

    /// KEP-4412: a provider with `tokenAttributes` is refused when an image
    /// matches it, by its place (the file may hold secrets), and never run
    /// (it would get an empty token); it does not stop the providers of
    /// other images.
    #[test]
    fn token_attributes_refused_only_where_asked() {
        let answer = |name: &str| {
            format!(
                "{{\"kind\":\"CredentialProviderResponse\",\"cacheDuration\":\"0\",\"auth\":{{\"*.io\":{{\"username\":\"{name}\",\"password\":\"pw\"}}}}}}"
            )
        };
        let (plain, wants_token) = (answer("plain"), answer("wants-token"));
        let h = MemHost::new("/")
            .plugin("/bin/plain", Ok(&plain))
            .plugin("/bin/wants-token", Ok(&wants_token))
            .file(
                "/c.yaml",
                "kind: CredentialProviderConfig\nproviders:\n\
                 - name: wants-token\n  matchImages: [\"*.token.io\", \"both.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  tokenAttributes:\n    serviceAccountTokenAudience: s3cr3t-aud\n    requireServiceAccount: true\n\
                 - name: plain\n  matchImages: [\"*.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
            );
        let config = load_config(&h, Path::new("/c.yaml")).unwrap();
        let creds = |image: &str| {
            let image = ImageRef::parse(image).unwrap();
            credentials(&h, &config, Path::new("/bin"), &image)
        };
        let got = creds("reg.io/app").unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].source, "credential provider plain");
        assert_eq!(
            (got[0].host.as_str(), got[0].key.as_str()),
            ("reg.io", "*.io")
        );
        assert!(got[0].auth == basic("plain", "pw"));
        for image in ["x.token.io/app", "both.io/app"] {
            let e = creds(image).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{image}");
            let e = format!("{e:#}");
            assert!(
                e.contains("providers[0] matches") && e.contains("tokenAttributes"),
                "{e}"
            );
            assert!(e.contains("/c.yaml") && !e.contains("s3cr3t"), "{e}");
        }
        let ran =
            |h: &MemHost| -> Vec<String> { h.ran().into_iter().map(|(label, _)| label).collect() };
        assert_eq!(ran(&h), ["credential provider plain"]);
        // kubernetes pkg/credentialprovider/keyring_test.go,
        // TestProvidersDockerKeyring: every lookup asks the provider again
        // (here: its answer is not to be cached, cacheDuration 0).
        for _ in 0..2 {
            assert_eq!(creds("reg.io/app").unwrap().len(), 1);
        }
        assert_eq!(ran(&h), ["credential provider plain"; 3]);
        // It is asked with the repository, no tag, as kubelet asks.
        let (_, input) = &h.ran()[0];
        let request: serde_json::Value = serde_json::from_slice(input).unwrap();
        assert_eq!(request["image"], "reg.io/app");
        assert_eq!(request["kind"], "CredentialProviderRequest");
    }

    /// An answer is cached for as long as it says, under its `cacheKeyType`,
    /// and the plugin asked again once the clock has passed it.
    #[test]
    fn answers_are_cached_until_they_expire() {
        let answer = r#"{"kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"10m","auth":{"reg.io":{"username":"u","password":"p"}}}"#;
        let mut h = MemHost::new("/").plugin("/bin/p", Ok(answer)).file(
            "/c.yaml",
            "kind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: [\"reg.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
        );
        let config = load_config(&h, Path::new("/c.yaml")).unwrap();
        let ask = |h: &MemHost, image: &str| {
            let image = ImageRef::parse(image).unwrap();
            credentials(h, &config, Path::new("/bin"), &image)
                .unwrap()
                .len()
        };
        assert_eq!(ask(&h, "reg.io/a"), 1);
        // The same registry: from the cache.
        assert_eq!(ask(&h, "reg.io/b"), 1);
        assert_eq!(h.ran().len(), 1);
        assert_eq!(
            h.cached(),
            [format!("p-{}.json", hex::encode("registry:reg.io"))]
        );
        h.now += Duration::from_secs(601);
        assert_eq!(ask(&h, "reg.io/a"), 1);
        assert_eq!(h.ran().len(), 2);
    }

    /// Issue 26: a plugin that is not there, or answers more than
    /// `PLUGIN_ANSWER_MAX`, is the host's setup (exit 2, naming it); one
    /// that ran and failed is still "authentication refused" (exit 3). A
    /// config nested 100 000 levels deep is refused at once.
    #[test]
    fn plugin_failures_have_their_exit_codes() {
        let config = "kind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: [\"reg.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n";
        let huge = format!(
            r#"{{"kind":"CredentialProviderResponse","auth":{{}},"x":"{}"}}"#,
            "a".repeat(1 << 20)
        );
        // (what the plugin answers, none: not there; the exit code; the words)
        type Answer<'a> = Option<Result<&'a str, &'a str>>;
        let cases: [(Answer, i32, &str); 3] = [
            (None, 2, "/bin/p: No such file or directory"),
            (
                Some(Ok(&huge)),
                2,
                "/bin/p: its answer is larger than 1024 KiB",
            ),
            (
                Some(Err("it exited with exit status: 1")),
                3,
                "exit status: 1",
            ),
        ];
        let image = ImageRef::parse("reg.io/a").unwrap();
        for (answer, code, want) in cases {
            let mut h = MemHost::new("/").file("/c.yaml", config);
            if let Some(a) = answer {
                h = h.plugin("/bin/p", a);
            }
            let config = load_config(&h, Path::new("/c.yaml")).unwrap();
            let e = credentials(&h, &config, Path::new("/bin"), &image).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), code, "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
        let h = MemHost::new("/").file("/c.yaml", "[".repeat(100_000));
        let t = std::time::Instant::now();
        let e = load_config(&h, Path::new("/c.yaml")).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("nested more than 128 levels"), "{e}");
    }

    #[test]
    fn config_checks() {
        // The config, as the file /c.yaml.
        let load = |text: &str| {
            load_config(
                &MemHost::new("/").file("/c.yaml", text),
                Path::new("/c.yaml"),
            )
        };
        let ok = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: [\"*.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n";
        assert_eq!(load(ok).unwrap().providers[0].name, "p");
        for bad in [
            "kind: Other\n",
            &ok.replace(
                "credentialprovider.kubelet.k8s.io/v1",
                "credentialprovider.kubelet.k8s.io/v1alpha1",
            ),
            &ok.replace("name: p", "name: ../p"),
            // Issue 17, item 10: `.` and `..` are not file names either.
            &ok.replace("name: p", "name: ."),
            &ok.replace("name: p", "name: '..'"),
            &ok.replace("name: p", "name: 'a p'"),
            &ok.replace("[\"*.io\"]", "[]"),
            "{",
            // A string where a list belongs: serde would quote it in its error.
            &format!("{ok}  args: \"--token=s3cr3t-arg\"\n"),
            &format!("{ok}  env: [{{name: T, value: [s3cr3t-env]}}]\n"),
            &ok.replace(
                "apiVersion: credentialprovider",
                "apiVersion: s3cr3t-credentialprovider",
            ),
            &ok.replace("name: p", "name: s3cr3t/p"),
        ] {
            let e = load(bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(!format!("{e:#}").contains("s3cr3t"), "{e:#}");
        }
        // KEP-4412: a provider that wants a service-account token loads; it
        // is refused only when an image matches it (token_attributes_*).
        let tokens = format!(
            "{ok}  tokenAttributes:\n    serviceAccountTokenAudience: aud\n    requireServiceAccount: true\n"
        );
        assert!(
            load(&tokens).unwrap().providers[0]
                .token_attributes
                .is_some()
        );
        // Valid JSON that YAML refuses: a surrogate-pair escape.
        let json = r#"{"kind":"CredentialProviderConfig","providers":[{"name":"p","matchImages":["\ud83d\ude00.io"],"apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}"#;
        assert_eq!(
            load(json).unwrap().providers[0].match_images,
            ["\u{1f600}.io"]
        );
    }
}
