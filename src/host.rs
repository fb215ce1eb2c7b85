//! The real machine behind the planner's [`Host`]: files below the root read
//! through a cap-std `Dir` opened on it (`openat2` with `RESOLVE_IN_ROOT`, so
//! an absolute symlink stays inside the root, as it would for a chroot), other
//! files as given, the process's environment and clock, root plugins run as
//! child processes, and the credential provider cache on disk.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cap_std_ext::cap_std::{self, fs::Dir};
use rustix::fd::{AsFd as _, OwnedFd};
use rustix::fs::{OFlags, ResolveFlags};

use crate::error::{Kind, fail};
use crate::open::{self, Links};
use crate::plan::host::{
    FileKind, Host, PLUGIN_ANSWER_MAX, PROVIDER_CACHE, PluginCall, PluginError,
};

/// This machine, with its default files below `root`.
#[derive(Debug)]
pub struct System {
    root: PathBuf,
    dir: Dir,
}

impl System {
    /// The machine, its default files below `root` (`--config-root`, `/`).
    pub fn open(root: &Path) -> io::Result<Self> {
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        Ok(Self {
            root: root.to_owned(),
            dir,
        })
    }

    /// The root, for readers that take a cap-std `Dir` (`config::load`).
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// `path` relative to the root, if it is below it.
    fn below_root<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        let rel = path.strip_prefix(&self.root).ok()?;
        Some(if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        })
    }

    /// What `path` names, symlinks followed, below the root through it.
    fn metadata(&self, path: &Path) -> io::Result<std::fs::Metadata> {
        let opened = self
            .below_root(path)
            .and_then(|rel| self.open_in_root(rel, OFlags::PATH));
        match opened {
            Some(fd) => std::fs::File::from(fd?).metadata(),
            None => std::fs::metadata(path),
        }
    }

    /// Open `rel` below the root, `None` where the kernel has no `openat2`
    /// (before Linux 5.6): the caller then opens the ambient path.
    fn open_in_root(&self, rel: &Path, flags: OFlags) -> Option<io::Result<OwnedFd>> {
        let r = rustix::fs::openat2(
            self.dir.as_fd(),
            rel,
            flags | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        );
        match r {
            Err(rustix::io::Errno::NOSYS) => None,
            r => Some(r.map_err(io::Error::from)),
        }
    }

    fn cache_dir(&self) -> PathBuf {
        self.root.join(PROVIDER_CACHE)
    }
}

fn kind_of(ft: std::fs::FileType) -> FileKind {
    if ft.is_file() {
        FileKind::File
    } else if ft.is_dir() {
        FileKind::Dir
    } else {
        FileKind::Other
    }
}

impl Host for System {
    fn root(&self) -> &Path {
        &self.root
    }

    /// A regular file's bytes (src/open.rs: a FIFO is refused, never
    /// waited on).
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let opened = self
            .below_root(path)
            .and_then(|rel| self.open_in_root(rel, open::flags(Links::Follow)));
        match opened {
            Some(fd) => open::read_fd(fd?),
            None => open::read(path, Links::Follow),
        }
    }

    fn kind(&self, path: &Path) -> io::Result<FileKind> {
        Ok(kind_of(self.metadata(path)?.file_type()))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let opened = self
            .below_root(dir)
            .and_then(|rel| self.open_in_root(rel, OFlags::RDONLY | OFlags::DIRECTORY));
        match opened {
            Some(fd) => Dir::from_std_file(std::fs::File::from(fd?))
                .entries()?
                .map(|e| e.map(|e| e.file_name()))
                .collect(),
            None => std::fs::read_dir(dir)?
                .map(|e| e.map(|e| e.file_name()))
                .collect(),
        }
    }

    fn env(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }

    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn run(&self, call: &PluginCall<'_>) -> Result<Vec<u8>, PluginError> {
        let mut cmd = std::process::Command::new(call.program);
        cmd.args(call.args);
        for (k, v) in call.env {
            cmd.env(k, v);
        }
        run_root_plugin(cmd, call.input, call.timeout)
    }

    fn cache_get(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.cache_dir().join(name)).ok()
    }

    fn cache_put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let cache_dir = self.cache_dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cache_dir)?;
        let file = cache_dir.join(name);
        let tmp = file.with_extension("tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        std::fs::rename(tmp, file)
    }

    fn current_dir(&self) -> io::Result<PathBuf> {
        std::env::current_dir()
    }

    fn systemd_booted(&self) -> bool {
        Path::new("/run/systemd/system").is_dir()
    }

    fn selinux_enabled(&self) -> bool {
        Path::new("/sys/fs/selinux/enforce").exists()
    }

    fn executable(&self, path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        (self.metadata(path)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }

    fn writable(&self, path: &Path) -> bool {
        use rustix::fs::{Access, AtFlags};
        let opened = self
            .below_root(path)
            .and_then(|rel| self.open_in_root(rel, OFlags::PATH | OFlags::DIRECTORY));
        match opened {
            // The directory itself, as `.` of its own descriptor.
            Some(Ok(fd)) => rustix::fs::accessat(&fd, ".", Access::WRITE_OK, AtFlags::empty()),
            Some(Err(_)) => return false,
            None => rustix::fs::access(path, Access::WRITE_OK),
        }
        .is_ok()
    }

    fn free_space(&self, path: &Path) -> io::Result<crate::plan::host::Fs> {
        statvfs(path)
    }
}

