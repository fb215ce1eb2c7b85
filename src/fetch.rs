//! The pull itself: resolve the manifest, then fetch every missing blob through a
//! proxy session, several in flight, verifying each on root's side.

mod transfer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::digest::{self, Sha256Digest};
use crate::error::{Failure, Kind, Retry, fail, failure};
use crate::imgref::{ImageRef, Target};
use crate::manifest::{self, Descriptor, MANIFEST_MAX, Parsed, Platform};
use crate::plan::{DestPlan, Plan};
use crate::progress::Progress;
use crate::report::{CredentialReport, Report, next_credentials, on_host};
use crate::sandbox::{Worker, naming_proxy};
use crate::signature::Verdict;
use crate::store::cstorage::Served;
use crate::store::{Destination, Layout};
use crate::verify;
pub use transfer::IN_FLIGHT;
use transfer::{Flow, Tally, transfer};

/// A manifest that root has hashed and checked, ready to fetch.
#[derive(Debug)]
struct Resolved {
    /// The digest of what the registry served for the reference: the
    /// manifest, or the index it was chosen from.
    toplevel: Sha256Digest,
    /// The digest of the registry's manifest, which the worker opens.
    source_digest: Sha256Digest,
    /// The registry's bytes of it, as served (`raw` before its conversion).
    served: Vec<u8>,
    /// The registry's bytes of the index it was chosen from, if any.
    index: Option<Vec<u8>>,
    /// The digest and bytes of the manifest as the layout stores it: the
    /// registry's own, or its OCI form when the registry served Docker schema2.
    digest: Sha256Digest,
    raw: Vec<u8>,
    manifest: manifest::Manifest,
    /// The platform its config declares, once checked ([`check_config`]).
    declared: Option<Platform>,
}

impl Resolved {
    fn new(
        toplevel: Sha256Digest,
        source_digest: Sha256Digest,
        raw: Vec<u8>,
        parsed: Parsed,
    ) -> anyhow::Result<Self> {
        let served = raw.clone();
        let (manifest, raw) = match parsed {
            Parsed::Manifest(m, manifest::OCI_MANIFEST) => (m, raw),
            Parsed::Manifest(..) => {
                let oci = manifest::docker_to_oci(&raw)?;
                match manifest::parse(&oci)? {
                    Parsed::Manifest(m, _) => (m, oci),
                    Parsed::Index(_) => unreachable!("conversion keeps a manifest a manifest"),
                }
            }
            Parsed::Index(_) => {
                return fail(Kind::Verify, "an index inside an index is not supported");
            }
        };
        Ok(Self {
            toplevel,
            source_digest,
            served,
            index: None,
            digest: digest::sha256(&raw),
            raw,
            manifest,
            declared: None,
        })
    }
}

/// Where the image goes: the destination, asked for its layout once the
/// signature policy has accepted the image (so a rejected image leaves nothing
/// behind, not even a directory), and what the plan says of it (the tag the
/// image gets there, the space it must leave).
#[derive(Debug, Clone, Copy)]
struct Landing<'a> {
    dest: &'a Destination,
    planned: &'a DestPlan,
}

/// Pull as the plan says, into its `oci:` layout. SIGINT and SIGTERM stop
/// it: the worker's units are stopped, and the layout is left as it was.
pub async fn pull(plan: &Plan, progress: &Progress) -> anyhow::Result<Report> {
    let Target::Oci { dir, .. } = &plan.dest.target else {
        return fail(
            Kind::Usage,
            "this plan has no oci:DIR destination to pull into",
        );
    };
    pull_into(plan, progress, &Destination::Oci(dir.clone())).await
}

