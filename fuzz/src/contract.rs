//! The contract every parser of untrusted input keeps, one check per fuzz
//! target: no panic, no hang, and an error is the documented exit code (README's
//! table) with no secret in its message. Shared by the libFuzzer binary
//! (fuzz/fuzz_targets/fuzz.rs) and the main test suite (tests/once/robust.rs), which
//! replays fuzz/corpus/TARGET/* through the same checks.
//!
//! Only public entry points of the library: others change the insides.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hostpull::digest::Sha256Digest;
use hostpull::error::{Kind, exit_code};
use hostpull::imgref::{Dest, ImageRef};
use hostpull::manifest::{self, Parsed, Platform};

/// A target's check: panics if `data` breaks the contract.
pub type Check = fn(&[u8]);

/// Every target: its name (the corpus directory) and its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("manifest", manifest_target),
    ("manifest_go", manifest_go_target),
    ("config", config_target),
    ("docker_to_oci", docker_to_oci_target),
    ("imgref", imgref_target),
    ("authfile", authfile_target),
    ("pull_secret", pull_secret_target),
    ("registries_conf", registries_conf_target),
    ("policy", policy_target),
    ("registries_d", registries_d_target),
    ("provider_config", provider_config_target),
    ("provider_answer", provider_answer_target),
    ("sigstore_payload", sigstore_payload_target),
    ("sigstore_attachment", sigstore_attachment_target),
    ("sigstore_bundle", sigstore_bundle_target),
    ("hostpull_config", hostpull_config_target),
    ("classify", classify_target),
];

/// Seeds carry this in every secret; no error message may show it.
pub const SECRET_MARK: &str = "s3cr3t";

fn expect_code(what: &str, e: &anyhow::Error, codes: &[i32]) {
    let code = exit_code(e);
    assert!(
        codes.contains(&code),
        "{what}: exit {code}, not one of {codes:?}: {e:#}"
    );
}

fn no_secret(what: &str, e: &anyhow::Error) {
    let msg = format!("{e:#}");
    assert!(!msg.contains(SECRET_MARK), "{what}: a secret in {msg:?}");
}

/// A scratch directory for this process, for the targets that read files: on
/// tmpfs where there is one (a write to disk costs more than the parse).
/// Each target writes the same fixed set of files every time, so a file is
/// overwritten, never left over from an earlier input.
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        match shm.is_dir() {
            true => tempfile::tempdir_in(shm),
            false => tempfile::tempdir(),
        }
        .expect("scratch dir")
    })
    .path()
}

fn write(rel: &str, data: &[u8]) -> PathBuf {
    let p = scratch().join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, data).unwrap();
    p
}

fn image() -> ImageRef {
    ImageRef::parse("quay.io/fedora/fedora-bootc:42").unwrap()
}

/// `data` split at its first NUL: two inputs from one.
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// Manifest and index parsing, then the platform choice and the Docker
/// conversion of what was accepted.
pub fn manifest_target(data: &[u8]) {
    let parsed = match manifest::parse(data) {
        Err(e) => return expect_code("manifest::parse", &e, &[7]),
        Ok(p) => p,
    };
    match parsed {
        Parsed::Index(index) => {
            assert!(!index.manifests.is_empty());
            for want in [
                "linux/amd64",
                "linux/arm64",
                "linux/arm/v7",
                "windows/amd64",
            ] {
                let want = Platform::parse(want).unwrap();
                match manifest::select(&index, &want) {
                    Err(e) => expect_code("select", &e, &[4]),
                    Ok(d) => {
                        let p = d.platform.as_ref().expect("chosen without a platform");
                        assert_eq!((&p.os, &p.architecture), (&want.os, &want.architecture));
                    }
                }
            }
        }
        Parsed::Manifest(m, media_type) => {
            assert!(m.layers.len() <= manifest::LAYERS_MAX);
            assert!(
                m.blobs().all(|d| d.urls.is_empty()),
                "foreign URLs accepted"
            );
            if media_type == manifest::DOCKER_MANIFEST {
                match manifest::docker_to_oci(data) {
                    Err(e) => expect_code("docker_to_oci", &e, &[7]),
                    Ok(oci) => match manifest::parse(&oci) {
                        Ok(Parsed::Manifest(o, manifest::OCI_MANIFEST)) => {
                            let digests = |m: &manifest::Manifest| {
                                m.blobs()
                                    .map(|d| (d.digest.clone(), d.size))
                                    .collect::<Vec<_>>()
                            };
                            assert_eq!(digests(&o), digests(&m), "conversion changed blobs");
                        }
                        other => panic!("the conversion is not an OCI manifest: {other:?}"),
                    },
                }
            }
        }
    }
}

