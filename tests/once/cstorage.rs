//! `--dest containers-storage:` (issue 47), into a store of the test's own
//! (vfs, in its scratch directory), read back with real podman.

use std::path::Path;

use serde_json::Value;

use crate::util::*;

/// A store of the test's own: `[vfs@GRAPH+RUN]`.
fn store(dir: &Path) -> String {
    format!(
        "[vfs@{}+{}]",
        dir.join("graph").display(),
        dir.join("run").display()
    )
}

/// `podman ARGS` on `dir`'s store: its stdout, or `None` when it failed.
fn podman(dir: &Path, args: &[&str]) -> Option<String> {
    let (graph, run) = (dir.join("graph"), dir.join("run"));
    let out = std::process::Command::new("podman")
        .arg("--root")
        .arg(graph)
        .arg("--runroot")
        .arg(run)
        .args(["--storage-driver", "vfs"])
        .args(args)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

/// What podman says of `image` in `dir`'s store.
fn inspected(dir: &Path, image: &str) -> Value {
    let out = podman(dir, &["image", "inspect", image]).unwrap_or_else(|| panic!("{image}"));
    serde_json::from_str::<Value>(&out).unwrap()[0].clone()
}

/// A repository of the test's own, its tag `stable` at the rig's `image`.
fn own_repo(name: &str, image: &str) -> (String, String) {
    let repo = format!("hostpull/{name}-{}", std::process::id());
    let tagged = format!("{}/{repo}:stable", var("RIG_REGISTRY"));
    rig_copy(image, &tagged, &[]);
    (repo, tagged)
}

#[test]
fn the_store_gets_the_registry_digest_and_an_update_fetches_only_what_changed() {
    let s = scratch();
    let (repo, tagged) = own_repo("cs-update", var("RIG_IMG_SMALL"));
    let dest = format!("containers-storage:{}", store(s.path()));
    let first = pulled(&tagged, &dest);
    let digest = registry_digest(&tagged);
    let name = format!("{}/{repo}", var("RIG_REGISTRY"));
    assert_eq!(first["manifest_digest"], digest);
    assert_eq!(
        first["stored"],
        format!("containers-storage:{}{name}@{digest}", store(s.path()))
    );
    let image = inspected(s.path(), &format!("{name}:stable"));
    assert_eq!(image["Digest"], digest);
    assert_eq!(
        image["RootFS"]["Layers"].as_array().unwrap().len(),
        first["layers_total"].as_u64().unwrap() as usize
    );
    // Found by the digest, as consumers name it.
    assert!(podman(s.path(), &["image", "exists", &format!("{name}@{digest}")]).is_some());

    // The tag moves to an image with one layer changed.
    rig_copy(var("RIG_IMG_SMALL2"), &tagged, &[]);
    let digest2 = registry_digest(&tagged);
    let mark = registry_log_mark();
    let update = pulled(&tagged, &dest);
    assert_eq!(update["manifest_digest"], digest2);
    assert_eq!(
        (
            update["layers_fetched"].as_u64(),
            update["layers_reused"].as_u64()
        ),
        (Some(1), Some(2))
    );
    // The changed layer and the config, nothing else.
    assert_eq!(fetched_since(mark, &repo, "blobs").len(), 2);
    let image = inspected(s.path(), &format!("{name}:stable"));
    assert_eq!(image["Digest"], digest2);
    assert_eq!(image["RootFS"]["Layers"].as_array().unwrap().len(), 3);

    // Nothing new: nothing fetched, the store as it was.
    let images = podman(
        s.path(),
        &["images", "--all", "--format", "{{.ID}} {{.Digest}}"],
    );
    let again = pulled(&tagged, &dest);
    assert_eq!(again["layers_fetched"], 0);
    assert_eq!(
        podman(
            s.path(),
            &["images", "--all", "--format", "{{.ID}} {{.Digest}}"]
        ),
        images
    );
}

/// The pull of `pinned` into `dest`, which holds it: the registry is not
/// asked for `repo`, nothing is fetched, no worker starts. Its report.
fn held_pull(pinned: &str, dest: &str, repo: &str) -> serde_json::Value {
    let mark = registry_log_mark();
    let again = pulled(pinned, dest);
    assert_eq!(pulled_since(mark, repo), 0, "the registry was asked");
    assert_eq!(again["layers_fetched"], 0);
    assert!(again["worker"]["unit"].is_null(), "{again}");
    again
}

/// The machine-config daemon's pull, pinned by digest, of an image the store
/// has (P6): no registry asked, no worker started.
#[test]
fn a_pinned_image_the_store_holds_asks_no_registry() {
    let s = scratch();
    let (repo, tagged) = own_repo("cs-pinned", var("RIG_IMG_SMALL"));
    let digest = registry_digest(&tagged);
    let pinned = format!("{}/{repo}@{digest}", var("RIG_REGISTRY"));
    let dest = format!("containers-storage:{}", store(s.path()));
    let first = pulled(&pinned, &dest);
    assert_eq!(first["layers_fetched"], 3);
    let name = format!("{}/{repo}", var("RIG_REGISTRY"));
    assert!(podman(s.path(), &["image", "exists", &format!("{name}@{digest}")]).is_some());

    let again = held_pull(&pinned, &dest, &repo);
    assert!(again["worker"]["startup_ms"].is_null(), "{again}");
    assert_eq!(
        again["stored"],
        format!("containers-storage:{}{name}@{digest}", store(s.path()))
    );
}

/// The daemon's prefetch is pinned by digest, so each update is written under
/// a name of its own (NAME@DIGEST) and the last one is not under it: the
/// state directory remembers what the repository last got in the store, and
/// the next digest fetches only what changed.
#[test]
fn a_pinned_update_fetches_only_what_changed_since_the_last() {
    let s = scratch();
    let (repo, tagged) = own_repo("cs-pinned-update", var("RIG_IMG_SMALL"));
    let name = format!("{}/{repo}", var("RIG_REGISTRY"));
    let dest = format!("containers-storage:{}", store(s.path()));
    let state = s.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let pull = |digest: &str| {
        let mut c = with_rig_creds(pull_cmd(&format!("{name}@{digest}"), &dest));
        run(c.env("STATE_DIRECTORY", &state)).json()
    };
    let first = pull(&registry_digest(&tagged));
    assert_eq!(first["layers_fetched"], 3);

    rig_copy(var("RIG_IMG_SMALL2"), &tagged, &[]);
    let digest2 = registry_digest(&tagged);
    let mark = registry_log_mark();
    let update = pull(&digest2);
    assert_eq!(
        (
            update["layers_fetched"].as_u64(),
            update["layers_reused"].as_u64()
        ),
        (Some(1), Some(2))
    );
    // The changed layer and the config, nothing else.
    assert_eq!(fetched_since(mark, &repo, "blobs").len(), 2);
    let image = inspected(s.path(), &format!("{name}@{digest2}"));
    assert_eq!(image["RootFS"]["Layers"].as_array().unwrap().len(), 3);
}

/// An index pinned by digest (a multi-arch OS image, as the daemon's
/// `osImageURL` may name one): the store gets the index beside the instance
/// chosen, as `podman pull` stores one, so that NAME@INDEX and NAME@INSTANCE
/// both name the image; pinned again, held, it asks no registry (P6).
#[test]
fn an_index_pinned_by_digest_is_held_by_it() {
    let s = scratch();
    let repo = format!("hostpull/cs-index-{}", std::process::id());
    let name = format!("{}/{repo}", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_MULTI"), &format!("{name}:v1"), &["--all"]);
    let index = registry_digest(&format!("{name}:v1"));
    let pinned = format!("{name}@{index}");
    let dest = format!("containers-storage:{}", store(s.path()));
    let first = pulled(&pinned, &dest);
    let instance = first["source_digest"].as_str().unwrap().to_owned();
    assert_ne!(instance, index, "{first}");
    for d in [&index, &instance] {
        let image = format!("{name}@{d}");
        assert!(
            podman(s.path(), &["image", "exists", &image]).is_some(),
            "{image}"
        );
    }
    assert_eq!(inspected(s.path(), &pinned)["Digest"], index);

    let again = held_pull(&pinned, &dest, &repo);
    assert_eq!(
        again["stored"],
        format!("containers-storage:{}{name}@{instance}", store(s.path()))
    );
}

/// Without a store in the destination, the host's storage.conf applies:
/// CONTAINERS_STORAGE_CONF, as podman reads it, reaches root's skopeo.
#[test]
fn the_storage_conf_of_the_environment_chooses_the_store() {
    let s = scratch();
    let conf = s.path().join("storage.conf");
    std::fs::write(
        &conf,
        format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            s.path().join("graph").display(),
            s.path().join("run").display()
        ),
    )
    .unwrap();
    let name = format!(
        "{}/hostpull/cs-conf-{}",
        var("RIG_REGISTRY"),
        std::process::id()
    );
    let mut c = with_rig_creds(pull_cmd(
        var("RIG_IMG_SMALL"),
        &format!("containers-storage:{name}:v1"),
    ));
    c.env("CONTAINERS_STORAGE_CONF", &conf);
    let r = run(&mut c).json();
    assert_eq!(
        r["stored"],
        format!(
            "containers-storage:{name}@{}",
            r["source_digest"].as_str().unwrap()
        )
    );
    assert_eq!(
        inspected(s.path(), &format!("{name}:v1"))["Digest"],
        r["source_digest"]
    );
}

/// A pull that fails verification writes nothing podman shows, and leaves
/// no staging layout behind.
#[test]
fn a_failed_pull_leaves_the_store_as_it_was() {
    let s = scratch();
    let dest = format!("containers-storage:{}localhost/os:stable", store(s.path()));
    pulled(var("RIG_IMG_SMALL"), &dest);
    let before = podman(
        s.path(),
        &["images", "--all", "--format", "{{.ID}} {{.Names}}"],
    );
    let r = run(&mut with_rig_creds(pull_cmd(tampered_image(), &dest)));
    r.assert_failure(7);
    assert_eq!(
        podman(
            s.path(),
            &["images", "--all", "--format", "{{.ID}} {{.Names}}"]
        ),
        before
    );
    assert_eq!(
        inspected(s.path(), "localhost/os:stable")["Digest"],
        registry_digest(var("RIG_IMG_SMALL"))
    );
}

#[test]
fn a_destination_the_transport_refuses_is_exit_2() {
    let s = scratch();
    for bad in [
        "containers-storage:[vfs@relative]x/y",
        "containers-storage:[vfs@/g",
        "containers-storage:x/y@sha256:0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        let r = run(&mut with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), bad)));
        r.assert_failure(2);
        assert!(
            r.stderr.starts_with("error: invalid destination: "),
            "{}",
            r.stderr
        );
    }
    assert!(std::fs::read_dir(s.path()).unwrap().next().is_none());
}

/// Two pulls into one store at once, of images that share layers: both land
/// whole (containers/storage's own locks).
#[test]
fn two_pulls_into_one_store_at_once_both_land() {
    let s = scratch();
    let pulls = [("a", var("RIG_IMG_SMALL")), ("b", var("RIG_IMG_SMALL2"))].map(|(n, image)| {
        let dest = format!("containers-storage:{}localhost/{n}:1", store(s.path()));
        let c = with_rig_creds(pull_cmd(image, &dest));
        std::thread::spawn(move || run(&mut { c }))
    });
    for p in pulls {
        p.join().unwrap().json();
    }
    for (n, image) in [("a", var("RIG_IMG_SMALL")), ("b", var("RIG_IMG_SMALL2"))] {
        let got = inspected(s.path(), &format!("localhost/{n}:1"));
        assert_eq!(got["Digest"], registry_digest(image), "{n}");
        assert_eq!(got["RootFS"]["Layers"].as_array().unwrap().len(), 3, "{n}");
    }
}

/// A Docker schema2 image keeps the registry's digest in the store (layouts
/// hold it in OCI form), and pinned to it, once held, asks no registry.
#[test]
fn a_docker_image_keeps_the_registry_digest() {
    let s = scratch();
    let repo = format!("hostpull/cs-docker-{}", std::process::id());
    let tagged = format!("{}/{repo}:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_SMALL"), &tagged, &["--format", "v2s2"]);
    let digest = registry_digest(&tagged);
    let dest = format!("containers-storage:{}", store(s.path()));
    let first = pulled(&tagged, &dest);
    assert_eq!(first["source_digest"], digest);
    assert_ne!(
        first["manifest_digest"], digest,
        "the layout's is the OCI form"
    );
    let name = format!("{}/{repo}", var("RIG_REGISTRY"));
    assert_eq!(
        first["stored"],
        format!("containers-storage:{}{name}@{digest}", store(s.path()))
    );
    let image = inspected(s.path(), &format!("{name}:v1"));
    assert_eq!(image["Digest"], digest);
    assert_eq!(
        image["ManifestType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    let again = pulled(&format!("{name}@{digest}"), &dest);
    assert_eq!(again["layers_fetched"], 0);
    assert!(again["worker"]["unit"].is_null(), "{again}");
    assert!(again["worker"]["startup_ms"].is_null(), "{again}");
}
