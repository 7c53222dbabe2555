//! The billing journal: an append-only file of what the ledger owes, one record a line, so that
//! counts admitted without the store outlive the process. Each record is written (`write(2)`)
//! before the request it counts proceeds, so a killed process loses nothing; a thread fsyncs in
//! batches (one fsync at a time, each covering every record written before it), so a machine
//! that loses power loses at most the records of the last fsync or two. A charge record is
//! fsynced before its charge is sent.
//!
//! Records (keys in hex, B `-` when unset):
//! - `owe <amount> <algorithm> <L> <W> <B> <key>`: billing admitted `amount` without the store;
//! - `charge <token> <amount> <algorithm> <L> <W> <B> <key>`: `amount` of the key's debt moved to
//!   a charge sent with this idempotency token (retried with the same token until it lands);
//! - `done <token>`: the store counted the charge (now or earlier);
//! - `drop <token>`: the store denied it without running it: the amount is owed again.
//!
//! The next process with the same path replays the file into its ledger, and rewrites it as a
//! snapshot (`owe` and `charge` lines only) that it owns from then on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::billing::owed::{Book, Charge, Debt};
use crate::command::{Algorithm, Policy};
use crate::sync::lock;

/// Bytes appended after which the file is rewritten as a snapshot of what is owed.
const COMPACT_AFTER: u64 = 4 << 20;

pub(crate) enum Record<'a> {
    Owe(&'a str, &'a Policy, u64),
    Charge(&'a str, &'a Charge),
    Done(&'a str),
    Drop(&'a str),
}

impl Record<'_> {
    fn line(&self) -> String {
        match self {
            Record::Owe(key, p, amount) => format!("owe {amount} {}\n", policy_key(p, key)),
            Record::Charge(token, c) => format!(
                "charge {token} {} {}\n",
                c.amount,
                policy_key(&c.policy, &c.key)
            ),
            Record::Done(token) => format!("done {token}\n"),
            Record::Drop(token) => format!("drop {token}\n"),
        }
    }
}

fn policy_key(p: &Policy, key: &str) -> String {
    let burst = p.burst.map_or("-".to_string(), |b| b.to_string());
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    format!(
        "{} {} {} {burst} {hex}",
        p.algorithm.name(),
        p.limit,
        p.window_ms
    )
}

struct File_ {
    file: File,
    /// Bytes appended since the last snapshot.
    appended: u64,
}

/// The open journal and its fsync thread.
pub(crate) struct Journal {
    path: PathBuf,
    file: Mutex<Option<File_>>,
    /// Written but not yet fsynced.
    dirty: Mutex<bool>,
    /// Removed at a shutdown that owed nothing: never written again.
    removed: std::sync::atomic::AtomicBool,
    wake: Condvar,
}

impl Journal {
    /// Replays the journal at `path` into a book, rewrites it as a snapshot of that book and
    /// opens it for appends. An unreadable journal is logged and starts an empty book.
    pub(crate) fn open(path: &Path) -> (Arc<Journal>, Book) {
        let book = match std::fs::read_to_string(path) {
            Ok(text) => replay(path, &text),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::error!("billing journal {}: {e}", path.display());
                }
                Book::default()
            }
        };
        let journal = Arc::new(Journal {
            path: path.to_path_buf(),
            file: Mutex::new(None),
            dirty: Mutex::new(false),
            removed: std::sync::atomic::AtomicBool::new(false),
            wake: Condvar::new(),
        });
        journal.snapshot(&book);
        let weak = Arc::downgrade(&journal);
        let spawned = std::thread::Builder::new()
            .name("billing-journal-fsync".into())
            .spawn(move || fsync_loop(weak));
        if let Err(e) = spawned {
            log::error!("billing journal: no fsync thread ({e}): records are fsynced at charges");
        }
        (journal, book)
    }

    /// Appends one record (the caller holds the ledger's lock, so the file's order is the
    /// ledger's). An error is logged: the count is still in memory.
    pub(crate) fn append(&self, record: Record<'_>, book: &Book) {
        let line = record.line();
        let mut f = lock(&self.file);
        let Some(open) = f.as_mut() else {
            return;
        };
        if let Err(e) = open.file.write_all(line.as_bytes()) {
            log::error!("billing journal {}: {e}", self.path.display());
            return;
        }
        open.appended += line.len() as u64;
        let compact = open.appended >= COMPACT_AFTER;
        drop(f);
        *lock(&self.dirty) = true;
        self.wake.notify_one();
        if compact {
            self.snapshot(book);
        }
    }

    /// fsyncs what was written so far (before a charge is sent).
    pub(crate) fn sync(&self) {
        *lock(&self.dirty) = false;
        if let Some(open) = lock(&self.file).as_ref() {
            if let Err(e) = open.file.sync_data() {
                log::error!("billing journal {}: fsync: {e}", self.path.display());
            }
        }
    }

    /// Rewrites the file as `book` (written to a temporary file, fsynced, renamed over it), or
    /// empties it when nothing is owed, and appends from there.
    pub(crate) fn snapshot(&self, book: &Book) {
        let mut f = lock(&self.file);
        if self.removed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        match write_snapshot(&self.path, book) {
            Ok(file) => {
                *f = Some(File_ { file, appended: 0 });
            }
            Err(e) => log::error!("billing journal {}: {e}", self.path.display()),
        }
    }

    /// Removes the file (a shutdown that owes nothing).
    pub(crate) fn remove(&self) {
        let mut f = lock(&self.file);
        *f = None;
        self.removed
            .store(true, std::sync::atomic::Ordering::Release);
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                log::error!("billing journal {}: {e}", self.path.display())
            }
            _ => {}
        }
    }
}