/// [`pull`] into `dest`'s layout, asked for when it is first needed, with the
/// plan's tag (for `ostree:`, a staging layout's). Finishing `dest` is the
/// caller's.
pub async fn pull_into(
    plan: &Plan,
    progress: &Progress,
    dest: &Destination,
) -> anyhow::Result<Report> {
    let start = Instant::now();
    let planned = &plan.dest;
    let target = &planned.target;
    let into = Landing { dest, planned };
    if plan.defer_if_metered {
        crate::metered::check().await?;
    }
    // As kubelet does: when the registry refuses a credential, the next one,
    // each try with a worker and an authfile of its own.
    let tries = crate::plan::auth::attempts(&plan.credentials).max(1);
    let mut n = 0;
    let (result, report) = loop {
        let attempt = crate::plan::auth::attempt(&plan.credentials, n);
        let worker = Worker::prepare(&plan.worker, attempt).await?;
        let result = tokio::select! {
            r = pull_with(&worker, plan, into, progress) => r,
            kind = cancelled() => Err(Failure::new(kind, "interrupted: the pull was stopped").into()),
            // Its own error is the caller's to report (Destination::abandon).
            () = dest.import_failed() => Err(Failure::new(Kind::Handoff, "the import failed").into()),
        };
        let report = worker.finish().await;
        let refused =
            matches!(&result, Err(e) if failure(e).is_some_and(Failure::registry_refused));
        if let (true, Err(e)) = (refused && n + 1 < tries, &result) {
            tracing::warn!("{}", next_credentials(e, &plan.credentials, n));
            n += 1;
            continue;
        }
        break match result {
            Err(e) if refused && n > 0 => (
                Err(e.context(format!("all {tries} credentials were refused"))),
                report,
            ),
            r => (r, report),
        };
    };
    let named = |e| naming_proxy(on_host(e, &plan.sources), &plan.worker.proxy);
    let (resolved, fetched, signature) = result.map_err(named)?;
    let total = resolved.manifest.layers.len();
    let fetched_layers = fetched
        .iter()
        .filter(|d| d.digest != resolved.manifest.config.digest)
        .count();
    Ok(Report {
        image: plan.image.to_string(),
        manifest_digest: resolved.digest,
        source_digest: resolved.source_digest,
        platform: resolved
            .declared
            .as_ref()
            .unwrap_or(&plan.platform)
            .to_string(),
        dest: target.path().display().to_string(),
        tag: target.tag().to_owned(),
        layers_total: total,
        layers_fetched: fetched_layers,
        layers_reused: total - fetched_layers,
        bytes_fetched: fetched.iter().map(|d| d.size).sum(),
        elapsed_ms: start.elapsed().as_millis(),
        max_rate: plan.max_rate,
        signature,
        credentials: CredentialReport::of_attempt(&plan.credentials, n),
        worker: report,
        ostree: None,
        stored: None,
    })
}

/// How far a pull has come; a retry goes on from there, with a new worker
/// session, and fetches only what is still missing: verified blobs are kept.
#[derive(Debug, Default)]
enum Stage {
    /// Nothing established yet.
    #[default]
    Start,
    /// Root has hashed and checked the manifest.
    Resolved(Resolved),
    /// The signature policy accepted it; nothing is written before that.
    Accepted {
        resolved: Resolved,
        signature: Verdict,
    },
    /// The layout is locked, and what it was missing is known.
    Ready(Ready),
}

/// A pull that may fetch: the verified manifest, the policy's verdict, the
/// locked layout, and the blobs that were missing at first.
#[derive(Debug)]
struct Ready {
    resolved: Resolved,
    signature: Verdict,
    layout: Arc<Layout>,
    missing: Vec<Descriptor>,
}

/// The pull, retried on transient errors with exponential backoff and jitter,
/// within the overall `--timeout`. Each retry starts a new worker session and
/// goes on from the [`Stage`] the last one reached.
async fn pull_with(
    worker: &Worker,
    plan: &Plan,
    into: Landing<'_>,
    progress: &Progress,
) -> anyhow::Result<(Resolved, Vec<Descriptor>, Verdict)> {
    let mut stage = Stage::Start;
    // The last attempt's error: its first line, and its failure's detail and host.
    let last_error = std::sync::Mutex::new(None::<Failure>);
    let retrying = async {
        let mut stalls = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let e = match try_pull(worker, plan, into, &mut stage, progress).await {
                Ok(ready) => return Ok(ready),
                Err(e) => e,
            };
            *last_error.lock().unwrap() = Some(Failure::restating(&e, Kind::Network));
            let retry = failure(&e).map_or(Retry::Never, |f| f.retry);
            stalls += u32::from(retry == Retry::Stalled);
            if retry == Retry::Never || attempt >= MAX_ATTEMPTS || stalls >= MAX_STALLS {
                return Err(e);
            }
            let delay = backoff(attempt);
            tracing::warn!(
                "attempt {attempt} failed, retrying in {:.1}s: {e:#}",
                delay.as_secs_f64()
            );
            // A stalled skopeo ends only when its unit is stopped.
            worker.stop_units().await;
            tokio::time::sleep(delay).await;
        }
    };
    let ready = match tokio::time::timeout(plan.retry.timeout, retrying).await {
        Ok(r) => r?,
        Err(_) => {
            // Say what kept failing, not only that time ran out.
            let timeout = format!(
                "timed out: the pull took longer than --timeout {}s",
                plan.retry.timeout.as_secs()
            );
            let f = match last_error.into_inner().unwrap() {
                Some(last) => Failure {
                    message: format!("{timeout}; the last attempt: {}", last.message),
                    ..last
                },
                None => Failure::new(Kind::Network, timeout),
            };
            return Err(f.into());
        }
    };
    Ok((ready.resolved, ready.missing, ready.signature))
}

