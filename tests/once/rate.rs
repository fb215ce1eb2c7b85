//! `--max-rate`: the cap holds where the registry sends. A byte-counting
//! forwarder (no limit of its own) sits in front of the real registry, and an
//! image is pulled through it uncapped, then capped: the big one (512 MiB in 8
//! layers) at about a quarter of the uncapped rate, the paced one (3 MiB,
//! 1 MiB and 256 KiB) at 512 KiB/s, the rate of a thin far-edge link. The cap
//! is root's (it reads the worker's pipes at the rate), so these run once, with
//! `--sandbox none` (tests/tests.rs).

use std::time::{Duration, Instant};

use crate::util::*;
use hostpull::internals::{IN_FLIGHT, LEAD, SLICE, in_flight};

/// The most the worker's side holds of one blob here, ahead of root's reads:
/// the 64 KiB pipe, skopeo's 32 KiB copy buffer, and its socket's receive
/// buffer. Linux grows that one as skopeo drains it, to twice what skopeo
/// copied in a round trip plus 16 segments (`tcp_rcv_space_adjust`); a
/// segment is 64 KiB on loopback (1448 bytes on Ethernet). When a blob opens
/// skopeo copies ~200 KiB at once, so 1.4 MiB: seen here as 1.3 MiB reaching
/// the worker within 250 ms of a blob's open at 1 MiB/s.
const WORKER_BUFFERS: u64 = 1536 << 10;
/// The forwarder counts a write when it is acknowledged, within one write.
const COUNT_ERROR: u64 = 64 << 10;

/// How many bytes over the cap any window at the forwarder may carry, from
/// the mechanism (src/rate.rs): root reads at most the bucket (`SLICE` of the
/// cap) plus one read in debt (`SLICE`, at most the 1 MiB read buffer) per
/// blob open at once over the cap; and each blob open at once may come to
/// hold what the worker's side buffers beyond the `LEAD` that root charged
/// for it when it opened. At 512 KiB/s (one blob at a time) that is 1.36 MiB,
/// most of it this loopback's receive buffer; at 16 MiB/s (four blobs)
/// 9.1 MiB, where four 1 MiB pipes opened at once and 5 MiB charges made it
/// 10 MiB before. Above 24 MiB/s as many blobs as a pull keeps in flight. The previous mechanism carried 2.3 to 3.1 MiB in the first
/// second at 512 KiB/s.
fn tolerance(cap: u64) -> u64 {
    let slice = (cap as f64 * SLICE.as_secs_f64()) as u64;
    let open = in_flight(cap, IN_FLIGHT) as u64;
    slice + open * (slice.min(1 << 20) + WORKER_BUFFERS - LEAD) + COUNT_ERROR
}

/// The bytes the worker's host has acknowledged at the forwarder, every
/// 20 ms, while `f` runs.
fn sampled<T>(fw: &Forwarder, f: impl FnOnce() -> T) -> (T, Vec<(Duration, u64)>) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let t0 = Instant::now();
            let mut samples: Vec<(Duration, u64)> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Never backwards: a write is counted after it is queued.
                let seen = samples.last().map_or(0, |s| s.1);
                samples.push((t0.elapsed(), fw.bytes_delivered().max(seen)));
                std::thread::sleep(Duration::from_millis(20));
            }
            samples
        });
        let r = f();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (r, sampler.join().unwrap())
    })
}

/// The most bytes in any window of `len` that starts `skip` or more after the
/// first byte and before the last.
fn peak(samples: &[(Duration, u64)], skip: Duration, len: Duration) -> u64 {
    let first = samples.iter().find(|s| s.1 > 0).expect("some bytes").0;
    let total = samples.last().unwrap().1;
    let mut peak = 0;
    for (i, &(t, b)) in samples.iter().enumerate() {
        if t < first + skip {
            continue;
        }
        if b >= total {
            break;
        }
        // The window's end, or the last sample if it runs past it.
        let end = samples[i..].iter().find(|s| s.0 >= t + len);
        peak = peak.max(end.unwrap_or(samples.last().unwrap()).1 - b);
    }
    peak
}

/// The time from the first byte to the last.
fn span(samples: &[(Duration, u64)]) -> Duration {
    let total = samples.last().unwrap().1;
    let first = samples.iter().find(|s| s.1 > 0).expect("some bytes").0;
    let last = samples.iter().find(|s| s.1 >= total).unwrap().0;
    last - first
}

