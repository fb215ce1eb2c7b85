//! The command line at its edges (issue 26): output that cannot be written,
//! a secret or 10 kB typed where an image belongs, a destination that cannot
//! be written, host files that are missing, too big or nested too deep. Each
//! is the real binary: no panic, one `error:` line, the code README's table
//! gives, decided before any network.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// An image no pull may reach: a network error there costs 12 s of retries,
/// so a refusal that comes at once came before the network.
const UNREACHABLE: &str = "127.0.0.1:1/x:v1";

/// [`hostpull`], below warnings.
fn quiet(args: &[&str]) -> Command {
    let mut c = hostpull(args);
    c.env("RUST_LOG", "warn");
    c
}

/// `hostpull plan IMAGE --sandbox none` below a config root of its own.
fn plan_in(root: &Path, image: &str, more: &[&str]) -> Command {
    let mut c = quiet(&["plan", image, "--sandbox", "none"]);
    c.arg("--config-root").arg(config_root(root)).args(more);
    c
}

/// Where a command's stdout or stderr goes.
#[derive(Debug, Clone, Copy)]
enum Sink {
    /// A pipe whose reader is gone: every write is EPIPE.
    ClosedPipe,
    /// `/dev/full`: every write is ENOSPC.
    Full,
}

impl Sink {
    fn stdio(self) -> Stdio {
        match self {
            Self::ClosedPipe => {
                let (reader, writer) = rustix::pipe::pipe().unwrap();
                drop(reader);
                Stdio::from(writer)
            }
            Self::Full => Stdio::from(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            ),
        }
    }
}

/// Run `c` with stdout into `sink` (`stderr: false`) or stderr into it.
fn run_into(c: &mut Command, sink: Sink, stderr: bool) -> Run {
    let out = if stderr {
        c.stdout(Stdio::piped()).stderr(sink.stdio()).output()
    } else {
        c.stdout(sink.stdio()).stderr(Stdio::piped()).output()
    }
    .expect("running hostpull");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Every verb that prints: a closed stdout ends quietly with exit 0, as
/// ripgrep does (crates/core/main.rs); a full one is one `error:` line and
/// exit 2; a stderr that cannot be written never makes a panic (exit 101).
#[test]
fn output_that_cannot_be_written_is_no_panic() {
    let s = tempfile::tempdir().unwrap();
    let root = s.path().join("root");
    let layout = s.path().join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::write(
        layout.join("index.json"),
        r#"{"schemaVersion":2,"manifests":[]}"#,
    )
    .unwrap();
    let image = "docker://quay.io/a/b";
    let commands = [
        plan_in(&root, image, &[]),
        plan_in(&root, image, &["--json"]),
        quiet(&["prune", layout.to_str().unwrap(), "--json"]),
        quiet(&["man"]),
        quiet(&["completions", "bash"]),
        quiet(&["--help"]),
        quiet(&["plan", "--help"]),
        quiet(&["--version"]),
    ];
    for mut c in commands {
        let line = shell_line(&c);
        // prune tells on stderr what it removed; nothing else says a word.
        let r = run_into(&mut c, Sink::ClosedPipe, false);
        let said: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| !l.starts_with("Pruned "))
            .collect();
        assert_eq!((r.code, said), (0, vec![]), "{line} | true: {}", r.stderr);
        let r = run_into(&mut c, Sink::Full, false);
        assert_eq!(r.code, 2, "{line} > /dev/full: {}", r.stderr);
        let said: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| !l.starts_with("Pruned "))
            .collect();
        assert_eq!(
            said,
            ["error: writing to stdout: No space left on device (os error 28)"],
            "{line} > /dev/full"
        );
        for sink in [Sink::ClosedPipe, Sink::Full] {
            let r = run_into(&mut c, sink, true);
            assert_eq!(r.code, 0, "{line} 2> {sink:?}");
            assert!(!r.stdout.is_empty(), "{line} 2> {sink:?}");
        }
    }
    // A failure whose error line cannot be written keeps its code.
    let mut c = plan_in(&root, "quay.io/A", &[]);
    assert_eq!(run_into(&mut c, Sink::ClosedPipe, true).code, 2);
}

