//! The worker agent: the program a pull's one worker unit runs. It is
//! `hostpull` itself (`hostpull __worker-agent SKOPEO ARGS…`), runs as the
//! worker does (the unit's dynamic user, its domain, its limits) and is as
//! untrusted as skopeo: root checks every byte it passes on.
//!
//! It serves two channels that `systemd-run --pipe` hands it:
//! - stdin is the image proxy's socketpair. The agent never reads it: on
//!   root's `proxy` request it starts `SKOPEO ARGS…` (the crate's
//!   `experimental-image-proxy` command line) on it as its child, lets go of
//!   it, and ends as that child ends, so that the proxy's end is the unit's.
//! - stdout is a stream socket to root, the side channel. The agent writes
//!   [`HELLO`], then serves root's requests one at a time: `run` starts
//!   `SKOPEO ARGS…` (`inspect --raw`, whose bytes root hashes itself) and
//!   answers with how it ended, its stdout (at most `limit` + 1 bytes) and
//!   its stderr (at most [`STDERR_MAX`]); if a signal ended it (the OOM
//!   killer's SIGKILL), the agent then dies of the same signal, so that the
//!   unit ends as it would have with skopeo alone, once root has closed the
//!   side channel or [`LINGER`] has passed. It serves on while the
//!   proxy runs, so that root asks for the manifest beside the proxy's first
//!   `OpenImage`. When root closes it before asking for the proxy, the agent
//!   exits 0.
//!
//! With [`PROXY_ENV_OPTION`] FILE before SKOPEO, every skopeo it starts gets
//! the proxy settings of FILE (`HTTPS_PROXY=…` lines, root-only, a credential
//! of the unit) in its environment, and nothing else of them: they may hold
//! the proxy's password, which neither argv nor the unit's properties
//! (`systemctl show`, readable by any local user) may.
//!
//! So one unit serves the whole pull: the manifests, the signatures' images
//! and the blobs, where each used to be a unit of its own (a unit's start is
//! P2 in docs/benchmarks.md).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::error::print;
use crate::wire::agent::{HELLO, LINE_MAX, PROXY_ENV_OPTION, Reply, Request, STDERR_MAX, VERB};

