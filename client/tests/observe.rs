//! Metrics through the `metrics` facade (a recorder installed by the test) and the sampled
//! decision log, on a healthy and then a stalled store.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use ratelimit_client::observe::LogRecord;
use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Source, Store};
use support::Server;

type Values = Arc<Mutex<BTreeMap<String, f64>>>;

/// Counters summed and histograms counted, by `name{label=value,…}`.
struct Tally(Values);

struct Handle(String, Values);

impl CounterFn for Handle {
    fn increment(&self, v: u64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() += v as f64;
    }
    fn absolute(&self, v: u64) {
        self.1.lock().unwrap().insert(self.0.clone(), v as f64);
    }
}

impl HistogramFn for Handle {
    fn record(&self, _: f64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() += 1.0;
    }
}

fn render(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Tally {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Handle(render(key), self.0.clone())))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Handle(render(key), self.0.clone())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_a_sampled_decision_log() {
    let values: Values = Arc::default();
    metrics::set_global_recorder(Tally(values.clone())).unwrap();
    let log: Arc<Mutex<Vec<LogRecord>>> = Arc::default();
    let sink = log.clone();

    let s = Server::start();
    let store = Store::connect(&s.url()).await.unwrap();
    let limiter = Limiter::new(
        store,
        Config {
            // Long enough that none of the 30 healthy calls on a loaded machine times out.
            deadline: Duration::from_secs(2),
            gateways: Some(2),
            clock: support::manual_clock(),
            log_every: 10,
            log_sink: Arc::new(move |r: &LogRecord| sink.lock().unwrap().push(r.clone())),
            ..Config::default()
        },
    );
    let api = Limit::new("api", Policy::gcra(1000, 1000), Class::Contract);
    for _ in 0..30 {
        limiter.check(&api, "m:1").await.unwrap();
    }
    s.stop();
    for _ in 0..10 {
        limiter.check(&api, "m:1").await.unwrap();
    }
    s.resume();

    let v = values.lock().unwrap().clone();
    let get = |k: &str| v.get(k).copied().unwrap_or(0.0);
    assert_eq!(
        get("ratelimit_client_decisions_total{allowed=true,class=contract,limit=api,source=store}"),
        30.0,
        "{v:#?}"
    );
    assert_eq!(get("ratelimit_client_decisions_total{allowed=true,class=contract,limit=api,source=fallback}"), 10.0, "{v:#?}");
    assert_eq!(
        get("ratelimit_client_decision_seconds{class=contract,source=store}"),
        30.0
    );
    // 3 timeouts open the circuit; the other 7 fall back without calling the store.
    assert_eq!(
        get("ratelimit_client_store_errors_total{kind=timeout}"),
        3.0,
        "{v:#?}"
    );
    assert_eq!(
        get("ratelimit_client_fallback_total{class=contract,limit=api,reason=timeout}"),
        3.0
    );
    assert_eq!(
        get("ratelimit_client_fallback_total{class=contract,limit=api,reason=circuit_open}"),
        7.0
    );
    assert_eq!(get("ratelimit_client_store_seconds{}"), 33.0);

    // One decision in ten: 1st, 11th, 21st (store), 31st (the first timeout).
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 4, "{log:#?}");
    assert!(log[..3]
        .iter()
        .all(|r| r.source == Source::Store && r.status == "ok" && r.store_latency.is_some()));
    assert_eq!(log[0].limit, "api");
    assert_eq!(log[0].remaining, 999);
    assert_eq!(log[3].source, Source::Fallback(Class::Contract));
    assert_eq!(log[3].status, "timeout");
    assert!(log[3].store_latency.unwrap() >= Duration::from_secs(2));
}
