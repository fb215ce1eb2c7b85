//! The command line: parse, then call the library. Errors are printed here, once.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::error::{self, Kind};
use crate::imgref::Dest;
use crate::options::Options;
use crate::plan;
use crate::progress::{Progress, Screen};

/// `--help`'s (and the man page's) epilogue: the exit codes, as
/// [`error::EXIT_CODES`] has them, what `--json` prints, and the proxy.
fn after_help() -> String {
    let mut out = String::from("EXIT STATUS:\n");
    for (code, text) in error::EXIT_CODES {
        // Seven columns for the code, the continuation lines aligned on the text.
        let mut line = format!("  {code:<4} ");
        for word in text.replace('`', "").split(' ') {
            if line.len() > 7 && line.len() + 1 + word.len() > 79 {
                out.push_str(&line);
                out.push('\n');
                line = " ".repeat(7);
            } else if line.len() > 7 {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out + "\n" + JSON_HELP + "\n\n" + PROXY_HELP
}

/// How the worker goes through a proxy, in `--help` and the man pages.
const PROXY_HELP: &str = "BEHIND A PROXY:
The worker goes through HTTPS_PROXY (HTTP_PROXY for plain http registries)
except to the hosts of NO_PROXY, as skopeo reads them (or their lower-case
forms, from hostpull's environment; hostpull-pull@.service reads
/etc/mco/proxy.env and /etc/hostpull/proxy.env). The keys https-proxy,
http-proxy and no-proxy of hostpull.d's [cluster] or of a profile, if set,
decide instead. A password in a proxy URL is passed to the worker as its
unit's credential, never in argv or the unit's properties; hostpull plan
shows per host which proxy it uses, as user:***.";

/// What `--json` prints, at the end of `--help`.
const JSON_HELP: &str = "With --json, pull prints one object on stdout: image, manifest_digest,
source_digest, platform, dest, tag, layers_total, layers_fetched,
layers_reused, bytes_fetched, elapsed_ms, max_rate (bytes a second, or
null), signature {scope, requirement,
verified_by}, credentials [{host, source, key, candidate, candidates}] (the
one used per host, among its candidates),
worker {sandbox, unit, uid, memory_peak_bytes, startup_ms, skopeo,
protocol, blobs_via, opened_beside, manifests_inspected}; with --dest
ostree:, dest is the repository and ostree {repo, commit, refs} tells the
imported commit and the refs pointing at it. A failure prints
error {exit_code, kind, message, host} instead
(docs/failure-v0.schema.json).";

/// The command line: one verb and its options.
#[derive(Debug, Parser)]
#[command(
    name = "hostpull",
    version,
    about = "Pull container images for image-based host updates",
    long_about = None,
    after_help = after_help()
)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The verbs, each with its options.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Pull an image from a registry into an OCI image layout.
    Pull(Box<PullOpts>),
    /// Show what a pull with the same options would use, per host: credential
    /// source and key (never the secret), CAs, TLS and registries.conf `insecure`,
    /// DNS, sandbox, signature policy. --dest is optional. No network, no worker;
    /// it runs the credential helpers and provider plugins a pull would run, and
    /// lists them (plugins_run).
    Plan(Box<PullOpts>),
    /// Pull into a layout (by default under /var/lib/hostpull/images/), then
    /// hand the verified layout to rpm-ostree or bootc.
    Rebase(Box<RebaseOpts>),
    /// Remove the blobs of an OCI image layout that no tag references.
    Prune(PruneOpts),
    /// Print a man page (roff) on stdout: hostpull(1), or hostpull-VERB(1).
    Man {
        /// The verb whose page to print (pull, plan, rebase, prune, man, completions)
        verb: Option<String>,
    },
    /// Print shell completions on stdout.
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The programs root starts, as hidden verbs.
    #[command(flatten)]
    Confined(ConfinedCmd),
}

/// The programs `hostpull` is when root starts it across a boundary
/// (`crate::confined`), hidden verbs of the one parser.
#[derive(Debug, Subcommand)]
pub enum ConfinedCmd {
    /// The worker agent, the program of a worker unit
    /// (`crate::confined::agent`).
    #[command(name = crate::wire::agent::VERB, hide = true, disable_help_flag = true)]
    WorkerAgent(Confined),
    /// The layout proxy, which the ostree import starts
    /// (`crate::confined::layout_proxy`).
    #[command(name = crate::wire::layout::VERB, hide = true, disable_help_flag = true)]
    LayoutProxy(Confined),
}

/// The command line of a program root starts (`crate::confined`), which
/// that program reads itself: what it takes is its protocol's
/// (`crate::wire`), not a user's.
#[derive(Debug, clap::Args)]
pub struct Confined {
    /// Its arguments, as root gave them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<std::ffi::OsString>,
}

/// `prune`'s options.
#[derive(Debug, clap::Args)]
pub struct PruneOpts {
    /// The OCI image layout directory
    pub dir: PathBuf,
    /// Print one JSON object with what was removed on stdout
    #[arg(long)]
    pub json: bool,
}

/// `rebase`'s options: a pull's, and who takes the image.
#[derive(Debug, clap::Args)]
// The fields' docs are --help's text: `<repository>` there is a placeholder.
#[allow(rustdoc::invalid_html_tags)]
// A consumer takes an OCI layout or an image in containers-storage: rebase
// refuses `--dest ostree:`.
#[command(mut_arg("dest", |a| a.help("oci:DIR[:TAG]: the layout to pull into and hand over (instead of --layout); or containers-storage:[STORE][NAME[:TAG]]: the store, handed over by digest")))]
pub struct RebaseOpts {
    /// Who takes the image
    #[arg(long, value_enum, default_value = "rpm-ostree")]
    pub consumer: crate::handoff::Consumer,
    /// The layout directory [default: /var/lib/hostpull/images/<repository>]
    #[arg(long, value_name = "DIR", conflicts_with = "dest")]
    pub layout: Option<PathBuf>,
    /// Reboot into the new deployment (rpm-ostree --reboot, bootc --apply)
    #[arg(long)]
    pub reboot: bool,
    /// The pull before the hand-off.
    #[command(flatten)]
    pub pull: PullOpts,
}

/// A pull's options: what to pull and with what ([`Options`]), and how to
/// report it.
#[derive(Debug, Clone, clap::Args)]
#[command(args_override_self = true)]
pub struct PullOpts {
    /// What to pull and with what, before the profile and hostpull.d are laid under it.
    #[command(flatten)]
    pub options: Options,
    /// Take the image, destination and sources from pulls.d/NAME.toml (what
    /// hostpull-pull@NAME.service runs); options given here still win
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Read the host's files below this root instead of /: hostpull's
    /// config.toml, config.d and pulls.d (/etc, /run, /usr/lib), containers'
    /// policy.json, registries.conf(.d), registries.d and certs.d, docker's
    /// certs.d, ostree's auth.json (/run, /etc, /usr/lib) and kubelet's
    /// config.json; errors name them below it
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub config_root: PathBuf,
    /// Print one JSON object with the result on stdout
    #[arg(long)]
    pub json: bool,
    /// Write progress events (JSON Lines, docs/progress-v0.schema.json) to fd N
    #[arg(long, value_name = "N")]
    pub progress_fd: Option<i32>,
}

impl PullOpts {
    fn request(&self, host: &dyn plan::host::Host) -> plan::Request {
        let mut options = self.options.clone();
        // Before the configuration files: HOSTPULL_SKOPEO comes between
        // --skopeo and `[worker] skopeo`.
        if options.skopeo.is_none() {
            options.skopeo = host.env(crate::sandbox::SKOPEO_ENV).map(PathBuf::from);
        }
        plan::Request {
            options,
            absolute_dest: false,
            cluster_cas: 0,
        }
    }
}

/// Which command a plan is made for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verb {
    /// `hostpull pull`.
    Pull,
    /// `hostpull rebase` to `consumer`, into the `oci:` layout `layout` if
    /// given, which wins over any destination ([`plan::Request::absolute_dest`]);
    /// the consumer is on `PATH`.
    Rebase {
        consumer: crate::handoff::Consumer,
        layout: Option<PathBuf>,
    },
    /// `hostpull plan`: [`plan::dry_run`].
    Plan,
}

