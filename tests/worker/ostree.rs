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

/// The files of the encapsulated test tree.
#[cfg(feature = "ostree")]
const BASE_FILES: [(&str, &str); 3] = [
    ("usr/bin/fixture-hello", "#!/bin/sh\necho hello\n"),
    ("usr/share/fixture/data.txt", "hostpull ostree fixture\n"),
    ("usr/lib/os-release", "ID=hostpull-fixture\n"),
];

/// Write `files` (path, text) below `root`.
#[cfg(feature = "ostree")]
fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// An ostree-encapsulated image of `rootfs`, made offline (`ostree commit`,
/// then ostree-ext's `encapsulate`, with `opts`) as the OCI layout `dir/NAME`
/// with tag v1.
#[cfg(feature = "ostree")]
fn encapsulate_tree(
    dir: &Path,
    name: &str,
    rootfs: &Path,
    opts: impl FnOnce(
        &ostree_ext::ostree::Repo,
        &str,
    ) -> Option<ostree_ext::container::ExportOpts<'static, 'static>>,
) -> std::path::PathBuf {
    use ostree_ext::container::{Config, ImageReference, Transport, encapsulate};
    let src = dir.join(format!("{name}-src-repo"));
    ostree(&src, &["init", "--mode=archive"]);
    let tree = format!("--tree=dir={}", rootfs.display());
    let commit = ostree(&src, &["commit", "--branch=fixture", &tree]);
    let repo = ostree_ext::ostree::Repo::new_for_path(&src);
    repo.open(ostree_ext::gio::Cancellable::NONE).unwrap();
    let layout = dir.join(name);
    let dest = ImageReference {
        transport: Transport::OciDir,
        name: format!("{}:v1", layout.display()),
    };
    let opts = opts(&repo, commit.trim());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(encapsulate(
            &repo,
            "fixture",
            &Config::default(),
            opts,
            &dest,
        ))
        .unwrap();
    layout
}

/// Push the layout `layout:tag` to the rig as `image`.
#[cfg(feature = "ostree")]
fn push(layout: &Path, tag: &str, image: &str) {
    skopeo(&[
        "copy",
        "-q",
        "--dest-authfile",
        var("RIG_AUTHFILE"),
        "--dest-cert-dir",
        var("RIG_CERT_DIR"),
        &oci_tag(layout, tag),
        &format!("docker://{image}"),
    ]);
}

/// An ostree-encapsulated image of a small tree, pushed to the rig: its name,
/// and the tree.
#[cfg(feature = "ostree")]
fn encapsulated_image(dir: &Path) -> (String, std::path::PathBuf) {
    let rootfs = dir.join("rootfs");
    write_tree(&rootfs, &BASE_FILES);
    let layout = encapsulate_tree(dir, "encapsulated", &rootfs, |_, _| None);
    // A repository of its own per call: tests run in parallel, and each
    // encapsulation differs (timestamps), so a shared tag would move under them.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let image = format!(
        "{}/hostpull/ostree-fixture-{}-{n}:v1",
        var("RIG_REGISTRY"),
        std::process::id()
    );
    push(&layout, "v1", &image);
    (image, rootfs)
}

/// `base` (an OCI layout, tag v1) plus one plain gzip layer holding `files`,
/// as bootc-style derived images are built: the layout `out` with tag v1.
#[cfg(feature = "ostree")]
fn derive(base: &Path, out: &Path, files: &[(&str, &str)]) {
    derive_as(base, out, files, gzip);
}

