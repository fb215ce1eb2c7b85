//! zbus on the system bus: find, watch, measure and stop transient worker units.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use zbus::zvariant::OwnedObjectPath;

use super::unit::{SLICE, UNIT_PREFIX};

const DEST: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const SERVICE: &str = "org.freedesktop.systemd1.Service";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
/// `si_code` of a main process killed by a signal (CLD_KILLED, CLD_DUMPED).
const CLD_KILLED: i32 = 2;
const CLD_DUMPED: i32 = 3;
/// How often a running worker's cgroup is read. An OOM kill on cgroup v1 is
/// visible only while the unit's cgroup exists, so this is short (two small
/// reads of cgroup files).
const MEMORY_SAMPLE: Duration = Duration::from_millis(5);
/// How often the unit's main process is looked up over D-Bus.
const PROCESS_SAMPLE: Duration = Duration::from_millis(20);

/// A connection to systemd on the system bus.
#[derive(Debug, Clone)]
pub struct Systemd {
    conn: zbus::Connection,
}

/// What was seen of one worker unit while it ran.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The unit's name.
    pub unit: String,
    /// The dynamic uid it ran as, once seen.
    pub uid: Option<u32>,
    /// Its cgroup's peak memory, once seen.
    pub memory_peak_bytes: Option<u64>,
    /// OOM kills the kernel counted in the unit's memory cgroup.
    pub oom_kills: u64,
}

/// How a unit's main process ended (org.freedesktop.systemd1.Service).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitState {
    /// `success`, `exit-code`, `signal`, `oom-kill`, …
    pub result: String,
    /// `si_code`: exited, killed or dumped.
    pub code: i32,
    /// The exit status or the signal number.
    pub status: i32,
}

impl ExitState {
    /// The signal that killed the worker, if one did.
    pub fn signal(&self) -> Option<i32> {
        matches!(self.code, CLD_KILLED | CLD_DUMPED).then_some(self.status)
    }
}

impl Observed {
    /// Was the worker killed for memory? cgroup v2 systemd says so itself. On
    /// cgroup v1 the OOM killer's SIGKILL looks like any other, so it counts as
    /// OOM when the cgroup's counter caught it, or when the worker was seen
    /// using at least half of its limit.
    pub fn out_of_memory(&self, exit: &ExitState, memory_max: u64) -> bool {
        const SIGKILL: i32 = 9;
        exit.result == "oom-kill"
            || (exit.signal() == Some(SIGKILL)
                && (self.oom_kills > 0
                    || self.memory_peak_bytes.is_some_and(|p| p >= memory_max / 2)))
    }
}

fn no_such_unit(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit")
}

impl Systemd {
    /// Connect to systemd on the system bus.
    pub async fn connect() -> anyhow::Result<Self> {
        let conn = zbus::Connection::system()
            .await
            .context("connecting to the system bus")?;
        Ok(Self { conn })
    }