/// `pull --json` into a closed pipe or a full disk, against the rig: the
/// pull is done, and then the result cannot be told.
#[test]
fn pull_json_that_cannot_be_written_is_no_panic() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &dest));
    let r = run_into(&mut c, Sink::ClosedPipe, false);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("error:"), "{}", r.stderr);
    let r = run_into(&mut c, Sink::Full, false);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .ends_with("error: writing to stdout: No space left on device (os error 28)\n"),
        "{}",
        r.stderr
    );
    let r = run_into(&mut c, Sink::ClosedPipe, true);
    assert_eq!(r.code, 0);
    assert_eq!(r.json()["layers_fetched"], 0, "the layout had it all");
}

/// Credentials typed into an image reference are refused (exit 2) naming
/// where they go, by every verb that takes an image, and never repeated.
#[test]
fn a_secret_in_an_image_reference_is_refused_and_never_echoed() {
    let s = tempfile::tempdir().unwrap();
    let root = config_root(s.path().join("root"));
    let dest = oci(&s.path().join("l"));
    for image in [
        "docker://bob:S3CRET@quay.io/a/b",
        "bob:S3CRET@quay.io/a/b:v1",
        "docker://bob:S3CRET@quay.io",
        "https://bob:S3CRET@quay.io/a/b",
    ] {
        for verb in ["plan", "pull", "rebase"] {
            let mut c = quiet(&[verb, image, "--sandbox", "none", "--dest", &dest]);
            c.arg("--config-root").arg(&root);
            let r = run(&mut c);
            assert_eq!(r.code, 2, "{verb} {image}: {}", r.stderr);
            assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
            assert!(r.stderr.contains("--authfile"), "{}", r.stderr);
            assert!(!(r.stdout + &r.stderr).contains("S3CRET"), "{verb} {image}");
        }
    }
}

/// A 10 kB argument gets its reason first and is quoted cut, in every
/// error that quotes what was typed: a reference, a destination, a host.
#[test]
fn long_inputs_are_cut_after_the_reason() {
    let s = tempfile::tempdir().unwrap();
    let root = s.path().join("root");
    let long = "a".repeat(10_000);
    let image = format!("quay.io/{long}");
    let cases: [(&str, Vec<String>, &str); 5] = [
        (
            &image,
            vec![],
            "invalid image reference: repository name longer",
        ),
        (
            "quay.io/a",
            vec!["--dest".into(), format!("oci:/x:{long}")],
            "invalid destination: tag must be",
        ),
        (
            "quay.io/a",
            vec!["--add-host".into(), long.clone()],
            "invalid --add-host: expected NAME:IP",
        ),
        (
            "quay.io/a",
            vec!["--ca".into(), format!("{long}=/x")],
            "invalid --ca: not HOST[:PORT]",
        ),
        (
            "quay.io/a",
            vec!["--registry-token".into(), format!("{long}=/x")],
            "invalid --registry-token: not HOST[:PORT]",
        ),
    ];
    for (image, more, reason) in cases {
        let more: Vec<&str> = more.iter().map(String::as_str).collect();
        let r = run(&mut plan_in(&root, image, &more));
        assert_eq!(r.code, 2, "{}", r.stderr);
        let line = r.stderr.lines().next().unwrap();
        assert!(line.starts_with(&format!("error: {reason}")), "{line}");
        assert!(line.len() < 250, "{} bytes: {line}", line.len());
        assert!(line.ends_with(" bytes)"), "{line}");
    }
}

