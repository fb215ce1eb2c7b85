//! hostpull: pull container images for image-based host updates, with the
//! network-facing part in a sandboxed worker and every byte verified by root.
//!
//! Data flows cli → plan → sandbox → fetch (signature, verify) → store.

pub mod cli;
pub mod config;
pub mod digest;
pub mod error;
pub mod fetch;
pub mod handoff;
pub mod host;
pub mod manifest;
pub mod options;
pub mod plan;
pub mod progress;
pub mod rate;
pub mod report;
pub mod sandbox;
pub mod signature;
pub mod store;
pub mod verify;
