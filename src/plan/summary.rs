//! What `hostpull plan` shows of a [`Plan`]: per host, the credential's
//! source and key (never the secret), CAs and TLS; the sandbox, the signature
//! policy, and the root plugins run to make it.

use crate::imgref::{OstreeDest, Target};
use crate::options::SandboxMode;
use crate::plan::space::Reserve;
use crate::plan::worker::Isolation;
use crate::plan::{DestPlan, Plan, Shown};

/// What `hostpull plan` shows: everything the pull may use, per host, with
/// the credential's source and key but never the secret.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// The image as given.
    pub image: String,
    /// The platform an index resolves to.
    pub platform: String,
    /// None in a plan made without `--dest`.
    pub dest: Option<String>,
    /// The tag written; none without `--dest`.
    pub tag: Option<String>,
    /// `auto` only in `hostpull plan` on a host without systemd, where a pull
    /// fails with `sandbox_error` (exit 8).
    pub sandbox: SandboxMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Why a pull would fail with `auto` (exit 8).
    pub sandbox_error: Option<String>,
    /// The worker's MemoryMax=; none with `--sandbox none`, whose worker is
    /// a plain child without a unit, so without limits.
    pub memory_max: Option<String>,
    /// The worker's TasksMax=; none with `--sandbox none`.
    pub tasks_max: Option<u32>,
    /// `--max-rate`, bytes a second; none: no limit.
    pub max_rate: Option<u64>,
    /// Every host the image may come from, mirrors first.
    pub hosts: Vec<HostSummary>,
    /// The worker's name servers.
    pub dns: Vec<String>,
    /// The worker's search domains.
    pub dns_search: Vec<String>,
    /// The worker's extra hosts entries (`NAME:IP`).
    pub add_hosts: Vec<String>,
    /// The signature requirements that apply, with their scope and file.
    pub signature: String,
    /// The signature lookaside from registries.d, if any.
    pub lookaside: Option<String>,
    /// Where a `sigstoreSigned` requirement's signatures are read, if one
    /// applies.
    pub sigstore: Option<String>,
    /// `--dest ostree:`: `dest` is then the repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ostree: Option<OstreeDest>,
    /// With `--dest containers-storage:`, the reference the image is written
    /// under (`@DIGEST` when the name has no tag: the pulled digest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containers_storage: Option<String>,
    /// The root plugins run to make this plan ([`Plan::plugins_run`]).
    pub plugins_run: Vec<String>,
    /// The destination's room, measured now; none without `--dest`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub space: Option<SpaceSummary>,
    /// A metered link defers the pull (exit 12): `--defer-if-metered`
    /// without `allow-metered`.
    pub defer_if_metered: bool,
    /// The worker opens the image as given beside the manifest's request,
    /// and fetches the blobs through it if it names the manifest root
    /// resolved ([`Plan::open_beside`]).
    pub open_beside: bool,
}

/// What `hostpull plan` can say of the destination's room. The bytes the
/// pull writes (the blobs the destination lacks) are known only once the
/// registry's manifest is fetched, which a plan does not do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpaceSummary {
    /// The directory whose filesystem is measured.
    pub path: String,
    /// The bytes a pull as root could write there now, what it keeps free
    /// deducted; none if the filesystem could not be measured.
    pub writable_bytes: Option<u64>,
    /// What an ostree repository keeps free, in bytes (0 for a layout).
    pub kept_free_bytes: Option<u64>,
    /// The repository's rule (`min-free-space-percent 3%`), if any.
    pub kept_free_by: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
