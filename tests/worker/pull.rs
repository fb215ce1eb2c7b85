//! The Core contract of `hostpull pull`, against the real registry.

use std::path::Path;
use std::process::Command;

use crate::util::*;

#[test]
fn authenticated_pull_then_reuse() {
    let s = scratch();
    let dest = s.path().join("layout");
    let image = var("RIG_IMG_SMALL");
    let first = pulled(&format!("docker://{image}"), &oci(&dest));
    assert_eq!(first["manifest_digest"], registry_digest(image));
    assert_eq!(first["source_digest"], first["manifest_digest"]);
    assert_eq!(first["tag"], "v1");
    assert_eq!(first["layers_total"], 3);
    assert_eq!(first["layers_fetched"], 3);
    assert_eq!(first["layers_reused"], 0);
    assert!(first["bytes_fetched"].as_u64().unwrap() > 0);
    for key in ["image", "dest", "elapsed_ms"] {
        assert!(!first[key].is_null(), "{key}");
    }
    // The result is a layout skopeo reads and copies, with the registry's digest.
    let inspected: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", &oci_tag(&dest, "v1")])).unwrap();
    assert_eq!(inspected["Digest"], first["manifest_digest"]);
    let other = s.path().join("copy");
    skopeo(&["copy", "-q", &oci_tag(&dest, "v1"), &oci_tag(&other, "v1")]);

    // Pull again: nothing is fetched; without docker:// too.
    let again = pulled(image, &oci(&dest));
    assert_eq!(again["layers_fetched"], 0);
    assert_eq!(again["layers_reused"], 3);
    assert_eq!(again["bytes_fetched"], 0);
    assert_eq!(again["manifest_digest"], first["manifest_digest"]);
}

#[test]
fn second_tag_shares_layers_and_index_keeps_both() {
    let s = scratch();
    let dest = s.path().join("layout");
    pulled(var("RIG_IMG_SMALL"), &oci(&dest));
    let v2 = pulled(var("RIG_IMG_SMALL2"), &oci(&dest));
    assert_eq!(v2["layers_fetched"], 1, "v2 differs from v1 in one layer");
    assert_eq!(v2["layers_reused"], 2);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dest.join("index.json")).unwrap()).unwrap();
    let mut tags: Vec<_> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    tags.sort();
    assert_eq!(tags, ["v1", "v2"]);
}

#[test]
fn concurrent_pulls_into_one_layout_take_turns() {
    let s = scratch();
    let dest = s.path().join("layout");
    let mut a = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&dest)));
    let mut b = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL2"), &oci(&dest)));
    let (ra, rb) = std::thread::scope(|sc| {
        let ta = sc.spawn(|| run(&mut a));
        let tb = sc.spawn(|| run(&mut b));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    ra.json();
    rb.json();
    for tag in ["v1", "v2"] {
        skopeo(&["inspect", &oci_tag(&dest, tag)]);
    }
}

/// The timer's common case with an index (P6): a pull of an image the layout
/// holds reads the platform's manifest from the layout, so the registry serves
/// the index alone, where a first pull fetches the manifest too. A held copy
/// that is not its digest's bytes is not used: the registry's is, and the
/// layout gets it back.
#[test]
fn a_held_image_from_an_index_fetches_only_the_index() {
    let repo = format!("hostpull/multi-held-{}", std::process::id());
    let image = format!("{}/{repo}:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_MULTI"), &image, &["--all"]);
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    let mark = registry_log_mark();
    let first = pulled(&image, &dest);
    let digest = first["manifest_digest"].as_str().unwrap().to_owned();
    assert!(fetched_since(mark, &repo, "manifests").contains(&digest));
    let mark = registry_log_mark();
    let again = pulled(&image, &dest);
    assert_eq!(fetched_since(mark, &repo, "manifests"), ["v1"]);
    assert_eq!(again["manifest_digest"], digest);

    let held = s
        .path()
        .join("l/blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap());
    let mut bytes = std::fs::read(&held).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&held, &bytes).unwrap();
    let mark = registry_log_mark();
    let fixed = pulled(&image, &dest);
    assert_eq!(fetched_since(mark, &repo, "manifests"), ["v1", &digest]);
    assert_eq!(fixed["manifest_digest"], digest);
    assert_eq!(
        hostpull::digest::sha256(&std::fs::read(&held).unwrap()).as_str(),
        digest
    );
}

