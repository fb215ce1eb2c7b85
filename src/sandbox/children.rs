//! The workers that run as direct children (`--sandbox none`): a pidfd of each,
//! taken while the child is still ours and has not yet run skopeo, so that
//! stopping them can reach no other process, not even another child of ours.

use std::io;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::{Arc, Mutex};

use rustix::pipe::{PipeFlags, pipe_with};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};

/// The pidfds of the workers started so far.
#[derive(Debug, Default)]
pub(super) struct Children(Mutex<Vec<OwnedFd>>);

impl Children {
    /// Have the child that `c` starts hand us its pid before it execs. Between
    /// fork and exec it writes its pid and waits; a thread of ours opens the
    /// pidfd and lets it go on. The process cannot exit meanwhile, so the pid
    /// names it and nothing else. If `c` never starts a child, dropping it
    /// ends the thread.
    #[allow(unsafe_code)]
    pub fn watch(self: &Arc<Self>, c: &mut Command) -> io::Result<()> {
        use std::os::unix::process::CommandExt;
        let (pid_r, pid_w) = pipe_with(PipeFlags::CLOEXEC)?;
        let (go_r, go_w) = pipe_with(PipeFlags::CLOEXEC)?;
        let children = Arc::clone(self);
        std::thread::Builder::new()
            .name("worker-pidfd".into())
            .spawn(move || {
                let mut pid = [0u8; 4];
                if read_exact(&pid_r, &mut pid).is_ok()
                    && let Some(pid) = Pid::from_raw(i32::from_ne_bytes(pid))
                    && let Ok(fd) = pidfd_open(pid, PidfdFlags::empty())
                    && let Ok(mut fds) = children.0.lock()
                {
                    fds.push(fd);
                }
                let _ = rustix::io::write(&go_w, b"g");
            })?;
        // SAFETY: between fork and exec the closure makes only getpid(2),
        // write(2) and read(2) system calls (rustix's, which allocate nothing).
        unsafe {
            c.pre_exec(move || {
                let pid = rustix::process::getpid().as_raw_nonzero().get();
                rustix::io::write(&pid_w, &pid.to_ne_bytes())?;
                let mut go = [0u8; 1];
                rustix::io::read(&go_r, &mut go)?;
                Ok(())
            });
        }
        Ok(())
    }

    /// SIGKILL every worker started so far that still runs. A skopeo blocked
    /// on a stalled registry ends no other way.
    pub fn kill(&self) {
        let mut fds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for fd in std::mem::take(&mut *fds) {
            let _ = pidfd_send_signal(&fd, Signal::KILL);
        }
    }
}

fn read_exact(fd: &OwnedFd, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::read(fd, &mut *buf)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => buf = &mut buf[n..],
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The children started through `watch` are killed, and a child of ours
    /// started without it is not.
    #[test]
    fn kill_stops_exactly_the_watched_children() {
        let children = Arc::new(Children::default());
        let mut watched = Command::new("sleep");
        watched.arg("60");
        children.watch(&mut watched).unwrap();
        let mut watched = watched.spawn().unwrap();
        let mut other = Command::new("sleep").arg("60").spawn().unwrap();
        // The pidfd is in before spawn() returns: the child waited for it.
        assert_eq!(children.0.lock().unwrap().len(), 1);
        children.kill();
        let status = watched.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(other.try_wait().unwrap().is_none(), "the other child runs");
        other.kill().unwrap();
        other.wait().unwrap();
        // Nothing is left to stop, and stopping again is harmless.
        children.kill();
    }

    /// A program that cannot be run fails to spawn as it would without.
    #[test]
    fn a_program_that_cannot_run_is_still_an_error() {
        let children = Arc::new(Children::default());
        let mut c = Command::new("/nonexistent/program");
        children.watch(&mut c).unwrap();
        let e = c.spawn().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        children.kill();
    }
}
