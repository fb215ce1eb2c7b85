//! Decides everything a pull may use. Pure data: no network, and no effect
//! but through the [`Host`] it is given ([`plan`]): files, environment, clock,
//! root plugins and their cache.
//!
//! `hostpull plan` plans as a pull would, so it runs what a pull runs to find
//! its credentials: the credential helpers an authfile names for the image's
//! registries (`credHelpers`) and the credential provider plugins whose
//! `matchImages` cover the image (an answer still fresh in the provider cache
//! runs none). It runs nothing else, and nothing unannounced: the plan names
//! every plugin it ran ([`Plan::plugins_run`]), and `hostpull plan` shows them
//! (`plugins   ran …` in its text, `plugins_run` in its JSON). To plan without
//! running any, leave out the options that name them (`--no-default-creds`,
//! no `--credential-provider-config`, an authfile without `credHelpers`).

pub mod auth;
mod dest;
pub mod dns;
pub mod host;
pub mod nesting;
pub mod policy;
pub mod provider;
pub mod proxy;
pub mod registries;
pub mod space;
mod summary;
#[cfg(test)]
pub mod testing;
pub mod trust;
pub mod worker;

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Failure, Kind, fail, quoted};
use crate::imgref::{ImageRef, Target};
use crate::manifest::Platform;
use crate::options::{Options, SandboxMode};
use host::Host;
pub use summary::{HostSummary, Showable, Summary};
use worker::{Isolation, Limits, WorkerSpec};

/// Why `--sandbox auto` fails where systemd does not run the host.
pub const NO_SYSTEMD: &str = "systemd is not running on this host, so the worker cannot be sandboxed; \
     pass --sandbox none to run it without isolation";

/// The worker's domain in selinux/hostpull.te.
pub const WORKER_SELINUX_CONTEXT: &str = "system_u:system_r:hostpull_worker_t:s0";

/// One pull, fully decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<D = DestPlan> {
    /// The image, as given (before any registries.conf rewrite).
    pub image: ImageRef,
    /// Where the pull goes: a pull's [`DestPlan`], a dry run's [`Shown`].
    pub dest: D,
    /// The platform an index resolves to.
    pub platform: Platform,
    /// The worker, the same for every try; each try's credentials are
    /// `auth::attempt(&credentials, n)`.
    pub worker: WorkerSpec,
    /// Per host, every matching credential in the order tried: a try refused
    /// by the registry moves on to `auth::attempt(&credentials, n + 1)`.
    pub credentials: Vec<auth::HostCredentials>,
    /// How long the pull may take.
    pub retry: RetryPolicy,
    /// `--max-rate`: the most bytes a second the whole pull reads.
    pub max_rate: Option<u64>,
    /// Where the image may come from, in the order tried: the eligible
    /// mirrors, then the primary (after any `location` rewrite).
    pub sources: Vec<ImageRef>,
    /// The hosts of `sources` that registries.conf marks `insecure`: the
    /// worker's skopeo skips TLS verification for them and may use plain HTTP.
    pub insecure_hosts: Vec<String>,
    /// The signature requirements for this image, and where its signatures are.
    pub policy: policy::Applied,
    /// The root plugins (credential helpers, credential provider plugins)
    /// run to make this plan, by label, in order; an answer from the cache
    /// runs none. `hostpull plan` shows them.
    pub plugins_run: Vec<String>,
    /// `--defer-if-metered` without `allow-metered`: a metered connection
    /// (NetworkManager) defers the pull (exit 12) before the worker starts.
    pub defer_if_metered: bool,
    /// The proxy opens the image as given beside the manifest's `inspect`,
    /// for the blobs: always for a digest; for a tag, when registries.conf
    /// gives the tag the sources of a digest ([`registries::Route::tag_as_digest`]).
    pub open_beside: bool,
}

/// What `hostpull plan` shows: what a pull with the same options would use,
/// never pulled ([`dry_run`]). Unlike a pull's [`Plan`], it may lack its
/// destination and its sandbox.
pub type DryRun = Plan<Shown>;

/// A dry run's destination and sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// Where the pull would go; none when none was given (what a pull would
    /// use does not depend on where it goes).
    pub dest: Option<DestPlan>,
    /// `--sandbox auto` on a host without systemd: the worker shown is the
    /// one a systemd host would get, and a pull here fails
    /// ([`NO_SYSTEMD`], exit 8).
    pub undecided: bool,
}

/// Where a pull goes, and what it must leave free there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestPlan {
    /// The layout or the repository, and the tag or ref.
    pub target: Target,
    /// What the destination's filesystem must hold: checked against what
    /// the pull lacks once the manifest says it.
    pub space: space::Rule,
}

/// How long a pull may take, and how long it may go without a byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The whole pull, retries included (`--timeout`).
    pub timeout: Duration,
    /// No byte for this long stops the worker (`--stall-timeout`).
    pub stall: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3600),
            stall: Duration::from_secs(60),
        }
    }
}

/// What a pull is asked for ([`Options`], merged from the command line, a
/// profile and the drop-ins), and how the verb asks it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// What the pull is asked for.
    pub options: Options,
    /// `hostpull rebase`: an `oci:` directory is made absolute (below
    /// [`Host::current_dir`]), as the consumer it is handed to runs elsewhere.
    pub absolute_dest: bool,
    /// How many of `options.cas`, the first, the drop-ins' `[cluster]` table
    /// gave: CAs for the cluster's hosts, which most pulls do not use. A CA
    /// given for this pull (`--ca`, a profile's `ca`) whose host it does not
    /// use is warned about.
    pub cluster_cas: usize,
}

/// The environment variable naming one more authfile, read after the
/// `--authfile` ones, as containers/image reads it.
pub const REGISTRY_AUTH_FILE: &str = "REGISTRY_AUTH_FILE";

/// Decide everything the pull `req` asks for may use, on `host`. Plugins it
/// runs (credential helpers, provider plugins) are named in
/// [`Plan::plugins_run`].
pub fn plan(req: &Request, host: &dyn Host) -> anyhow::Result<Plan> {
    recorded(req, host, false)?.map_dest(|shown| match shown {
        Shown {
            dest: Some(dest),
            undecided: false,
        } => Ok(dest),
        // decide() refuses both for a pull, where each is found.
        _ => fail(
            Kind::Internal,
            "a pull's plan without its destination or sandbox",
        ),
    })
}

