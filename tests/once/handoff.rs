//! The hand-off to host-update consumers, through stand-ins that check the
//! exact contract (argv, a layout an unprivileged user can read, exit codes):
//! rpm-ostree and bootc cannot be installed here.

use std::ffi::OsStr;
use std::path::Path;

use crate::util::*;

/// `hostpull rebase` of the small image into a layout under a world-searchable
/// directory, with the stand-ins first on PATH.
fn rebase(dir: &Path, consumer: &str, extra: &[&str], fail: Option<&str>) -> (Run, String) {
    let (layout, sandbox) = (dir.join("layout"), sandbox());
    let mut args: Vec<&OsStr> = small(&sandbox).map(OsStr::new).to_vec();
    args.extend([OsStr::new("--layout"), layout.as_os_str()]);
    args.extend(extra.iter().map(OsStr::new));
    rebase_args(dir, consumer, &args, fail)
}

/// The small image, the suite's `sandbox`, the rig's credential and CA.
fn small(sandbox: &str) -> [&str; 7] {
    [
        var("RIG_IMG_SMALL"),
        "--sandbox",
        sandbox,
        "--authfile",
        var("RIG_AUTHFILE"),
        "--cert-dir",
        var("RIG_CERT_DIR"),
    ]
}

/// `hostpull rebase --consumer CONSUMER ARGS`, with the stand-ins first on PATH.
fn rebase_args(dir: &Path, consumer: &str, args: &[&OsStr], fail: Option<&str>) -> (Run, String) {
    let log = dir.join(format!("{consumer}.log"));
    let stand_ins = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stand-ins");
    let mut c = hostpull(&[]);
    c.args(["rebase", "--consumer", consumer])
        .args(args)
        .env(
            "PATH",
            format!("{}:{}", stand_ins.display(), std::env::var("PATH").unwrap()),
        )
        .env("STANDIN_LOG", &log);
    if let Some(f) = fail {
        c.env("STANDIN_FAIL", f);
    }
    let r = run(&mut c);
    (r, std::fs::read_to_string(&log).unwrap_or_default())
}

