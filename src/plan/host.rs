//! The planner's one window on the machine: a [`Host`] reads files, the
//! environment and the clock, runs root plugins (credential helpers and
//! credential provider plugins) and keeps their answers' cache. The planner
//! itself only decides; `System` in the top-level `host` module is the real
//! machine, and `plan::testing::MemHost` an in-memory one for table tests.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::Kind;

/// What a path names, symlinks followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else: a FIFO, a socket, a device.
    Other,
}

/// A filesystem's `statvfs` figures that the rule uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fs {
    /// `f_bsize`: the block size libostree counts in.
    pub bsize: u64,
    /// `f_frsize`.
    pub frsize: u64,
    /// `f_blocks`: the filesystem's size, in `frsize` units.
    pub blocks: u64,
    /// `f_bfree`: free blocks, root's reserve included.
    pub bfree: u64,
    /// `f_bavail`: free blocks for anyone.
    pub bavail: u64,
}

/// A root plugin to run: its program, arguments and environment, what it gets
/// on stdin, and how long it may take. Its `Debug` names only the program:
/// arguments and environment may hold secrets.
pub struct PluginCall<'a> {
    /// How `hostpull plan` and errors name it (`credential provider NAME`,
    /// `credential helper docker-credential-NAME`).
    pub label: String,
    /// The executable: a path, or a name looked up on `PATH`.
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [String],
    /// Variables added to its environment.
    pub env: &'a [(String, String)],
    /// Its stdin.
    pub input: &'a [u8],
    /// It is killed after this long.
    pub timeout: Duration,
}

impl std::fmt::Debug for PluginCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginCall")
            .field("label", &self.label)
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

/// Why a root plugin gave no answer: a short reason, for the caller to put in
/// context, and whose fault it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginError {
    /// The host's setup: the program cannot be started (missing, not
    /// executable) or its answer is over [`PLUGIN_ANSWER_MAX`]. The reason
    /// names the program. A usage error (exit 2), never "authentication
    /// refused".
    Setup(String),
    /// It ran and failed: it exited non-zero or gave no answer in time.
    Failed(String),
}

impl PluginError {
    /// The exit code's kind: [`Kind::Usage`] for [`PluginError::Setup`],
    /// `failed` for a plugin that ran and failed.
    pub fn kind(&self, failed: Kind) -> Kind {
        match self {
            Self::Setup(_) => Kind::Usage,
            Self::Failed(_) => failed,
        }
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Setup(why) | Self::Failed(why) => f.write_str(why),
        }
    }
}

/// Where credential provider answers are cached, root-only, below the root.
pub const PROVIDER_CACHE: &str = "var/cache/hostpull/credential-providers";

/// The most a credential helper or provider plugin may answer: an answer is a
/// few credentials, and a bigger one is refused rather than held in memory.
pub const PLUGIN_ANSWER_MAX: u64 = 1 << 20;

/// The absolute directories of the colon-separated list in the environment
/// variable `name` (`PATH`, systemd's `STATE_DIRECTORY`), in order; a relative
/// one names no place a service can count on, and is left out.
pub fn env_dirs(host: &dyn Host, name: &str) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let list = host.env(name).unwrap_or_default();
    (list.as_bytes().split(|b| *b == b':'))
        .map(|d| PathBuf::from(std::ffi::OsStr::from_bytes(d)))
        .filter(|d| d.is_absolute())
        .collect()
}

/// The program a bare `name` runs, as a search of `PATH` finds it: the first
/// executable file of that name in its directories ([`env_dirs`]).
pub fn on_path(host: &dyn Host, name: &str) -> Option<PathBuf> {
    env_dirs(host, "PATH")
        .into_iter()
        .map(|d| d.join(name))
        .find(|p| host.executable(p))
}