/// What one host of the pull gets.
pub struct HostSummary {
    /// `host[:port]`.
    pub host: String,
    /// `primary`; mirrors will be `mirror`.
    pub role: &'static str,
    /// `SOURCE (key KEY)` of the first candidate, or none.
    pub credential: Option<String>,
    /// The other candidates, tried in this order when the registry refuses
    /// the one before.
    pub fallbacks: Vec<String>,
    /// The CA files trusted for it.
    pub cas: Vec<String>,
    /// The client certificate it gets, if any.
    pub client_cert: Option<String>,
    /// False under `--tls-verify=false` or for an `insecure` registries.conf endpoint.
    pub tls_verify: bool,
    /// registries.conf `insecure`: no TLS verification, plain HTTP allowed.
    pub insecure: bool,
    /// The proxy its requests go through (`user:***` for a password), or
    /// none: direct.
    pub proxy: Option<String>,
    /// Why it goes direct although a proxy is set (`NO_PROXY`, loopback);
    /// none when no proxy is set or it goes through one.
    pub direct_because: Option<&'static str>,
}

/// A plan's destination and sandbox as `hostpull plan` shows them: a pull's
/// ([`DestPlan`]), or a dry run's ([`Shown`]).
pub trait Showable {
    /// The destination, if there is one.
    fn planned(&self) -> Option<&DestPlan>;
    /// Whether `--sandbox auto` is left undecided.
    fn undecided(&self) -> bool;
}

impl Showable for DestPlan {
    fn planned(&self) -> Option<&DestPlan> {
        Some(self)
    }
    fn undecided(&self) -> bool {
        false
    }
}

impl Showable for Shown {
    fn planned(&self) -> Option<&DestPlan> {
        self.dest.as_ref()
    }
    fn undecided(&self) -> bool {
        self.undecided
    }
}

impl<D: Showable> Plan<D> {
    /// What `hostpull plan` shows of this plan.
    pub fn summary(&self) -> Summary {
        let w = &self.worker;
        // The limits are a unit's: a worker without one has none.
        let unit = w.isolation != Isolation::None;
        let dest = self.dest.planned();
        let undecided = self.dest.undecided();
        Summary {
            image: self.image.to_string(),
            platform: self.platform.to_string(),
            dest: dest.map(|d| d.target.path().display().to_string()),
            tag: dest.map(|d| d.target.tag().to_owned()),
            sandbox: match undecided {
                true => SandboxMode::Auto,
                false => w.isolation.mode(),
            },
            sandbox_error: undecided.then(|| super::NO_SYSTEMD.into()),
            memory_max: unit.then(|| super::worker::size_text(w.limits.memory_max)),
            tasks_max: unit.then_some(w.limits.tasks_max),
            max_rate: self.max_rate,
            hosts: self.host_summaries(),
            dns: w.dns.servers.iter().map(|s| s.to_string()).collect(),
            dns_search: w.dns.search.clone(),
            add_hosts: w
                .dns
                .hosts
                .iter()
                .map(|(n, ip)| format!("{n}:{ip}"))
                .collect(),
            signature: self.policy.describe(),
            lookaside: self.policy.lookaside.clone(),
            sigstore: self.policy.sigstore_sources(),
            ostree: match dest.map(|d| &d.target) {
                Some(Target::Ostree { dest, .. }) => Some(dest.clone()),
                _ => None,
            },
            containers_storage: match dest.map(|d| &d.target) {
                Some(Target::Storage { dest, .. }) => Some(format!(
                    "{}{}",
                    crate::imgref::cstorage::PREFIX,
                    dest.shown("DIGEST")
                )),
                _ => None,
            },
            plugins_run: self.plugins_run.clone(),
            space: dest.map(|d| &d.space).map(|r| SpaceSummary {
                path: r.path.display().to_string(),
                writable_bytes: r.fs.map(|fs| r.allowed(&fs, true)),
                kept_free_bytes: r.fs.map(|fs| r.reserve.bytes(&fs)),
                kept_free_by: (r.reserve != Reserve::Nothing).then(|| r.reserve.describe()),
            }),
            defer_if_metered: self.defer_if_metered,
            open_beside: self.open_beside,
        }
    }
    /// Each host of the pull, mirrors first, as `hostpull plan` shows it.
    fn host_summaries(&self) -> Vec<HostSummary> {
        let w = &self.worker;
        self.sources
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let host = &r.domain;
                let trust = w.trust.hosts().iter().find(|t| &t.host == host);
                let candidates: Vec<String> = (self.credentials.iter())
                    .filter(|h| &h.host == host)
                    .flat_map(|h| h.candidates())
                    .map(|c| format!("{} (key {})", c.source, c.key))
                    .collect();
                let cas = match w.trust.cert_dir() {
                    Some(d) => vec![format!("{} (--cert-dir, every host)", d.display())],
                    None => trust
                        .map(|t| t.cas.iter().map(|c| c.display().to_string()).collect())
                        .unwrap_or_default(),
                };
                let insecure = self.insecure_hosts.contains(host);
                HostSummary {
                    host: host.clone(),
                    role: if i + 1 == self.sources.len() {
                        "primary"
                    } else {
                        "mirror"
                    },
                    credential: candidates.first().cloned(),
                    fallbacks: candidates.iter().skip(1).cloned().collect(),
                    cas,
                    client_cert: trust
                        .and_then(|t| t.client.as_ref())
                        .map(|(c, _)| c.display().to_string()),
                    tls_verify: w.tls_verify && !insecure,
                    insecure,
                    proxy: w.proxy.for_url("https", host).map(ToString::to_string),
                    direct_because: w.proxy.direct_because("https", host),
                }
            })
            .collect()
    }
}