/// Differential: whatever hostpull accepts, a Go `encoding/json` reader
/// (skopeo's) must read alike — same config, same layers, same index entries —
/// and must not find it ambiguous.
pub fn manifest_go_target(data: &[u8]) {
    let Ok(parsed) = manifest::parse(data) else {
        return;
    };
    let go = go::read(data).unwrap_or_else(|e| panic!("hostpull accepts, Go refuses: {e}"));
    match parsed {
        Parsed::Manifest(m, _) => {
            assert!(go.manifests.is_none(), "Go sees an index too");
            let config = go.config.expect("Go sees no config");
            assert_eq!(config, go::Desc::of(&m.config), "config");
            let layers: Vec<_> = m.layers.iter().map(go::Desc::of).collect();
            assert_eq!(go.layers.unwrap_or_default(), layers, "layers");
        }
        Parsed::Index(i) => {
            assert!(
                go.config.is_none() && go.layers.is_none(),
                "Go sees a manifest too"
            );
            let entries: Vec<_> = i.manifests.iter().map(go::Desc::of).collect();
            assert_eq!(go.manifests.unwrap_or_default(), entries, "index entries");
        }
    }
}

/// The image config check: what it accepts, a consumer can parse.
pub fn config_target(data: &[u8]) {
    match manifest::check_config(data) {
        Err(e) => expect_code("check_config", &e, &[7]),
        Ok(declared) => {
            let v: serde_json::Value = serde_json::from_slice(data).expect("accepted, not JSON");
            assert!(v.is_object(), "accepted a config that is not an object");
            // The platform checked is the one a reader of the JSON finds.
            assert_eq!(v["os"], declared.os.as_str(), "os");
            assert_eq!(v["architecture"], declared.architecture.as_str(), "arch");
            let variant = v["variant"].as_str().filter(|v| !v.is_empty());
            assert_eq!(variant, declared.variant.as_deref(), "variant");
        }
    }
}

pub fn docker_to_oci_target(data: &[u8]) {
    match manifest::docker_to_oci(data) {
        Err(e) => expect_code("docker_to_oci", &e, &[7]),
        Ok(out) => {
            serde_json::from_slice::<serde_json::Value>(&out).expect("output is JSON");
        }
    }
}

/// Image references, destinations (`oci:DIR:TAG`, `ostree:REPO:REF`) and
/// platforms: usage errors (2), and what parses prints back to itself.
pub fn imgref_target(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match ImageRef::parse(s) {
        Err(e) => expect_code("ImageRef::parse", &e, &[2]),
        Ok(r) => {
            let again = ImageRef::parse(&r.to_string())
                .unwrap_or_else(|e| panic!("{r} does not parse back: {e}"));
            assert_eq!(again, r, "round trip of {s:?}");
            let _ = r.to_transport();
            let _ = r.repository();
        }
    }
    if let Err(e) = Dest::parse(s) {
        expect_code("Dest::parse", &e, &[2]);
    }
    match Platform::parse(s) {
        Err(e) => expect_code("Platform::parse", &e, &[2]),
        Ok(p) => assert_eq!(p.to_string(), s),
    }
    if let Some(d) = Sha256Digest::parse(s) {
        assert_eq!(d.as_str(), s);
    }
}

/// The real machine, its default files below `root`: the targets write
/// their input to files, and hostpull reads them as it would on a host.
fn system(root: &Path) -> hostpull::host::System {
    hostpull::host::System::open(root).unwrap()
}