/// A pull pinned to a manifest the layout holds asks the registry nothing:
/// the pin names those bytes, which root hashes again, so no worker starts
/// (none of its unit, its `inspect`, its TLS and token). The policy is
/// enforced all the same: under `reject` it exits 9 and the layout gets no
/// tag. A layer the layout lacks still comes through the worker's proxy,
/// which reads the manifest as it opens the image, with no `inspect` before
/// it. A held copy that is not the pin's bytes, or not a regular file (a
/// link to them, a FIFO, which is not waited on), is not used: the
/// registry's is, and the layout gets it back.
#[test]
fn a_held_pinned_image_asks_the_registry_nothing() {
    let repo = format!("hostpull/pinned-held-{}", std::process::id());
    let by_tag = format!("{}/{repo}:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_SMALL"), &by_tag, &[]);
    let digest = registry_digest(&by_tag);
    let image = format!("{}/{repo}@{digest}", var("RIG_REGISTRY"));
    let s = scratch();
    let layout = s.path().join("l");
    let mark = registry_log_mark();
    let first = pulled(&image, &oci_tag(&layout, "first"));
    assert_eq!(first["manifest_digest"], digest);
    assert_eq!(first["layers_fetched"], 3);
    assert!(fetched_since(mark, &repo, "manifests").contains(&digest));

    let mark = registry_log_mark();
    let again = pulled(&image, &oci_tag(&layout, "again"));
    assert_eq!(pulled_since(mark, &repo), 0, "the registry was asked");
    assert_eq!(again["manifest_digest"], digest);
    assert_eq!(again["source_digest"], digest);
    assert_eq!(again["layers_fetched"], 0);
    assert!(again["worker"]["unit"].is_null(), "{again}");
    assert!(again["worker"]["startup_ms"].is_null(), "{again}");
    let tagged = |tag: &str| {
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
        index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
            .map(|m| m["digest"].as_str().unwrap().to_owned())
    };
    assert_eq!(tagged("again").as_deref(), Some(digest.as_str()));

    let policy = s.path().join("policy.json");
    std::fs::write(&policy, r#"{"default":[{"type":"reject"}]}"#).unwrap();
    let mark = registry_log_mark();
    let mut c = with_rig_creds(pull_cmd(&image, &oci_tag(&layout, "rejected")));
    c.arg("--policy").arg(&policy);
    run(&mut c).assert_failure(9);
    assert_eq!(pulled_since(mark, &repo), 0, "the registry was asked");
    assert_eq!(tagged("rejected"), None);

    let blob = |d: &str| {
        layout
            .join("blobs/sha256")
            .join(d.strip_prefix("sha256:").unwrap())
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(&digest)).unwrap()).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();
    std::fs::remove_file(blob(&layer)).unwrap();
    let mark = registry_log_mark();
    let refilled = pulled(&image, &oci_tag(&layout, "refilled"));
    assert_eq!(refilled["layers_fetched"], 1);
    // Once, as the proxy opens the image: no `inspect` before it.
    assert_eq!(fetched_since(mark, &repo, "manifests"), [digest.as_str()]);
    assert_eq!(fetched_since(mark, &repo, "blobs"), [layer.as_str()]);

    let (held, copy) = (blob(&digest), s.path().join("copy"));
    for how in ["changed", "link", "fifo"] {
        match how {
            "changed" => {
                let mut bytes = std::fs::read(&held).unwrap();
                bytes[0] ^= 1;
                std::fs::write(&held, &bytes).unwrap();
            }
            "link" => {
                std::fs::rename(&held, &copy).unwrap();
                std::os::unix::fs::symlink(&copy, &held).unwrap();
            }
            _ => {
                std::fs::remove_file(&held).unwrap();
                let mkfifo = Command::new("mkfifo").arg(&held).status().unwrap();
                assert!(mkfifo.success());
            }
        }
        let mark = registry_log_mark();
        let fixed = pulled(&image, &oci_tag(&layout, how));
        // Twice: by `inspect`, and by the proxy opening the pinned image
        // beside it (issue 46), whose blobs are all held this time.
        assert_eq!(
            fetched_since(mark, &repo, "manifests"),
            [digest.as_str(), digest.as_str()],
            "{how}"
        );
        assert_eq!(fixed["manifest_digest"], digest);
        assert!(std::fs::symlink_metadata(&held).unwrap().is_file(), "{how}");
        assert_eq!(
            hostpull::digest::sha256(&std::fs::read(&held).unwrap()).as_str(),
            digest
        );
    }
}