/// A destination is parsed where it is given: `--dest` by the command line's
/// parser, with the destination parser's one `error:` line (not clap's, which
/// quotes all of the value) and, under `--json`, the failure object; a
/// profile's `dest` as the profile is read, naming the file.
#[test]
fn a_destination_is_parsed_where_it_is_given() {
    let s = tempfile::tempdir().unwrap();
    let root = config_root(s.path().join("root"));
    let mut c = quiet(&["pull", UNREACHABLE, "--dest", "bogus:x", "--json"]);
    let r = run(c.arg("--config-root").arg(&root));
    r.assert_failure(2);
    assert!(
        r.stderr
            .starts_with("error: invalid destination: only oci:DIR[:TAG]"),
        "{}",
        r.stderr
    );
    assert_eq!(r.failure()["kind"], "usage");
    let profiles = root.join("etc/hostpull/pulls.d");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("os.toml"),
        format!("image = \"{UNREACHABLE}\"\ndest = \"bogus:x\"\n"),
    )
    .unwrap();
    let mut c = quiet(&["pull", "--profile", "os", "--sandbox", "none"]);
    let r = run(c.arg("--config-root").arg(&root));
    r.assert_failure(2);
    assert!(r.stderr.contains("os.toml"), "{}", r.stderr);
    assert!(r.stderr.contains("invalid destination"), "{}", r.stderr);
}

/// What the layout writer would refuse (or could not do) after the network
/// is refused before it, naming the path, by `plan` and `pull` alike.
#[test]
fn destinations_are_checked_before_the_network() {
    let s = tempfile::tempdir().unwrap();
    let root = config_root(s.path().join("root"));
    let d = s.path();
    std::fs::write(d.join("file"), "x").unwrap();
    std::fs::create_dir_all(d.join("full")).unwrap();
    std::fs::write(d.join("full/data"), "x").unwrap();
    std::fs::create_dir_all(d.join("old")).unwrap();
    std::fs::write(d.join("old/oci-layout"), "{}").unwrap();
    std::fs::create_dir_all(d.join("noblobs/oci-layout")).unwrap();
    let p = |rel: &str| d.join(rel).to_str().unwrap().to_owned();
    // (--dest, what the error must name)
    let cases = [
        (format!("oci:{}", p("file")), p("file")),
        (format!("oci:{}", p("file/sub")), p("file")),
        (format!("oci:{}", p("full")), p("full")),
        (format!("oci:{}", p("old")), p("old/oci-layout")),
        (format!("oci:{}", p("noblobs")), p("noblobs/oci-layout")),
        (format!("ostree:{}", p("file")), p("file")),
        (format!("ostree:{}", p("full")), p("full")),
        (String::new(), "invalid destination".to_owned()),
    ];
    for (dest, names) in &cases {
        for verb in ["plan", "pull"] {
            let mut c = quiet(&[verb, UNREACHABLE, "--sandbox", "none", "--dest", dest]);
            c.arg("--config-root").arg(&root);
            let t = Instant::now();
            let r = run(&mut c);
            assert_eq!(r.code, 2, "{verb} --dest {dest}: {}", r.stderr);
            assert!(r.stderr.starts_with("error: "), "{}", r.stderr);
            assert!(
                r.stderr.contains(names.as_str()),
                "{verb} --dest {dest}: {}",
                r.stderr
            );
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{verb} --dest {dest}: {:?}",
                t.elapsed()
            );
        }
    }
}