/// The plan of a pull with these options, with the hostpull.d configuration
/// applied. Planning reads files and may run credential plugins: it runs
/// once, on a blocking thread, never on the async workers.
async fn plan_for(opts: &PullOpts, verb: Verb) -> anyhow::Result<plan::Plan> {
    let opts = opts.clone();
    tokio::task::spawn_blocking(move || {
        let (host, req) = request_for(&opts, verb.clone())?;
        let plan = plan::plan(&req, &host)?;
        if let Verb::Rebase { consumer, .. } = verb {
            crate::handoff::check(&host, consumer)?;
        }
        Ok(plan)
    })
    .await?
}

/// `hostpull plan`'s dry run, as [`plan_for`] plans: it needs no destination.
async fn dry_run_for(opts: &PullOpts) -> anyhow::Result<plan::DryRun> {
    let opts = opts.clone();
    tokio::task::spawn_blocking(move || {
        let (host, req) = request_for(&opts, Verb::Plan)?;
        plan::dry_run(&req, &host)
    })
    .await?
}

/// The host and the request the options make for `verb`.
fn request_for(
    opts: &PullOpts,
    verb: Verb,
) -> anyhow::Result<(crate::host::System, plan::Request)> {
    let cannot_open = |e: std::io::Error| {
        error::Failure::new(
            Kind::Usage,
            format!(
                "cannot open --config-root {}: {e}",
                opts.config_root.display()
            ),
        )
    };
    let host = crate::host::System::open(&opts.config_root).map_err(cannot_open)?;
    let root = host.dir();
    let mut req = opts.request(&host);
    req.absolute_dest = matches!(verb, Verb::Rebase { .. });
    let profile = (opts.profile.as_deref())
        .map(|name| crate::config::load_profile(root, &opts.config_root, name))
        .transpose()?;
    let dropins = crate::config::load(root, &opts.config_root)?;
    req.cluster_cas = dropins.cas.len();
    // Lowest precedence first: the command line wins over the profile, which
    // wins over the drop-ins.
    let cli = std::mem::take(&mut req.options);
    req.options = crate::config::merge(std::iter::once(dropins).chain(profile).chain([cli]));
    if let Verb::Rebase { layout, .. } = verb {
        let dir = match layout {
            Some(dir) => Some(dir),
            None if req.options.dest.is_none() => rebase_layout(req.options.image.as_deref())?,
            None => None,
        };
        if let Some(dir) = dir {
            req.options.dest = Some(Dest::layout(&dir)?);
        }
    }
    Ok((host, req))
}

