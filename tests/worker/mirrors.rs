//! registries.conf mirrors with their own credentials, fallback, digest-only
//! mirrors and blocked registries, against a real second registry.

use std::path::Path;

use super::pull::staged_authfile;
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
    let mut c = pull_cmd(image, &oci(&dir.join(dest)));
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

/// Which host answered what (issue 45). A mirror that refuses its credential
/// is a warning, naming it and that credential's source and key, before the
/// primary serves the pull. With the primary down too, the primary's answer
/// decides (exit 6: containers/image wraps the primary's error, and notes the
/// mirrors'), and the error and `--json`'s failure object name each host.
#[test]
fn a_refusing_mirror_is_named_in_the_warning_and_the_failure() {
    let s = scratch();
    let (reg, mirror) = (var("RIG_REGISTRY"), var("RIG_MIRROR_REGISTRY"));
    let rig = std::fs::read_to_string(var("RIG_AUTHFILE")).unwrap();
    let mut auths: serde_json::Value = serde_json::from_str(&rig).unwrap();
    // mirror:wrong
    auths["auths"][mirror] = serde_json::json!({"auth": "bWlycm9yOndyb25n"});
    let auth = s.path().join("bad-mirror.json");
    write_private(&auth, auths.to_string().as_bytes());
    let auth = auth.display().to_string();
    let refused = format!("mirror {mirror} refused the credential from {auth} (key {mirror}): ");
    let conf_m = conf(s.path(), "m.conf", mirror, "");
    let r = run(&mut pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        "l",
        &auth,
        &conf_m,
    ));
    r.json();
    let warning = r.stderr.lines().find(|l| l.contains(" WARN "));
    let came = format!("; the image came from {reg}");
    assert!(
        warning.is_some_and(|w| w.contains(&refused) && w.ends_with(&came)),
        "{}",
        r.stderr
    );

    // The primary down: a port nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let conf_d = s.path().join("d.conf");
    std::fs::write(
        &conf_d,
        format!("[[registry]]\nprefix = \"{dead}\"\nlocation = \"{dead}\"\n[[registry.mirror]]\nlocation = \"{mirror}\"\n"),
    )
    .unwrap();
    let image = format!("{dead}/hostpull/small:v1");
    let mut c = pull(s.path(), &image, "d", &auth, &conf_d.display().to_string());
    let r = run(c.args(["--timeout", "3"]));
    r.assert_failure(6);
    let error = r.stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
    let both = format!(": {dead}: connection refused; {refused}");
    assert!(error.contains(&both), "{error}");
    let e = r.failure();
    assert_eq!(
        (&e["kind"], &e["host"]),
        (&"network".into(), &dead.into()),
        "{e}"
    );
    assert_valid("failure-v0.schema.json", &r.stdout);
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
        .arg(oci_tag(&s.path().join("digest"), "pinned"));
    let r = run(&mut c).json();
    assert_eq!(r["manifest_digest"], digest);
    // A pinned image is opened beside its manifest (issue 46)...
    assert_eq!(r["worker"]["opened_beside"], true);
    // ...a tag is not, where its sources are not a digest's: the tag's
    // manifest comes from the primary, and its blobs, by digest, from the
    // mirror first.
    let good = authfile(s.path(), true);
    let r = run(&mut pull(s.path(), var("RIG_IMG_SMALL"), "t", &good, &conf)).json();
    assert_eq!(r["worker"]["opened_beside"], false);
    let mut plan = hostpull(&["plan", "--json", var("RIG_IMG_SMALL")]);
    plan.args(["--sandbox", &sandbox(), "--registries-conf", &conf])
        .arg("--config-root")
        .arg(config_root(s.path()));
    assert_eq!(run(&mut plan).json()["open_beside"], false);
}

