//! Signature lookasides over HTTP: curl, isolated as skopeo is, because
//! fetching them is network access, which root does not do itself.

use std::path::{Path, PathBuf};

use super::{CA_BUNDLE, Output, Worker, prepare, transient_if_network};
use crate::error::{Failure, Kind, fail};

impl Worker {
    /// GET `url` with curl, isolated as skopeo is (same unit settings, DNS and
    /// per-host CAs): the body, or `None` for a 404. Signature lookasides are
    /// network access, so root does not fetch them itself.
    pub async fn fetch_url(&self, url: &str, limit: u64) -> anyhow::Result<Option<Vec<u8>>> {
        let mut launch = self.launch_program(Path::new("curl"), None)?;
        launch
            .cmd
            .args([
                "--silent",
                "--show-error",
                "--location",
                "--max-redirs",
                "3",
            ])
            .args(["--proto", "=http,https", "--proto-redir", "=http,https"])
            .args(["--connect-timeout", "30", "--max-time", "120"])
            .arg("--max-filesize")
            .arg(limit.to_string())
            .args(["--write-out", "%{stderr}\nHTTP %{http_code}\n"]);
        // The proxy this pull's rules choose for the URL, in a root-only
        // credential (it may hold a password), or none: never curl's own
        // reading of an environment.
        let (scheme, rest) = url.split_once("://").unwrap_or_default();
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let staged = prepare::curl_proxy(scheme);
        match self
            .spec
            .proxy
            .for_url(scheme, authority)
            .and(self.proxy_file_for(&staged, launch.unit.as_deref()))
        {
            Some(conf) => launch.cmd.arg("--config").arg(conf),
            None => launch.cmd.args(["--noproxy", "*"]),
        };
        if let Some(bundle) = self.ca_bundle_for(url, launch.unit.as_deref()) {
            launch.cmd.arg("--cacert").arg(bundle);
        }
        launch.cmd.arg("--").arg(url);
        self.run(launch, limit, |out| curl_result(url, limit, out))
            .await
    }

    /// curl's `--cacert` for an https `url`: the host's bundle, if it has CAs.
    fn ca_bundle_for(&self, url: &str, unit: Option<&str>) -> Option<PathBuf> {
        let host = url.strip_prefix("https://")?.split('/').next()?;
        let t = self.spec.trust.hosts().iter().find(|t| t.host == host)?;
        if t.cas.is_empty() {
            return None;
        }
        let dir = match unit {
            Some(_) => PathBuf::from("/etc/containers/certs.d"),
            None => self.staging.as_ref()?.path().join("certs.d"),
        };
        Some(dir.join(&t.host).join(CA_BUNDLE))
    }
}

/// What curl's run means: the body for 200, `None` for 404, else an error.
/// `--write-out` put `HTTP <code>` last on stderr.
fn curl_result(url: &str, limit: u64, out: Output) -> anyhow::Result<Option<Vec<u8>>> {
    let err = String::from_utf8_lossy(&out.stderr);
    let http = err
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("HTTP "))
        .unwrap_or("000");
    match http {
        "200" if out.success() && out.stdout.len() as u64 <= limit => Ok(Some(out.stdout)),
        "404" => Ok(None),
        "200" => fail(
            Kind::Signature,
            format!("{url}: larger than {} MiB", limit >> 20),
        ),
        _ => {
            let text = err.lines().find(|l| !l.is_empty()).unwrap_or_default();
            let text = if text.starts_with("HTTP ") {
                format!("HTTP status {http}")
            } else {
                text.to_owned()
            };
            let kind = curl_kind(out.code);
            Err(Failure::new(kind, format!("fetching signature {url}"))
                .with_detail(text)
                .with_retry(transient_if_network(kind))
                .into())
        }
    }
}

/// What a failed curl means, by its exit code (curl(1), "EXIT CODES"): the
/// TLS ones are trust errors, everything else (an HTTP status, a refused or
/// timed-out connection, a name that does not resolve) a network error.
fn curl_kind(code: Option<i32>) -> Kind {
    match code {
        Some(35 | 51 | 53 | 54 | 58 | 59 | 60 | 64 | 66 | 77 | 80 | 82 | 83 | 90 | 91) => Kind::Tls,
        _ => Kind::Network,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Retry;

    #[test]
    fn curl_results() {
        let u = "http://l/s";
        let body = || b"sig".to_vec();
        let out = |code, stdout: Vec<u8>, stderr: &str| Output {
            code,
            stdout,
            stderr: stderr.into(),
        };
        assert_eq!(
            curl_result(u, 9, out(Some(0), body(), "\nHTTP 200\n")).unwrap(),
            Some(body())
        );
        assert_eq!(
            curl_result(u, 9, out(Some(0), vec![], "\nHTTP 404\n")).unwrap(),
            None
        );
        for (code, stdout, err, want) in [
            (Some(0), body(), "\nHTTP 500\n", 6),
            (
                Some(7),
                vec![],
                "curl: (7) Failed to connect to l port 80\nHTTP 000\n",
                6,
            ),
            (
                Some(60),
                vec![],
                "curl: (60) SSL certificate problem: unable to get local issuer certificate\nHTTP 000\n",
                5,
            ),
            // The exit code decides, not what the text says.
            (Some(60), vec![], "curl: (7) spoofed\nHTTP 000\n", 5),
            (Some(7), vec![], "curl: (60) spoofed\nHTTP 000\n", 6),
            (None, vec![], "\nHTTP 000\n", 6),
            (Some(0), vec![], "\nHTTP 401\n", 6),
            (None, b"0123456789".to_vec(), "\nHTTP 200\n", 9),
        ] {
            let e = curl_result(u, 9, out(code, stdout, err)).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), want, "{err}: {e:#}");
            let retry = crate::error::failure(&e).unwrap().retry;
            assert_eq!(retry == Retry::Transient, want == 6, "{err}");
            assert!(e.to_string().contains(u), "{e}");
        }
    }
}