/// What a pull with `req` would use, on `host`, for `hostpull plan`: the
/// destination may be missing, and `--sandbox auto` on a host without
/// systemd stays undecided ([`Shown`]).
pub fn dry_run(req: &Request, host: &dyn Host) -> anyhow::Result<DryRun> {
    recorded(req, host, true)
}

fn recorded(req: &Request, host: &dyn Host, dry_run: bool) -> anyhow::Result<DryRun> {
    let recording = host::Recording::new(host);
    let mut plan = decide(req, &recording, dry_run)?;
    plan.plugins_run = recording.into_ran();
    Ok(plan)
}

impl<D> Plan<D> {
    /// The same plan with `f` of its destination in its place.
    fn map_dest<E>(self, f: impl FnOnce(D) -> anyhow::Result<E>) -> anyhow::Result<Plan<E>> {
        Ok(Plan {
            image: self.image,
            dest: f(self.dest)?,
            platform: self.platform,
            worker: self.worker,
            credentials: self.credentials,
            retry: self.retry,
            max_rate: self.max_rate,
            sources: self.sources,
            insecure_hosts: self.insecure_hosts,
            policy: self.policy,
            plugins_run: self.plugins_run,
            defer_if_metered: self.defer_if_metered,
            open_beside: self.open_beside,
        })
    }
}

/// What the worker is given besides the request: decided by [`decide`].
struct WorkerParts {
    mode: Isolation,
    limits: Limits,
    trust: trust::Trust,
    dns: dns::Dns,
    route: registries::Route,
    proxy: proxy::Proxy,
}

fn decide(req: &Request, host: &dyn Host, dry_run: bool) -> anyhow::Result<DryRun> {
    let mut req = req.clone();
    req.options
        .authfiles
        .extend(host.env(REGISTRY_AUTH_FILE).map(PathBuf::from));
    let req = &req;
    let (image, dest) = dest::destination(req, host, dry_run)?;
    let platform = match &req.options.platform {
        Some(p) => Platform::parse(p)?,
        None => Platform::host(),
    };
    check_inputs(req, host)?;
    let decided = isolation(req, host, dry_run)?;
    // Undecided, the worker a systemd host would get is shown.
    let mode = decided.unwrap_or(Isolation::Systemd);
    let limits = limits(req)?;
    let conf = registries::load(host, req.options.registries_conf.as_deref())?;
    registries::check_short_name(&conf.short_names, &image)?;
    let route = registries::route(&conf.tables, &image)?;
    let sources = route.hosts();
    let open_beside = image.digest.is_some() || route.tag_as_digest();
    let insecure_hosts: Vec<String> = route
        .sources
        .iter()
        .filter(|s| s.insecure)
        .map(|s| s.reference.domain.clone())
        .collect();
    // Each host gets its candidates, in order.
    let mut credentials: Vec<auth::HostCredentials> = Vec::new();
    for r in &sources {
        if !credentials.iter().any(|c| c.host == r.domain) {
            let candidates = credentials_for(req, host, r)?;
            credentials.extend(auth::HostCredentials::new(&r.domain, candidates));
        }
    }
    let (policy, trust) = policy_and_trust(req, host, &image, &sources)?;
    let hosts: Vec<String> = trust_hosts(&sources, &policy);
    let dns = worker_dns(req, decided, &hosts)?;
    let parts = WorkerParts {
        mode,
        limits,
        trust,
        dns,
        route,
        proxy: proxy::decide(&req.options, host)?,
    };
    if let Some(mode) = decided {
        worker::check_proxy(&parts.proxy, mode)?;
    }
    let dest = match dest {
        Some(target) => Some(DestPlan {
            space: space::rule(host, &target)?,
            target,
        }),
        None => None,
    };
    Ok(Plan {
        image,
        dest: Shown {
            dest,
            undecided: decided.is_none(),
        },
        platform,
        worker: worker(req, host, parts)?,
        retry: retry(req)?,
        credentials,
        max_rate: max_rate(req)?,
        sources,
        insecure_hosts,
        policy,
        plugins_run: Vec::new(),
        defer_if_metered: req.options.defer_if_metered && !req.options.allow_metered,
        open_beside,
    })
}

/// The worker for the first try.
fn worker(req: &Request, host: &dyn Host, parts: WorkerParts) -> anyhow::Result<WorkerSpec> {
    let WorkerParts {
        mode,
        limits,
        trust,
        dns,
        route,
        proxy,
    } = parts;
    Ok(WorkerSpec {
        isolation: mode,
        skopeo: worker::skopeo(req.options.skopeo.as_deref(), host),
        version_cache: worker::version_cache(host),
        system_bus: host.env("DBUS_SYSTEM_BUS_ADDRESS"),
        tls_verify: req.options.tls_verify.unwrap_or(true),
        limits,
        trust,
        dns,
        registries_conf: registries::worker_conf(&route)?,
        proxy,
        sources: route.hosts().into_iter().map(|r| r.domain).collect(),
        selinux_context: host.selinux_enabled().then(|| {
            req.options
                .selinux_context
                .clone()
                .unwrap_or_else(|| WORKER_SELINUX_CONTEXT.to_owned())
        }),
    })
}

/// Every file and directory the request names exists.
fn check_inputs(req: &Request, host: &dyn Host) -> anyhow::Result<()> {
    let files = req.options.authfiles.iter().map(|f| ("--authfile", f));
    let files = files.chain(
        req.options
            .pull_secrets
            .iter()
            .map(|f| ("--pull-secret", f)),
    );
    for (what, p) in files.chain(req.options.cert_dir.iter().map(|d| ("--cert-dir", d))) {
        if !host.present(p) {
            return fail(
                Kind::Usage,
                format!("{what} {}: no such file or directory", p.display()),
            );
        }
    }
    Ok(())
}

/// `--sandbox`, with `auto` decided for this host; in a dry run on a host
/// without systemd, undecided (none).
fn isolation(req: &Request, host: &dyn Host, dry_run: bool) -> anyhow::Result<Option<Isolation>> {
    Ok(Some(
        match req.options.sandbox.unwrap_or(SandboxMode::Auto) {
            SandboxMode::Auto if host.systemd_booted() => Isolation::Systemd,
            SandboxMode::Auto if dry_run => return Ok(None),
            SandboxMode::Auto => return fail(Kind::Worker, NO_SYSTEMD),
            SandboxMode::Systemd => Isolation::Systemd,
            SandboxMode::None => Isolation::None,
        },
    ))
}