fn write_snapshot(path: &Path, book: &Book) -> std::io::Result<File> {
    let mut text = String::new();
    for (key, d) in book.debts.iter().filter(|(_, d)| d.amount > 0) {
        text += &Record::Owe(key, &d.policy, d.amount).line();
    }
    for (token, c) in &book.charges {
        text += &Record::Charge(token, c).line();
    }
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename itself is durable once the directory is.
        File::open(dir)?.sync_all()?;
    }
    OpenOptions::new().append(true).open(path)
}

/// One fsync at a time while anything is written and not fsynced; ends with the journal.
fn fsync_loop(journal: Weak<Journal>) {
    loop {
        let Some(j) = journal.upgrade() else {
            return;
        };
        let dirty = {
            let guard = lock(&j.dirty);
            let (guard, _) = j
                .wake
                .wait_timeout_while(guard, Duration::from_secs(1), |d| !*d)
                .unwrap_or_else(|p| p.into_inner());
            *guard
        };
        if dirty {
            j.sync();
        }
    }
}

/// The book a journal's text leaves (a line that does not parse is logged and skipped: a
/// machine crash can cut the last one).
fn replay(path: &Path, text: &str) -> Book {
    let mut book = Book::default();
    for line in text.lines() {
        if apply(&mut book, line).is_none() {
            log::error!("billing journal {}: bad line {line:?}", path.display());
        }
    }
    book
}

fn apply(book: &mut Book, line: &str) -> Option<()> {
    let mut w = line.split(' ');
    match w.next()? {
        "owe" => {
            let amount: u64 = w.next()?.parse().ok()?;
            let (policy, key) = parse_policy_key(&mut w)?;
            let debt = book.debts.entry(key).or_insert(Debt { policy, amount: 0 });
            debt.policy = policy;
            debt.amount = debt.amount.saturating_add(amount);
        }
        "charge" => {
            let token = w.next()?.to_string();
            let amount: u64 = w.next()?.parse().ok()?;
            let (policy, key) = parse_policy_key(&mut w)?;
            book.take_debt(&key, amount);
            // Sent, perhaps counted: retried with its own token until the store says.
            book.charges.insert(
                token,
                Charge {
                    key,
                    policy,
                    amount,
                    uncertain: true,
                },
            );
        }
        "done" => {
            book.charges.remove(w.next()?);
        }
        "drop" => {
            let c = book.charges.remove(w.next()?)?;
            book.owe(&c.key, &c.policy, c.amount);
        }
        _ => return None,
    }
    Some(())
}

fn parse_policy_key<'a>(w: &mut impl Iterator<Item = &'a str>) -> Option<(Policy, String)> {
    let algorithm = Algorithm::parse(w.next()?)?;
    let limit = w.next()?.parse().ok()?;
    let window_ms = w.next()?.parse().ok()?;
    let burst = match w.next()? {
        "-" => None,
        b => Some(b.parse().ok()?),
    };
    let hex = w.next()?;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let key = String::from_utf8(bytes).ok()?;
    let policy = Policy {
        algorithm,
        limit,
        window_ms,
        burst,
    };
    Some((policy, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_follows_owe_charge_done_and_drop() {
        let p = Policy::fixed_window(10, 1000);
        let key = |k: &str| -> String { k.bytes().map(|b| format!("{b:02x}")).collect() };
        let (a, b) = (key("q:a"), key("q:b"));
        let text = format!(
            "owe 5 FIXEDWINDOW 10 1000 - {a}\nowe 3 FIXEDWINDOW 10 1000 - {b}\n\
             charge t1 4 FIXEDWINDOW 10 1000 - {a}\ncharge t2 3 FIXEDWINDOW 10 1000 - {b}\n\
             done t2\nowe 2 FIXEDWINDOW 10 1000 - {a}\ncharge t3 1 FIXEDWINDOW 10 1000 - {a}\n\
             drop t3\nowe 7 FIXEDWINDOW 10 10"
        );
        let book = replay(Path::new("j"), &text);
        assert_eq!(
            book.debts.get("q:a").map(|d| (d.amount, d.policy)),
            Some((3, p))
        );
        assert!(!book.debts.contains_key("q:b"));
        let t1 = book.charges.get("t1").unwrap();
        assert_eq!((t1.key.as_str(), t1.amount, t1.uncertain), ("q:a", 4, true));
        assert_eq!(book.charges.len(), 1);
    }
}
