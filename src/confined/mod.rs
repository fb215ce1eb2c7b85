//! The programs hostpull starts on the far side of a boundary, each confined
//! where root is not and each speaking a protocol of [`crate::wire`] with
//! root:
//!
//! | program | runs as | started by | protocol |
//! | --- | --- | --- | --- |
//! | [`agent`], `hostpull __worker-agent` | the worker unit's dynamic user, no capabilities | root, through `systemd-run` | [`crate::wire::agent`] |
//! | [`import`], `hostpull-ostree-import` | root in `hostpull_ostree_t` | root, as a pull into ostree starts | [`crate::wire::import`] |
//! | [`layout_proxy`], `hostpull __layout-proxy` | root in `hostpull_ostree_t` | the import, through ostree-ext | [`crate::wire::layout`], then containers-image-proxy's |
//!
//! `hostpull`'s two are hidden verbs of its one parser ([`crate::cli`]); the
//! import is a binary of its own for its file label. Each fails with one
//! `error:` line ([`crate::error::print`]).

pub mod agent;
pub mod import;
pub mod layout_proxy;
