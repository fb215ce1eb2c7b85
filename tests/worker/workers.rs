//! The worker is whatever skopeo the host ships: Debian 12's 1.9.3 (proxy
//! protocol 0.2.3) and the 1.18 (0.2.6) and 1.22 (0.2.8) that tests/rig.sh
//! installs beside it. tests/run.sh runs the whole suite against each
//! (`HOSTPULL_SKOPEO`); these tests check what differs between them.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::util::*;

const ACCEPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/accept-anything.json"
);

/// `--skopeo` for a wrapper that starts the suite's worker with `--policy
/// POLICY`: the worker then sees POLICY as its host's policy.json, whether it
/// runs as our child or in a unit (which sees the host's /etc as it is).
fn worker_with_host_policy(dir: &Path, policy: &str) -> PathBuf {
    let policy_file = dir.join("host-policy.json");
    std::fs::write(&policy_file, policy).unwrap();
    let wrapper = dir.join("skopeo");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {} --policy {} \"$@\"\n",
            worker_skopeo(),
            policy_file.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

/// Root alone enforces the signature policy. From protocol 0.2.6 on, skopeo's
/// proxy evaluates a policy inside OpenImage; a host policy that rejects
/// everything, or requires a signature the image does not have, must not
/// change a pull that the policy root applies (`--policy`) accepts.
#[test]
fn the_hosts_policy_never_applies_in_the_worker() {
    let signed_by = format!(
        r#"{{"default":[{{"type":"signedBy","keyType":"GPGKeys","keyPath":"{}"}}]}}"#,
        Path::new(var("RIG_SIG_DIR")).join("signer.asc").display()
    );
    for host_policy in [r#"{"default":[{"type":"reject"}]}"#, signed_by.as_str()] {
        let dir = dir_under_run();
        let skopeo = worker_with_host_policy(dir.path(), host_policy);
        let s = scratch();
        let dest = s.path().join("l");
        let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&dest)));
        c.arg("--skopeo").arg(&skopeo).args(["--policy", ACCEPT]);
        let r = run(&mut c).json();
        assert_eq!(
            r["manifest_digest"],
            registry_digest(var("RIG_IMG_SMALL")),
            "{host_policy}"
        );
        assert_eq!(r["worker"]["protocol"], worker_protocol());
    }
}

/// The same with the host's own /etc/containers/policy.json, for every worker
/// the rig installed: in a mount namespace where it rejects everything, a pull
/// under `--policy` accept-anything succeeds. Host pass only (tests/run.sh
/// filters `host_pass_` out of the systemd passes): units see PID 1's /etc,
/// not our namespace.
#[test]
fn host_pass_a_rejecting_etc_policy_json_does_not_reach_any_worker() {
    let s = scratch();
    for (i, worker) in var("RIG_WORKERS").split(' ').enumerate() {
        let dest = s.path().join(format!("l{i}"));
        let mut pull = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&dest)));
        pull.args(["--skopeo", worker, "--policy", ACCEPT]);
        let r = run(&mut with_rejecting_etc_policy_json(&pull, s.path())).json();
        assert_eq!(
            r["manifest_digest"],
            registry_digest(var("RIG_IMG_SMALL")),
            "{worker}"
        );
    }
}

/// `--json` names the worker: its version and protocol, and how its blobs
/// came: `GetRawBlob` from protocol 0.2.8 on, with the worker hashing nothing
/// (root does), `GetBlob` below.
#[test]
fn the_report_names_the_worker_and_its_protocol() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    let r = pulled(var("RIG_IMG_SMALL"), &dest);
    let w = &r["worker"];
    assert_eq!(w["protocol"], worker_protocol());
    let version = skopeo_version(&worker_skopeo());
    assert_eq!(w["skopeo"], version.as_str());
    let raw = semver_at_least(worker_protocol(), (0, 2, 8));
    assert_eq!(w["blobs_via"], if raw { "GetRawBlob" } else { "GetBlob" });
    // The default worker is the host's skopeo (1.9.3); --skopeo names another,
    // here unstable's 1.22 by a path of its own, which a unit can see.
    let other = var("RIG_WORKERS").rsplit(' ').next().unwrap();
    let dir = dir_under_run();
    let link = dir.path().join("my-skopeo");
    std::os::unix::fs::symlink(other, &link).unwrap();
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL2"), &oci(&s.path().join("m"))));
    c.env_remove("HOSTPULL_SKOPEO").arg("--skopeo").arg(&link);
    let w = &run(&mut c).json()["worker"];
    assert_eq!(
        (w["skopeo"].as_str(), w["protocol"].as_str()),
        (Some(&*skopeo_version(other)), Some(&*protocol_of(other)))
    );
    assert_ne!(w["protocol"], protocol_of("/usr/bin/skopeo"), "{other}");
}

