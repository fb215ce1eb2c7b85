//! `--max-rate`: a token bucket that paces root's reads from the worker's blob
//! pipes, one bucket for the whole pull (every blob in flight draws from it).
//!
//! Pacing the reads is enough to slow the registry: a pipe root does not read
//! fills, skopeo's write blocks, its TCP receive window closes, and the
//! registry stops sending. The worker needs no change and no privilege.
//!
//! What the cap holds is what the registry sends, and the registry runs ahead
//! of root: a blob that opens fills the buffers in between at once (the blob
//! pipe, skopeo's copy buffer, its socket's receive window: [`LEAD`]), and
//! those bytes cross the link before root reads them. The burst is therefore
//! kept to what the cap allows:
//! - under a cap the pipe keeps the kernel's 64 KiB (fetch.rs widens it to
//!   1 MiB only without a cap), so a blob's buffers are ~[`LEAD`], not 1.3 MiB;
//! - only as many blobs are open at once as the cap can absorb: their buffers
//!   together are at most [`SPREAD`] of a second's cap ([`in_flight`]), so
//!   one blob at a time below 8 MiB/s; a blob in flight that is not read still
//!   fills its buffers;
//! - a blob is charged [`LEAD`] (at most its size) when it opens, on top of its
//!   bytes as they are read ([`Pacer::opened`]), and the next blob opens only
//!   once the bucket is out of debt ([`Pacer::ready`]). The registry is thus
//!   quiet on both sides of a burst: before it, while root drains the last
//!   blob's buffers (bytes the registry had sent already), and after it, while
//!   root waits the charge off. This costs [`LEAD`] of the cap per blob;
//! - the blobs in flight are read one after another, in the order they were
//!   opened ([`Pacer::read`]), so they end, and the next ones start, one at a
//!   time.
//!
//! The bucket holds at most [`SLICE`] of the rate, and a read asks for at most
//! as much, so root reads no more than the cap plus a few slices in any window.
//! A read is paid for after it returns (the bucket may go into debt) and the
//! reader then waits the debt off: readers that share the bucket queue up
//! behind each other's debts, so together they keep to the cap. While the
//! bucket is in debt ([`Bucket::free_at`]) the stall watchdog does not count:
//! a paced pull is not a stalled one. A blob of [`LEAD`] at a cap of 64 KiB/s
//! is 4 s of debt.
//!
//! What root does not control is the rest of the worker's socket buffer:
//! Linux grows a socket's receive buffer as its reader drains it, to twice
//! what it copied in a round trip plus 16 segments (`tcp_rcv_space_adjust`).
//! What that comes to at the registry, on the rig's loopback and before this
//! design, is measured in docs/benchmarks.md, "Bandwidth cap"; tests/once/rate.rs
//! states its tolerance from it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The share of a second's bytes that the bucket holds and one read asks for.
pub const SLICE: Duration = Duration::from_millis(50);
/// The lowest cap accepted, bytes a second: a slice is then still 51 bytes.
pub const MIN_RATE: u64 = 1024;
/// How far the registry runs ahead of root's reads of one blob under a cap:
/// the 64 KiB blob pipe, skopeo's 32 KiB copy buffer, and its socket's
/// receive window (skopeo speaks HTTP/1.1 to registries: the registry log says
/// so for 1.9.3, 1.18 and 1.22), which starts at tcp_rmem's 128 KiB. Measured
/// at a forwarder with a blob opened and not read: 190 to 250 KiB, more once
/// Linux grew the buffer.
pub const LEAD: u64 = 256 << 10;
/// The most a second's cap that the buffers of the blobs open at once may
/// hold: 1/16 s, so 4 MiB/s a blob.
pub const SPREAD: u64 = 16;

/// How many blobs to keep open at once under a cap of `rate`, at most `most`.
pub fn in_flight(rate: u64, most: usize) -> usize {
    usize::try_from(rate / SPREAD / LEAD)
        .unwrap_or(usize::MAX)
        .clamp(1, most.max(1))
}