#[test]
fn platform_is_chosen_from_the_index() {
    let image = var("RIG_IMG_MULTI");
    let index = registry_raw(image);
    let digest_for = |arch: &str| {
        index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["platform"]["architecture"] == arch)
            .unwrap_or_else(|| panic!("no {arch} in {index}"))["digest"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for arch in ["arm64", "amd64"] {
        let s = scratch();
        let dest = s.path().join("layout");
        let mut c = with_rig_creds(pull_cmd(image, &oci(&dest)));
        c.args(["--platform", &format!("linux/{arch}")]);
        let r = run(&mut c).json();
        assert_eq!(r["manifest_digest"], digest_for(arch), "{arch}");
        // The worker's proxy, opening the tag beside the index's `inspect`,
        // resolved it to this host's instance; another one it opens once the
        // index has chosen it. Either gives root the instance's bytes (OCI,
        // unconverted): the index is the one manifest `inspect` asks for
        // (issue 46).
        assert_eq!(r["worker"]["opened_beside"], true, "{arch}");
        assert_eq!(r["worker"]["manifests_inspected"], 1, "{arch}");
        let config: serde_json::Value =
            serde_json::from_str(&skopeo(&["inspect", "--config", &oci_tag(&dest, "v1")])).unwrap();
        assert_eq!(config["architecture"], arch);
    }
    // The default is this host's platform.
    let s = scratch();
    let r = pulled(image, &oci(&s.path().join("l")));
    assert_eq!(r["manifest_digest"], digest_for("amd64"));
    // A platform the index lacks is "not found".
    let mut c = with_rig_creds(pull_cmd(image, &oci(&s.path().join("none"))));
    c.args(["--platform", "linux/s390x"]);
    run(&mut c).assert_failure(4);
    assert!(!s.path().join("none").exists());
}

/// A single-platform image is for the platform its config declares: another
/// one asked for (or this host's) is refused from the verified config before
/// any layer comes (exit 13), from a layout that holds the config or the whole
/// image too, and nothing is published. `--json` reports the config's platform.
#[test]
fn platform_of_a_single_image_is_its_config() {
    let name = "hostpull/platform-single";
    let image = format!("{}/{name}:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_SMALL"), &image, &[]);
    let config = registry_raw(&image)["config"]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let s = scratch();
    let dest = s.path().join("layout");
    let on_s390x = |image: &str, tag: Option<&str>| {
        let dest = tag.map_or_else(|| oci(&dest), |t| oci_tag(&dest, t));
        let mut c = with_rig_creds(pull_cmd(image, &dest));
        c.args(["--platform", "linux/s390x"]);
        let r = run(&mut c);
        r.assert_failure(13);
        let why = "the image is for linux/amd64 (its config says so), not for linux/s390x";
        assert!(
            r.stderr.contains(&format!("{config}: {why}")),
            "{}",
            r.stderr
        );
    };
    let mark = registry_log_mark();
    on_s390x(&image, None);
    assert_eq!(fetched_since(mark, name, "blobs"), [config.as_str()]);
    assert!(!dest.exists(), "nothing published, nothing left");
    // A variant amd64 has no order for, the image naming none: taken, and
    // reported as the config says.
    let mut c = with_rig_creds(pull_cmd(&image, &oci(&dest)));
    c.args(["--platform", "linux/amd64/v3"]);
    assert_eq!(run(&mut c).json()["platform"], "linux/amd64");
    // The layout holds the config: checked from there, nothing comes.
    let mark = registry_log_mark();
    on_s390x(&image, Some("other"));
    assert_eq!(fetched_since(mark, name, "blobs"), Vec::<String>::new());
    // Held whole and pinned: no worker, the same refusal, the layout as it was.
    let before = snapshot(&dest);
    let pinned = format!("{}/{name}@{}", var("RIG_REGISTRY"), registry_digest(&image));
    on_s390x(&pinned, Some("pinned"));
    assert_eq!(snapshot(&dest), before);
}

#[test]
fn pull_by_digest() {
    let image = var("RIG_IMG_SMALL");
    let digest = registry_digest(image);
    let repo = image.rsplit_once(':').unwrap().0;
    let s = scratch();
    let dest = s.path().join("layout");
    let r = pulled(&format!("{repo}@{digest}"), &oci_tag(&dest, "pinned"));
    assert_eq!(r["manifest_digest"], digest);
    assert_eq!(r["tag"], "pinned");
    // A digest the registry does not have.
    let absent = format!("{repo}@sha256:{}", "0".repeat(64));
    run(&mut with_rig_creds(pull_cmd(
        &absent,
        &oci_tag(&s.path().join("x"), "t"),
    )))
    .assert_failure(4);
    // Pinned by digest without a destination tag is a usage error.
    run(&mut with_rig_creds(pull_cmd(
        &format!("{repo}@{digest}"),
        &oci(&s.path().join("y")),
    )))
    .assert_failure(2);
}

/// An index whose entry for this host's platform names another platform's
/// instance. The index declared the platform, so the config is asked for
/// beside the largest layer, not before it (issue 46); its check still
/// refuses the image (exit 13) before any other layer is asked for, and
/// nothing is published.
#[test]
fn an_index_entry_that_lies_about_its_platform_is_refused() {
    let s = scratch();
    let layout = s.path().join("src");
    let certs = [
        "--src-authfile",
        var("RIG_AUTHFILE"),
        "--src-cert-dir",
        var("RIG_CERT_DIR"),
    ];
    let multi = format!("docker://{}", var("RIG_IMG_MULTI"));
    skopeo(
        &[
            &["copy", "-q", "--all"],
            &certs[..],
            &[&multi, &oci_tag(&layout, "v1")],
        ]
        .concat(),
    );
    // Swap the platforms of the index's amd64 and arm64 entries.
    let top: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let blob = |d: &str| {
        layout
            .join("blobs/sha256")
            .join(d.trim_start_matches("sha256:"))
    };
    let digest = top["manifests"][0]["digest"].as_str().unwrap();
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(digest)).unwrap()).unwrap();
    for m in index["manifests"].as_array_mut().unwrap() {
        let arch = &mut m["platform"]["architecture"];
        *arch = match arch.as_str() {
            Some("amd64") => "arm64".into(),
            Some("arm64") => "amd64".into(),
            _ => arch.clone(),
        };
    }
    let bytes = serde_json::to_vec(&index).unwrap();
    let lying = hostpull::digest::sha256(&bytes);
    std::fs::write(blob(lying.as_str()), &bytes).unwrap();
    let mut top = top.clone();
    top["manifests"][0]["digest"] = lying.as_str().into();
    top["manifests"][0]["size"] = bytes.len().into();
    std::fs::write(layout.join("index.json"), top.to_string()).unwrap();
    let name = "hostpull/lying-index";
    let image = format!("{}/{name}:v1", var("RIG_REGISTRY"));
    skopeo(&[
        "copy",
        "-q",
        "--all",
        "--preserve-digests",
        "--dest-authfile",
        var("RIG_AUTHFILE"),
        "--dest-cert-dir",
        var("RIG_CERT_DIR"),
        &oci_tag(&layout, "v1"),
        &format!("docker://{image}"),
    ]);
    assert_eq!(registry_digest(&image), lying.as_str());
    // The instance the amd64 entry names: arm64's.
    let entry = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["platform"]["architecture"] == "amd64")
        .unwrap()["digest"]
        .as_str()
        .unwrap();
    let instance: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob(entry)).unwrap()).unwrap();
    let largest = instance["layers"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|l| l["size"].as_u64())
        .unwrap();
    let mut expected = [
        instance["config"]["digest"].as_str().unwrap().to_owned(),
        largest["digest"].as_str().unwrap().to_owned(),
    ];
    expected.sort();
    let dest = s.path().join("layout");
    let mark = registry_log_mark();
    let mut c = with_rig_creds(pull_cmd(&image, &oci(&dest)));
    c.args(["--platform", "linux/amd64"]);
    let r = run(&mut c);
    r.assert_failure(13);
    assert!(r.stderr.contains("not for linux/amd64"), "{}", r.stderr);
    let mut fetched = fetched_since(mark, name, "blobs");
    fetched.sort();
    assert_eq!(fetched, expected);
    assert!(!dest.exists(), "nothing published, nothing left");
}

