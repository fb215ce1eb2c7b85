//! Signature policy against real signatures: GPG simple signing made by
//! `skopeo copy --sign-by` into a file:// lookaside (also served over HTTP), and
//! sigstore attachments pushed through the registry API (tests/sign.sh).

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::util::*;

/// A policy file: `default` rejects, the rig's `hostpull` namespace gets `reqs`.
pub(crate) fn policy(dir: &Path, reqs: Value) -> PathBuf {
    let scope = format!("{}/hostpull", var("RIG_REGISTRY"));
    let p = dir.join("policy.json");
    let policy = json!({
        "default": [{"type": "reject"}],
        "transports": {"docker": {scope: reqs}},
    });
    std::fs::write(&p, policy.to_string()).unwrap();
    p
}

fn gpg_key(name: &str) -> Value {
    let key = format!("{}/{name}", var("RIG_SIG_DIR"));
    json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": key}])
}

pub(crate) fn sigstore_key(name: &str) -> Value {
    let key = format!("{}/{name}", var("RIG_SIG_DIR"));
    json!([{"type": "sigstoreSigned", "keyPath": key}])
}

/// A registries.d with one entry for the rig's registry.
pub(crate) fn registries_d(dir: &Path, lookaside: &str, attachments: bool) -> PathBuf {
    let d = dir.join("registries.d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("rig.yaml"),
        format!(
            "docker:\n  {}:\n    lookaside: {lookaside}\n    use-sigstore-attachments: {attachments}\n",
            var("RIG_REGISTRY")
        ),
    )
    .unwrap();
    d
}

pub(crate) fn file_lookaside() -> String {
    format!("file://{}/lookaside", var("RIG_SIG_DIR"))
}

/// Pull `image` into `dir/out` under `policy` and `registries.d`.
fn pull(dir: &Path, image: &str, policy: &Path, rd: &Path) -> (Run, PathBuf) {
    let out = dir.join("out");
    let mut c = with_rig_creds(pull_cmd(image, &oci(&out)));
    c.arg("--policy").arg(policy).arg("--registries.d").arg(rd);
    (run(&mut c), out)
}

/// A rejected pull: exit 9, one line naming `requirement` and `why`, and no
/// destination left behind.
pub(crate) fn assert_rejected(r: &Run, out: &Path, requirement: &str, why: &str) {
    r.assert_failure(9);
    let first = r.stderr.lines().next().unwrap_or_default();
    assert!(first.contains("signature policy rejected"), "{}", r.stderr);
    assert!(first.contains(requirement), "{requirement}: {}", r.stderr);
    assert!(first.contains(why), "{why}: {}", r.stderr);
    assert!(!out.exists(), "a rejected pull created {}", out.display());
}

#[test]
fn gpg_signed_by_the_trusted_key() {
    let s = scratch();
    let rd = registries_d(s.path(), &file_lookaside(), false);
    // The key as ASCII armor: hostpull dearmors it for gpgv.
    let p = policy(s.path(), gpg_key("signer.asc"));
    let (r, out) = pull(s.path(), var("RIG_IMG_SIGNED"), &p, &rd);
    let j = r.json();
    let fpr = var("RIG_SIGNER_FPR");
    assert_eq!(j["signature"]["verified_by"], json!([format!("gpg {fpr}")]));
    assert!(
        j["signature"]["requirement"]
            .as_str()
            .unwrap()
            .starts_with("signedBy GPGKeys"),
        "{j}"
    );
    assert_eq!(
        j["signature"]["scope"],
        format!("{}/hostpull", var("RIG_REGISTRY"))
    );
    assert_eq!(
        j["manifest_digest"],
        registry_digest(var("RIG_IMG_SIGNED")),
        "{j}"
    );
    assert!(out.join("index.json").is_file());
}

