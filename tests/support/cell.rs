//! The real redis-cell, built from its crates.io source at test time, for the migration tests
//! (which run it beside the module on one wall clock, `testkit::WallClock`).
//!
//! crates.io holds redis-cell 0.2.2 only (later releases are on GitHub, which neither CI nor a
//! developer's machine reaches). Its algorithm is the current release's, line for line (the
//! GCRA in `src/cell/mod.rs`: the TAT, the emission interval truncated to whole ns, the
//! `remaining` in f64 microseconds); two things changed since, and the build applies both to
//! 0.2.2's source so that the tests meet redis-cell as it is deployed today:
//! - the reply's times: 0.2.2 truncates them to whole seconds; since 0.3 a time with a
//!   sub-second part of at least a millisecond is rounded up;
//! - replication: 0.2.2 propagates nothing (replicas and the AOF never see its writes); since
//!   0.3 it calls `RedisModule_ReplicateVerbatim`, so replicas and the AOF get `CL.THROTTLE`.
//!
//! Built once into `~/.cache/redis-ratelimit/redis-cell-0.2.2-current/libredis_cell.so` (in a
//! target dir of its own, with its own bindings to the module API: it does not use
//! redis-module). First build: ~3 s of compile
//! plus the download of four small crates; later runs find the library there.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

const VERSION: &str = "0.2.2";

fn cache_dir() -> Result<PathBuf, String> {
    let home = std::env::var("HOME").map_err(|_| "HOME is not set".to_string())?;
    Ok(PathBuf::from(home).join(".cache/redis-ratelimit"))
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The path of redis-cell's module (built on first use), or why it cannot be had (no network
/// and nothing cached: the caller skips).
pub fn redis_cell() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone()
}

fn build() -> Result<PathBuf, String> {
    let dir = cache_dir()?.join(format!("redis-cell-{VERSION}-current"));
    let so = dir.join("libredis_cell.so");
    if so.exists() {
        return Ok(so);
    }
    let started = Instant::now();
    // Built in a directory of this process (two test runs may build at once), and only the
    // library is kept, renamed into place.
    let work = dir.join(format!("build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let built = build_in(&work);
    if let Ok(lib) = &built {
        std::fs::rename(lib, &so).map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_dir_all(&work);
    built?;
    eprintln!(
        "built redis-cell {VERSION} in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        so.display()
    );
    Ok(so)
}

/// Fetches, patches and builds redis-cell under `dir`; returns the built library's path.
fn build_in(dir: &Path) -> Result<PathBuf, String> {
    // Fetch the source with cargo: a throwaway package that depends on it.
    let fetch = dir.join("fetch");
    std::fs::create_dir_all(fetch.join("src")).map_err(|e| e.to_string())?;
    std::fs::write(
        fetch.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch-redis-cell\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nredis-cell = \"={VERSION}\"\n\n[workspace]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(fetch.join("src/lib.rs"), "").map_err(|e| e.to_string())?;
    let manifest = fetch.join("Cargo.toml");
    run(
        Command::new(cargo())
            .arg("fetch")
            .arg("--manifest-path")
            .arg(&manifest),
        "cargo fetch redis-cell",
    )?;
    let meta = run(
        Command::new(cargo())
            .args(["metadata", "--offline", "--format-version", "1"])
            .arg("--manifest-path")
            .arg(&manifest),
        "cargo metadata",
    )?;
    let needle = format!("redis-cell-{VERSION}/Cargo.toml\"");
    let end = meta
        .find(&needle)
        .ok_or("cargo metadata does not name redis-cell's source")?;
    let start = meta[..end].rfind('"').ok_or("unreadable cargo metadata")? + 1;
    let source = Path::new(&meta[start..end + needle.len() - 1])
        .parent()
        .ok_or("no source dir")?
        .to_path_buf();
    // Our own copy, patched as the current release behaves (see the module doc).
    let src = dir.join("src");
    let _ = std::fs::remove_dir_all(&src);
    copy_dir(&source, &src)?;
    patch(
        &src.join("src/lib.rs"),
        &[
            (
                "r.reply_integer(rate_limit_result.retry_after.num_seconds())?;",
                "r.reply_integer(seconds_up(rate_limit_result.retry_after))?;",
            ),
            (
                "r.reply_integer(rate_limit_result.reset_after.num_seconds())?;",
                "r.reply_integer(seconds_up(rate_limit_result.reset_after))?;",
            ),
            (
                "    Command::harness(&ThrottleCommand {}, ctx, argv, argc)\n",
                "    let status = Command::harness(&ThrottleCommand {}, ctx, argv, argc);\n    \
                 if status == raw::Status::Ok {\n        unsafe { Cell_ReplicateVerbatim(ctx) };\n    }\n    status\n",
            ),
        ],
        "\n// As redis-cell 0.3+: whole seconds, rounded up when a whole millisecond is left over.\n\
         fn seconds_up(d: time::Duration) -> i64 {\n    let s = d.num_seconds();\n    \
         if d.num_milliseconds() - s * 1000 > 0 { s + 1 } else { s }\n}\n\n\
         extern \"C\" {\n    fn Cell_ReplicateVerbatim(ctx: *mut raw::RedisModuleCtx) -> c_int;\n}\n",
    )?;
    patch(
        &src.join("src/redismodule.c"),
        &[],
        "\nint Cell_ReplicateVerbatim(RedisModuleCtx *ctx) {\n    \
         return RedisModule_ReplicateVerbatim(ctx);\n}\n",
    )?;
    let toml = src.join("Cargo.toml");
    let mut text = std::fs::read_to_string(&toml).map_err(|e| e.to_string())?;
    text.push_str("\n[workspace]\n");
    std::fs::write(&toml, text).map_err(|e| e.to_string())?;
    // Download what it needs, then build offline in its own target dir.
    let manifest = src.join("Cargo.toml");
    run(
        Command::new(cargo())
            .arg("fetch")
            .arg("--manifest-path")
            .arg(&manifest),
        "cargo fetch (redis-cell's dependencies)",
    )?;
    run(
        Command::new(cargo())
            .args(["build", "--release", "--offline", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(dir.join("target"))
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET"),
        "cargo build redis-cell",
    )?;
    Ok(dir.join("target/release/libredis_cell.so"))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Replaces each `(old, new)` (each must be there exactly once) and appends `tail`.
fn patch(file: &Path, edits: &[(&str, &str)], tail: &str) -> Result<(), String> {
    let mut text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    for (old, new) in edits {
        if text.matches(old).count() != 1 {
            return Err(format!(
                "{}: expected `{old}` once: not the source this test knows",
                file.display()
            ));
        }
        text = text.replace(old, new);
    }
    text.push_str(tail);
    std::fs::write(file, text).map_err(|e| e.to_string())
}