/// An index of Docker schema2 manifests: the proxy converts the instance it
/// opens, so root asks `inspect` for the registry's bytes of it too.
#[test]
fn docker_schema2_instance_is_inspected() {
    let dst = format!("{}/hostpull/multi-v2s2:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_MULTI"), &dst, &["--all", "--format", "v2s2"]);
    let list = registry_raw(&dst);
    let amd64 = list["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["platform"]["architecture"] == "amd64")
        .unwrap();
    assert_eq!(
        amd64["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    let s = scratch();
    let r = pulled(&dst, &oci(&s.path().join("layout")));
    assert_eq!(r["source_digest"], amd64["digest"]);
    assert_ne!(r["manifest_digest"], r["source_digest"]);
    assert_eq!(r["worker"]["opened_beside"], true);
    assert_eq!(r["worker"]["manifests_inspected"], 2);
}

#[test]
fn docker_schema2_image_is_stored_as_oci() {
    // Push the small image again as Docker schema2 under its own name.
    let dst = format!("{}/hostpull/small-v2s2:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_SMALL"), &dst, &["--format", "v2s2"]);
    let s = scratch();
    let dest = s.path().join("layout");
    let r = pulled(&dst, &oci(&dest));
    // Verified against the registry's digest, stored in OCI form as skopeo copy does.
    assert_eq!(r["source_digest"], registry_digest(&dst));
    assert_ne!(r["manifest_digest"], r["source_digest"]);
    let inspected: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", &oci_tag(&dest, "v1")])).unwrap();
    assert_eq!(inspected["Digest"], r["manifest_digest"]);
}

/// Each failure: its exit code, one error line, and nothing written.
#[test]
fn failures_have_exit_codes_and_write_nothing() {
    let small = var("RIG_IMG_SMALL");
    let repo = small.rsplit_once(':').unwrap().0;
    let certs = var("RIG_CERT_DIR");
    type Case = (&'static str, String, Vec<String>, i32);
    let cases: Vec<Case> = vec![
        (
            "wrong password",
            small.to_owned(),
            vec![
                "--authfile".into(),
                var("RIG_BAD_AUTHFILE").into(),
                "--cert-dir".into(),
                certs.into(),
            ],
            3,
        ),
        (
            "no credentials",
            small.to_owned(),
            vec!["--cert-dir".into(), certs.into()],
            3,
        ),
        (
            "unknown tag",
            format!("{repo}:no-such-tag"),
            vec![
                "--authfile".into(),
                var("RIG_AUTHFILE").into(),
                "--cert-dir".into(),
                certs.into(),
            ],
            4,
        ),
        (
            "no CA",
            small.to_owned(),
            vec!["--authfile".into(), var("RIG_AUTHFILE").into()],
            5,
        ),
        (
            "bad image reference",
            "docker://Bad/Ref::x".into(),
            vec![],
            2,
        ),
        (
            "other transport",
            format!("containers-storage:{small}"),
            vec![],
            2,
        ),
        (
            "bad platform",
            small.to_owned(),
            vec!["--platform".into(), "linux".into()],
            2,
        ),
        (
            "dead registry",
            "127.0.0.1:1/hostpull/small:v1".into(),
            // Refused connections are retried; the deadline ends that.
            vec![
                "--authfile".into(),
                var("RIG_AUTHFILE").into(),
                "--timeout".into(),
                "3".into(),
            ],
            6,
        ),
    ];
    for (name, image, args, code) in cases {
        let s = scratch();
        let dest = s.path().join("layout");
        let mut c = pull_cmd(&image, &oci(&dest));
        c.args(&args);
        let r = run(&mut c);
        eprintln!("{name}: {}", r.stderr.trim());
        r.assert_failure(code);
        assert!(!dest.exists(), "{name}: nothing may be written");
    }
    // A bad destination tag.
    for bad in ["a/b", "a..b", "a b"] {
        let s = scratch();
        let dest = s.path().join("layout");
        let r = run(&mut with_rig_creds(pull_cmd(small, &oci_tag(&dest, bad))));
        r.assert_failure(2);
        assert!(!dest.exists());
    }
}

#[test]
fn tampered_blob_is_refused_and_nothing_is_published() {
    let image = tampered_image();

    // A fresh destination is not created.
    let s = scratch();
    let dest = s.path().join("layout");
    run(&mut with_rig_creds(pull_cmd(image, &oci(&dest)))).assert_failure(7);
    assert!(!dest.exists());

    // An existing layout is left exactly as it was.
    let existing = s.path().join("existing");
    pulled(var("RIG_IMG_SMALL"), &oci(&existing));
    let before = snapshot(&existing);
    run(&mut with_rig_creds(pull_cmd(
        image,
        &oci_tag(&existing, "tampered"),
    )))
    .assert_failure(7);
    assert_eq!(
        snapshot(&existing),
        before,
        "the layout is exactly as before"
    );
}

#[test]
fn usage_errors_from_clap_exit_2() {
    let r = run(hostpull(&[]).args(["pull", "x"]));
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = run(hostpull(&[]).args(["pull", "x", "--dest", "oci:/x", "--sandbox", "bogus"]));
    assert_eq!(r.code, 2);
}

/// The secret-leak scan. While a pull runs, the registry password (plain or
/// base64) is in no process's argv or environment, and in no file that a
/// non-root user could read under /tmp, /run, /var/tmp or the destination.
/// After it: not in hostpull's output or the journal either, and the root-only
/// staging directory (0700 while it exists) is gone.
#[test]
fn secret_leak_scan() {
    let secret = password();
    let auth = std::fs::read_to_string(var("RIG_AUTHFILE")).unwrap();
    let encoded = auth
        .split('"')
        .find(|s| s.len() > 20 && !s.contains('.'))
        .expect("the auth field")
        .to_owned();
    let leaks = |text: &[u8]| {
        let text = String::from_utf8_lossy(text);
        text.contains(&secret) || text.contains(&encoded)
    };
    let s = scratch();
    let dest = s.path().join("l");
    let since = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let child = with_rig_creds(pull_cmd(var("RIG_IMG_BIG"), &oci(&dest)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (mut scans, mut saw_worker, mut saw_staging, mut scanned_files) = (0, false, false, false);
    let scan_files = |since| {
        for root in [
            Path::new("/tmp"),
            Path::new("/run"),
            Path::new("/var/tmp"),
            &dest,
        ] {
            for (path, bytes) in world_readable_files(root, since) {
                assert!(
                    !leaks(&bytes),
                    "secret in world-readable {}",
                    path.display()
                );
            }
        }
    };
    let child = std::sync::Mutex::new(child);
    let running = || child.lock().unwrap().try_wait().unwrap().is_none();
    while running() {
        // The staging first: a round's scan of /proc takes long, and a pull
        // may be over by the end of the first.
        for staging in staging_dirs(pid) {
            // Listed, then removed as the pull ends: gone is no finding.
            let Ok(meta) = std::fs::metadata(&staging) else {
                continue;
            };
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                0o700
            );
            assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
            saw_staging = true;
        }
        for proc in std::fs::read_dir("/proc").unwrap().flatten() {
            for file in ["cmdline", "environ"] {
                let Ok(bytes) = std::fs::read(proc.path().join(file)) else {
                    continue;
                };
                assert!(!leaks(&bytes), "secret in {}/{file}", proc.path().display());
                saw_worker |= file == "cmdline"
                    && String::from_utf8_lossy(&bytes).contains("experimental-image-proxy");
            }
        }
        if saw_worker && !scanned_files {
            scan_files(since);
            scanned_files = true;
        }
        scans += 1;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.into_inner().unwrap().wait_with_output().unwrap();
    assert!(out.status.success());
    scan_files(since);
    assert!(saw_worker, "the scan saw the worker ({scans} scans)");
    assert!(saw_staging, "the scan saw the staging directory");
    assert!(
        staging_dirs(pid).is_empty(),
        "the staging directory is gone"
    );
    assert!(
        !leaks(&out.stdout) && !leaks(&out.stderr),
        "secret in hostpull's output"
    );
    if Path::new("/run/systemd/system").exists() {
        let journal = Command::new("journalctl")
            .args(["-o", "cat", "--no-pager"])
            .output()
            .unwrap();
        assert!(journal.status.success());
        assert!(!leaks(&journal.stdout), "secret in the journal");
    }
}

/// The worker's authfile, as staged for it while the pull with this child runs
/// (what `LoadCredential=` hands the unit); `None` if the pull ended first.
pub fn staged_authfile(child: &mut std::process::Child) -> Option<serde_json::Value> {
    let pid = child.id();
    // Not a directory an earlier process of this pid left (pids wrap).
    let since = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let fresh = |d: &std::path::PathBuf| {
        std::fs::metadata(d)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= since)
    };
    while child.try_wait().unwrap().is_none() {
        let found = staging_dirs(pid)
            .into_iter()
            .filter(fresh)
            .filter_map(|d| std::fs::read(d.join("auth.json")).ok())
            .find_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        if found.is_some() {
            return found;
        }
    }
    None
}

/// A pull's root-only staging: `/run/hostpull/<pid>-*` with systemd,
/// `$TMPDIR/hostpull-<pid>-*` without.
pub fn staging_dirs(pid: u32) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for (dir, prefix) in [
        ("/run/hostpull", format!("{pid}-")),
        ("/tmp", format!("hostpull-{pid}-")),
    ] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                found.push(e.path());
            }
        }
    }
    found
}