/// The arithmetic, with the clock passed in.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Bytes a second.
    rate: f64,
    /// The most the bucket holds, in bytes.
    burst: f64,
    /// Bytes that may be read now; negative while in debt.
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket for `rate` bytes a second.
    pub fn new(rate: u64, now: Instant) -> Self {
        let burst = (rate as f64 * SLICE.as_secs_f64()).max(1.0);
        Self {
            rate: rate as f64,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// The most one read should ask for, up to `max`.
    pub fn chunk(&self, max: usize) -> usize {
        (self.burst as usize).clamp(1, max)
    }

    /// `n` bytes were read at `now`: how long the reader must wait before it
    /// reads again.
    pub fn take(&mut self, n: usize, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    /// When the bucket is out of debt: until then the readers are held back.
    pub fn free_at(&self) -> Instant {
        self.last + Duration::from_secs_f64(self.tokens.min(0.0) / -self.rate)
    }
}

/// A [`Bucket`] shared by the readers of one pull, on tokio's clock, and
/// whose turn it is to read.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: u64,
    bucket: Arc<Mutex<Bucket>>,
    /// The blob whose turn it is to read: blobs are read one after another,
    /// in the order they were opened.
    turn: Arc<std::sync::atomic::AtomicUsize>,
    next: Arc<tokio::sync::Notify>,
}

impl Pacer {
    /// A bucket for `rate` bytes a second.
    pub fn new(rate: u64) -> Self {
        Self {
            rate,
            bucket: Arc::new(Mutex::new(Bucket::new(rate, Instant::now()))),
            turn: Arc::default(),
            next: Arc::default(),
        }
    }

    /// The cap, bytes a second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// A blob of `size` was opened: the registry fills its buffers now. Charge
    /// them ([`LEAD`], at most `size`); the next [`Pacer::ready`] waits it off.
    pub fn opened(&self, size: u64) {
        let n = usize::try_from(LEAD.min(size)).unwrap_or(usize::MAX);
        self.bucket.lock().unwrap().take(n, Instant::now());
    }

    /// Resolves once the bucket is out of debt: the time to open a blob.
    pub async fn ready(&self) {
        tokio::time::sleep_until(self.free_at().into()).await;
    }

    /// `n` bytes of blob number `blob` (of `size`) were read, after `before`:
    /// wait for its turn, pay, and pass the turn on at its end. The first
    /// read pays at once, before the turn.
    pub async fn read(&self, blob: usize, size: u64, before: u64, n: u64) {
        if before > 0 {
            loop {
                let next = self.next.notified();
                if self.turn.load(std::sync::atomic::Ordering::Acquire) >= blob {
                    break;
                }
                next.await;
            }
        }
        self.paid(n).await;
        if before + n >= size {
            self.done(blob);
        }
    }

    /// Blob number `blob` is over (its pipe ended, perhaps short or empty):
    /// the next one reads.
    pub fn done(&self, blob: usize) {
        self.turn
            .fetch_max(blob + 1, std::sync::atomic::Ordering::AcqRel);
        self.next.notify_waiters();
    }

    /// See [`Bucket::free_at`].
    pub fn free_at(&self) -> Instant {
        self.bucket.lock().unwrap().free_at()
    }

    /// See [`Bucket::chunk`].
    pub fn chunk(&self, max: usize) -> usize {
        self.bucket.lock().unwrap().chunk(max)
    }

    /// Pay for `n` bytes just read, waiting while the pull is over its cap.
    pub async fn paid(&self, n: u64) {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let wait = self.bucket.lock().unwrap().take(n, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// `n` bytes a second as people read it: `20 MiB/s`, `500 KiB/s`, `1.5 MiB/s`.
pub fn human(n: u64) -> String {
    let (unit, div) = match n {
        n if n >= 1 << 30 => ("GiB", 1u64 << 30),
        n if n >= 1 << 20 => ("MiB", 1 << 20),
        n if n >= 1 << 10 => ("KiB", 1 << 10),
        _ => return format!("{n} B/s"),
    };
    let v = n as f64 / div as f64;
    if n.is_multiple_of(div) {
        format!("{} {unit}/s", n / div)
    } else {
        format!("{v:.1} {unit}/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A full bucket lets one slice through at once; after that every byte
    /// costs 1/rate, and idle time refills it only up to one slice.
    #[test]
    fn bucket_arithmetic() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10 * MIB, t0);
        let slice = (10 * MIB / 20) as usize; // 50 ms of 10 MiB/s
        assert_eq!(b.chunk(1 << 20), slice);
        assert_eq!(b.chunk(1000), 1000, "never more than the read buffer");
        assert_eq!(b.take(slice, t0), Duration::ZERO);
        // In debt by one slice: 50 ms.
        assert_eq!(b.take(slice, t0), ms(50));
        // A second reader at the same instant queues behind the first's debt.
        assert_eq!(b.take(slice, t0), ms(100));
        // Until then the readers are held back.
        assert_eq!(b.free_at(), t0 + ms(100));
        // 100 ms later the debt is paid; a read of a slice costs 50 ms again.
        assert_eq!(b.take(slice, t0 + ms(100)), ms(50));
        // A long pause refills only one slice: the next two slices cost 0 and 50 ms.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(b.take(slice, later), Duration::ZERO);
        assert_eq!(b.take(slice, later), ms(50));
        // A clock that goes back (another reader took the lock with an older
        // instant) neither refills nor panics.
        assert_eq!(b.take(0, later - ms(30)), ms(50));
        // Reads of 0 bytes (the end of a pipe) cost nothing.
        let mut b = Bucket::new(10 * MIB, t0);
        assert_eq!(b.take(0, t0), Duration::ZERO);
        assert_eq!(b.free_at(), t0, "no debt: free now");
    }

    /// One blob at a time until a second one's buffers fit in 1/16 s of
    /// the cap; never more than asked, never none.
    #[test]
    fn blobs_in_flight_by_cap() {
        for (rate, want) in [
            (MIN_RATE, 1),
            (512 << 10, 1),
            (4 * MIB, 1),
            (8 * MIB, 2),
            (12 * MIB, 3),
            (16 * MIB, 4),
            (1 << 30, 4),
        ] {
            assert_eq!(in_flight(rate, 4), want, "{rate}");
        }
        assert_eq!(in_flight(1 << 30, 0), 1);
    }

    /// Opening a blob charges its buffers, at most its size, and the next
    /// open waits them off.
    #[tokio::test(flavor = "current_thread")]
    async fn opening_a_blob_charges_its_buffers() {
        // The bucket holds 50 ms of the rate: LEAD.
        let p = Pacer::new(20 * LEAD);
        p.opened(1000);
        assert!(
            p.free_at() <= Instant::now(),
            "1000 bytes: within the bucket"
        );
        p.opened(64 * MIB);
        p.opened(64 * MIB);
        // In debt by LEAD less 1000 bytes: 50 ms.
        let t = Instant::now();
        p.ready().await;
        let waited = t.elapsed();
        assert!(waited >= ms(45) && waited < ms(500), "{waited:?}");
    }

    #[test]
    fn slow_caps_still_read_something() {
        let t0 = Instant::now();
        let b = Bucket::new(MIN_RATE, t0);
        assert_eq!(b.chunk(1 << 20), 51);
        let b = Bucket::new(1, t0);
        assert_eq!(b.chunk(1 << 20), 1);
    }

    /// Four readers that each read a chunk whenever their wait is over, on a
    /// simulated clock (the pipes always have data): together they keep to
    /// the cap over every window of 1 s within a bucket and a chunk per reader, no
    /// reader waits longer than the slices in flight take, and over 10 s the
    /// average is the cap.
    #[test]
    fn readers_together_keep_to_the_cap() {
        for rate in [MIN_RATE, 500 << 10, 20 * MIB, 64 * MIB, 1 << 30] {
            let t0 = Instant::now();
            let mut b = Bucket::new(rate, t0);
            let chunk = b.chunk(1 << 20);
            let mut next = [Duration::ZERO; 4];
            let mut reads: Vec<(Duration, usize)> = Vec::new();
            let mut longest = Duration::ZERO;
            let end = Duration::from_secs(10);
            loop {
                let (i, &at) = next.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
                if at >= end {
                    break;
                }
                reads.push((at, chunk));
                let wait = b.take(chunk, t0 + at);
                longest = longest.max(wait);
                next[i] = at + wait;
            }
            let total: usize = reads.iter().map(|r| r.1).sum();
            let avg = total as f64 / end.as_secs_f64();
            assert!(
                (avg - rate as f64).abs() <= rate as f64 * 0.01 + (5 * chunk) as f64 / 10.0,
                "{rate}: average {avg}"
            );
            // A full bucket at the start, and a chunk read by each reader.
            let slack = b.burst as usize + 4 * chunk;
            for w in 0..90 {
                let from = ms(w * 100);
                let n: usize = reads
                    .iter()
                    .filter(|(t, _)| *t >= from && *t < from + Duration::from_secs(1))
                    .map(|r| r.1)
                    .sum();
                assert!(
                    n <= rate as usize + slack,
                    "{rate}: {n} bytes in 1 s from {from:?}"
                );
            }
            // Four readers in debt by one chunk each: 4 chunks' time at most.
            let bound = Duration::from_secs_f64(4.0 * chunk as f64 / rate as f64 + 1e-6);
            assert!(longest <= bound, "{rate}: waited {longest:?} > {bound:?}");
            assert!(longest < Duration::from_millis(250), "{rate}: {longest:?}");
        }
    }

    /// Blob 1 reads on (after its first read) only once blob 0 is over: read
    /// to its size, or ended (an empty or short pipe).
    #[tokio::test(flavor = "current_thread")]
    async fn blobs_read_in_turn() {
        for end_by_size in [true, false] {
            let p = Pacer::new(1 << 30);
            p.read(1, 10, 0, 5).await;
            let second = tokio::spawn({
                let p = p.clone();
                async move { p.read(1, 10, 5, 5).await }
            });
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert!(!second.is_finished(), "blob 1 waits for blob 0");
            if end_by_size {
                p.read(0, 10, 0, 10).await;
            } else {
                p.done(0);
            }
            tokio::time::timeout(Duration::from_secs(10), second)
                .await
                .expect("blob 1 reads once blob 0 is over")
                .unwrap();
        }
    }

    #[test]
    fn human_rates() {
        for (n, want) in [
            (20 * MIB, "20 MiB/s"),
            (500 << 10, "500 KiB/s"),
            (3 * MIB / 2, "1.5 MiB/s"),
            (2 << 30, "2 GiB/s"),
            (1000, "1000 B/s"),
        ] {
            assert_eq!(human(n), want);
        }
    }
}
