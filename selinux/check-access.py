#!/usr/bin/python3
"""Check access decisions of a linked (kernel binary) SELinux policy that
contains the hostpull module. No SELinux-enabled kernel is needed.

    /usr/bin/python3 selinux/check-access.py [--table-only] POLICY.33

1. EXPECT below: each row is asked of libsepol through
   selinux.audit2why.analyze(), one permission at a time. That is the
   decision the kernel would make with the policy's default booleans:
   TE rules, constraints (MCS), RBAC and bounds. An invalid context fails.
   "allow" rows need ALLOW. "deny" rows need a denial that no boolean
   can lift (TERULE, CONSTRAINT, RBAC or DONTAUDIT; BOOLEAN fails).
2. A few structural checks with setools, over all rules whatever the
   booleans: who can enter the worker domain, and that no rule gives the
   worker a capability (skipped with --table-only, for mutants).

Works on refpolicy (Debian) and Fedora policies: see "a|b" types and
"deny/refpolicy" rows below.

Run it with /usr/bin/python3: python3-selinux and python3-setools are
Debian packages. Prints "N passed, N failed" last; exits 1 on a failure.
"""
import sys

import selinux.audit2why as a2w
import setools

# Contexts as the kernel would see them on an MCS policy. PID 1 and the
# bus daemon run with the full range; services and the worker at s0.
INIT = "system_u:system_r:init_t:s0-s0:c0.c1023"
DBUSD = "system_u:system_r:system_dbusd_t:s0-s0:c0.c1023"
ORCH = "system_u:system_r:hostpull_t:s0"
WORKER = "system_u:system_r:hostpull_worker_t:s0"
IMPORT = "system_u:system_r:hostpull_ostree_t:s0"
STORAGE = "system_u:system_r:hostpull_storage_t:s0"
# Fedora's rpm-ostree and bootc (tests/stand-ins/fedora_install.te on refpolicy).
INSTALL = "system_u:system_r:install_t:s0"
SHELL = "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023"
ALIASES = {"@init": INIT, "@dbusd": DBUSD, "@orch": ORCH, "@worker": WORKER, "@import": IMPORT,
           "@shell": SHELL, "@install": INSTALL, "@storage": STORAGE}


def obj(t):
    """A file or port type as an object context."""
    return f"system_u:object_r:{t}:s0"


# Where refpolicy (Debian) and Fedora name a type differently, a row says
# "refpolicy_name|fedora_name"; the first one the policy has is used.


