//! `--dest ostree:REPO[:REF]`: a pull imported into an ostree repository, as
//! rpm-ostree and bootc store images, checked with the real `ostree` CLI.

use std::path::Path;
use std::process::Command;

use crate::util::*;

/// `ostree --repo=REPO ARGS...`, which must succeed; its stdout.
fn ostree(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("ostree")
        .arg(format!("--repo={}", repo.display()))
        .args(args)
        .output()
        .expect("running ostree");
    assert!(
        out.status.success(),
        "ostree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A new repository in `dir`, in the mode of a host's /sysroot/ostree/repo.
fn new_repo(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("repo");
    ostree(&repo, &["init", "--mode=bare"]);
    repo
}

/// What the pull left in REPO/tmp: no staging layout, whatever happened.
fn staging_left(repo: &Path) -> Vec<String> {
    std::fs::read_dir(repo.join("tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("hostpull-staging-"))
        .collect()
}

#[test]
fn ostree_destinations_are_checked() {
    let s = scratch();
    let repo = new_repo(s.path());
    let r = repo.display();
    for dest in [
        format!("ostre:{r}:os"),
        "ostree:".to_owned(),
        format!("ostree:{r}:a b"),
        format!("ostree:{r}:ostree/container/image/x"),
        format!("ostree:{}:os", s.path().join("missing").display()),
    ] {
        run(&mut with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &dest))).assert_failure(2);
    }
    if cfg!(not(feature = "ostree")) {
        let run = run(&mut pull_cmd(
            var("RIG_IMG_SMALL"),
            &format!("ostree:{r}:os"),
        ));
        run.assert_failure(2);
        assert!(
            run.stderr.contains("built without ostree support"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(ostree(&repo, &["refs"]), "");
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// An ostree-encapsulated image of a small tree, made offline (`ostree commit`,
/// then ostree-ext's `encapsulate`) and pushed to the rig: its name, and the tree.
#[cfg(feature = "ostree")]
fn encapsulated_image(dir: &Path) -> (String, std::path::PathBuf) {
    use ostree_ext::container::{Config, ImageReference, Transport, encapsulate};
    let rootfs = dir.join("rootfs");
    let files = [
        ("usr/bin/fixture-hello", "#!/bin/sh\necho hello\n"),
        ("usr/share/fixture/data.txt", "hostpull ostree fixture\n"),
        ("usr/lib/os-release", "ID=hostpull-fixture\n"),
    ];
    for (path, text) in files {
        let p = rootfs.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let src = dir.join("src-repo");
    ostree(&src, &["init", "--mode=archive"]);
    let tree = format!("--tree=dir={}", rootfs.display());
    ostree(&src, &["commit", "--branch=fixture", &tree]);
    let repo = ostree_ext::ostree::Repo::new_for_path(&src);
    repo.open(ostree_ext::gio::Cancellable::NONE).unwrap();
    let layout = dir.join("encapsulated");
    let dest = ImageReference {
        transport: Transport::OciDir,
        name: format!("{}:v1", layout.display()),
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(encapsulate(
            &repo,
            "fixture",
            &Config::default(),
            None,
            &dest,
        ))
        .unwrap();
    let image = format!("{}/hostpull/ostree-fixture:v1", var("RIG_REGISTRY"));
    skopeo(&[
        "copy",
        "-q",
        "--dest-authfile",
        var("RIG_AUTHFILE"),
        "--dest-cert-dir",
        var("RIG_CERT_DIR"),
        &format!("oci:{}:v1", layout.display()),
        &format!("docker://{image}"),
    ]);
    (image, rootfs)
}

#[cfg(feature = "ostree")]
#[test]
fn pull_imports_into_an_ostree_repo_and_sets_the_ref() {
    let s = scratch();
    let (image, rootfs) = encapsulated_image(s.path());
    let repo = new_repo(s.path());
    let out = pulled(&image, &format!("ostree:{}:hostpull/os", repo.display()));
    assert_eq!(out["dest"], repo.display().to_string());
    let commit = out["ostree"]["commit"].as_str().unwrap();
    let image_ref = ostree_ext::refescape::prefix_escape_for_ref(
        "ostree/container/image",
        &format!("docker://{image}"),
    )
    .unwrap();
    assert_eq!(
        out["ostree"]["refs"],
        serde_json::json!(["hostpull/os", image_ref])
    );
    let refs = ostree(&repo, &["refs"]);
    let refs: Vec<&str> = refs.lines().collect();
    assert!(refs.contains(&"hostpull/os"), "{refs:?}");
    assert!(refs.contains(&image_ref.as_str()), "{refs:?}");
    assert!(
        refs.iter().any(|r| r.starts_with("ostree/container/blob/")),
        "{refs:?}"
    );
    assert_eq!(ostree(&repo, &["rev-parse", "hostpull/os"]).trim(), commit);
    // The commit holds the tree that was encapsulated, file for file.
    let listed = ostree(&repo, &["ls", "-R", "hostpull/os", "/usr"]);
    let mut files: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "/usr/bin/fixture-hello",
            "/usr/lib/os-release",
            "/usr/share/fixture/data.txt"
        ]
    );
    for f in files {
        let want = std::fs::read_to_string(rootfs.join(&f[1..])).unwrap();
        assert_eq!(ostree(&repo, &["cat", "hostpull/os", f]), want, "{f}");
    }
    assert_eq!(staging_left(&repo), Vec::<String>::new());

    // A pull profile takes the same destination; the image is there already.
    let root = config_root(s.path().join("root"));
    std::fs::create_dir_all(root.join("etc/hostpull/pulls.d")).unwrap();
    std::fs::write(
        root.join("etc/hostpull/pulls.d/os.toml"),
        format!(
            "image = \"{image}\"\ndest = \"ostree:{}:hostpull/os2\"\nauthfile = [\"{}\"]\ncert-dir = \"{}\"\n",
            repo.display(),
            var("RIG_AUTHFILE"),
            var("RIG_CERT_DIR")
        ),
    )
    .unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_hostpull"));
    c.args(["pull", "--profile", "os", "--json", "--sandbox", &sandbox()])
        .arg("--config-root")
        .arg(&root);
    let again = run(&mut c).json();
    assert_eq!(again["ostree"]["commit"], commit);
    assert_eq!(ostree(&repo, &["rev-parse", "hostpull/os2"]).trim(), commit);
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

#[cfg(feature = "ostree")]
#[test]
fn a_plain_image_or_a_failed_pull_imports_nothing() {
    let s = scratch();
    let repo = new_repo(s.path());
    let dest = format!("ostree:{}:hostpull/os", repo.display());
    let plain = run(&mut with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &dest)));
    plain.assert_failure(10);
    assert!(
        plain
            .stderr
            .contains("not an ostree encapsulated container")
            && plain.stderr.contains(&repo.display().to_string()),
        "{}",
        plain.stderr
    );
    let missing = format!("{}/hostpull/nope:v1", var("RIG_REGISTRY"));
    run(&mut with_rig_creds(pull_cmd(&missing, &dest))).assert_failure(4);
    assert_eq!(ostree(&repo, &["refs"]), "");
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}
