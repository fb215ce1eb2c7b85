//! registries.conf mirrors with their own credentials, fallback, digest-only
//! mirrors and blocked registries, against a real second registry.

use std::path::Path;

use crate::pull::staged_authfile;
use crate::util::*;

/// An authfile with the primary's credentials `primary_ok` or wrong, and the
/// mirror's own.
fn authfile(dir: &Path, primary_ok: bool) -> String {
    let primary = std::fs::read_to_string(var(if primary_ok {
        "RIG_AUTHFILE"
    } else {
        "RIG_BAD_AUTHFILE"
    }))
    .unwrap();
    let mirror = std::fs::read_to_string(var("RIG_MIRROR_AUTHFILE")).unwrap();
    let mut auths: serde_json::Value = serde_json::from_str(&primary).unwrap();
    let mirror: serde_json::Value = serde_json::from_str(&mirror).unwrap();
    for (k, v) in mirror["auths"].as_object().unwrap() {
        auths["auths"][k] = v.clone();
    }
    // And an entry for a host this pull never contacts.
    auths["auths"]["quay.io"] = serde_json::json!({"auth": "ZGVjb3k6ZGVjb3k="});
    let p = dir.join(format!("auth-{primary_ok}.json"));
    write_private(&p, auths.to_string().as_bytes());
    p.display().to_string()
}

fn conf(dir: &Path, name: &str, mirror_location: &str, extra: &str) -> String {
    let reg = var("RIG_REGISTRY");
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!("[[registry]]\nprefix = \"{reg}\"\nlocation = \"{reg}\"\n{extra}\n[[registry.mirror]]\nlocation = \"{mirror_location}\"\n"),
    )
    .unwrap();
    p.display().to_string()
}

fn pull(
    dir: &Path,
    image: &str,
    dest: &str,
    authfile: &str,
    registries_conf: &str,
) -> std::process::Command {
    let mut c = pull_cmd(image, &format!("oci:{}", dir.join(dest).display()));
    c.args([
        "--cert-dir",
        var("RIG_CERT_DIR"),
        "--authfile",
        authfile,
        "--registries-conf",
        registries_conf,
    ]);
    c.args(["--timeout", "10", "--config-root"])
        .arg(config_root(dir));
    c
}

#[test]
fn mirror_with_its_own_credentials_and_only_those_reach_the_worker() {
    let s = scratch();
    let mirror = var("RIG_MIRROR_REGISTRY");
    // The primary's credential is wrong: only the mirror can serve this pull.
    let auth = authfile(s.path(), false);
    let conf = conf(s.path(), "m.conf", mirror, "");
    let mut child = pull(s.path(), var("RIG_IMG_SMALL"), "l", &auth, &conf)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let staged = staged_authfile(&mut child);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["manifest_digest"], registry_digest(var("RIG_IMG_SMALL")));
    let hosts: Vec<&str> = r["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, [mirror, var("RIG_REGISTRY")]);
    let mut keys: Vec<String> = staged.expect("saw the staged authfile")["auths"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    keys.sort();
    let mut want = vec![mirror.to_owned(), var("RIG_REGISTRY").to_owned()];
    want.sort();
    assert_eq!(
        keys, want,
        "exactly the mirror and the primary, not quay.io"
    );
}

#[test]
fn a_dead_mirror_falls_back_to_the_primary() {
    let s = scratch();
    let conf = conf(s.path(), "dead.conf", "127.0.0.1:1", "");
    run(&mut pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        "l",
        &authfile(s.path(), true),
        &conf,
    ))
    .json();
}

#[test]
fn a_digest_only_mirror_serves_only_pulls_by_digest() {
    let s = scratch();
    let mirror = var("RIG_MIRROR_REGISTRY");
    let conf = conf(s.path(), "d.conf", mirror, "mirror-by-digest-only = true");
    let auth = authfile(s.path(), false);
    // By tag: the primary only, whose credential is wrong.
    run(&mut pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        "tag",
        &auth,
        &conf,
    ))
    .assert_failure(3);
    // By digest: the mirror.
    let digest = registry_digest(var("RIG_IMG_SMALL"));
    let repo = var("RIG_IMG_SMALL").rsplit_once(':').unwrap().0;
    let mut c = pull(
        s.path(),
        &format!("{repo}@{digest}"),
        "digest",
        &auth,
        &conf,
    );
    c.arg("--dest")
        .arg(format!("oci:{}:pinned", s.path().join("digest").display()));
    assert_eq!(run(&mut c).json()["manifest_digest"], digest);
}

#[test]
fn a_blocked_registry_is_refused() {
    let s = scratch();
    let p = s.path().join("b.conf");
    std::fs::write(
        &p,
        format!(
            "[[registry]]\nprefix = \"{}\"\nblocked = true\n",
            var("RIG_REGISTRY")
        ),
    )
    .unwrap();
    let r = run(&mut pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        "l",
        var("RIG_AUTHFILE"),
        p.to_str().unwrap(),
    ));
    r.assert_failure(2);
    assert!(r.stderr.contains("blocked"), "{}", r.stderr);
    std::fs::write(&p, "[[registry]\n").unwrap();
    let r = run(&mut pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        "m",
        var("RIG_AUTHFILE"),
        p.to_str().unwrap(),
    ));
    r.assert_failure(2);
    assert!(r.stderr.contains("b.conf"), "{}", r.stderr);
}
