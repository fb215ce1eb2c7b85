//! Integration tests: the real binary against the real rig (tests/rig.sh, and
//! tests/sysd.sh for the systemd sandbox). A test that cannot reach its rig fails.

mod architecture;
mod creds;
mod edges;
mod fault;
mod handoff;
mod hostile;
mod layout_proxy;
mod manuals;
mod messages;
mod mirrors;
mod ostree;
mod proxy;
mod pull;
mod rate;
mod referrers;
mod rig_env;
mod robust;
mod scripts;
mod signatures;
mod space;
mod systemd;
mod tty;
mod util;
mod workers;