#[test]
fn gpg_rejections() {
    let s = scratch();
    let rd = registries_d(s.path(), &file_lookaside(), false);
    let signer = policy(s.path(), gpg_key("signer.asc"));
    let cases = [
        // Signed, but by a key the policy does not trust (binary keyring).
        (
            var("RIG_IMG_SIGNED"),
            gpg_key("other.gpg"),
            "signedBy GPGKeys",
            "which the policy does not trust",
        ),
        // No signature in the lookaside.
        (
            var("RIG_IMG_SMALL"),
            gpg_key("signer.asc"),
            "signedBy GPGKeys",
            "no signature found",
        ),
        // A good signature of another image, copied next to this one.
        (
            var("RIG_IMG_COPIED"),
            gpg_key("signer.asc"),
            "signedBy GPGKeys",
            "it signs manifest",
        ),
        // The scope says reject, whatever the signatures.
        (
            var("RIG_IMG_SIGNED"),
            json!([{"type": "reject"}]),
            "reject",
            "the policy rejects this image",
        ),
    ];
    for (i, (image, reqs, requirement, why)) in cases.into_iter().enumerate() {
        let d = s.path().join(i.to_string());
        std::fs::create_dir(&d).unwrap();
        let p = policy(&d, reqs);
        let (r, out) = pull(&d, image, &p, &rd);
        assert_rejected(&r, &out, requirement, why);
    }
    // An existing layout stays exactly as it was.
    let (r, out) = pull(s.path(), var("RIG_IMG_SIGNED"), &signer, &rd);
    r.json();
    let before = snapshot(&out);
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_COPIED"), &oci(&out)));
    c.arg("--policy")
        .arg(&signer)
        .arg("--registries.d")
        .arg(&rd);
    run(&mut c).assert_failure(9);
    assert_eq!(snapshot(&out), before, "a rejected pull changed the layout");
}

/// A static HTTP(S) server on 127.0.0.1 serving `dir` (tests/httpd.py
/// static), killed on drop. It logs each request as `PATH STATUS uid=UID`,
/// with the uid that owns the client's socket: who fetched, root or the
/// worker.
struct HttpServer {
    child: KillOnDrop,
    port: u16,
    log: std::io::BufReader<std::process::ChildStderr>,
}

impl HttpServer {
    /// `tls`: `--cert CRT --key KEY` to serve HTTPS with.
    fn start(dir: &str, tls: &[&str]) -> Self {
        let mut child = Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/httpd.py"))
            .args(["static", dir])
            .args(tls)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        let port = read_port(&mut child, "the lookaside server");
        let log = std::io::BufReader::new(child.stderr.take().unwrap());
        Self {
            child: KillOnDrop(child),
            port,
            log,
        }
    }

    /// The requests logged so far (the server is stopped first).
    fn requests(mut self) -> Vec<String> {
        self.child.0.kill().unwrap();
        self.child.0.wait().unwrap();
        (&mut self.log).lines().map_while(Result::ok).collect()
    }
}

#[test]
fn gpg_lookaside_over_http() {
    let s = scratch();
    let server = HttpServer::start(&format!("{}/lookaside", var("RIG_SIG_DIR")), &[]);
    let url = format!("http://127.0.0.1:{}/", server.port);
    let rd = registries_d(s.path(), &url, false);
    let p = policy(s.path(), gpg_key("signer.asc"));
    let (r, _) = pull(s.path(), var("RIG_IMG_SIGNED"), &p, &rd);
    let fpr = var("RIG_SIGNER_FPR");
    assert_eq!(
        r.json()["signature"]["verified_by"],
        json!([format!("gpg {fpr}")])
    );
    let d = s.path().join("copied");
    std::fs::create_dir(&d).unwrap();
    let (r, out) = pull(&d, var("RIG_IMG_COPIED"), &p, &rd);
    assert_rejected(&r, &out, "signedBy GPGKeys", "it signs manifest");
    // signature-1, then a 404 for signature-2, for each image, fetched by the
    // worker: a dynamic user under systemd, never root's own process there.
    let requests: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|l| l.contains(" uid="))
        .collect();
    let hex = |image: &str| registry_digest(image).replace("sha256:", "");
    let mut want = Vec::new();
    for (image, repo) in [("RIG_IMG_SIGNED", "signed"), ("RIG_IMG_COPIED", "copied")] {
        let digest = hex(var(image));
        for (n, status) in [(1, 200), (2, 404)] {
            want.push(format!(
                "/hostpull/{repo}@sha256={digest}/signature-{n} {status}"
            ));
        }
    }
    let got: Vec<&str> = requests
        .iter()
        .map(|l| l.split(" uid=").next().unwrap())
        .collect();
    assert_eq!(got, want, "{requests:#?}");
    for l in &requests {
        let uid: u32 = l.rsplit("uid=").next().unwrap().parse().unwrap();
        match sandbox().as_str() {
            "systemd" => assert!((61184..=65519).contains(&uid), "{l}"),
            _ => assert_eq!(uid, 0, "{l}"),
        }
    }
}