/// Where `rebase` pulls when neither the command line nor the profile says:
/// a directory per repository under /var/lib/hostpull/images, world-readable
/// for the consumer's own unprivileged skopeo. No image: the plan says so.
fn rebase_layout(image: Option<&str>) -> anyhow::Result<Option<PathBuf>> {
    let Some(image) = image else { return Ok(None) };
    let path = crate::imgref::ImageRef::parse(image)?.path;
    Ok(Some(
        Path::new("/var/lib/hostpull/images").join(path.replace('/', "_")),
    ))
}

/// stdout was a pipe whose reader has gone (`hostpull plan | head -1`): the
/// command ends quietly with exit 0, as ripgrep does (crates/core/main.rs:
/// "a broken pipe means graceful termination"). Only [`to_stdout`] makes it,
/// so a worker's broken pipe is never taken for this.
#[derive(Debug)]
struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Write `bytes` to stdout and flush it. A closed pipe is [`StdoutClosed`];
/// any other error (a full disk: `> /dev/full`) is one `error:` line, exit 2.
fn to_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    stdout_written(out.write_all(bytes).and_then(|()| out.flush()))
}

/// What a write to stdout gave, as [`to_stdout`] says.
fn stdout_written(r: std::io::Result<()>) -> anyhow::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => error::fail(Kind::Usage, format!("writing to stdout: {e}")),
    }
}