/// The most of the proxy settings' file the agent reads.
const PROXY_ENV_MAX: u64 = 64 << 10;
/// How long the agent outlives a command a signal killed, waiting for root to
/// close the side channel: the unit's cgroup, where root reads that the kernel
/// killed for memory, goes with the unit, and root looks when it sees the
/// failure, which the agent's own end would otherwise race.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// The agent's `main`: `args` are what follows [`VERB`]. Returns the exit
/// code, unless it became the proxy.
pub fn main(args: Vec<OsString>) -> i32 {
    let (skopeo, proxy_args) = match program(args) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Some(side) = side_channel() else {
        print(
            Some(VERB),
            format_args!("stdout is not hostpull's side channel"),
        );
        return 2;
    };
    // Opened once, as the unit starts: on cgroup v1, a daemon-reload rewrites
    // the unit's device list, and an open(2) of /dev/null meanwhile is EPERM.
    let null = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        Ok(f) => f,
        Err(e) => {
            print(Some(VERB), format_args!("opening /dev/null: {e}"));
            return 8;
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (served, closed) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("side-channel".into())
        .spawn({
            let (skopeo, null) = (skopeo.clone(), null.try_clone());
            move || {
                if let Ok(null) = null {
                    serve(side, &skopeo, &null, &tx);
                }
                drop(served);
            }
        });
    let side = match spawned {
        Ok(side) => side,
        Err(e) => {
            print(Some(VERB), format_args!("starting the side channel: {e}"));
            return 8;
        }
    };
    // Either root asks for the proxy, or the side channel ends without it.
    if rx.recv().is_err() {
        return 0;
    }
    let ended = proxy(&skopeo, proxy_args, &null);
    // A proxy that exited (or never started) leaves the side channel to
    // serve on until root closes it: an `inspect` under way still answers,
    // with its own error, where the proxy's would say less. One that failed
    // has its socketpair shut down (systemd-run holds it too), so that root
    // reads its end; after root's Shutdown (exit 0) nobody waits for it.
    // (Under SELinux the worker may not shut down root's socket: there root
    // waits for the unit's end, or the stall timeout.) One a signal killed
    // leaves the agent to die of it once root has looked (see [`LINGER`]).
    if ended != Ok(0) {
        let _ = rustix::net::shutdown(stdin(), rustix::net::Shutdown::Both);
    }
    let _ = rustix::stdio::dup2_stdin(&null);
    match ended {
        Ok(code) => {
            let _ = side.join();
            code
        }
        Err(signal) => {
            let _ = closed.recv_timeout(LINGER);
            die_of(signal)
        }
    }
}

/// `[--proxy-env FILE] SKOPEO ARGS…`: the program, and the proxy's
/// arguments; else the exit code, its error printed.
fn program(args: Vec<OsString>) -> Result<(Program, Vec<OsString>), i32> {
    let mut args = args.into_iter().peekable();
    let mut env = Vec::new();
    if args.next_if(|a| a == PROXY_ENV_OPTION).is_some() {
        match args.next().map(|f| read_proxy_env(&PathBuf::from(f))) {
            Some(Ok(vars)) => env = vars,
            Some(Err(e)) => {
                print(Some(VERB), format_args!("reading the proxy settings: {e}"));
                return Err(8);
            }
            None => {
                print(Some(VERB), format_args!("{PROXY_ENV_OPTION} needs a file"));
                return Err(2);
            }
        }
    }
    let Some(path) = args.next().map(PathBuf::from) else {
        print(Some(VERB), format_args!("no worker program"));
        return Err(2);
    };
    Ok((Program { path, env }, args.collect()))
}

/// Run the image proxy, `SKOPEO ARGS…` on stdin's socketpair, as the agent's
/// child, so that the side channel goes on serving root meanwhile (an
/// `inspect` beside the proxy's `OpenImage`). Its exit code, the agent's, or
/// the signal that killed it (the OOM killer's), which the agent dies of.
fn proxy(skopeo: &Program, args: Vec<OsString>, null: &std::fs::File) -> Result<i32, i32> {
    let mut c = skopeo.command();
    c.args(args)
        .stdin(Stdio::inherit())
        .stderr(Stdio::inherit());
    // fd 1 is /dev/null for it, as the proxy crate gives skopeo.
    match null.try_clone() {
        Ok(f) => c.stdout(f),
        Err(e) => {
            print(Some(VERB), format_args!("duplicating /dev/null: {e}"));
            return Ok(8);
        }
    };
    // Stopped with the agent, which is all root knows of without systemd.
    crate::host::die_with_parent(&mut c, rustix::process::Signal::KILL);
    let mut child = match c.spawn() {
        Ok(c) => c,
        Err(e) => {
            print(
                Some(VERB),
                format_args!("starting {}: {e}", skopeo.path.display()),
            );
            return Ok(8);
        }
    };
    // The socketpair is the proxy's alone now (and systemd-run's, which
    // holds it until the unit ends: the agent shuts it down when skopeo ends).
    if let Err(e) = rustix::stdio::dup2_stdin(null) {
        print(Some(VERB), format_args!("closing the proxy's socket: {e}"));
        let _ = child.kill();
        return Ok(8);
    }
    use std::os::unix::process::ExitStatusExt;
    match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (_, Some(signal)) => Err(signal),
            (Some(code), None) => Ok(code),
            (None, None) => Ok(8),
        },
        Err(e) => {
            print(
                Some(VERB),
                format_args!("waiting for {}: {e}", skopeo.path.display()),
            );
            Ok(8)
        }
    }
}

