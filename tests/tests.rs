//! Integration tests: the real binary against the real rig (tests/rig.sh, and
//! tests/sysd.sh for the systemd sandbox). A test that cannot reach its rig fails.

mod architecture;
mod creds;
mod fault;
mod handoff;
mod hostile;
mod messages;
mod mirrors;
mod ostree;
mod pull;
mod rate;
mod robust;
mod signatures;
mod systemd;
mod tty;
mod util;
mod workers;
