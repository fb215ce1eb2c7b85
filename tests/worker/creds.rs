//! Credential sources, the least-privilege authfile, and bad files.

use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::pull::staged_authfile;
use crate::util::*;

fn rig_auth() -> String {
    B64.encode(format!("{}:{}", var("RIG_USER"), password()))
}

/// `hostpull pull` of the small image with the rig's CA, the suite's sandbox,
/// an empty root (no host default files) and the given credential options.
fn pull_with(s: &Path, dest: &str, creds: &[&str]) -> Command {
    let mut c = pull_cmd(
        var("RIG_IMG_SMALL"),
        &format!("oci:{}/dest-{dest}", s.display()),
    );
    c.args(["--cert-dir", var("RIG_CERT_DIR"), "--config-root"])
        .arg(config_root(s))
        .args(creds);
    c
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    write_private(&p, text.as_bytes());
    p.display().to_string()
}

#[test]
fn every_kind_of_source_works() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let auth = rig_auth();
    let cfgjson = format!(r#"{{"auths":{{"{reg}":{{"auth":"{auth}"}}}}}}"#);
    let cfg = format!(r#"{{"{reg}":{{"auth":"{auth}"}}}}"#);
    let yaml_secret = write(
        s.path(),
        "secret.yaml",
        &format!(
            "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
            B64.encode(&cfgjson)
        ),
    );
    let json_secret = write(
        s.path(),
        "secret.json",
        &format!(
            r#"{{"kind":"Secret","type":"kubernetes.io/dockercfg","data":{{".dockercfg":"{}"}}}}"#,
            B64.encode(&cfg)
        ),
    );
    let token = write(s.path(), "token", &format!("{}\n", password()));
    let token_arg = format!("{reg}/hostpull={token}");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("authfile", vec!["--authfile", var("RIG_AUTHFILE")]),
        (
            "dockerconfigjson secret",
            vec!["--pull-secret", &yaml_secret],
        ),
        ("dockercfg secret", vec!["--pull-secret", &json_secret]),
        (
            "token",
            vec![
                "--registry-token",
                &token_arg,
                "--registry-token-user",
                var("RIG_USER"),
            ],
        ),
    ];
    for (name, args) in cases {
        let r = run(&mut pull_with(s.path(), name, &args)).json();
        assert_eq!(r["credentials"][0]["host"], reg, "{name}");
    }
    // The host's defaults, below the root: kubelet's config.json, then ostree's auth.json first.
    std::fs::create_dir_all(s.path().join("var/lib/kubelet")).unwrap();
    write(s.path(), "var/lib/kubelet/config.json", &cfgjson);
    let r = run(&mut pull_with(s.path(), "kubelet", &[])).json();
    assert!(
        r["credentials"][0]["source"]
            .as_str()
            .unwrap()
            .ends_with("var/lib/kubelet/config.json")
    );
    std::fs::create_dir_all(s.path().join("etc/ostree")).unwrap();
    write(s.path(), "etc/ostree/auth.json", &cfgjson);
    let r = run(&mut pull_with(s.path(), "ostree", &[])).json();
    assert!(
        r["credentials"][0]["source"]
            .as_str()
            .unwrap()
            .ends_with("etc/ostree/auth.json")
    );
    // --no-default-creds: no credential, so the registry refuses, and the
    // error says there was none (not that one was refused).
    let r = run(&mut pull_with(s.path(), "none", &["--no-default-creds"]));
    r.assert_failure(3);
    let none = format!("no credential for {reg}, which asks for one");
    assert!(r.stderr.contains(&none), "{}", r.stderr);
    assert!(!r.stderr.contains("refused the credential"), "{}", r.stderr);
}

/// The worker's authfile holds the image's registry and nothing else, though
/// the source has more.
#[test]
fn only_the_needed_entry_reaches_the_worker() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let auth = rig_auth();
    let many = write(
        s.path(),
        "many.json",
        &format!(
            r#"{{"auths":{{"{reg}":{{"auth":"{auth}"}},"quay.io":{{"auth":"{}"}},"127.0.0.2:5000":{{"auth":"{}"}}}}}}"#,
            B64.encode("decoy:one"),
            B64.encode("decoy:two")
        ),
    );
    let mut c = pull_cmd(var("RIG_IMG_BIG"), &oci(&s.path().join("l")));
    c.args([
        "--cert-dir",
        var("RIG_CERT_DIR"),
        "--authfile",
        &many,
        "--config-root",
    ])
    .arg(config_root(s.path()));
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let seen = staged_authfile(&mut child);
    assert!(child.wait().unwrap().success());
    let staged = seen.expect("saw the staged authfile");
    assert_eq!(staged, serde_json::json!({"auths": {reg: {"auth": auth}}}));
}

