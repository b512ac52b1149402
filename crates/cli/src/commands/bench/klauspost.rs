//! klauspost/reedsolomon (Go), the fastest widely used Reed-Solomon library, as a peer of
//! `eckpt bench codec`: the repository's harness (`bench/klauspost`, built by `make klauspost`
//! to `target/klauspost-bench`) is run once per repetition between eckpt's own samples, on the
//! same CPUs (it inherits this process's affinity) with the same shape, and forced to the
//! kernel level eckpt runs, so ratios compare like with like.
//!
//! The harness runs as whoever runs the benchmark, so it is run only from a path the user
//! gave (`--klauspost PATH`) or from a default location nobody else controls: the file and
//! every directory above it belong to this user or root, the file's own directory and the
//! file are writable by nobody else, and a directory above that others may write into is
//! sticky (they cannot rename or replace what they do not own in it). The check is made on
//! descriptors opened one path component at a time without following symbolic links, and
//! the descriptor checked is the one executed (`/proc/self/fd/N`): nothing can be swapped in
//! between. A default that fails the check is skipped with one line saying why.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use eckpt_codec::Kernel;

/// The file `make klauspost` builds in the target directory.
const HARNESS: &str = "klauspost-bench";

/// Where `make klauspost` puts the harness, in the order they are tried:
/// `target/klauspost-bench` next to the running `eckpt` (`target/release/eckpt` →
/// `target/klauspost-bench`), then in the target directory of the repository this `eckpt`
/// was built from.
pub fn default_paths() -> Vec<PathBuf> {
    let beside_exe = std::env::current_exe().ok().and_then(|exe| harness_beside(&exe));
    let in_repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(|root| root.join("target").join(HARNESS));
    let mut paths: Vec<PathBuf> = beside_exe.into_iter().collect();
    paths.extend(in_repository.filter(|p| !paths.contains(p)));
    paths
}

/// `target/klauspost-bench` for the binary `exe` of `target/<profile>/`.
fn harness_beside(exe: &Path) -> Option<PathBuf> {
    Some(exe.parent()?.parent()?.join(HARNESS))
}

/// One run of the harness: GB/s (10^9 data bytes per second) of each operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// `Encode`: k data shards into m parities.
    pub encode: f64,
    /// `EncodeIdx`: one data shard's contribution added to the m parities.
    pub update: f64,
    /// `ReconstructData` with the first m data shards lost.
    pub decode: f64,
}

/// How the harness is started.
enum Program {
    /// The path the user gave (`--klauspost`), run as it is.
    Given(PathBuf),
    /// A default location that passed [`open_trusted`]: the very file checked, run through
    /// its descriptor.
    Checked { file: OwnedFd, path: PathBuf },
}

/// A built harness.
pub struct Harness {
    program: Program,
    /// The library and Go version line it prints first.
    pub library: String,
}

/// The harness's `-variant` that runs the kernels of eckpt's `kernel`.
pub fn variant(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::Ssse3 => "ssse3",
        Kernel::Avx2 => "avx2",
        // AVX-512 without the GFNI kernels.
        Kernel::Avx512 => "nogfni",
        Kernel::Gfni | Kernel::Isal | Kernel::Reference => "auto",
    }
}

impl Harness {
    /// The harness at `given` (`--klauspost PATH`) if it is built there; without a path, the
    /// first default location that holds one ([`default_paths`]) if nobody else could have
    /// put it there ([`open_trusted`]). Says on stderr, in one line each, why not otherwise.
    pub fn find(given: Option<&Path>) -> Option<Harness> {
        if let Some(path) = given {
            if !path.is_file() {
                note_missing(path);
                return None;
            }
            return Some(Harness {
                program: Program::Given(path.to_path_buf()),
                library: String::new(),
            });
        }
        let defaults = default_paths();
        let mut any = false;
        for path in &defaults {
            if std::fs::symlink_metadata(path).is_err() {
                continue;
            }
            any = true;
            match open_trusted(path) {
                Ok(file) => {
                    return Some(Harness {
                        program: Program::Checked {
                            file,
                            path: path.clone(),
                        },
                        library: String::new(),
                    })
                }
                Err(why) => eprintln!(
                    "eckpt: note: not running {}: {why}; pass --klauspost PATH",
                    path.display()
                ),
            }
        }
        if !any {
            note_missing(defaults.first().map_or(Path::new(HARNESS), |p| p.as_path()));
        }
        None
    }

    /// The harness's path, for messages.
    fn path(&self) -> &Path {
        match &self.program {
            Program::Given(path) | Program::Checked { path, .. } => path,
        }
    }

