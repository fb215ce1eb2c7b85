//! `hostpull-ostree-import`: the ostree import of `hostpull pull --dest
//! ostree:`, in a process of its own ([`hostpull::internals::ostree_import`]).

fn main() {
    std::process::exit(hostpull::internals::ostree_import(
        std::env::args_os().skip(1).collect(),
    ));
}