# (verdict, source, target, class, permissions, why)
# A target without ":" is an object type (see obj()). A verdict
# "deny/refpolicy" is only checked on refpolicy: Fedora's base policy
# grants that access to every domain (DAC still applies). A verdict
# "always:NAME" is allowed, and not only by rules under the boolean NAME (so it
# stays allowed when NAME is off). A verdict
# "tunable:NAME" is allowed now, but only by rules under the boolean NAME
# (so turning NAME off denies it). A verdict "filetrans:TYPE" is not an access: what the
# source creates (class) in a directory of the target type is created as TYPE, by one
# type_transition, unconditional; "filetrans:TYPE if BOOL", by one under the tunable
# BOOL. A class "CLASS:NAME" is a named transition: what is created under that name.
EXPECT = [
    # --- systemd starts skopeo in the worker domain (SELinuxContext=)
    ("allow", "@init", "@worker", "process", "transition rlimitinh", "setexeccon + execve"),
    ("allow", "@init", "@worker", "process2", "nnp_transition nosuid_transition", "NoNewPrivileges=yes"),
    ("allow", "@init", "bin_t", "file", "execute read open map", "PID 1 execs curl (lookaside signatures)"),
    ("allow", "@worker", "bin_t", "file", "entrypoint read map execute", "curl (lookaside) is bin_t, as skopeo"),
    ("allow", "@worker", "@init", "process", "sigchld", "the worker is PID 1's child"),
    ("allow", "@worker", "@init", "fd", "use", "PID 1 fexecve()s skopeo: else SIGSEGV at exec (guest)"),
    ("allow", "@worker", "lib_t", "file", "read open map execute", "skopeo is dynamically linked"),
    ("allow", "@worker", "ld_so_t", "file", "read open map execute", "the dynamic loader"),
    ("allow", "@worker", "ld_so_cache_t", "file", "read open map", "/etc/ld.so.cache"),
    ("allow", "@worker", "security_t", "filesystem", "getattr", "libselinux statfs()es selinuxfs"),
    ("allow", "@worker", "@worker", "process", "signal getsched", "Go runtime"),
    ("allow", "@init", "hostpull_exec_t", "file", "execute read open map", "PID 1 execs the worker agent"),
    ("allow", "@worker", "hostpull_exec_t", "file", "entrypoint read map execute", "the worker agent is /usr/bin/hostpull"),
    ("allow", "@worker", "bin_t", "file", "execute_no_trans", "the agent runs skopeo in the worker domain"),
    ("allow", "@worker", "@worker", "process", "fork sigchld sigkill", "the agent's skopeo children"),
    ("deny", "@orch", "@worker", "process", "transition", "root never enters the worker domain itself"),
    # /sys/fs/selinux/enforce tells hostpull that SELinux is on, and so to give each unit
    # SELinuxContext=: without it, the worker agent (hostpull_exec_t) would enter
    # hostpull_t by init_daemon_domain's transition. It came only from the ostree
    # tunable's object rules before (the guest's relabel mutant showed it).
    ("always:hostpull_import_ostree", "@orch", "security_t", "file", "getattr open read", "selinux_get_enforce_mode"),
    ("always:hostpull_import_ostree", "@orch", "security_t", "dir", "search", "selinux_get_enforce_mode"),
    ("always:hostpull_import_ostree", "@orch", "net_conf_t", "file", "getattr open read", "plan::dns: the host's resolv.conf and hosts"),
    ("always:hostpull_import_ostree", "@orch", "sysfs_t", "file", "open read", "root's skopeo --version: Go reads the huge page size"),
    ("always:hostpull_import_ostree", "@orch", "sysctl_vm_overcommit_t", "file", "open read", "glibc malloc, as a thread's arena shrinks (guest, once)"),

    # --- fds from hostpull through D-Bus to PID 1 to the worker (rpm-ostree#3239)
    ("allow", "@dbusd", "@orch", "fd", "use", "dbus-broker receives systemd-run's fds"),
    ("allow", "@dbusd", "@orch", "unix_stream_socket", "read write getattr", "the socketpair end"),
    ("allow", "@dbusd", "@orch", "fifo_file", "read write getattr", "stderr/stdout pipes"),
    ("allow", "@dbusd", "null_device_t", "chr_file", "read write", "/dev/null stdio"),
    ("allow", "@init", "@orch", "fd", "use", "PID 1 receives them"),
    ("allow", "@init", "@orch", "unix_stream_socket", "read write getattr ioctl", "the socketpair end"),
    ("allow", "@init", "@orch", "fifo_file", "read write getattr ioctl", "pipes"),
    ("allow", "@worker", "@orch", "fd", "use", "inherited across the transition"),
    ("allow", "@worker", "@orch", "unix_stream_socket", "read write getattr getopt", "proxy protocol on stdin"),
    ("allow", "@worker", "@orch", "fifo_file", "write getattr ioctl", "stderr, inspect's stdout"),
    ("allow", "@worker", "null_device_t", "chr_file", "read write", "/dev/null stdio"),
    ("allow", "@worker", "@worker", "fifo_file", "read write getattr", "blob pipes"),
    ("allow", "@orch", "@worker", "fd", "use", "blob pipes come back by SCM_RIGHTS"),
    ("allow", "@orch", "@worker", "fifo_file", "read getattr", "reading blob pipes"),
    ("allow", "@orch", "@worker", "file", "read open", "/proc/PID/status of the worker"),
    # the same when hostpull runs by hand from an unconfined root shell
    ("allow", "@dbusd", "@shell", "fd", "use", "hand run: dbus-broker"),
    ("allow", "@dbusd", "@shell", "fifo_file", "read write", "hand run: dbus-broker"),
    ("allow", "@worker", "@shell", "fd", "use", "hand run: worker stdio"),
    ("allow", "@worker", "@shell", "unix_stream_socket", "read write getattr getopt", "hand run: socketpair"),
    ("allow", "@worker", "@shell", "fifo_file", "write getattr", "hand run: stderr"),
    ("allow", "@shell", "@worker", "fd", "use", "hand run: blob pipes"),
    ("allow", "@shell", "@worker", "fifo_file", "read", "hand run: blob pipes"),

    # --- the worker's network: registries on any port, DNS
    ("allow", "@worker", "@worker", "tcp_socket", "create connect read write getopt setopt getattr shutdown", "TCP client"),
    ("allow", "@worker", "@worker", "udp_socket", "create connect read write", "DNS over UDP"),
    ("allow", "@worker", "http_port_t", "tcp_socket", "name_connect", "registries on 443/80"),
    ("allow", "@worker", "commplex_main_port_t", "tcp_socket", "name_connect", "registries on 5000"),
    ("allow", "@worker", "unreserved_port_t", "tcp_socket", "name_connect", "registries on test ports"),
    ("allow", "@worker", "dns_port_t", "tcp_socket", "name_connect", "DNS over TCP"),
    ("allow", "@worker", "net_conf_t", "file", "read open getattr", "/etc/resolv.conf, /etc/hosts"),
    ("allow", "@worker", "@worker", "unix_stream_socket", "create connect read write", "NSS clients"),

    # --- configuration, CA certificates, credentials, private /tmp
    ("allow", "@worker", "etc_t", "file", "read open getattr", "/etc/containers/*"),
    ("allow", "@worker", "etc_t", "dir", "read search open getattr", "registries.conf.d"),
    ("allow", "@worker", "cert_t", "file", "read open getattr", "/etc/ssl, /etc/pki"),
    ("allow", "@worker", "cert_t", "dir", "read search", "/etc/ssl/certs"),
    ("allow", "@worker", "cert_t", "lnk_file", "read", "/etc/ssl/certs/*.pem"),
    ("allow", "@worker", "usr_t", "file", "read open", "/usr/share/ca-certificates"),
    ("allow", "@worker", "locale_t", "file", "read open", "/etc/localtime"),
    ("allow", "@worker", "sysfs_t", "file", "read open", "Go reads the THP size"),
    ("allow", "@worker", "cgroup_t", "file", "read open", "Go 1.25 reads cpu.max"),
    ("allow", "@worker", "var_run_t", "dir", "search read", "/run/credentials/<unit>"),
    ("allow", "@worker", "init_runtime_t|init_var_run_t", "dir", "search read", "/run/credentials/<unit>"),
    ("allow", "@worker", "init_runtime_t|init_var_run_t", "file", "read open getattr", "credential files"),
    ("allow", "@worker", "ramfs_t", "dir", "search read getattr", "/run/credentials/<unit> on ramfs (guest)"),
    ("allow", "@worker", "ramfs_t", "file", "read open getattr", "credential files on ramfs (guest)"),
    ("allow", "@worker", "hostpull_worker_conf_t", "dir", "search read getattr", "the empty registries.conf.d bind (guest)"),
    ("allow", "@worker", "hostpull_worker_conf_t", "file", "read open getattr", "resolv.conf and hosts binds"),
    ("deny", "@worker", "hostpull_worker_conf_t", "file", "write", "read-only"),
    ("allow", "@worker", "tmp_t", "dir", "search write add_name remove_name", "private /tmp"),
    ("allow", "@worker", "hostpull_worker_tmp_t", "dir", "create write add_name remove_name rmdir search", "cache dirs"),
    ("allow", "@worker", "hostpull_worker_tmp_t", "file", "create open read write lock unlink rename getattr map", "blob-info cache"),

    # --- what the worker must never do
    ("deny", "@worker", "@worker", "capability", "dac_override dac_read_search setuid setgid chown fowner net_bind_service net_raw sys_admin sys_ptrace", "no capabilities"),
    ("deny", "@worker", "@worker", "cap_userns", "sys_admin setuid net_admin", "none in a user namespace either"),
    ("deny", "@worker", "@worker", "capability2", "bpf perfmon", "no capabilities"),
    ("deny", "@worker", "hostpull_var_lib_t", "dir", "write add_name remove_name rmdir search read", "the verified state"),
    ("deny", "@worker", "hostpull_var_lib_t", "file", "write append create unlink rename setattr read", "the verified state"),
    ("deny", "@worker", "var_lib_t", "dir", "write add_name", "/var/lib"),
    ("deny", "@worker", "hostpull_runtime_t", "dir", "read", "staged secrets of all pulls"),
    ("deny/refpolicy", "@worker", "hostpull_runtime_t", "dir", "search", "Fedora: pidfile dirs"),
    ("deny", "@worker", "hostpull_runtime_t", "file", "read open", "staged secrets of all pulls"),
    ("deny", "@worker", "shadow_t", "file", "read", "/etc/shadow"),
    ("deny/refpolicy", "@worker", "tls_privkey_t", "file", "read", "/etc/ssl/private (cert_t on Fedora)"),
    ("deny", "@worker", "user_home_t", "file", "read", "home directories"),
    ("deny", "@worker", "default_t", "file", "read", "unlabelled files"),
    ("deny", "@worker", "user_home_dir_t", "dir", "search", "/home/*"),
    ("deny", "@worker", "shell_exec_t", "file", "execute", "no shell"),
    ("deny", "@worker", "hostpull_exec_t", "file", "execute_no_trans", "runs hostpull only as PID 1 starts it"),
    ("deny", "@worker", "@orch", "process", "ptrace transition dyntransition signal sigkill", "never reaches the orchestrator"),
    ("deny", "@worker", "@init", "process", "ptrace", "never reaches PID 1"),
    ("deny", "@worker", "@worker", "process", "setexec setcurrent dyntransition", "cannot change its own domain"),
    ("deny", "@worker", "@worker", "tcp_socket", "listen accept", "client only"),
    ("deny", "@worker", "http_port_t", "tcp_socket", "name_bind", "client only"),
    ("deny", "@worker", "unreserved_port_t", "tcp_socket", "name_bind", "client only"),
    ("deny/refpolicy", "@worker", "system_dbusd_runtime_t", "sock_file", "write", "not on the system bus"),
    ("deny/refpolicy", "@worker", "@dbusd", "unix_stream_socket", "connectto", "Fedora: DNS interface"),
    ("deny", "@worker", "@init", "dbus", "send_msg", "cannot talk to systemd over the bus"),
    ("deny", "@init", "@worker", "dbus", "send_msg", "cannot talk to systemd over the bus"),
    ("deny", "@worker", "@init", "unix_stream_socket", "connectto", "not on /run/systemd/private"),
    ("deny", "@worker", "user_tmp_t", "file", "write", "other users' /tmp files"),
    ("deny/refpolicy", "@worker", "user_tmp_t", "file", "read", "Fedora: every domain reads tmp files"),

    # --- the orchestrator
    ("allow", "@init", "hostpull_exec_t", "file", "execute read open map", "a unit runs /usr/bin/hostpull"),
    ("allow", "@init", "@orch", "process", "transition", "into hostpull_t"),
    ("allow", "@orch", "hostpull_exec_t", "file", "entrypoint", "into hostpull_t"),
    ("allow", "@orch", "@init", "fd", "use", "journal stream from PID 1"),
    ("allow", "@orch", "@init", "unix_stream_socket", "write getattr", "journal stream from PID 1"),
    ("allow", "@orch", "var_lib_t", "dir", "search write add_name", "creating /var/lib/hostpull"),
    ("allow", "@orch", "hostpull_var_lib_t", "dir", "create write add_name remove_name rmdir read search setattr", "OCI layouts"),
    ("allow", "@orch", "hostpull_var_lib_t", "file", "create write read open rename link unlink setattr lock", "OCI layouts"),
    ("allow", "@orch", "var_run_t", "dir", "search write add_name", "creating /run/hostpull"),
    ("allow", "@orch", "hostpull_runtime_t", "dir", "create write add_name remove_name rmdir search", "staging"),
    ("allow", "@orch", "hostpull_runtime_t", "file", "create write open unlink", "staging"),
    ("allow", "@init", "hostpull_runtime_t", "dir", "search", "LoadCredential="),
    ("allow", "@init", "hostpull_runtime_t", "file", "read open getattr", "LoadCredential="),
    ("allow", "@orch", "etc_t", "file", "read open", "--authfile under /etc"),
    ("allow", "@orch", "cert_t", "file", "read open", "--cert-dir under /etc/pki"),
    ("allow", "@orch", "bin_t", "file", "execute execute_no_trans read open map", "runs systemd-run, gpgv"),
    ("allow", "@orch", "gpg_exec_t", "file", "execute execute_no_trans read open map", "gpgv where it is gpg_exec_t"),
    ("allow", "@orch", "var_lib_t", "file", "read open getattr", "file:// signature lookaside"),
    ("allow", "@orch", "hostpull_runtime_t", "file", "read", "gpgv's payload in its scratch dir"),
    ("allow", "@orch", "hostpull_worker_conf_t", "dir", "create add_name rmdir", "registries.conf.d in staging"),
    ("allow", "@orch", "hostpull_worker_conf_t", "lnk_file", "create unlink", "the root's top-level symlinks"),
    ("allow", "@init", "hostpull_worker_conf_t", "dir", "search mounton", "RootDirectory= and its mount points"),
    ("allow", "@init", "hostpull_worker_conf_t", "lnk_file", "read", "the root's bin -> usr/bin, chased by PID 1"),
    ("allow", "@worker", "hostpull_worker_conf_t", "lnk_file", "read", "its root's bin -> usr/bin"),
    ("allow", "@orch", "hostpull_worker_conf_t", "file", "create write unlink", "resolv.conf, hosts in staging"),
    ("allow", "@orch", "@orch", "process", "getsched setsched", "SCHED_BATCH (guest)"),
    ("allow", "@orch", "@orch", "unix_dgram_socket", "create connect write", "the journal (guest)"),
    ("allow", "@orch", "devlog_t", "sock_file", "write", "the journal's socket (guest)"),
    ("allow", "@orch", "sysctl_kernel_t", "file", "read open", "/proc/sys/kernel (guest)"),
    ("deny", "@orch", "@orch", "capability", "net_admin", "sd-bus falls back (dontaudit)"),
    ("allow", "@orch", "proc_t", "file", "read open", "systemd-run reads /proc/cmdline"),
    ("allow", "@orch", "cgroup_t", "file", "read open", "memory.peak of the worker unit"),
    ("allow", "@orch", "@orch", "unix_stream_socket", "create connect read write getopt", "socketpair, D-Bus"),
    ("allow", "@orch", "@orch", "process", "signal sigkill sigchld", "kills/reaps systemd-run"),
    ("allow", "@orch", "null_device_t", "chr_file", "read write open", "Stdio::null()"),
    ("allow", "@orch", "system_dbusd_runtime_t|system_dbusd_var_run_t", "sock_file", "write", "system bus socket"),
    ("allow", "@orch", "@dbusd", "unix_stream_socket", "connectto", "system bus"),
    ("allow", "@orch", "@dbusd", "dbus", "send_msg", "Hello, AddMatch"),
    ("allow", "@orch", "@init", "dbus", "send_msg", "calls to systemd"),
    ("allow", "@init", "@orch", "dbus", "send_msg", "replies and signals"),
    ("allow", "@orch", "@init", "system", "start status", "StartTransientUnit, ListUnitsByPatterns"),
    ("allow", "@orch", "@init", "system", "stop", "StopUnit of a worker unit (guest: USER_AVC)"),
    ("allow", "@orch", "@init", "system", "reload", "ResetFailedUnit of a worker unit (guest: USER_AVC)"),
    ("allow", "@orch", "proc_t", "filesystem", "getattr", "systemd-run statfs()es /proc (guest)"),
    ("allow", "@orch", "fs_t", "filesystem", "getattr", "the space check statvfs()es the destination (guest)"),
    ("allow", "@worker", "tmpfs_t", "dir", "search read", "/run/credentials/<unit> on tmpfs (guest)"),
    ("allow", "@worker", "tmpfs_t", "file", "read open getattr", "credential files on tmpfs (guest)"),
    ("deny", "@worker", "tmpfs_t", "file", "write", "credentials are read-only"),
    ("allow", "@orch", "systemd_transient_unit_t|systemd_unit_file_t", "service", "start stop status reload",
     "the transient worker unit"),
    ("allow", "@orch", "init_runtime_t|init_var_run_t", "dir", "search", "/run/systemd"),
    ("deny", "@orch", "@worker", "process", "transition dyntransition", "the worker is entered only through systemd"),
    ("deny", "@orch", "http_port_t", "tcp_socket", "name_connect", "root never talks to the network"),
    ("deny", "@orch", "@orch", "tcp_socket", "create", "root never talks to the network"),
    ("deny", "@orch", "@orch", "capability", "dac_override sys_admin", "needs no capability"),
    ("deny", "@orch", "user_home_t", "file", "read write append create relabelto link rename unlink setattr",
     "never a home directory, not even for an ostree import"),
    ("deny", "@orch", "user_home_dir_t", "dir", "write add_name remove_name relabelto", "never a home directory"),
    ("deny", "@orch", "@orch", "process", "setcurrent dyntransition", "stays hostpull_t"),

    # --- --dest ostree: hostpull_t stages the layout and runs the import, which
    # moves into a domain of its own (hostpull-ostree-import, src/confined/import.rs).
    ("tunable:hostpull_import_ostree", "@orch", "hostpull_ostree_exec_t", "file", "execute read open map",
     "hostpull runs /usr/libexec/hostpull-ostree-import"),
    ("tunable:hostpull_import_ostree", "@orch", "@import", "process", "transition", "into the import's domain"),
    ("tunable:hostpull_import_ostree", "@orch", "@import", "process2", "nnp_transition",
     "the service has NoNewPrivileges=yes"),
    ("tunable:hostpull_import_ostree", "@orch", "@import", "process", "sigkill", "a stopped pull kills the import"),
    ("allow", "@import", "hostpull_ostree_exec_t", "file", "entrypoint", "its own program"),
    ("allow", "@import", "sysctl_vm_overcommit_t", "file", "open read", "glibc malloc, as for root"),
    ("allow", "@import", "@orch", "fd", "use", "stdout and stderr are hostpull's pipes"),
    ("allow", "@import", "@orch", "fifo_file", "write", "the result and the error line"),
    ("allow", "@import", "@orch", "process", "sigchld", "hostpull's child"),
    ("deny", "@import", "hostpull_exec_t", "file", "entrypoint", "not through /usr/bin/hostpull"),
    ("deny", "@worker", "hostpull_ostree_exec_t", "file", "execute", "the worker never runs the import"),
    ("deny", "@orch", "hostpull_exec_t", "file", "execute_no_trans", "runs no second hostpull in its own domain"),
    ("deny", "@orch", "@orch", "process", "setfscreate", "labels nothing it creates by hand"),
    # The staging layout, REPO/tmp/hostpull-staging-*: hostpull_t writes, the import reads.
    ("filetrans:hostpull_staging_t if hostpull_import_ostree", "@orch", "hostpull_ostree_repo_t", "dir", "", "the staging directory"),
    ("tunable:hostpull_import_ostree", "@orch", "hostpull_staging_t", "file", "create write read open unlink",
     "the verified blobs"),
    ("tunable:hostpull_import_ostree", "@orch", "hostpull_ostree_repo_t", "dir", "search read add_name remove_name",
     "REPO/tmp, and the refs held() reads"),
    ("tunable:hostpull_import_ostree", "@orch", "hostpull_ostree_repo_t", "file", "read open",
     "the commits held() reads"),
    ("allow", "@import", "hostpull_staging_t", "file", "read open getattr", "the proxy serves the staged files"),
    ("deny", "@import", "hostpull_staging_t", "file", "write append create unlink", "never rewrites what root verified"),
    ("allow", "@import", "hostpull_exec_t", "file", "execute_no_trans read map", "the proxy is /usr/bin/hostpull"),
    ("deny", "@import", "hostpull_ostree_exec_t", "file", "execute_no_trans", "runs no second import in its domain"),
    ("allow", "@import", "@import", "unix_stream_socket", "create read write getopt", "the proxy's socketpair"),
    # hostpull_t writes no repository file and gives no label: that is the import's.
    ("deny", "@orch", "hostpull_ostree_repo_t", "file", "create write rename link unlink relabelfrom",
     "the repository is the import's"),
    ("deny", "@orch", "bin_t", "file", "relabelto link rename", "gives no label"),
    ("deny", "@orch", "etc_t", "file", "write append create relabelto", "/etc"),
    ("deny", "@orch", "@orch", "capability", "chown fowner fsetid setfcap dac_read_search",
     "the image's owners and modes are the import's"),
    # The repository's own files are hostpull_ostree_repo_t (hostpull.fc: /ostree/repo,
    # /sysroot/ostree/repo); its objects and the merge commit's checkout carry the
    # image's labels (bin_t, etc_t, shadow_t, var_run_t, policy_config_t stand for them here).
    ("allow", "@import", "hostpull_ostree_repo_t", "dir",
     "create write add_name remove_name rmdir search read relabelfrom", "the repository (tmp/, objects/XX/, refs/)"),
    ("allow", "@import", "hostpull_ostree_repo_t", "file",
     "create write read open map lock rename link unlink setattr relabelfrom",
     "config, refs, metadata objects, the O_TMPFILE of a new object"),
    ("allow", "@import", "hostpull_ostree_repo_t", "lnk_file",
     "create read rename unlink setattr relabelfrom", "a new symlink object in tmp/"),
    ("filetrans:hostpull_ostree_repo_t", "@import", "etc_t", "dir", "", "mkdirat() in the checkout's /usr/etc"),
    ("filetrans:hostpull_ostree_repo_t", "@import", "bin_t", "file", "", "an empty file copied into the checkout"),
    ("allow", "@import", "bin_t", "file",
     "relabelto setattr link rename unlink", "an object: labelled, futimens(), linked into objects/ and the checkout"),
    ("allow", "@import", "selinux_config_t", "file", "read open getattr relabelto",
     "objects read back: the image's policy, from the checkout"),
    ("allow", "@import", "policy_config_t", "file", "relabelto read open getattr link rename unlink setattr",
     "/usr/etc/selinux/*/policy/policy.NN of an OS image"),
    ("allow", "@import", "policy_config_t", "dir", "relabelto add_name remove_name write rmdir setattr search",
     "the checkout's /usr/etc/selinux/*/policy"),
    ("allow", "@import", "file_context_t", "file", "relabelto read open map",
     "the image's file_contexts, which libselinux maps (guest)"),
    ("allow", "@import", "hostpull_tmp_t", "file", "map", "the base's file_contexts.bin, copied (guest)"),
    ("allow", "@import", "devlog_t", "sock_file", "write", "libostree logs to the journal (guest)"),
    ("allow", "@import", "etc_t", "lnk_file", "relabelto link rename unlink", "a symlink object"),
    ("allow", "@import", "etc_t", "dir",
     "relabelto add_name remove_name write rmdir setattr", "the checkout's /usr/etc"),
    ("allow", "@import", "var_run_t", "dir", "relabelto rmdir setattr", "the image's empty /run"),
    ("allow", "@import", "shadow_t", "file", "relabelto setattr link unlink read",
     "/usr/etc/shadow of an OS image"),
    ("allow", "@orch", "urandom_device_t", "chr_file", "read open", "glib in root's process reads /dev/urandom"),
    ("allow", "@import", "urandom_device_t", "chr_file", "read open",
     "libostree and the ostree CLI read /dev/urandom"),
    ("allow", "@import", "locale_t", "file", "read open map", "the ostree CLI maps the locale"),
    ("allow", "@import", "cert_t", "file", "read open", "libcrypto reads /etc/ssl/openssl.cnf (guest)"),
    ("allow", "@import", "sysctl_kernel_t", "file", "read open", "libostree reads /proc/sys/kernel/random/boot_id (guest)"),
    ("allow", "@import", "@import", "capability", "chown fowner fsetid setfcap dac_read_search",
     "the image's owners, setuid/setgid bits, file capabilities, mode-0000 files"),
    ("allow", "@import", "hostpull_tmp_t", "file", "create write read open unlink",
     "the base image's policy, checked out in /tmp"),
    ("filetrans:hostpull_tmp_t", "@import", "tmp_t", "dir", "", "libostree's and ostree-ext's tmpdirs"),
    ("allow", "@import", "install_exec_t|bin_t", "file", "execute execute_no_trans read open map",
     "ostree-ext runs `ostree commit` (Fedora: install_exec_t)"),
    # Nothing outside the repository is written, whatever label an object gets.
    ("deny", "@import", "bin_t", "file", "write append create", "an image's label: only given, never written"),
    ("deny", "@import", "etc_t", "file", "write append create", "/etc"),
    ("deny", "@import", "shadow_t", "file", "write append create", "/etc/shadow"),
    ("deny", "@import", "policy_config_t", "file", "write append create", "the binary policy: labelled, never written"),
    ("deny", "@import", "system_conf_t|etc_t", "file", "write append create",
     "Fedora's /ostree/repo label: also /etc/yum.repos.d"),
    ("deny", "@import", "default_t", "file", "write append create", "unlabelled files"),
    ("deny", "@import", "var_log_t", "dir", "add_name remove_name write", "no entry in /var/log"),
    ("deny", "@import", "tmp_t", "file", "write create", "only its own files in /tmp"),
    ("deny", "@import", "user_home_t", "file", "read write relabelto link", "never a home directory"),
    ("deny", "@import", "@import", "tcp_socket", "create", "no network"),
    ("deny", "@import", "default_t", "file", "execute", "never runs what it imports"),
    ("deny", "@import", "security_t", "security", "load_policy setenforce setbool", "labels the policy, loads none"),
    ("deny", "@orch", "policy_config_t", "dir", "add_name relabelto", "never the binary policy"),
    ("deny", "@orch", "policy_config_t", "file", "relabelto", "never the binary policy"),
    ("deny", "@orch", "default_t", "file", "execute", "never runs what it imports"),
    # --- --dest containers-storage: root's skopeo writes the store in its own domain
    ("allow", "@orch", "@orch", "process", "setexec", "setexeccon() before root's skopeo"),
    ("allow", "@orch", "@storage", "process", "transition sigkill", "root's skopeo, in hostpull_storage_t"),
    ("allow", "@orch", "@storage", "process2", "nnp_transition", "NoNewPrivileges=yes"),
    ("allow", "@storage", "bin_t", "file", "entrypoint execute read open map", "skopeo, and its re-exec"),
    ("filetrans:hostpull_tmp_t", "@orch", "tmp_t", "dir", "", "the staging in /var/tmp"),
    ("allow", "@orch", "hostpull_tmp_t", "file", "create write link unlink", "the staging, and its dir: view"),
    ("allow", "@storage", "hostpull_tmp_t", "file", "read open getattr", "the copy reads the staging"),
    ("filetrans:container_var_lib_t", "@storage", "var_lib_t", "dir:containers", "", "/var/lib/containers"),
    ("filetrans:container_ro_file_t", "@storage", "container_var_lib_t", "dir:overlay", "", "the overlay layers"),
    ("filetrans:container_ro_file_t", "@storage", "container_var_lib_t", "dir:overlay-images", "", "the overlay images"),
    ("filetrans:container_ro_file_t", "@storage", "container_var_lib_t", "dir:overlay-layers", "", "the layer index"),
    ("allow", "@storage", "container_ro_file_t", "file", "create write setattr", "a layer's files"),
    ("allow", "@storage", "container_var_lib_t", "dir", "create add_name write mounton", "the store"),
    ("allow", "@storage", "root_t", "dir", "mounton", "/ made private in the re-exec's mount namespace"),
    ("allow", "@storage", "@storage", "capability", "sys_admin setfcap dac_override", "unpacking layers (guest)"),
    ("allow", "@orch", "container_var_lib_t", "file", "read open", "a lookaside in /var/lib/containers/sigstore"),
    ("deny", "@orch", "container_var_lib_t", "dir", "add_name write", "hostpull_t never writes the store"),
    ("deny", "@orch", "container_ro_file_t", "file", "write create", "nor a layer"),
    ("deny", "@orch", "@orch", "capability", "sys_admin", "nor mounts"),
    ("deny", "@storage", "@storage", "tcp_socket", "create", "no network"),
    ("deny", "@storage", "hostpull_runtime_t", "file", "read", "never the worker's credentials"),
    ("deny", "@storage", "hostpull_var_lib_t", "file", "write", "never a layout"),
    ("deny", "@worker", "@storage", "process", "transition", "the worker never enters it"),
    # --- hostpull rebase from a unit: the consumer runs in its own domain
    ("tunable:hostpull_rebase", "@orch", "@install", "process", "transition", "rpm-ostree, bootc: install_t"),
    ("tunable:hostpull_rebase", "@orch", "@install", "process2", "nnp_transition", "NoNewPrivileges=yes"),
    ("tunable:hostpull_rebase", "@orch", "install_exec_t", "file", "execute getattr open read",
     "/usr/bin/rpm-ostree, /usr/bin/bootc"),
    ("deny", "@orch", "install_exec_t", "file", "execute_no_trans", "never a consumer in hostpull_t"),
    ("deny", "@import", "@install", "process", "transition", "the import never runs a consumer"),
    ("deny", "@worker", "@install", "process", "transition", "nor does the worker"),
    ("deny", "@orch", "security_t", "security", "load_policy setenforce setbool", "no policy changes"),
    ("deny", "@orch", "@init", "file", "read", "PID 1's /proc (sampled, silently denied)"),
]