/// Attempts at most, and stalls at most, before a transient error is final.
const MAX_ATTEMPTS: u32 = 5;
const MAX_STALLS: u32 = 2;
/// How a stall's message starts.
const STALLED: &str = "stalled:";

/// 1 s, 2 s, 4 s, 8 s … capped at 30 s, each times a random factor in [0.5, 1.5).
fn backoff(attempt: u32) -> std::time::Duration {
    backoff_with(attempt, crate::sandbox::rand_u32())
}

/// [`backoff`] with the random factor drawn from `random`.
fn backoff_with(attempt: u32, random: u32) -> std::time::Duration {
    let base = 1000u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(5))
        .min(30_000);
    let jitter = 0.5 + f64::from(random) / f64::from(u32::MAX);
    std::time::Duration::from_millis((base as f64 * jitter) as u64)
}

/// One attempt: take `stage` as far as it goes, and fetch. On an error,
/// `stage` keeps what was established.
async fn try_pull(
    worker: &Worker,
    plan: &Plan,
    into: Landing<'_>,
    stage: &mut Stage,
    progress: &Progress,
) -> anyhow::Result<Ready> {
    loop {
        *stage = match std::mem::take(stage) {
            Stage::Start => Stage::Resolved(resolve_in_time(worker, plan, into, progress).await?),
            // Before the layout is touched: a rejected image leaves no trace.
            Stage::Resolved(resolved) => match check_signature(worker, plan, &resolved).await {
                Ok(signature) => Stage::Accepted {
                    resolved,
                    signature,
                },
                Err(e) => {
                    *stage = Stage::Resolved(resolved);
                    return Err(e);
                }
            },
            Stage::Accepted {
                resolved,
                signature,
            } => match open_layout(into, &resolved).await {
                Ok((layout, missing)) => Stage::Ready(Ready {
                    resolved,
                    signature,
                    layout,
                    missing,
                }),
                Err(e) => {
                    *stage = Stage::Accepted {
                        resolved,
                        signature,
                    };
                    return Err(e);
                }
            },
            Stage::Ready(mut ready) => {
                let r = &ready.resolved;
                let fetched = fetch_into(
                    worker,
                    plan,
                    (r, &ready.layout, into.planned.target.tag()),
                    &ready.missing,
                    progress,
                );
                match fetched.await {
                    Ok(declared) => {
                        ready.resolved.declared = declared;
                        return Ok(ready);
                    }
                    Err(e) => {
                        *stage = Stage::Ready(ready);
                        return Err(e);
                    }
                }
            }
        };
    }
}

/// [`resolve`], or a stall when the registry sends no manifest in time.
async fn resolve_in_time(
    worker: &Worker,
    plan: &Plan,
    into: Landing<'_>,
    progress: &Progress,
) -> anyhow::Result<Resolved> {
    progress.steps("resolving the manifest", 0, 3);
    let stall = plan.retry.stall;
    match tokio::time::timeout(stall, resolve(worker, plan, into.dest)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::new(
            Kind::Network,
            format!(
                "{STALLED} no manifest from the registry in {}s",
                stall.as_secs()
            ),
        )
        .with_retry(Retry::Stalled)
        .into()),
    }
}

/// The signature policy's verdict on the manifest the registry served (and
/// the index it came from).
async fn check_signature(
    worker: &Worker,
    plan: &Plan,
    resolved: &Resolved,
) -> anyhow::Result<Verdict> {
    let mut digests = vec![resolved.toplevel.clone()];
    if resolved.source_digest != resolved.toplevel {
        digests.push(resolved.source_digest.clone());
    }
    crate::signature::check(worker, plan, &digests).await
}

