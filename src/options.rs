//! What a pull is asked to do: the options of the command line, of a pull
//! profile and of the hostpull.d drop-ins.

use std::path::PathBuf;

use crate::imgref::Dest;
use crate::secret::Secret;

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

impl SandboxMode {
    /// Its name as the command line and the files spell it (`none`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Systemd => "systemd",
            Self::None => "none",
        }
    }
}

/// What a pull is asked for: the command line's options, which are also the
/// keys of a pull profile (`pulls.d/NAME.toml`) and of the hostpull.d drop-ins
/// (their `[worker]`, `[pull]` and `[cluster]` tables). One struct carries the
/// command line (clap) and the files (serde); `config.rs` says which keys
/// each file accepts and merges the layers with [`Options::overlay`]: command
/// line over profile over drop-ins; defaults are the plan's.
///
/// A new knob is a field here, a line in [`Options::overlay`] (the compiler
/// asks for it), its key in `config.rs`'s lists if a file may set it, and its use.
///
/// Everything here is a request, unchecked: the plan parses and refuses; but
/// the destination, which is parsed where it is given ([`Dest`]), so that
/// what the verbs make of it (`rebase --layout`) is a value, not text.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args, serde::Deserialize)]
// The fields' docs are --help's text: `[:PORT]` there is a syntax, not a link.
#[allow(rustdoc::broken_intra_doc_links)]
// Unknown keys never reach serde: config.rs takes only the keys it lists, so an
// unknown field here is a list naming a key Options does not have.
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[command(args_override_self = true)]
pub struct Options {
    /// docker://HOST[:PORT]/PATH[:TAG|@sha256:HEX] (docker:// may be left out)
    #[arg(required_unless_present = "profile")]
    pub image: Option<String>,
    /// oci:DIR[:TAG], TAG defaulting to the image's tag; or ostree:REPO[:REF]:
    /// import into the ostree repository REPO as rpm-ostree and bootc store
    /// images, and point REF at the commit (needs the `ostree` build feature);
    /// or containers-storage:[STORE][NAME[:TAG]]: the store podman and bootc
    /// read (STORE `driver@graphroot+runroot:options`, storage.conf's when
    /// left out; NAME the image's own when left out)
    #[arg(long)]
    pub dest: Option<Dest>,
    /// containers-auth.json(5) file to take credentials from (repeatable;
    /// REGISTRY_AUTH_FILE is read after them)
    #[arg(long = "authfile", value_name = "AUTHFILE")]
    #[serde(rename = "authfile", default)]
    pub authfiles: Vec<PathBuf>,
    /// Kubernetes pull secret (dockerconfigjson or dockercfg, YAML or JSON, or
    /// the bare content) to take credentials from (repeatable)
    #[arg(long = "pull-secret", value_name = "FILE")]
    #[serde(rename = "pull-secret", default)]
    pub pull_secrets: Vec<PathBuf>,
    /// A token file for HOST[:PORT][/PATH], re-read on every pull (repeatable)
    #[arg(long = "registry-token", value_name = "HOST[:PORT][/PATH]=FILE")]
    #[serde(rename = "registry-token", default)]
    pub tokens: Vec<String>,
    /// The user name that goes with --registry-token [default: serviceaccount]
    #[arg(long = "registry-token-user", value_name = "NAME")]
    #[serde(rename = "registry-token-user")]
    pub token_user: Option<String>,
    /// Without any source, do not read the host's default credential files
    /// (/run, /etc, /usr/lib ostree/auth.json, /var/lib/kubelet/config.json)
    #[arg(long)]
    #[serde(default)]
    pub no_default_creds: bool,
    /// containers-registries.conf(5) to use instead of /etc/containers/registries.conf{,.d}
    #[arg(long, value_name = "FILE")]
    pub registries_conf: Option<PathBuf>,
    /// kubelet's CredentialProviderConfig: exec plugins asked for credentials
    #[arg(long = "credential-provider-config", value_name = "FILE")]
    #[serde(rename = "credential-provider-config")]
    pub provider_config: Option<PathBuf>,
    /// The directory of the credential provider plugins
    #[arg(long = "credential-provider-bin-dir", value_name = "DIR")]
    #[serde(rename = "credential-provider-bin-dir")]
    pub provider_bin_dir: Option<PathBuf>,
    /// Directory of CA certificates (*.crt) trusted for the registry
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Require HTTPS and verify certificates [default: true]; a value goes
    /// after `=` (--tls-verify=false), as skopeo has it
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    pub tls_verify: Option<bool>,
    /// OS/ARCH[/VARIANT] the image must be for (chosen from a multi-platform image, checked
    /// against its config; exit 13 if not); defaults to this host's
    #[arg(long)]
    pub platform: Option<String>,
    /// How to isolate the network-facing worker [default: auto]
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxMode>,
    /// The worker unit's SELinux context where SELinux is enabled
    /// [default: system_u:system_r:hostpull_worker_t:s0]
    #[arg(long = "worker-selinux-context", value_name = "CONTEXT")]
    pub selinux_context: Option<String>,
    /// The skopeo binary that runs as the worker [default: skopeo on PATH;
    /// HOSTPULL_SKOPEO, a test hook, comes between this and the config file]
    #[arg(long, value_name = "PATH")]
    pub skopeo: Option<PathBuf>,
    /// The worker's MemoryMax= (bytes, or with K, M, G, T) [default: 512M]
    #[arg(long)]
    pub memory_max: Option<String>,
    /// The worker's CPUQuota=, e.g. 50% [default: none]
    #[arg(long)]
    pub cpu_quota: Option<String>,
    /// The worker's TasksMax= [default: 256]
    #[arg(long, allow_negative_numbers = true)]
    pub tasks_max: Option<u32>,
    /// The worker's IOWeight=, 1 to 10000 [default: 50]
    #[arg(long, allow_negative_numbers = true)]
    pub io_weight: Option<u32>,
    /// Give up after this many seconds, retries included [default: 3600]
    // allow_negative_numbers: `-1` is a bad value, not an option (clap would
    // suggest `-- -1`).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub timeout: Option<u64>,
    /// Stop a worker that received no byte for this many seconds [default: 60]
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    pub stall_timeout: Option<u64>,
    /// At most this many bytes a second for the whole pull, all blobs
    /// together (with K, M, G, T: base 1024; at least 1K) [default: no limit]
    #[arg(long, value_name = "RATE")]
    pub max_rate: Option<String>,
    /// Trust the CA certificates in FILE for HOST[:PORT] only (repeatable)
    #[arg(long = "ca", value_name = "HOST[:PORT]=FILE")]
    #[serde(rename = "ca", default)]
    pub cas: Vec<String>,
    /// A name server for the worker only (repeatable; needs --sandbox systemd)
    #[arg(long, value_name = "IP")]
    #[serde(default)]
    pub dns: Vec<String>,
    /// A search domain for the worker only (repeatable)
    #[arg(long, value_name = "DOMAIN")]
    #[serde(default)]
    pub dns_search: Vec<String>,
    /// An /etc/hosts entry for the worker only (repeatable)
    #[arg(long = "add-host", value_name = "NAME:IP")]
    #[serde(rename = "add-host", default)]
    pub add_hosts: Vec<String>,
    /// The proxy for `http` registries (`http-proxy` of `[cluster]` and of a
    /// profile; never the command line, where a password would show):
    /// with any of these three keys set, the files decide the proxy and
    /// hostpull's environment (`HTTP_PROXY`, …) is not read.
    #[arg(skip)]
    pub http_proxy: Option<Secret>,
    /// The proxy for `https` registries (`https-proxy`), as `HTTPS_PROXY`.
    #[arg(skip)]
    pub https_proxy: Option<Secret>,
    /// Hosts, domains and networks reached without the proxy (`no-proxy`),
    /// as `NO_PROXY`'s comma list.
    #[arg(skip)]
    #[serde(default)]
    pub no_proxy: Vec<String>,
    /// containers-policy.json(5) to enforce [default: /etc/containers/policy.json]
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// containers-registries.d(5) directory with signature lookasides
    /// [default: /etc/containers/registries.d]
    #[arg(long = "registries.d", value_name = "DIR")]
    #[serde(rename = "registries.d")]
    pub registries_d: Option<PathBuf>,
    /// Refuse to pull when the policy accepts the image without a signature
    /// (insecureAcceptAnything)
    #[arg(long)]
    #[serde(default)]
    pub require_signature: bool,
    /// Exit 12 (deferred) without fetching while NetworkManager says the
    /// connection is metered (hostpull-pull@.service passes it)
    #[arg(long)]
    #[serde(skip)]
    pub defer_if_metered: bool,
    /// Pull on a metered connection even with --defer-if-metered
    #[arg(long)]
    #[serde(default)]
    pub allow_metered: bool,
}

