//! The `hostpull` command: everything is in the library ([`hostpull::cli`]),
//! the programs it starts as hidden verbs included.

fn main() {
    std::process::exit(hostpull::cli::run_main());
}