/// The program the agent runs (skopeo), and what its environment gets
/// besides the unit's.
#[derive(Debug, Clone)]
struct Program {
    path: PathBuf,
    /// The proxy settings: `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`.
    env: Vec<(String, String)>,
}

impl Program {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.path);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }
}

/// The proxy settings of `file`, as [`crate::plan::proxy::Proxy::env_file`]
/// wrote them.
fn read_proxy_env(file: &std::path::Path) -> std::io::Result<Vec<(String, String)>> {
    let mut text = String::new();
    std::fs::File::open(file)?
        .take(PROXY_ENV_MAX)
        .read_to_string(&mut text)?;
    Ok(crate::plan::proxy::read_env_file(&text)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Stdin, the image proxy's socketpair, borrowed.
#[allow(unsafe_code)]
fn stdin() -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the whole process (dup2 replaces it).
    unsafe { std::os::fd::BorrowedFd::borrow_raw(0) }
}

/// Stdout, the side channel, if it is a socket, as root hands it over.
#[allow(unsafe_code)]
fn side_channel() -> Option<UnixStream> {
    // SAFETY: fd 1 is only looked at here; fstat(2) of a closed one fails.
    let stdout = unsafe { std::os::fd::BorrowedFd::borrow_raw(1) };
    let st = rustix::fs::fstat(stdout).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return None;
    }
    // SAFETY: fd 1 is open (above), owned by nobody else here, and taken
    // once, before any other code could use it.
    Some(UnixStream::from(unsafe { OwnedFd::from_raw_fd(1) }))
}

/// Serve root's requests until it closes the side channel; tell `proxy`
/// when it asks for the proxy.
fn serve(
    side: UnixStream,
    skopeo: &Program,
    null: &std::fs::File,
    proxy: &std::sync::mpsc::Sender<()>,
) {
    let Ok(mut out) = side.try_clone() else {
        return;
    };
    if writeln!(out, "{HELLO}").is_err() {
        return;
    }
    let mut lines = BufReader::new(side);
    loop {
        let mut line = String::new();
        match (&mut lines).take(LINE_MAX).read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        match serde_json::from_str::<Request>(&line) {
            Ok(Request::Proxy) => {
                let _ = proxy.send(());
            }
            Ok(Request::Run { args, limit }) => {
                let ran = run(skopeo, &args, limit, null);
                let killed = ran.signal;
                if answer(&mut out, ran).is_err() {
                    return;
                }
                if let Some(signal) = killed {
                    linger(&mut lines);
                    die_of(signal);
                }
            }
            Err(e) => {
                print(
                    Some(VERB),
                    format_args!("a request that does not parse: {e}"),
                );
                return;
            }
        }
    }
}

/// Wait for root to close the side channel, at most [`LINGER`].
fn linger(lines: &mut BufReader<UnixStream>) {
    let deadline = std::time::Instant::now() + LINGER;
    let mut buf = [0; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || lines.get_ref().set_read_timeout(Some(left)).is_err() {
            return;
        }
        if let Ok(0) | Err(_) = lines.read(&mut buf) {
            return;
        }
    }
}

/// End the agent by `signal`, which ended its command (the agent does not
/// outlive it): the unit's main process then dies as skopeo did when it was
/// the main process, and root reads why from the unit. An OOM kill picks the
/// largest process, skopeo, and is then a SIGKILL of the main process in a
/// unit that reached its MemoryMax.
fn die_of(signal: i32) -> ! {
    if let Some(s) = rustix::process::Signal::from_named_raw(signal) {
        let _ = rustix::process::kill_process(rustix::process::getpid(), s);
    }
    std::process::exit(128 + signal)
}