/// Files under `root` changed since `since` that anyone may read: world-readable
/// themselves, in directories anyone may search. Files over 16 MiB (image
/// layers) are left out.
fn world_readable_files(
    root: &Path,
    since: std::time::SystemTime,
) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            let mode = meta.permissions().mode();
            if meta.is_dir() && mode & 0o001 != 0 {
                stack.push(e.path());
            } else if meta.is_file()
                && mode & 0o004 != 0
                && meta.len() <= 16 << 20
                && meta.modified().is_ok_and(|m| m >= since)
                && let Ok(bytes) = std::fs::read(e.path())
            {
                out.push((e.path(), bytes));
            }
        }
    }
    out
}

/// `hostpull prune` removes what no tag reaches any more, and only that.
#[test]
fn prune_removes_only_unreferenced_blobs() {
    let s = scratch();
    let dest = s.path().join("layout");
    // Tag t is v1, then moves to v2: v1's manifest, config and last layer go stale.
    pulled(var("RIG_IMG_SMALL"), &oci_tag(&dest, "t"));
    let v2 = pulled(var("RIG_IMG_SMALL2"), &oci_tag(&dest, "t"));
    let prune = || {
        let r = run(hostpull(&[]).args(["prune", "--json"]).arg(&dest));
        assert_eq!(r.code, 0, "{}", r.stderr);
        serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()
    };
    assert_eq!(prune()["blobs"], 3);
    assert_eq!(prune()["blobs"], 0);
    let inspected: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", &oci_tag(&dest, "t")])).unwrap();
    assert_eq!(inspected["Digest"], v2["manifest_digest"]);
    skopeo(&[
        "copy",
        "-q",
        &oci_tag(&dest, "t"),
        &oci_tag(&s.path().join("copy"), "t"),
    ]);
    // Not a layout: a usage error, and nothing touched.
    let r = run(hostpull(&[]).args(["prune"]).arg(s.path()));
    r.assert_failure(2);
}