/// A destination below a read-only mount: its layout, or the directory it
/// would be created in, cannot be written (root's permission bits would not
/// stop root). In a mount namespace of its own: host pass only.
#[test]
fn host_pass_an_unwritable_destination_is_refused_before_the_network() {
    let s = tempfile::tempdir().unwrap();
    let root = config_root(s.path().join("root"));
    let ro = s.path().join("ro");
    std::fs::create_dir_all(ro.join("layout")).unwrap();
    for dest in [ro.join("layout"), ro.join("new"), ro.join("new/deeper")] {
        let pull = {
            let mut c = quiet(&["pull", UNREACHABLE, "--sandbox", "none", "--dest"]);
            c.arg(oci(&dest)).arg("--config-root").arg(&root);
            c
        };
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount --bind {0} {0} && mount -o remount,bind,ro {0} && exec \"$@\"",
                ro.display()
            ))
            .arg("sh")
            .arg(pull.get_program())
            .args(pull.get_args());
        let t = Instant::now();
        let r = run(&mut c);
        assert_eq!(r.code, 2, "{}: {}", dest.display(), r.stderr);
        let want = if dest.ends_with("layout") { &dest } else { &ro };
        assert!(
            r.stderr
                .contains(&format!("{} is not writable", want.display())),
            "{}: {}",
            dest.display(),
            r.stderr
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}

/// The host's setup is exit 2 naming what is wrong, at once: a credential
/// helper or provider plugin that is not there or answers more than 1 MiB,
/// a host file nested 100 000 levels deep, a drop-in that is a directory.
#[test]
fn host_setup_errors_are_usage_errors_naming_them() {
    let s = tempfile::tempdir().unwrap();
    let d = s.path();
    let root = config_root(d.join("root"));
    let write = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let helper = write(
        "helper.json",
        r#"{"auths":{},"credHelpers":{"127.0.0.1:1":"hostpull-no-such-helper"}}"#,
    );
    let providers = write(
        "providers.yaml",
        "kind: CredentialProviderConfig\nproviders:\n- name: big\n  matchImages: [\"127.0.0.1:1\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    );
    let bin = dir_under_run();
    let empty_bin = dir_under_run();
    let big = bin.path().join("big");
    std::fs::write(&big, "#!/bin/sh\nexec head -c 1100000 /dev/zero\n").unwrap();
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o755)).unwrap();
    let deep = "[".repeat(100_000);
    let deep_json = write("deep.json", &deep);
    std::fs::create_dir_all(d.join("registries.d")).unwrap();
    write("registries.d/deep.yaml", &deep);
    let deep_toml = write("deep.conf", &format!("a = {deep}"));
    let dropin = config_root(d.join("dropin"));
    std::fs::create_dir_all(dropin.join("etc/containers/registries.conf.d/50-x.conf")).unwrap();
    let cfg_dropin = config_root(d.join("cfgdropin"));
    std::fs::create_dir_all(cfg_dropin.join("etc/hostpull/config.d")).unwrap();
    std::fs::write(
        cfg_dropin.join("etc/hostpull/config.d/deep.toml"),
        format!("a = {deep}"),
    )
    .unwrap();
    let rd = d.join("registries.d");
    let s_ = |p: &Path| p.to_str().unwrap().to_owned();
    // (root, options, what the error names)
    let cases: Vec<(&Path, Vec<String>, String)> = vec![
        (
            &root,
            vec!["--authfile".into(), helper],
            "docker-credential-hostpull-no-such-helper".into(),
        ),
        (
            &root,
            vec![
                "--credential-provider-config".into(),
                providers.clone(),
                "--credential-provider-bin-dir".into(),
                s_(empty_bin.path()),
            ],
            s_(&empty_bin.path().join("big")),
        ),
        (
            &root,
            vec![
                "--credential-provider-config".into(),
                providers.clone(),
                "--credential-provider-bin-dir".into(),
                s_(bin.path()),
            ],
            format!("{}: its answer is larger than 1024 KiB", big.display()),
        ),
        (
            &root,
            vec!["--authfile".into(), deep_json.clone()],
            deep_json.clone(),
        ),
        (
            &root,
            vec!["--pull-secret".into(), deep_json.clone()],
            deep_json.clone(),
        ),
        (
            &root,
            vec![
                "--credential-provider-config".into(),
                deep_json.clone(),
                "--credential-provider-bin-dir".into(),
                s_(bin.path()),
            ],
            deep_json.clone(),
        ),
        (
            &root,
            vec!["--policy".into(), deep_json.clone()],
            deep_json.clone(),
        ),
        (
            &root,
            vec!["--registries.d".into(), s_(&rd)],
            s_(&rd.join("deep.yaml")),
        ),
        (
            &root,
            vec!["--registries-conf".into(), deep_toml.clone()],
            deep_toml.clone(),
        ),
        (
            &dropin,
            vec![],
            s_(&dropin.join("etc/containers/registries.conf.d/50-x.conf")),
        ),
        (
            &cfg_dropin,
            vec![],
            "/etc/hostpull/config.d/deep.toml".into(),
        ),
    ];
    for (root, options, names) in cases {
        let mut c = quiet(&["plan", UNREACHABLE, "--sandbox", "none", "--config-root"]);
        c.arg(root).args(&options);
        let t = Instant::now();
        let r = run(&mut c);
        let elapsed = t.elapsed();
        assert_eq!(r.code, 2, "{options:?}: {}", r.stderr);
        assert!(r.stderr.starts_with("error: "), "{options:?}: {}", r.stderr);
        assert!(r.stderr.contains(&names), "{options:?}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(elapsed < Duration::from_secs(1), "{options:?}: {elapsed:?}");
    }
}