/// kubelet's rotation: every matching credential, in order, each try with an
/// authfile of its own. A stale first credential is refused (exit 3 kind),
/// the second works, and the report names the second; `hostpull plan` lists
/// both. With only stale ones, exit 3 says how many were tried.
#[test]
fn a_refused_credential_moves_on_to_the_next() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let stale = write(
        s.path(),
        "stale.json",
        &format!(
            r#"{{"auths":{{"{reg}":{{"auth":"{}"}}}}}}"#,
            B64.encode(format!("{}:rotated-away", var("RIG_USER")))
        ),
    );
    let good = write(
        s.path(),
        "good.json",
        &format!(r#"{{"auths":{{"{reg}":{{"auth":"{}"}}}}}}"#, rig_auth()),
    );
    let args = ["--pull-secret", &stale, "--pull-secret", &good];
    let out = run(&mut pull_with(s.path(), "rotated", &args));
    let r = out.json();
    // The warning names the refused credential and the next, by source and key.
    let warning = out.stderr.lines().find(|l| l.contains(" WARN ")).unwrap();
    let refused = format!("{reg} refused the credential from {stale} (key {reg}): ");
    let next = format!("; trying credentials 2 of 2: {reg}: {good} (key {reg})");
    assert!(warning.contains(&refused), "{warning}");
    assert!(warning.ends_with(&next), "{warning}");
    assert_eq!(r["credentials"].as_array().unwrap().len(), 1, "{r}");
    let used = &r["credentials"][0];
    assert_eq!(used["source"], good.as_str(), "{r}");
    assert_eq!(
        (used["candidate"].as_u64(), used["candidates"].as_u64()),
        (Some(2), Some(2))
    );
    let pull = pull_with(s.path(), "plan", &args);
    let argv: Vec<_> = pull.get_args().map(|a| a.to_owned()).collect();
    let mut plan = hostpull(&[]);
    plan.arg("plan").args(argv.iter().skip(1));
    let p = run(&mut plan).json();
    let host = &p["hosts"][0];
    assert_eq!(host["credential"], format!("{stale} (key {reg})"), "{p}");
    assert_eq!(
        host["fallbacks"],
        serde_json::json!([format!("{good} (key {reg})")]),
        "{p}"
    );
    // Only stale credentials: the last refusal, and how many were tried.
    // The same credential from two sources is tried once.
    let r = run(&mut pull_with(
        s.path(),
        "stale",
        &["--pull-secret", &stale, "--authfile", &stale],
    ));
    r.assert_failure(3);
    assert!(
        !r.stderr.contains("credentials were refused"),
        "{}",
        r.stderr
    );
    let again = write(
        s.path(),
        "stale2.json",
        &format!(
            r#"{{"auths":{{"{reg}":{{"auth":"{}"}}}}}}"#,
            B64.encode(format!("{}:older", var("RIG_USER")))
        ),
    );
    let r = run(&mut pull_with(
        s.path(),
        "stale",
        &["--pull-secret", &stale, "--pull-secret", &again],
    ));
    r.assert_failure(3);
    assert!(
        r.stderr.contains("all 2 credentials were refused"),
        "{}",
        r.stderr
    );
    // The last one refused, by source and key; --json's failure object says
    // the same, and whose answer it was.
    let last = format!("{reg} refused the credential from {again} (key {reg})");
    assert!(r.stderr.contains(&last), "{}", r.stderr);
    let e = r.failure();
    assert_eq!(
        (&e["kind"], &e["host"]),
        (&"auth".into(), &reg.into()),
        "{e}"
    );
    assert_valid("failure-v0.schema.json", &r.stdout);
    assert!(!r.stdout.contains("older") && !r.stdout.contains("rotated-away"));
}

#[test]
fn a_rotated_token_is_read_again() {
    let s = scratch();
    let token = s.path().join("token");
    write_private(&token, b"old-and-wrong");
    let arg = format!("{}={}", var("RIG_REGISTRY"), token.display());
    let args = [
        "--registry-token",
        &arg,
        "--registry-token-user",
        var("RIG_USER"),
    ];
    run(&mut pull_with(s.path(), "a", &args)).assert_failure(3);
    std::fs::write(&token, password()).unwrap();
    run(&mut pull_with(s.path(), "b", &args)).json();
}

