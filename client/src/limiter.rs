//! The gateway's limiter: every check goes to the store within a deadline, through a circuit,
//! and falls back on its limit's class when the store does not decide; leased tokens are spent
//! locally; billing counts admitted during an outage are charged to the store when it answers.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::circuit::{Circuit, CircuitConfig, Permit};
use crate::clock::{ns, Clock, SystemClock};
use crate::command::{AllDecision, Class, Decision, Policy, Source};
use crate::local::LocalBucket;
use crate::observe::{self, LogRecord, LogSink};
use crate::{Error, Limit, Store};

/// Fallback buckets and lease pools kept at most (the least useful are dropped beyond it).
const MAX_LOCAL_KEYS: usize = 100_000;

/// How a [`Limiter`] behaves; `Config::default()` is a sound start.
#[derive(Clone)]
pub struct Config {
    /// The longest a check waits for the store before its class's fallback decides.
    pub deadline: Duration,
    /// N, the number of gateways sharing the store: the local fallbacks take L/N. `None`: the
    /// security class fails closed (unless a limit sets its own local limit), the contract
    /// class takes L.
    pub gateways: Option<u32>,
    pub circuit: CircuitConfig,
    /// How long leased tokens may be spent after the grant; then they lapse.
    pub lease_lifetime: Duration,
    /// The deadline of each store call during `shutdown` (refunds, billing flush).
    pub shutdown_deadline: Duration,
    /// `Retry-After` of a fail-closed security decision.
    pub fail_closed_retry: Duration,
    /// The client's clock (leases, local buckets, circuit backoff).
    pub clock: Arc<dyn Clock>,
    /// Log one decision in this many (0: none).
    pub log_every: u64,
    pub log_sink: LogSink,
    /// Where billing counts the store could not be charged at shutdown are written, and read
    /// back from at start.
    pub billing_journal: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            deadline: crate::store::DEFAULT_DEADLINE,
            gateways: None,
            circuit: CircuitConfig::default(),
            lease_lifetime: Duration::from_secs(1),
            shutdown_deadline: Duration::from_secs(2),
            fail_closed_retry: Duration::from_secs(1),
            clock: Arc::new(SystemClock::new()),
            log_every: 1000,
            log_sink: observe::log_sink(),
            billing_journal: None,
        }
    }
}

/// Counters a test or an operator can read without a metrics exporter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub store_calls: u64,
    pub lease_spent: u64,
    pub fallbacks: u64,
    pub lapsed_tokens: u64,
    /// Store calls that timed out. Such a call may still be applied by the store later (a
    /// stalled server runs what it had queued): a billing count admitted by the fallback after
    /// one may be charged twice, never zero times.
    pub timeouts: u64,
}

/// What `shutdown` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Unspent leased tokens given back with `RL.REFUND`.
    pub refunded: u64,
    /// Billing counts charged to the store.
    pub charged: u64,
    /// Billing counts the store could not take, written to the journal (or lost without one).
    pub unsettled: u64,
}

#[derive(Default)]
struct Pool {
    tokens: u64,
    /// The store had no token before this instant: deny locally until then.
    empty_until_ns: u64,
    expires_ns: u64,
    store_remaining: u64,
    limit: u64,
    reset_after_ms: u64,
}

#[derive(Clone, Copy)]
struct Debt {
    policy: Policy,
    amount: u64,
}

