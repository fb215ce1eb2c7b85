//! What a pull reports: progress while it runs (`--progress-fd` events, bars
//! on a terminal), the final JSON object on stdout (`--json`) and the human
//! summary on stderr.

use crate::digest::Sha256Digest;

/// Where a pull's progress goes: `--progress-fd` events and, when stderr is a
/// terminal, bars. fetch feeds both from the same samples, so they agree.
#[derive(Debug)]
pub struct Progress {
    fd: ProgressFd,
    bars: Option<Bars>,
}

/// One blob of the image, as progress shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobState {
    /// The blob's digest.
    pub digest: Sha256Digest,
    /// "config" or "layer".
    pub what: &'static str,
    /// Bytes read so far.
    pub bytes: u64,
    /// The blob's size.
    pub total: u64,
    /// It was in the layout before the pull: nothing to fetch.
    pub cached: bool,
}

impl Progress {
    /// `--progress-fd N` if given, and bars if `screen` is a terminal.
    pub fn new(fd: Option<i32>, screen: &Screen) -> anyhow::Result<Self> {
        Ok(Self {
            fd: ProgressFd::open(fd)?,
            bars: screen.0.clone().map(Bars::new),
        })
    }

    /// Under `--max-rate`, the bars and the events show the cap by the rate.
    pub fn with_max_rate(mut self, max_rate: Option<u64>) -> Self {
        self.fd.max_rate = max_rate;
        if let Some(b) = &mut self.bars {
            b.max_rate = max_rate;
        }
        self
    }

    /// Whether anyone is told about bytes: fetch samples them only then.
    pub fn enabled(&self) -> bool {
        self.bars.is_some() || self.fd.enabled()
    }

    /// A stage of the pull: `step` of `total`.
    pub fn steps(&self, description: &str, step: u64, total: u64) {
        self.fd.steps(description, step, total);
        if let Some(b) = &self.bars {
            b.steps(description);
        }
    }

    /// Where every blob of the image stands. The events are rate-limited, and
    /// `last` (the blobs are all in) is always sent.
    pub fn blobs(&self, blobs: &[BlobState], last: bool) {
        self.fd.bytes("fetching blobs", blobs, last);
        if let Some(b) = &self.bars {
            b.update(blobs);
        }
    }

    /// The pull is over: the last step, and the bars leave the screen so that
    /// what follows (the summary, a hand-off's output) reads cleanly.
    pub fn done(&self) {
        self.fd.steps("done", 3, 3);
        if let Some(b) = &self.bars {
            b.clear();
        }
    }
}

/// On an error the bars go too, before `error: …` is printed.
impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.bars {
            b.clear();
        }
    }
}

/// stderr when it is a terminal: bars draw there, and log lines are written
/// around them. Elsewhere (a pipe, a file, the journal) it holds nothing, and
/// nothing is drawn.
#[derive(Debug, Clone, Default)]
pub struct Screen(Option<indicatif::MultiProgress>);

impl Screen {
    /// The process's stderr, with bars if it is a terminal.
    pub fn stderr() -> Self {
        use std::io::IsTerminal as _;
        Self(std::io::stderr().is_terminal().then(|| {
            indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::stderr())
        }))
    }

    /// A writer for log lines: the bars are lifted while a line is written, so
    /// the line lands above them instead of inside them.
    pub fn log_writer(&self) -> LogWriter {
        LogWriter(self.0.clone())
    }
}

