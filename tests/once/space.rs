//! Issue 24: room on the destination, before the first byte. On a tmpfs of
//! its own, a pull that cannot fit is refused with exit 11 naming both
//! figures, before any blob is fetched; one that just fits goes. Both
//! destinations; for ostree:, with the repository's min-free-space rule.
//! Host pass only: the space check does not depend on the sandbox.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

/// A tmpfs of `size` mounted on `dir`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "hostpull-space",
            ])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs on {}", dir.display());
        Self(dir.to_owned())
    }

    /// `stat -f` of the filesystem: free blocks (`%f`) and block size (`%s`).
    fn free_blocks(&self) -> (u64, u64) {
        let out = Command::new("stat")
            .args(["-f", "-c", "%f %s"])
            .arg(&self.0)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (f, s) = text.trim().split_once(' ').unwrap();
        (f.parse().unwrap(), s.parse().unwrap())
    }

    /// Leave exactly `blocks` free, with a filler file.
    fn leave_free(&self, blocks: u64) {
        let filler = self.0.join("filler");
        let _ = std::fs::remove_file(&filler);
        let (free, bsize) = self.free_blocks();
        assert!(free >= blocks, "{free} < {blocks}");
        std::fs::write(&filler, vec![0u8; ((free - blocks) * bsize) as usize]).unwrap();
        assert_eq!(self.free_blocks().0, blocks);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The rig's small image copied to a repository of this test's own
/// (`hostpull/space-NAME-PID`), so that the registry's log shows its
/// requests only: its name and repository.
pub(crate) fn own_copy(name: &str) -> (String, String) {
    let repo = format!("hostpull/space-{name}-{}", std::process::id());
    let image = format!("{}/{repo}:v1", var("RIG_REGISTRY"));
    rig_copy(var("RIG_IMG_SMALL"), &image, &[]);
    (image, repo)
}

/// The blobs of `image` as the registry serves it, and its manifest's
/// length: what a pull into an empty destination writes.
fn image_files(image: &str) -> Vec<u64> {
    let raw = skopeo(&[
        "inspect",
        "--raw",
        "--authfile",
        var("RIG_AUTHFILE"),
        "--cert-dir",
        var("RIG_CERT_DIR"),
        &format!("docker://{image}"),
    ]);
    let m: serde_json::Value = serde_json::from_str(&raw).unwrap();
    // OCI, so the layout stores these very bytes.
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let mut sizes: Vec<u64> = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .collect();
    sizes.push(m["config"]["size"].as_u64().unwrap());
    sizes.push(raw.len() as u64);
    sizes
}

/// hostpull's count, in blocks of 4096 bytes (tmpfs): `size / bsize + 1` a
/// file, and 4096 bytes for index.json.
fn blocks_needed(files: &[u64]) -> u64 {
    files.iter().chain([&4096]).map(|s| s / 4096 + 1).sum()
}

/// How many blob GETs the registry served for `repo` since `mark`.
fn blob_gets_since(repo: &str, mark: u64) -> usize {
    let log = std::fs::read(var("RIG_REGISTRY_LOG")).unwrap();
    let get = format!("GET /v2/{repo}/blobs/");
    String::from_utf8_lossy(&log[mark as usize..])
        .lines()
        .filter(|l| l.contains(&get))
        .count()
}

fn log_mark() -> u64 {
    std::fs::metadata(var("RIG_REGISTRY_LOG")).unwrap().len()
}

/// An empty OCI layout, so that opening it writes nothing more.
fn empty_layout(dir: &Path) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

#[test]
fn host_pass_an_oci_pull_that_cannot_fit_is_refused_before_its_first_blob() {
    let s = scratch();
    let fs = Tmpfs::new(&s.path().join("small-disk"), "4m");
    let layout = fs.0.join("l");
    empty_layout(&layout);
    let dest = oci(&layout);
    let (image, repo) = own_copy("oci");
    let files = image_files(&image);
    // Every blob comes (the manifest is no blob).
    let blobs = files.len() - 1;
    let need = blocks_needed(&files);
    assert_eq!(fs.free_blocks().1, 4096);

    // One block short: exit 11, both figures, no blob fetched, nothing written.
    fs.leave_free(need - 1);
    let before = snapshot(&layout);
    let mark = log_mark();
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    r.assert_failure(11);
    let want = format!(
        "error: not enough space on the filesystem of {}: this pull writes {} bytes (",
        layout.display(),
        need * 4096
    );
    assert!(r.stderr.contains(&want), "{want}\n{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "and {} bytes are free; nothing was fetched",
            (need - 1) * 4096
        )),
        "{}",
        r.stderr
    );
    assert_eq!(blob_gets_since(&repo, mark), 0, "a blob was fetched");
    assert_eq!(snapshot(&layout), before);

    // `hostpull plan` shows what may be written there, measured now.
    let mut plan = hostpull(&[]);
    plan.args(["plan", &image, "--dest", &dest, "--json"])
        .args(["--sandbox", "none", "--no-default-creds", "--config-root"])
        .arg(config_root(s.path()));
    let v = run(&mut plan).json();
    assert_eq!(v["space"]["path"], layout.display().to_string());
    assert_eq!(v["space"]["writable_bytes"], (need - 1) * 4096);
    assert_eq!(v["space"]["kept_free_by"], serde_json::Value::Null);

    // Just enough: the pull goes, and fits.
    fs.leave_free(need);
    let mark = log_mark();
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["manifest_digest"], registry_digest(&image));
    assert!(blob_gets_since(&repo, mark) >= blobs);
}