/// A line for the human on stderr. Where stderr cannot be written (a closed
/// pipe, a full disk) there is no one to tell: the line is dropped, never a
/// panic as `eprintln!` would.
fn to_stderr(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Whether stdout has had its one `--json` object: a failure after it (a
/// rebase's hand-off) then prints no second one.
static PRINTED_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec(value)?;
    bytes.push(b'\n');
    PRINTED_JSON.store(true, std::sync::atomic::Ordering::Relaxed);
    to_stdout(&bytes)
}

/// What `--json` prints for a failure (docs/failure-v0.schema.json): its
/// exit code and that code's name, the `error:` line's text (`message`), and
/// the registry host whose answer it was, or null.
fn failure_json(e: &anyhow::Error, message: &str) -> serde_json::Value {
    let f = error::failure(e);
    let kind = f.map_or(Kind::Internal, |f| f.kind);
    serde_json::json!({"error": {
        "exit_code": kind.exit_code(),
        "kind": kind.name(),
        "message": message,
        "host": f.and_then(|f| f.host.as_deref()),
    }})
}

async fn run_pull(opts: &PullOpts, screen: &Screen) -> anyhow::Result<()> {
    let plan = plan_for(opts, Verb::Pull).await?;
    if !plan.worker.tls_verify {
        tracing::warn!("TLS verification is off for {}", plan.image.domain);
    }
    let progress = Progress::new(opts.progress_fd, screen)?.with_max_rate(plan.max_rate);
    let report = pull_to_dest(plan, &progress).await?;
    progress.done();
    to_stderr(&report.summary());
    journal_report(&report);
    if opts.json {
        print_json(&report)?;
    }
    Ok(())
}

/// Pull as the plan says, then finish its destination. For `ostree:REPO[:REF]`
/// the pull goes into a staging layout, imported as it fills, which is removed
/// either way; the import references nothing unless the pull succeeds (after a
/// failed one it is abandoned, and waited for). A failed import is exit 10, as
/// a consumer's failure is.
async fn pull_to_dest(
    plan: plan::Plan,
    progress: &Progress,
) -> anyhow::Result<crate::report::Report> {
    let target = &plan.dest.target;
    let dest = crate::store::Destination::of(target, &plan.image)?;
    let mut report = match crate::fetch::pull_into(&plan, progress, &dest).await {
        Ok(r) => r,
        Err(e) => {
            // The import's own error when it is why the pull stopped; a
            // stopped pull is reported as stopped, whatever its import did.
            let import = dest.abandon().await;
            return match import {
                Some(i) if error::failure(&e).is_some_and(|f| f.kind == Kind::Handoff) => {
                    let one = error::one_line(&format!("{i:#}"));
                    Err(error::Failure::new(Kind::Handoff, one).into())
                }
                _ => Err(e),
            };
        }
    };
    if !dest.ephemeral() {
        return Ok(report);
    }
    let finish = dest.finish();
    match tokio::select! {
        r = finish => r.map_err(|e| {
            error::Failure::new(Kind::Handoff, error::one_line(&format!("{e:#}")))
        })?,
        kind = crate::fetch::cancelled() => {
            return error::fail(kind, "interrupted: the image was not handed to its destination");
        }
    } {
        crate::store::Finished::Published => {}
        crate::store::Finished::Imported(i) => report.ostree = Some(i),
        crate::store::Finished::Stored(s) => report.stored = Some(s),
    }
    Ok(report)
}

/// Pull, then hand the layout over: `--layout`, the destination of the
/// command line or the profile, or else [`rebase_layout`].
async fn run_rebase(opts: &RebaseOpts, screen: &Screen) -> anyhow::Result<()> {
    let verb = Verb::Rebase {
        consumer: opts.consumer,
        layout: opts.layout.clone(),
    };
    let plan = plan_for(&opts.pull, verb).await?;
    let progress = Progress::new(opts.pull.progress_fd, screen)?.with_max_rate(plan.max_rate);
    let (report, handed) = match &plan.dest.target {
        crate::imgref::Target::Oci { dir, tag } => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let handed = ("oci", format!("{}:{tag}", dir.display()));
            (crate::fetch::pull(&plan, &progress).await?, handed)
        }
        crate::imgref::Target::Storage { .. } => {
            let report = pull_to_dest(plan, &progress).await?;
            let stored = report.stored.as_deref().unwrap_or_default();
            let stored = stored
                .strip_prefix(crate::imgref::cstorage::PREFIX)
                .unwrap_or(stored);
            let handed = ("containers-storage", stored.to_owned());
            (report, handed)
        }
        _ => {
            return error::fail(
                Kind::Usage,
                "rebase hands over an OCI layout or containers-storage: give --layout DIR, \
                 --dest oci:DIR or --dest containers-storage:[STORE]NAME[:TAG]",
            );
        }
    };
    progress.done();
    to_stderr(&report.summary());
    journal_report(&report);
    // A stdout that cannot take the result does not stop the hand-off.
    let printed = match opts.pull.json {
        true => print_json(&report),
        false => Ok(()),
    };
    crate::handoff::run(opts.consumer, handed.0, &handed.1, opts.reboot)?;
    printed
}

