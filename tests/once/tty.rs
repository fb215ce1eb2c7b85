//! Progress bars: drawn on stderr when it is a terminal (a real pty from
//! script(1)), replayed here on a small terminal model to see what a person
//! would see; and nothing of them when stderr is a pipe.

use std::time::Duration;

use crate::util::*;

const SIZE: (u16, u16) = (100, 30);

/// Just enough of a terminal to replay what indicatif and the log lines write:
/// text with auto-wrap, CR, LF, cursor up and down (CSI n A, CSI n B), erase
/// line (CSI 2 K); colours (CSI … m) are dropped. Each redraw (a cursor-up)
/// keeps a copy of the screen as it was, a frame.
#[derive(Debug, Default)]
struct Terminal {
    rows: Vec<Vec<char>>,
    row: usize,
    col: usize,
    /// The last column was written: the next character starts a new row.
    wrap: bool,
    frames: Vec<Vec<String>>,
}

impl Terminal {
    fn replay(bytes: &str) -> Self {
        let mut t = Self {
            rows: vec![Vec::new()],
            ..Self::default()
        };
        let mut chars = bytes.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => (t.col, t.wrap) = (0, false),
                '\n' => t.down(1),
                '\x1b' => {
                    assert_eq!(chars.next(), Some('['), "only CSI sequences: {bytes:?}");
                    let mut arg = String::new();
                    let cmd = loop {
                        match chars.next().expect("a complete sequence") {
                            d if d.is_ascii_digit() || d == ';' => arg.push(d),
                            cmd => break cmd,
                        }
                    };
                    let n = arg.parse().unwrap_or(1);
                    match cmd {
                        'A' => {
                            t.frames.push(t.screen());
                            t.row = t.row.checked_sub(n).expect("cursor up past the top");
                            t.wrap = false;
                        }
                        'B' => t.down(n),
                        'K' => t.rows[t.row].clear(),
                        'm' => {}
                        other => panic!("unexpected CSI {arg}{other}"),
                    }
                }
                c => {
                    if t.wrap {
                        t.down(1);
                        t.col = 0;
                    }
                    let line = &mut t.rows[t.row];
                    if line.len() <= t.col {
                        line.resize(t.col + 1, ' ');
                    }
                    line[t.col] = c;
                    if t.col + 1 == usize::from(SIZE.0) {
                        t.wrap = true;
                    } else {
                        t.col += 1;
                    }
                }
            }
        }
        t
    }

    fn down(&mut self, n: usize) {
        self.row += n;
        self.wrap = false;
        if self.rows.len() <= self.row {
            self.rows.resize(self.row + 1, Vec::new());
        }
    }

    /// The rows as written (a wrapped line's rows join up), without the blank
    /// rows at the end.
    fn screen(&self) -> Vec<String> {
        let mut rows: Vec<String> = self.rows.iter().map(|r| r.iter().collect()).collect();
        while rows.last().is_some_and(|r| r.trim().is_empty()) {
            rows.pop();
        }
        rows
    }
}

/// A bar row: "layer  0123456789ab [====>   ] …" and the like.
fn is_bar(row: &str) -> bool {
    ["total ", "layer ", "config "]
        .iter()
        .any(|p| row.starts_with(p))
}

