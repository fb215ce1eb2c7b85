//! Benchmark peer (not part of hostpull): pull a registry image into an ostree
//! repository the way rpm-ostree and bootc do, with ostree-ext's
//! `ImageImporter` (`prepare()`, then `import()`) through one skopeo
//! `experimental-image-proxy`, as root, unsandboxed, one layer after another.
//! The same ostree-ext (Cargo.lock) and the skopeo given, so that
//! bench/ostree-peer.sh compares hostpull's `--dest ostree:` with it.
//!
//!     cargo run --release --features ostree --example ostree-peer -- \
//!         HOST/REPO:TAG REPO AUTHFILE CERT_DIR SKOPEO
//!
//! Prints the merge commit.

#[cfg(feature = "ostree")]
fn main() -> anyhow::Result<()> {
    use ostree_ext::container::OstreeImageReference;
    use ostree_ext::container::store::{ImageImporter, ImageProxyConfig, PrepareResult};
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [image, repo, authfile, certs, skopeo] = args.as_slice() else {
        anyhow::bail!("usage: ostree-peer HOST/REPO:TAG REPO AUTHFILE CERT_DIR SKOPEO");
    };
    let repo = ostree_ext::ostree::Repo::new_for_path(repo);
    repo.open(ostree_ext::gio::Cancellable::NONE)?;
    let imgref =
        OstreeImageReference::try_from(format!("ostree-unverified-registry:{image}").as_str())?;
    // A skopeo of our choice replaces ostree-ext's default (`setpriv --reuid
    // nobody` as root); rpm-ostree runs it as root.
    let config = ImageProxyConfig {
        authfile: Some(authfile.into()),
        certificate_directory: Some(certs.into()),
        skopeo_cmd: Some(std::process::Command::new(skopeo)),
        ..Default::default()
    };
    let commit = tokio::runtime::Runtime::new()?.block_on(async {
        let mut importer = ImageImporter::new(&repo, &imgref, config).await?;
        let state = match importer.prepare().await? {
            PrepareResult::AlreadyPresent(s) => s,
            PrepareResult::Ready(p) => importer.import(p).await?,
        };
        anyhow::Ok(state.merge_commit.clone())
    })?;
    println!("{commit}");
    Ok(())
}

#[cfg(not(feature = "ostree"))]
fn main() {
    eprintln!("error: ostree-peer needs --features ostree");
    std::process::exit(2);
}