/// See [`Screen::log_writer`].
#[derive(Debug)]
pub struct LogWriter(Option<indicatif::MultiProgress>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let line = || std::io::stderr().write_all(buf);
        match &self.0 {
            Some(multi) => multi.suspend(line),
            None => line(),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The bars: a total on top, then one per blob, those to fetch first (a
/// screen too short for all shows the ones that move), reused ones last.
#[derive(Debug)]
struct Bars {
    multi: indicatif::MultiProgress,
    drawn: std::sync::Mutex<Option<Drawn>>,
    /// `--max-rate`, shown after the rate on the total line.
    max_rate: Option<u64>,
}

/// What is on screen.
#[derive(Debug)]
struct Drawn {
    total: indicatif::ProgressBar,
    /// Each blob's bar and the label it shows now.
    blobs: Vec<(Sha256Digest, indicatif::ProgressBar, &'static str)>,
}

/// `total` and `blobs` share their columns: what, digest or count, bar, bytes,
/// and the rate or the blob's state.
const BAR_COLUMNS: &str =
    "{prefix:6} {msg:12} [{wide_bar}] {binary_bytes:>10}/{binary_total_bytes:<10}";

fn bar_style(last_column: &str) -> indicatif::ProgressStyle {
    indicatif::ProgressStyle::with_template(&format!("{BAR_COLUMNS} {last_column}"))
        .expect("a valid template")
        .progress_chars("=> ")
}

impl Bars {
    fn new(multi: indicatif::MultiProgress) -> Self {
        Self {
            multi,
            drawn: Default::default(),
            max_rate: None,
        }
    }

    /// The total line, drawn at the first news.
    fn start(&self) -> Drawn {
        let total = indicatif::ProgressBar::no_length()
            .with_style(
                indicatif::ProgressStyle::with_template("{prefix:6} {msg}")
                    .expect("a valid template"),
            )
            .with_prefix("total");
        Drawn {
            total: self.multi.add(total),
            blobs: Vec::new(),
        }
    }

    /// Before the blobs are known, the total line names the stage.
    fn steps(&self, description: &str) {
        let mut drawn = self.drawn.lock().unwrap();
        let d = drawn.get_or_insert_with(|| self.start());
        if d.blobs.is_empty() {
            d.total.set_message(description.to_owned());
        }
    }

    fn update(&self, blobs: &[BlobState]) {
        let mut drawn = self.drawn.lock().unwrap();
        let d = drawn.get_or_insert_with(|| self.start());
        if d.blobs.is_empty() {
            let rate = match self.max_rate {
                Some(r) => format!(
                    "{{binary_bytes_per_sec:>12}} (max {})",
                    crate::rate::human(r)
                ),
                None => "{binary_bytes_per_sec:>12}".to_owned(),
            };
            d.total.set_style(bar_style(&rate));
            let (fetch, reused): (Vec<_>, Vec<_>) = blobs.iter().partition(|b| !b.cached);
            d.total
                .set_length(fetch.iter().map(|b| b.total).sum::<u64>());
            for b in fetch.into_iter().chain(reused) {
                let bar = indicatif::ProgressBar::new(b.total)
                    .with_style(bar_style(""))
                    .with_prefix(b.what)
                    .with_message(b.digest.hex()[..12].to_owned());
                // A bar is on screen from its first draw on.
                let bar = self.multi.add(bar);
                bar.tick();
                d.blobs.push((b.digest.clone(), bar, ""));
            }
        }
        for b in blobs {
            let Some((_, bar, label)) = d.blobs.iter_mut().find(|(id, ..)| *id == b.digest) else {
                continue;
            };
            let now = match (b.cached, b.bytes == b.total) {
                (true, _) => "reused",
                (false, true) => "done",
                (false, false) => "",
            };
            if *label != now {
                bar.set_style(bar_style(now));
                *label = now;
            }
            if bar.position() != b.bytes {
                bar.set_position(b.bytes);
            }
        }
        let fetch = blobs.iter().filter(|b| !b.cached);
        let done = fetch.clone().filter(|b| b.bytes == b.total).count();
        d.total
            .set_message(format!("{done}/{} blobs", fetch.clone().count()));
        d.total.set_position(fetch.map(|b| b.bytes).sum());
    }

    /// Take every bar off the screen; idempotent.
    fn clear(&self) {
        if let Some(d) = self.drawn.lock().unwrap().take() {
            for (_, bar, _) in &d.blobs {
                bar.finish_and_clear();
            }
            d.total.finish_and_clear();
            let _ = self.multi.clear();
        }
    }
}

/// `--progress-fd N`: bootc's JSON Lines progress protocol (docs/progress-v0.schema.json).
/// The first line is `Start`; then `ProgressSteps` at each stage and
/// `ProgressBytes` at most 5 times a second while blobs stream. A write error
/// (the reader went away) stops the events, never the pull.
#[derive(Debug, Default)]
pub struct ProgressFd {
    out: std::sync::Mutex<Option<std::fs::File>>,
    /// When the last `ProgressBytes` went out, and the bytes it counted.
    last_bytes: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// `--max-rate`: `bytesPerSecondMax` in `ProgressBytes`.
    max_rate: Option<u64>,
}

/// The protocol version in `Start`.
pub const PROGRESS_VERSION: &str = "0.1.0";

/// `ProgressBytes` are sent at most this often, except the last.
const BYTES_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);
impl ProgressFd {
    /// Open fd `n` for writing (through /proc/self/fd, so no unsafe is needed).
    /// Standard input, output and error are refused: they carry other things.
    pub fn open(fd: Option<i32>) -> anyhow::Result<Self> {
        let Some(n) = fd else {
            return Ok(Self::default());
        };
        if (0..=2).contains(&n) {
            return crate::error::fail(
                crate::error::Kind::Usage,
                format!("--progress-fd {n}: fds 0, 1 and 2 are not for progress"),
            );
        }
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("/proc/self/fd/{n}"))
            .map_err(|e| {
                crate::error::Failure::new(
                    crate::error::Kind::Usage,
                    format!("--progress-fd {n}: {e}"),
                )
            })?;
        let p = Self {
            out: std::sync::Mutex::new(Some(f)),
            last_bytes: Default::default(),
            max_rate: None,
        };
        p.emit(&serde_json::json!({"type": "Start", "version": PROGRESS_VERSION}));
        Ok(p)
    }

    /// Whether anyone is told: a progress fd or bars.
    pub fn enabled(&self) -> bool {
        self.out.lock().unwrap().is_some()
    }

    fn emit(&self, event: &serde_json::Value) {
        use std::io::Write as _;
        let mut out = self.out.lock().unwrap();
        if let Some(f) = out.as_mut() {
            let mut line = event.to_string();
            line.push('\n');
            if f.write_all(line.as_bytes()).is_err() {
                *out = None;
            }
        }
    }

    /// A stage of the pull: `step` of `total`.
    pub fn steps(&self, description: &str, step: u64, total: u64) {
        self.emit(&serde_json::json!({
            "type": "ProgressSteps", "task": "pull", "description": description, "id": "pull",
            "stepsCached": 0, "steps": step, "stepsTotal": total, "subtasks": [],
        }));
    }

    /// Bytes of the blobs, in bootc's shape: a subtask for each blob to fetch;
    /// the reused ones count as `bytesCached` and `stepsCached`. Beyond
    /// bootc's shape, `bytesPerSecond` since the last event and, under
    /// `--max-rate`, `bytesPerSecondMax`. Rate-limited unless `last`.
    fn bytes(&self, description: &str, blobs: &[BlobState], last: bool) {
        if !self.enabled() {
            return;
        }
        let (fetch, cached): (Vec<_>, Vec<_>) = blobs.iter().partition(|b| !b.cached);
        let bytes: u64 = fetch.iter().map(|b| b.bytes).sum();
        let rate = {
            let mut sent = self.last_bytes.lock().unwrap();
            let now = std::time::Instant::now();
            if !last && sent.is_some_and(|(t, _)| now.duration_since(t) < BYTES_INTERVAL) {
                return;
            }
            let rate = sent.map_or(0, |(t, before)| {
                let secs = now.duration_since(t).as_secs_f64();
                (bytes.saturating_sub(before) as f64 / secs.max(1e-3)) as u64
            });
            *sent = Some((now, bytes));
            rate
        };
        let subtasks: Vec<_> = fetch
            .iter()
            .map(|b| {
                let id = b.digest.to_string();
                serde_json::json!({"subtask": "blob", "description": id, "id": id,
                                   "bytesCached": 0, "bytes": b.bytes, "bytesTotal": b.total})
            })
            .collect();
        let mut event = serde_json::json!({
            "type": "ProgressBytes", "task": "fetch", "description": description, "id": "fetch",
            "bytesCached": cached.iter().map(|b| b.total).sum::<u64>(),
            "bytes": bytes,
            "bytesTotal": fetch.iter().map(|b| b.total).sum::<u64>(),
            "stepsCached": cached.len(),
            "steps": fetch.iter().filter(|b| b.bytes == b.total).count(),
            "stepsTotal": fetch.len(),
            "subtasks": subtasks,
            "bytesPerSecond": rate,
        });
        if let Some(max) = self.max_rate {
            event["bytesPerSecondMax"] = max.into();
        }
        self.emit(&event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(c: char, bytes: u64, total: u64, cached: bool) -> BlobState {
        BlobState {
            digest: Sha256Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap(),
            what: "layer",
            bytes,
            total,
            cached,
        }
    }

    /// Reused blobs count as cached, not as subtasks; bytes events are
    /// dropped within 200 ms of the last, except the last one.
    #[test]
    fn progress_fd_bytes_in_bootc_shape() {
        use std::os::fd::AsRawFd as _;
        let f = tempfile::NamedTempFile::new().unwrap();
        let mut fd = ProgressFd::open(Some(f.as_file().as_raw_fd())).unwrap();
        fd.max_rate = Some(20 << 20);
        let blobs = [
            blob('a', 100, 100, true),
            blob('b', 3, 10, false),
            blob('c', 10, 10, false),
        ];
        fd.bytes("fetching blobs", &blobs, false);
        fd.bytes("fetching blobs", &blobs, false);
        fd.bytes("fetching blobs", &blobs, true);
        let text = std::fs::read_to_string(f.path()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let types: Vec<_> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["Start", "ProgressBytes", "ProgressBytes"]);
        let e = &lines[1];
        for (key, want) in [
            ("bytesCached", 100),
            ("bytes", 13),
            ("bytesTotal", 20),
            ("stepsCached", 1),
            ("steps", 1),
            ("stepsTotal", 2),
            ("bytesPerSecond", 0),
            ("bytesPerSecondMax", 20 << 20),
        ] {
            assert_eq!(e[key], want, "{key}: {e}");
        }
        let ids: Vec<_> = e["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap()[7..8].to_owned())
            .collect();
        assert_eq!(ids, ["b", "c"]);
    }
}
