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

#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
}

impl Staging {
    /// Make `<root>/<id>`, mode 0700, and `root` itself (0700) if it is missing.
    #[context("Creating staging directory {}/{id}", root.display())]
    pub fn create(root: &Path, id: &str) -> anyhow::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        let dir = root.join(id);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Self { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Write a root-only (0600) file and return its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("Staging {name}"))?;
        f.write_all(bytes)
            .with_context(|| format!("Staging {name}"))?;
        Ok(path)
    }

    /// Copy a file the orchestrator may read into the staging directory.
    pub fn copy(&self, name: &str, from: &Path) -> anyhow::Result<PathBuf> {
        let bytes = std::fs::read(from).with_context(|| format!("Reading {}", from.display()))?;
        self.write(name, &bytes)
    }

    /// Write a file that the worker may read (0644, parents 0755) at `rel`:
    /// generated configuration, bound read-only into the unit. Never a secret.
    pub fn write_public(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .with_context(|| format!("Staging {rel}"))?;
        f.write_all(bytes)
            .with_context(|| format!("Staging {rel}"))?;
        Ok(path)
    }

    /// A symbolic link at `rel` (parents 0755) pointing at `target`.
    pub fn symlink(&self, rel: &str, target: &Path) -> anyhow::Result<()> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)?;
        }
        std::os::unix::fs::symlink(target, &path).with_context(|| format!("Staging {rel}"))
    }

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
}