/// SIGINT mid-pull: exit 130, the workers are gone, the layout is as it was.
#[test]
fn sigint_leaves_the_layout_as_it_was() {
    let s = scratch();
    let dest = s.path().join("layout");
    pulled(var("RIG_IMG_SMALL"), &oci(&dest));
    let before = snapshot(&dest);
    let mut child = with_rig_creds(pull_cmd(var("RIG_IMG_BIG"), &oci_tag(&dest, "big")))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for(
        "a blob in flight",
        std::time::Duration::from_secs(30),
        || {
            !workers_of(pid)
                .iter()
                .all(|c| !c.contains("experimental-image-proxy"))
        },
    );
    wait_for_reads(pid, 4 << 20);
    let sigint = rustix::process::Signal::INT;
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sigint)
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    wait_for(
        "the workers to go",
        std::time::Duration::from_secs(2),
        || workers_of(pid).is_empty(),
    );
    assert_eq!(snapshot(&dest), before);
}

/// tests/lying-worker.py as `--skopeo`, in `mode`, claiming `protocol`, in front
/// of the suite's worker.
fn fake_worker(mode: &str, protocol: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, fake) = script_under_run("lying-worker.py");
    std::fs::write(dir.path().join("real-skopeo"), worker_skopeo()).unwrap();
    std::fs::write(dir.path().join("protocol"), protocol).unwrap();
    std::fs::write(dir.path().join("mode"), mode).unwrap();
    (dir, fake)
}

/// A compromised worker that speaks the proxy protocol but sends every blob
/// with the right length and the wrong bytes, and reports success: root's own
/// hashing catches it, and nothing is published. Below 0.2.8 the blobs come
/// through GetBlob; from 0.2.8 on through GetRawBlob, as the liar refuses
/// GetBlob then (and GetRawBlob below).
#[test]
fn a_lying_worker_is_caught_by_root() {
    for protocol in ["0.2.3", "0.2.8"] {
        let (_dir, liar) = fake_worker("lie", protocol);
        let s = scratch();
        let dest = s.path().join("layout");
        let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&dest)));
        c.arg("--skopeo").arg(&liar);
        let r = run(&mut c);
        r.assert_failure(7);
        assert!(
            r.stderr.contains("digest mismatch"),
            "protocol {protocol}: root's check caught it: {}",
            r.stderr
        );
        assert!(!dest.exists());
    }
}

/// From 0.2.8 on the worker says itself which failures are transient
/// (`error_code: "retryable"`), whatever its words: one GetRawBlob reply that
/// says so, with a message that names no known transient error, is retried in
/// a new session, and the pull ends as one that nothing disturbed.
#[test]
fn a_retryable_raw_blob_error_is_retried_to_an_identical_result() {
    // The token the fake worker takes once (tests/lying-worker.py): one
    // connection accepted and answered, then nothing listens any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let token = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        std::io::Write::write_all(&mut c, b"1").unwrap();
    });
    let (_dir, flaky) = fake_worker(&format!("retryable {port}"), "0.2.8");
    let s = scratch();
    let dest = s.path().join("retried");
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&dest)));
    c.arg("--skopeo").arg(&flaky);
    let r = run(&mut c);
    // If no session took the token, this does (and the checks below fail).
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    token.join().unwrap();
    let report = r.json();
    assert!(
        r.stderr.contains("attempt 1 failed, retrying")
            && r.stderr.contains("transient error while fetching"),
        "the retry is reported: {}",
        r.stderr
    );
    assert_eq!(report["worker"]["blobs_via"], "GetRawBlob");
    assert_eq!(
        report["manifest_digest"],
        registry_digest(var("RIG_IMG_SMALL"))
    );
    let clean = s.path().join("clean");
    pulled(var("RIG_IMG_SMALL"), &oci(&clean));
    assert_eq!(snapshot(&dest), snapshot(&clean));
}

