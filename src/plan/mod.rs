//! Decides everything a pull may use. Pure data: no network, no spawning.

pub mod imgref;

use std::path::PathBuf;

use crate::error::{Kind, fail};
use crate::manifest::Platform;
use crate::sandbox::{SandboxMode, WorkerSpec};
use imgref::{Dest, ImageRef};

/// One pull, fully decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub image: ImageRef,
    pub dest_dir: PathBuf,
    pub tag: String,
    pub platform: Platform,
    pub worker: WorkerSpec,
}

/// What the command line (or later, a pull profile) asks for.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub image: String,
    pub dest: String,
    pub authfile: Option<PathBuf>,
    pub cert_dir: Option<PathBuf>,
    pub tls_verify: bool,
    pub platform: Option<String>,
    pub sandbox: Option<SandboxMode>,
    /// Whether systemd runs this host (`/run/systemd/system` exists).
    pub systemd_booted: bool,
}

pub fn plan(req: &Request) -> anyhow::Result<Plan> {
    let image = ImageRef::parse(&req.image)?;
    let dest = Dest::parse(&req.dest)?;
    let tag = match (dest.tag, &image.tag) {
        (Some(t), _) => t,
        (None, Some(t)) => t.clone(),
        (None, None) => {
            return fail(
                Kind::Usage,
                "the image is pinned by digest: name the tag to write with --dest oci:DIR:TAG",
            );
        }
    };
    let platform = match &req.platform {
        Some(p) => Platform::parse(p)?,
        None => Platform::host(),
    };
    for (what, p) in [("--authfile", &req.authfile), ("--cert-dir", &req.cert_dir)] {
        if let Some(p) = p {
            if !p.exists() {
                return fail(
                    Kind::Usage,
                    format!("{what} {}: no such file or directory", p.display()),
                );
            }
        }
    }
    let mode = match req.sandbox.unwrap_or(SandboxMode::Auto) {
        SandboxMode::Auto => {
            tracing::warn!(
                "the systemd sandbox is not implemented yet: running the worker without isolation (--sandbox none)"
            );
            SandboxMode::None
        }
        m => m,
    };
    let _ = req.systemd_booted;
    Ok(Plan {
        image,
        dest_dir: dest.dir,
        tag,
        platform,
        worker: WorkerSpec {
            mode,
            skopeo: WorkerSpec::skopeo_from_env(),
            authfile: req.authfile.clone(),
            cert_dir: req.cert_dir.clone(),
            tls_verify: req.tls_verify,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(image: &str, dest: &str) -> Request {
        Request {
            image: image.into(),
            dest: dest.into(),
            tls_verify: true,
            sandbox: Some(SandboxMode::None),
            ..Default::default()
        }
    }

    #[test]
    fn tag_defaults_to_image_tag() {
        let cases = [
            ("h.io/a:v1", "oci:/d", Some("v1")),
            ("h.io/a", "oci:/d", Some("latest")),
            ("h.io/a:v1", "oci:/d:other", Some("other")),
            (
                "h.io/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "oci:/d:pinned",
                Some("pinned"),
            ),
            (
                "h.io/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "oci:/d",
                None,
            ),
        ];
        for (image, dest, want) in cases {
            match (plan(&req(image, dest)), want) {
                (Ok(p), Some(t)) => assert_eq!(p.tag, t),
                (Err(e), None) => assert_eq!(crate::error::exit_code(&e), 2),
                (r, _) => panic!("{image} {dest}: {r:?}"),
            }
        }
    }

    #[test]
    fn missing_inputs_are_usage_errors() {
        let mut r = req("h.io/a:v1", "oci:/d");
        r.authfile = Some("/nonexistent/auth.json".into());
        assert_eq!(crate::error::exit_code(&plan(&r).unwrap_err()), 2);
        let mut r = req("h.io/a:v1", "oci:/d");
        r.platform = Some("linux".into());
        assert_eq!(crate::error::exit_code(&plan(&r).unwrap_err()), 2);
    }
}