    /// A command that starts the harness: the given path, or the checked descriptor.
    fn command(&self) -> Command {
        match &self.program {
            Program::Given(path) => Command::new(path),
            Program::Checked { file, .. } => {
                let fd = file.as_raw_fd();
                let mut command = Command::new(format!("/proc/self/fd/{fd}"));
                // The descriptor is close-on-exec in this process; in the child it stays
                // open across the exec, so that an interpreter (a `#!` script) can open the
                // file by the same name.
                // SAFETY: between fork and exec the closure only calls fcntl, which is
                // async-signal-safe, on the child's own copy of the descriptor.
                unsafe {
                    command.pre_exec(move || {
                        if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                command
            }
        }
    }

    /// Runs one repetition of RS(`k`,`m`) on `block` bytes per shard (a whole number of
    /// KiB) with `threads` goroutines, for `min_seconds` per operation.
    pub fn run(
        &mut self,
        k: usize,
        m: usize,
        block: u64,
        threads: usize,
        kernel: Kernel,
        min_seconds: f64,
    ) -> Result<Figures> {
        let output = self
            .command()
            .env("GOMAXPROCS", threads.to_string())
            .args([
                "-variant",
                variant(kernel),
                "-g",
                &threads.to_string(),
                "-reps",
                "1",
            ])
            .args(["-mint", &min_seconds.to_string()])
            .arg(format!("{k}:{m}:{}", block / 1024))
            .output()
            .with_context(|| format!("running {}", self.path().display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "{} failed: {}",
                self.path().display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        if let Some(first) = text.lines().next() {
            self.library = first.trim_start_matches('#').trim().to_string();
        }
        parse(&text).with_context(|| format!("reading the output of {}", self.path().display()))
    }
}

fn note_missing(path: &Path) {
    eprintln!(
        "eckpt: note: no klauspost harness at {} (`make klauspost` builds it; it needs Go)",
        path.display()
    );
}

/// Opens the harness at `path` for running if nobody but this user and root could have put
/// it there or changed it: the file, its directory and every directory above it belong to
/// this user or root; the file and its directory are writable by nobody else; a directory
/// further up that others may write into is sticky (in it they can neither rename nor
/// replace the entry below, which is this user's or root's). Each component is opened
/// relative to the one checked before it, without following symbolic links (the directory
/// is canonicalized first, so links in it are resolved to what they point to, and that is
/// what is checked), and checked by `fstat` on its descriptor: what is checked is what the
/// returned descriptor runs. Why not, otherwise, naming the file or directory at fault.
fn open_trusted(path: &Path) -> Result<OwnedFd, String> {
    let name = path.file_name().ok_or_else(|| "it names no file".to_string())?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = eckpt_private_dir::euid();
    let directory_flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mut shown = PathBuf::from("/");
    let mut at = open_at(libc::AT_FDCWD, Path::new("/"), directory_flags).map_err(|e| format!("/: {e}"))?;
    let below: Vec<&std::ffi::OsStr> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(c) => Some(c),
            _ => None,
        })
        .collect();
    check_directory(&shown, &at, me, below.is_empty())?;
    for (i, component) in below.iter().enumerate() {
        shown.push(component);
        at = open_at(at.as_raw_fd(), Path::new(component), directory_flags)
            .map_err(|e| format!("{}: {e}", shown.display()))?;
        check_directory(&shown, &at, me, i + 1 == below.len())?;
    }
    let file = open_at(
        at.as_raw_fd(),
        Path::new(name),
        libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let st = fstat(&file).map_err(|e| format!("{}: {e}", path.display()))?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFLNK => return Err(format!("{} is a symbolic link", path.display())),
        _ => return Err(format!("{} is not a regular file", path.display())),
    }
    if st.st_uid != me && st.st_uid != 0 {
        return Err(format!(
            "{} is owned by user {}, neither this user ({me}) nor root",
            path.display(),
            st.st_uid
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(format!("{} is writable by others", path.display()));
    }
    Ok(file)
}

/// Checks directory `shown` (open as `fd`) on the way to the harness; `own`: the harness's
/// own directory, which must be writable by nobody else even when sticky (anyone could
/// create the harness in it).
fn check_directory(shown: &Path, fd: &OwnedFd, me: u32, own: bool) -> Result<(), String> {
    let st = fstat(fd).map_err(|e| format!("{}: {e}", shown.display()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(format!("{} is not a directory", shown.display()));
    }
    if st.st_uid != me && st.st_uid != 0 {
        return Err(format!(
            "{} is owned by user {}, neither this user ({me}) nor root",
            shown.display(),
            st.st_uid
        ));
    }
    let sticky = st.st_mode & libc::S_ISVTX != 0;
    if st.st_mode & 0o022 != 0 && (own || !sticky) {
        return Err(format!("{} is writable by others", shown.display()));
    }
    Ok(())
}

/// `openat(dir, name, flags)`.
fn open_at(dir: RawFd, name: &Path, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let name = CString::new(name.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid NUL-terminated name; `dir` is open or AT_FDCWD.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is writable.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// The figures of the harness's one result line: `k m block | encode [min,max] | EncodeIdx
/// … | ReconstructData …`, each column's first number the median.
fn parse(text: &str) -> Result<Figures> {
    if text.contains("VERIFY-FAIL") {
        bail!("the harness says its own results are wrong");
    }
    let line = text
        .lines()
        .find(|l| !l.starts_with('#') && l.matches('|').count() == 3 && !l.starts_with('k'))
        .context("no result line")?;
    let columns: Vec<f64> = line
        .split('|')
        .skip(1)
        .map(|c| {
            c.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .context("a column without a number")
        })
        .collect::<Result<_>>()?;
    Ok(Figures {
        encode: columns[0],
        update: columns[1],
        decode: columns[2],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_is_read_column_by_column() {
        let out = "# klauspost/reedsolomon v1.14.2 go1.26.8 GOMAXPROCS=1\n# cpuid: AMD EPYC  AVX2=true\n\
                   k    m   block     | encode GB/s med [min,max] | EncodeIdx GB/s med[min,max] | ReconstructData GB/s\n\
                   10   4   1MiB      |  12.53 [  9.14, 19.97]   |   3.43 [  0.54,  4.77]   |   8.02 [  5.87, 10.28]\n";
        assert_eq!(
            parse(out).unwrap(),
            Figures {
                encode: 12.53,
                update: 3.43,
                decode: 8.02
            }
        );
        assert!(parse(&out.replace("10.28]", "10.28] VERIFY-FAIL")).is_err());
        assert!(parse("# only a header\n").is_err());
    }

    #[test]
    fn the_harness_is_looked_for_in_the_target_directory_of_the_binary() {
        assert_eq!(
            harness_beside(Path::new("/repo/target/release/eckpt")),
            Some(PathBuf::from("/repo/target/klauspost-bench"))
        );
    }

    #[test]
    fn a_default_harness_is_trusted_only_where_nobody_else_can_write() {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        mode(&root, 0o700);
        let harness = root.join(HARNESS);
        std::fs::write(&harness, "#!/bin/sh\n").unwrap();
        mode(&harness, 0o755);
        assert!(open_trusted(&harness).is_ok());

        mode(&harness, 0o775);
        let why = open_trusted(&harness).unwrap_err();
        assert_eq!(why, format!("{} is writable by others", harness.display()));
        mode(&harness, 0o755);

        // Its own directory writable by others, sticky or not: anyone could have put it there.
        for open in [0o777, 0o1777, 0o770] {
            mode(&root, open);
            let why = open_trusted(&harness).unwrap_err();
            assert_eq!(
                why,
                format!("{} is writable by others", root.display()),
                "{open:o}"
            );
        }
        // Further up, a sticky directory (like /tmp) is fine: nobody else can replace the
        // private directory below it; one that is not sticky is not.
        let private = root.join("private");
        std::fs::create_dir(&private).unwrap();
        mode(&private, 0o700);
        let deeper = private.join(HARNESS);
        std::fs::write(&deeper, "#!/bin/sh\n").unwrap();
        mode(&deeper, 0o700);
        mode(&root, 0o1777);
        assert!(open_trusted(&deeper).is_ok());
        mode(&root, 0o777);
        let why = open_trusted(&deeper).unwrap_err();
        assert_eq!(why, format!("{} is writable by others", root.display()));
        mode(&root, 0o700);

        let link = root.join("link");
        std::os::unix::fs::symlink(&harness, &link).unwrap();
        let why = open_trusted(&link).unwrap_err();
        assert_eq!(why, format!("{} is a symbolic link", link.display()));
        std::fs::create_dir(root.join("dir")).unwrap();
        let why = open_trusted(&root.join("dir")).unwrap_err();
        assert!(why.ends_with("is not a regular file"), "{why}");
    }

    #[test]
    fn each_kernel_level_is_compared_with_the_same_level() {
        assert_eq!(variant(Kernel::Avx2), "avx2");
        assert_eq!(variant(Kernel::Ssse3), "ssse3");
        assert_eq!(variant(Kernel::Avx512), "nogfni");
        assert_eq!(variant(Kernel::Gfni), "auto");
    }
}
