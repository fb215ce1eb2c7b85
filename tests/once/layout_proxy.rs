//! `hostpull __layout-proxy` (src/confined/layout_proxy.rs), the image proxy that
//! ostree-ext's import reads the staging layout through, driven by the real
//! client: the containers-image-proxy that ostree-ext itself uses (0.7). The
//! layout is made here by hand, so no rig is needed; so is the pull's control
//! pipe, for the proxy that follows a pull.
#![cfg(feature = "ostree")]

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hostpull::digest::sha256;
use ostree_ext::containers_image_proxy::{ImageProxy, ImageProxyConfig, OpenedImage};
use tokio::io::AsyncReadExt;

use crate::util::oci_tag;

const VERB: &str = "__layout-proxy";
/// The proxy's program: hostpull, which the import runs (src/confined/import.rs).
const PROXY: &str = env!("CARGO_BIN_EXE_hostpull");
/// The ostree import's own program, which serves no proxy.
const IMPORTER: &str = env!("CARGO_BIN_EXE_hostpull-ostree-import");

/// An OCI layout at `dir` holding one image tagged `t`: a config and two
/// layers. Returns the layout, the manifest's bytes and the blobs.
fn layout(dir: &Path) -> (PathBuf, Vec<u8>, Vec<Vec<u8>>) {
    let root = dir.join("layout");
    let blobs = root.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let d = sha256(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).unwrap();
        serde_json::json!({"digest": d.as_str(), "size": bytes.len()})
    };
    let all: Vec<Vec<u8>> = vec![
        br#"{"architecture":"amd64","os":"linux"}"#.to_vec(),
        b"layer one".to_vec(),
        vec![7u8; 300 << 10],
    ];
    let mut descs: Vec<serde_json::Value> = all.iter().map(|b| put(b)).collect();
    descs[0]["mediaType"] = "application/vnd.oci.image.config.v1+json".into();
    for d in &mut descs[1..] {
        d["mediaType"] = "application/vnd.oci.image.layer.v1.tar".into();
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descs[0],
        "layers": descs[1..],
    }))
    .unwrap();
    let mut m = put(&manifest);
    m["mediaType"] = "application/vnd.oci.image.manifest.v1+json".into();
    m["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "t"});
    std::fs::write(
        root.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [m]})).unwrap(),
    )
    .unwrap();
    (root, manifest, all)
}

/// The proxy on `layout`, image `manifest`, following the pull on `control`
/// (a pipe's read end, inherited) if given.
async fn proxy(layout: &Path, manifest: &[u8], control: Option<&OwnedFd>) -> ImageProxy {
    let mut c = Command::new(PROXY);
    c.arg(VERB).arg(layout).arg(sha256(manifest).as_str());
    if let Some(fd) = control {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).unwrap();
        c.arg("--follow").arg(fd.as_raw_fd().to_string());
    }
    let config = ImageProxyConfig {
        auth_anonymous: true,
        skopeo_cmd: Some(c),
        ..Default::default()
    };
    ImageProxy::new_with_config(config).await.unwrap()
}