#[test]
fn sigstore_signed() {
    let s = scratch();
    let rd = registries_d(s.path(), &file_lookaside(), true);
    for key in ["cosign.pub", "ed25519.pub"] {
        let d = s.path().join(key);
        std::fs::create_dir(&d).unwrap();
        let p = policy(&d, sigstore_key(key));
        let (r, out) = pull(&d, var("RIG_IMG_COSIGNED"), &p, &rd);
        let j = r.json();
        let by = format!("sigstore {}/{key}", var("RIG_SIG_DIR"));
        assert_eq!(j["signature"]["verified_by"], json!([by]), "{key}");
        assert!(out.join("index.json").is_file());
    }
    let cases = [
        (
            var("RIG_IMG_COSIGNED"),
            "other-cosign.pub",
            true,
            "not signed by a key the policy trusts",
        ),
        (
            var("RIG_IMG_SMALL"),
            "cosign.pub",
            true,
            "no signature found",
        ),
        (
            var("RIG_IMG_COSIGN_COPIED"),
            "cosign.pub",
            true,
            "it signs manifest",
        ),
        // Attachments are read only where registries.d enables them.
        (
            var("RIG_IMG_COSIGNED"),
            "cosign.pub",
            false,
            "use-sigstore-attachments is not enabled",
        ),
    ];
    for (i, (image, key, attachments, why)) in cases.into_iter().enumerate() {
        let d = s.path().join(i.to_string());
        std::fs::create_dir(&d).unwrap();
        let rd = registries_d(&d, &file_lookaside(), attachments);
        let p = policy(&d, sigstore_key(key));
        let (r, out) = pull(&d, image, &p, &rd);
        assert_rejected(&r, &out, "sigstoreSigned", why);
    }
}

/// A pinned image that the layout holds is verified again on every pull: the
/// manifest comes from the layout, the signatures from the registry, through
/// a worker that asks for nothing else. A key that did not sign it rejects it
/// (exit 9), and the layout gets no tag for it.
#[test]
fn a_held_pinned_image_is_verified_again() {
    let s = scratch();
    let rd = registries_d(s.path(), &file_lookaside(), true);
    let image = var("RIG_IMG_COSIGNED");
    let digest = registry_digest(image);
    let pinned = format!("{}@{digest}", image.rsplit_once(':').unwrap().0);
    let out = s.path().join("out");
    let pull_as = |key: &str, tag: &str| {
        let d = s.path().join(tag);
        std::fs::create_dir(&d).unwrap();
        let mut c = with_rig_creds(pull_cmd(&pinned, &oci_tag(&out, tag)));
        c.arg("--policy").arg(policy(&d, sigstore_key(key)));
        run(c.arg("--registries.d").arg(&rd))
    };
    let first = pull_as("cosign.pub", "first").json();
    assert_eq!(first["layers_fetched"], 3, "{first}");
    let again = pull_as("cosign.pub", "again").json();
    assert_eq!(again["layers_fetched"], 0, "{again}");
    let by = format!("sigstore {}", sig_file("cosign.pub"));
    assert_eq!(again["signature"]["verified_by"], json!([by]), "{again}");
    let r = pull_as("other-cosign.pub", "other");
    r.assert_failure(9);
    assert!(
        r.stderr.contains("not signed by a key the policy trusts"),
        "{}",
        r.stderr
    );
    let index = std::fs::read_to_string(out.join("index.json")).unwrap();
    assert!(
        index.contains("\"again\"") && !index.contains("\"other\""),
        "{index}"
    );
}