/// Lock the destination's layout (for an ostree destination, its staging:
/// ephemeral), and list the blobs it lacks. What the destination has already
/// ([`Destination::held`]) need not come: it is neither fetched nor staged. Then, before any blob is fetched, whether they fit
/// (`plan::space`): if not, exit 11, and the layout is left as it was. Last,
/// the destination begins ([`Destination::begin`]: an ostree import gets its
/// request).
async fn open_layout(
    Landing { dest, planned }: Landing<'_>,
    resolved: &Resolved,
) -> anyhow::Result<(Arc<Layout>, Vec<Descriptor>)> {
    let path = dest.layout()?;
    let staging = dest.ephemeral();
    let layout = tokio::task::spawn_blocking(move || {
        let mut layout = Layout::open_locked(&path)?;
        if staging {
            layout.ephemeral();
        }
        anyhow::Ok(layout)
    })
    .await??;
    let held = (dest.held(
        &resolved.digest,
        &resolved.source_digest,
        &resolved.manifest,
    ))
    .await?;
    let mut missing: Vec<Descriptor> = Vec::new();
    for d in resolved.manifest.blobs() {
        if !layout.has_blob(d)?
            && !held.contains(&d.digest)
            && !missing.iter().any(|t| t.digest == d.digest)
        {
            missing.push(d.clone());
        }
    }
    // An ostree import takes the layers in their order, and gets them so.
    if !matches!(dest, Destination::Ostree { .. }) {
        let declared = resolved.index.is_some();
        largest_first(&mut missing, &resolved.manifest.config.digest, declared);
    }
    let rule = &planned.space;
    let fs = crate::host::statvfs(&rule.path)
        .with_context(|| format!("measuring the free space of {}", rule.path.display()))?;
    let sizes: Vec<u64> = missing.iter().map(|d| d.size).collect();
    let root = rustix::process::geteuid().is_root();
    crate::plan::space::check(rule, &fs, root, &sizes, resolved.raw.len() as u64)?;
    let manifest = (&resolved.digest, resolved.raw.as_slice());
    let served = Served {
        digest: &resolved.source_digest,
        raw: &resolved.served,
        index: resolved.index.as_deref(),
    };
    dest.begin(&layout, planned.target.tag(), manifest, served)
        .await?;
    Ok((Arc::new(layout), missing))
}

/// Resolves on SIGINT or SIGTERM, with the matching exit code.
pub(crate) async fn cancelled() -> Kind {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Kind::Interrupted,
        _ = term.recv() => Kind::Terminated,
    }
}

/// Fetch the registry's manifest bytes, check them against a pinned digest, and
/// pick the platform from an index. A manifest named by digest (the pin, or
/// the index's choice) comes from the destination if it holds those bytes,
/// else from the registry: what the timer finds on most days, and what makes
/// a pull pinned to a held image (the machine-config daemon's, once more) ask
/// no worker at all unless its signatures are to be checked.
async fn resolve(worker: &Worker, plan: &Plan, dest: &Destination) -> anyhow::Result<Resolved> {
    let pin = plan.image.digest.as_ref();
    let held = match pin {
        Some(pin) => dest.held_manifest(pin, None).await,
        None => None,
    };
    let raw = match held {
        Some(raw) => raw,
        None => inspect_opening(worker, plan, dest).await?,
    };
    let digest = digest::sha256(&raw);
    if let Some(pinned) = pin
        && *pinned != digest
    {
        return fail(
            Kind::Verify,
            format!("manifest digest {digest} does not match the pinned {pinned}"),
        );
    }
    match manifest::parse(&raw)? {
        Parsed::Index(index) => {
            let d = manifest::select(&index, &plan.platform)?;
            tracing::info!("{}: chose {} for {}", plan.image, d.digest, plan.platform);
            let instance = match dest.held_manifest(&d.digest, Some(d.size)).await {
                Some(instance) => instance,
                None => instance_manifest(worker, plan, &d.digest).await?,
            };
            verify::check_bytes("manifest", &instance, &d.digest, d.size)?;
            let parsed = manifest::parse(&instance)?;
            Ok(Resolved {
                index: Some(raw),
                ..Resolved::new(digest, d.digest.clone(), instance, parsed)?
            })
        }
        parsed => Resolved::new(digest.clone(), digest, raw, parsed),
    }
}

/// The registry's manifest `digest`, an index's instance: from the image the
/// proxy opened beside the index, if it resolved to this instance; else the
/// proxy opens the instance now, as the blobs' session would after it. Only
/// where its bytes are not the registry's (a Docker schema2 manifest, which
/// the proxy converts) does `inspect` ask the registry again.
async fn instance_manifest(
    worker: &Worker,
    plan: &Plan,
    digest: &Sha256Digest,
) -> anyhow::Result<Vec<u8>> {
    if let Some(raw) = worker.opened_manifest(digest).await {
        return Ok(raw);
    }
    let image = plan.image.with_digest(digest);
    worker.open_beside(&image).await;
    match worker.opened_manifest(digest).await {
        Some(raw) => Ok(raw),
        None => worker.inspect_raw(&image, MANIFEST_MAX).await,
    }
}

