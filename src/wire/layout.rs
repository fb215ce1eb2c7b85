//! The layout proxy's command line, between the ostree import, which has
//! ostree-ext start it (`store::ostree::import_here`), and the proxy
//! ([`crate::confined::layout_proxy`]): `hostpull __layout-proxy LAYOUT DIGEST
//! [--follow FD] experimental-image-proxy`, with the image proxy's socket as
//! stdin. What crosses that socket is containers-image-proxy's protocol.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::os::fd::BorrowedFd;
use std::path::Path;

use crate::digest::Sha256Digest;

/// The hidden verb that makes `hostpull` the layout proxy.
pub const VERB: &str = "__layout-proxy";
/// What the crate appends to the command it is given.
pub const PROXY_VERB: &str = "experimental-image-proxy";
/// The protocol version it speaks: the base one, without layer info (which
/// ostree-ext needs only for `containers-storage:`).
pub const PROTOCOL: &str = "0.2.3";
/// The option whose value is the pull's control pipe.
pub const FOLLOW: &str = "--follow";

/// The command that starts this server on `layout` and the manifest
/// `digest`, following the pull on `control` if given, for the crate's
/// `skopeo_cmd` (it appends [`PROXY_VERB`] and sets stdin): `program`,
/// hostpull, which the import is given. `control` must not be close-on-exec:
/// the server inherits it.
pub fn command(
    program: &Path,
    layout: &Path,
    digest: &Sha256Digest,
    control: Option<BorrowedFd<'_>>,
) -> std::process::Command {
    use std::os::fd::AsRawFd;
    let mut c = std::process::Command::new(program);
    c.arg(VERB).arg(layout).arg(digest.as_str());
    if let Some(fd) = control {
        c.arg(FOLLOW).arg(fd.as_raw_fd().to_string());
    }
    c
}