/// An ostree repository keeps `min-free-space-*` free, as libostree applies
/// it: a pull into it is refused when the staged blobs would eat into that,
/// naming the rule; with just enough room left above it, the pull goes (and
/// the rig's plain image then fails to import, exit 10, past the check).
#[cfg(feature = "ostree")]
#[test]
fn host_pass_an_ostree_pull_leaves_what_the_repository_keeps_free() {
    let s = scratch();
    let fs = Tmpfs::new(&s.path().join("small-disk"), "8m");
    let repo = fs.0.join("repo");
    let st = Command::new("ostree")
        .arg(format!("--repo={}", repo.display()))
        .args(["init", "--mode=bare"])
        .status()
        .unwrap();
    assert!(st.success());
    let config = repo.join("config");
    let base = std::fs::read_to_string(&config).unwrap();
    let dest = format!("ostree:{}", repo.display());
    let (image, repo) = own_copy("ostree");
    let files = image_files(&image);
    // The staging layout's own oci-layout file, written before the check.
    let need = blocks_needed(&files) + 1;

    // 1MB kept free: 256 blocks.
    std::fs::write(&config, format!("{base}min-free-space-size=1MB\n")).unwrap();
    fs.leave_free(need + 256 - 1);
    let mark = log_mark();
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    r.assert_failure(11);
    let want = format!(
        "this pull writes {} bytes ({} blobs the destination lacks, the manifest and index.json), and {} bytes are free after the 1048576 bytes the repository keeps free (min-free-space-size 1MB); nothing was fetched",
        (need - 1) * 4096,
        files.len() - 1,
        (need - 2) * 4096,
    );
    assert!(r.stderr.contains(&want), "{want}\n{}", r.stderr);
    assert_eq!(blob_gets_since(&repo, mark), 0, "a blob was fetched");

    // Just enough above the reserve: past the check, the blobs come.
    fs.leave_free(need + 256);
    let mark = log_mark();
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    r.assert_failure(10);
    assert!(
        r.stderr.contains("not an ostree encapsulated container"),
        "{}",
        r.stderr
    );
    assert!(blob_gets_since(&repo, mark) > 0);

    // The percent rule, and `hostpull plan` naming it.
    std::fs::write(&config, format!("{base}min-free-space-percent=50\n")).unwrap();
    let mut plan = hostpull(&[]);
    plan.args(["plan", &image, "--dest", &dest, "--json"])
        .args(["--sandbox", "none", "--no-default-creds", "--config-root"])
        .arg(config_root(s.path()));
    let v = run(&mut plan).json();
    assert_eq!(v["space"]["kept_free_by"], "min-free-space-percent 50%");
    assert_eq!(v["space"]["kept_free_bytes"], 4 << 20);
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    r.assert_failure(11);
    assert!(
        r.stderr
            .contains("(min-free-space-percent 50%); nothing was fetched"),
        "{}",
        r.stderr
    );
    // A value libostree refuses makes the repository unusable: exit 2.
    std::fs::write(&config, format!("{base}min-free-space-size=5\n")).unwrap();
    let r = run(&mut with_rig_creds(pull_cmd(&image, &dest)));
    r.assert_failure(2);
    assert!(
        r.stderr.contains("Invalid min-free-space-size '5'"),
        "{}",
        r.stderr
    );
}