impl Summary {
    /// The summary for a terminal.
    pub fn text(&self) -> String {
        let (d, t) = (
            self.dest.as_deref().unwrap_or_default(),
            self.tag.as_deref().unwrap_or_default(),
        );
        let dest = match (&self.ostree, &self.dest) {
            _ if self.containers_storage.is_some() => format!(
                "{} (staged in {}, then copied in by root's skopeo)",
                self.containers_storage.as_deref().unwrap_or_default(),
                crate::imgref::cstorage::STAGING_DIR,
            ),
            (Some(o), _) => match &o.ostree_ref {
                Some(r) => format!("ostree:{d}:{r}"),
                None => format!("ostree:{d}"),
            },
            (None, Some(_)) => format!("oci:{d}:{t}"),
            (None, None) => "none (no --dest given)".to_owned(),
        };
        let mut t = format!(
            "image     {} ({})\ndest      {dest}\n",
            self.image, self.platform
        );
        let sandbox = self.sandbox.name();
        t += &match (&self.memory_max, self.tasks_max) {
            (Some(m), Some(n)) => format!("sandbox   {sandbox}, MemoryMax={m}, TasksMax={n}\n"),
            _ => format!(
                "sandbox   {sandbox}: a child of hostpull without a unit, so no MemoryMax=, \
                 TasksMax= or other limit applies\n"
            ),
        };
        if let Some(e) = &self.sandbox_error {
            t += &format!("  a pull fails (exit 8): {e}\n");
        }
        t += &format!(
            "max rate  {}\n",
            match self.max_rate {
                Some(r) => format!("{} (all blobs together)", crate::rate::human(r)),
                None => "no limit".to_owned(),
            }
        );
        t += &self.hosts_text();
        t += &format!("signature {}\n", self.signature);
        if let Some(l) = &self.lookaside {
            t += &format!("  lookaside   {l}\n");
        }
        if let Some(s) = &self.sigstore {
            t += &format!("  sigstore    {s}\n");
        }
        t += &self.space_and_metered();
        if !self.plugins_run.is_empty() {
            t += &format!("plugins   ran {}\n", self.plugins_run.join(", "));
        }
        if !(self.dns.is_empty() && self.dns_search.is_empty() && self.add_hosts.is_empty()) {
            t += &format!(
                "worker DNS  servers [{}] search [{}] hosts [{}]\n",
                self.dns.join(" "),
                self.dns_search.join(" "),
                self.add_hosts.join(" ")
            );
        }
        t
    }

