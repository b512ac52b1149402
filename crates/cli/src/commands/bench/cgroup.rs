//! Memory cgroups for `bench cluster --memory-limit`: each agent in a cgroup of its own
//! under a hard memory limit, and the most memory each was charged. The cgroup is made
//! inside this process's own memory cgroup (cgroup v2 where the memory controller is on
//! the unified hierarchy, else v1's `memory` hierarchy), so the machine's own accounting
//! still sees it.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A memory cgroup holding processes under a limit.
pub struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
}

/// This process's cgroup directory with a memory controller, and whether it is v2.
fn own_memory_cgroup() -> Result<(PathBuf, bool)> {
    let table = fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    for line in table.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            return Ok((Path::new("/sys/fs/cgroup/memory").join(path), false));
        }
        if controllers.is_empty() {
            for mount in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                let dir = Path::new(mount).join(path);
                let has_memory = fs::read_to_string(dir.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
                if has_memory {
                    return Ok((dir, true));
                }
            }
        }
    }
    bail!("no memory cgroup controller for this process (cgroup v1 `memory` or v2 with `memory` enabled)")
}

impl MemoryCgroup {
    /// Creates cgroup `name` with a hard limit of `limit` bytes.
    pub fn create(name: &str, limit: u64) -> Result<MemoryCgroup> {
        let (parent, v2) = own_memory_cgroup()?;
        let dir = parent.join(name);
        fs::create_dir(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
        let cgroup = MemoryCgroup { dir, v2 };
        let limit_file = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        cgroup
            .write(limit_file, &limit.to_string())
            .context("the memory controller is not enabled for child cgroups here")?;
        Ok(cgroup)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }

    /// Moves process `pid` (all its threads) into the cgroup: what it allocates from now on
    /// is charged here.
    pub fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The most memory the cgroup was charged (v2 `memory.peak`, v1
    /// `memory.max_usage_in_bytes`): anonymous memory and page cache alike.
    pub fn peak(&self) -> Result<u64> {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        let path = self.dir.join(file);
        let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} is not a number", path.display()))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Empty once its processes are gone (the cluster is down by then).
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Whether `path` is on a tmpfs, whose pages count as the writer's memory and cannot be
/// reclaimed (no swap): a memory limit would measure the files, not the agent.
pub fn is_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}