fn creds_target(data: &[u8], rel: &str, source: fn(PathBuf) -> hostpull::plan::auth::Source) {
    use hostpull::plan::auth::{Matching, Source, resolve};
    let path = write(rel, data);
    let matching = match source(PathBuf::new()) {
        Source::PullSecret(_) => Matching::Kubelet,
        _ => Matching::Containers,
    };
    // A long host too: globs in keys are matched label by label against it.
    let long = vec!["a".repeat(60); 3].join(".");
    for image in [
        image(),
        ImageRef::parse(&format!("127.0.0.1:5000/a/b@sha256:{}", "0".repeat(64))).unwrap(),
        ImageRef::parse(&format!("{long}.example/x:1")).unwrap(),
    ] {
        match resolve(
            &system(Path::new("/")),
            &[(source(path.clone()), matching)],
            &image,
        ) {
            // 2: a bad file; 3: a credential helper it names failed.
            Err(e) => {
                expect_code(rel, &e, &[2, 3]);
                if !names_hold_mark(data) {
                    no_secret(rel, &e);
                }
            }
            Ok(chosen) => assert!(chosen.iter().all(|c| c.host == image.domain)),
        }
    }
}

/// Whether a name in a credentials file holds [`SECRET_MARK`]: a key (a
/// registry) or a credential helper's name may be quoted in an error, a
/// value (`auth`, `password`) never. Also inside base64 JSON, as a Secret's
/// `data` holds it.
fn names_hold_mark(data: &[u8]) -> bool {
    use base64::Engine as _;
    use serde_json::Value as V;
    fn walk(v: &V, helpers: bool) -> bool {
        match v {
            V::Object(m) => m
                .iter()
                .any(|(k, v)| k.contains(SECRET_MARK) || walk(v, helpers || k == "credHelpers")),
            V::Array(a) => a.iter().any(|v| walk(v, helpers)),
            V::String(s) if helpers => s.contains(SECRET_MARK),
            V::String(s) => base64::engine::general_purpose::STANDARD
                .decode(s.trim())
                .ok()
                .and_then(|b| serde_json::from_slice::<V>(&b).ok())
                .is_some_and(|inner| walk(&inner, false)),
            _ => false,
        }
    }
    // Read as hostpull reads it: YAML (a superset of JSON) into JSON values.
    let text = String::from_utf8_lossy(data);
    serde_yaml::from_str::<V>(&text).is_ok_and(|v| walk(&v, false))
}

/// containers-auth.json.
pub fn authfile_target(data: &[u8]) {
    creds_target(data, "auth.json", hostpull::plan::auth::Source::Authfile);
}

/// A pull secret: dockerconfigjson or dockercfg, in a Secret (YAML or JSON) or bare.
pub fn pull_secret_target(data: &[u8]) {
    creds_target(
        data,
        "secret.yaml",
        hostpull::plan::auth::Source::PullSecret,
    );
}

/// registries.conf, and (after a NUL) a drop-in in registries.conf.d; then the
/// route for an image, and the worker's registries.conf, which must be TOML.
pub fn registries_conf_target(data: &[u8]) {
    use hostpull::plan::registries;
    let (main, dropin) = split(data);
    let root = scratch().join("regroot");
    write("regroot/etc/containers/registries.conf", main);
    write("regroot/etc/containers/registries.conf.d/50-x.conf", dropin);
    for explicit in [None, Some(root.join("etc/containers/registries.conf"))] {
        let conf = match registries::load(&system(&root), explicit.as_deref()) {
            Err(e) => return expect_code("registries::load", &e, &[2]),
            Ok(c) => c,
        };
        for image in [
            image(),
            ImageRef::parse("registry.local:5000/x/y:1").unwrap(),
            ImageRef::parse("fedora:40").unwrap(),
        ] {
            if let Err(e) = registries::check_short_name(&conf.short_names, &image) {
                expect_code("registries::check_short_name", &e, &[2]);
            }
            match registries::route(&conf.tables, &image) {
                Err(e) => expect_code("registries::route", &e, &[2]),
                Ok(route) => {
                    let _ = route.hosts();
                    match registries::worker_conf(&route) {
                        Err(e) => expect_code("registries::worker_conf", &e, &[2]),
                        Ok(conf) => assert!(
                            conf.parse::<toml::Table>().is_ok(),
                            "the worker's registries.conf is not TOML: {conf:?}"
                        ),
                    }
                }
            }
        }
    }
}

