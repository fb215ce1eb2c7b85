//! An in-memory [`Host`] for table tests: files, environment, clock, plugin
//! answers and the provider cache are values, and every plugin run is
//! recorded.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::plan::host::{FileKind, Host, PLUGIN_ANSWER_MAX, PluginCall, PluginError};

/// A machine in memory. Relative paths given to its builders are below its
/// root.
#[derive(Debug)]
pub struct MemHost {
    root: PathBuf,
    files: BTreeMap<PathBuf, Vec<u8>>,
    dirs: BTreeSet<PathBuf>,
    read_only: BTreeSet<PathBuf>,
    vars: BTreeMap<String, OsString>,
    /// What [`Host::now`] says.
    pub now: SystemTime,
    /// What [`Host::systemd_booted`] says.
    pub systemd: bool,
    /// What [`Host::selinux_enabled`] says.
    pub selinux: bool,
    /// What [`Host::free_space`] says of every directory, if anything.
    pub fs: Option<crate::plan::host::Fs>,
    plugins: BTreeMap<PathBuf, Result<Vec<u8>, String>>,
    ran: RefCell<Vec<(String, Vec<u8>)>>,
    cache: RefCell<BTreeMap<String, Vec<u8>>>,
}

fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl MemHost {
    /// An empty machine with its default files below `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            files: BTreeMap::new(),
            dirs: BTreeSet::new(),
            read_only: BTreeSet::new(),
            vars: BTreeMap::new(),
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            systemd: false,
            selinux: false,
            fs: None,
            plugins: BTreeMap::new(),
            ran: RefCell::default(),
            cache: RefCell::default(),
        }
    }

    fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        self.root.join(p)
    }

    /// Add a file (its directories come with it).
    pub fn file(mut self, path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Self {
        let p = self.path(path);
        self.files.insert(p, bytes.as_ref().to_vec());
        self
    }

    /// Add an empty directory.
    pub fn dir(mut self, path: impl AsRef<Path>) -> Self {
        let p = self.path(path);
        self.dirs.insert(p);
        self
    }

    /// Make `path` (a file or directory added) one [`Host::writable`] says
    /// no to.
    pub fn read_only(mut self, path: impl AsRef<Path>) -> Self {
        let p = self.path(path);
        self.read_only.insert(p);
        self
    }

    /// Set an environment variable.
    pub fn var(mut self, name: &str, value: impl Into<OsString>) -> Self {
        self.vars.insert(name.to_owned(), value.into());
        self
    }

    /// What the plugin `program` (a path or a bare name, as run) answers:
    /// its stdout, or why it failed ([`PluginError::Failed`]). One not
    /// given is missing, and an answer over [`PLUGIN_ANSWER_MAX`] too big
    /// ([`PluginError::Setup`]), as `host::System` says.
    pub fn plugin(mut self, program: impl AsRef<Path>, answer: Result<&str, &str>) -> Self {
        let p = program.as_ref().to_owned();
        self.plugins.insert(
            p,
            answer.map(|a| a.as_bytes().to_vec()).map_err(str::to_owned),
        );
        self
    }

    /// The labels and inputs of the plugins run so far, in order.
    pub fn ran(&self) -> Vec<(String, Vec<u8>)> {
        self.ran.borrow().clone()
    }

    /// The provider cache's entry names.
    pub fn cached(&self) -> Vec<String> {
        self.cache.borrow().keys().cloned().collect()
    }

    fn is_dir(&self, p: &Path) -> bool {
        p == self.root
            || self.dirs.contains(p)
            || self
                .files
                .keys()
                .chain(&self.dirs)
                .any(|f| f.starts_with(p) && f != p)
    }
}

impl Host for MemHost {
    fn root(&self) -> &Path {
        &self.root
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.files.get(path) {
            Some(b) => Ok(b.clone()),
            None if self.is_dir(path) => Err(os_error(libc::EISDIR)),
            None => Err(os_error(libc::ENOENT)),
        }
    }

    fn kind(&self, path: &Path) -> io::Result<FileKind> {
        if self.files.contains_key(path) {
            Ok(FileKind::File)
        } else if self.is_dir(path) {
            Ok(FileKind::Dir)
        } else {
            Err(os_error(libc::ENOENT))
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        if self.files.contains_key(dir) {
            return Err(os_error(libc::ENOTDIR));
        }
        if !self.is_dir(dir) {
            return Err(os_error(libc::ENOENT));
        }
        let names: BTreeSet<OsString> = self
            .files
            .keys()
            .chain(&self.dirs)
            .filter_map(|p| p.strip_prefix(dir).ok()?.iter().next().map(Into::into))
            .collect();
        Ok(names.into_iter().collect())
    }

    fn env(&self, name: &str) -> Option<OsString> {
        self.vars.get(name).cloned()
    }

    fn now(&self) -> SystemTime {
        self.now
    }

    fn run(&self, call: &PluginCall<'_>) -> Result<Vec<u8>, PluginError> {
        self.ran
            .borrow_mut()
            .push((call.label.clone(), call.input.to_vec()));
        let program = call.program.display();
        match self.plugins.get(call.program) {
            Some(Ok(a)) if a.len() as u64 > PLUGIN_ANSWER_MAX => Err(PluginError::Setup(format!(
                "{program}: its answer is larger than {} KiB",
                PLUGIN_ANSWER_MAX >> 10
            ))),
            Some(answer) => answer.clone().map_err(PluginError::Failed),
            None => Err(PluginError::Setup(format!(
                "{program}: No such file or directory (os error 2)"
            ))),
        }
    }

    fn cache_get(&self, name: &str) -> Option<Vec<u8>> {
        self.cache.borrow().get(name).cloned()
    }

    fn cache_put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.cache
            .borrow_mut()
            .insert(name.to_owned(), bytes.to_vec());
        Ok(())
    }

    /// The root: a relative path is below it.
    fn current_dir(&self) -> io::Result<PathBuf> {
        Ok(self.root.clone())
    }

    fn systemd_booted(&self) -> bool {
        self.systemd
    }

    fn selinux_enabled(&self) -> bool {
        self.selinux
    }

    fn writable(&self, path: &Path) -> bool {
        self.kind(path).is_ok() && !self.read_only.contains(path)
    }

    /// Every file of this machine is executable.
    fn executable(&self, path: &Path) -> bool {
        self.files.contains_key(path)
    }

    fn free_space(&self, _: &Path) -> io::Result<crate::plan::host::Fs> {
        // ENOSYS: this machine measures no filesystem.
        self.fs.ok_or_else(|| os_error(38))
    }
}