#[test]
fn bad_credential_files_are_usage_errors_that_echo_nothing() {
    let s = scratch();
    let marker = "do-not-echo-this-secret";
    let cases = [
        ("--authfile", format!("{{\"auths\": {{\"x\": \"{marker}\"")),
        (
            "--pull-secret",
            format!(
                "kind: Secret\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: '{marker}!'\n"
            ),
        ),
        (
            "--pull-secret",
            format!("kind: Secret\ntype: Opaque\ndata: {{a: {marker}}}\n"),
        ),
    ];
    for (i, (flag, text)) in cases.iter().enumerate() {
        let f = write(s.path(), &format!("bad{i}"), text);
        let r = run(&mut pull_with(s.path(), &format!("d{i}"), &[flag, &f]));
        r.assert_failure(2);
        assert!(r.stderr.contains(&f), "names the file: {}", r.stderr);
        assert!(
            !r.stderr.contains(marker),
            "echoes nothing of it: {}",
            r.stderr
        );
    }
    let r = run(&mut pull_with(
        s.path(),
        "t",
        &["--registry-token", "not a host=/x"],
    ));
    r.assert_failure(2);
}

/// `hostpull plan` names each host's credential source and key, never the
/// secret, and contacts nothing: it works against a registry that is not there.
#[test]
fn plan_shows_sources_and_never_secrets() {
    let s = scratch();
    let dead = "127.0.0.1:1";
    let secret = write(
        s.path(),
        "secret.json",
        &format!(r#"{{"auths":{{"{dead}":{{"auth":"{}"}}}}}}"#, rig_auth()),
    );
    let dest = s.path().join("never");
    let mut c = hostpull(&[]);
    c.args([
        "plan",
        &format!("{dead}/hostpull/small:v1"),
        "--dest",
        &oci(&dest),
    ])
    .args(["--sandbox", &sandbox(), "--pull-secret", &secret])
    .args([
        "--ca",
        &format!("{dead}={}", var("RIG_CA")),
        "--config-root",
    ])
    .arg(config_root(s.path()));
    let r = run(&mut c);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(&format!("credential  {secret} (key {dead})")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(var("RIG_CA")), "{}", r.stdout);
    assert!(!r.stdout.contains(&password()) && !r.stdout.contains(&rig_auth()));
    assert!(!dest.exists());
    let r = run(c.arg("--json"));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["hosts"][0]["role"], "primary");
    assert_eq!(
        v["hosts"][0]["credential"],
        format!("{secret} (key {dead})")
    );
}

/// An authfile's credHelpers: `docker-credential-NAME get` runs as root with
/// the registry on stdin, and its answer is the credential.
#[test]
fn credential_helper() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let bin = s.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let helper = |name: &str, body: &str| {
        let p = bin.join(format!("docker-credential-{name}"));
        write_private(&p, format!("#!/bin/sh\n{body}\n").as_bytes());
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    };
    helper(
        "hostpull-test",
        &format!(
            "read host\n[ \"$1\" = get ] && [ \"$host\" = {reg} ] || exit 1\necho '{{\"ServerURL\":\"{reg}\",\"Username\":\"{}\",\"Secret\":\"{}\"}}'",
            var("RIG_USER"),
            password()
        ),
    );
    helper("broken", "exit 1");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    for (name, helper, code) in [("ok", "hostpull-test", 0), ("broken", "broken", 3)] {
        let authfile = write(
            s.path(),
            &format!("{name}.json"),
            &format!(r#"{{"auths":{{}},"credHelpers":{{"{reg}":"{helper}"}}}}"#),
        );
        let mut c = pull_with(s.path(), name, &["--authfile", &authfile]);
        c.env("PATH", &path);
        let r = run(&mut c);
        if code == 0 {
            assert_eq!(
                r.json()["credentials"][0]["key"],
                format!("credHelpers.{reg}")
            );
        } else {
            r.assert_failure(code);
            assert!(
                r.stderr.contains("docker-credential-broken"),
                "{}",
                r.stderr
            );
        }
    }
}