struct Inner {
    store: Store,
    config: Config,
    circuit: Circuit,
    fallback: Mutex<HashMap<(String, String), LocalBucket>>,
    debts: Mutex<HashMap<String, Debt>>,
    pools: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Pool>>>>,
    store_calls: AtomicU64,
    lease_spent: AtomicU64,
    fallbacks: AtomicU64,
    lapsed: AtomicU64,
    timeouts: AtomicU64,
    last_reconcile_ns: AtomicU64,
    decisions: AtomicU64,
    reconciling: std::sync::atomic::AtomicBool,
    settling: tokio::sync::Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The limiter a gateway shares between its request handlers (cheap to clone).
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl Limiter {
    /// A limiter over `store`; its deadline becomes `config.deadline`. Reads the billing
    /// journal, if any, back into the counts to charge.
    pub fn new(store: Store, config: Config) -> Limiter {
        let store = store.with_deadline(config.deadline);
        let debts = config
            .billing_journal
            .as_ref()
            .map(|p| journal::read(p))
            .unwrap_or_default();
        Limiter {
            inner: Arc::new(Inner {
                store,
                circuit: Circuit::new(config.circuit),
                config,
                fallback: Mutex::new(HashMap::new()),
                debts: Mutex::new(debts),
                pools: Mutex::new(HashMap::new()),
                store_calls: AtomicU64::new(0),
                lease_spent: AtomicU64::new(0),
                fallbacks: AtomicU64::new(0),
                lapsed: AtomicU64::new(0),
                timeouts: AtomicU64::new(0),
                last_reconcile_ns: AtomicU64::new(0),
                decisions: AtomicU64::new(0),
                reconciling: std::sync::atomic::AtomicBool::new(false),
                settling: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The store, for typed calls without fallback.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// True while the circuit is open (or probing): the store is not being called.
    pub fn circuit_open(&self) -> bool {
        self.inner.circuit.is_open()
    }

    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        Stats {
            store_calls: i.store_calls.load(Ordering::Relaxed),
            lease_spent: i.lease_spent.load(Ordering::Relaxed),
            fallbacks: i.fallbacks.load(Ordering::Relaxed),
            lapsed_tokens: i.lapsed.load(Ordering::Relaxed),
            timeouts: i.timeouts.load(Ordering::Relaxed),
        }
    }

    /// Billing counts admitted without the store and not charged yet, by store key.
    pub fn unsettled(&self) -> HashMap<String, u64> {
        lock(&self.inner.debts)
            .iter()
            .map(|(k, d)| (k.clone(), d.amount))
            .collect()
    }

    /// One request of cost 1 on `key` under `limit`.
    pub async fn check(&self, limit: &Limit, key: &str) -> Result<Decision, Error> {
        self.check_cost(limit, key, 1).await
    }

    /// One request of cost `cost`. A denial is `Ok`; `Err` only for what no fallback may hide
    /// (the store rejected the limit's arguments, the key holds another type).
    pub async fn check_cost(&self, limit: &Limit, key: &str, cost: u64) -> Result<Decision, Error> {
        let started = Instant::now();
        let key = limit.store_key(key);
        let policy = limit.store_policy();
        let mut store_latency = None;
        let result = match limit.lease {
            Some(k) => {
                self.leased(&key, &policy, cost, k, &mut store_latency)
                    .await
            }
            None => self.decided(&key, &policy, cost, &mut store_latency).await,
        };
        let (decision, status) = match result {
            Ok(d) => (d, "ok"),
            Err(e) if e.store_down() => {
                (self.fall_back(limit, &key, &policy, cost, true), e.kind())
            }
            Err(e) => return Err(e),
        };
        self.observe(limit, &decision, started.elapsed(), store_latency, status);
        Ok(decision)
    }

    /// One atomic decision over several limits (`RL.ALL`): admitted only if every one admits.
    /// Keys are used as given (no lease, no split) and must share a hash slot on a Cluster.
    /// When the store does not decide, each limit's fallback decides and all must admit.
    pub async fn check_all(&self, checks: &[(&Limit, &str, u64)]) -> Result<AllDecision, Error> {
        let started = Instant::now();
        let args: Vec<(&str, Policy, u64)> =
            checks.iter().map(|(l, k, c)| (*k, l.policy, *c)).collect();
        let mut latency = None;
        let result = self
            .call(&mut latency, false, self.inner.store.all(&args))
            .await;
        let (all, status) = match result {
            Ok(all) => (all, "ok"),
            Err(e) if e.store_down() => {
                // Each fallback decides on a copy; only if all admit are they charged.
                let mut limiters: Vec<Decision> = checks
                    .iter()
                    .map(|(l, k, c)| self.fall_back(l, k, &l.policy, *c, false))
                    .collect();
                let admit = limiters.iter().all(|d| d.allowed);
                if admit {
                    limiters = checks
                        .iter()
                        .map(|(l, k, c)| self.fall_back(l, k, &l.policy, *c, true))
                        .collect();
                }
                (combine(&limiters, admit), e.kind())
            }
            Err(e) => return Err(e),
        };
        if let Some((first, _, _)) = checks.first() {
            self.observe(first, &all.combined, started.elapsed(), latency, status);
        }
        Ok(all)
    }

    /// One store call through the circuit: skipped while it is open, recorded either way.
    async fn call<T>(
        &self,
        latency: &mut Option<Duration>,
        force: bool,
        f: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let i = &self.inner;
        if !force && i.circuit.permit(i.config.clock.now_ns()) == Permit::Skip {
            return Err(Error::CircuitOpen);
        }
        i.store_calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = f.await;
        let took = started.elapsed();
        *latency = Some(took);
        match &result {
            Err(e) if e.store_down() => {
                if *e == Error::Timeout {
                    i.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                observe::store_call(took, Some(e.kind()));
                i.circuit.failure(i.config.clock.now_ns());
            }
            other => {
                observe::store_call(took, other.as_ref().err().map(Error::kind));
                let recovered = i.circuit.success();
                if !lock(&i.debts).is_empty() {
                    // The store answers: charge what billing admitted without it, at once when
                    // it just came back, else at most once per second (a quota that is spent
                    // keeps its debt until it refills).
                    let now = i.config.clock.now_ns();
                    let last = i.last_reconcile_ns.load(Ordering::Relaxed);
                    if recovered || now.saturating_sub(last) >= 1_000_000_000 {
                        i.last_reconcile_ns.store(now, Ordering::Relaxed);
                        self.spawn_reconcile();
                    }
                }
            }
        }
        result
    }

    async fn decided(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        latency: &mut Option<Duration>,
    ) -> Result<Decision, Error> {
        let store = &self.inner.store;
        self.call(latency, false, store.decide(key, policy, cost))
            .await
    }

    /// Spends leased tokens, taking a new lease when they run out or lapse.
    async fn leased(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        k: u64,
        latency: &mut Option<Duration>,
    ) -> Result<Decision, Error> {
        let i = &self.inner;
        let pool = {
            let mut pools = lock(&i.pools);
            if pools.len() >= MAX_LOCAL_KEYS {
                let now = i.config.clock.now_ns();
                pools.retain(|_, p| p.try_lock().map_or(true, |p| p.expires_ns > now));
            }
            pools.entry(key.to_string()).or_default().clone()
        };
        // Requests for one key queue for its pool; none waits longer than the deadline.
        let mut p = tokio::time::timeout(i.config.deadline, pool.lock())
            .await
            .map_err(|_| Error::Timeout)?;
        let now = i.config.clock.now_ns();
        if p.expires_ns <= now && p.tokens > 0 {
            i.lapsed.fetch_add(p.tokens, Ordering::Relaxed);
            p.tokens = 0;
        }
        if p.tokens >= cost {
            p.tokens -= cost;
            i.lease_spent.fetch_add(1, Ordering::Relaxed);
            return Ok(Decision {
                allowed: true,
                granted: 1,
                limit: p.limit,
                remaining: p.store_remaining.saturating_add(p.tokens),
                retry_after_ms: None,
                reset_after_ms: p.reset_after_ms,
                source: Source::Lease,
            });
        }
        if now < p.empty_until_ns {
            // The store said when a token is back: no call before then.
            return Ok(Decision {
                allowed: false,
                granted: 0,
                limit: p.limit,
                remaining: p.tokens,
                retry_after_ms: Some((p.empty_until_ns - now).div_ceil(1_000_000)),
                reset_after_ms: p.reset_after_ms,
                source: Source::Lease,
            });
        }
        let want = k.max(cost).saturating_sub(p.tokens).max(1);
        let d = self
            .call(latency, false, i.store.lease(key, policy, want))
            .await?;
        if d.granted > 0 {
            if p.tokens == 0 {
                p.expires_ns = now.saturating_add(ns(i.config.lease_lifetime));
            }
            p.tokens += d.granted;
        }
        if d.granted == 0 {
            let retry_ns = d.retry_after_ms.unwrap_or(0).saturating_mul(1_000_000);
            p.empty_until_ns = now.saturating_add(retry_ns);
        }
        p.store_remaining = d.remaining;
        p.limit = d.limit;
        p.reset_after_ms = d.reset_after_ms;
        if p.tokens >= cost {
            p.tokens -= cost;
            Ok(Decision {
                allowed: true,
                granted: 1,
                remaining: d.remaining.saturating_add(p.tokens),
                retry_after_ms: None,
                ..d
            })
        } else {
            // Not enough for this cost: keep what was granted, say when the rest comes.
            let missing = cost - p.tokens;
            let per_token = policy.window_ms.div_ceil(policy.limit.max(1));
            let retry = d
                .retry_after_ms
                .unwrap_or_else(|| missing.saturating_mul(per_token));
            Ok(Decision {
                allowed: false,
                granted: 0,
                remaining: p.tokens,
                retry_after_ms: Some(retry),
                ..d
            })
        }
    }

    /// The class's decision without the store. `commit` false decides on a copy (RL.ALL's
    /// first pass).
    fn fall_back(
        &self,
        limit: &Limit,
        key: &str,
        policy: &Policy,
        cost: u64,
        commit: bool,
    ) -> Decision {
        let i = &self.inner;
        let source = Source::Fallback(limit.class);
        if commit {
            i.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        let now = i.config.clock.now_ns();
        let bucket = match limit.class {
            Class::Billing => {
                // Fail open and count, to charge the store when it answers.
                let mut debts = lock(&i.debts);
                let owed = debts.get(key).map_or(0, |d| d.amount);
                if commit {
                    let debt = debts.entry(key.to_string()).or_insert(Debt {
                        policy: *policy,
                        amount: 0,
                    });
                    debt.amount = debt.amount.saturating_add(cost);
                }
                return Decision {
                    allowed: true,
                    granted: 1,
                    limit: policy.capacity(),
                    remaining: policy.capacity().saturating_sub(owed.saturating_add(cost)),
                    retry_after_ms: None,
                    reset_after_ms: 0,
                    source,
                };
            }
            Class::Security => match (limit.local, i.config.gateways) {
                (Some((l, w)), _) => LocalBucket::explicit(l, w),
                (None, Some(n)) => LocalBucket::share_of(policy, u64::from(n)),
                (None, None) => {
                    return Decision {
                        allowed: false,
                        granted: 0,
                        limit: policy.capacity(),
                        remaining: 0,
                        retry_after_ms: Some(
                            u64::try_from(i.config.fail_closed_retry.as_millis()).unwrap_or(1000),
                        ),
                        reset_after_ms: 0,
                        source,
                    }
                }
            },
            Class::Contract => {
                let n = if limit.overshoot {
                    1
                } else {
                    i.config.gateways.unwrap_or(1)
                };
                LocalBucket::share_of(policy, u64::from(n))
            }
        };
        let mut buckets = lock(&i.fallback);
        if buckets.len() >= MAX_LOCAL_KEYS {
            buckets.retain(|_, b| !b.full_at(now));
        }
        let b = buckets
            .entry((limit.name.clone(), key.to_string()))
            .or_insert(bucket);
        if commit {
            b.take(now, cost, source)
        } else {
            b.clone().take(now, cost, source)
        }
    }

    fn observe(
        &self,
        limit: &Limit,
        d: &Decision,
        took: Duration,
        store_latency: Option<Duration>,
        status: &'static str,
    ) {
        observe::decision(&limit.name, limit.class, d, took, status);
        let every = self.inner.config.log_every;
        if every > 0
            && self
                .inner
                .decisions
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(every)
        {
            (self.inner.config.log_sink)(&LogRecord {
                limit: limit.name.clone(),
                class: limit.class,
                algorithm: limit.policy.algorithm,
                allowed: d.allowed,
                remaining: d.remaining,
                source: d.source,
                store_latency,
                status,
            });
        }
    }

    /// Starts a reconcile in the background unless one is running.
    fn spawn_reconcile(&self) {
        if self.inner.reconciling.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            // A store that just came back may drop the first calls (a reconnect): a few tries.
            for attempt in 0..5u32 {
                if me.reconcile_once(false).await || me.inner.circuit.is_open() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
            me.inner.reconciling.store(false, Ordering::Release);
        });
        tokio::spawn(task);
    }

    /// Charges the store for what billing admitted while it did not answer (each call with
    /// the shutdown deadline: this is not on a request's path; a charge that times out may
    /// still be applied, and is then counted twice, never zero times). Counts the store cannot
    /// take yet (the quota is spent) stay owed and are charged as it refills: a successful store
    /// call starts another reconcile at most once per second while anything is owed.
    pub async fn reconcile(&self) {
        self.reconcile_once(false).await;
    }

    /// One pass over the debts; false when the store failed on the way.
    async fn reconcile_once(&self, force: bool) -> bool {
        let _one = self.inner.settling.lock().await;
        let keys: Vec<String> = lock(&self.inner.debts).keys().cloned().collect();
        for key in keys {
            let mut latency = None;
            if self.settle(&key, force, &mut latency).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Charges `key`'s debt in chunks the store admits. `Ok(Some(denial))` when some is still
    /// owed because the store denies; `Err` when the store did not answer (all still owed).
    /// `force` ignores the circuit (shutdown).
    async fn settle(
        &self,
        key: &str,
        force: bool,
        latency: &mut Option<Duration>,
    ) -> Result<Option<Decision>, Error> {
        let store = self
            .inner
            .store
            .clone()
            .with_deadline(self.inner.config.shutdown_deadline);
        // The debt stays in the map (so `unsettled` is exact) and shrinks by what is charged;
        // `settling` keeps a second reconcile from charging it again meanwhile.
        let owed = |debts: &HashMap<String, Debt>| debts.get(key).copied();
        let Some(debt) = owed(&lock(&self.inner.debts)) else {
            return Ok(None);
        };
        let policy = debt.policy;
        let mut room = policy.capacity();
        loop {
            let amount = owed(&lock(&self.inner.debts)).map_or(0, |d| d.amount);
            if amount == 0 {
                return Ok(None);
            }
            let chunk = amount.min(room).max(1);
            match self
                .call(latency, force, store.decide(key, &policy, chunk))
                .await?
            {
                d if d.allowed => {
                    let mut debts = lock(&self.inner.debts);
                    if let Some(debt) = debts.get_mut(key) {
                        debt.amount = debt.amount.saturating_sub(chunk);
                        if debt.amount == 0 {
                            debts.remove(key);
                        }
                    }
                    room = policy.capacity();
                }
                d if d.remaining > 0 && d.remaining < chunk => room = d.remaining,
                d => return Ok(Some(d)),
            }
        }
    }

    /// A clean shutdown: gives unspent leased tokens back, charges the store for billing counts,
    /// and writes what it could not charge to the journal (when configured).
    pub async fn shutdown(&self) -> ShutdownReport {
        let i = &self.inner;
        let mut report = ShutdownReport::default();
        let store = i.store.clone().with_deadline(i.config.shutdown_deadline);
        let pools: Vec<(String, Arc<tokio::sync::Mutex<Pool>>)> = lock(&i.pools)
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        let now = i.config.clock.now_ns();
        for (key, pool) in pools {
            let mut p = pool.lock().await;
            if p.tokens > 0 && p.expires_ns > now {
                let mut latency = None;
                if let Ok(Some(d)) = self
                    .call(&mut latency, true, store.refund(&key, p.tokens))
                    .await
                {
                    report.refunded += d.granted;
                }
            }
            p.tokens = 0;
        }
        let before: u64 = lock(&i.debts).values().map(|d| d.amount).sum();
        self.reconcile_once(true).await;
        let debts = lock(&i.debts).clone();
        report.unsettled = debts.values().map(|d| d.amount).sum();
        report.charged = before.saturating_sub(report.unsettled);
        if let Some(path) = &i.config.billing_journal {
            if let Err(e) = journal::write(path, &debts) {
                log::error!("billing journal {}: {e}", path.display());
            }
        }
        report
    }
}

fn combine(limiters: &[Decision], admit: bool) -> AllDecision {
    let tightest = limiters
        .iter()
        .min_by_key(|d| d.remaining)
        .copied()
        .unwrap_or(Decision {
            allowed: admit,
            granted: 0,
            limit: 0,
            remaining: 0,
            retry_after_ms: None,
            reset_after_ms: 0,
            source: Source::Store,
        });
    let retry = limiters.iter().filter_map(|d| d.retry_after_ms).max();
    AllDecision {
        combined: Decision {
            allowed: admit,
            granted: u64::from(admit),
            retry_after_ms: if admit { None } else { retry.or(Some(1)) },
            reset_after_ms: limiters.iter().map(|d| d.reset_after_ms).max().unwrap_or(0),
            ..tightest
        },
        limiters: limiters.to_vec(),
    }
}

/// The billing journal: one line per key, `amount algorithm L W B key-in-hex` (B `-` when unset).
mod journal {
    use std::collections::HashMap;
    use std::path::Path;

    use super::Debt;
    use crate::command::{Algorithm, Policy};

    pub(super) fn write(path: &Path, debts: &HashMap<String, Debt>) -> std::io::Result<()> {
        let mut text = String::new();
        for (key, d) in debts.iter().filter(|(_, d)| d.amount > 0) {
            let p = d.policy;
            let burst = p.burst.map_or("-".to_string(), |b| b.to_string());
            let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
            text += &format!(
                "{} {} {} {} {burst} {hex}\n",
                d.amount,
                p.algorithm.name(),
                p.limit,
                p.window_ms
            );
        }
        if text.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, path)
    }

    /// The debts in the journal (a line that does not parse is logged and skipped); the file is
    /// removed once read: the next shutdown writes what is still owed.
    pub(super) fn read(path: &Path) -> HashMap<String, Debt> {
        let Ok(text) = std::fs::read_to_string(path) else {
            return HashMap::new();
        };
        let mut debts = HashMap::new();
        for line in text.lines() {
            match parse(line) {
                Some((key, debt)) => {
                    debts.insert(key, debt);
                }
                None => log::error!("billing journal {}: bad line {line:?}", path.display()),
            }
        }
        let _ = std::fs::remove_file(path);
        debts
    }

    fn parse(line: &str) -> Option<(String, Debt)> {
        let mut w = line.split(' ');
        let amount = w.next()?.parse().ok()?;
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
        Some((key, Debt { policy, amount }))
    }
}