/// policy.json for an image.
pub fn policy_target(data: &[u8]) {
    use hostpull::plan::policy;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for image in [
        image(),
        ImageRef::parse(&format!("localhost:5000/a@sha256:{}", "1".repeat(64))).unwrap(),
    ] {
        match policy::apply(
            &system(Path::new("/")),
            Path::new("/etc/containers/policy.json"),
            text,
            &image,
        ) {
            Err(e) => expect_code("policy::apply", &e, &[2]),
            Ok(applied) => {
                let _ = applied.describe();
                let _ = applied.accepts_anything();
            }
        }
    }
}

/// A registries.d YAML file, and (after a NUL) a second one.
pub fn registries_d_target(data: &[u8]) {
    use hostpull::plan::policy;
    let (one, two) = split(data);
    let dir = scratch().join("registries.d");
    write("registries.d/a.yaml", one);
    write("registries.d/b.yaml", two);
    let text = r#"{"default":[{"type":"insecureAcceptAnything"}]}"#;
    let host = system(Path::new("/"));
    let mut applied = policy::apply(&host, Path::new("policy.json"), text, &image()).unwrap();
    if let Err(e) = policy::lookaside(&host, &mut applied, &dir, &image()) {
        expect_code("policy::lookaside", &e, &[2]);
    }
}

/// kubelet's CredentialProviderConfig (YAML or JSON): args and env may hold secrets.
pub fn provider_config_target(data: &[u8]) {
    use hostpull::plan::provider;
    let path = write("provider.yaml", data);
    match provider::load_config(&system(Path::new("/")), &path) {
        Err(e) => {
            expect_code("provider::load_config", &e, &[2]);
            no_secret("provider::load_config", &e);
        }
        Ok(c) => {
            for p in &c.providers {
                assert!(!p.name.is_empty() && !p.name.contains('/'));
                if let Some(d) = &p.default_cache_duration {
                    duration(d);
                }
            }
        }
    }
}

/// Go durations never panic, and none is over Go's limit.
fn duration(s: &str) {
    if let Some(d) = hostpull::plan::provider::parse_duration(s) {
        assert!(d.as_secs() <= i64::MAX as u64 / 1_000_000_000, "{s}: {d:?}");
    }
}