/// Trust files before the network (issue 45): a `--ca` file or a certs.d
/// client certificate with no certificate in it is exit 2 from `plan` and
/// `pull` at once, naming it. A `--ca` for a host the pull does not use is a
/// warning naming it; a `[cluster]` one (for the cluster's hosts) is not.
#[test]
fn trust_files_without_a_certificate_and_unused_cas() {
    let s = scratch();
    let (bare, root) = (s.path().join("bare"), s.path().join("certs-d"));
    let empty = s.path().join("empty.crt");
    std::fs::write(&empty, "").unwrap();
    let certs_d = root.join("etc/containers/certs.d/127.0.0.1:1");
    std::fs::create_dir_all(&certs_d).unwrap();
    let key_only =
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
    std::fs::write(certs_d.join("client.cert"), key_only).unwrap();
    std::fs::write(certs_d.join("client.key"), key_only).unwrap();
    let ca = format!("127.0.0.1:1={}", empty.display());
    let dest = oci(&s.path().join("d"));
    let cases = [
        (&bare, vec!["--ca", &ca], empty.clone()),
        (&root, vec![], certs_d.join("client.cert")),
    ];
    for (root, more, named) in &cases {
        for verb in ["plan", "pull"] {
            let mut c = quiet(&[verb, UNREACHABLE, "--sandbox", "none", "--dest", &dest]);
            c.args(more).arg("--config-root").arg(config_root(root));
            let t = Instant::now();
            let r = run(&mut c);
            r.assert_failure(2);
            let want = format!("{}: no certificate in it", named.display());
            assert!(r.stderr.contains(&want), "{verb}: {}", r.stderr);
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{verb}: after the network"
            );
        }
    }
    let warned = "this pull does not use other.example:5000, only 127.0.0.1:1";
    let plan = |root: &Path, ca_host: &str| {
        let ca = format!("{ca_host}={}", var("RIG_CA"));
        let r = run(&mut plan_in(root, UNREACHABLE, &["--ca", &ca]));
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stderr
    };
    let said = plan(&bare, "other.example:5000");
    assert!(said.contains(" WARN ") && said.contains(warned), "{said}");
    assert!(!plan(&bare, "127.0.0.1:1").contains(warned));
    let cluster = s.path().join("cluster");
    std::fs::create_dir_all(cluster.join("etc/hostpull")).unwrap();
    std::fs::write(
        cluster.join("etc/hostpull/config.toml"),
        format!(
            "[cluster]\nca = [\"other.example:5000={}\"]\n",
            var("RIG_CA")
        ),
    )
    .unwrap();
    assert!(!plan(&cluster, "127.0.0.1:1").contains(warned));
}
