//! Robustness at the edge of the binary: bad configuration is exit 2 naming what
//! is wrong, and the committed fuzz corpus (fuzz/corpus) replays through the
//! same contract checks the fuzz targets assert (fuzz/src/contract.rs).

use crate::util::*;

#[test]
fn missing_config_root_is_a_usage_error_naming_it() {
    let dir = scratch();
    let missing = dir.path().join("no-such-root");
    let r = run(hostpull(&[])
        .args(["plan", "127.0.0.1:1/x:v1", "--dest", "oci:/nonexistent/d"])
        .arg("--config-root")
        .arg(&missing));
    r.assert_failure(2);
    assert!(r.stderr.contains(missing.to_str().unwrap()), "{}", r.stderr);
}

/// A file of the image host's certs.d that the pull would read and cannot (a
/// `.crt` that is a directory or a dangling link, a client key that is a
/// directory) is exit 2 naming it, before any worker starts.
#[test]
fn unreadable_trust_files_are_usage_errors_naming_them() {
    let s = scratch();
    type Make = fn(&std::path::Path);
    let cases: [(&str, Make); 3] = [
        ("ca.crt", |p| std::fs::create_dir(p).unwrap()),
        ("ca.crt", |p| {
            std::os::unix::fs::symlink("/nonexistent", p).unwrap()
        }),
        ("client.key", |p| std::fs::create_dir(p).unwrap()),
    ];
    for (i, (name, make)) in cases.into_iter().enumerate() {
        let root = config_root(s.path().join(format!("root{i}")));
        let certs_d = root.join("etc/containers/certs.d/127.0.0.1:1");
        std::fs::create_dir_all(&certs_d).unwrap();
        std::fs::copy(var("RIG_CA"), certs_d.join("client.cert")).unwrap();
        if name != "client.key" {
            std::fs::write(certs_d.join("client.key"), "x").unwrap();
        }
        let bad = certs_d.join(name);
        make(&bad);
        let dest = oci(&s.path().join(format!("l{i}")));
        let r = run(pull_cmd("127.0.0.1:1/x:v1", &dest)
            .arg("--config-root")
            .arg(&root));
        r.assert_failure(2);
        assert!(r.stderr.contains(bad.to_str().unwrap()), "{}", r.stderr);
    }
}

/// A FIFO where a file is expected (the config root's policy.json, an
/// authfile, a certs.d CA) is refused at once, exit 2 naming it: opening one
/// to read would wait forever for a writer (src/open.rs). Each command gets
/// 30 s; main waited past them on the first two.
#[test]
fn a_fifo_for_a_file_is_refused_not_waited_on() {
    let s = scratch();
    let mkfifo = |p: &std::path::Path| {
        let _ = std::fs::remove_file(p);
        assert!(
            std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap()
                .success()
        );
    };
    let policy_root = config_root(s.path().join("policy"));
    let policy = policy_root.join("etc/containers/policy.json");
    mkfifo(&policy);
    let auth = s.path().join("auth.json");
    mkfifo(&auth);
    let ca_root = config_root(s.path().join("ca"));
    let ca = ca_root.join("etc/containers/certs.d/127.0.0.1:1/ca.crt");
    std::fs::create_dir_all(ca.parent().unwrap()).unwrap();
    mkfifo(&ca);
    let plain_root = config_root(s.path().join("plain"));
    let cases = [
        (&policy_root, None, &policy),
        (&plain_root, Some(&auth), &auth),
        (&ca_root, None, &ca),
    ];
    for (root, authfile, named) in cases {
        let mut c = pull_cmd("127.0.0.1:1/x:v1", &oci(&s.path().join("l")));
        c.arg("--config-root").arg(root);
        if let Some(a) = authfile {
            c.arg("--authfile").arg(a);
        }
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > std::time::Duration::from_secs(30) {
                child.kill().unwrap();
                panic!("still waiting on the FIFO {} after 30 s", named.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(err.contains(named.to_str().unwrap()), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{err}"
        );
    }
}

#[path = "../../fuzz/src/contract.rs"]
#[allow(dead_code)]
mod contract;

/// Every file of fuzz/corpus/TARGET (seeds, and every crash the fuzzer ever
/// found, kept once fixed) goes through its target's contract check, as the
/// fuzzer ran it.
#[test]
fn fuzz_corpus_replays_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut total = 0;
    for (name, check) in contract::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no seeds for fuzz target {name}");
        for f in &files {
            let data = std::fs::read(f).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(
                r.is_ok(),
                "fuzz target {name}: {} breaks the contract",
                f.display()
            );
        }
        total += files.len();
    }
    eprintln!("replayed {total} corpus files");
}
