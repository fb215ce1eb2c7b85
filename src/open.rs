//! One way to open a file that a user, a configuration or a pull names, to
//! read it: only a regular file is read, and that is checked on the open file
//! (`fstat`), never on the path before it is opened, so that what was checked
//! is what is read. The open never waits: `O_NONBLOCK` makes opening a FIFO
//! return at once (it is then refused as not a regular file), where a plain
//! open would wait forever for a writer.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Whether the last component of a path may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Followed: a CA bundle or an authfile may well be a link.
    Follow,
    /// Refused (`O_NOFOLLOW`): the file must be the name itself.
    Refuse,
}

/// The error of a file that is not a regular one (`InvalidInput`).
fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")
}

/// The flags every read of a named file is opened with.
pub fn flags(links: Links) -> OFlags {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    match links {
        Links::Follow => flags,
        Links::Refuse => flags | OFlags::NOFOLLOW,
    }
}

/// `fd`, opened with [`flags`], as a file to read if it is a regular file, with
/// its length; an `InvalidInput` error if it is anything else.
pub fn regular_fd(fd: OwnedFd) -> io::Result<(File, u64)> {
    let st = rustix::fs::fstat(&fd)?;
    if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() {
        return Err(not_regular());
    }
    // Reads of a regular file never block; blocking mode is restored for
    // whoever reads it next (a child it is handed to).
    rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
    Ok((File::from(fd), u64::try_from(st.st_size).unwrap_or(0)))
}

/// Open `path` to read, if it is a regular file: the file and its length.
pub fn regular(path: &Path, links: Links) -> io::Result<(File, u64)> {
    regular_fd(rustix::fs::open(path, flags(links), Mode::empty())?)
}

/// The bytes of `fd`, opened with [`flags`], if it is a regular file.
pub fn read_fd(fd: OwnedFd) -> io::Result<Vec<u8>> {
    use io::Read as _;
    let (file, len) = regular_fd(fd)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    (&file).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The bytes of `path` if it is a regular file.
pub fn read(path: &Path, links: Links) -> io::Result<Vec<u8>> {
    read_fd(rustix::fs::open(path, flags(links), Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A regular file is read, through a link only where links are followed;
    /// a directory, a link where they are not, and a FIFO (at once, without
    /// a writer) are refused.
    #[test]
    fn only_a_regular_file_is_read_and_a_fifo_never_waits() {
        let td = tempfile::tempdir().unwrap();
        let file = td.path().join("file");
        std::fs::write(&file, b"bytes").unwrap();
        let link = td.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let fifo = td.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        for links in [Links::Follow, Links::Refuse] {
            assert_eq!(read(&file, links).unwrap(), b"bytes");
            let (_, len) = regular(&file, links).unwrap();
            assert_eq!(len, 5);
            for bad in [td.path(), fifo.as_path()] {
                let e = read(bad, links).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
            }
            assert_eq!(
                read(&td.path().join("none"), links).unwrap_err().kind(),
                io::ErrorKind::NotFound
            );
        }
        assert_eq!(read(&link, Links::Follow).unwrap(), b"bytes");
        assert!(read(&link, Links::Refuse).is_err());
        // Blocking mode is back on the file handed out.
        let (f, _) = regular(&file, Links::Follow).unwrap();
        assert!(
            !rustix::fs::fcntl_getfl(&f)
                .unwrap()
                .contains(OFlags::NONBLOCK)
        );
    }
}
