//! The `hostpull` command: everything is in the library ([`hostpull::cli`]).

fn main() {
    std::process::exit(hostpull::cli::run_main());
}