/// The signature policy, and the trust of every host the pull may contact.
fn policy_and_trust(
    req: &Request,
    host: &dyn Host,
    image: &ImageRef,
    sources: &[ImageRef],
) -> anyhow::Result<(policy::Applied, trust::Trust)> {
    let cas = req
        .options
        .cas
        .iter()
        .map(|c| trust::parse_ca(host, c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if req.options.cert_dir.is_some() && !cas.is_empty() {
        return fail(
            Kind::Usage,
            "--cert-dir trusts its CAs for every host; it cannot go with --ca",
        );
    }
    let policy = signature_policy(req, host, image)?;
    let hosts = trust_hosts(sources, &policy);
    for (h, file) in cas.iter().skip(req.cluster_cas) {
        if !hosts.contains(h) {
            let file = file.display();
            let uses = hosts.join(", ");
            tracing::warn!("--ca {h}={file}: this pull does not use {h}, only {uses}");
        }
    }
    if let Some(dir) = &req.options.cert_dir {
        return Ok((policy, trust::Trust::CertDir(dir.clone())));
    }
    let mut trust = trust::resolve(host, &hosts, &cas)?;
    for t in &mut trust {
        t.lookaside_only = !sources.iter().any(|r| r.domain == t.host);
    }
    Ok((policy, trust::Trust::PerHost(trust)))
}

/// The hosts this pull may contact: the mirrors, the primary, and an https
/// signature lookaside.
fn trust_hosts(sources: &[ImageRef], policy: &policy::Applied) -> Vec<String> {
    let lookaside_host = policy
        .lookaside
        .as_deref()
        .and_then(|u| u.strip_prefix("https://"))
        .and_then(|u| u.split('/').next());
    let mut hosts: Vec<String> = Vec::new();
    for h in sources
        .iter()
        .map(|r| r.domain.as_str())
        .chain(lookaside_host)
    {
        if !hosts.iter().any(|x| x == h) {
            hosts.push(h.to_owned());
        }
    }
    hosts
}

/// The worker's resolver settings, which only a unit can have, and none that
/// sends a host of this pull where the unit may not go.
fn worker_dns(
    req: &Request,
    mode: Option<Isolation>,
    hosts: &[String],
) -> anyhow::Result<dns::Dns> {
    let dns = dns::Dns::parse(
        &req.options.dns,
        &req.options.dns_search,
        &req.options.add_hosts,
    )?;
    if mode == Some(Isolation::None) && !dns.is_empty() {
        return fail(
            Kind::Usage,
            "--dns, --dns-search and --add-host need --sandbox systemd: without it the worker shares the host's resolver",
        );
    }
    // The unit denies link-local and cloud metadata addresses (worker::IP_DENY):
    // a registry there would fail only once its unit ran, and obscurely.
    if mode == Some(Isolation::Systemd)
        && let Some((host, ip)) = dns
            .known_addresses(hosts)
            .into_iter()
            .find(|(_, ip)| worker::ip_denied(*ip))
    {
        return fail(
            Kind::Usage,
            format!(
                "{host} is at {ip}, a link-local or cloud metadata address, which the worker unit may not reach (IPAddressDeny=)"
            ),
        );
    }
    Ok(dns)
}

/// The policy's requirements for `image`, and its lookaside. A missing policy
/// file is an error, as in containers/image: no policy is not "accept anything".
fn signature_policy(
    req: &Request,
    host: &dyn Host,
    image: &ImageRef,
) -> anyhow::Result<policy::Applied> {
    let file = req
        .options
        .policy
        .clone()
        .unwrap_or_else(|| host.root().join(policy::POLICY));
    let text = host.read_text(&file).map_err(|e| {
        Failure::new(
            Kind::Usage,
            format!(
                "reading signature policy {}: {e}{}",
                file.display(),
                if req.options.policy.is_none() {
                    " (install containers-common's policy.json or pass --policy FILE)"
                } else {
                    ""
                }
            ),
        )
    })?;
    let mut applied = policy::apply(host, &file, &text, image)?;
    let dir = req
        .options
        .registries_d
        .clone()
        .unwrap_or_else(|| host.root().join(policy::REGISTRIES_D));
    policy::lookaside(host, &mut applied, &dir, image)?;
    if req.options.require_signature && applied.accepts_anything() {
        return fail(
            Kind::Signature,
            format!(
                "--require-signature: the signature policy accepts {image} unsigned: {}",
                applied.describe()
            ),
        );
    }
    Ok(applied)
}

/// Every credential for the image's registry, in the order tried: explicit
/// sources first, in the order given (pull secrets as one keyring); then
/// credential provider plugins (their answers as one keyring); then, if
/// neither was given, the host's default files.
fn credentials_for(
    req: &Request,
    host: &dyn Host,
    image: &ImageRef,
) -> anyhow::Result<Vec<auth::Chosen>> {
    use auth::{Matching, Source};
    let user = req
        .options
        .token_user
        .as_deref()
        .unwrap_or("serviceaccount");
    let mut sources: Vec<(Source, Matching)> = Vec::new();
    sources.extend(
        req.options
            .authfiles
            .iter()
            .map(|f| (Source::Authfile(f.clone()), Matching::Containers)),
    );
    sources.extend(
        req.options
            .pull_secrets
            .iter()
            .map(|f| (Source::PullSecret(f.clone()), Matching::Kubelet)),
    );
    for t in &req.options.tokens {
        sources.push((auth::parse_token(t, user)?, Matching::Containers));
    }
    let mut found = auth::resolve(host, &sources, image)?;
    if let Some(config) = &req.options.provider_config {
        let Some(bin_dir) = &req.options.provider_bin_dir else {
            return fail(
                Kind::Usage,
                "--credential-provider-config needs --credential-provider-bin-dir",
            );
        };
        let config = provider::load_config(host, config)?;
        for c in provider::credentials(host, &config, bin_dir, image)? {
            if !found.iter().any(|f| f.auth == c.auth) {
                found.push(c);
            }
        }
    }
    if !sources.is_empty() || req.options.provider_config.is_some() || req.options.no_default_creds
    {
        return Ok(found);
    }
    let defaults: Vec<(Source, Matching)> = auth::DEFAULT_SOURCES
        .iter()
        .map(|(path, matching)| (host.root().join(path), *matching))
        .filter(|(path, _)| host.regular_file(path))
        .filter(|(path, matching)| match matching {
            Matching::Containers => true,
            // kubelet logs a node config.json it cannot read and goes on
            // without it; the errors name keys, never values.
            Matching::Kubelet => auth::read_kubelet(host, path)
                .inspect_err(|e| tracing::warn!("skipped: {e} (as kubelet skips it)"))
                .is_ok(),
        })
        .map(|(path, matching)| match matching {
            Matching::Containers => (Source::Authfile(path), matching),
            Matching::Kubelet => (Source::PullSecret(path), matching),
        })
        .collect();
    auth::resolve(host, &defaults, image)
}

fn retry(req: &Request) -> anyhow::Result<RetryPolicy> {
    let mut r = RetryPolicy::default();
    for (flag, value, field) in [
        ("--timeout", req.options.timeout, &mut r.timeout),
        ("--stall-timeout", req.options.stall_timeout, &mut r.stall),
    ] {
        match value {
            Some(0) => return fail(Kind::Usage, format!("{flag} must be at least 1 second")),
            Some(secs) => *field = Duration::from_secs(secs),
            None => {}
        }
    }
    Ok(r)
}

/// `--max-rate` in bytes a second, written as `--memory-max` is.
fn max_rate(req: &Request) -> anyhow::Result<Option<u64>> {
    let Some(r) = &req.options.max_rate else {
        return Ok(None);
    };
    match worker::parse_size(r) {
        Some(n) if n >= crate::rate::MIN_RATE => Ok(Some(n)),
        _ => fail(
            Kind::Usage,
            format!(
                "invalid --max-rate: expected bytes a second, at least 1K, \
                 with an optional K, M, G or T: {}",
                quoted(r)
            ),
        ),
    }
}

/// The worker's cgroup limits: the defaults, with what the request sets.
fn limits(req: &Request) -> anyhow::Result<Limits> {
    let mut l = Limits::default();
    if let Some(m) = &req.options.memory_max {
        l.memory_max = worker::parse_size(m).ok_or_else(|| {
            Failure::new(
                Kind::Usage,
                format!(
                    "invalid --memory-max: expected bytes with an optional K, M, G or T: {}",
                    quoted(m)
                ),
            )
        })?;
    }
    if let Some(q) = &req.options.cpu_quota {
        let percent = worker::parse_cpu_quota(q).ok_or_else(|| {
            Failure::new(
                Kind::Usage,
                format!(
                    "invalid --cpu-quota: expected a percentage such as 50%: {}",
                    quoted(q)
                ),
            )
        })?;
        l.cpu_quota = Some(percent);
    }
    if let Some(t) = req.options.tasks_max {
        if t == 0 {
            return fail(Kind::Usage, "--tasks-max must be at least 1");
        }
        l.tasks_max = t;
    }
    if let Some(w) = req.options.io_weight {
        if !(1..=10000).contains(&w) {
            return fail(
                Kind::Usage,
                format!("invalid --io-weight {w}: expected 1 to 10000"),
            );
        }
        l.io_weight = w;
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imgref::OstreeDest;
    use testing::MemHost;

    /// A CA certificate, for the trust files the planner reads.
    const PEM: &str = include_str!("../signature/testdata/fulcio_v1.crt.pem");

    const ACCEPT_ANYTHING: &str = r#"{"default":[{"type":"insecureAcceptAnything"}]}"#;

    /// A machine with nothing below its root and a policy that accepts
    /// anything at `/policy.json`.
    fn host() -> MemHost {
        MemHost::new("/nonexistent-root").file("/policy.json", ACCEPT_ANYTHING)
    }

    /// A request for `image` into `dest`; `""` is none given.
    fn req(image: &str, dest: &str) -> Request {
        Request {
            options: Options {
                image: Some(image.into()),
                dest: (!dest.is_empty()).then(|| crate::imgref::Dest::parse(dest).unwrap()),
                sandbox: Some(SandboxMode::None),
                policy: Some("/policy.json".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The plan on [`host`].
    fn plan(r: &Request) -> anyhow::Result<Plan> {
        super::plan(r, &host())
    }

    fn dry_run(r: &Request) -> anyhow::Result<DryRun> {
        super::dry_run(r, &host())
    }

    #[test]
    fn signature_policy_rules() {
        let mut r = req("q.io/a:v1", "oci:/d");
        assert!(plan(&r).unwrap().policy.accepts_anything());
        r.options.require_signature = true;
        let e = plan(&r).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 9, "{e}");
        assert!(e.to_string().contains("accepts q.io/a:v1 unsigned"), "{e}");
        r.options.require_signature = false;
        r.options.policy = None;
        let e = plan(&r).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e}");
        assert!(
            e.to_string()
                .contains("/nonexistent-root/etc/containers/policy.json"),
            "{e}"
        );
    }

    #[test]
    fn trust_and_dns_rules() {
        let h = host().file("/td/ca.crt", PEM);
        let mut r = req("reg.svc:5000/a:v1", "oci:/d");
        r.options.cas = vec![
            "reg.svc:5000=/td/ca.crt".to_owned(),
            "other:1=/td/ca.crt".to_owned(),
        ];
        let p = super::plan(&r, &h).unwrap();
        assert_eq!(
            p.worker.trust.hosts().len(),
            1,
            "only the hosts of this pull"
        );
        assert_eq!(p.worker.trust.hosts()[0].host, "reg.svc:5000");
        r.options.cert_dir = Some("/td".into());
        assert_eq!(
            crate::error::exit_code(&super::plan(&r, &h).unwrap_err()),
            2,
            "--cert-dir with --ca"
        );
        let mut r = req("reg.svc:5000/a:v1", "oci:/d");
        r.options.add_hosts = vec!["reg.svc:127.0.0.1".into()];
        assert_eq!(
            crate::error::exit_code(&plan(&r).unwrap_err()),
            2,
            "DNS needs systemd"
        );
        r.options.sandbox = Some(SandboxMode::Systemd);
        assert_eq!(plan(&r).unwrap().worker.dns.hosts.len(), 1);
    }

    /// A registry, mirror or lookaside at an address the worker unit denies
    /// (link-local, cloud metadata) is refused before anything starts, with
    /// `--sandbox systemd`; without a unit nothing is denied.
    #[test]
    fn denied_addresses_are_refused_at_plan_time() {
        let h = host().file(
            "/registries.conf",
            "[[registry]]\nlocation = \"reg.svc:5000\"\n\
             [[registry.mirror]]\nlocation = \"mirror.svc\"\n",
        );
        // (image, --add-host, refused naming)
        let cases = [
            (
                "169.254.169.254/a:v1",
                None,
                Some("169.254.169.254 is at 169.254.169.254"),
            ),
            // An IPv6 registry is named through --add-host (imgref::IPV6_HOST).
            (
                "reg.svc:5000/a:v1",
                Some("reg.svc:fe80::1"),
                Some("reg.svc:5000 is at fe80::1"),
            ),
            (
                "reg.svc:5000/a:v1",
                Some("reg.svc:[fd00:ec2::254]"),
                Some("is at fd00:ec2::254"),
            ),
            (
                "reg.svc:5000/a:v1",
                Some("mirror.svc:169.254.1.1"),
                Some("mirror.svc is at 169.254.1.1"),
            ),
            (
                "reg.svc:5000/a:v1",
                Some("reg.svc:::ffff:169.254.1.1"),
                Some("reg.svc:5000 is at ::ffff:169.254.1.1"),
            ),
            ("reg.svc:5000/a:v1", Some("reg.svc:10.0.0.1"), None),
            ("169.254.169.253.nip.io/a:v1", None, None),
            ("127.0.0.2:5000/a:v1", None, None),
        ];
        for (image, add_host, refused) in cases {
            let mut r = req(image, "oci:/d");
            r.options.sandbox = Some(SandboxMode::Systemd);
            r.options.registries_conf = Some("/registries.conf".into());
            r.options.add_hosts = add_host.into_iter().map(Into::into).collect();
            match (super::plan(&r, &h), refused) {
                (Ok(_), None) => {}
                (Err(e), Some(naming)) => {
                    assert_eq!(crate::error::exit_code(&e), 2, "{e}");
                    assert!(e.to_string().contains(naming), "{image}: {e}");
                }
                (r, _) => panic!("{image} {add_host:?}: {:?}", r.map(|_| ())),
            }
            // Without a unit, nothing denies them.
            if add_host.is_none() {
                r.options.sandbox = Some(SandboxMode::None);
                super::plan(&r, &h).unwrap();
            }
        }
    }

    /// Issue 14: `hostpull plan IMAGE` works without `--dest`; a pull does not.
    #[test]
    fn plan_without_a_destination() {
        let pinned =
            "h.io/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for image in ["h.io/a:v1", pinned] {
            let r = req(image, "");
            assert_eq!(crate::error::exit_code(&plan(&r).unwrap_err()), 2);
            let s = dry_run(&r).unwrap().summary();
            assert_eq!((s.dest.as_deref(), s.tag.as_deref()), (None, None));
            assert!(
                s.text().contains("dest      none (no --dest given)"),
                "{}",
                s.text()
            );
            assert_eq!(s.hosts.len(), 1);
        }
        let r = req("h.io/a:v1", "oci:/d");
        let s = dry_run(&r).unwrap().summary();
        assert_eq!(
            (s.dest.as_deref(), s.tag.as_deref()),
            (Some("/d"), Some("v1"))
        );
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
                (Ok(p), Some(t)) => assert_eq!(p.dest.target.tag(), t),
                (Err(e), None) => assert_eq!(crate::error::exit_code(&e), 2),
                (r, _) => panic!("{image} {dest}: {r:?}"),
            }
        }
    }

    /// `hostpull rebase` hands the layout to a consumer that runs elsewhere:
    /// the planner makes its directory absolute, as `std::path::absolute`.
    #[test]
    fn rebase_layout_is_absolute() {
        let cases = [
            ("oci:rel/./d:t", false, "rel/./d"),
            ("oci:rel/./d:t", true, "/nonexistent-root/rel/d"),
            ("oci:/a/./b/:t", true, "/a/b"),
            ("oci:/a/../b:t", true, "/a/../b"),
        ];
        for (dest, absolute, want) in cases {
            let mut r = req("h.io/a:v1", dest);
            r.absolute_dest = absolute;
            let want = Target::Oci {
                dir: want.into(),
                tag: "t".into(),
            };
            assert_eq!(plan(&r).unwrap().dest.target, want, "{dest}");
        }
    }

    /// Issue 24: the plan carries the destination's space rule with its
    /// filesystem as the host measures it (an ostree repository's
    /// `min-free-space-*` read from its config), and whether a metered link
    /// defers the pull; `hostpull plan` shows both.
    #[test]
    fn space_rule_and_metered_link_are_planned() {
        let fs = host::Fs {
            bsize: 4096,
            frsize: 4096,
            blocks: 1000,
            bfree: 600,
            bavail: 550,
        };
        let mut h = host()
            .file(
                "/repo/config",
                "[core]\nmode=bare\nmin-free-space-percent=10\n",
            )
            .dir("/var/lib/l");
        h.fs = Some(fs);
        let p = super::plan(&req("h.io/a:1", "oci:/var/lib/l/new"), &h).unwrap();
        let rule = space::Rule {
            path: "/var/lib/l/new".into(),
            reserve: space::Reserve::Nothing,
            ostree: false,
            fs: Some(fs),
        };
        assert_eq!(&p.dest.space, &rule);
        let text = p.summary().text();
        assert!(
            text.contains("space     2252800 bytes writable on the filesystem of /var/lib/l/new; the blobs it lacks are checked against it once the manifest is fetched (exit 11)\n"),
            "{text}"
        );
        assert!(text.contains("metered   not checked"), "{text}");
        let dry = req("h.io/a:1", "");
        assert_eq!(super::dry_run(&dry, &h).unwrap().dest.dest, None);
        if cfg!(feature = "ostree") {
            let p = super::plan(&req("h.io/a:1", "ostree:/repo"), &h).unwrap();
            let s = p.dest.space.clone();
            assert_eq!((s.reserve, s.ostree), (space::Reserve::Percent(10), true));
            let text = p.summary().text();
            // 10% of 1000 blocks kept: 500 of the 600 free as root.
            assert!(
                text.contains("space     2048000 bytes writable on the filesystem of /repo, min-free-space-percent 10% keeps 409600 bytes free;"),
                "{text}"
            );
            let h = host().file("/repo/config", "[core]\nmin-free-space-size=5\n");
            let e = super::plan(&req("h.io/a:1", "ostree:/repo"), &h).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(
                e.to_string()
                    .starts_with("/repo/config: Invalid min-free-space-size '5': "),
                "{e}"
            );
        }
        for (defer, allow, want) in [
            (false, false, false),
            (true, false, true),
            (true, true, false),
            (false, true, false),
        ] {
            let mut r = req("h.io/a:1", "oci:/var/lib/l/new");
            r.options.defer_if_metered = defer;
            r.options.allow_metered = allow;
            let p = super::plan(&r, &h).unwrap();
            assert_eq!(p.defer_if_metered, want, "{defer} {allow}");
            let text = p.summary().text();
            assert_eq!(text.contains("metered   a metered link"), want, "{text}");
        }
    }

    #[test]
    fn ostree_destinations() {
        let d = OstreeDest {
            repo: "/repo".into(),
            ostree_ref: None,
        };
        let e = super::dest::check_ostree(&host(), &d, false).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            e.to_string().contains("built without ostree support"),
            "{e}"
        );
        let e = super::dest::check_ostree(&host(), &d, true).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("not an ostree repository"), "{e}");
        let e = super::dest::check_ostree(&host().dir("/repo/config"), &d, true).unwrap_err();
        assert!(e.to_string().contains("not an ostree repository"), "{e}");
        let h = host().file("/repo/config", "[core]\n");
        super::dest::check_ostree(&h, &d, true).unwrap();
        let pinned =
            "h.io/a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        match super::plan(&req(pinned, "ostree:/repo:os/stable"), &h) {
            Ok(p) if cfg!(feature = "ostree") => {
                let DestPlan {
                    target: Target::Ostree { dest, tag },
                    ..
                } = p.dest
                else {
                    panic!("{:?}", p.dest)
                };
                assert_eq!(dest.ostree_ref.as_deref(), Some("os/stable"));
                assert_eq!(tag, "latest");
            }
            Err(e) if cfg!(not(feature = "ostree")) => {
                assert_eq!(crate::error::exit_code(&e), 2)
            }
            r => panic!("{r:?}"),
        }
    }

    /// kubernetes pkg/credentialprovider/secrets/secrets_test.go,
    /// Test_MakeDockerKeyring's cases with a default keyring: here a credential
    /// provider plugin, whose answers come after the pull secrets'.
    #[test]
    fn kubelet_default_keyring() {
        use base64::Engine as _;
        let secret = |host: &str| {
            format!(r#"{{"auths": {{"{host}": {{"auth": "dXNlcjpwYXNzd29yZA=="}}}}}}"#)
        };
        let h = host()
            .plugin(
                "/d/default",
                Ok(r#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheDuration":"0","auth":{"test.registry.io":{"username":"default-user","password":"default-password"}}}"#),
            )
            .file(
                "/d/providers.yaml",
                "kind: CredentialProviderConfig\nproviders:\n- name: default\n  matchImages: [\"test.registry.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
            )
            .file("/d/other", secret("foobar.io"))
            .file("/d/match", secret("test.registry.io"));
        let cases = [
            (vec!["/d/other"], vec!["default-user:default-password"]),
            (vec![], vec!["default-user:default-password"]),
            (
                vec!["/d/match"],
                vec!["user:password", "default-user:default-password"],
            ),
        ];
        for (secrets, want) in cases {
            let mut r = req("test.registry.io/app:v1", "oci:/out");
            r.options.pull_secrets = secrets.iter().map(Into::into).collect();
            r.options.provider_config = Some("/d/providers.yaml".into());
            r.options.provider_bin_dir = Some("/d".into());
            let p = super::plan(&r, &h).unwrap();
            let got: Vec<String> = p.credentials[0]
                .candidates()
                .iter()
                .map(|c| {
                    String::from_utf8(
                        base64::engine::general_purpose::STANDARD
                            .decode(c.auth.expose())
                            .unwrap(),
                    )
                    .unwrap()
                })
                .collect();
            assert_eq!(got, want, "{:?}", r.options.pull_secrets);
            // The first try has the first; the plan names them all.
            assert_eq!(
                auth::attempt(&p.credentials, 0),
                [p.credentials[0].for_try(0).1.clone()]
            );
            let s = p.summary();
            let hs = &s.hosts[0];
            assert_eq!(hs.fallbacks.len(), want.len() - 1);
            assert_eq!(
                hs.fallbacks
                    .last()
                    .map(String::as_str)
                    .or(hs.credential.as_deref()),
                Some("credential provider default (key test.registry.io)")
            );
        }
        // Asked each time: its answer is not to be cached.
        assert_eq!(h.ran().len(), 3);
        assert_eq!(
            super::plan(&req("test.registry.io/app:v1", "oci:/out"), &h)
                .map(|p| p.plugins_run)
                .unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(h.cached(), Vec::<String>::new());
    }

    /// `hostpull plan` names every root plugin run to make the plan, in its
    /// text and its JSON; an answer from the provider cache runs none.
    #[test]
    fn plans_name_the_plugins_they_ran() {
        let answer = r#"{"kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"1h","auth":{"h.io":{"username":"u","password":"p"}}}"#;
        let h = host()
            .file("/auth.json", r#"{"credHelpers": {"h.io": "pass"}}"#)
            .plugin(
                "docker-credential-pass",
                Ok(r#"{"Username":"hu","Secret":"hs"}"#),
            )
            .plugin("/bin/ecr", Ok(answer))
            .file(
                "/providers.yaml",
                "kind: CredentialProviderConfig\nproviders:\n- name: ecr\n  matchImages: [\"h.io\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
            );
        let mut r = req("h.io/a:v1", "");
        r.options.authfiles = vec!["/auth.json".into()];
        r.options.provider_config = Some("/providers.yaml".into());
        r.options.provider_bin_dir = Some("/bin".into());
        let p = super::dry_run(&r, &h).unwrap();
        let both = [
            "credential helper docker-credential-pass",
            "credential provider ecr",
        ];
        assert_eq!(p.plugins_run, both);
        let s = p.summary();
        assert!(
            s.text()
                .contains(&format!("plugins   ran {}\n", both.join(", "))),
            "{}",
            s.text()
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["plugins_run"], serde_json::json!(both));
        // Again: the provider's answer comes from its cache; the helper runs.
        let p = super::dry_run(&r, &h).unwrap();
        assert_eq!(p.plugins_run, [both[0]]);
        assert_eq!(h.cached().len(), 1);
        assert_eq!(h.ran().len(), 3);
        // Nothing run, nothing shown.
        let s = plan(&req("h.io/a:v1", "oci:/d")).unwrap().summary();
        assert!(s.plugins_run.is_empty() && !s.text().contains("plugins"));
    }

    /// Which credentials, mirrors and CAs a pull gets from the host's own
    /// files (ostree's and kubelet's credential files, `REGISTRY_AUTH_FILE`,
    /// registries.conf and its drop-ins, certs.d): a table on an in-memory
    /// host, where each case once needed a root on disk.
    #[test]
    fn host_files_table() {
        use base64::Engine as _;
        let auth = |user: &str| {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:pw"));
            format!(r#"{{"auths": {{"h.io": {{"auth": "{b}"}}}}}}"#)
        };
        let root = |p: &str| format!("/nonexistent-root/{p}");
        let conf = "[[registry]]\nlocation = \"h.io\"\n[[registry.mirror]]\nlocation = \"m1.io\"\n";
        let base = || {
            host()
                .file("etc/containers/registries.conf", conf)
                .file("run/ostree/auth.json", auth("run"))
                .file("usr/lib/ostree/auth.json", auth("usr"))
                .file("var/lib/kubelet/config.json", auth("kubelet"))
                .file("/env.json", auth("env"))
        };
        type Case = (
            &'static str,
            MemHost,
            fn(&mut Request),
            // (host, credential sources in order, CAs, client cert)
            Vec<(&'static str, Vec<String>, Vec<String>, Option<String>)>,
        );
        let defaults = vec![
            root("run/ostree/auth.json"),
            root("usr/lib/ostree/auth.json"),
            root("var/lib/kubelet/config.json"),
        ];
        let cases: Vec<Case> = vec![
            (
                "the host's credential files, in order; the mirror has none",
                base(),
                |_| {},
                vec![
                    ("m1.io", vec![], vec![], None),
                    ("h.io", defaults.clone(), vec![], None),
                ],
            ),
            (
                "--no-default-creds",
                base(),
                |r| r.options.no_default_creds = true,
                vec![("m1.io", vec![], vec![], None), ("h.io", vec![], vec![], None)],
            ),
            (
                "REGISTRY_AUTH_FILE is a given source: no defaults",
                base().var("REGISTRY_AUTH_FILE", "/env.json"),
                |_| {},
                vec![
                    ("m1.io", vec![], vec![], None),
                    ("h.io", vec!["/env.json".into()], vec![], None),
                ],
            ),
            (
                "a drop-in replaces the table of its prefix; another suffix in \
                 registries.conf.d, a file's or a directory's, is no drop-in",
                base()
                    .file(
                        "etc/containers/registries.conf.d/50-m2.conf",
                        "[[registry]]\nlocation = \"h.io\"\n[[registry.mirror]]\nlocation = \"m2.io\"\n",
                    )
                    .file("etc/containers/registries.conf.d/60-x.d/a", "")
                    .file("etc/containers/registries.conf.d/README", "[[[")
                    .file("etc/containers/certs.d/m2.io/ca.crt", PEM),
                |r| r.options.no_default_creds = true,
                vec![
                    (
                        "m2.io",
                        vec![],
                        vec![root("etc/containers/certs.d/m2.io/ca.crt")],
                        None,
                    ),
                    ("h.io", vec![], vec![], None),
                ],
            ),
            (
                "certs.d: containers' directory wins over docker's; a client cert \
                 with its key",
                base()
                    .file("etc/containers/certs.d/m1.io/ca.crt", PEM)
                    .file("etc/docker/certs.d/m1.io/other.crt", PEM)
                    .file("etc/docker/certs.d/h.io/ca.crt", PEM)
                    .file("etc/docker/certs.d/h.io/client.cert", PEM)
                    .file("etc/docker/certs.d/h.io/client.key", "pem"),
                |r| r.options.no_default_creds = true,
                vec![
                    (
                        "m1.io",
                        vec![],
                        vec![root("etc/containers/certs.d/m1.io/ca.crt")],
                        None,
                    ),
                    (
                        "h.io",
                        vec![],
                        vec![root("etc/docker/certs.d/h.io/ca.crt")],
                        Some(root("etc/docker/certs.d/h.io/client.cert")),
                    ),
                ],
            ),
        ];
        for (name, h, edit, want) in cases {
            let mut r = req("h.io/a:v1", "oci:/d");
            edit(&mut r);
            let s = super::plan(&r, &h).unwrap().summary();
            let got: Vec<_> = s
                .hosts
                .iter()
                .map(|hs| {
                    let creds = hs.credential.iter().chain(&hs.fallbacks);
                    let sources = creds
                        .map(|c| c.split(" (key ").next().unwrap_or_default().to_owned())
                        .collect::<Vec<_>>();
                    (
                        hs.host.as_str(),
                        sources,
                        hs.cas.clone(),
                        hs.client_cert.clone(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    /// A node config.json kubelet cannot read is skipped with a warning when
    /// it comes from the host's default files, as kubelet goes on without it;
    /// given with --pull-secret, it is an error.
    #[test]
    fn a_malformed_default_kubelet_config_is_skipped() {
        use base64::Engine as _;
        let ostree = base64::engine::general_purpose::STANDARD.encode("ostree:pw");
        let h = |node: &str| {
            host().file("var/lib/kubelet/config.json", node).file(
                "etc/ostree/auth.json",
                format!(r#"{{"auths": {{"h.io": {{"auth": "{ostree}"}}}}}}"#),
            )
        };
        let r = req("h.io/a:v1", "oci:/d");
        let malformed = h(
            r#"{"auths": {"other.io": {"auth": "pants"}, "h.io": {"auth": "dXNlcjpwYXNzd29yZA=="}}}"#,
        );
        let p = super::plan(&r, &malformed).unwrap();
        let sources: Vec<&str> = (p.credentials.iter())
            .flat_map(|h| h.candidates())
            .map(|c| c.source.as_str())
            .collect();
        assert_eq!(sources, ["/nonexistent-root/etc/ostree/auth.json"]);
        // Readable, it is a candidate after ostree's.
        let good = h(r#"{"auths": {"h.io": {"auth": "dXNlcjpwYXNzd29yZA=="}}}"#);
        let candidates = |h| {
            super::plan(&r, h).unwrap().credentials[0]
                .candidates()
                .len()
        };
        assert_eq!(candidates(&good), 2);
        let broken = h("{");
        assert_eq!(candidates(&broken), 1);
        let mut r = r;
        r.options.pull_secrets = vec!["/nonexistent-root/var/lib/kubelet/config.json".into()];
        assert_eq!(
            crate::error::exit_code(&super::plan(&r, &broken).unwrap_err()),
            2
        );
    }

    #[test]
    fn missing_inputs_are_usage_errors() {
        let mut r = req("h.io/a:v1", "oci:/d");
        r.options.authfiles = vec!["/nonexistent/auth.json".into()];
        assert_eq!(crate::error::exit_code(&plan(&r).unwrap_err()), 2);
        let mut r = req("h.io/a:v1", "oci:/d");
        r.options.platform = Some("linux".into());
        assert_eq!(crate::error::exit_code(&plan(&r).unwrap_err()), 2);
    }

    /// `auto` is systemd where systemd runs the host; elsewhere a pull fails
    /// (exit 8), and `hostpull plan` says so rather than failing itself.
    #[test]
    fn auto_needs_systemd() {
        let mut r = req("h.io/a:v1", "oci:/d");
        r.options.sandbox = Some(SandboxMode::Auto);
        let mut h = host();
        h.systemd = true;
        assert_eq!(
            super::plan(&r, &h).unwrap().worker.isolation,
            Isolation::Systemd
        );
        let e = plan(&r).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 8);
        assert!(e.to_string().contains("--sandbox none"));
        let s = dry_run(&r).unwrap().summary();
        assert_eq!(s.sandbox, SandboxMode::Auto);
        assert_eq!(s.sandbox_error.as_deref(), Some(NO_SYSTEMD));
        assert!(
            s.text()
                .contains("sandbox   auto, MemoryMax=512M, TasksMax=256\n  a pull fails (exit 8): systemd is not running"),
            "{}",
            s.text()
        );
        let s = super::plan(&r, &h).unwrap().summary();
        assert_eq!((s.sandbox, s.sandbox_error), (SandboxMode::Systemd, None));
    }

    #[test]
    fn selinux_context_only_where_selinux_is_on() {
        let mut r = req("h.io/a:v1", "oci:/d");
        assert_eq!(plan(&r).unwrap().worker.selinux_context, None);
        let mut h = host();
        h.selinux = true;
        assert_eq!(
            super::plan(&r, &h)
                .unwrap()
                .worker
                .selinux_context
                .as_deref(),
            Some(WORKER_SELINUX_CONTEXT)
        );
        r.options.selinux_context = Some("system_u:system_r:other_t:s0".into());
        assert_eq!(
            super::plan(&r, &h)
                .unwrap()
                .worker
                .selinux_context
                .as_deref(),
            Some("system_u:system_r:other_t:s0")
        );
        assert_eq!(plan(&r).unwrap().worker.selinux_context, None);
    }

    #[test]
    fn limits_table() {
        let ok = |f: &dyn Fn(&mut Request)| {
            let mut r = req("h.io/a:v1", "oci:/d");
            f(&mut r);
            plan(&r).map(|p| p.worker.limits)
        };
        let d = ok(&|_| {}).unwrap();
        assert_eq!(
            (d.memory_max, d.tasks_max, d.cpu_quota, d.io_weight),
            (512 << 20, 256, None, 50)
        );
        let l = ok(&|r| {
            r.options.memory_max = Some("16M".into());
            r.options.cpu_quota = Some("25%".into());
            r.options.tasks_max = Some(64);
            r.options.io_weight = Some(10);
        })
        .unwrap();
        assert_eq!(
            (l.memory_max, l.tasks_max, l.cpu_quota, l.io_weight),
            (16 << 20, 64, Some(25), 10)
        );
        for bad in [
            &(|r: &mut Request| r.options.memory_max = Some("lots".into()))
                as &dyn Fn(&mut Request),
            &|r| r.options.cpu_quota = Some("25".into()),
            &|r| r.options.tasks_max = Some(0),
            &|r| r.options.io_weight = Some(0),
            &|r| r.options.io_weight = Some(10001),
        ] {
            assert_eq!(crate::error::exit_code(&ok(bad).unwrap_err()), 2);
        }
    }

    #[test]
    fn max_rate_table() {
        let rate = |r: Option<&str>| {
            let mut q = req("h.io/a:v1", "oci:/d");
            q.options.max_rate = r.map(str::to_owned);
            plan(&q).map(|p| (p.max_rate, p.summary().max_rate, p.summary().text()))
        };
        let (none, _, text) = rate(None).unwrap();
        assert_eq!(none, None);
        assert!(text.contains("max rate  no limit\n"), "{text}");
        for (given, want, shown) in [
            ("20M", 20 << 20, "20 MiB/s"),
            ("500K", 500 << 10, "500 KiB/s"),
            ("1k", 1024, "1 KiB/s"),
            ("3000000", 3_000_000, "2.9 MiB/s"),
        ] {
            let (got, summary, text) = rate(Some(given)).unwrap();
            assert_eq!((got, summary), (Some(want), Some(want)), "{given}");
            assert!(
                text.contains(&format!("max rate  {shown} (all blobs together)\n")),
                "{given}: {text}"
            );
        }
        for bad in [
            "",
            "0",
            "1000",
            "20 M",
            "20MB",
            "-5M",
            "fast",
            "99999999999T",
        ] {
            let e = rate(Some(bad)).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(e.to_string().starts_with("invalid --max-rate"), "{e}");
        }
    }
}