/// hostpull.d configuration is read below the root, and a broken file is a
/// usage error that names it.
#[test]
fn configuration_is_read_and_checked() {
    let s = scratch();
    let root = s.path().join("root");
    std::fs::create_dir_all(root.join("etc/hostpull")).unwrap();
    let config = root.join("etc/hostpull/config.toml");
    let pull = |dest: &str| {
        let mut c = hostpull(&[]);
        c.args([
            "pull",
            var("RIG_IMG_SMALL"),
            "--dest",
            dest,
            "--json",
            "--config-root",
        ])
        .arg(config_root(&root))
        .args([
            "--authfile",
            var("RIG_AUTHFILE"),
            "--cert-dir",
            var("RIG_CERT_DIR"),
        ]);
        c
    };
    // The sandbox comes from the file (no --sandbox on the command line).
    std::fs::write(&config, format!("[worker]\nsandbox = \"{}\"\n", sandbox())).unwrap();
    let r = run(&mut pull(&oci(&s.path().join("a")))).json();
    assert_eq!(r["worker"]["sandbox"], sandbox());
    std::fs::write(&config, "[worker\nsandbox = 1\n").unwrap();
    let r = run(&mut pull(&oci(&s.path().join("b"))));
    r.assert_failure(2);
    assert!(
        r.stderr.contains("/etc/hostpull/config.toml"),
        "{}",
        r.stderr
    );
}

/// `--ca HOST[:PORT]=FILE` trusts a CA for that host alone, without the
/// global `--cert-dir`; the same CA named for another host does not help.
#[test]
fn ca_for_one_host() {
    let s = scratch();
    let host = format!("localhost:{}", var("RIG_PORT"));
    let image = format!("{host}/hostpull/small:v1");
    let auth = authfile_for(&host, s.path());
    let pull = |ca_host: &str, dest: &str| {
        let mut c = pull_cmd(&image, &oci(&s.path().join(dest)));
        c.arg("--authfile")
            .arg(&auth)
            .args(["--ca", &format!("{ca_host}={}", var("RIG_CA"))]);
        // Time enough for a loaded CI (a pull refused by TLS once took over
        // 10 s there, with the enforcing guest beside it).
        c.args(["--timeout", "30", "--config-root"])
            .arg(config_root(s.path()));
        c
    };
    run(&mut pull(&host, "ok")).json();
    run(&mut pull(
        &format!("127.0.0.1:{}", var("RIG_PORT")),
        "other",
    ))
    .assert_failure(5);
}

/// A registry that requires a client certificate: the pair comes from certs.d,
/// the key (0600 root) is never in a file anyone else could read during the
/// pull, and without the pair TLS refuses (exit 5).
#[test]
fn client_certificate_with_a_private_key() {
    let s = scratch();
    let host = var("RIG_MTLS_REGISTRY");
    let image = format!("{host}/hostpull/big:v1");
    let auth = authfile_for(host, s.path());
    let root = s.path().join("root");
    let certs_d = root.join("etc/containers/certs.d").join(host);
    std::fs::create_dir_all(&certs_d).unwrap();
    std::fs::copy(var("RIG_CA"), certs_d.join("ca.crt")).unwrap();
    let key = std::fs::read_to_string(var("RIG_CLIENT_KEY")).unwrap();
    let key_body = key
        .lines()
        .find(|l| l.len() > 40)
        .expect("a PEM body line")
        .to_owned();
    let pull = |dest: &str| {
        let mut c = pull_cmd(&image, &oci(&s.path().join(dest)));
        c.arg("--authfile")
            .arg(&auth)
            .args(["--timeout", "60", "--config-root"])
            .arg(config_root(&root));
        c
    };
    // Only the CA: the registry wants a certificate.
    run(&mut pull("refused")).assert_failure(5);

    std::fs::copy(var("RIG_CLIENT_CERT"), certs_d.join("client.cert")).unwrap();
    write_private(&certs_d.join("client.key"), key.as_bytes());
    let since = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
    let mut child = pull("ok")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut scans = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        for root in [Path::new("/tmp"), Path::new("/run"), Path::new("/var/tmp")] {
            for (path, bytes) in world_readable_files(root, since) {
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(&key_body),
                    "the client key in {}",
                    path.display()
                );
            }
        }
        scans += 1;
    };
    assert!(
        status.success(),
        "{:?}",
        child.stderr.take().map(std::io::read_to_string)
    );
    assert!(scans > 0);
}

