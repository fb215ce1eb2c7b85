fn main() {
    std::process::exit(hostpull::cli::run_main());
}