/// gzip -n of `bytes`.
#[cfg(feature = "ostree")]
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = Command::new("gzip")
        .args(["-n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut gz.stdin.take().unwrap(), bytes).unwrap();
    gz.wait_with_output().unwrap().stdout
}

/// [`derive`], with the layer's tar made into its blob by `compress` (which
/// may lie: the layer is declared gzip whatever it returns).
#[cfg(feature = "ostree")]
fn derive_as(base: &Path, out: &Path, files: &[(&str, &str)], compress: fn(&[u8]) -> Vec<u8>) {
    use serde_json::{Value, json};
    let cp = Command::new("cp")
        .arg("-a")
        .arg(base)
        .arg(out)
        .status()
        .unwrap();
    assert!(cp.success());
    let tree = out.with_extension("tree");
    write_tree(&tree, files);
    let tar = Command::new("tar")
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mtime=@0",
        ])
        .arg("-C")
        .arg(&tree)
        .args(["-cf", "-", "usr"])
        .output()
        .unwrap();
    assert!(tar.status.success());
    let gz = compress(&tar.stdout);
    let blobs = out.join("blobs/sha256");
    let put = |bytes: &[u8]| {
        let d = hostpull::digest::sha256(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).unwrap();
        d.to_string()
    };
    let read = |d: &Value| -> Value {
        let hex = d.as_str().unwrap().strip_prefix("sha256:").unwrap();
        serde_json::from_slice(&std::fs::read(blobs.join(hex)).unwrap()).unwrap()
    };
    let index: Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    let mut manifest = read(&index["manifests"][0]["digest"]);
    let mut config = read(&manifest["config"]["digest"]);
    let diff_id = hostpull::digest::sha256(&tar.stdout).to_string();
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .unwrap()
        .push(json!(diff_id));
    config["history"]
        .as_array_mut()
        .unwrap()
        .push(json!({"created_by": "hostpull test: derived layer"}));
    let config = serde_json::to_vec(&config).unwrap();
    manifest["config"]["digest"] = json!(put(&config));
    manifest["config"]["size"] = json!(config.len());
    manifest["layers"].as_array_mut().unwrap().push(json!({
        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
        "digest": put(&gz),
        "size": gz.len(),
    }));
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": put(&manifest),
        "size": manifest.len(),
        "annotations": {"org.opencontainers.image.ref.name": "v1"},
    }]});
    std::fs::write(out.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

/// The digests of the layers of `image` as the registry serves it, and its config.
#[cfg(feature = "ostree")]
fn layers_of(image: &str) -> (Vec<(String, u64)>, (String, u64)) {
    let m = registry_raw(image);
    let d = |v: &serde_json::Value| {
        (
            v["digest"].as_str().unwrap().to_owned(),
            v["size"].as_u64().unwrap(),
        )
    };
    (
        m["layers"].as_array().unwrap().iter().map(d).collect(),
        d(&m["config"]),
    )
}

/// The regular files below `dir` in `rev`, with their contents.
#[cfg(feature = "ostree")]
fn files_in(repo: &Path, rev: &str, dir: &str) -> Vec<(String, String)> {
    let listed = ostree(repo, &["ls", "-R", rev, dir]);
    listed
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|f| (f.to_owned(), ostree(repo, &["cat", rev, f])))
        .collect()
}

/// A pull with `--progress-fd`: its JSON result and the last ProgressBytes event.
#[cfg(feature = "ostree")]
fn pulled_with_progress(
    image: &str,
    dest: &str,
    dir: &Path,
) -> (serde_json::Value, serde_json::Value) {
    let events = dir.join("progress.jsonl");
    let mut c = with_rig_creds(pull_cmd(image, dest));
    c.args(["--progress-fd", "3"]);
    let r = run(Command::new("bash").arg("-c").arg(format!(
        "exec {} 3>'{}'",
        shell_line(&c),
        events.display()
    )));
    let out = r.json();
    let text = std::fs::read_to_string(&events).unwrap();
    let last = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|l| l["type"] == "ProgressBytes")
        .unwrap_or_else(|| panic!("no ProgressBytes in {text}"));
    (out, last)
}