/// A layer read through the proxy, or the error of its request or its finish.
async fn read_blob(
    p: &ImageProxy,
    img: &OpenedImage,
    digest: &str,
    size: u64,
) -> Result<Vec<u8>, String> {
    let digest = digest.parse().unwrap();
    let (mut blob, finish) = p
        .get_blob(img, &digest, size)
        .await
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    let (read, finished) = tokio::join!(blob.read_to_end(&mut bytes), finish);
    read.map_err(|e| e.to_string())?;
    finished.map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[tokio::test]
async fn the_layout_proxy_serves_the_staged_image() {
    let td = tempfile::tempdir().unwrap();
    let (root, manifest, blobs) = layout(td.path());
    let p = proxy(&root, &manifest, None).await;
    let img = p.open_image(&oci_tag(&root, "t")).await.unwrap();
    let (digest, raw) = p.fetch_manifest_raw_oci(&img).await.unwrap();
    assert_eq!(
        (digest.as_str(), &raw),
        (sha256(&manifest).as_str(), &manifest)
    );
    assert_eq!(p.fetch_config_raw(&img).await.unwrap(), blobs[0]);
    for b in &blobs {
        let got = read_blob(&p, &img, sha256(b).as_str(), b.len() as u64).await;
        assert_eq!(got.as_ref(), Ok(b));
    }
    // The client reads the same blob twice, as ostree-ext may on a retry.
    let again = read_blob(&p, &img, sha256(&blobs[2]).as_str(), 300 << 10).await;
    assert_eq!(again.map(|b| b.len()), Ok(300 << 10));
    p.close_image(&img).await.unwrap();
    p.finalize().await.unwrap();
}

/// Each refusal is an error reply to that request, and the next request is
/// served: only the image's own blobs, at their declared size, staged whole,
/// and only this layout.
#[tokio::test]
async fn the_layout_proxy_refuses_what_is_not_staged() {
    let td = tempfile::tempdir().unwrap();
    let (root, manifest, blobs) = layout(td.path());
    let unstaged = proxy(&root, b"another manifest", None).await;
    let e = unstaged
        .open_image(&oci_tag(&root, "t"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not staged"), "{e}");
    let p = proxy(&root, &manifest, None).await;
    let other = td.path().join("other");
    for (r, want) in [
        (oci_tag(&other, "t"), "not oci:"),
        (oci_tag(&root, ""), "not oci:"),
        (format!("docker://{}", root.display()), "not oci:"),
    ] {
        let e = p.open_image(&r).await.unwrap_err().to_string();
        assert!(e.contains(want), "{r}: {e}");
    }
    let img = p.open_image(&oci_tag(&root, "t")).await.unwrap();
    let layer = sha256(&blobs[1]);
    let stranger = sha256(b"not in the image");
    for (digest, size, want) in [
        (layer.as_str(), 8, "has 9 bytes, not 8"),
        (stranger.as_str(), 16, "is not in image"),
    ] {
        let e = read_blob(&p, &img, digest, size).await.unwrap_err();
        assert!(e.contains(want), "{digest}: {e}");
    }
    let path = root.join("blobs/sha256").join(layer.hex());
    std::fs::write(&path, b"layer on").unwrap();
    let e = read_blob(&p, &img, layer.as_str(), 9).await.unwrap_err();
    assert!(e.contains("is not a file of 9 bytes"), "{e}");
    std::fs::remove_file(&path).unwrap();
    let e = read_blob(&p, &img, layer.as_str(), 9).await.unwrap_err();
    assert!(e.contains("is not staged"), "{e}");
    // Still serving.
    assert_eq!(p.fetch_config_raw(&img).await.unwrap(), blobs[0]);
    p.finalize().await.unwrap();
}

/// A pipe: the read end for the proxy, the write end (close-on-exec) for the
/// test, which is the pull.
fn control_pipe() -> (OwnedFd, std::fs::File) {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    (r, w.into())
}

/// Following a pull: a blob that is not staged yet is waited for, and served
/// once it is; `CloseImage` (after which ostree-ext writes the image's ref) is
/// answered only once the pull says `done`.
#[tokio::test]
async fn the_layout_proxy_waits_for_the_pull() {
    let td = tempfile::tempdir().unwrap();
    let (root, manifest, blobs) = layout(td.path());
    let dir = root.join("blobs/sha256");
    let aside = td.path().join("aside");
    std::fs::rename(&dir, &aside).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let stage = move |b: &[u8]| {
        let hex = sha256(b).hex().to_owned();
        std::fs::rename(aside.join(&hex), dir.join(&hex)).unwrap();
    };
    stage(&manifest);
    let (r, mut w) = control_pipe();
    let p = proxy(&root, &manifest, Some(&r)).await;
    drop(r);
    let img = p.open_image(&oci_tag(&root, "t")).await.unwrap();
    let late = {
        let blobs = blobs.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            for b in &blobs {
                stage(b);
            }
        })
    };
    let started = std::time::Instant::now();
    assert_eq!(p.fetch_config_raw(&img).await.unwrap(), blobs[0]);
    assert!(started.elapsed() >= Duration::from_millis(300));
    late.join().unwrap();
    let got = read_blob(&p, &img, sha256(&blobs[2]).as_str(), 300 << 10).await;
    assert_eq!(got.as_ref(), Ok(&blobs[2]));
    let closed = tokio::spawn(async move {
        let r = p.close_image(&img).await.map_err(|e| e.to_string());
        (r, p)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !closed.is_finished(),
        "CloseImage before the pull said done"
    );
    std::io::Write::write_all(&mut w, b"done\n").unwrap();
    drop(w);
    let (r, p) = closed.await.unwrap();
    r.unwrap();
    p.finalize().await.unwrap();
}

/// Following a pull that fails: the pipe ends without `done`, so the blob
/// waited for is refused, and so is `CloseImage`; after `done`, a blob that
/// is still not staged is refused at once, as neither kept nor fetched.
#[tokio::test]
async fn the_layout_proxy_fails_with_the_pull() {
    let td = tempfile::tempdir().unwrap();
    let (root, manifest, blobs) = layout(td.path());
    let layer = root.join("blobs/sha256").join(sha256(&blobs[2]).hex());
    std::fs::remove_file(&layer).unwrap();
    for (said, want) in [
        (&b""[..], "the pull failed"),
        (b"don", "the pull failed"),
        (b"done\nmore", "the pull failed"),
        (b"done\n", "is neither in the repository nor staged"),
    ] {
        let (r, mut w) = control_pipe();
        let p = proxy(&root, &manifest, Some(&r)).await;
        drop(r);
        let img = p.open_image(&oci_tag(&root, "t")).await.unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            std::io::Write::write_all(&mut w, said).unwrap();
        });
        let e = read_blob(&p, &img, sha256(&blobs[2]).as_str(), 300 << 10).await;
        writer.join().unwrap();
        let e = e.unwrap_err();
        assert!(e.contains(want), "{said:?}: {e}");
        // The staged blobs are still served.
        assert_eq!(p.fetch_config_raw(&img).await.unwrap(), blobs[0]);
        let closed = p.close_image(&img).await;
        assert_eq!(closed.is_ok(), said == b"done\n", "{said:?}: {closed:?}");
    }
}