pub(crate) fn sig_file(name: &str) -> String {
    format!("{}/{name}", var("RIG_SIG_DIR"))
}

pub(crate) const ISSUER: &str = "https://issuer.hostpull.test";
pub(crate) const EMAIL: &str = "signer@hostpull.test";

/// `sigstoreSigned` with the rig's stand-in Fulcio CA and Rekor key.
pub(crate) fn fulcio(ca: &str, issuer: &str, email: &str, rekor: &str) -> Value {
    json!([{
        "type": "sigstoreSigned",
        "fulcio": {"caPath": sig_file(ca), "oidcIssuer": issuer, "subjectEmail": email},
        "rekorPublicKeyPath": sig_file(rekor),
    }])
}

pub(crate) fn pki(roots: &str, subject: Value) -> Value {
    let mut p = json!({"caRootsPath": sig_file(roots)});
    p.as_object_mut()
        .unwrap()
        .extend(subject.as_object().unwrap().clone());
    json!([{"type": "sigstoreSigned", "pki": p}])
}

/// Issue 23: keyless signatures (tests/sign.sh `make_keyless`), pulled through
/// the registry and the worker, verified on root's side: the certificate's
/// chain to the stand-in Fulcio root, its OIDC issuer and email, the Rekor
/// SET, and the certificate's validity when Rekor logged it; the same
/// certificate under `pki`.
#[test]
fn keyless_signed() {
    let s = scratch();
    let ok = |name: &str, image: &str, reqs: Value| -> String {
        let d = s.path().join(name);
        std::fs::create_dir(&d).unwrap();
        let rd = registries_d(&d, &file_lookaside(), true);
        let (r, out) = pull(&d, image, &policy(&d, reqs), &rd);
        let j = r.json();
        assert!(out.join("index.json").is_file(), "{name}");
        j["signature"]["verified_by"][0]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let root = "fulcio-root.crt";
    let by = ok(
        "fulcio",
        var("RIG_IMG_KEYLESS"),
        fulcio(root, ISSUER, EMAIL, "rekor.pub"),
    );
    assert!(
        by.starts_with(&format!(
            "sigstore fulcio {EMAIL} from {ISSUER}, in Rekor at 20"
        )),
        "{by}"
    );
    // PKI judges the certificate now, and reads no SET: the early one passes.
    for (i, image) in [var("RIG_IMG_KEYLESS"), var("RIG_IMG_KEYLESS_EARLY")]
        .iter()
        .enumerate()
    {
        let by = ok(
            &format!("pki{i}"),
            image,
            pki(root, json!({"subjectEmail": EMAIL})),
        );
        assert_eq!(by, format!("sigstore pki {EMAIL}"));
    }
    let cases = [
        (
            var("RIG_IMG_KEYLESS"),
            fulcio(root, "https://other.issuer.test", EMAIL, "rekor.pub"),
            format!("unexpected Fulcio OIDC issuer \"{ISSUER}\""),
        ),
        (
            var("RIG_IMG_KEYLESS"),
            fulcio(root, ISSUER, "other@hostpull.test", "rekor.pub"),
            "required email \"other@hostpull.test\" not found".into(),
        ),
        // Logged before the certificate was issued: the certificate was not
        // valid then, though it is now.
        (
            var("RIG_IMG_KEYLESS_EARLY"),
            fulcio(root, ISSUER, EMAIL, "rekor.pub"),
            "has expired or is not yet valid".into(),
        ),
        (
            var("RIG_IMG_KEYLESS"),
            fulcio(root, ISSUER, EMAIL, "other-rekor.pub"),
            "verification of Rekor SET failed".into(),
        ),
        (
            var("RIG_IMG_KEYLESS"),
            fulcio("other-root.crt", ISSUER, EMAIL, "rekor.pub"),
            "certificate signed by unknown authority".into(),
        ),
        // A key-signed attachment carries no certificate or SET.
        (
            var("RIG_IMG_COSIGNED"),
            fulcio(root, ISSUER, EMAIL, "rekor.pub"),
            "missing dev.sigstore.cosign/bundle annotation".into(),
        ),
        (
            var("RIG_IMG_KEYLESS"),
            pki("other-root.crt", json!({"subjectEmail": EMAIL})),
            "certificate signed by unknown authority".into(),
        ),
        (
            var("RIG_IMG_KEYLESS"),
            pki(root, json!({"subjectHostname": "host.hostpull.test"})),
            "not valid for \"host.hostpull.test\"".into(),
        ),
    ];
    for (i, (image, reqs, why)) in cases.into_iter().enumerate() {
        let d = s.path().join(i.to_string());
        std::fs::create_dir(&d).unwrap();
        let rd = registries_d(&d, &file_lookaside(), true);
        let (r, out) = pull(&d, image, &policy(&d, reqs), &rd);
        assert_rejected(&r, &out, "sigstoreSigned by a", &why);
    }
    // `plan` says who must have signed, in words.
    let d = s.path().join("plan");
    std::fs::create_dir(&d).unwrap();
    let rd = registries_d(&d, &file_lookaside(), true);
    let p = policy(&d, fulcio(root, ISSUER, EMAIL, "rekor.pub"));
    let mut c = hostpull(&[]);
    c.args(["plan", var("RIG_IMG_KEYLESS"), "--dest", "oci:/nonexistent"])
        .args(["--sandbox", "none", "--policy"])
        .arg(&p)
        .arg("--registries.d")
        .arg(&rd);
    let r = run(&mut c);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = format!(
        "signature sigstoreSigned by a Fulcio certificate for {EMAIL} from OIDC issuer {ISSUER} (CA {}), logged in Rekor (keys {}), matchRepoDigestOrExact",
        sig_file(root),
        sig_file("rekor.pub")
    );
    assert!(r.stdout.contains(&want), "{want}\n{}", r.stdout);
    // Where it reads them: attachments and bundle referrers.
    let sources = "  sigstore    attachments (tag sha256-HEX.sig) and cosign bundle referrers";
    assert!(r.stdout.contains(sources), "{}", r.stdout);
}

#[test]
fn require_signature_and_plan() {
    let s = scratch();
    let rd = registries_d(s.path(), &file_lookaside(), false);
    let accept = policy(s.path(), json!([{"type": "insecureAcceptAnything"}]));
    // Accept-anything: pulls as before, and says so.
    let (r, _) = pull(s.path(), var("RIG_IMG_SMALL"), &accept, &rd);
    let j = r.json();
    assert_eq!(j["signature"]["requirement"], "insecureAcceptAnything");
    assert_eq!(j["signature"]["verified_by"], json!([]));
    // … unless a signature is required.
    let d = s.path().join("required");
    std::fs::create_dir(&d).unwrap();
    let out = d.join("out");
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&out)));
    c.arg("--policy").arg(&accept).arg("--require-signature");
    let r = run(&mut c);
    r.assert_failure(9);
    assert!(r.stderr.contains("--require-signature"), "{}", r.stderr);
    assert!(r.stderr.contains("insecureAcceptAnything"), "{}", r.stderr);
    assert!(!out.exists());
    // A signature requirement satisfies it.
    let signer = policy(&d, gpg_key("signer.asc"));
    let (r, _) = pull(&d, var("RIG_IMG_SIGNED"), &signer, &rd);
    r.json();
    // `plan` names the requirement and the lookaside.
    let mut c = hostpull(&[]);
    c.args(["plan", var("RIG_IMG_SIGNED"), "--dest", "oci:/nonexistent"])
        .args(["--sandbox", "none", "--policy"])
        .arg(&signer)
        .arg("--registries.d")
        .arg(&rd);
    let r = run(&mut c);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "signature signedBy GPGKeys {}/signer.asc",
            var("RIG_SIG_DIR")
        )),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(&file_lookaside()), "{}", r.stdout);
}

