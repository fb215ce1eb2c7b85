//! The `hostpull` command: everything is in the library ([`hostpull::cli`]).

use hostpull::internals::{WORKER_AGENT, worker_agent};

fn main() {
    // Inside a worker unit, hostpull is the worker agent (sandbox::agent).
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == WORKER_AGENT) {
        std::process::exit(worker_agent(args.collect()));
    }
    std::process::exit(hostpull::cli::run_main());
}