/// Everything the planner reads from or does to the machine.
///
/// Paths: one below [`Host::root`] (every default the planner builds is
/// `root.join(…)`) is read through the root; any other (a file the user
/// named, such as `--authfile FILE`) as given.
pub trait Host {
    /// The root the host's default files are looked for below (`/` but in
    /// tests, `--config-root`).
    fn root(&self) -> &Path;
    /// A file's bytes, as `std::fs::read` gives them (and its errors).
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// What `path` names, symlinks followed, as `std::fs::metadata`.
    fn kind(&self, path: &Path) -> io::Result<FileKind>;
    /// The names in a directory, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// An environment variable of the process.
    fn env(&self, name: &str) -> Option<OsString>;
    /// The wall clock.
    fn now(&self) -> SystemTime;
    /// The process's current directory, which a relative path the user gave
    /// is below.
    fn current_dir(&self) -> io::Result<PathBuf>;
    /// Run a root plugin: `call.input` on its stdin, its stdout back (at most
    /// [`PLUGIN_ANSWER_MAX`]), its stderr dropped (it may hold secrets),
    /// killed after `call.timeout`.
    fn run(&self, call: &PluginCall<'_>) -> Result<Vec<u8>, PluginError>;
    /// A credential provider cache entry, by file name, if there is one.
    fn cache_get(&self, name: &str) -> Option<Vec<u8>>;
    /// Store a credential provider cache entry, root-only.
    fn cache_put(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Whether systemd runs this host (`/run/systemd/system` is a directory).
    fn systemd_booted(&self) -> bool;
    /// Whether SELinux is enabled (`/sys/fs/selinux/enforce` exists).
    fn selinux_enabled(&self) -> bool;
    /// Whether this process may create files in the directory `path`, as
    /// `access(2)` with `W_OK` says (its mode, a read-only mount).
    fn writable(&self, path: &Path) -> bool;
    /// Whether `path` is a regular file with an execute bit, as a search of
    /// `PATH` takes a program (symlinks followed).
    fn executable(&self, path: &Path) -> bool;
    /// The `statvfs` of the filesystem `path` is on.
    fn free_space(&self, path: &Path) -> io::Result<Fs>;

    /// A file's text, as `std::fs::read_to_string` gives it (and its errors).
    fn read_text(&self, path: &Path) -> io::Result<String> {
        String::from_utf8(self.read(path)?).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        })
    }
    /// Whether `path` names anything (`Path::exists`).
    fn present(&self, path: &Path) -> bool {
        self.kind(path).is_ok()
    }
    /// Whether `path` names a regular file (`Path::is_file`).
    fn regular_file(&self, path: &Path) -> bool {
        matches!(self.kind(path), Ok(FileKind::File))
    }
    /// Whether `path` names a directory (`Path::is_dir`).
    fn directory(&self, path: &Path) -> bool {
        matches!(self.kind(path), Ok(FileKind::Dir))
    }
}

/// A [`Host`] that notes the label of every plugin run through it, so that a
/// plan can say which ran (`Plan::plugins_run`): nothing runs unannounced.
pub struct Recording<'a> {
    inner: &'a dyn Host,
    ran: std::cell::RefCell<Vec<String>>,
}

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("ran", &self.ran)
            .finish_non_exhaustive()
    }
}

impl<'a> Recording<'a> {
    /// `inner`, recording.
    pub fn new(inner: &'a dyn Host) -> Self {
        Self {
            inner,
            ran: Default::default(),
        }
    }

    /// The labels of the plugins run, in order.
    pub fn into_ran(self) -> Vec<String> {
        self.ran.into_inner()
    }
}

impl Host for Recording<'_> {
    fn root(&self) -> &Path {
        self.inner.root()
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn kind(&self, path: &Path) -> io::Result<FileKind> {
        self.inner.kind(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.inner.list(dir)
    }
    fn env(&self, name: &str) -> Option<OsString> {
        self.inner.env(name)
    }
    fn now(&self) -> SystemTime {
        self.inner.now()
    }
    fn run(&self, call: &PluginCall<'_>) -> Result<Vec<u8>, PluginError> {
        self.ran.borrow_mut().push(call.label.clone());
        self.inner.run(call)
    }
    fn cache_get(&self, name: &str) -> Option<Vec<u8>> {
        self.inner.cache_get(name)
    }
    fn cache_put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.inner.cache_put(name, bytes)
    }
    fn current_dir(&self) -> io::Result<PathBuf> {
        self.inner.current_dir()
    }
    fn systemd_booted(&self) -> bool {
        self.inner.systemd_booted()
    }
    fn selinux_enabled(&self) -> bool {
        self.inner.selinux_enabled()
    }
    fn writable(&self, path: &Path) -> bool {
        self.inner.writable(path)
    }
    fn executable(&self, path: &Path) -> bool {
        self.inner.executable(path)
    }

    fn free_space(&self, path: &Path) -> io::Result<Fs> {
        self.inner.free_space(path)
    }
}