/// A service's pull asks the worker's version once per binary: hostpull keeps
/// it in its state directory (`$STATE_DIRECTORY`) for as long as the binary is
/// the same, unchanged file, and asks again when it changes. Without a state
/// directory it asks every time.
#[test]
fn the_worker_version_is_asked_once_per_binary() {
    use std::os::unix::fs::PermissionsExt;
    let s = scratch();
    let state = s.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let dir = dir_under_run();
    let asked = dir.path().join("asked");
    let wrapper = dir.path().join("skopeo");
    let write_wrapper = |comment: &str| {
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n# {comment}\n[ \"$1\" != --version ] || echo >>{}\nexec {} \"$@\"\n",
                asked.display(),
                worker_skopeo()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write_wrapper("first");
    let dest = oci(&s.path().join("l"));
    let version = skopeo_version(&worker_skopeo());
    let times_asked = |with_state: bool| {
        let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &dest));
        c.env_remove("HOSTPULL_SKOPEO")
            .arg("--skopeo")
            .arg(&wrapper);
        c.env_remove("STATE_DIRECTORY");
        if with_state {
            c.env(
                "STATE_DIRECTORY",
                format!("{}:/nonexistent", state.display()),
            );
        }
        assert_eq!(run(&mut c).json()["worker"]["skopeo"], version.as_str());
        std::fs::read(&asked).map_or(0, |b| b.len())
    };
    assert_eq!(times_asked(true), 1);
    assert_eq!(times_asked(true), 1, "the kept version was not used");
    let kept = state.join("skopeo-version");
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode();
    assert_eq!(mode & 0o022, 0, "{mode:o}");
    // The binary changes (a package update): its version is asked again.
    write_wrapper("second");
    assert_eq!(
        times_asked(true),
        2,
        "a changed binary's version was not asked"
    );
    assert_eq!(times_asked(true), 2);
    // Something else in the file is not a version: asked, and kept again.
    let text = std::fs::read_to_string(&kept).unwrap();
    let (key, _) = text.split_once(' ').unwrap();
    std::fs::write(&kept, format!("{key} \"1.0\";rm\n")).unwrap();
    assert_eq!(times_asked(true), 3);
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), text);
    assert_eq!(times_asked(false), 4, "asked without a state directory");
}

fn semver_at_least(v: &str, min: (u64, u64, u64)) -> bool {
    let p: Vec<u64> = v.split('.').map(|x| x.parse().unwrap()).collect();
    (p[0], p[1], p[2]) >= min
}

/// A registry's errors get their documented exit codes with every worker, by
/// the registry's error code or HTTP status, never by its words or by the
/// repository's name: the bodies and names here are full of "certificate",
/// "eof", "connection reset" and "x509", cut by ": " as Go cuts its errors
/// (tests/status_registry.py). A 429 is transient: one that clears after
/// skopeo's own 5 tries pulls on hostpull's retry, one that persists is exit 6.
#[test]
fn registry_errors_are_classified_by_code_and_status_not_by_words() {
    let (port, _kill) = status_registry();
    // (repository, exit code): s<STATUS>-<m(anifest)|b(lob)>[-text][-<N>:
    // only the first N requests].
    let cases = [
        ("certificate/s401-m", 3),
        ("eof/s401-m-text", 3),
        ("eof/s401-b-text", 3),
        ("eof/s429-m-5", 0),
        ("eof/s429-b-5", 0),
        ("eof/s429-b", 6),
        ("eof/s403-m", 3),
        ("x509/s404-m", 4),
        ("certificate/s404-m-text", 4),
        ("eof/s410-m-text", 4),
        ("tls/s400-m-text", 4),
        ("certificate/s503-m-text", 6),
        ("unauthorized/s302-m", 6),
        ("certificate/s403-b", 3),
        ("eof/s404-b-text", 4),
        ("x509/s500-b", 6),
        ("eof/s502-b-text", 6),
    ];
    let s = scratch();
    let mut wrong = Vec::new();
    for (i, (repo, want)) in cases.iter().enumerate() {
        let dest = oci(&s.path().join(format!("l{i}")));
        let mut c = pull_cmd(&format!("127.0.0.1:{port}/{repo}:v1"), &dest);
        // A failure ends at --timeout; a pull that succeeds gets the time it needs.
        let timeout = if *want == 0 { "60" } else { "3" };
        c.args(["--cert-dir", var("RIG_CERT_DIR"), "--no-default-creds"])
            .args(["--timeout", timeout]);
        let r = run(&mut c);
        if r.code != *want {
            wrong.push(format!(
                "{repo}: exit {} (want {want}): {}",
                r.code,
                r.stderr.trim()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "protocol {}:\n{}",
        worker_protocol(),
        wrong.join("\n")
    );
}

/// The worker agent, the program of a pull's one unit, as root drives it: it
/// says hello on its side channel (its stdout), runs what it is asked and
/// answers with how that ended and exactly its bytes, at most the limit plus
/// one of stdout; it exits 0 when root closes the channel without asking for
/// the proxy. A stdout that is not a socket is refused.
#[test]
fn the_worker_agent_serves_its_side_channel() {
    use std::io::{BufRead, BufReader, Read, Write};
    let (root, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut agent = hostpull(&[])
        .args(["__worker-agent", "/bin/sh"])
        .stdin(Stdio::null())
        .stdout(std::os::fd::OwnedFd::from(theirs))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(root.try_clone().unwrap());
    let mut writer = root;
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "hostpull-worker-agent 1\n");
    // (script, the reply's line, the bytes after it)
    let cases = [
        (
            "printf manifest; printf oops >&2; exit 3",
            r#"{"code":3,"stdout":8,"stderr":4}"#,
            &b"manifestoops"[..],
        ),
        (
            "printf 123456789; exec sleep 60",
            r#"{"code":null,"stdout":9,"stderr":0}"#,
            &b"123456789"[..],
        ),
    ];
    for (script, reply, bytes) in cases {
        let request = serde_json::json!({"op": "run", "args": ["-c", script], "limit": 8});
        writeln!(writer, "{request}").unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), reply, "{script}");
        let mut got = vec![0; bytes.len()];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(got, bytes, "{script}");
    }
    writer.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(reader.read(&mut [0; 1]).unwrap(), 0, "nothing more");
    assert_eq!(agent.wait().unwrap().code(), Some(0));

    let out = hostpull(&[])
        .args(["__worker-agent", "/bin/sh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: __worker-agent: stdout is not"),
        "{err}"
    );
}
