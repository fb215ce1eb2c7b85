//! Integration tests: the real binary against the real rig (tests/rig.sh, and
//! tests/sysd.sh for the systemd sandbox). A test that cannot reach its rig fails.
//!
//! Each test sits under what it depends on, which decides how often tests/run.sh
//! runs it (HACKING.md, "Tests"); `once::architecture` holds every file of tests/
//! to one of these:
//! - `once`: what no worker can change (the parser, the planner, root's own
//!   checks, pacing and bars, the hand-off): the host pass runs it, once, with
//!   `--sandbox none` and the host's skopeo.
//! - `worker`: what the worker or its sandbox can change: the host pass, then
//!   every systemd pass (`--sandbox systemd`, once per skopeo the rig installs).
//!   A `host_pass_` test needs the orchestrator's own mount namespace to reach
//!   the worker, so it runs in the host pass only.
//! - `systemd`: what needs systemd: every systemd pass.

mod once {
    mod architecture;
    mod cstorage;
    mod edges;
    mod handoff;
    mod layout_proxy;
    mod manuals;
    mod rate;
    mod rig_env;
    mod robust;
    mod scripts;
    pub mod space;
    mod tty;
}
mod systemd;
mod util;
mod worker {
    mod creds;
    mod fault;
    mod hostile;
    mod messages;
    mod mirrors;
    mod ostree;
    pub mod proxy;
    mod pull;
    mod referrers;
    mod signatures;
    mod workers;
}