/// Into a layout, the largest blobs first, so that no large one is left to
/// come alone at the end. The config comes first, and alone, as its platform
/// is checked before any layer comes ([`transfer`]). Where the index's entry
/// has `declared` the platform already, it comes second instead, beside the
/// largest layer: that layer's request then does not wait for the config's
/// round trips (an update's one layer, across a link), and the config's
/// check, on its arrival, still comes before any other layer is asked for.
fn largest_first(blobs: &mut [Descriptor], config: &Sha256Digest, declared: bool) {
    blobs.sort_by_key(|d| (d.digest != *config, std::cmp::Reverse(d.size)));
    if declared && blobs.len() > 1 && blobs[0].digest == *config {
        blobs[..2].rotate_left(1);
    }
}

/// The registry's manifest of the image as given (`inspect`), with the image
/// opened in the worker's proxy beside it where the plan allows
/// ([`Plan::open_beside`]): the blobs then need no round trips of their own
/// before the first byte. Not for a tag the destination has, most often the
/// timer's check that finds nothing new, which asks the registry for the
/// manifest alone (P6); whether it has is read while the worker starts.
async fn inspect_opening(
    worker: &Worker,
    plan: &Plan,
    dest: &Destination,
) -> anyhow::Result<Vec<u8>> {
    let inspect = worker.inspect_raw(&plan.image, MANIFEST_MAX);
    if !plan.open_beside {
        return inspect.await;
    }
    if plan.image.digest.is_none() {
        let tag = plan.dest.target.tag();
        let (started, held) = tokio::join!(worker.start(), dest.holds_tag(tag));
        started?;
        if held {
            return inspect.await;
        }
    }
    // The proxy is asked for first (biased), so that its start does not wait
    // for the `inspect`, which holds the agent's side channel until it ends.
    // A failed `inspect` is the answer at once.
    let beside = worker.open_beside(&plan.image);
    tokio::pin!(beside, inspect);
    let (mut opened, mut inspected) = (false, None);
    loop {
        tokio::select! {
            biased;
            () = &mut beside, if !opened => opened = true,
            raw = &mut inspect, if inspected.is_none() => match raw {
                Ok(raw) => inspected = Some(raw),
                Err(e) => return Err(e),
            },
        }
        if opened && let Some(raw) = inspected.take() {
            return Ok(raw);
        }
    }
}

/// Fetch what the layout lacks of `missing` (the blobs it lacked when the pull
/// began), then publish: manifest blob, then the tag. The config comes first,
/// and the platform it declares is checked ([`check_config`]) before any layer
/// is asked for; one the layout has already is checked before anything comes.
/// Gives the platform it declares.
async fn fetch_into(
    worker: &Worker,
    plan: &Plan,
    (r, layout, tag): (&Resolved, &Arc<Layout>, &str),
    missing: &[Descriptor],
    progress: &Progress,
) -> anyhow::Result<Option<Platform>> {
    let mut todo: Vec<Descriptor> = Vec::new();
    for d in missing {
        if !layout.has_blob(d)? {
            todo.push(d.clone());
        }
    }
    let mut blobs: Vec<&Descriptor> = Vec::new();
    for d in r.manifest.blobs() {
        if !blobs.iter().any(|b| b.digest == d.digest) {
            blobs.push(d);
        }
    }
    let tally = Tally {
        config: &r.manifest.config.digest,
        blobs,
        missing,
        todo,
    };
    progress.steps("fetching blobs", 1, 3);
    progress.blobs(&tally.states(|_| 0), false);
    // Neither here nor to come: an ostree destination has this very image.
    let config = &r.manifest.config;
    let mut declared = None;
    if !tally.todo.iter().any(|d| d.digest == config.digest) && layout.has_blob(config)? {
        declared = check_config(layout, config, &plan.platform)?;
    }
    if !tally.todo.is_empty() {
        let image = plan.image.with_digest(&r.source_digest);
        let fetched = fetch_blobs(worker, plan, &image, layout, &tally, progress).await?;
        declared = declared.or(fetched);
    }
    progress.blobs(&tally.states(|_| u64::MAX), true);
    progress.steps("publishing", 2, 3);
    layout.write_blob("manifest", &r.digest, &r.raw)?;
    layout.set_tag(tag, manifest::OCI_MANIFEST, &r.digest, r.raw.len() as u64)?;
    Ok(declared)
}

