//! What a pull is asked to do: the options of the command line, of a pull
//! profile and of the hostpull.d drop-ins.

/// How the worker is isolated.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// `systemd` when systemd runs the host; otherwise an error naming `none`.
    Auto,
    /// A transient systemd unit with a dynamic user.
    Systemd,
    /// A direct child process of hostpull, for hosts without systemd.
    None,
}