/// `--progress-fd`: bootc's JSON Lines events, valid against
/// docs/progress-v0.schema.json, Start first, bytes at most 5 times a second.
#[test]
fn progress_events_follow_the_schema() {
    let s = scratch();
    let events = s.path().join("progress.jsonl");
    let dest = oci(&s.path().join("l"));
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_BIG"), &dest));
    c.args(["--progress-fd", "3"]);
    // The shell gives the pull an fd 3 open on the events file.
    let t0 = std::time::Instant::now();
    let r = run(Command::new("bash").arg("-c").arg(format!(
        "exec {} 3>'{}'",
        shell_line(&c),
        events.display()
    )));
    let took = t0.elapsed().as_secs_f64();
    r.json();
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0],
        serde_json::json!({"type": "Start", "version": "0.1.0"})
    );
    let of = |t: &str| lines.iter().filter(|l| l["type"] == t).count();
    assert!(of("ProgressBytes") >= 1, "{text}");
    assert!(
        of("ProgressBytes") as f64 <= took * 5.0 + 2.0,
        "rate-limited: {} in {took}s",
        of("ProgressBytes")
    );
    assert_eq!(lines.last().unwrap()["steps"], 3);
    let last_bytes = lines
        .iter()
        .rev()
        .find(|l| l["type"] == "ProgressBytes")
        .unwrap();
    assert!(
        last_bytes["bytesTotal"].as_u64().unwrap() >= 512 << 20,
        "{last_bytes}"
    );
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/progress-v0.schema.json");
    let check = Command::new("/usr/bin/python3")
        .args(["-c", "import json, sys, jsonschema\nschema = json.load(open(sys.argv[1]))\nfor line in open(sys.argv[2]):\n    jsonschema.validate(json.loads(line), schema)\nprint('valid')"])
        .arg(&schema)
        .arg(&events)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Standard input, output and error are not for progress.
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&s.path().join("m"))));
    c.args(["--progress-fd", "1"]);
    run(&mut c).assert_failure(2);
}

/// The man page (clap_mangen) documents every exit code and the --json
/// fields; shell completions come from clap_complete.
#[test]
fn man_page_and_completions() {
    let man = run(hostpull(&[]).arg("man"));
    assert_eq!(man.code, 0);
    assert!(
        man.stdout.starts_with(".ie") || man.stdout.contains(".TH hostpull"),
        "{}",
        &man.stdout[..200]
    );
    for code in ["0", "1", "2", "3", "4", "5", "6", "7", "8", "10", "130"] {
        assert!(
            man.stdout
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "exit code {code}"
        );
    }
    for field in ["manifest_digest", "layers_reused", "memory_peak_bytes"] {
        assert!(man.stdout.contains(field), "{field}");
    }
    let bash = run(hostpull(&[]).args(["completions", "bash"]));
    assert!(
        bash.code == 0 && bash.stdout.contains("complete -F _hostpull"),
        "{}",
        bash.stderr
    );
}

/// The image proxy's skopeo of the pull whose orchestrator is `pid`: its
/// agent's child (`--sandbox none`), or a process of its worker unit, named
/// after `pid`.
fn proxy_of(pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let n: u32 = p.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
        let mut args = cmdline.split(|&b| b == 0);
        // Not systemd-run or the worker agent, whose arguments name it too. A
        // worker of tests/rig.sh's may be skopeo run by its own ld.so.
        let program = args.next()?;
        if [&b"systemd-run"[..], b"hostpull"]
            .iter()
            .any(|p| program.ends_with(p))
            || !args.any(|a| a == b"experimental-image-proxy")
        {
            return None;
        }
        let cgroup = std::fs::read_to_string(p.path().join("cgroup")).ok()?;
        // Without systemd, the agent's child, the agent being hostpull's.
        let descendant = parent(n).and_then(parent) == Some(pid);
        (descendant || cgroup.contains(&format!("/hostpull-worker-{pid}-"))).then_some(n)
    })
}

/// The parent of process `pid`.
fn parent(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:\t")?.parse().ok())
}

/// A pull is batch work: every thread of hostpull runs SCHED_BATCH, unless the
/// caller chose another policy (here SCHED_IDLE with chrt), which is kept. So
/// does the worker's skopeo: a child inherits it, a worker unit is given it
/// (`CPUSchedulingPolicy=`), or it would preempt root's readers.
#[test]
fn pull_runs_as_batch_work() {
    let s = scratch();
    for (chrt, want) in [(None, 3), (Some("--idle"), 5)] {
        let dest = oci(&s.path().join(format!("{want}")));
        let pull = with_rig_creds(pull_cmd(var("RIG_IMG_BIG"), &dest));
        let mut c = match chrt {
            None => pull,
            Some(policy) => {
                let mut c = Command::new("chrt");
                c.args([policy, "0"])
                    .arg(pull.get_program())
                    .args(pull.get_args());
                for (k, v) in pull.get_envs() {
                    c.env(k, v.unwrap());
                }
                c
            }
        };
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut seen = Vec::new();
        wait_for(
            "hostpull's runtime threads",
            std::time::Duration::from_secs(20),
            || {
                seen = policies(child.id());
                seen.len() > 2
            },
        );
        assert!(seen.iter().all(|p| *p == want), "{chrt:?}: {seen:?}");
        let mut worker = Vec::new();
        wait_for(
            "the worker's image proxy",
            std::time::Duration::from_secs(20),
            || {
                worker = proxy_of(child.id()).map(policies).unwrap_or_default();
                !worker.is_empty()
            },
        );
        assert!(
            worker.iter().all(|p| *p == want),
            "{chrt:?}: worker {worker:?}"
        );
        assert!(child.wait().unwrap().success());
    }
}