/// The update case of image-based hosts: an encapsulated base and two derived
/// images (v1, v2) that share it. Pulling v2 into a repository that has v1
/// fetches only v2's own layer and config, which the registry's access log
/// confirms; the ref then shows v2's files; pulling v2 again fetches nothing.
#[cfg(feature = "ostree")]
#[test]
fn an_update_fetches_only_the_layers_the_repository_lacks() {
    let s = scratch();
    let rootfs = s.path().join("rootfs");
    write_tree(&rootfs, &BASE_FILES);
    let base = encapsulate_tree(s.path(), "base", &rootfs, |_, _| None);
    let v1_files = [
        ("usr/share/derived/release.txt", "derived v1\n"),
        ("usr/share/derived/only-in-v1", "1\n"),
    ];
    let v2_files = [
        ("usr/share/derived/release.txt", "derived v2\n"),
        ("usr/share/derived/only-in-v2", "2\n"),
    ];
    let name = "hostpull/ostree-update";
    // One tag that moves, as a host follows `:stable`.
    let image = format!("{}/{name}:stable", var("RIG_REGISTRY"));
    let publish = |tag: &str, files: &[(&str, &str)]| {
        let layout = s.path().join(format!("derived-{tag}"));
        derive(&base, &layout, files);
        push(&layout, "v1", &image);
        layers_of(&image)
    };
    let (v1_layers, v1_config) = publish("v1", &v1_files);
    assert_eq!(v1_layers.len(), 2);
    let repo = new_repo(s.path());
    let dest = format!("ostree:{}:hostpull/os", repo.display());

    // v1 into an empty repository: everything.
    let mark = registry_log_mark();
    let first = pulled(&image, &dest);
    let mut got = fetched_since(mark, name, "blobs");
    got.sort();
    let mut want = vec![
        v1_config.0.clone(),
        v1_layers[0].0.clone(),
        v1_layers[1].0.clone(),
    ];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        (
            first["layers_fetched"].as_u64(),
            first["layers_reused"].as_u64()
        ),
        (Some(2), Some(0))
    );
    assert_eq!(
        first["bytes_fetched"].as_u64().unwrap(),
        v1_config.1 + v1_layers[0].1 + v1_layers[1].1
    );

    let (v2_layers, v2_config) = publish("v2", &v2_files);
    assert_eq!(v1_layers[0], v2_layers[0], "the base layer is shared");
    assert_ne!(v1_layers[1], v2_layers[1]);
    // v2: the base layer is in the repository; only v2's layer and config come.
    let mark = registry_log_mark();
    let (update, progress) = pulled_with_progress(&image, &dest, s.path());
    assert_eq!(
        fetched_since(mark, name, "blobs"),
        [v2_config.0.clone(), v2_layers[1].0.clone()]
    );
    assert_eq!(
        (
            update["layers_fetched"].as_u64(),
            update["layers_reused"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(
        update["bytes_fetched"].as_u64().unwrap(),
        v2_config.1 + v2_layers[1].1
    );
    assert_eq!(
        progress["bytesCached"].as_u64(),
        Some(v2_layers[0].1),
        "{progress}"
    );
    assert_eq!(progress["stepsCached"].as_u64(), Some(1), "{progress}");
    assert_eq!(
        progress["bytesTotal"].as_u64(),
        Some(v2_config.1 + v2_layers[1].1),
        "{progress}"
    );
    let commit = update["ostree"]["commit"].as_str().unwrap();
    assert_ne!(commit, first["ostree"]["commit"].as_str().unwrap());
    assert_eq!(ostree(&repo, &["rev-parse", "hostpull/os"]).trim(), commit);
    // The ref shows v2's derived files, and none of v1's, over the base.
    let mut derived: Vec<(String, String)> = v2_files
        .iter()
        .map(|(p, t)| (format!("/{p}"), t.to_string()))
        .collect();
    derived.sort();
    let mut got = files_in(&repo, "hostpull/os", "/usr/share/derived");
    got.sort();
    assert_eq!(got, derived);
    assert_eq!(
        ostree(
            &repo,
            &["cat", "hostpull/os", "/usr/share/fixture/data.txt"]
        ),
        "hostpull ostree fixture\n"
    );
    // v1's own layer was pruned with v1 (ostree-ext's layer GC); the base stays.
    let refs = ostree(&repo, &["refs"]);
    let layer_ref =
        |d: &str| ostree_ext::refescape::prefix_escape_for_ref("ostree/container/blob", d).unwrap();
    assert!(
        refs.lines().any(|r| r == layer_ref(&v2_layers[0].0)),
        "{refs}"
    );
    assert!(
        refs.lines().any(|r| r == layer_ref(&v2_layers[1].0)),
        "{refs}"
    );
    assert!(
        !refs.lines().any(|r| r == layer_ref(&v1_layers[1].0)),
        "{refs}"
    );

    // v2 again: nothing to fetch, the same commit.
    let mark = registry_log_mark();
    let again = pulled(&image, &dest);
    assert_eq!(fetched_since(mark, name, "blobs"), Vec::<String>::new());
    assert_eq!(
        (
            again["layers_fetched"].as_u64(),
            again["layers_reused"].as_u64()
        ),
        (Some(0), Some(2))
    );
    assert_eq!(again["bytes_fetched"].as_u64(), Some(0));
    assert_eq!(again["ostree"]["commit"], commit);
    assert_eq!(staging_left(&repo), Vec::<String>::new());
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
    let dest = format!("ostree:{}:hostpull/os2", repo.display());
    let root = profile_root(s.path().join("root"), &image, &dest);
    let mut c = hostpull(&[]);
    c.args(["pull", "--profile", "os", "--json", "--sandbox", &sandbox()])
        .arg("--config-root")
        .arg(&root);
    let again = run(&mut c).json();
    assert_eq!(again["ostree"]["commit"], commit);
    assert_eq!(ostree(&repo, &["rev-parse", "hostpull/os2"]).trim(), commit);
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// The import runs beside the fetch, so it refuses a plain image as soon as
/// it has the config, and the pull stops then: the paced image's 4.25 MiB of
/// layers would take 8.5 s at `--max-rate 512K`.
#[cfg(feature = "ostree")]
#[test]
fn a_plain_image_or_a_failed_pull_imports_nothing() {
    let s = scratch();
    let repo = new_repo(s.path());
    let dest = format!("ostree:{}:hostpull/os", repo.display());
    let mut pull = with_rig_creds(pull_cmd(var("RIG_IMG_PACED"), &dest));
    pull.args(["--max-rate", "512K"]);
    let started = std::time::Instant::now();
    let plain = run(&mut pull);
    let took = started.elapsed();
    plain.assert_failure(10);
    assert!(took.as_secs() < 5, "the pull went on for {took:?}");
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

/// An encapsulated base plus one derived layer holding `usr/share/derived/x`,
/// whose blob `compress` makes of the layer's tar, pushed to the rig as
/// `hostpull/NAME:v1`.
#[cfg(feature = "ostree")]
fn derived_image(dir: &Path, name: &str, compress: fn(&[u8]) -> Vec<u8>) -> String {
    let rootfs = dir.join("rootfs");
    write_tree(&rootfs, &BASE_FILES);
    let base = encapsulate_tree(dir, "base", &rootfs, |_, _| None);
    let layout = dir.join("derived");
    derive_as(&base, &layout, &[("usr/share/derived/x", "x\n")], compress);
    let image = format!("{}/hostpull/{name}:v1", var("RIG_REGISTRY"));
    push(&layout, "v1", &image);
    image
}

/// An import that fails part of the way, on a derived layer that is not the
/// gzip it claims to be (verified all the same: its digest is its bytes'),
/// after the base's layers were imported: the repository's refs are as they
/// were, the layer refs of what it did import included.
#[cfg(feature = "ostree")]
#[test]
fn an_import_that_fails_midway_leaves_the_refs_as_they_were() {
    let s = scratch();
    let image = derived_image(s.path(), "ostree-midway", |_| {
        b"\x1f\x8b\x08\0 the gzip magic, then not gzip".to_vec()
    });
    let repo = new_repo(s.path());
    let before = ostree(&repo, &["refs"]);
    let dest = format!("ostree:{}:hostpull/os", repo.display());
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    r.assert_failure(10);
    assert_eq!(ostree(&repo, &["refs"]), before, "{}", r.stderr);
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// The import runs beside the fetch, and a pull that fails after the import
/// has committed layers leaves the refs as they were. The derived layer (4 MiB,
/// `--max-rate 1M`, so that it arrives last) has other bytes in the registry
/// than its digest says, so the pull fails (exit 7) at its end. By then the
/// import has committed the base's layer: its layer ref appears during the
/// pull (the import waits for each blob the fetch verifies). After the
/// failure the import is stopped and waited for, and that ref is gone. The
/// same when the pull is stopped as `systemctl stop` stops it, SIGTERM to each
/// of its processes, the import's included (exit 143).
#[cfg(feature = "ostree")]
#[test]
fn a_pull_that_fails_after_the_import_began_leaves_the_refs_as_they_were() {
    use std::os::unix::process::CommandExt;
    let s = scratch();
    let image = derived_image(s.path(), "ostree-late-tamper", |tar| {
        let mut blob = gzip(tar);
        blob.resize(blob.len() + (4 << 20), 0);
        blob
    });
    // Change bytes of the derived layer in the registry's storage, keeping
    // its size. Idempotent, so the suite can run again on the same rig.
    let (layers, _) = layers_of(&image);
    let hex = layers
        .last()
        .unwrap()
        .0
        .strip_prefix("sha256:")
        .unwrap()
        .to_owned();
    let storage = Path::new(var("RIG_TAMPER_BLOB"))
        .ancestors()
        .nth(3)
        .unwrap();
    let stored = storage.join(&hex[..2]).join(&hex).join("data");
    let mut bytes = std::fs::read(&stored).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid..mid + 17].copy_from_slice(b"hostpull-tampered");
    std::fs::write(&stored, &bytes).unwrap();

    let repo = new_repo(s.path());
    let before = ostree(&repo, &["refs"]);
    let layer_refs = repo.join("refs/heads/ostree/container/blob");
    for stop in [false, true] {
        let mut pull = with_rig_creds(pull_cmd(&image, &format!("ostree:{}:os", repo.display())));
        pull.args(["--max-rate", "1M"])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = pull.spawn().unwrap();
        let (mut seen, mut import_policies) = (0, Vec::new());
        while child.try_wait().unwrap().is_none() {
            if import_policies.is_empty() {
                import_policies = importer_of(child.id()).map_or_else(Vec::new, policies);
            }
            let n = std::fs::read_dir(&layer_refs).map_or(0, |d| d.count());
            if stop && seen == 0 && n > 0 {
                let group = rustix::process::Pid::from_child(&child);
                rustix::process::kill_process_group(group, rustix::process::Signal::TERM).unwrap();
            }
            seen = seen.max(n);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(if stop { 143 } else { 7 }),
            "{stderr}"
        );
        assert!(
            seen >= 1,
            "no layer was imported during the fetch: {stderr}"
        );
        // The fetch is batch work (`pull::pull_runs_as_batch_work`), the
        // import is not: SCHED_OTHER in every thread.
        assert!(
            !import_policies.is_empty() && import_policies.iter().all(|&p| p == 0),
            "{import_policies:?}"
        );
        assert_eq!(ostree(&repo, &["refs"]), before, "{stderr}");
        assert_eq!(staging_left(&repo), Vec::<String>::new());
    }
}

/// The import program that the pull `pid` runs.
#[cfg(feature = "ostree")]
fn importer_of(pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let n: u32 = p.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
        let import = (cmdline.split(|&b| b == 0).next()?).ends_with(b"hostpull-ostree-import");
        let status = std::fs::read_to_string(p.path().join("status")).ok()?;
        (import && status.lines().any(|l| l == format!("PPid:\t{pid}"))).then_some(n)
    })
}

/// Root alone enforces the signature policy, the import included: a skopeo
/// 1.18 or 1.22 reading the staging layout would apply the host's policy.json
/// when it opens it. With one that rejects everything (in a mount namespace of
/// the pull's own), an ostree pull under `--policy` accept-anything imports,
/// with every worker the rig installed. Host pass only: a unit sees PID 1's /etc.
#[cfg(feature = "ostree")]
#[test]
fn host_pass_a_rejecting_etc_policy_json_does_not_reach_the_import() {
    let s = scratch();
    let (image, _) = encapsulated_image(s.path());
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/accept-anything.json"
    );
    for (i, worker) in var("RIG_WORKERS").split(' ').enumerate() {
        let dir = s.path().join(format!("r{i}"));
        std::fs::create_dir(&dir).unwrap();
        let repo = new_repo(&dir);
        let mut pull = with_rig_creds(pull_cmd(&image, &format!("ostree:{}:os", repo.display())));
        pull.args(["--skopeo", worker, "--policy", policy]);
        let r = run(&mut with_rejecting_etc_policy_json(&pull, s.path()));
        assert_eq!(r.code, 0, "{worker}: {}", r.stderr);
        let commit = r.json()["ostree"]["commit"].as_str().unwrap().to_owned();
        assert_eq!(
            ostree(&repo, &["rev-parse", "os"]).trim(),
            commit,
            "{worker}"
        );
    }
}

/// The signature policy is checked before anything is written: an image the
/// policy rejects exits 9, fetches no blob (the registry's log) and leaves the
/// repository as it was. During the pull REPO/tmp, where the staging layout
/// goes, is a file: any write into the repository before the verdict would
/// fail the pull with another exit code.
#[cfg(feature = "ostree")]
#[test]
fn a_rejected_image_writes_nothing_into_the_repository() {
    let s = scratch();
    let (image, _) = encapsulated_image(s.path());
    let repo = new_repo(s.path());
    let policy = s.path().join("policy.json");
    std::fs::write(&policy, r#"{"default":[{"type":"reject"}]}"#).unwrap();
    let (tmp, aside) = (repo.join("tmp"), s.path().join("tmp-aside"));
    std::fs::rename(&tmp, &aside).unwrap();
    std::fs::write(&tmp, "").unwrap();
    let mark = registry_log_mark();
    let mut c = with_rig_creds(pull_cmd(&image, &format!("ostree:{}:os", repo.display())));
    c.arg("--policy").arg(&policy);
    let r = run(&mut c);
    std::fs::remove_file(&tmp).unwrap();
    std::fs::rename(&aside, &tmp).unwrap();
    r.assert_failure(9);
    assert!(
        r.stderr.contains("signature policy rejected"),
        "{}",
        r.stderr
    );
    let name = image
        .strip_prefix(&format!("{}/", var("RIG_REGISTRY")))
        .and_then(|n| n.rsplit_once(':'))
        .unwrap()
        .0;
    assert_eq!(fetched_since(mark, name, "blobs"), Vec::<String>::new());
    assert_eq!(ostree(&repo, &["refs"]), "");
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// An image for another platform than the one asked for is refused once its
/// config came, before any layer (exit 13); the import that began with it
/// leaves no ref and no staging.
#[cfg(feature = "ostree")]
#[test]
fn an_image_for_another_platform_imports_nothing() {
    let s = scratch();
    let (image, _) = encapsulated_image(s.path());
    let config = registry_raw(&image)["config"]["digest"].clone();
    let repo = new_repo(s.path());
    let mark = registry_log_mark();
    let mut c = with_rig_creds(pull_cmd(&image, &format!("ostree:{}:os", repo.display())));
    c.args(["--platform", "linux/s390x"]);
    let r = run(&mut c);
    r.assert_failure(13);
    assert!(r.stderr.contains("not for linux/s390x"), "{}", r.stderr);
    let name = image
        .strip_prefix(&format!("{}/", var("RIG_REGISTRY")))
        .and_then(|n| n.rsplit_once(':'))
        .unwrap()
        .0;
    assert_eq!(fetched_since(mark, name, "blobs"), [config]);
    assert_eq!(ostree(&repo, &["refs"]), "");
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// The import reads the staging layout through hostpull itself
/// (src/confined/layout_proxy.rs): no skopeo of its own, so no second hash and no unit.
/// The stand-in skopeo (tests/probe-import.sh) is skopeo only where the
/// registry is reachable, as the fetch worker; anywhere else it reports and
/// fails. The import's skopeo had no network (a unit with PrivateNetwork=yes,
/// or `unshare --net`), so before this the import failed here (exit 10).
#[cfg(feature = "ostree")]
#[test]
fn the_import_runs_no_skopeo() {
    let s = scratch();
    let (image, _) = encapsulated_image(s.path());
    let (dir, probe) = script_under_run("probe-import.sh");
    std::fs::write(dir.path().join("port"), var("RIG_PORT")).unwrap();
    let repo = new_repo(s.path());
    let mut c = with_rig_creds(pull_cmd(&image, &format!("ostree:{}:os", repo.display())));
    c.env("HOSTPULL_SKOPEO", &probe);
    let r = run(&mut c);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("probe-import: "), "{}", r.stderr);
    let commit = r.json()["ostree"]["commit"].as_str().unwrap().to_owned();
    assert_eq!(ostree(&repo, &["rev-parse", "os"]).trim(), commit);
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// ExportOpts for a chunked encapsulation of `commit` in `repo`: each file's
/// object belongs to the component named by its directory under /usr/share
/// (`a`, `b`), anything else to `base`, as rpm-ostree maps objects to packages.
#[cfg(feature = "ostree")]
fn chunked(
    repo: &ostree_ext::ostree::Repo,
    src: &Path,
    commit: &str,
) -> ostree_ext::container::ExportOpts<'static, 'static> {
    use ostree_ext::chunking::ObjectMetaSized;
    use ostree_ext::objectsource::{ObjectMeta, ObjectMetaMap, ObjectMetaSet, ObjectSourceMeta};
    use std::rc::Rc;
    let mut map = ObjectMetaMap::default();
    let mut set = ObjectMetaSet::default();
    for l in ostree(src, &["ls", "-R", "-C", commit]).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if !l.starts_with('-') {
            continue;
        }
        let (checksum, path) = (f[4], f[f.len() - 1]);
        let id = path
            .strip_prefix("/usr/share/")
            .and_then(|p| p.split('/').next())
            .filter(|c| ["a", "b"].contains(c))
            .unwrap_or("base");
        let id: Rc<str> = Rc::from(id);
        map.insert(checksum.to_owned(), Rc::clone(&id));
        set.insert(ObjectSourceMeta {
            identifier: Rc::clone(&id),
            name: Rc::clone(&id),
            srcid: Rc::clone(&id),
            change_time_offset: 1,
            change_frequency: 1,
        });
    }
    let sized = ObjectMetaSized::compute_sizes(repo, ObjectMeta { set, map }).unwrap();
    let mut opts = ostree_ext::container::ExportOpts::default();
    opts.contentmeta = Some(Box::leak(Box::new(sized)));
    opts.max_layers = std::num::NonZeroU32::new(8);
    opts
}

/// The second case: a chunked base (ostree-ext's encapsulation with the
/// objects split into a layer per component, as FCOS and RHCOS are built).
/// An update where one component changed fetches only the layers whose
/// digest changed (that chunk and the commit layer), per the registry's log.
#[cfg(feature = "ostree")]
#[test]
fn a_chunked_update_fetches_only_the_changed_chunks() {
    let s = scratch();
    let name = "hostpull/ostree-chunked";
    let image = format!("{}/{name}:stable", var("RIG_REGISTRY"));
    let a: Vec<(String, String)> = (0..4)
        .map(|i| (format!("usr/share/a/f{i}"), format!("{i}").repeat(64 << 10)))
        .collect();
    let publish = |tag: &str, b: &str| {
        let rootfs = s.path().join(format!("rootfs-{tag}"));
        let mut files: Vec<(&str, &str)> =
            a.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        files.extend([
            ("usr/share/b/version", b),
            ("usr/lib/os-release", "ID=chunked\n"),
        ]);
        write_tree(&rootfs, &files);
        let src = s.path().join(format!("chunked-{tag}-src-repo"));
        let layout = encapsulate_tree(
            s.path(),
            &format!("chunked-{tag}"),
            &rootfs,
            |repo, commit| Some(chunked(repo, &src, commit)),
        );
        push(&layout, "v1", &image);
        layers_of(&image)
    };
    let (v1_layers, _) = publish("v1", "b v1\n");
    assert!(v1_layers.len() >= 3, "chunked: {v1_layers:?}");
    let repo = new_repo(s.path());
    let dest = format!("ostree:{}:hostpull/os", repo.display());
    pulled(&image, &dest);

    let (v2_layers, v2_config) = publish("v2", "b v2\n");
    let changed: Vec<&(String, u64)> = v2_layers
        .iter()
        .filter(|l| !v1_layers.contains(l))
        .collect();
    assert!(
        !changed.is_empty() && changed.len() < v2_layers.len(),
        "{v1_layers:?} {v2_layers:?}"
    );
    let mark = registry_log_mark();
    let update = pulled(&image, &dest);
    let mut got = fetched_since(mark, name, "blobs");
    got.sort();
    let mut want: Vec<String> = changed.iter().map(|l| l.0.clone()).collect();
    want.push(v2_config.0.clone());
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        update["layers_fetched"].as_u64(),
        Some(changed.len() as u64)
    );
    assert_eq!(
        update["layers_reused"].as_u64(),
        Some((v2_layers.len() - changed.len()) as u64)
    );
    assert_eq!(
        update["bytes_fetched"].as_u64().unwrap(),
        v2_config.1 + changed.iter().map(|l| l.1).sum::<u64>()
    );
    assert_eq!(
        ostree(&repo, &["cat", "hostpull/os", "/usr/share/b/version"]),
        "b v2\n"
    );
    assert_eq!(
        ostree(&repo, &["cat", "hostpull/os", "/usr/share/a/f3"]),
        "3".repeat(64 << 10)
    );
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}

/// The import runs in a program of its own, `hostpull-ostree-import`
/// (src/confined/import.rs), which an SELinux host runs in a domain of its own.
/// hostpull looks for it in `../libexec/` from its own directory, then beside
/// itself. A stand-in there records its command line and runs the real one,
/// once per pull, as the pull starts: the layout proxy's program (hostpull
/// itself, which starts without libostree), the repository, the image and
/// the ref (the rest comes on its stdin). Without it the pull fetches nothing
/// and fails (10); an importer killed by a signal, before it says what the
/// repository holds or while it imports, fails the pull with that signal,
/// and one given a proxy program that is not there fails.
/// Host pass only: a worker unit runs the hostpull it was started as, and this
/// one is a link in the test's own directory.
#[cfg(feature = "ostree")]
#[test]
fn host_pass_the_import_runs_in_its_own_program() {
    let s = scratch();
    let (image, _) = encapsulated_image(s.path());
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (bin, libexec) = (prefix.path().join("bin"), prefix.path().join("libexec"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::hard_link(env!("CARGO_BIN_EXE_hostpull"), bin.join("hostpull")).unwrap();
    let repo = new_repo(s.path());
    let dest = format!("ostree:{}:os", repo.display());
    let pull = || {
        let mut c = Command::new(bin.join("hostpull"));
        c.args([
            "pull",
            &image,
            "--dest",
            &dest,
            "--json",
            "--sandbox",
            "none",
        ])
        .env("RUST_LOG", "warn");
        with_rig_creds(c)
    };
    let stand_in = |dir: &Path, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("hostpull-ostree-import");
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };

    let mark = registry_log_mark();
    let missing = run(&mut pull());
    missing.assert_failure(10);
    assert!(
        missing
            .stderr
            .contains("hostpull-ostree-import, which imports into ostree, is not installed"),
        "{}",
        missing.stderr
    );
    let name = image.split_once('/').unwrap().1.rsplit_once(':').unwrap().0;
    assert_eq!(fetched_since(mark, name, "blobs"), Vec::<String>::new());

    // ../libexec/ wins over the one beside hostpull, which would fail.
    stand_in(
        &bin,
        "#!/bin/sh\necho 'error: the wrong importer' >&2\nexit 1\n",
    );
    let argv = prefix.path().join("argv");
    stand_in(
        &libexec,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" -- >>{}\nexec {} \"$@\"\n",
            argv.display(),
            env!("CARGO_BIN_EXE_hostpull-ostree-import")
        ),
    );
    let r = run(&mut pull());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json = r.json();
    let calls = std::fs::read_to_string(&argv).unwrap();
    let calls: Vec<Vec<&str>> = (calls.lines().collect::<Vec<_>>())
        .split(|l| *l == "--")
        .filter(|c| !c.is_empty())
        .map(<[&str]>::to_vec)
        .collect();
    // One process reads what the repository holds and imports.
    let [args] = calls.as_slice() else {
        panic!("{calls:?}")
    };
    let hostpull = bin.join("hostpull").display().to_string();
    assert_eq!(
        args,
        &[&hostpull, &repo.display().to_string(), &image, "os"]
    );
    let commit = json["ostree"]["commit"].as_str().unwrap();
    assert_eq!(ostree(&repo, &["rev-parse", "os"]).trim(), commit);
    assert_eq!(staging_left(&repo), Vec::<String>::new());

    // The import runs the proxy program it is given (into a new repository:
    // one that holds the image starts no proxy).
    let real = env!("CARGO_BIN_EXE_hostpull-ostree-import");
    let body = format!("#!/bin/sh\nshift\nexec {real} /nonexistent/hostpull \"$@\"\n");
    stand_in(&libexec, &body);
    std::fs::remove_dir_all(&repo).unwrap();
    let repo = new_repo(s.path());
    let no_proxy = run(&mut pull());
    no_proxy.assert_failure(10);
    assert!(
        no_proxy.stderr.contains("/nonexistent/hostpull"),
        "{}",
        no_proxy.stderr
    );
    assert_eq!(ostree(&repo, &["refs"]).trim(), "");

    // Killed before it says what the repository holds, or while it imports:
    // once its layout proxy (its child) runs, the real import and the
    // stand-in that started it are killed. (sh gives a job in the background
    // /dev/null for stdin unless told otherwise; fd 3 keeps the pipe.)
    let importing = format!(
        "exec 3<&0\n{real} \"$@\" 0<&3 &\nn=0\nwhile ! pgrep -P $! >/dev/null; do\n\
         n=$((n + 1)); [ $n -lt 1000 ] || exit 99; sleep 0.01\ndone\nkill -KILL $!\n"
    );
    for before in ["", &importing] {
        let body = format!("#!/bin/sh\n{before}kill -KILL $$\n");
        stand_in(&libexec, &body);
        let killed = run(&mut pull());
        killed.assert_failure(10);
        assert!(
            killed
                .stderr
                .contains("hostpull-ostree-import failed (signal: 9"),
            "{body}: {}",
            killed.stderr
        );
        assert_eq!(staging_left(&repo), Vec::<String>::new());
    }
}

/// hostpull itself never loads libostree (and the 60 libraries it brings,
/// 20 ms of every start): only `hostpull-ostree-import` does.
#[cfg(feature = "ostree")]
#[test]
fn host_pass_hostpull_itself_does_not_load_libostree() {
    let libs = |exe: &str| {
        let out = Command::new("ldd").arg(exe).output().unwrap();
        assert!(out.status.success(), "ldd {exe}");
        String::from_utf8(out.stdout).unwrap()
    };
    let importer = libs(env!("CARGO_BIN_EXE_hostpull-ostree-import"));
    assert!(importer.contains("libostree-1.so"), "{importer}");
    let hostpull = libs(env!("CARGO_BIN_EXE_hostpull"));
    assert!(
        !hostpull.contains("libostree") && !hostpull.contains("libglib"),
        "{hostpull}"
    );
}

/// The tag moves between two credentials' tries: the first credential reads
/// the manifest, then is refused the blobs (the import has begun with that
/// manifest); by the second try the tag names another image. The import begun
/// with the first manifest is abandoned and one of the second is started, so
/// the ref names the image the tag named when the pull succeeded, and nothing
/// of the abandoned import is left (tests/moving_registry.py).
#[cfg(feature = "ostree")]
#[test]
fn a_tag_that_moves_between_credentials_imports_what_it_names_last() {
    use base64::Engine as _;
    use std::process::Stdio;
    let s = scratch();
    let rootfs = s.path().join("rootfs");
    write_tree(&rootfs, &BASE_FILES);
    let base = encapsulate_tree(s.path(), "base", &rootfs, |_, _| None);
    let (first, then) = (s.path().join("first"), s.path().join("then"));
    derive(&base, &first, &[("usr/share/moving/first", "first\n")]);
    derive(&base, &then, &[("usr/share/moving/then", "then\n")]);
    let log = s.path().join("requests.log");
    let ca = Path::new(var("RIG_CA"));
    let mut registry = KillOnDrop(
        Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/moving_registry.py"
            ))
            .args([&first, &then, &log])
            .arg("--cert")
            .arg(ca.with_file_name("server.crt"))
            .arg("--key")
            .arg(ca.with_file_name("server.key"))
            .env("MOVING_AUTH", "lapsed:pw-1 current:pw-2")
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting tests/moving_registry.py"),
    );
    let port = read_port(&mut registry.0, "tests/moving_registry.py");
    let secret = |user: &str, pw: &str| {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
        let path = s.path().join(format!("{user}.json"));
        let json = format!(r#"{{"auths":{{"127.0.0.1:{port}":{{"auth":"{auth}"}}}}}}"#);
        write_private(&path, json.as_bytes());
        path
    };
    let (lapsed, current) = (secret("lapsed", "pw-1"), secret("current", "pw-2"));
    let repo = new_repo(s.path());
    let image = format!("127.0.0.1:{port}/moving/os:v1");
    let mut pull = pull_cmd(&image, &format!("ostree:{}:hostpull/os", repo.display()));
    pull.args(["--cert-dir", var("RIG_CERT_DIR")])
        .arg("--pull-secret")
        .arg(&lapsed)
        .arg("--pull-secret")
        .arg(&current);
    let r = run(&mut pull);
    let out = r.json();
    assert!(
        r.stderr.contains("trying credentials 2 of 2"),
        "{}",
        r.stderr
    );
    let digest_of = |layout: &Path| {
        let index = std::fs::read_to_string(layout.join("index.json")).unwrap();
        let index: serde_json::Value = serde_json::from_str(&index).unwrap();
        index["manifests"][0]["digest"].as_str().unwrap().to_owned()
    };
    assert_eq!(out["manifest_digest"], digest_of(&then), "{out}");
    assert_eq!(out["credentials"][0]["candidate"], 2, "{out}");
    // The registry: the first user had the tag as the first image and was
    // refused a blob; the second had it as the other.
    let requests: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refused = |user: &str| {
        requests.iter().any(|q| {
            q["user"] == user
                && q["status"] == 401
                && q["path"].as_str().unwrap().contains("/blobs/")
        })
    };
    assert!(refused("lapsed") && !refused("current"), "{requests:?}");
    // The ref names the image the tag named last, file for file.
    let commit = out["ostree"]["commit"].as_str().unwrap();
    assert_eq!(ostree(&repo, &["rev-parse", "hostpull/os"]).trim(), commit);
    assert_eq!(
        ostree(&repo, &["cat", "hostpull/os", "/usr/share/moving/then"]),
        "then\n"
    );
    let listed = ostree(&repo, &["ls", "-R", "hostpull/os", "/usr/share"]);
    assert!(!listed.contains("/usr/share/moving/first"), "{listed}");
    assert_eq!(staging_left(&repo), Vec::<String>::new());
}
