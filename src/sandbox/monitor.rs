//! zbus on the system bus: find, watch, measure and stop transient worker units.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use zbus::zvariant::OwnedObjectPath;

use super::unit::UNIT_PREFIX;

const DEST: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const SERVICE: &str = "org.freedesktop.systemd1.Service";
/// How often a running worker's cgroup is sampled. An OOM kill on cgroup v1 is
/// visible only while the unit's cgroup exists, so this is short.
const SAMPLE: Duration = Duration::from_millis(10);

#[derive(Debug, Clone)]
pub struct Systemd {
    conn: zbus::Connection,
}

/// What was seen of one worker unit while it ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Observed {
    pub unit: String,
    pub main_pid: Option<u32>,
    pub uid: Option<u32>,
    pub memory_peak_bytes: Option<u64>,
    /// OOM kills the kernel counted in the unit's memory cgroup.
    #[serde(skip)]
    pub oom_kills: u64,
}

impl Observed {
    /// Was the worker killed for memory? The cgroup's own counter says so when
    /// we caught it; otherwise a peak at the limit is the tell.
    pub fn out_of_memory(&self, memory_max: Option<u64>) -> bool {
        self.oom_kills > 0
            || matches!((self.memory_peak_bytes, memory_max), (Some(p), Some(m)) if p + (64 << 10) >= m)
    }
}

fn no_such_unit(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit")
}

impl Systemd {
    pub async fn connect() -> anyhow::Result<Self> {
        let conn = zbus::Connection::system()
            .await
            .context("Connecting to the system bus")?;
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
            Err(e) => Err(e).with_context(|| format!("Looking up {unit}")),
        }
    }

    /// Stop a unit and wait until systemd has let go of it.
    pub async fn stop(&self, unit: &str, timeout: Duration) -> anyhow::Result<()> {
        let m = self.proxy(MANAGER_PATH, MANAGER).await?;
        match m
            .call::<_, _, OwnedObjectPath>("StopUnit", &(unit, "replace"))
            .await
        {
            Ok(_) => {}
            Err(e) if no_such_unit(&e) => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("Stopping {unit}")),
        }
        let start = Instant::now();
        while self.get_unit(unit).await?.is_some() {
            if start.elapsed() > timeout {
                anyhow::bail!(
                    "{unit} is still loaded {}s after StopUnit",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
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
            .context("Listing worker units")?;
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

    /// Sample a unit until `done` resolves; returns `done`'s output and what was seen.
    pub async fn watch<F: std::future::Future>(
        &self,
        unit: &str,
        done: F,
    ) -> (F::Output, Observed) {
        let seen = Arc::new(Mutex::new(Observed {
            unit: unit.to_owned(),
            ..Default::default()
        }));
        let sampler = {
            let (this, unit, seen) = (self.clone(), unit.to_owned(), Arc::clone(&seen));
            async move {
                let mut cgroup: Option<PathBuf> = None;
                loop {
                    if let Err(e) = this.sample(&unit, &mut cgroup, &seen).await {
                        tracing::debug!("sampling {unit}: {e:#}");
                    }
                    tokio::time::sleep(SAMPLE).await;
                }
            }
        };
        let out = tokio::select! {
            out = done => out,
            never = sampler => match never {},
        };
        let observed = seen.lock().unwrap().clone();
        (out, observed)
    }

    async fn sample(
        &self,
        unit: &str,
        cgroup: &mut Option<PathBuf>,
        seen: &Mutex<Observed>,
    ) -> anyhow::Result<()> {
        if let Some(cg) = cgroup {
            let (peak, ooms) = read_memory(cg);
            let mut s = seen.lock().unwrap();
            s.memory_peak_bytes = peak.max(s.memory_peak_bytes);
            s.oom_kills = s.oom_kills.max(ooms);
            return Ok(());
        }
        let Some(path) = self.get_unit(unit).await? else {
            return Ok(());
        };
        let svc = self.proxy(path.as_str(), SERVICE).await?;
        let pid: u32 = svc.get_property("MainPID").await?;
        if pid == 0 {
            return Ok(());
        }
        let cg: String = svc.get_property("ControlGroup").await?;
        let uid = proc_uid(pid);
        {
            let mut s = seen.lock().unwrap();
            s.main_pid = Some(pid);
            s.uid = uid;
        }
        if !cg.is_empty() {
            *cgroup = Some(PathBuf::from(cg));
        }
        Ok(())
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
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "hostpull")
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
        let max = Some(16 << 20);
        assert!(o(None, 1).out_of_memory(max));
        assert!(o(Some(16 << 20), 0).out_of_memory(max));
        assert!(!o(Some(4 << 20), 0).out_of_memory(max));
        assert!(!o(None, 0).out_of_memory(max));
    }

    #[test]
    fn own_uid() {
        assert_eq!(
            proc_uid(std::process::id()),
            Some(rustix::process::getuid().as_raw())
        );
    }
}