/// kubelet's exec credential provider plugins, speaking the real JSON protocol:
/// args and env from the config, the earlier provider winning, and the answer
/// cached root-only for as long as it says.
#[test]
fn credential_provider_plugins() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let bin = s.path().join("plugins");
    std::fs::create_dir(&bin).unwrap();
    let calls = s.path().join("calls");
    let plugin = |name: &str, user: &str, pass: &str| {
        let p = bin.join(name);
        let script = format!(
            r#"#!/usr/bin/python3
import json, os, sys
req = json.load(sys.stdin)
assert req["apiVersion"] == "credentialprovider.kubelet.k8s.io/v1", req
assert req["kind"] == "CredentialProviderRequest" and req["image"], req
assert os.environ.get("HOSTPULL_TEST") == "from-config" and sys.argv[1:] == ["--flag"], sys.argv
open({calls:?}, "a").write("{name}\n")
json.dump({{"apiVersion": "credentialprovider.kubelet.k8s.io/v1", "kind": "CredentialProviderResponse",
           "cacheKeyType": "Registry", "cacheDuration": "1h",
           "auth": {{{reg:?}: {{"username": {user:?}, "password": {pass:?}}}}}}}, sys.stdout)
"#,
            calls = calls.display().to_string(),
        );
        write_private(&p, script.as_bytes());
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    };
    plugin("first", var("RIG_USER"), &password());
    plugin("second", "wrong", "wrong");
    let provider = |name: &str| {
        format!(
            "- name: {name}\n  matchImages: [\"127.0.0.1:{}\"]\n  defaultCacheDuration: 10m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [\"--flag\"]\n  env: [{{name: HOSTPULL_TEST, value: from-config}}]\n",
            var("RIG_PORT")
        )
    };
    let config = write(
        s.path(),
        "providers.yaml",
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n{}{}",
            provider("first"),
            provider("second")
        ),
    );
    let args = [
        "--credential-provider-config",
        &config,
        "--credential-provider-bin-dir",
        bin.to_str().unwrap(),
    ];
    let r = run(&mut pull_with(s.path(), "a", &args)).json();
    assert_eq!(r["credentials"][0]["source"], "credential provider first");
    assert_eq!(r["credentials"][0]["key"], reg);
    // Both providers match, so both are asked (kubelet's providersDockerKeyring):
    // the second's answer is a candidate after the first's. Again, the answers
    // come from the root-only cache: no plugin runs.
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "first\nsecond\n");
    run(&mut pull_with(s.path(), "b", &args)).json();
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "first\nsecond\n");
    for e in std::fs::read_dir(s.path().join("var/cache/hostpull/credential-providers")).unwrap() {
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&e.unwrap().metadata().unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
    }
    // `hostpull plan` runs the plugins a pull would, and says so; with their
    // answers cached (another root, so a cache of its own), it runs none.
    let fresh = scratch();
    let plan = || {
        let pull = pull_with(fresh.path(), "plan", &args);
        let mut plan = hostpull(&[]);
        plan.arg("plan").args(pull.get_args().skip(1));
        run(&mut plan).json()
    };
    let p = plan();
    assert_eq!(
        p["plugins_run"],
        serde_json::json!(["credential provider first", "credential provider second"]),
        "{p}"
    );
    let calls_now = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(calls_now, "first\nsecond\nfirst\nsecond\n");
    let p = plan();
    assert_eq!(p["plugins_run"], serde_json::json!([]), "{p}");
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), calls_now);
    // A plugin whose answer is not a CredentialProviderResponse: exit 2, nothing echoed.
    let garbage = bin.join("garbage");
    write_private(&garbage, b"#!/bin/sh\necho not-json-secret-ish\n");
    std::fs::set_permissions(
        &garbage,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let bad_config = write(
        s.path(),
        "garbage.yaml",
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: garbage\n  matchImages: [\"127.0.0.1:{}\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
            var("RIG_PORT")
        ),
    );
    let bin_dir = bin.to_str().unwrap();
    let r = run(&mut pull_with(
        s.path(),
        "g",
        &[
            "--credential-provider-config",
            &bad_config,
            "--credential-provider-bin-dir",
            bin_dir,
        ],
    ));
    r.assert_failure(2);
    assert!(
        r.stderr.contains("credential provider garbage") && !r.stderr.contains("not-json"),
        "{}",
        r.stderr
    );
    // A broken configuration is a usage error naming the file.
    let broken = write(s.path(), "broken.yaml", "kind: Nonsense\n");
    let r = run(&mut pull_with(
        s.path(),
        "c",
        &[
            "--credential-provider-config",
            &broken,
            "--credential-provider-bin-dir",
            "/",
        ],
    ));
    r.assert_failure(2);
    assert!(r.stderr.contains(&broken), "{}", r.stderr);
}