/// A provider plugin's answer (stdout): the secret is never in the error.
pub fn provider_answer_target(data: &[u8]) {
    match hostpull::plan::provider::parse_answer("p", data) {
        Err(e) => {
            expect_code("provider::parse_answer", &e, &[2]);
            no_secret("provider::parse_answer", &e);
        }
        Ok(r) => {
            // cacheDuration is a Go duration; parse it as `store` would.
            let v: serde_json::Value = serde_json::from_slice(data).unwrap();
            if let Some(d) = v["cacheDuration"].as_str() {
                duration(d);
            }
            let _ = format!("{r:?}");
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        duration(s);
    }
}

/// A signature payload (simple signing, as sigstore and GPG sign it), checked
/// against a digest and each `signedIdentity` rule.
pub fn sigstore_payload_target(data: &[u8]) {
    use hostpull::internals::{ATOMIC, COSIGN, check_payload};
    use hostpull::plan::policy::Identity;
    let digest = Sha256Digest::from_hex(&"a".repeat(64));
    let rules = [
        Identity::MatchRepoDigestOrExact,
        Identity::MatchExact,
        Identity::MatchRepository,
        Identity::ExactReference {
            docker_reference: "quay.io/fedora/fedora-bootc:42".into(),
        },
        Identity::ExactRepository {
            docker_repository: "quay.io/fedora/fedora-bootc".into(),
        },
    ];
    for rule in &rules {
        for kind in [COSIGN, ATOMIC] {
            if check_payload(data, kind, &digest, &image(), rule).is_ok() {
                // What root accepted signs this manifest, as a reader of the
                // JSON (containers/image's exact-key parser) finds it.
                let v: serde_json::Value =
                    serde_json::from_slice(data).expect("accepted, not JSON");
                let c = &v["critical"];
                assert_eq!(c["image"]["docker-manifest-digest"], digest.as_str());
                assert_eq!(c["type"], kind);
            }
        }
    }
}

/// A sigstore attachment layer: its annotations (JSON) and, after a NUL, its
/// payload; checked under Fulcio + Rekor, keys + Rekor and PKI trust roots
/// (containers/image's fixtures). Certificates, chains and Rekor SETs are
/// parsed from untrusted bytes: no panic, and whatever is accepted verified.
pub fn sigstore_attachment_target(data: &[u8]) {
    use hostpull::internals::verify_attachment;
    use hostpull::plan::policy::{
        Fulcio, Identity, Pki, PublicKey, Rekor, Signer, parse_pem_certificates,
    };
    const FULCIO: &str = include_str!("../../src/signature/testdata/fulcio_v1.crt.pem");
    const REKOR: &str = include_str!("../../src/signature/testdata/rekor.pub");
    const COSIGN: &str = include_str!("../../src/signature/testdata/cosign.pub");
    const ROOTS: &str = include_str!("../../src/signature/testdata/pki_root_crts.pem");
    let _ = parse_pem_certificates(data);
    let _ = std::str::from_utf8(data).map(PublicKey::from_pem);
    let (annotations, payload) = split(data);
    let Ok(annotations) =
        serde_json::from_slice::<std::collections::BTreeMap<String, String>>(annotations)
    else {
        return;
    };
    let rekor = Rekor {
        keys: vec![PublicKey::from_pem(REKOR).unwrap()],
        source: "rekor.pub".into(),
    };
    let signers = [
        Signer::Fulcio(Box::new(Fulcio {
            ca: parse_pem_certificates(FULCIO.as_bytes()).unwrap(),
            ca_source: "fulcio".into(),
            oidc_issuer: "https://github.com/login/oauth".into(),
            subject_email: "mitr@redhat.com".into(),
        })),
        Signer::Keys(vec![PublicKey::from_pem(COSIGN).unwrap()]),
        Signer::Pki(Box::new(Pki {
            roots: parse_pem_certificates(ROOTS.as_bytes()).unwrap(),
            intermediates: Vec::new(),
            source: "pki".into(),
            subject_email: Some("qiwan@redhat.com".into()),
            subject_hostname: Some("myhost.example.com".into()),
        })),
    ];
    let digest = Sha256Digest::from_hex(&"a".repeat(64));
    for (i, signer) in signers.iter().enumerate() {
        let rekor = (i < 2).then_some(&rekor);
        let r = verify_attachment(
            signer,
            rekor,
            &Identity::MatchRepository,
            &image(),
            &digest,
            annotations.clone(),
            payload.to_vec(),
            1_764_633_600,
        );
        if r.is_ok() {
            // Accepted: the payload names this digest.
            let v: serde_json::Value = serde_json::from_slice(payload).expect("accepted, not JSON");
            assert_eq!(
                v["critical"]["image"]["docker-manifest-digest"],
                digest.as_str()
            );
        }
    }
}

/// A cosign bundle (protobuf-specs JSON), as a referrer's layer holds it;
/// checked under keys without and with Rekor, Fulcio + Rekor and PKI, for an
/// image pinned by digest. Accepted only if it signs that digest.
pub fn sigstore_bundle_target(data: &[u8]) {
    use hostpull::internals::verify_bundle;
    use hostpull::plan::policy::{
        Fulcio, Identity, Pki, PublicKey, Rekor, Signer, parse_pem_certificates,
    };
    const FULCIO: &str = include_str!("../../src/signature/testdata/fulcio_v1.crt.pem");
    const REKOR: &str = include_str!("../../src/signature/testdata/rekor.pub");
    const COSIGN: &str = include_str!("../../src/signature/testdata/cosign.pub");
    const ROOTS: &str = include_str!("../../src/signature/testdata/pki_root_crts.pem");
    let rekor = Rekor {
        keys: vec![PublicKey::from_pem(REKOR).unwrap()],
        source: "rekor.pub".into(),
    };
    let keys = || Signer::Keys(vec![PublicKey::from_pem(COSIGN).unwrap()]);
    let signers = [
        (keys(), None),
        (keys(), Some(&rekor)),
        (
            Signer::Fulcio(Box::new(Fulcio {
                ca: parse_pem_certificates(FULCIO.as_bytes()).unwrap(),
                ca_source: "fulcio".into(),
                oidc_issuer: "https://github.com/login/oauth".into(),
                subject_email: "mitr@redhat.com".into(),
            })),
            Some(&rekor),
        ),
        (
            Signer::Pki(Box::new(Pki {
                roots: parse_pem_certificates(ROOTS.as_bytes()).unwrap(),
                intermediates: Vec::new(),
                source: "pki".into(),
                subject_email: Some("qiwan@redhat.com".into()),
                subject_hostname: None,
            })),
            None,
        ),
    ];
    let digest = Sha256Digest::from_hex(&"a".repeat(64));
    let pinned = ImageRef::parse(&format!("quay.io/fedora/fedora-bootc@{digest}")).unwrap();
    for (signer, rekor) in &signers {
        let r = verify_bundle(
            signer,
            *rekor,
            &Identity::MatchRepoDigestOrExact,
            &pinned,
            &digest,
            data.to_vec(),
            1_764_633_600,
        );
        // No input is signed by the fixtures' keys for this digest: the
        // contract is no panic, and never an acceptance.
        assert!(r.is_err(), "accepted: {r:?}");
    }
}

/// hostpull's config.toml (and drop-ins), and a pull profile after a NUL.
pub fn hostpull_config_target(data: &[u8]) {
    use cap_std_ext::cap_std::{ambient_authority, fs::Dir};
    let (config, profile) = split(data);
    if let Ok(text) = std::str::from_utf8(config)
        && let Err(e) = hostpull::config::parse("config.toml", text)
    {
        expect_code("config::parse", &e, &[2]);
    }
    let root = scratch().join("hproot");
    write("hproot/etc/hostpull/config.d/10-x.toml", config);
    write("hproot/etc/hostpull/pulls.d/p.toml", profile);
    let dir = Dir::open_ambient_dir(&root, ambient_authority()).unwrap();
    if let Err(e) = hostpull::config::load(&dir, &root) {
        expect_code("config::load", &e, &[2]);
    }
    if let Err(e) = hostpull::config::load_profile(&dir, &root, "p") {
        expect_code("config::load_profile", &e, &[2]);
    }
}

/// skopeo's error text: always one of the kinds a worker failure can be; and
/// whatever the registry writes where its text begins (after an error code,
/// a status, a 401's fixed words) or inside what Go quotes (a URL), the fixed
/// part before it decides.
pub fn classify_target(data: &[u8]) {
    use hostpull::internals::classify_worker_text as classify;
    let text = String::from_utf8_lossy(data);
    let kind = classify(&text);
    assert!(
        matches!(
            kind,
            Kind::Auth | Kind::NotFound | Kind::Tls | Kind::Network | Kind::Verify | Kind::Worker
        ),
        "{text:?}: {kind:?}"
    );
    // skopeo's words (1.9.3, 1.18, 1.22) up to where the registry's begin.
    const M: &str = "reading manifest v1 in 127.0.0.1:5000/x";
    let fixed = [
        (format!("{M}: denied: "), Kind::Auth),
        (format!("{M}: manifest unknown: "), Kind::NotFound),
        (format!("{M}: toomanyrequests: "), Kind::Network),
        (format!("{M}: StatusCode: 404, "), Kind::NotFound),
        (format!("{M}: StatusCode: 403, \""), Kind::Auth),
        (format!("{M}: errors:\nunauthorized: "), Kind::Auth),
        (format!("{M}: received unexpected HTTP status: 503 "), Kind::Network),
        (
            "failed to invoke method GetBlob: unable to retrieve auth token: invalid username/password: ".into(),
            Kind::Auth,
        ),
        (
            "downloading signatures for sha256:aa in r/x: error parsing HTTP 404 response body: ".into(),
            Kind::NotFound,
        ),
    ];
    for (before, want) in &fixed {
        let all = format!("{before}{text}");
        assert_eq!(classify(&all), *want, "{all:?}");
    }
    // A URL the registry chose (a redirect, a token realm), as Go quotes it.
    let url = format!(
        "pinging container registry r: Get {text:?}: dial tcp 127.0.0.1:1: connect: connection refused"
    );
    assert_eq!(classify(&url), Kind::Network, "{url:?}");
}

/// A reader with Go's `encoding/json` semantics for OCI manifests and indexes
/// (image-spec's `specs-go/v1` structs), written apart from hostpull's parser:
/// keys match fields exactly or else case-insensitively (`foldName`), the last
/// matching key wins, `null` leaves a struct or string as it was and empties a
/// slice, and a value of the wrong type is an error.
pub mod go {
    use serde::Deserialize;

    /// A JSON value with every key kept, in order.
    #[derive(Debug, Clone)]
    enum J {
        Null,
        Bool,
        Int(i128),
        Float,
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    impl<'de> Deserialize<'de> for J {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = J;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("JSON")
                }
                fn visit_unit<E>(self) -> Result<J, E> {
                    Ok(J::Null)
                }
                fn visit_bool<E>(self, _: bool) -> Result<J, E> {
                    Ok(J::Bool)
                }
                fn visit_i64<E>(self, v: i64) -> Result<J, E> {
                    Ok(J::Int(v.into()))
                }
                fn visit_u64<E>(self, v: u64) -> Result<J, E> {
                    Ok(J::Int(v.into()))
                }
                fn visit_f64<E>(self, _: f64) -> Result<J, E> {
                    Ok(J::Float)
                }
                fn visit_str<E>(self, v: &str) -> Result<J, E> {
                    Ok(J::Str(v.to_owned()))
                }
                fn visit_string<E>(self, v: String) -> Result<J, E> {
                    Ok(J::Str(v))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                    let mut v = Vec::new();
                    while let Some(e) = a.next_element()? {
                        v.push(e);
                    }
                    Ok(J::Arr(v))
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                    let mut v = Vec::new();
                    while let Some(e) = a.next_entry::<String, J>()? {
                        v.push(e);
                    }
                    Ok(J::Obj(v))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// What a consumer takes from a descriptor.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Desc {
        pub digest: String,
        pub size: i64,
        pub urls: Vec<String>,
        pub platform: Option<(String, String, String)>,
    }

    impl Desc {
        pub fn of(d: &hostpull::manifest::Descriptor) -> Self {
            Self {
                digest: d.digest.to_string(),
                size: d.size as i64,
                urls: d.urls.clone(),
                platform: d.platform.as_ref().map(|p| {
                    (
                        p.os.clone(),
                        p.architecture.clone(),
                        p.variant.clone().unwrap_or_default(),
                    )
                }),
            }
        }
    }

    /// What a consumer reads from the document, manifest and index fields at once
    /// (containers/image decodes them all to find an ambiguous one).
    #[derive(Debug, Default)]
    pub struct View {
        pub config: Option<Desc>,
        pub layers: Option<Vec<Desc>>,
        pub manifests: Option<Vec<Desc>>,
    }

    /// Go's `foldName`: upper case of lower case, rune by rune.
    fn fold(s: &str) -> String {
        s.chars()
            .map(|c| {
                let lower: Vec<char> = c.to_lowercase().collect();
                let l = if lower.len() == 1 { lower[0] } else { c };
                let upper: Vec<char> = l.to_uppercase().collect();
                if upper.len() == 1 { upper[0] } else { l }
            })
            .collect()
    }

    /// For each of `names`, every value a key matching it sets, in order. A
    /// key matches a field exactly, or else by its fold.
    fn fields<'a>(obj: &'a [(String, J)], names: &[&str]) -> Vec<Vec<&'a J>> {
        let mut out = vec![Vec::new(); names.len()];
        for (k, v) in obj {
            let i = names
                .iter()
                .position(|n| n == k)
                .or_else(|| names.iter().position(|n| fold(n) == fold(k)));
            if let Some(i) = i {
                out[i].push(v);
            }
        }
        out
    }

    /// A scalar field: `null` leaves it as it was, so the last other value wins.
    fn scalar<'a>(vs: &[&'a J]) -> Option<&'a J> {
        vs.iter().rev().find(|v| !matches!(v, J::Null)).copied()
    }

    /// A struct field: each object decodes into the same struct, so their
    /// keys add up (a later key winning); `null` leaves it as it was.
    fn merged(vs: &[&J], what: &str) -> Result<Option<Vec<(String, J)>>, String> {
        let mut all: Option<Vec<(String, J)>> = None;
        for v in vs {
            match v {
                J::Null => {}
                J::Obj(o) => all.get_or_insert_with(Vec::new).extend(o.iter().cloned()),
                other => return Err(format!("{what}: cannot unmarshal {other:?} into a struct")),
            }
        }
        Ok(all)
    }

    fn string(v: Option<&J>, what: &str) -> Result<String, String> {
        match v {
            None | Some(J::Null) => Ok(String::new()),
            Some(J::Str(s)) => Ok(s.clone()),
            Some(other) => Err(format!("{what}: cannot unmarshal {other:?} into string")),
        }
    }

    fn strings(v: Option<&J>, what: &str) -> Result<Vec<String>, String> {
        match v {
            None | Some(J::Null) => Ok(Vec::new()),
            Some(J::Arr(a)) => a.iter().map(|e| string(Some(e), what)).collect(),
            Some(other) => Err(format!("{what}: cannot unmarshal {other:?} into []string")),
        }
    }

    fn desc(obj: &[(String, J)]) -> Result<Desc, String> {
        let f = fields(obj, &["mediaType", "digest", "size", "urls", "platform"]);
        string(scalar(&f[0]), "mediaType")?;
        let size = match scalar(&f[2]) {
            None => 0,
            Some(J::Int(n)) => i64::try_from(*n).map_err(|_| "size overflows int64")?,
            Some(other) => return Err(format!("size: cannot unmarshal {other:?} into int64")),
        };
        let platform = match merged(&f[4], "platform")? {
            None => None,
            Some(p) => {
                let pf = fields(&p, &["architecture", "os", "variant"]);
                Some((
                    string(scalar(&pf[1]), "os")?,
                    string(scalar(&pf[0]), "architecture")?,
                    string(scalar(&pf[2]), "variant")?,
                ))
            }
        };
        Ok(Desc {
            digest: string(scalar(&f[1]), "digest")?,
            size,
            urls: strings(f[3].last().copied(), "urls")?,
            platform,
        })
    }

    /// A slice field: the last value wins (`null` empties it).
    fn descs(vs: &[&J]) -> Result<Option<Vec<Desc>>, String> {
        match vs.last() {
            None | Some(J::Null) => Ok(None),
            Some(J::Arr(a)) => a
                .iter()
                .map(|e| match e {
                    J::Null => Ok(Desc::default()),
                    J::Obj(o) => desc(o),
                    other => Err(format!("cannot unmarshal {other:?} into Descriptor")),
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(other) => Err(format!("cannot unmarshal {other:?} into []Descriptor")),
        }
    }

    pub fn read(bytes: &[u8]) -> Result<View, String> {
        let j: J = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let J::Obj(obj) = j else {
            return Err("not an object".into());
        };
        let f = fields(&obj, &["config", "layers", "manifests"]);
        Ok(View {
            config: merged(&f[0], "config")?.map(|c| desc(&c)).transpose()?,
            layers: descs(&f[1])?,
            manifests: descs(&f[2])?,
        })
    }
}