/// What a command left: its exit code (none: it did not run to its end), the
/// signal that ended it (not the agent's own kill), and what it wrote.
#[derive(Debug)]
struct Ran {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Ran {
    /// It could not run: why, as its stderr.
    fn not(why: impl Into<Vec<u8>>) -> Self {
        Self {
            code: None,
            signal: None,
            stdout: Vec::new(),
            stderr: why.into(),
        }
    }
}

/// Run skopeo with `args` to its end, `null` as its stdin, keeping at most
/// `limit` + 1 bytes of stdout (past that it is killed) and [`STDERR_MAX`] of
/// stderr.
fn run(skopeo: &Program, args: &[String], limit: u64, null: &std::fs::File) -> Ran {
    let mut c = skopeo.command();
    let stdin = match null.try_clone() {
        Ok(f) => Stdio::from(f),
        Err(e) => return Ran::not(format!("duplicating /dev/null: {e}")),
    };
    c.args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // An `inspect` must not outlive the agent that root stops (without
    // systemd, the agent is all root knows of).
    crate::host::die_with_parent(&mut c, rustix::process::Signal::KILL);
    let mut child = match c.spawn() {
        Ok(c) => c,
        Err(e) => return Ran::not(format!("starting {}: {e}", skopeo.path.display())),
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        return Ran::not("the worker's pipes are missing");
    };
    let errors = std::thread::spawn(move || {
        let mut err = Vec::new();
        let mut stderr = stderr;
        let _ = (&mut stderr).take(STDERR_MAX).read_to_end(&mut err);
        // Drain the rest, so that a chatty command never blocks on it.
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        err
    });
    let mut out = Vec::new();
    let _ = stdout.take(limit.saturating_add(1)).read_to_end(&mut out);
    let status = if out.len() as u64 > limit {
        let _ = child.kill();
        let _ = child.wait();
        None
    } else {
        child.wait().ok()
    };
    let stderr = errors.join().unwrap_or_default();
    use std::os::unix::process::ExitStatusExt;
    Ran {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        stdout: out,
        stderr,
    }
}

/// Write a [`Reply`] and the bytes it announces.
fn answer(side: &mut UnixStream, ran: Ran) -> std::io::Result<()> {
    let Ran {
        code,
        signal,
        stdout,
        stderr,
    } = ran;
    let reply = Reply {
        code,
        signal,
        stdout: stdout.len() as u64,
        stderr: stderr.len() as u64,
    };
    let mut head = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
    head.push(b'\n');
    side.write_all(&head)?;
    side.write_all(&stdout)?;
    side.write_all(&stderr)?;
    side.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command's output comes back whole up to the limit; one byte more
    /// stops it (no exit code), and its stderr is kept either way.
    #[test]
    fn run_keeps_output_within_the_limit() {
        let sh = &Program {
            path: "/bin/sh".into(),
            env: vec![("HTTPS_PROXY".into(), "http://p:3128".into())],
        };
        let null = std::fs::File::open("/dev/null").unwrap();
        let args = |s: &str| vec!["-c".to_owned(), s.to_owned()];
        let r = run(sh, &args("printf abc; printf oops >&2; exit 3"), 3, &null);
        assert_eq!(
            (r.code, &r.stdout[..], &r.stderr[..]),
            (Some(3), &b"abc"[..], &b"oops"[..])
        );
        let r = run(sh, &args("printf abcd; exec sleep 60"), 3, &null);
        assert_eq!(
            (r.code, r.signal, &r.stdout[..]),
            (None, None, &b"abcd"[..])
        );
        // Killed by someone else (the OOM killer): the agent dies of it too.
        let r = run(sh, &args("printf ab; kill -KILL $$"), 3, &null);
        assert_eq!(
            (r.code, r.signal, &r.stdout[..]),
            (None, Some(9), &b"ab"[..])
        );
        // The proxy settings reach the command's environment.
        let r = run(sh, &args("printf %s \"$HTTPS_PROXY\""), 64, &null);
        assert_eq!(&r.stdout[..], b"http://p:3128");
        let none = Program {
            path: "/nonexistent".into(),
            env: Vec::new(),
        };
        let r = run(&none, &[], 3, &null);
        assert_eq!(r.code, None);
        assert!(String::from_utf8_lossy(&r.stderr).contains("/nonexistent"));
    }
}