class Checker:
    def __init__(self, path):
        self.p = setools.SELinuxPolicy(path)
        a2w.init(path)
        self.names = {getattr(a2w, n): n for n in dir(a2w) if n.isupper()}
        self.types = {str(t) for t in self.p.types()}
        self.flavor = "fedora" if "init_var_run_t" in self.types else "refpolicy"
        self.passed = self.failed = self.skipped = 0
        self.by_source = {}

    def result(self, ok, msg):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {msg}")

    def pick(self, names):
        """The first of "a|b" that this policy has (or a, to fail visibly)."""
        choices = names.split("|")
        return next((n for n in choices if n in self.types), choices[0])

    def rules_from(self, stype):
        """The allow and type_transition rules whose source includes stype, with their
        targets expanded: one pass over the policy per source type (a TERuleQuery per
        row would take minutes)."""
        if stype not in self.by_source:
            st = self.p.lookup_type(stype)
            kinds = (setools.TERuletype.allow, setools.TERuletype.type_transition)
            self.by_source[stype] = [(r, {str(t) for t in r.target.expand()})
                                     for r in self.p.terules()
                                     if r.ruletype in kinds and st in r.source.expand()]
        return self.by_source[stype]

    def only_by(self, boolname, s, t, tclass, perm):
        """Every allow rule that grants s -> t:tclass perm is conditional on boolname."""
        t = t.split(":")[2]
        rules = [r for r, targets in self.rules_from(s.split(":")[2])
                 if r.ruletype == setools.TERuletype.allow and str(r.tclass) == tclass
                 and perm in r.perms and t in targets]
        for r in rules:
            try:
                cond = str(r.conditional)
            except setools.exception.RuleNotConditional:
                return False
            if boolname not in cond:
                return False
        return bool(rules)

    def filetrans(self, want, src, tgt, tclass, why):
        """src creating a tclass object (named, for "CLASS:NAME") in a tgt directory
        gets the type want names, under the condition it names if any."""
        t = self.pick(tgt)
        tclass, _, name = tclass.partition(":")
        got = []
        for r, targets in self.rules_from(ALIASES.get(src, src).split(":")[2]):
            if (r.ruletype != setools.TERuletype.type_transition or str(r.tclass) != tclass
                    or t not in targets):
                continue
            try:
                filename = r.filename
            except setools.exception.TERuleNoFilename:
                filename = ""
            if filename != name:
                continue
            try:
                cond = str(r.conditional)
            except setools.exception.RuleNotConditional:
                cond = ""
            got.append(f"{r.default}" + (f" if {cond}" if cond else ""))
        named = f"{tclass}:{name}" if name else tclass
        self.result(got == [want], f"filetrans:{want} {src} {tgt} {named} ({why}): {got or 'no type_transition'}")

    def access(self, verdict, src, tgt, tclass, perms, why):
        if verdict.startswith("filetrans:"):
            self.filetrans(verdict.partition(":")[2], src, tgt, tclass, why)
            return
        if verdict.startswith(("tunable:", "always:")):
            always, boolname = verdict.startswith("always:"), verdict.partition(":")[2]
            s = ALIASES.get(src, src)
            t = ALIASES.get(tgt) or (tgt if ":" in tgt else obj(self.pick(tgt)))
            bad = []
            for perm in perms.split():
                rc, _ = a2w.analyze(s, t, tclass, [perm])
                name = self.names.get(rc, str(rc))
                if name != "ALLOW":
                    bad.append(f"{perm}={name}")
                elif self.only_by(boolname, s, t, tclass, perm) == always:
                    bad.append(f"{perm}=ALLOW {'only' if always else 'not only'} by {boolname}")
            self.result(not bad, f"{verdict} {src} {tgt} {tclass} ({why}): {', '.join(bad)}")
            return
        verdict, _, only = verdict.partition("/")
        if only and only != self.flavor:
            self.skipped += 1
            return
        s = ALIASES.get(src, src)
        t = ALIASES.get(tgt) or (tgt if ":" in tgt else obj(self.pick(tgt)))
        bad = []
        if verdict == "allow" and self.names.get(a2w.analyze(s, t, tclass, perms.split())[0]) == "ALLOW":
            perms = ""  # all allowed at once; otherwise ask one by one for the details
        for perm in perms.split():
            rc, bools = a2w.analyze(s, t, tclass, [perm])
            name = self.names.get(rc, str(rc))
            if verdict == "allow":
                ok = name == "ALLOW"
            else:
                ok = name in ("TERULE", "CONSTRAINT", "RBAC", "DONTAUDIT")
            if not ok:
                bad.append(f"{perm}={name}" + (f" bools={bools}" if bools else ""))
        label = f"{verdict} {src} {tgt} {tclass} ({why})"
        self.result(not bad, f"{label}: {', '.join(bad)}")

    def valid_context(self, ctx):
        rc, _ = a2w.analyze(ctx, ctx, "process", ["signull"])
        name = self.names.get(rc, str(rc))
        self.result(name not in ("BADSCON", "BADTCON"), f"context {ctx} is not valid ({name})")

    def structure(self):
        """Over all rules, whatever the booleans (one pass over the policy):
        - only init_t may transition into the worker, and only hostpull_t into the
          import and the store's domain, apart from unconfined domains (which may
          transition anywhere);
        - no type_transition lands in the worker or the store's domain: both are
          entered on bin_t, and that would pull other programs into them (what
          init_daemon_domain() on bin_t would do);
        - the only type_transition into the import is hostpull_t's on
          hostpull_ostree_exec_t;
        - init_t enters hostpull_t through hostpull_exec_t;
        - hostpull_t enters the import, the store's domain and, where the policy has it, install_t
          (the rebase consumer), and no other domain;
        - no allow rule names the worker on a capability class."""
        unconfined = {str(t) for t in self.p.lookup_typeattr("unconfined_domain_type").expand()}
        caps = {"capability", "capability2", "cap_userns", "cap2_userns"}
        domains = {"hostpull_worker_t": "init_t", "hostpull_ostree_t": "hostpull_t",
                   "hostpull_storage_t": "hostpull_t"}
        entering = {d: set() for d in domains}
        auto = {d: [] for d in domains}
        cap_rules, orch_entry, leaving = [], False, set()
        worker = self.p.lookup_type("hostpull_worker_t")
        for r in self.p.terules():
            tclass = str(r.tclass)
            if tclass == "process" and r.ruletype == setools.TERuletype.type_transition:
                if str(r.default) in domains:
                    auto[str(r.default)].append(str(r))
                elif (str(r.default) == "hostpull_t" and str(r.target) == "hostpull_exec_t"
                      and "init_t" in {str(t) for t in r.source.expand()}):
                    orch_entry = True
            elif r.ruletype != setools.TERuletype.allow:
                continue
            elif tclass == "process" and r.perms & {"transition", "dyntransition"}:
                if "hostpull_t" in {str(t) for t in r.source.expand()}:
                    leaving |= {str(t) for t in r.target.expand()}
                for d in entering:
                    if d in {str(t) for t in r.target.expand()}:
                        entering[d] |= {str(t) for t in r.source.expand()}
            elif tclass in caps and worker in r.source.expand():
                cap_rules.append(str(r))
        for d, parent in domains.items():
            extra = entering[d] - unconfined - {parent}
            self.result(parent in entering[d] and not extra,
                        f"domains that may enter {d}: {sorted(entering[d] - unconfined)}, expected only {parent}")
        for d in ("hostpull_worker_t", "hostpull_storage_t"):
            self.result(not auto[d], f"type_transition rules into {d}: {auto[d][:5]}")
        want = ["type_transition hostpull_t hostpull_ostree_exec_t:process hostpull_ostree_t;"]
        self.result([a.split(" [")[0] for a in auto["hostpull_ostree_t"]] == want,
                    f"type_transition rules into hostpull_ostree_t: {auto['hostpull_ostree_t'][:5]}, expected {want}")
        self.result(orch_entry, "no type_transition init_t hostpull_exec_t:process hostpull_t")
        want = {"hostpull_ostree_t", "hostpull_storage_t"} | ({"install_t"} & self.types)
        self.result(leaving == want, f"domains hostpull_t may enter: {sorted(leaving)}, expected {sorted(want)}")
        self.result(not cap_rules, f"capability rules for hostpull_worker_t: {cap_rules[:5]}")

    def not_permissive(self):
        perm = [str(t) for t in self.p.types() if t.ispermissive and str(t).startswith("hostpull")]
        self.result(not perm, f"permissive hostpull types: {perm}")


def main():
    args = sys.argv[1:]
    table_only = "--table-only" in args
    if table_only:
        args.remove("--table-only")
    if len(args) != 1:
        sys.exit(f"usage: {sys.argv[0]} [--table-only] POLICY")
    c = Checker(args[0])
    c.valid_context(WORKER)
    c.valid_context(ORCH)
    c.valid_context(IMPORT)
    c.valid_context(INSTALL)
    for row in EXPECT:
        c.access(*row)
    if not table_only:
        c.structure()
        c.not_permissive()
    if c.skipped:
        print(f"({c.skipped} rows are for refpolicy only; this is a {c.flavor} policy)")
    print(f"access: {c.passed} passed, {c.failed} failed")
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