/// The `statvfs` figures of the filesystem `path` is on.
pub fn statvfs(path: &Path) -> io::Result<crate::plan::host::Fs> {
    let s = rustix::fs::statvfs(path)?;
    Ok(crate::plan::host::Fs {
        bsize: s.f_bsize,
        frsize: s.f_frsize,
        blocks: s.f_blocks,
        bfree: s.f_bfree,
        bavail: s.f_bavail,
    })
}

/// Run a credential helper or provider plugin as root: `input` on its stdin,
/// its stdout back, killed after `timeout`. Its stderr is dropped: it may hold
/// secrets. Its stdout is read while it runs (a pipe holds only 64 KiB, and a
/// plugin blocked on a full one never exits), and at most [`PLUGIN_ANSWER_MAX`]
/// of it. One that cannot be started, or answers more, is the host's setup
/// ([`PluginError::Setup`], naming the program).
fn run_root_plugin(
    mut cmd: std::process::Command,
    input: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, PluginError> {
    use PluginError::{Failed, Setup};
    use std::io::{Read as _, Write as _};
    use std::process::Stdio;
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().map_err(|e| Setup(format!("{program}: {e}")))?;
    let start = std::time::Instant::now();
    let (Some(stdout), Some(mut stdin)) = (child.stdout.take(), child.stdin.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Failed(format!("{program}: no pipes")));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut answer = Vec::new();
        let r = stdout.take(PLUGIN_ANSWER_MAX + 1).read_to_end(&mut answer);
        let _ = tx.send(r.map(|_| answer));
    });
    // A plugin that exits without reading its input is its own business.
    let _ = stdin.write_all(input);
    drop(stdin);
    let stop = |child: &mut std::process::Child, why: PluginError| {
        let _ = child.kill();
        let _ = child.wait();
        Err(why)
    };
    let no_answer = format!("no answer in {}s", timeout.as_secs());
    let answer = match rx.recv_timeout(timeout) {
        Ok(Ok(a)) if a.len() as u64 > PLUGIN_ANSWER_MAX => {
            let why = format!(
                "{program}: its answer is larger than {} KiB",
                PLUGIN_ANSWER_MAX >> 10
            );
            return stop(&mut child, Setup(why));
        }
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return stop(&mut child, Failed(format!("reading its answer: {e}"))),
        Err(_) => return stop(&mut child, Failed(no_answer)),
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(answer),
            Ok(Some(status)) => return Err(Failed(format!("it exited with {status}"))),
            Ok(None) if start.elapsed() > timeout => return stop(&mut child, Failed(no_answer)),
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(Failed(e.to_string())),
        }
    }
}

/// Open a trust file (a CA, a client certificate or key) to read, or fail with
/// a usage error naming it: a directory, a FIFO, a dangling link or a file
/// that cannot be read is configuration to fix (src/open.rs: checked on
/// the open file, and a FIFO is not waited on).
pub fn open_trust_file(path: &Path) -> anyhow::Result<std::fs::File> {
    match open::regular(path, Links::Follow) {
        Ok((file, _)) => Ok(file),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => fail(
            Kind::Usage,
            format!("{}: not a regular file", path.display()),
        ),
        Err(e) => fail(Kind::Usage, format!("reading {}: {e}", path.display())),
    }
}

/// A trust file's bytes, with [`open_trust_file`]'s errors.
pub fn read_trust_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    open_trust_file(path)?
        .read_to_end(&mut bytes)
        .or_else(|e| fail(Kind::Usage, format!("reading {}: {e}", path.display())))?;
    Ok(bytes)
}

