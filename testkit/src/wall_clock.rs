//! The wall clock of a server without the module: the Functions library decides on the server's
//! `TIME`, so such a test server preloads the project's clock shim (`fake_clock.c` beside this
//! file, built with gcc once per test process) and reads the instant the test writes into a
//! file of its own. Redis then also expires keys on that clock, as it would on a real one.
//! Several servers may read one clock (redis-cell's and ours, side by side).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::place::Scratch;

/// The shim, compiled once per test process into the workspace's `target/tmp` (one file, not
/// one per process).
fn shim() -> Result<PathBuf, String> {
    static SHIM: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = SHIM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.as_ref() {
        return Ok(path.clone());
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/fake_clock.c");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Built under a name of this process, then renamed into place: another test binary may be
    // building it at the same time, and a server still mapping the old file keeps it.
    let tmp = dir.join(format!("fake_clock.so.{}", std::process::id()));
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&tmp)
        .arg(&source)
        .status()
        .map_err(|e| format!("gcc (scripts/install-deps installs it): {e}"))?;
    if !status.success() {
        return Err(format!("gcc {} failed", source.display()));
    }
    let out = dir.join("fake_clock.so");
    std::fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    *built = Some(out.clone());
    Ok(out)
}

/// One server's clock: a file holding the instant in ns (little-endian i64) twice, written in
/// place (the server maps it: a truncated file would fault its reads), the second copy first:
/// the shim reads an instant only when both copies agree, never one torn by a write.
pub struct WallClock {
    path: PathBuf,
    file: File,
    shim: PathBuf,
    _dir: Scratch,
}

impl WallClock {
    pub fn new(ms: u64) -> Result<WallClock, String> {
        let shim = shim()?;
        let dir = Scratch::new("clock")?;
        let path = dir.path().join("clock");
        std::fs::write(&path, [0u8; 16]).map_err(|e| e.to_string())?;
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| e.to_string())?;
        let clock = WallClock {
            path,
            file,
            shim,
            _dir: dir,
        };
        clock.set(ms);
        Ok(clock)
    }

    /// Every server reading this clock reads `ms` from now on (and keys expire by it).
    pub fn set(&self, ms: u64) {
        let ns = i64::try_from(ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
        // Writes of 8 bytes within a file that already holds them: they cannot fail short of a
        // broken disk, which fails the test at its next read of the clock.
        let _ = self.file.write_all_at(&ns.to_le_bytes(), 8);
        let _ = self.file.write_all_at(&ns.to_le_bytes(), 0);
    }

    /// What the server's environment needs to read it.
    pub fn env(&self) -> [(String, String); 2] {
        [
            ("LD_PRELOAD".into(), self.shim.display().to_string()),
            ("RL_FAKE_CLOCK".into(), self.path.display().to_string()),
        ]
    }
}