async fn run_plan(opts: &PullOpts) -> anyhow::Result<()> {
    let summary = dry_run_for(opts).await?.summary();
    if opts.json {
        print_json(&summary)
    } else {
        to_stdout(summary.text().as_bytes())
    }
}

fn run_prune(opts: &PruneOpts) -> anyhow::Result<()> {
    if !opts.dir.join("oci-layout").is_file() {
        return error::fail(
            Kind::Usage,
            format!("{} is not an OCI image layout", opts.dir.display()),
        );
    }
    let pruned = crate::store::Layout::open_locked(&opts.dir)?.prune()?;
    to_stderr(&format!(
        "Pruned {} blobs, {:.1} MiB, from {}",
        pruned.blobs,
        pruned.bytes as f64 / (1 << 20) as f64,
        opts.dir.display()
    ));
    if opts.json {
        print_json(&pruned)?;
    }
    Ok(())
}

/// `hostpull man [VERB]`: hostpull(1), or hostpull-VERB(1) (`make` renders
/// each). Without the `help` verb, which has no page for hostpull(1) to list.
fn man_page(verb: Option<&str>) -> anyhow::Result<()> {
    let mut cli = users_command().disable_help_subcommand(true);
    cli.build();
    let page = match verb {
        None => cli,
        Some(v) => match cli.find_subcommand(v) {
            Some(sub) => sub.clone(),
            None => {
                let verbs: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
                let msg = format!("no man page for {v:?}: the verbs are {}", verbs.join(", "));
                return error::fail(Kind::Usage, msg);
            }
        },
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    to_stdout(&out)
}

/// The command line as a user has it, for the man pages and the completions:
/// without the hidden verbs of the programs root starts ([`ConfinedCmd`]).
fn users_command() -> clap::Command {
    let full = <Cli as clap::CommandFactory>::command();
    let mut cmd = clap::Command::new("hostpull")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .after_help(full.get_after_help().cloned().unwrap_or_default())
        .subcommand_required(true);
    for verb in full.get_subcommands().filter(|c| !c.is_hide_set()) {
        cmd = cmd.subcommand(verb.clone());
    }
    cmd
}

/// Logs go to stderr without timestamps, above the progress bars on a terminal.
/// Under systemd, with stderr connected to the journal (`JOURNAL_STREAM`),
/// events go to the journal directly instead, with their fields as journal
/// fields (`MANIFEST_DIGEST=…`).
fn init_logging(screen: &Screen) {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| EnvFilter::new("warn,hostpull=info"));
    let journal = std::env::var_os("JOURNAL_STREAM")
        .and_then(|_| tracing_journald::layer().ok())
        .map(|l| l.with_field_prefix(None));
    let screen = screen.clone();
    let stderr = journal.is_none().then(|| {
        fmt::layer()
            .with_writer(move || screen.log_writer())
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .without_time()
            .with_target(false)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(journal)
        .with(stderr)
        .init();
}

/// A finished pull, as a journal entry with fields (only under the journal:
/// on a terminal the summary line says it).
fn journal_report(report: &crate::report::Report) {
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        tracing::info!(
            image = %report.image,
            manifest_digest = %report.manifest_digest,
            dest = %report.dest,
            tag = %report.tag,
            layers_fetched = report.layers_fetched,
            layers_reused = report.layers_reused,
            bytes_fetched = report.bytes_fetched,
            elapsed_ms = report.elapsed_ms as u64,
            signature_requirement = %report.signature.requirement,
            signed_by = %report.signature.verified_by.join(" "),
            ostree_commit = report.ostree.as_ref().map(|o| o.commit.as_str()),
            worker_skopeo = report.worker.skopeo.as_deref(),
            worker_protocol = report.worker.protocol.as_deref(),
            "{}",
            report.summary()
        );
    }
}

/// Parse the command line, run it, print any error once, and return the exit code.
pub fn run_main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if refused_dest(&e) => return refused_value(&e),
        Err(e) => {
            if e.use_stderr() {
                let _ = e.print();
                return Kind::Usage.exit_code();
            }
            // --help and --version: on stdout, with its errors.
            return match stdout_written(e.print().and_then(|()| std::io::stdout().flush())) {
                Ok(()) => 0,
                Err(e) => report_error(&e),
            };
        }
    };
    let cli = match cli.cmd {
        Cmd::Confined(ConfinedCmd::WorkerAgent(c)) => return crate::confined::agent::main(c.args),
        Cmd::Confined(ConfinedCmd::LayoutProxy(c)) => {
            return crate::confined::layout_proxy::main(c.args);
        }
        _ => cli,
    };
    let screen = Screen::stderr();
    init_logging(&screen);
    if matches!(cli.cmd, Cmd::Pull(_) | Cmd::Rebase(_)) {
        // Before the runtime exists: its threads inherit the policy.
        crate::host::batch_scheduling();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error::print(None, format_args!("starting the async runtime: {e}"));
            return Kind::Internal.exit_code();
        }
    };
    let r = rt.block_on(async {
        match &cli.cmd {
            Cmd::Pull(o) => run_pull(o, &screen).await,
            Cmd::Plan(o) => run_plan(o).await,
            Cmd::Rebase(o) => run_rebase(o, &screen).await,
            Cmd::Prune(o) => tokio::task::block_in_place(|| run_prune(o)),
            Cmd::Man { verb } => man_page(verb.as_deref()),
            Cmd::Completions { shell } => {
                // Into memory first: clap_complete panics on a write error.
                let mut cmd = users_command();
                let mut script = Vec::new();
                clap_complete::generate(*shell, &mut cmd, "hostpull", &mut script);
                to_stdout(&script)
            }
            // Run above, before the runtime.
            Cmd::Confined(_) => Ok(()),
        }
    });
    // Dropping the runtime would wait for a blocked read of a stopped worker.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    let json = match &cli.cmd {
        Cmd::Pull(o) | Cmd::Plan(o) => o.json,
        Cmd::Rebase(o) => o.pull.json,
        Cmd::Prune(o) => o.json,
        Cmd::Man { .. } | Cmd::Completions { .. } | Cmd::Confined(_) => false,
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            let code = report_error(&e);
            let printed = PRINTED_JSON.load(std::sync::atomic::Ordering::Relaxed);
            if json && code != 0 && !printed {
                let message = error::one_line(&format!("{e:#}"));
                // A stdout that cannot take it changes nothing: stderr said it.
                let _ = print_json(&failure_json(&e, &message));
            }
            code
        }
    }
}