impl Options {
    /// Lay `higher`, a layer of more precedence, over these options: what it
    /// sets wins, its lists come after ours, and a flag set in either stays set.
    pub fn overlay(&mut self, higher: Options) {
        // Destructured whole, so that a new field cannot be forgotten here.
        let Options {
            image,
            dest,
            authfiles,
            pull_secrets,
            tokens,
            token_user,
            no_default_creds,
            registries_conf,
            provider_config,
            provider_bin_dir,
            cert_dir,
            tls_verify,
            platform,
            sandbox,
            selinux_context,
            skopeo,
            memory_max,
            cpu_quota,
            tasks_max,
            io_weight,
            timeout,
            stall_timeout,
            max_rate,
            cas,
            dns,
            dns_search,
            add_hosts,
            http_proxy,
            https_proxy,
            no_proxy,
            policy,
            registries_d,
            require_signature,
            defer_if_metered,
            allow_metered,
        } = higher;
        self.image.overlay(image);
        self.dest.overlay(dest);
        self.authfiles.overlay(authfiles);
        self.pull_secrets.overlay(pull_secrets);
        self.tokens.overlay(tokens);
        self.token_user.overlay(token_user);
        self.no_default_creds.overlay(no_default_creds);
        self.registries_conf.overlay(registries_conf);
        self.provider_config.overlay(provider_config);
        self.provider_bin_dir.overlay(provider_bin_dir);
        self.cert_dir.overlay(cert_dir);
        self.tls_verify.overlay(tls_verify);
        self.platform.overlay(platform);
        self.sandbox.overlay(sandbox);
        self.selinux_context.overlay(selinux_context);
        self.skopeo.overlay(skopeo);
        self.memory_max.overlay(memory_max);
        self.cpu_quota.overlay(cpu_quota);
        self.tasks_max.overlay(tasks_max);
        self.io_weight.overlay(io_weight);
        self.timeout.overlay(timeout);
        self.stall_timeout.overlay(stall_timeout);
        self.max_rate.overlay(max_rate);
        self.cas.overlay(cas);
        self.dns.overlay(dns);
        self.dns_search.overlay(dns_search);
        self.add_hosts.overlay(add_hosts);
        self.http_proxy.overlay(http_proxy);
        self.https_proxy.overlay(https_proxy);
        self.no_proxy.overlay(no_proxy);
        self.policy.overlay(policy);
        self.registries_d.overlay(registries_d);
        self.require_signature.overlay(require_signature);
        self.defer_if_metered.overlay(defer_if_metered);
        self.allow_metered.overlay(allow_metered);
    }
}

/// How a value of a layer of more precedence goes over the one below, by its
/// type. A merge through serde (serialize both, overlay the maps, read back)
/// would refuse a path that is not UTF-8, which the command line takes today.
trait Overlay {
    fn overlay(&mut self, higher: Self);
}

/// Set wins over unset; a set value over a set one.
impl<T> Overlay for Option<T> {
    fn overlay(&mut self, higher: Self) {
        if higher.is_some() {
            *self = higher;
        }
    }
}

/// A repeatable option: ours first, then the higher layer's.
impl<T> Overlay for Vec<T> {
    fn overlay(&mut self, higher: Self) {
        self.extend(higher);
    }
}

/// A flag: on in any layer is on (no layer turns it off).
impl Overlay for bool {
    fn overlay(&mut self, higher: Self) {
        *self |= higher;
    }
}