/// The image config the layout holds, verified: the consumer will parse it,
/// so it must be able to (exit 7), and the platform it declares must be one
/// `want` takes (exit 13), as an index entry's must. A config that names no
/// OS or architecture is taken with a warning, as skopeo and podman take it
/// (`None`); else gives the platform it declares.
#[fn_error_context::context("checking image config {}", config.digest)]
pub(crate) fn check_config(
    layout: &Layout,
    config: &Descriptor,
    want: &Platform,
) -> anyhow::Result<Option<Platform>> {
    let bytes = layout.read_blob(&config.digest)?;
    verify::check_bytes("config", &bytes, &config.digest, config.size)?;
    let declared = manifest::check_config(&bytes)?;
    if declared.os.is_empty() || declared.architecture.is_empty() {
        tracing::warn!(
            "image config {} names no OS or architecture: its platform is not checked",
            config.digest
        );
        return Ok(None);
    }
    manifest::check_platform(&declared, want)?;
    Ok(Some(declared))
}

/// One proxy session for all missing blobs of one image; gives the platform
/// the config declares, if it came ([`check_config`]).
async fn fetch_blobs(
    worker: &Worker,
    plan: &Plan,
    image: &ImageRef,
    layout: &Arc<Layout>,
    tally: &Tally<'_>,
    progress: &Progress,
) -> anyhow::Result<Option<Platform>> {
    let todo = &tally.todo;
    let stall = plan.retry.stall;
    let flow = Flow::new(todo.len(), plan.max_rate);
    let session = worker.proxy_session();
    let session = session.run(image, async |proxy, img| {
        transfer(proxy, img, (layout, &plan.platform), tally, &flow).await
    });
    tokio::select! {
        r = session => r,
        never = report_bytes(progress, &flow, tally) => match never {},
        () = flow.stalled(stall) => Err(Failure::new(
            Kind::Network,
            format!("{STALLED} no data from the registry for {}s (--stall-timeout)", stall.as_secs()),
        )
        .with_retry(Retry::Stalled)
        .into()),
    }
}

/// Where every blob stands, ten times a second, while anyone is told.
async fn report_bytes(
    progress: &Progress,
    flow: &Flow,
    tally: &Tally<'_>,
) -> std::convert::Infallible {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !progress.enabled() {
            return std::future::pending().await;
        }
        progress.blobs(&tally.states(|i| flow.read(i)), false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_gets_its_config_then_the_largest_blobs_first() {
        let d = |n: u8, size| Descriptor {
            media_type: String::new(),
            digest: digest::sha256(&[n]),
            size,
            urls: vec![],
            platform: None,
            annotations: Default::default(),
        };
        let blobs = vec![d(1, 5), d(2, 1), d(3, 9), d(4, 5), d(5, 2)];
        let sorted = |declared| {
            let mut b = blobs.clone();
            largest_first(&mut b, &digest::sha256(&[2]), declared);
            b
        };
        let order = |b: &[Descriptor]| b.iter().map(|b| b.size).collect::<Vec<_>>();
        let single = sorted(false);
        assert_eq!(order(&single), [1, 9, 5, 5, 2]);
        assert_eq!(single[2].digest, digest::sha256(&[1]), "stable");
        // An index declared the platform: the config beside the largest layer.
        assert_eq!(order(&sorted(true)), [9, 1, 5, 5, 2]);
        let mut alone = vec![d(2, 1)];
        largest_first(&mut alone, &digest::sha256(&[2]), true);
        assert_eq!(order(&alone), [1]);
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter() {
        let ms = |attempt, random| backoff_with(attempt, random).as_millis();
        for (attempt, base) in [
            (1, 1000),
            (2, 2000),
            (3, 4000),
            (5, 16_000),
            (6, 30_000),
            (40, 30_000),
        ] {
            assert_eq!(ms(attempt, 0), base / 2, "{attempt}");
            assert_eq!(ms(attempt, u32::MAX), base * 3 / 2, "{attempt}");
        }
        assert_eq!(ms(0, 0), 500);
        for attempt in 1..10 {
            let d = backoff(attempt).as_millis();
            assert!((500..45_000).contains(&d), "{attempt}: {d}");
        }
    }
}
