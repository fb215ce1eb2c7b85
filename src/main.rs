//! The `hostpull` command: everything is in the library ([`hostpull::cli`]).

use hostpull::internals::{LAYOUT_PROXY, WORKER_AGENT, layout_proxy, worker_agent};

fn main() {
    // Inside a worker unit, hostpull is the worker agent (sandbox::agent); under
    // the ostree import, the proxy that reads the staging layout (store::proxy).
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(a) if a == WORKER_AGENT => std::process::exit(worker_agent(args.collect())),
        Some(a) if a == LAYOUT_PROXY => std::process::exit(layout_proxy(args.collect())),
        _ => {}
    }
    std::process::exit(hostpull::cli::run_main());
}
