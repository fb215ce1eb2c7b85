//! Faults: a registry that dies or stalls mid-blob (through a forwarder, so the
//! shared registry stays up for other tests), an orchestrator killed mid-pull,
//! and a full disk. Run in both sandbox modes.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::pull::staging_dirs;
use crate::util::*;

#[test]
fn killed_registry_mid_blob_is_retried_to_an_identical_result() {
    let s = scratch();
    // 64 MB/s (skopeo multiplexes blobs over one HTTP/2 connection): the 512 MiB
    // image takes seconds, so "mid-blob" is real.
    let fw = Forwarder::start(var("RIG_REGISTRY"), 64 << 20);
    let dest = s.path().join("retried");
    let child = spawn_piped(&mut pull_via(&fw, s.path(), &oci(&dest)));
    wait_for(
        "100 MB through the forwarder",
        Duration::from_secs(60),
        || fw.bytes_down() > 100 << 20,
    );
    fw.cut(Duration::from_secs(1));
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Either hostpull retried (a new worker session for what was missing), or
    // the worker resumed the blob itself with a Range request (skopeo 1.18 on);
    // 1.9.3 cannot resume, so with it the retry must be ours.
    let retried = stderr.contains("attempt 1 failed");
    eprintln!(
        "protocol {}: {}",
        worker_protocol(),
        if retried {
            "hostpull retried"
        } else {
            "the worker resumed the blob"
        }
    );
    assert!(retried || !worker_is_1_9(), "a retry happened: {stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["manifest_digest"], registry_digest(var("RIG_IMG_BIG")));

    // The same bytes as a pull that nothing disturbed.
    let clean = s.path().join("clean");
    pulled(var("RIG_IMG_BIG"), &oci(&clean));
    assert_eq!(snapshot(&dest), snapshot(&clean));
}

#[test]
fn stalled_registry_fails_with_6_and_leaves_no_worker() {
    let s = scratch();
    let fw = Forwarder::start(var("RIG_REGISTRY"), 64 << 20);
    let dest = s.path().join("l");
    let t0 = Instant::now();
    let mut c = pull_via(&fw, s.path(), &oci(&dest));
    c.args(["--stall-timeout", "5"]);
    let child = spawn_piped(&mut c);
    let pid = child.id();
    wait_for("its worker", Duration::from_secs(30), || {
        !workers_of(pid).is_empty()
    });
    wait_for(
        "50 MB through the forwarder",
        Duration::from_secs(60),
        || fw.bytes_down() > 50 << 20,
    );
    fw.freeze();
    let out = child.wait_with_output().unwrap();
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("stalled pull ended after {took:?}: {stderr}");
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("stalled: no data from the registry for 5s"),
        "{stderr}"
    );
    // A stall, a retry that stalls too, and the time to start: about 10 to 15 s.
    assert!(took < Duration::from_secs(25), "{took:?}");
    wait_for("the workers to go", Duration::from_secs(2), || {
        workers_of(pid).is_empty()
    });
    assert!(!dest.exists());
}

#[test]
fn after_kill_9_the_next_pull_reuses_verified_blobs() {
    let s = scratch();
    let fw = Forwarder::start(var("RIG_REGISTRY"), 64 << 20);
    let dest = s.path().join("l");
    let mut child = pull_via(&fw, s.path(), &oci(&dest))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let blobs = dest.join("blobs/sha256");
    // The config and at least one 64 MiB layer are verified and linked.
    wait_for("two verified blobs", Duration::from_secs(60), || {
        std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0) >= 2
    });
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for(
        "the orphaned workers to go",
        Duration::from_secs(10),
        || workers_of(child.id()).is_empty(),
    );
    // A pull killed so cannot remove its staging, and that holds a copy of
    // its credentials: the next pull does.
    let left = staging_dirs(child.id());
    assert_eq!(left.len(), 1, "{left:?}");

    let r = pulled(var("RIG_IMG_BIG"), &oci(&dest));
    assert!(!left[0].exists(), "{} is left", left[0].display());
    assert!(r["layers_reused"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(
        r["layers_reused"].as_u64().unwrap() + r["layers_fetched"].as_u64().unwrap(),
        8
    );
    // No partial blob was left behind: every file is a referenced, verified blob.
    let pruned = run(hostpull(&[]).args(["prune", "--json"]).arg(&dest)).stdout;
    let pruned: serde_json::Value = serde_json::from_str(&pruned).unwrap();
    assert_eq!(pruned["blobs"], 0);
    for (path, digest) in snapshot(&dest) {
        if path.starts_with("blobs/sha256") {
            assert_eq!(path.file_name().unwrap().to_str().unwrap(), digest);
        }
    }
}

#[test]
fn full_disk_is_a_clear_error_and_leaves_nothing() {
    let s = scratch();
    let dest = s.path().join("small-disk");
    std::fs::create_dir(&dest).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48m", "hostpull-test"])
        .arg(&dest)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    let r = run(&mut with_rig_creds(pull_cmd(
        var("RIG_IMG_BIG"),
        &oci(&dest),
    )));
    let left: Vec<_> = std::fs::read_dir(&dest)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let _ = Command::new("umount").arg(&dest).status();
    // Refused before the first blob (issue 24), by the space check.
    r.assert_failure(11);
    assert!(
        r.stderr.contains("not enough space on the filesystem of"),
        "{}",
        r.stderr
    );
    assert!(
        left.is_empty(),
        "the destination is as empty as before: {left:?}"
    );
}
