//! Malicious registries: tests/hostile_registry.py serves one small image,
//! altered per scenario, and every lie must end in exit 7 with nothing
//! published. A redirect elsewhere must not carry the credentials.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::util::*;

const USER_PASS: &str = "hostile-user:hostile-secret-8c1f";
/// `printf %s "$USER_PASS" | base64`, as an authfile holds it.
const USER_PASS_B64: &str = "aG9zdGlsZS11c2VyOmhvc3RpbGUtc2VjcmV0LThjMWY=";

/// A hostile registry child process, killed when dropped, with a scratch
/// directory for its log, the authfile and the pull's destination.
struct Hostile {
    child: Child,
    port: u16,
    log: PathBuf,
    authfile: PathBuf,
    dest: PathBuf,
    _dir: tempfile::TempDir,
}

impl Hostile {
    fn start(scenario: &str) -> Self {
        let dir = scratch();
        let ca = Path::new(var("RIG_CA"));
        let log = dir.path().join("requests.log");
        let mut child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/hostile_registry.py"
            ))
            .args([scenario, log.to_str().unwrap(), "--cert"])
            .arg(ca.with_file_name("server.crt"))
            .arg("--key")
            .arg(ca.with_file_name("server.key"))
            .env("HOSTILE_AUTH", USER_PASS)
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting tests/hostile_registry.py");
        let port = read_port(&mut child, "tests/hostile_registry.py");
        let authfile = dir.path().join("auth.json");
        std::fs::write(
            &authfile,
            format!(r#"{{"auths":{{"127.0.0.1:{port}":{{"auth":"{USER_PASS_B64}"}}}}}}"#),
        )
        .unwrap();
        Self {
            child,
            port,
            log,
            authfile,
            dest: dir.path().join("dest"),
            _dir: dir,
        }
    }

    /// `hostile/img` with `:TAG` or `@DIGEST`.
    fn image(&self, reference: &str) -> String {
        format!("127.0.0.1:{}/hostile/img{reference}", self.port)
    }

    /// `hostpull pull IMAGE --dest oci:DEST[TAG]` against this registry, with
    /// its credentials.
    fn pull(&self, image: &str, tag: &str) -> Run {
        let mut c = pull_cmd(image, &format!("oci:{}{tag}", self.dest.display()));
        c.args(["--cert-dir", var("RIG_CERT_DIR"), "--timeout", "20"])
            .arg("--authfile")
            .arg(&self.authfile);
        run(&mut c)
    }

    /// The requests one server ("main" or "second") logged.
    fn requests(&self, server: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["server"] == server)
            .collect()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pull `reference` of `scenario` into a fresh destination: it must fail with
/// 7, one error line, no secret, and leave no destination behind.
fn refused(scenario: &str, reference: &str, dest_tag: &str) -> Hostile {
    let h = Hostile::start(scenario);
    let r = h.pull(&h.image(reference), dest_tag);
    eprintln!("{scenario}: exit {}: {}", r.code, r.stderr.trim());
    r.assert_failure(7);
    assert!(!r.stderr.contains(USER_PASS), "{}", r.stderr);
    assert!(!h.dest.exists(), "a failed pull published {:?}", h.dest);
    h
}

#[test]
fn pinned_digest_of_other_bytes_is_refused() {
    let other = hostpull::verify::sha256(b"some other manifest");
    refused("pinned-mismatch", &format!("@{other}"), ":v1");
}

#[test]
fn corrupt_blob_is_refused() {
    refused("blob-corrupt", ":v1", "");
}

#[test]
fn long_blob_is_refused() {
    refused("blob-long", ":v1", "");
}

#[test]
fn short_blob_is_refused() {
    refused("blob-short", ":v1", "");
}

#[test]
fn huge_manifest_is_refused() {
    refused("manifest-huge", ":v1", "");
}

#[test]
fn two_thousand_layers_are_refused() {
    refused("many-layers", ":v1", "");
}

#[test]
fn config_that_is_not_json_is_refused() {
    refused("config-not-json", ":v1", "");
}

#[test]
fn foreign_urls_are_refused_without_contacting_the_foreign_host() {
    let h = refused("foreign-urls", ":v1", "");
    assert_eq!(h.requests("second"), Vec::<Value>::new());
    let blobs = h.requests("main");
    assert!(
        !blobs
            .iter()
            .any(|r| r["path"].as_str().unwrap().contains("/blobs/")),
        "no blob fetched before the refusal: {blobs:?}"
    );
}

/// Registries redirect blobs to CDNs: the pull succeeds, with the manifest
/// the registry serves, and the other host never sees the credentials.
#[test]
fn redirect_to_another_host_gets_no_credentials() {
    let h = redirected("redirect");
    let second = h.requests("second");
    assert!(
        second.iter().all(|r| r["auth"] == false),
        "credentials went to the redirect target: {second:?}"
    );
    assert!(
        second
            .iter()
            .all(|r| r["host"].as_str().unwrap().starts_with("localhost:")),
        "by another name: {second:?}"
    );
}

/// A redirect to the same host *name* on another port: Debian 12's skopeo
/// 1.9.3 (Go 1.19) drops the credentials; 1.18 and 1.22 send them, as Go's
/// HTTP client now treats the same name on any port as the same host. A limit
/// of the worker, stated in docs/security.md: this pins which it is.
#[test]
fn redirect_to_the_same_name_on_another_port_keeps_credentials_from_skopeo_1_18_on() {
    let h = redirected("redirect-port");
    let second = h.requests("second");
    let sent = second.iter().any(|r| r["auth"] == true);
    assert_eq!(
        sent,
        !worker_is_1_9(),
        "protocol {}: credentials {} to 127.0.0.1 on another port: {second:?}",
        worker_protocol(),
        if sent { "went" } else { "did not go" }
    );
}

/// A pull from a registry whose blob GETs answer 307 (SCENARIO): it succeeds
/// with the registry's own manifest, and the blobs come from the second server.
fn redirected(scenario: &str) -> Hostile {
    let h = Hostile::start(scenario);
    let r = h.pull(&h.image(":v1"), "");
    eprintln!("{scenario}: exit {}: {}", r.code, r.stderr.trim());
    assert!(
        !h.requests("second").is_empty(),
        "the blobs came from the second server"
    );
    assert!(
        h.requests("main").iter().any(|r| r["auth"] == true),
        "the registry itself got them"
    );
    let raw = skopeo(&[
        "inspect",
        "--raw",
        "--cert-dir",
        var("RIG_CERT_DIR"),
        "--authfile",
        h.authfile.to_str().unwrap(),
        &format!("docker://{}", h.image(":v1")),
    ]);
    let digest = hostpull::verify::sha256(raw.as_bytes());
    assert_eq!(r.json()["manifest_digest"], digest.as_str());
    h
}
