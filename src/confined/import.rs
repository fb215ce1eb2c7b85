//! `hostpull-ostree-import`, the ostree import in a process of its own: a
//! second program, installed as `PREFIX/libexec/hostpull-ostree-import`.
//! Root starts it and follows it (`store::import`); what crosses between them
//! is [`crate::wire::import`].
//!
//! libostree labels every object it writes with the image's SELinux label, and
//! an OS image carries labels that only a few domains may give, the binary
//! policy's above all (`policy_config_t`). rpm-ostree and bootc write as an
//! unconfined `install_t`. hostpull keeps those rights out of its own domain:
//! the import runs in this program, which has a file label of its own
//! (`hostpull_ostree_exec_t`), so that executing it moves the process into
//! `hostpull_ostree_t` (selinux/hostpull.te). It gets the verified staging
//! layout and what to import on its command line, imports with ostree-ext
//! ([`crate::store::ostree::import_here`]), and prints what it did as JSON.
//! The image proxy that ostree-ext starts ([`crate::confined::layout_proxy`]) is
//! hostpull itself (`hostpull __layout-proxy LAYOUT ...`, its path the
//! request's first argument), which starts without libostree, so faster
//! than this program (docs/benchmarks.md, "hostpull without libostree").
//! Neither fetches nor checks anything that root has not checked already.

use std::ffi::OsString;
use std::io::Write;

use anyhow::Context;

use crate::wire::import::{PROGRAM, Start};

/// The program's `main`. It answers first what the repository holds, as one
/// JSON line, then reads the rest of its request from stdin and imports.
/// Returns the exit code: 2 for a wrong command line or request, 1 for a
/// failure, 0 when the pull ended before the import began.
pub fn main(args: Vec<OsString>) -> i32 {
    let start = match Start::parse(args) {
        Ok(s) => s,
        Err(e) => return usage(format_args!("{e:#}")),
    };
    let held = crate::store::ostree::holdings_here(&start.dest.repo, &start.image);
    if let code @ 1.. = answer(held) {
        return code;
    }
    let req = match start.request(std::io::stdin()) {
        Ok(Some(r)) => r,
        Ok(None) => return 0,
        Err(e) => return usage(format_args!("{e:#}")),
    };
    // The pull's control pipe, without close-on-exec: the proxy inherits it.
    let control = rustix::io::dup(std::io::stdin()).context("taking the pull's control pipe");
    answer(control.and_then(|c| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        rt.block_on(async {
            let _signals = follow_the_pull_not_signals()?;
            crate::store::ostree::import_here(&req, c).await
        })
    }))
}

/// A wrong command line: its `error:` line, and exit 2.
fn usage(e: std::fmt::Arguments) -> i32 {
    crate::error::print(Some(PROGRAM), e);
    2
}

/// `done` as a JSON line on stdout and exit 0, or its error as one `error:`
/// line and exit 1.
fn answer<T: serde::Serialize>(done: anyhow::Result<T>) -> i32 {
    let printed = done.and_then(|d| {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &d)?;
        out.write_all(b"\n")?;
        Ok(out.flush()?)
    });
    match printed {
        Ok(()) => 0,
        Err(e) => {
            crate::error::print(None, format_args!("{e:#}"));
            1
        }
    }
}

/// SIGINT and SIGTERM, caught and left unread: the import stops when the pull
/// says so, on the control pipe, not when a signal meant for the pull reaches
/// it too (Ctrl-C reaches the terminal's whole process group, `systemctl
/// stop` the unit's whole cgroup). The pull then ends the pipe, and the
/// import removes what it made before it exits; killed, it could not. A
/// caught signal is the default again in what this process executes.
fn follow_the_pull_not_signals() -> anyhow::Result<[tokio::signal::unix::Signal; 2]> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok([
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
    ])
}