#[test]
fn broken_or_missing_policies_are_usage_errors() {
    let s = scratch();
    // No policy.json below the root: an error, not "accept anything".
    let root = s.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let out = s.path().join("out");
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&out)));
    c.arg("--config-root").arg(&root);
    let r = run(&mut c);
    r.assert_failure(2);
    assert!(
        r.stderr.contains("etc/containers/policy.json"),
        "{}",
        r.stderr
    );
    let rd = registries_d(s.path(), &file_lookaside(), false);
    for (text, why) in [
        ("{not json", "invalid signature policy"),
        (
            r#"{"default":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/nonexistent.gpg"}]}"#,
            "reading key /nonexistent.gpg",
        ),
    ] {
        let p = s.path().join("bad.json");
        std::fs::write(&p, text).unwrap();
        let (r, out) = pull(s.path(), var("RIG_IMG_SMALL"), &p, &rd);
        r.assert_failure(2);
        assert!(r.stderr.contains(why), "{why}: {}", r.stderr);
        assert!(!out.exists());
    }
}

/// An https lookaside is trusted with the CAs given for its own host: `--ca`
/// for the registry alone is not enough.
#[test]
fn gpg_lookaside_over_https_with_its_own_ca() {
    let s = scratch();
    let ca_dir = Path::new(var("RIG_CA")).parent().unwrap();
    let (cert, key) = (ca_dir.join("server.crt"), ca_dir.join("server.key"));
    let server = HttpServer::start(
        &format!("{}/lookaside", var("RIG_SIG_DIR")),
        &[
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    let lookaside_host = format!("127.0.0.1:{}", server.port);
    let rd = registries_d(s.path(), &format!("https://{lookaside_host}"), false);
    let p = policy(s.path(), gpg_key("signer.asc"));
    let pull = |dir: &Path, cas: &[&str]| {
        let out = dir.join("out");
        let mut c = pull_cmd(var("RIG_IMG_SIGNED"), &oci(&out));
        c.args(["--authfile", var("RIG_AUTHFILE"), "--policy"])
            .arg(&p)
            .arg("--registries.d")
            .arg(&rd);
        for host in cas {
            c.arg("--ca").arg(format!("{host}={}", var("RIG_CA")));
        }
        (run(&mut c), out)
    };
    let (r, out) = pull(s.path(), &[var("RIG_REGISTRY"), &lookaside_host]);
    assert_eq!(
        r.json()["signature"]["verified_by"],
        json!([format!("gpg {}", var("RIG_SIGNER_FPR"))])
    );
    assert!(out.join("index.json").is_file());
    let d = s.path().join("no-ca");
    std::fs::create_dir(&d).unwrap();
    let (r, out) = pull(&d, &[var("RIG_REGISTRY")]);
    r.assert_failure(5);
    assert!(
        r.stderr
            .contains(&format!("fetching signature https://{lookaside_host}/")),
        "{}",
        r.stderr
    );
    assert!(!out.exists());
}

/// containers/image's policy rules that issue 14 found missing, end to end.
#[test]
fn policy_scopes_and_unimplemented_requirements_as_containers_image() {
    let s = scratch();
    let rd = registries_d(s.path(), &file_lookaside(), false);
    let write = |name: &str, p: Value| {
        let f = s.path().join(name);
        std::fs::write(&f, p.to_string()).unwrap();
        f
    };
    let accept = json!([{"type": "insecureAcceptAnything"}]);
    let base_layer =
        json!([{"type": "signedBaseLayer", "baseLayerIdentity": {"type": "matchExact"}}]);
    // A wildcard scope covers a host with a port (the rig's is 127.0.0.1:PORT,
    // whose host gives *.0.0.1, *.0.1 and *.1): it used to be skipped.
    let p = write(
        "wild.json",
        json!({"default": accept, "transports": {"docker": {"*.0.1": [{"type": "reject"}]}}}),
    );
    let (r, out) = pull(s.path(), var("RIG_IMG_SMALL"), &p, &rd);
    assert_rejected(
        &r,
        &out,
        "reject (scope \"*.0.1\"",
        "the policy rejects this image",
    );
    // signedBaseLayer is valid anywhere, and rejects what is in its scope.
    let p = write(
        "base.json",
        json!({"default": accept, "transports": {"docker": {"other.example/x": base_layer}}}),
    );
    let d = s.path().join("accepted");
    std::fs::create_dir(&d).unwrap();
    pull(&d, var("RIG_IMG_SMALL"), &p, &rd).0.json();
    let (r, out) = pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        &policy(s.path(), base_layer),
        &rd,
    );
    assert_rejected(
        &r,
        &out,
        "signedBaseLayer",
        "signedBaseLayer is not implemented",
    );
    // A fault in a scope this image does not use refuses the whole file.
    for (bad, why) in [
        (json!([]), "must not be empty"),
        (
            json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "/k", "signedIdentity": null}]),
            "signedIdentity",
        ),
    ] {
        let p = write(
            "unused.json",
            json!({"default": accept, "transports": {"docker": {"other.example/x": bad}}}),
        );
        let (r, out) = pull(s.path(), var("RIG_IMG_SMALL"), &p, &rd);
        r.assert_failure(2);
        assert!(r.stderr.contains(why), "{why}: {}", r.stderr);
        assert!(!out.exists());
    }
    // Duplicate keys are refused, as Go's policy parser refuses them.
    let p = s.path().join("dup.json");
    std::fs::write(
        &p,
        r#"{"default":[{"type":"reject"}],"default":[{"type":"insecureAcceptAnything"}]}"#,
    )
    .unwrap();
    let (r, _) = pull(s.path(), var("RIG_IMG_SMALL"), &p, &rd);
    r.assert_failure(2);
    assert!(
        r.stderr.contains("Duplicate key \"default\""),
        "{}",
        r.stderr
    );
}