/// MiB in each second from the first byte, for the log.
fn per_second(samples: &[(Duration, u64)]) -> String {
    let first = samples.iter().find(|s| s.1 > 0).expect("some bytes").0;
    let at = |secs: u64| {
        let t = first + Duration::from_secs(secs);
        samples.iter().find(|s| s.0 >= t).map(|s| s.1)
    };
    (0..)
        .map_while(|k| Some((at(k)?, at(k + 1)?)))
        .map(|(a, b)| format!("{:.2}", (b - a) as f64 / f64::from(1 << 20)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Windows of 1 s and 2 s from `skip` after the first byte stay within the
/// cap plus [`tolerance`].
fn assert_within_cap(samples: &[(Duration, u64)], cap: u64, skip: Duration) {
    let mib = f64::from(1 << 20);
    for secs in [1, 2] {
        let len = Duration::from_secs(secs);
        let most = cap * secs + tolerance(cap);
        let seen = peak(samples, skip, len);
        eprintln!(
            "{secs} s windows: at most {:.2} MiB, allowed {:.2} MiB (cap {:.2} MiB/s)",
            seen as f64 / mib,
            most as f64 / mib,
            cap as f64 / mib
        );
        assert!(
            seen <= most,
            "a {secs} s window at the registry carried {:.2} MiB, over the cap of {:.2} MiB/s \
             plus {:.2} MiB; MiB in each second: {}",
            seen as f64 / mib,
            cap as f64 / mib,
            tolerance(cap) as f64 / mib,
            per_second(samples)
        );
    }
}

#[test]
fn max_rate_holds_at_the_registry_and_changes_no_byte() {
    let s = scratch();
    let mib = f64::from(1 << 20);

    // Uncapped, through a forwarder of its own: the rate to take a quarter of.
    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    let clean = s.path().join("clean");
    let t0 = Instant::now();
    let r = run(&mut pull_via(&fw, s.path(), &oci(&clean))).json();
    let uncapped = fw.bytes_delivered() as f64 / t0.elapsed().as_secs_f64();
    assert_eq!(r["max_rate"], serde_json::Value::Null, "{r}");
    // A quarter, in whole MiB/s, at most 64 MiB/s (8 s for the image) and at
    // least 16 MiB/s (32 s, on a machine too busy for more).
    let cap_mib = ((uncapped / 4.0 / mib) as u64).clamp(16, 64);
    let cap = cap_mib << 20;

    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    let capped = s.path().join("capped");
    let mut pull = pull_via(&fw, s.path(), &oci(&capped));
    // The watchdog must not take the paced pull for a stalled one.
    pull.args(["--max-rate", &format!("{cap_mib}M"), "--stall-timeout", "2"]);
    pull.args(["--progress-fd", "3"]);
    // The shell gives the pull an fd 3 open on the events file.
    let events = s.path().join("progress.jsonl");
    let mut c = std::process::Command::new("bash");
    c.arg("-c").arg(format!(
        "exec {} 3>'{}'",
        shell_line(&pull),
        events.display()
    ));
    let t0 = Instant::now();
    let (out, samples) = sampled(&fw, || run(&mut c));
    let took = t0.elapsed().as_secs_f64();
    let r = out.json();
    assert_eq!(r["max_rate"], cap, "{r}");
    let fetched = r["bytes_fetched"].as_u64().unwrap() as f64;
    let ideal = fetched / cap as f64;
    eprintln!(
        "uncapped {:.0} MiB/s; cap {cap_mib} MiB/s: {:.0} MiB in {took:.2} s (size/cap \
         {ideal:.2} s); MiB in each second: {}",
        uncapped / mib,
        fw.bytes_delivered() as f64 / mib,
        per_second(&samples),
    );
    // After the first second, as the issue asks (the connections start).
    assert_within_cap(&samples, cap, Duration::from_secs(1));
    // Close to size / cap: not faster than the cap allows after the buffers'
    // head start (under half a second's worth), and not much slower either.
    assert!(
        took >= ideal * 0.9,
        "{took:.2} s for {ideal:.2} s at the cap"
    );
    // The upper bound leaves room for a machine busy beside the test (CI
    // runs the SELinux guest meanwhile); a pacer that over-throttles by half
    // still fails it.
    assert!(
        took <= ideal * 1.5 + 2.0,
        "{took:.2} s for {ideal:.2} s at the cap"
    );
    assert_eq!(snapshot(&capped), snapshot(&clean));

    // --progress-fd shows the cap and the rate: the median of the rates
    // between events (root's side) keeps under the cap and tells the rate the
    // pull had, which on a busy machine can be under the cap.
    let text = std::fs::read_to_string(&events).unwrap();
    let bytes: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "ProgressBytes")
        .collect();
    assert!(bytes.len() > 10, "{text}");
    assert!(
        bytes.iter().all(|e| e["bytesPerSecondMax"] == cap),
        "{text}"
    );
    let mut rates: Vec<u64> = bytes
        .iter()
        .filter(|e| e["bytes"].as_u64() < e["bytesTotal"].as_u64())
        .map(|e| e["bytesPerSecond"].as_u64().unwrap())
        .collect();
    rates.sort();
    let median = rates[rates.len() / 2] as f64;
    let had = fetched / took;
    assert!(
        median > had * 0.8 && median < had * 1.25 && median < cap as f64 * 1.1,
        "median {:.1} MiB/s at a cap of {cap_mib} MiB/s, {:.1} MiB/s had: {rates:?}",
        median / mib,
        had / mib
    );
}

/// A thin link's cap, 512 KiB/s, on the paced image: every window of 1 s and
/// 2 s from the first byte (the first second too, where all its blobs opened
/// at once and filled 1 MiB pipes before) stays within the cap plus
/// [`tolerance`], the
/// transfer takes size / cap plus the `LEAD` charged for each blob, the
/// watchdog (2 s) stays quiet, and the result is byte-identical to an
/// uncapped pull.
#[test]
fn max_rate_low_cap_holds_every_second() {
    let s = scratch();
    let image = var("RIG_IMG_PACED");
    let oci = |name: &str| oci(&s.path().join(name));
    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    run(&mut pull_image_via(&fw, image, s.path(), &oci("clean"))).json();

    let cap: u64 = 512 << 10;
    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    let mut pull = pull_image_via(&fw, image, s.path(), &oci("capped"));
    pull.args(["--max-rate", "512K", "--stall-timeout", "2"]);
    let (out, samples) = sampled(&fw, || run(&mut pull));
    let r = out.json();
    assert_eq!(r["max_rate"], cap, "{r}");
    let fetched = r["bytes_fetched"].as_u64().unwrap();
    // What each blob was charged when it opened, on top of its bytes.
    let manifest = registry_raw(image);
    let layers = manifest["layers"].as_array().unwrap();
    let charged: u64 = layers
        .iter()
        .chain([&manifest["config"]])
        .map(|d| d["size"].as_u64().unwrap().min(LEAD))
        .sum();
    let ideal = fetched as f64 / cap as f64;
    let expected = (fetched + charged) as f64 / cap as f64;
    let took = span(&samples).as_secs_f64();
    eprintln!(
        "cap 512 KiB/s: first to last byte {took:.2} s (size/cap {ideal:.2} s, with the \
         charges {expected:.2} s); MiB in each second: {}",
        per_second(&samples)
    );
    assert_within_cap(&samples, cap, Duration::ZERO);
    assert!(
        took >= ideal * 0.9 && took <= expected * 1.25 + 1.0,
        "{took:.2} s from the first byte to the last; size/cap {ideal:.2} s, with the \
         charges {expected:.2} s"
    );
    let snap = |name: &str| snapshot(&s.path().join(name));
    assert_eq!(snap("capped"), snap("clean"));
}

/// A cap below what one blob's buffers hold: opening the paced image's
/// 256 KiB layer charges `LEAD`, which holds root back 2.7 s at 96 KiB/s,
/// longer than `--stall-timeout 2`. That wait is the cap's, not a stall.
/// (At 512 KiB/s root never waits that long: a blob's charge is 0.5 s.)
#[test]
fn max_rate_wait_longer_than_the_stall_timeout_is_no_stall() {
    let s = scratch();
    let image = var("RIG_IMG_PACED");
    let clean = s.path().join("clean");
    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    run(&mut pull_image_via(&fw, image, s.path(), &oci(&clean))).json();
    // The same layout less that layer: only it is fetched.
    let layer = registry_raw(image)["layers"][2].clone();
    let size = layer["size"].as_u64().unwrap();
    let cap: u64 = 96 << 10;
    let wait = LEAD.min(size) as f64 / cap as f64;
    assert!(
        wait > 2.5,
        "the premise: {wait:.2} s of the cap at the blob's open"
    );
    let dest = s.path().join("dest");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .args([&clean, &dest])
        .status()
        .unwrap();
    assert!(cp.success());
    let digest = layer["digest"].as_str().unwrap();
    std::fs::remove_file(dest.join("blobs/sha256").join(&digest["sha256:".len()..])).unwrap();

    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    let mut pull = pull_image_via(&fw, image, s.path(), &oci(&dest));
    pull.args(["--max-rate", "96K", "--stall-timeout", "2"]);
    let t0 = Instant::now();
    let r = run(&mut pull).json();
    assert_eq!(r["bytes_fetched"], size, "{r}");
    let took = t0.elapsed().as_secs_f64();
    let expected = (size + LEAD.min(size)) as f64 / cap as f64;
    assert!(
        took >= expected * 0.9,
        "{took:.2} s, {expected:.2} s at the cap"
    );
    assert_eq!(snapshot(&dest), snapshot(&clean));
}

/// `--max-rate`, `[pull] max-rate` and a profile's `max-rate`, as `hostpull
/// plan` shows them: the command line over the profile over config.toml. A bad
/// value is one `error:` line and exit 2.
#[test]
fn max_rate_from_flag_profile_and_config() {
    let s = scratch();
    let root = config_root(s.path());
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let image = var("RIG_IMG_SMALL");
    let dest = oci(&s.path().join("never"));
    write(
        "etc/hostpull/pulls.d/os.toml",
        &format!("image = \"{image}\"\ndest = \"{dest}\"\nmax-rate = \"500K\"\n"),
    );
    let plan = |args: &[&str]| {
        let mut c = hostpull(&[]);
        c.arg("plan")
            .args(args)
            .args(["--sandbox", &sandbox(), "--config-root"])
            .arg(&root);
        run(&mut c)
    };
    let shown = |args: &[&str]| {
        let r = plan(args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.starts_with("max rate  "))
            .unwrap_or_else(|| panic!("no max rate line: {}", r.stdout))
            .to_owned()
    };
    let direct = [image, "--dest", &dest];
    assert_eq!(shown(&direct), "max rate  no limit");
    write("etc/hostpull/config.toml", "[pull]\nmax-rate = \"20M\"\n");
    assert_eq!(shown(&direct), "max rate  20 MiB/s (all blobs together)");
    assert_eq!(
        shown(&["--profile", "os"]),
        "max rate  500 KiB/s (all blobs together)"
    );
    assert_eq!(
        shown(&["--profile", "os", "--max-rate", "2G"]),
        "max rate  2 GiB/s (all blobs together)"
    );
    let r = plan(&[&direct[..], &["--json", "--max-rate", "3M"]].concat());
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["max_rate"], 3 << 20, "{v}");
    for bad in ["20MB", "0", "100"] {
        plan(&[&direct[..], &["--max-rate", bad]].concat()).assert_failure(2);
    }
    write("etc/hostpull/config.toml", "[pull]\nmax-rate = \"fast\"\n");
    let r = plan(&direct);
    r.assert_failure(2);
    assert!(
        r.stderr.contains("invalid --max-rate: ") && r.stderr.contains(": \"fast\""),
        "{}",
        r.stderr
    );
}

/// Under a cap a registry that stops sending is still a stall: the time the
/// cap holds root back does not hide it.
#[test]
fn a_stalled_registry_is_caught_under_a_cap() {
    let s = scratch();
    let fw = Forwarder::start(var("RIG_REGISTRY"), 0);
    let dest = s.path().join("l");
    let mut c = pull_via(&fw, s.path(), &oci(&dest));
    c.args([
        "--max-rate",
        "32M",
        "--stall-timeout",
        "3",
        "--timeout",
        "40",
    ]);
    let child = spawn_piped(&mut c);
    wait_for(
        "40 MB through the forwarder",
        Duration::from_secs(60),
        || fw.bytes_down() > 40 << 20,
    );
    fw.freeze();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("stalled: no data from the registry for 3s"),
        "{stderr}"
    );
    assert!(!dest.exists());
}