/// A pull is batch work: run it (and, without systemd, the worker it spawns)
/// as SCHED_BATCH, unless the caller chose a policy other than the default.
/// The scheduler then preempts hostpull less for every wakeup of the worker and
/// of its own threads, which the 512 MiB pull measured as about a tenth faster
/// (docs/benchmarks.md, "SCHED_BATCH."). Called on the main thread before the
/// runtime exists: its threads inherit the policy.
#[allow(unsafe_code)]
pub fn batch_scheduling() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: both calls act on this thread (pid 0) and read only `param`.
    let r = unsafe {
        if libc::sched_getscheduler(0) != libc::SCHED_OTHER {
            return;
        }
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param)
    };
    if r != 0 {
        tracing::debug!("SCHED_BATCH refused: {}", std::io::Error::last_os_error());
    } else {
        BATCHED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether [`batch_scheduling`] made this process SCHED_BATCH: only then does
/// [`unbatched`] set a thread back, never where the caller chose the policy.
static BATCHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Run `f` (a spawn) on this thread at SCHED_OTHER if [`batch_scheduling`]
/// made it SCHED_BATCH, so that what it starts inherits the default policy.
/// The ostree import is not batch work: ostree-ext hands each layer through
/// its threads to `ostree commit` children, one wakeup after another, and
/// without wakeup preemption each handoff waits on a busy machine, which
/// ostree-ext's own import measured as up to twice as slow
/// (docs/benchmarks.md, "The import is not batch work").
#[allow(unsafe_code)]
pub fn unbatched<T>(f: impl FnOnce() -> T) -> T {
    if !BATCHED.load(std::sync::atomic::Ordering::Relaxed) {
        return f();
    }
    let set = |policy| {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: acts on this thread (pid 0) and reads only `param`.
        unsafe { libc::sched_setscheduler(0, policy, &param) }
    };
    set(libc::SCHED_OTHER);
    let r = f();
    set(libc::SCHED_BATCH);
    r
}

/// Bind the life of the child that `c` starts to its parent's: when the
/// parent dies, the child gets `signal`.
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(c: &mut std::process::Command, signal: rustix::process::Signal) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and allocates nothing.
    unsafe {
        c.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(signal)).map_err(Into::into)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin's answer is read while it runs: over a pipe's 64 KiB it used to
    /// block until the timeout. Over the limit it is refused, at once.
    #[test]
    fn plugin_answers_big_and_huge() {
        const TIMEOUT: Duration = Duration::from_secs(10);
        // The sandbox's tests in this same process stop only the workers they
        // watched (sandbox/children.rs), never a plugin.
        let run_root_plugin = |script: &str, input: &[u8], timeout: Duration| {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", script]);
            super::run_root_plugin(c, input, timeout)
        };
        let t = std::time::Instant::now();
        let out = run_root_plugin("head -c 300000 /dev/zero", b"{}", TIMEOUT).unwrap();
        assert_eq!(out.len(), 300000);
        let huge = format!("head -c {} /dev/zero", PLUGIN_ANSWER_MAX + 1);
        // Too big is the host's setup (exit 2), naming the program.
        let e = run_root_plugin(&huge, b"{}", TIMEOUT).unwrap_err();
        assert_eq!(
            e,
            PluginError::Setup("sh: its answer is larger than 1024 KiB".into())
        );
        // Endless output is cut at the limit too, and the plugin killed.
        let e = run_root_plugin("cat /dev/zero", b"{}", TIMEOUT).unwrap_err();
        assert!(
            matches!(&e, PluginError::Setup(w) if w.contains("larger than")),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let e = run_root_plugin("exec sleep 30", b"{}", Duration::from_millis(300));
        assert_eq!(
            e.unwrap_err(),
            PluginError::Failed("no answer in 0s".into())
        );
        let e = run_root_plugin("echo {}; exit 3", b"{}", TIMEOUT).unwrap_err();
        assert!(
            matches!(&e, PluginError::Failed(w) if w.contains("exit status: 3")),
            "{e}"
        );
        // A program that is not there is the host's setup too.
        let c = std::process::Command::new("/nonexistent/docker-credential-x");
        let e = super::run_root_plugin(c, b"", TIMEOUT).unwrap_err();
        assert!(
            matches!(&e, PluginError::Setup(w) if w.starts_with("/nonexistent/docker-credential-x: ")),
            "{e}"
        );
    }

    /// Below the root, an absolute symlink resolves inside it; elsewhere a
    /// path is read as given.
    #[test]
    fn reads_below_the_root_stay_inside_it() {
        let td = tempfile::tempdir().unwrap();
        let root = td.path().join("root");
        std::fs::create_dir_all(root.join("etc/d")).unwrap();
        std::fs::write(root.join("etc/inside"), "in").unwrap();
        std::fs::write(td.path().join("outside"), "out").unwrap();
        std::os::unix::fs::symlink("/etc/inside", root.join("etc/link")).unwrap();
        let h = System::open(&root).unwrap();
        assert_eq!(h.read(&root.join("etc/link")).unwrap(), b"in");
        assert_eq!(h.read(&td.path().join("outside")).unwrap(), b"out");
        assert_eq!(h.kind(&root.join("etc/d")).unwrap(), FileKind::Dir);
        assert_eq!(h.kind(&root.join("etc/link")).unwrap(), FileKind::File);
        let e = h.read(&root.join("etc/missing")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let mut names = h.list(&root.join("etc")).unwrap();
        names.sort();
        assert_eq!(names, ["d", "inside", "link"]);
        assert_eq!(h.read_text(&root.join("etc/inside")).unwrap(), "in");
        // A directory below the root and one outside it can be written; what
        // is missing cannot (a read-only mount: edges::host_pass_an_unwritable_…).
        assert!(h.writable(&root.join("etc/d")));
        assert!(h.writable(td.path()));
        assert!(!h.writable(&root.join("etc/missing")));
    }
}