#[test]
fn a_blocked_registry_is_refused() {
    let s = scratch();
    let p = s.path().join("b.conf");
    std::fs::write(
        &p,
        format!(
            "[[registry]]\nprefix = \"{0}\"\nlocation = \"{0}\"\nblocked = true\n",
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

/// A `*.domain` table keeps its `location` and mirrors (issue 14): an image
/// named under a host that does not exist is pulled from the mirror, whose own
/// credential is the only good one, because the worker's skopeo reads the same
/// table and rewrites the reference the same way.
#[test]
fn a_wildcard_table_rewrites_to_its_location_and_mirrors() {
    let s = scratch();
    let p = s.path().join("w.conf");
    std::fs::write(
        &p,
        format!(
            "[[registry]]\nprefix = \"*.hostpull.invalid\"\nlocation = \"{}\"\n[[registry.mirror]]\nlocation = \"{}\"\n",
            var("RIG_REGISTRY"),
            var("RIG_MIRROR_REGISTRY")
        ),
    )
    .unwrap();
    let path = var("RIG_IMG_SMALL").split_once('/').unwrap().1;
    let image = format!("nowhere.hostpull.invalid/{path}");
    let auth = authfile(s.path(), false);
    let r = run(&mut pull(s.path(), &image, "l", &auth, p.to_str().unwrap())).json();
    assert_eq!(r["manifest_digest"], registry_digest(var("RIG_IMG_SMALL")));
    let hosts: Vec<&str> = r["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, [var("RIG_MIRROR_REGISTRY"), var("RIG_REGISTRY")]);
}

/// `hostpull plan` needs no `--dest`, and shows registries.conf `insecure` per host.
#[test]
fn plan_without_dest_shows_insecure_per_host() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let p = s.path().join("i.conf");
    std::fs::write(
        &p,
        format!("[[registry]]\nprefix = \"{reg}\"\nlocation = \"{reg}\"\n[[registry.mirror]]\nlocation = \"127.0.0.1:1/m\"\ninsecure = true\n"),
    )
    .unwrap();
    let mut c = hostpull(&[]);
    c.args(["plan", var("RIG_IMG_SMALL"), "--sandbox", &sandbox()])
        .args([
            "--registries-conf",
            p.to_str().unwrap(),
            "--no-default-creds",
        ])
        .arg("--config-root")
        .arg(config_root(s.path()));
    let r = run(&mut c);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("dest      none (no --dest given)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("insecure in registries.conf"),
        "{}",
        r.stdout
    );
    let v = run(c.arg("--json")).json();
    assert_eq!(v["dest"], serde_json::Value::Null);
    let hosts: Vec<(&str, bool, bool)> = v["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["host"].as_str().unwrap(),
                h["insecure"].as_bool().unwrap(),
                h["tls_verify"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(hosts, [("127.0.0.1:1", true, false), (reg, false, true)]);
}

/// Files that containers/image refuses, or reads as a refusal, end to end:
/// a v1 block list is enforced; a repository prefix with a bare-host location
/// fails (it used to become docker.io/library/HOST, with Docker Hub's
/// credential); a table with a location that is not a host name refuses the
/// pulls it covers, even by a mirror this pull would not use, before the
/// worker could choke on it (issue 17).
#[test]
fn refused_registries_files() {
    let s = scratch();
    let reg = var("RIG_REGISTRY");
    let repo = var("RIG_IMG_SMALL").rsplit_once(':').unwrap().0;
    for (name, text, why) in [
        (
            "v1.conf",
            format!("[registries.block]\nregistries = [\"{reg}\"]\n"),
            "is blocked by registries.conf",
        ),
        (
            "mixed.conf",
            format!(
                "[registries.block]\nregistries = [\"{reg}\"]\n[[registry]]\nlocation = \"{reg}\"\n"
            ),
            "mixing sysregistry v1/v2 is not supported",
        ),
        (
            "bare.conf",
            format!(
                "[[registry]]\nprefix = \"{repo}\"\nlocation = \"{}\"\n",
                var("RIG_MIRROR_REGISTRY")
            ),
            "which is not a fully qualified reference",
        ),
        (
            "zw.conf",
            format!(
                "[[registry]]\nprefix = \"{reg}\"\nlocation = \"{reg}\"\n[[registry.mirror]]\nlocation = \"other\u{200b}.example\"\npull-from-mirror = \"digest-only\"\n"
            ),
            "is not HOST[:PORT][/PATH]: every pull it covers is refused",
        ),
    ] {
        let p = s.path().join(name);
        std::fs::write(&p, text).unwrap();
        let r = run(&mut pull(
            s.path(),
            var("RIG_IMG_SMALL"),
            &format!("d-{name}"),
            var("RIG_AUTHFILE"),
            p.to_str().unwrap(),
        ));
        r.assert_failure(2);
        assert!(r.stderr.contains(why), "{name}: {}", r.stderr);
        assert!(!s.path().join(format!("d-{name}")).exists());
    }
}

/// Issue 24: a registries.conf whose prefixes containers/image loads and
/// never matches (`*`, `example.com//foo`, `**.example.com`, `example.*.com`)
/// and a table with a malformed location for another registry: the pull
/// succeeds, as podman's and skopeo's would, with one warning per entry naming
/// the file and the entry.
#[test]
fn prefixes_that_match_nothing_are_loaded_with_a_warning() {
    let s = scratch();
    let p = s.path().join("odd.conf");
    let odd = ["*", "example.com//foo", "**.example.com", "example.*.com"];
    let mut text: String = odd
        .iter()
        .map(|p| format!("[[registry]]\nprefix = \"{p}\"\nlocation = \"elsewhere.example\"\n"))
        .collect();
    text += "[[registry]]\nlocation = \"other\u{200b}.example\"\n";
    std::fs::write(&p, text).unwrap();
    let r = run(&mut pull(
        s.path(),
        var("RIG_IMG_SMALL"),
        "l",
        var("RIG_AUTHFILE"),
        p.to_str().unwrap(),
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.json()["manifest_digest"],
        registry_digest(var("RIG_IMG_SMALL"))
    );
    for entry in odd.iter().copied().chain(["other\u{200b}.example"]) {
        let line = r
            .stderr
            .lines()
            .find(|l| l.contains(&format!("prefix {entry:?}")))
            .unwrap_or_else(|| panic!("no warning for {entry}: {}", r.stderr));
        assert!(line.contains("WARN") && line.contains("odd.conf"), "{line}");
    }
}

/// A name without a registry is docker.io's only where registries.conf does
/// not resolve it elsewhere: `hostpull plan` refuses it (exit 2) naming the
/// setting, its file and, for an alias, the fully qualified name (issue 14).
#[test]
fn plan_refuses_a_short_name_that_registries_conf_resolves_elsewhere() {
    let s = scratch();
    let root = config_root(s.path());
    let plan = |image: &str, extra: &[&str]| {
        let mut c = hostpull(&[]);
        c.args(["plan", image, "--sandbox", &sandbox(), "--no-default-creds"])
            .args(extra)
            .arg("--config-root")
            .arg(&root);
        run(&mut c)
    };
    let image = |r: Run| r.json()["image"].as_str().unwrap().to_owned();
    assert_eq!(
        image(plan("fedora:40", &["--json"])),
        "docker.io/library/fedora:40"
    );
    let dropins = root.join("etc/containers/registries.conf.d");
    std::fs::create_dir_all(&dropins).unwrap();
    std::fs::write(
        dropins.join("shortnames.conf"),
        "[aliases]\n\"fedora\" = \"registry.fedoraproject.org/fedora\"\n\"alpine\" = \"docker.io/library/alpine\"\n",
    )
    .unwrap();
    let r = plan("fedora:40", &[]);
    r.assert_failure(2);
    assert!(
        r.stderr
            .contains("registries.conf aliases it to registry.fedoraproject.org/fedora")
            && r.stderr.contains("shortnames.conf")
            && r.stderr
                .contains("pull registry.fedoraproject.org/fedora:40"),
        "{}",
        r.stderr
    );
    assert_eq!(
        image(plan("registry.fedoraproject.org/fedora:40", &["--json"])),
        "registry.fedoraproject.org/fedora:40"
    );
    // An alias to docker.io's own repository resolves the same.
    assert_eq!(
        image(plan("alpine", &["--json"])),
        "docker.io/library/alpine:latest"
    );
    let conf = s.path().join("search.conf");
    std::fs::write(
        &conf,
        "unqualified-search-registries = [\"quay.io\", \"docker.io\"]\n",
    )
    .unwrap();
    let r = plan("alpine", &["--registries-conf", conf.to_str().unwrap()]);
    r.assert_failure(2);
    assert!(
        r.stderr
            .contains("unqualified-search-registries would search [quay.io, docker.io]"),
        "{}",
        r.stderr
    );
}

/// `hostpull plan` with the default `--sandbox auto` reports what a pull would
/// do rather than failing: the systemd sandbox where systemd runs the host,
/// elsewhere `auto` with the error a pull gives (exit 8) (issue 14).
#[test]
fn plan_with_the_default_sandbox_reports_it() {
    let s = scratch();
    let mut c = hostpull(&[]);
    c.args(["plan", var("RIG_IMG_SMALL"), "--no-default-creds", "--json"])
        .arg("--config-root")
        .arg(config_root(s.path()));
    let v = run(&mut c).json();
    if Path::new("/run/systemd/system").is_dir() {
        assert_eq!(v["sandbox"], "systemd", "{v}");
        assert!(v.get("sandbox_error").is_none(), "{v}");
    } else {
        assert_eq!(v["sandbox"], "auto", "{v}");
        assert!(
            v["sandbox_error"]
                .as_str()
                .unwrap()
                .contains("pass --sandbox none"),
            "{v}"
        );
        // A pull still fails, before anything is written.
        let mut p = hostpull(&[]);
        p.args(["pull", var("RIG_IMG_SMALL"), "--no-default-creds", "--dest"])
            .arg(oci(&s.path().join("d")))
            .arg("--config-root")
            .arg(config_root(s.path()));
        run(&mut p).assert_failure(8);
        assert!(!s.path().join("d").exists());
    }
}
