//! The config directory: every regular file under it (recursively, in name order; dot files
//! skipped when RUNTIME_IGNOREDOTFILES), named by its path relative to the directory's parent
//! (`config/limits.yaml`), as the peer's runtime loader sees them. A watcher re-reads them every
//! RLS_RELOAD_INTERVAL_MS and hands over a set only when it changed.

use std::path::Path;

pub type Files = Vec<(String, String)>;

pub fn read(dir: &Path, ignore_dotfiles: bool) -> Result<Files, String> {
    let base = dir.parent().unwrap_or(dir);
    let mut out = Vec::new();
    walk(dir, base, ignore_dotfiles, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(dir: &Path, base: &Path, ignore_dotfiles: bool, out: &mut Files) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("{}: cannot read: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden && ignore_dotfiles {
            continue;
        }
        // Follows symlinks: a runtime directory is often swapped in with one.
        let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.is_dir() {
            walk(&path, base, ignore_dotfiles, out)?;
        } else if meta.is_file() {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
            let name = path
                .strip_prefix(base)
                .unwrap_or(&path)
                .display()
                .to_string();
            out.push((name, text));
        }
    }
    Ok(())
}
