//! Root-only files for one pull. With systemd they live in `/run/hostpull/<id>/`
//! and reach the worker only through `LoadCredential=` and `BindReadOnlyPaths=`;
//! without systemd the worker's private HOME serves as the staging directory.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use fn_error_context::context;

/// Where staging directories are made when systemd runs the worker.
pub const RUN_DIR: &str = "/run/hostpull";

/// A root-only directory of one pull's staged files, locked (flock) while the
/// pull holds it.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    /// The directory, open and locked: the kernel lets go of it however the
    /// pull ends, so that the next pull knows a staging left behind
    /// ([`Staging::sweep`]).
    _lock: std::fs::File,
}

impl Staging {
    /// Make `<root>/<id>`, mode 0700, and `root` itself (0700) if it is
    /// missing. It is made as `.<id>`, locked, then renamed: no sweep finds
    /// it unlocked.
    #[context("creating staging directory {}/{id}", root.display())]
    pub fn create(root: &Path, id: &str) -> anyhow::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        let making = root.join(format!(".{id}"));
        std::fs::DirBuilder::new().mode(0o700).create(&making)?;
        let lock = std::fs::File::open(&making)?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
        let dir = root.join(id);
        std::fs::rename(&making, &dir)?;
        Ok(Self { dir, _lock: lock })
    }

    /// Remove what pulls that are gone left in `root`: directories named
    /// `<prefix><pid>-<8 hex digits>` ([`super::unit::run_id`]) that no pull
    /// holds locked. A pull killed with SIGKILL cannot remove its staging,
    /// and that holds copies of its credentials. The lock, not the pid, tells
    /// (a pid comes round again, and asking another process's state is a
    /// permission of its own under SELinux). Only root-only directories of
    /// this user are removed.
    pub fn sweep(root: &Path, prefix: &str) {
        use std::os::unix::fs::MetadataExt;
        let Ok(entries) = std::fs::read_dir(root) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let named = name
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|n| n.split_once('-'))
                .is_some_and(|(pid, r)| {
                    pid.parse::<u32>().is_ok()
                        && r.len() == 8
                        && r.bytes().all(|b| b.is_ascii_hexdigit())
                });
            let ours = e.metadata().is_ok_and(|m| {
                m.is_dir()
                    && m.uid() == rustix::process::geteuid().as_raw()
                    && m.mode() & 0o077 == 0
            });
            if !named || !ours {
                continue;
            }
            let dir = e.path();
            let Ok(held) = std::fs::File::open(&dir) else {
                continue;
            };
            let free = rustix::fs::FlockOperation::NonBlockingLockExclusive;
            if rustix::fs::flock(&held, free).is_err() {
                continue;
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!("removed {}, left by a pull that is gone", dir.display()),
                Err(e) => tracing::debug!("removing {}: {e}", dir.display()),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Write a root-only (0600) file at `rel` and return its path.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        self.put(rel, bytes, 0o600)
    }

    /// Copy a trust file (a client key, a `--cert-dir` file) into the staging
    /// directory, root-only; one that cannot be read is a usage error naming it.
    pub fn copy(&self, rel: &str, from: &Path) -> anyhow::Result<PathBuf> {
        self.write(rel, &crate::host::read_trust_file(from)?)
    }

    /// Write a file that the worker may read (0644) at `rel`: generated
    /// configuration, bound read-only into the unit. Never a secret.
    pub fn write_public(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        self.put(rel, bytes, 0o644)
    }

    /// A new file at `rel` with `mode`.
    fn put(&self, rel: &str, bytes: &[u8], mode: u32) -> anyhow::Result<PathBuf> {
        let path = self.parents(rel)?;
        let staging = || format!("staging {rel}");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .with_context(staging)?;
        f.write_all(bytes).with_context(staging)?;
        Ok(path)
    }

    /// The path of `rel`, with its parents made 0755 (the staging directory
    /// itself stays 0700, so only a bind mount reaches them).
    fn parents(&self, rel: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .with_context(|| format!("staging {rel}"))?;
        }
        Ok(path)
    }

    /// A symbolic link at `rel` (parents 0755) pointing at `target`.
    pub fn symlink(&self, rel: &str, target: &Path) -> anyhow::Result<()> {
        let path = self.parents(rel)?;
        std::os::unix::fs::symlink(target, &path).with_context(|| format!("staging {rel}"))
    }

    /// Remove the directory and everything in it.
    pub fn remove(self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn root_only_and_removed() {
        let td = tempfile::tempdir().unwrap();
        let root = td.path().join("run");
        let s = Staging::create(&root, "42-x").unwrap();
        let p = s.write("auth.json", b"{}").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(s.path()), 0o700);
        assert_eq!(mode(&root), 0o700);
        assert!(s.write("auth.json", b"again").is_err(), "never overwrite");
        let conf = s.write_public("certs.d-0/reg:5000/ca.crt", b"pem").unwrap();
        assert_eq!(mode(&conf), 0o644);
        assert_eq!(mode(conf.parent().unwrap()), 0o755);
        s.symlink(
            "certs.d-0/reg:5000/client.key",
            Path::new("/run/credentials/u/k"),
        )
        .unwrap();
        let dir = s.path().to_owned();
        s.remove();
        assert!(!dir.exists());
    }

    /// What pulls that are gone left is removed; nothing else is.
    #[test]
    fn the_staging_of_pulls_that_are_gone_is_swept() {
        let td = tempfile::tempdir().unwrap();
        let root = td.path();
        let made = |name: &str, mode: u32| {
            let dir = root.join(name);
            std::fs::DirBuilder::new().mode(mode).create(&dir).unwrap();
            std::fs::write(dir.join("auth.json"), b"{}").unwrap();
            dir
        };
        // Unlocked: a pull killed with SIGKILL, or one of this very pid.
        let swept = [
            made("hostpull-4194305-0123abcd", 0o700),
            made(&format!("hostpull-{}-deadbeef", std::process::id()), 0o700),
        ];
        let running = Staging::create(root, "hostpull-1-0123abcd").unwrap();
        let kept = [
            running.path().to_owned(),
            made("hostpull-77-0123abc", 0o700),  // not a run id
            made("other-77-0123abcd", 0o700),    // another prefix
            made("hostpull-77-0123abce", 0o755), // not root-only
        ];
        std::fs::write(root.join("hostpull-77-00000000"), b"").unwrap();
        Staging::sweep(root, "hostpull-");
        for d in &swept {
            assert!(!d.exists(), "{}", d.display());
        }
        for d in &kept {
            assert!(d.exists(), "{}", d.display());
        }
        assert!(root.join("hostpull-77-00000000").exists());
        // Once its pull lets go of it, it is swept too.
        drop(running);
        Staging::sweep(root, "hostpull-");
        assert!(!kept[0].exists());
        Staging::sweep(&root.join("missing"), "");
    }
}
