//! Hand a verified image to a host-update consumer: `rpm-ostree rebase` or
//! `bootc switch`, from an OCI layout or containers-storage. Only ever after a
//! pull has published it there.

use std::process::Command;

use crate::error::{Failure, Kind};
use crate::plan::host::{Host, on_path};

/// Who takes the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Consumer {
    /// `rpm-ostree rebase` onto the pulled image.
    RpmOstree,
    /// `bootc switch` to the pulled image.
    Bootc,
}

/// The consumer's command line for the image `reference` of containers'
/// `transport`: `oci` (`DIR:TAG`) or `containers-storage`
/// (`[STORE]NAME@DIGEST`, as the machine-config daemon hands it over).
pub fn command(consumer: Consumer, transport: &str, reference: &str, reboot: bool) -> Command {
    let mut c = Command::new(consumer.program());
    match consumer {
        Consumer::RpmOstree => {
            c.arg("rebase")
                .arg(format!("ostree-unverified-image:{transport}:{reference}"));
            if reboot {
                c.arg("--reboot");
            }
        }
        Consumer::Bootc => {
            c.args(["switch", "--transport", transport, reference]);
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
/// executable file on `PATH` as `host` has it, or the host's setup is wrong
/// (exit 2, naming it).
pub fn check(host: &dyn Host, consumer: Consumer) -> anyhow::Result<()> {
    let program = consumer.program();
    if on_path(host, program).is_some() {
        return Ok(());
    }
    let path = host.env("PATH").unwrap_or_default();
    let path = path.to_string_lossy();
    crate::error::fail(
        Kind::Usage,
        format!("rebase: the consumer {program} is not on PATH ({path}); --consumer chooses it"),
    )
}

/// Run the consumer; its own stderr goes to ours. A failure is exit 10 and
/// names the consumer's exit status.
pub fn run(
    consumer: Consumer,
    transport: &str,
    reference: &str,
    reboot: bool,
) -> anyhow::Result<()> {
    let mut c = command(consumer, transport, reference, reboot);
    let program = c.get_program().to_string_lossy().into_owned();
    tracing::info!("handing {transport}:{reference} to {program}");
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

    /// The consumer is looked for on PATH as the host has it.
    #[test]
    fn the_consumer_is_found_on_the_hosts_path() {
        use crate::plan::testing::MemHost;
        let host = |path: &str| {
            MemHost::new("/")
                .file("/usr/bin/rpm-ostree", "")
                .var("PATH", path)
        };
        check(&host("/sbin:/usr/bin"), Consumer::RpmOstree).unwrap();
        for (path, consumer) in [
            ("/sbin", Consumer::RpmOstree),
            ("/usr/bin", Consumer::Bootc),
        ] {
            let e = check(&host(path), consumer).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{path}");
            assert!(format!("{e}").contains(&format!("({path})")), "{e}");
        }
    }

    #[test]
    fn command_lines() {
        let d = "/var/lib/hostpull/images/os:v1";
        assert_eq!(
            argv(&command(Consumer::RpmOstree, "oci", d, true)),
            [
                "rpm-ostree",
                "rebase",
                "ostree-unverified-image:oci:/var/lib/hostpull/images/os:v1",
                "--reboot"
            ]
        );
        assert_eq!(
            argv(&command(Consumer::Bootc, "oci", d, false)),
            [
                "bootc",
                "switch",
                "--transport",
                "oci",
                "/var/lib/hostpull/images/os:v1"
            ]
        );
        // machine-config-operator pkg/daemon/rpm-ostree.go: an image in the
        // node's storage is rebased to by digest.
        let s = format!("quay.io/openshift/os@sha256:{}", "a".repeat(64));
        assert_eq!(
            argv(&command(
                Consumer::RpmOstree,
                "containers-storage",
                &s,
                false
            )),
            [
                "rpm-ostree".to_owned(),
                "rebase".to_owned(),
                format!("ostree-unverified-image:containers-storage:{s}")
            ]
        );
        assert_eq!(
            argv(&command(Consumer::Bootc, "containers-storage", &s, true)),
            [
                "bootc",
                "switch",
                "--transport",
                "containers-storage",
                &s,
                "--apply"
            ]
        );
    }
}
