//! Hand a verified layout to a host-update consumer: `rpm-ostree rebase` or
//! `bootc switch`. Only ever after a pull has published the layout.

use std::path::Path;
use std::process::Command;

use crate::error::{Failure, Kind};

/// Who takes the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Consumer {
    /// `rpm-ostree rebase` onto the pulled image.
    RpmOstree,
    /// `bootc switch` to the pulled image.
    Bootc,
}

/// The consumer's command line for the layout at `dir`, tag `tag`.
pub fn command(consumer: Consumer, dir: &Path, tag: &str, reboot: bool) -> Command {
    let mut c;
    match consumer {
        Consumer::RpmOstree => {
            c = Command::new(consumer.program());
            c.arg("rebase").arg(format!(
                "ostree-unverified-image:oci:{}:{tag}",
                dir.display()
            ));
            if reboot {
                c.arg("--reboot");
            }
        }
        Consumer::Bootc => {
            c = Command::new(consumer.program());
            c.args(["switch", "--transport", "oci"])
                .arg(format!("{}:{tag}", dir.display()));
            if reboot {
                c.arg("--apply");
            }
        }
    }
    c
}

impl Consumer {
    /// Its program, looked up on `PATH`.
    fn program(self) -> &'static str {
        match self {
            Self::RpmOstree => "rpm-ostree",
            Self::Bootc => "bootc",
        }
    }
}

/// Before anything is fetched: the consumer is there to take the image, an
/// executable file on `PATH`, or the host's setup is wrong (exit 2, naming it).
pub fn check(consumer: Consumer) -> anyhow::Result<()> {
    let program = consumer.program();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let runnable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if std::env::split_paths(&path).any(|d| runnable(&d.join(program))) {
        return Ok(());
    }
    let path = path.to_string_lossy();
    crate::error::fail(
        Kind::Usage,
        format!("rebase: the consumer {program} is not on PATH ({path}); --consumer chooses it"),
    )
}

/// Run the consumer; its own stderr goes to ours. A failure is exit 10 and
/// names the consumer's exit status.
pub fn run(consumer: Consumer, dir: &Path, tag: &str, reboot: bool) -> anyhow::Result<()> {
    let mut c = command(consumer, dir, tag, reboot);
    let program = c.get_program().to_string_lossy().into_owned();
    tracing::info!("handing {}:{tag} to {program}", dir.display());
    let status = c
        .status()
        .map_err(|e| Failure::new(Kind::Handoff, format!("starting {program}: {e}")))?;
    if !status.success() {
        return Err(Failure::new(Kind::Handoff, format!("{program} failed: {status}")).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(c: &Command) -> Vec<String> {
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn command_lines() {
        let d = Path::new("/var/lib/hostpull/images/os");
        assert_eq!(
            argv(&command(Consumer::RpmOstree, d, "v1", true)),
            [
                "rpm-ostree",
                "rebase",
                "ostree-unverified-image:oci:/var/lib/hostpull/images/os:v1",
                "--reboot"
            ]
        );
        assert_eq!(
            argv(&command(Consumer::Bootc, d, "v1", false)),
            [
                "bootc",
                "switch",
                "--transport",
                "oci",
                "/var/lib/hostpull/images/os:v1"
            ]
        );
    }
}
