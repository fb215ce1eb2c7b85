//! hostpull: pull container images for image-based host updates, with the
//! network-facing part in a sandboxed worker and every byte verified by root.
//!
//! The modules, in the order data passes through them (HACKING.md says where a
//! change goes). The public ones are what a user of the library needs: the
//! command line, the options and their files, the planner and its host, and the
//! parsers of what a registry sends; the rest acts on a plan and is the binary's.
//!
//! | module | |
//! | --- | --- |
//! | [`cli`] | the verbs: parse the command line, call the library, print the one `error:` line |
//! | [`options`] | every knob of a pull, one struct for the command line and the files |
//! | [`config`] | hostpull.d drop-ins and `pulls.d` profiles, merged into one [`options::Options`] |
//! | [`host`] | the real [`plan::host::Host`]: files under the root, environment, clock, plugins |
//! | [`plan`] | the pure planner: what a pull may use, decided as data |
//! | `wire`, `confined` | the protocols between hostpull's programs; the programs root starts across a boundary (the worker agent, the ostree import, the layout proxy) |
//! | `sandbox` | the worker: a transient unit or a child, its staged files, the proxy session, the reading of its errors |
//! | `metered` | NetworkManager's `Metered`, for a pull that waits out metered links |
//! | `fetch` | the pull: manifest, blobs, retries, watchdog |
//! | `rate` | `--max-rate`: one token bucket for the whole pull |
//! | `signature` | the signature policy, applied by root to what the worker fetched |
//! | [`imgref`] | image references and destinations, in the transports' own syntax |
//! | [`manifest`], [`digest`], `verify` | what a registry sends, parsed; digests; streaming checks |
//! | `store` | the OCI layout writer and the ostree import |
//! | `handoff` | rpm-ostree and bootc, after a verified pull |
//! | `progress`, `report` | progress events and bars; the final report |
//! | [`error`] | failure kinds and their exit codes |
//! | [`secret`] | a secret's type, which never prints itself |

pub mod cli;
pub mod config;
pub(crate) mod confined;
pub mod digest;
pub mod error;
pub(crate) mod fetch;
pub(crate) mod handoff;
pub mod host;
pub mod imgref;
pub mod manifest;
pub(crate) mod metered;
pub(crate) mod open;
pub mod options;
pub mod plan;
pub(crate) mod progress;
pub(crate) mod rate;
pub(crate) mod report;
pub(crate) mod sandbox;
pub mod secret;
pub(crate) mod signature;
pub(crate) mod store;
pub(crate) mod verify;
pub(crate) mod wire;

/// What the fuzz targets (`fuzz/`), the integration tests (`tests/`) and the
/// binary's worker agent (`src/main.rs`) reach inside modules that are not
/// public. Not an API.
#[doc(hidden)]
pub mod internals {
    pub use crate::confined::import::main as ostree_import;
    pub use crate::fetch::IN_FLIGHT;
    pub use crate::rate::{LEAD, SLICE, in_flight};
    pub use crate::sandbox::classify::classify_worker_text;
    pub use crate::signature::{ATOMIC, COSIGN, check_payload, verify_attachment, verify_bundle};
}