/// The config's and layers' digests, as the bars name them (12 hex digits).
fn blobs_of(image: &str) -> Vec<(&'static str, String)> {
    let m = registry_raw(image);
    let short = |d: &serde_json::Value| d["digest"].as_str().unwrap()[7..19].to_owned();
    std::iter::once(("config", short(&m["config"])))
        .chain(
            m["layers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| ("layer", short(l))),
        )
        .collect()
}

/// The screen holds the summary line (wrapped on rows of the terminal's width)
/// and nothing else.
fn assert_summary_alone(screen: &[String], counts: &str) {
    let text = screen.concat();
    assert!(
        text.starts_with("Pulled ") && text.contains(counts) && text.trim_end().ends_with(" s"),
        "{screen:#?}"
    );
    let wrapped = &screen[..screen.len() - 1];
    assert!(
        wrapped
            .iter()
            .all(|row| row.chars().count() == usize::from(SIZE.0)),
        "{screen:#?}"
    );
}

#[test]
fn bars_on_a_terminal_and_none_in_a_pipe() {
    let s = scratch();
    let image = var("RIG_IMG_BIG");
    let dest = oci(&s.path().join("l"));
    let blobs = blobs_of(image);

    let r = run_on_terminal(&with_rig_creds(pull_cmd(image, &dest)), s.path(), SIZE);
    r.json();
    let t = Terminal::replay(&r.stderr);
    // Redrawn as bytes came in: the total was seen part-way, and each blob had
    // a row of its own under it.
    assert!(
        t.frames.len() >= 3,
        "{} redraws: {:?}",
        t.frames.len(),
        r.stderr
    );
    let part_way = t.frames.iter().find(|f| {
        f.iter()
            .any(|row| row.starts_with("total ") && row.contains('>'))
    });
    let frame = part_way.unwrap_or_else(|| panic!("no total part-way in {:#?}", t.frames));
    for (what, short) in &blobs {
        let prefix = format!("{what:6} {short} [");
        assert!(
            frame.iter().any(|row| row.starts_with(&prefix)),
            "no row for {prefix} in {frame:#?}"
        );
    }
    // At the end the bars are gone: the summary alone, readable.
    assert_summary_alone(&t.screen(), "8 fetched, 0 reused");

    // Pulled again, every blob shows as reused.
    let r = run_on_terminal(&with_rig_creds(pull_cmd(image, &dest)), s.path(), SIZE);
    assert_eq!(r.json()["layers_reused"], 8);
    let t = Terminal::replay(&r.stderr);
    let shown: Vec<&String> = t.frames.iter().flatten().collect();
    for (what, short) in &blobs {
        let prefix = format!("{what:6} {short} [");
        assert!(
            shown
                .iter()
                .any(|row| row.starts_with(&prefix) && row.trim_end().ends_with(" reused")),
            "{prefix} not reused in {:#?}",
            t.frames
        );
    }
    assert_summary_alone(&t.screen(), "0 fetched, 8 reused");

    // stderr a pipe: no bar and no escape sequence, only the summary.
    let dest = oci(&s.path().join("p"));
    let r = run(&mut with_rig_creds(pull_cmd(image, &dest)));
    r.json();
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{:?}", r.stderr);
    assert!(lines[0].starts_with("Pulled "), "{:?}", r.stderr);
    assert!(!r.stderr.contains('\x1b'), "{:?}", r.stderr);
}

/// Under `--max-rate`, the total line shows the cap after the rate.
#[test]
fn bars_show_the_cap() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_BIG"), &dest));
    c.args(["--max-rate", "200M"]);
    let r = run_on_terminal(&c, s.path(), SIZE);
    r.json();
    let t = Terminal::replay(&r.stderr);
    let totals: Vec<&String> = t
        .frames
        .iter()
        .flatten()
        .filter(|row| row.starts_with("total ") && row.contains('['))
        .collect();
    assert!(!totals.is_empty(), "{:#?}", t.frames);
    assert!(
        totals
            .iter()
            .all(|row| row.trim_end().ends_with("/s (max 200 MiB/s)")),
        "{totals:#?}"
    );
}

/// A registry that goes away mid-pull: the retry warnings land above the bars,
/// whole, and the final error line is not drawn over.
#[test]
fn log_lines_and_the_error_stay_readable_under_bars() {
    let s = scratch();
    let fw = Forwarder::start(var("RIG_REGISTRY"), 32 << 20);
    let dest = oci(&s.path().join("l"));
    let mut c = pull_via(&fw, s.path(), &dest);
    c.args(["--timeout", "12"]);
    let r = std::thread::scope(|sc| {
        let pull = sc.spawn(|| run_on_terminal(&c, s.path(), SIZE));
        wait_for(
            "40 MB through the forwarder",
            Duration::from_secs(60),
            || fw.bytes_down() > 40 << 20,
        );
        fw.cut(Duration::from_secs(600));
        pull.join().unwrap()
    });
    assert_eq!(r.code, 6, "{:?}", r.stderr);
    let t = Terminal::replay(&r.stderr);
    assert!(
        t.frames
            .iter()
            .flatten()
            .any(|row| row.starts_with("layer ")),
        "bars were drawn: {:?}",
        r.stderr
    );
    let screen = t.screen();
    assert!(
        screen.iter().all(|row| !is_bar(row)),
        "no bar left: {screen:#?}"
    );
    assert!(
        screen
            .iter()
            .any(|row| row.trim_start().starts_with("WARN attempt 1 failed")),
        "the warning on a row of its own: {screen:#?}"
    );
    // "timed out" or, when the jittered backoff runs out of attempts first,
    // the last attempt's network error: either way exit 6, and last.
    let error = screen
        .iter()
        .position(|row| row.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {screen:#?}"));
    assert!(
        screen[error..]
            .iter()
            .all(|row| !row.trim_start().starts_with("WARN")),
        "the error comes last: {screen:#?}"
    );
}
