//! Test and benchmark fixture maker (not part of hostpull): encapsulate an ostree
//! commit as an OCI image layout with ostree-ext, as FCOS/RHCOS and bootc base
//! images are made. Debian's `ostree` CLI has no `container` subcommand.
//!
//!     cargo run --release --features ostree --example ostree-encapsulate -- \
//!         SRC_REPO REF LAYOUT TAG
//!
//! Used by bench/ostree.sh.

#[cfg(feature = "ostree")]
fn main() -> anyhow::Result<()> {
    use ostree_ext::container::{Config, ImageReference, Transport, encapsulate};
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, rev, layout, tag] = args.as_slice() else {
        anyhow::bail!("usage: ostree-encapsulate SRC_REPO REF LAYOUT TAG");
    };
    let repo = ostree_ext::ostree::Repo::new_for_path(src);
    repo.open(ostree_ext::gio::Cancellable::NONE)?;
    let dest = ImageReference {
        transport: Transport::OciDir,
        name: format!("{layout}:{tag}"),
    };
    let digest = tokio::runtime::Runtime::new()?.block_on(encapsulate(
        &repo,
        rev,
        &Config::default(),
        None,
        &dest,
    ))?;
    println!("{digest}");
    Ok(())
}

#[cfg(not(feature = "ostree"))]
fn main() {
    eprintln!("error: ostree-encapsulate needs --features ostree");
    std::process::exit(2);
}