/// A scratch directory anyone may search: the consumer's own skopeo is
/// unprivileged, so every directory on the way to the layout must be.
fn searchable_scratch() -> tempfile::TempDir {
    let s = scratch();
    std::fs::set_permissions(
        s.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    s
}

#[test]
fn rebase_hands_the_layout_to_rpm_ostree_and_bootc() {
    let s = searchable_scratch();
    let layout = s.path().join("layout");
    let (r, log) = rebase(s.path(), "rpm-ostree", &["--reboot"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        log,
        format!(
            "rpm-ostree rebase ostree-unverified-image:oci:{}:v1 --reboot\n",
            layout.display()
        )
    );
    let (r, log) = rebase(s.path(), "bootc", &[], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        log,
        format!("bootc switch --transport oci {}:v1\n", layout.display())
    );
    // A failing consumer: exit 10, its own message on stderr.
    let (r, _) = rebase(
        s.path(),
        "bootc",
        &["--reboot"],
        Some("no space for a new deployment"),
    );
    assert_eq!(r.code, 10, "{}", r.stderr);
    assert!(
        r.stderr.contains("no space for a new deployment")
            && r.stderr.contains("error: bootc failed"),
        "{}",
        r.stderr
    );
}

/// Into containers-storage, the image is handed over by digest, as the
/// machine-config daemon names an image in the node's storage (issue 47).
#[test]
fn rebase_hands_an_image_in_containers_storage_by_digest() {
    let s = scratch();
    let store = format!(
        "[vfs@{}+{}]",
        s.path().join("graph").display(),
        s.path().join("run").display()
    );
    let dest = format!("containers-storage:{store}localhost/os:stable");
    let sandbox = sandbox();
    let mut args: Vec<&OsStr> = small(&sandbox).map(OsStr::new).to_vec();
    args.extend(["--dest", &dest].map(OsStr::new));
    let digest = registry_digest(var("RIG_IMG_SMALL"));
    let (r, log) = rebase_args(s.path(), "rpm-ostree", &args, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        log,
        format!(
            "rpm-ostree rebase ostree-unverified-image:containers-storage:{store}localhost/os@{digest}\n"
        )
    );
    let (r, log) = rebase_args(s.path(), "bootc", &args, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        log,
        format!("bootc switch --transport containers-storage {store}localhost/os@{digest}\n")
    );
}

/// What the host's setup or the command line refuses is exit 2, before the
/// registry is asked for anything, and makes no layout:
/// - a consumer that is not on PATH (or not executable there);
/// - a layout whose path holds a colon, which the consumer could not be
///   named (its skopeo's `oci:DIR:TAG` ends DIR at the first colon; it once
///   became DIR's part before the colon, tagged with the rest).
#[test]
fn rebase_refused_by_its_setup_fetches_nothing() {
    let s = searchable_scratch();
    let name = "hostpull/rebase-no-consumer";
    let image = format!("{}/{name}:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_SMALL"), &image, &[]);
    let not_executable = s.path().join("bin");
    std::fs::create_dir(&not_executable).unwrap();
    std::fs::write(not_executable.join("bootc"), "#!/bin/sh\n").unwrap();
    let path = format!(
        "{}:{}",
        not_executable.display(),
        std::env::var("PATH").unwrap()
    );
    // The consumer is there: only the colon is wrong.
    let with_consumer = format!(
        "{}/tests/stand-ins:{}",
        env!("CARGO_MANIFEST_DIR"),
        std::env::var("PATH").unwrap()
    );
    let no_consumer = |c: &str| format!("the consumer {c} is not on PATH");
    let cases = [
        ("rpm-ostree", "layout", &path, no_consumer("rpm-ostree")),
        ("bootc", "layout", &path, no_consumer("bootc")),
        (
            "bootc",
            "lay:out",
            &with_consumer,
            "error: invalid layout directory: ".to_owned(),
        ),
    ];
    for (consumer, dir, path, want) in cases {
        let layout = s.path().join(dir);
        let mark = registry_log_mark();
        let mut c = with_rig_creds(hostpull(&["rebase", "--consumer", consumer, &image]));
        c.args(["--sandbox", &sandbox()])
            .arg("--layout")
            .arg(&layout);
        let r = run(c.env("PATH", path));
        r.assert_failure(2);
        assert!(r.stderr.contains(&want), "{}", r.stderr);
        for kind in ["manifests", "blobs"] {
            assert_eq!(fetched_since(mark, name, kind), Vec::<String>::new());
        }
        assert!(!layout.exists());
    }
}

/// The stand-in's readability check can fail: a layout below a directory only
/// root may search is refused by it.
#[test]
fn an_unreadable_layout_is_what_the_consumer_refuses() {
    let s = scratch();
    std::fs::set_permissions(
        s.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let (r, log) = rebase(s.path(), "rpm-ostree", &[], None);
    assert_eq!(r.code, 10, "{}", r.stderr);
    assert!(
        r.stderr.contains("not readable by an unprivileged user"),
        "{}",
        r.stderr
    );
    assert!(log.starts_with("rpm-ostree rebase "));
}

/// A rebase of what a profile names: its image, its destination and its
/// sources, with no image on the command line (what a unit runs; the
/// enforcing guest found it failing on the missing image).
#[test]
fn rebase_takes_the_image_and_layout_from_a_profile() {
    let s = searchable_scratch();
    let layout = s.path().join("from-profile");
    let image = format!("docker://{}", var("RIG_IMG_SMALL"));
    let dest = oci(&layout);
    let root = profile_root(s.path().join("root"), &image, &dest);
    let sandbox = sandbox();
    let args = ["--profile", "os", "--sandbox", &sandbox, "--config-root"].map(OsStr::new);
    let args = [&args[..], &[root.as_os_str()]].concat();
    let (r, log) = rebase_args(s.path(), "bootc", &args, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        log,
        format!("bootc switch --transport oci {}:v1\n", layout.display())
    );
}