/// remapIdentity: an image named under a mirror's name (which registries.conf
/// sends to the rig) carries signatures for its original name. Without the
/// remap the identity does not match; with it the pull is accepted.
#[test]
fn remap_identity_accepts_a_mirrored_name() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let mirror = "mirror.hostpull.invalid";
    let conf = s.path().join("r.conf");
    std::fs::write(
        &conf,
        format!("[[registry]]\nprefix = \"{mirror}\"\nlocation = \"{reg}\"\n"),
    )
    .unwrap();
    let rd = s.path().join("registries.d");
    std::fs::create_dir_all(&rd).unwrap();
    std::fs::write(
        rd.join("all.yaml"),
        format!("default-docker:\n  lookaside: {}\n", file_lookaside()),
    )
    .unwrap();
    let path = var("RIG_IMG_SIGNED").split_once('/').unwrap().1;
    let image = format!("{mirror}/{path}");
    let key = format!("{}/signer.asc", var("RIG_SIG_DIR"));
    let pull = |name: &str, identity: Value| {
        let d = s.path().join(name);
        std::fs::create_dir(&d).unwrap();
        let p = d.join("policy.json");
        let reqs = json!([{"type": "signedBy", "keyType": "GPGKeys", "keyPath": key, "signedIdentity": identity}]);
        std::fs::write(
            &p,
            json!({"default": [{"type": "reject"}], "transports": {"docker": {mirror: reqs}}})
                .to_string(),
        )
        .unwrap();
        let out = d.join("out");
        let mut c = with_rig_creds(pull_cmd(&image, &oci(&out)));
        c.arg("--policy").arg(&p).arg("--registries.d").arg(&rd);
        c.arg("--registries-conf").arg(&conf);
        (run(&mut c), out)
    };
    let (r, out) = pull("plain", json!({"type": "matchRepoDigestOrExact"}));
    assert_rejected(&r, &out, "signedBy", "does not match");
    let (r, _) = pull(
        "remapped",
        json!({"type": "remapIdentity", "prefix": mirror, "signedPrefix": reg}),
    );
    let j = r.json();
    assert_eq!(
        j["signature"]["verified_by"],
        json!([format!("gpg {}", var("RIG_SIGNER_FPR"))])
    );
    assert_eq!(j["manifest_digest"], registry_digest(var("RIG_IMG_SIGNED")));
}