/// Started any other way than the crate starts it, it refuses at once (2);
/// so does the importer with a wrong command line, or asked for the proxy,
/// which is hostpull's alone.
#[test]
fn the_layout_proxy_needs_its_socket_and_command_line() {
    let td = tempfile::tempdir().unwrap();
    let digest = format!("sha256:{}", "a".repeat(64));
    // Not a descriptor it inherited (999), or its own stdin (0).
    let follow = |fd| {
        vec![
            VERB,
            "/l",
            &digest,
            "--follow",
            fd,
            "experimental-image-proxy",
        ]
    };
    for (program, args, prefix) in [
        (PROXY, follow("999"), "error: __layout-proxy: usage"),
        (PROXY, follow("0"), "error: __layout-proxy: usage"),
        (PROXY, vec![VERB], "error: __layout-proxy: "),
        (PROXY, vec![VERB, "/l"], "error: __layout-proxy: "),
        (
            PROXY,
            vec![
                VERB,
                "/l",
                &digest,
                "experimental-image-proxy",
                "--authfile",
                "/a",
            ],
            "error: __layout-proxy: ",
        ),
        (
            PROXY,
            vec![VERB, "/l", &digest, "inspect"],
            "error: __layout-proxy: ",
        ),
        (
            PROXY,
            vec![VERB, "/l", "sha256:x", "experimental-image-proxy"],
            "error: __layout-proxy: usage",
        ),
        (
            PROXY,
            vec![VERB, "/l", &digest, "experimental-image-proxy"],
            "error: __layout-proxy: ",
        ),
        (IMPORTER, vec![], "error: hostpull-ostree-import: usage: "),
        (
            IMPORTER,
            vec!["/p", "/r"],
            "error: hostpull-ostree-import: usage: ",
        ),
        (
            IMPORTER,
            vec!["/p", "/r", "Not An Image"],
            "error: hostpull-ostree-import: ",
        ),
        (
            IMPORTER,
            vec!["/p", "/r", "quay.io/a:t", "ref", "x"],
            "error: hostpull-ostree-import: usage: ",
        ),
        // The import serves no proxy: that is hostpull's.
        (
            IMPORTER,
            vec![VERB, "/l", &digest, "experimental-image-proxy"],
            "error: hostpull-ostree-import: the layout proxy is not an absolute path: __layout-proxy;",
        ),
    ] {
        let out = Command::new(program)
            .args(&args)
            .current_dir(td.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(prefix), "{stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