/// Whether clap refused `--dest` for its parser's reason ([`Dest::parse`]).
fn refused_dest(e: &clap::Error) -> bool {
    use clap::error::{ContextKind, ContextValue};
    e.kind() == clap::error::ErrorKind::ValueValidation
        && matches!(e.get(ContextKind::InvalidArg),
            Some(ContextValue::String(a)) if a.starts_with("--dest "))
}

/// A value clap's parser refused (a `--dest` that does not parse): the one
/// `error:` line of its parser (`imgref`), as the plan's refusals print
/// theirs, not clap's, which quotes the whole value; with `--json`, the
/// failure object too. Exit 2.
fn refused_value(e: &clap::Error) -> i32 {
    use std::error::Error as _;
    let message = error::one_line(&e.source().map_or_else(|| e.to_string(), |s| s.to_string()));
    let failure = anyhow::Error::from(error::Failure::new(Kind::Usage, message.clone()));
    let code = report_error(&failure);
    if std::env::args_os().any(|a| a == "--json") {
        // A stdout that cannot take it changes nothing: stderr said it.
        let _ = print_json(&failure_json(&failure, &message));
    }
    code
}

/// Print `e` as the one `error:` line (and its detail line), and return its
/// exit code; a closed stdout ends quietly, exit 0.
fn report_error(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<StdoutClosed>().is_some() {
        return 0;
    }
    error::print(None, format_args!("{e:#}"));
    if let Some(d) = error::failure(e).and_then(|f| f.detail.as_ref()) {
        to_stderr(d);
    }
    error::exit_code(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table holds success and every [`Kind`]'s code, in order.
    #[test]
    fn cli_exit_codes_are_the_kinds() {
        use Kind::*;
        let kinds = [
            Internal,
            Usage,
            Auth,
            NotFound,
            Tls,
            Network,
            Verify,
            Worker,
            Signature,
            Handoff,
            NoSpace,
            Deferred,
            Platform,
            Interrupted,
            Terminated,
        ];
        // A new Kind does not compile here until the list above has it.
        for k in kinds {
            match k {
                Internal | Usage | Auth | NotFound | Tls | Network | Verify | Worker
                | Signature | Handoff | NoSpace | Deferred | Platform | Interrupted
                | Terminated => {}
            }
        }
        // Each has a name of its own, as docs/failure-v0.schema.json allows it.
        let names: std::collections::BTreeSet<&str> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), kinds.len());
        for n in names {
            assert!(
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{n}"
            );
        }
        let codes: Vec<i32> = error::EXIT_CODES.iter().map(|(c, _)| *c).collect();
        let want: Vec<i32> = std::iter::once(0)
            .chain(kinds.map(Kind::exit_code))
            .collect();
        assert_eq!(codes, want);
    }

    /// A failure's object names its code, kind and host.
    #[test]
    fn cli_failure_json_names_the_kind() {
        use Kind::*;
        let e = anyhow::Error::from(
            error::Failure::new(Auth, "authentication refused").with_host("r.io:5000"),
        )
        .context("pulling");
        let want = serde_json::json!({"error": {"exit_code": 3, "kind": "auth",
            "message": "m", "host": "r.io:5000"}});
        assert_eq!(failure_json(&e, "m"), want);
        let e = anyhow::anyhow!("boom");
        assert_eq!(failure_json(&e, "m")["error"]["kind"], "internal");
        assert_eq!(
            failure_json(&e, "m")["error"]["host"],
            serde_json::Value::Null
        );
    }

    /// README's "Exit codes" table is the table, row for row.
    #[test]
    fn cli_readme_exit_codes_are_the_table() {
        let readme = include_str!("../README.md");
        let (_, section) = readme.split_once("### Exit codes").unwrap();
        let rows: Vec<(i32, &str)> = section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let (code, text) = l.trim_matches('|').split_once('|').unwrap();
                (code.trim().parse().unwrap(), text.trim())
            })
            .collect();
        assert_eq!(rows, error::EXIT_CODES);
    }

    /// `--help` lists every code with its words, in lines that fit a terminal.
    #[test]
    fn cli_help_shows_the_exit_codes() {
        let help = after_help();
        assert!(help.lines().all(|l| l.len() <= 79), "{help}");
        let (codes, json) = help.split_once("\n\n").unwrap();
        assert!(json.starts_with("With --json"), "{json}");
        let mut lines = codes.lines().skip(1).peekable();
        for (code, text) in error::EXIT_CODES {
            let first = lines.next().unwrap();
            let mut words = first[7..].to_owned();
            assert_eq!(first[..7].trim(), code.to_string(), "{first}");
            while let Some(more) = lines.next_if(|l| l.starts_with("       ")) {
                words = words + " " + more.trim();
            }
            assert_eq!(words, text.replace('`', ""));
        }
        assert_eq!(lines.next(), None);
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