    /// The text's lines for each host.
    fn hosts_text(&self) -> String {
        let mut t = String::new();
        // A worker with no credential at all gets `--no-creds`; one with a
        // credential for another host, an authfile without this one.
        let none = match self.hosts.iter().any(|h| h.credential.is_some()) {
            true => "none (no entry in the worker's authfile)",
            false => "none (--no-creds)",
        };
        for h in &self.hosts {
            t += &format!("host      {} ({})\n", h.host, h.role);
            t += &format!(
                "  credential  {}\n",
                h.credential.as_deref().unwrap_or(none)
            );
            for f in &h.fallbacks {
                t += &format!("  then        {f}\n");
            }
            let cas = if h.cas.is_empty() {
                "the system's".to_owned()
            } else {
                h.cas.join(", ")
            };
            t += &format!(
                "  CAs         {cas}{}\n",
                match (h.insecure, h.tls_verify) {
                    (true, _) =>
                        " (insecure in registries.conf: no TLS verification, HTTP allowed)",
                    (false, true) => "",
                    (false, false) => " (TLS verification off)",
                }
            );
            if let Some(c) = &h.client_cert {
                t += &format!("  client cert {c}\n");
            }
            match (&h.proxy, h.direct_because) {
                (Some(p), _) => t += &format!("  proxy       {p}\n"),
                (None, Some(why)) => t += &format!("  proxy       none, direct ({why})\n"),
                (None, None) => {}
            }
        }
        t
    }

    /// The `space` and `metered` lines.
    fn space_and_metered(&self) -> String {
        let mut t = String::new();
        if let Some(sp) = &self.space {
            let kept = match (&sp.kept_free_by, sp.kept_free_bytes) {
                (Some(by), Some(n)) => format!(", {by} keeps {n} bytes free"),
                (Some(by), None) => format!(", {by}"),
                _ => String::new(),
            };
            let room = sp
                .writable_bytes
                .map_or("unmeasured".to_owned(), |n| format!("{n} bytes"));
            t += &format!(
                "space     {room} writable on the filesystem of {}{kept}; the blobs it lacks are checked against it once the manifest is fetched (exit 11)\n",
                sp.path
            );
        }
        t + if self.defer_if_metered {
            "metered   a metered link (NetworkManager) defers the pull (exit 12)\n"
        } else {
            "metered   not checked (no --defer-if-metered, or allow-metered)\n"
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::options::{Options, SandboxMode};
    use crate::plan::testing::MemHost;
    use crate::plan::{Request, plan};

    /// The text says only what holds: `--no-creds` only where the worker gets
    /// no credential at all (a mirror's credential makes an authfile, without
    /// an entry for the primary), and no unit's limits for `--sandbox none`,
    /// which is spelled as on the command line.
    #[test]
    fn the_text_says_only_what_holds() {
        let h = MemHost::new("/nonexistent-root")
            .file(
                "/policy.json",
                r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
            )
            .file(
                "/r.conf",
                "[[registry]]\nlocation = \"q.io\"\n[[registry.mirror]]\nlocation = \"m.io\"\n",
            )
            .file("/auth.json", r#"{"auths": {"m.io": {"auth": "dTpw"}}}"#);
        let req = |authfiles: &[&str], sandbox| Request {
            options: Options {
                image: Some("q.io/a:v1".into()),
                dest: Some("oci:/d".parse().unwrap()),
                sandbox: Some(sandbox),
                policy: Some("/policy.json".into()),
                registries_conf: Some("/r.conf".into()),
                authfiles: authfiles.iter().map(Into::into).collect(),
                no_default_creds: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = |r: &Request| plan(r, &h).unwrap().summary().text();
        let t = text(&req(&["/auth.json"], SandboxMode::None));
        assert!(
            t.contains("host      m.io (mirror)\n  credential  /auth.json (key m.io)\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "host      q.io (primary)\n  credential  none (no entry in the worker's authfile)\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("sandbox   none: a child of hostpull without a unit, so no MemoryMax="),
            "{t}"
        );
        assert!(!t.contains("None") && !t.contains("512M"), "{t}");
        let t = text(&req(&[], SandboxMode::Systemd));
        assert_eq!(
            t.matches("credential  none (--no-creds)\n").count(),
            2,
            "{t}"
        );
        assert!(
            t.contains("sandbox   systemd, MemoryMax=512M, TasksMax=256\n"),
            "{t}"
        );
    }
}