    async fn proxy(&self, path: &str, iface: &'static str) -> zbus::Result<zbus::Proxy<'static>> {
        zbus::proxy::Builder::new(&self.conn)
            .destination(DEST)?
            .path(path.to_owned())?
            .interface(iface)?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }

    /// The unit's object path, or `None` if it is not loaded.
    pub async fn get_unit(&self, unit: &str) -> anyhow::Result<Option<OwnedObjectPath>> {
        let m = self.proxy(MANAGER_PATH, MANAGER).await?;
        match m.call::<_, _, OwnedObjectPath>("GetUnit", &(unit,)).await {
            Ok(p) => Ok(Some(p)),
            Err(e) if no_such_unit(&e) => Ok(None),
            Err(e) => Err(e).with_context(|| format!("looking up {unit}")),
        }
    }

    /// Stop a unit, reset it if it failed, and wait until systemd has let go of it.
    pub async fn stop(&self, unit: &str, timeout: Duration) -> anyhow::Result<()> {
        let m = self.proxy(MANAGER_PATH, MANAGER).await?;
        match m
            .call::<_, _, OwnedObjectPath>("StopUnit", &(unit, "replace"))
            .await
        {
            Ok(_) => {}
            Err(e) if no_such_unit(&e) => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("stopping {unit}")),
        }
        let start = Instant::now();
        while let Some(path) = self.get_unit(unit).await? {
            if start.elapsed() > timeout {
                anyhow::bail!(
                    "{unit} is still loaded {}s after StopUnit",
                    timeout.as_secs()
                );
            }
            let u = self.proxy(path.as_str(), UNIT).await?;
            if u.get_property::<String>("ActiveState")
                .await
                .is_ok_and(|s| s == "failed")
            {
                // Only a failed unit needs this; it may be gone by now, which is fine.
                let _ = m.call::<_, _, ()>("ResetFailedUnit", &(unit,)).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// How a unit's main process ended, once it has: `None` while it still
    /// runs (after `timeout`) or when systemd has already let go of it.
    pub async fn exit_state(
        &self,
        unit: &str,
        timeout: Duration,
    ) -> anyhow::Result<Option<ExitState>> {
        let start = Instant::now();
        loop {
            let Some(path) = self.get_unit(unit).await? else {
                return Ok(None);
            };
            let u = self.proxy(path.as_str(), UNIT).await?;
            let state: String = u.get_property("ActiveState").await?;
            if state == "failed" || state == "inactive" {
                let svc = self.proxy(path.as_str(), SERVICE).await?;
                return Ok(Some(ExitState {
                    result: svc.get_property("Result").await?,
                    code: svc.get_property("ExecMainCode").await?,
                    status: svc.get_property("ExecMainStatus").await?,
                }));
            }
            if start.elapsed() > timeout {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop worker units whose orchestrator is gone (a crash, a kill -9). The
    /// orchestrator's pid is in the unit's name; a live hostpull keeps its own.
    pub async fn stop_leftovers(&self) -> anyhow::Result<Vec<String>> {
        type UnitRow = (
            String,
            String,
            String,
            String,
            String,
            String,
            OwnedObjectPath,
            u32,
            String,
            OwnedObjectPath,
        );
        let m = self.proxy(MANAGER_PATH, MANAGER).await?;
        let pattern = format!("{UNIT_PREFIX}*");
        let rows: Vec<UnitRow> = m
            .call(
                "ListUnitsByPatterns",
                &(Vec::<&str>::new(), vec![pattern.as_str()]),
            )
            .await
            .context("listing worker units")?;
        let mut stopped = Vec::new();
        for (name, ..) in rows {
            if unit_owner(&name).is_some_and(orchestrator_alive) {
                continue;
            }
            tracing::warn!("stopping {name}, left behind by an earlier run");
            self.stop(&name, Duration::from_secs(10)).await?;
            stopped.push(name);
        }
        Ok(stopped)
    }

    /// Sample a unit until `done` resolves; returns `done`'s output and what was
    /// seen. Memory is read straight from the unit's cgroup, whose path is known
    /// before the unit exists, so that even a worker killed at start is seen.
    pub async fn watch<F: std::future::Future>(
        &self,
        unit: &str,
        done: F,
    ) -> (F::Output, Observed) {
        let seen = Mutex::new(Observed {
            unit: unit.to_owned(),
            ..Default::default()
        });
        let cgroup = Path::new(SLICE).join(unit);
        let memory = async {
            loop {
                let (peak, ooms) = read_memory(&cgroup);
                {
                    let mut s = seen.lock().unwrap();
                    s.memory_peak_bytes = peak.max(s.memory_peak_bytes);
                    s.oom_kills = s.oom_kills.max(ooms);
                }
                tokio::time::sleep(MEMORY_SAMPLE).await;
            }
        };
        let process = async {
            loop {
                match self.main_pid(unit).await {
                    Ok(Some(pid)) => {
                        // Read again until it changes: right after the fork the
                        // uid is still systemd's, before the switch to the
                        // dynamic user. Then stop asking: each look-up costs
                        // systemd and the bus daemon CPU that the pull needs.
                        let uid = proc_uid(pid);
                        {
                            let mut s = seen.lock().unwrap();
                            s.uid = uid.or(s.uid);
                        }
                        if uid.is_some_and(|u| u != 0) {
                            return std::future::pending().await;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!("sampling {unit}: {e:#}"),
                }
                tokio::time::sleep(PROCESS_SAMPLE).await;
            }
        };
        let out = tokio::select! {
            out = done => out,
            never = memory => match never {},
            never = process => match never {},
        };
        // Once more as `done` ends: a worker killed for memory between two
        // samples (a busy machine delays them) must still show it.
        let (peak, ooms) = read_memory(&cgroup);
        let mut observed = seen.lock().unwrap().clone();
        observed.memory_peak_bytes = peak.max(observed.memory_peak_bytes);
        observed.oom_kills = observed.oom_kills.max(ooms);
        (out, observed)
    }

    async fn main_pid(&self, unit: &str) -> anyhow::Result<Option<u32>> {
        let Some(path) = self.get_unit(unit).await? else {
            return Ok(None);
        };
        let svc = self.proxy(path.as_str(), SERVICE).await?;
        let pid: u32 = svc.get_property("MainPID").await?;
        Ok((pid != 0).then_some(pid))
    }
}

/// `hostpull-worker-<pid>-<n>.service` → `<pid>`.
pub fn unit_owner(unit: &str) -> Option<u32> {
    unit.strip_prefix(UNIT_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

fn orchestrator_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => comm.trim() == "hostpull",
        // Another domain's process (SELinux): alive, and not ours to judge.
        Err(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
    }
}

/// The real uid of a process, from `/proc/PID/status`.
fn proc_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Peak memory and OOM kills of a unit's cgroup: cgroup v1's memory hierarchy
/// where it is mounted (systemd 252 has no MemoryPeak), else cgroup v2.
fn read_memory(cg: &Path) -> (Option<u64>, u64) {
    let rel = cg.strip_prefix("/").unwrap_or(cg);
    let v1 = Path::new("/sys/fs/cgroup/memory").join(rel);
    let read = |p: PathBuf| std::fs::read_to_string(p).ok();
    let counter = |text: Option<String>| {
        text.and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
    };
    if v1.is_dir() {
        let peak = read(v1.join("memory.max_usage_in_bytes")).and_then(|s| s.trim().parse().ok());
        (peak, counter(read(v1.join("memory.oom_control"))))
    } else {
        let v2 = Path::new("/sys/fs/cgroup").join(rel);
        let peak = read(v2.join("memory.peak")).and_then(|s| s.trim().parse().ok());
        (peak, counter(read(v2.join("memory.events"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_from_unit_name() {
        assert_eq!(unit_owner("hostpull-worker-1234-0.service"), Some(1234));
        assert_eq!(unit_owner("hostpull-worker-x-0.service"), None);
        assert_eq!(unit_owner("other-1234-0.service"), None);
    }

    #[test]
    fn oom_verdict() {
        let o = |peak, kills| Observed {
            memory_peak_bytes: peak,
            oom_kills: kills,
            ..Default::default()
        };
        let exit = |result: &str, code, status| ExitState {
            result: result.into(),
            code,
            status,
        };
        let killed = exit("signal", CLD_KILLED, 9);
        let max = 16 << 20;
        assert!(o(None, 1).out_of_memory(&killed, max));
        assert!(o(Some(15 << 20), 0).out_of_memory(&killed, max));
        assert!(
            !o(Some(4 << 20), 0).out_of_memory(&killed, max),
            "a kill -9, not memory"
        );
        assert!(!o(Some(16 << 20), 1).out_of_memory(&exit("exit-code", 1, 1), max));
        assert!(!o(Some(16 << 20), 0).out_of_memory(&exit("signal", CLD_KILLED, 15), max));
        assert!(o(None, 0).out_of_memory(&exit("oom-kill", CLD_KILLED, 9), max));
    }

    #[test]
    fn own_uid() {
        assert_eq!(
            proc_uid(std::process::id()),
            Some(rustix::process::getuid().as_raw())
        );
    }
}
