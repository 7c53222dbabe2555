//! The login guard against a real server with the module, on the debug clock: the client's
//! clock (device tokens, the signal's refresh, the circuit) is a `ManualClock` moved with it.

mod support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use ratelimit_client::login::{
    AfterLogin, Attempt, Device, Dimension, LoginDecision, LoginGuard, LoginSettings, Outcome,
    Secret, Tier, Verdict,
};
use ratelimit_client::{Class, Config, Limiter, ManualClock, Source, Store};
use support::{Server, T0_MS};

struct Rig {
    server: Server,
    clock: Arc<ManualClock>,
    guard: LoginGuard,
}

/// A guard on a fresh server with the defaults, changed by `tune`.
async fn rig(tune: impl FnOnce(&mut LoginSettings)) -> Rig {
    let server = Server::start();
    let clock = Arc::new(ManualClock::new(T0_MS * 1_000_000));
    let config = Config {
        // Generous: a loaded CI machine must not turn a healthy call into a fallback.
        deadline: Duration::from_secs(2),
        max_deadline: Duration::from_secs(2),
        clock: clock.clone(),
        ..Config::default()
    };
    let limiter = Limiter::new(Store::connect(&server.url()).await.unwrap(), config);
    let mut settings = LoginSettings::new(Secret::new(vec![9; 32]).unwrap());
    settings.clock = clock.clone();
    tune(&mut settings);
    let guard = LoginGuard::new(limiter, settings).unwrap();
    Rig {
        server,
        clock,
        guard,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl Rig {
    /// Both clocks forward.
    fn advance(&self, ms: u64) {
        self.server.clock_advance(ms);
        self.clock.advance(Duration::from_millis(ms));
    }

    async fn before(&self, account: &str, from: &str, token: Option<&str>) -> LoginDecision {
        self.before_with(account, from, token, false).await
    }

    async fn before_with(
        &self,
        account: &str,
        from: &str,
        token: Option<&str>,
        challenge_passed: bool,
    ) -> LoginDecision {
        let attempt = Attempt {
            account,
            ip: ip(from),
            device_token: token,
            challenge_passed,
        };
        self.guard.before(&attempt).await.unwrap()
    }

    /// One login: the decision, and what `after` said when the password was checked.
    async fn login(
        &self,
        account: &str,
        from: &str,
        token: Option<&str>,
        password_ok: bool,
    ) -> (LoginDecision, Option<AfterLogin>) {
        let mut d = self.before(account, from, token).await;
        let after = match d.take_ticket() {
            Some(t) => {
                let outcome = if password_ok {
                    Outcome::Success
                } else {
                    Outcome::Failure
                };
                Some(self.guard.after(t, outcome).await.unwrap())
            }
            None => None,
        };
        (d, after)
    }

    /// A failed login that must have been checked; the wait it asks for.
    async fn fail(&self, account: &str, from: &str) -> Option<u64> {
        let (d, after) = self.login(account, from, None, false).await;
        assert_eq!(d.verdict, Verdict::Proceed, "{d}");
        after.unwrap().retry_after_ms
    }

    /// A successful login that must have been checked; its device token.
    async fn succeed(&self, account: &str, from: &str, token: Option<&str>) -> String {
        let (d, after) = self.login(account, from, token, true).await;
        assert_eq!(d.verdict, Verdict::Proceed, "{d}");
        after.unwrap().device_token.unwrap()
    }
}

#[tokio::test]
async fn failures_grow_the_delay_and_a_success_resets_them() {
    let r = rig(|_| {}).await; // 5 free failures, steps of 1 s
    for _ in 0..150 {
        r.succeed("alice", "198.51.100.7", None).await;
    }
    // Successes count nothing: 150 logins, over the cap of 100, and the failures are free.
    for _ in 0..4 {
        assert_eq!(r.fail("alice", "198.51.100.7").await, None);
    }
    // The 5th failure in a row asks for 1 s, and the attempt at once is delayed, not checked.
    assert_eq!(r.fail("alice", "198.51.100.7").await, Some(1_000));
    let d = r.before("alice", "198.51.100.7", None).await;
    assert_eq!(
        (d.verdict, d.dimension, d.retry_after_ms),
        (Verdict::Delay, Dimension::Account, Some(1_000)),
        "{d}"
    );
    assert_eq!(d.status(), Some(StatusCode::UNAUTHORIZED));
    // Waiting it out, each further failure doubles the wait.
    r.advance(1_000);
    assert_eq!(r.fail("alice", "198.51.100.7").await, Some(2_000));
    r.advance(1_999);
    assert_eq!(
        r.before("alice", "198.51.100.7", None).await.retry_after_ms,
        Some(1)
    );
    r.advance(1);
    assert_eq!(r.fail("alice", "198.51.100.7").await, Some(4_000));
    r.advance(4_000);
    // A success resets the account: failures are free again.
    r.succeed("alice", "198.51.100.7", None).await;
    for _ in 0..4 {
        assert_eq!(r.fail("alice", "198.51.100.7").await, None);
    }
}

#[tokio::test]
async fn the_account_cap_holds_across_networks() {
    let r = rig(|s| {
        s.max_failures = 10;
        s.free_failures = 1_000; // no delay: the cap alone
    })
    .await;
    for i in 0..10 {
        r.fail("bob", &format!("2001:db8:{i}::1")).await;
    }
    let d = r.before("bob", "2001:db8:99::1", None).await;
    // Refills at 10 an hour: one failure more in 6 minutes.
    assert_eq!(
        (d.verdict, d.dimension, d.retry_after_ms),
        (Verdict::Deny, Dimension::Account, Some(360_000)),
        "{d}"
    );
    assert_eq!(d.status(), Some(StatusCode::TOO_MANY_REQUESTS));
    assert_eq!(d.retry_after_secs(), Some(360));
    assert_eq!(d.source, Source::Store);
    r.advance(359_999);
    assert_eq!(
        r.before("bob", "2001:db8:99::1", None).await.verdict,
        Verdict::Deny
    );
    r.advance(1);
    r.fail("bob", "2001:db8:99::1").await;
}

#[tokio::test]
async fn networks_and_account_network_pairs_have_their_own_limits() {
    let r = rig(|s| {
        s.prefix_failures = 3;
        s.pair_failures = 2;
    })
    .await;
    // Three accounts from one IPv4 /24: the fourth attempt from it is refused, another /24 not.
    for (n, account) in ["a1", "a2", "a3"].iter().enumerate() {
        r.fail(account, &format!("203.0.113.{}", n + 1)).await;
    }
    let d = r.before("a4", "203.0.113.200", None).await;
    assert_eq!(
        (d.verdict, d.dimension),
        (Verdict::Deny, Dimension::Prefix),
        "{d}"
    );
    assert_eq!(
        r.before("a4", "203.0.114.1", None).await.verdict,
        Verdict::Proceed
    );
    // An IPv6 /64 is one network, whatever the address inside it.
    r.fail("b1", "2001:db8:1:2::1").await;
    r.fail("b2", "2001:db8:1:2:ffff::9").await;
    r.fail("b3", "2001:db8:1:2:1234::77").await;
    let d = r.before("b4", "2001:db8:1:2::5", None).await;
    assert_eq!(d.dimension, Dimension::Prefix, "{d}");
    assert_eq!(
        r.before("b4", "2001:db8:1:3::5", None).await.verdict,
        Verdict::Proceed
    );
    // Two failures on carol from one network: a third from it is refused, from another not.
    r.fail("carol", "198.51.100.1").await;
    r.fail("carol", "198.51.100.2").await;
    let d = r.before("carol", "198.51.100.3", None).await;
    assert_eq!(
        (d.verdict, d.dimension),
        (Verdict::Deny, Dimension::Pair),
        "{d}"
    );
    assert_eq!(
        r.before("carol", "192.0.2.1", None).await.verdict,
        Verdict::Proceed
    );
}

#[tokio::test]
async fn a_trusted_device_passes_a_targeted_lockout() {
    let r = rig(|s| {
        s.max_failures = 10;
        s.trusted_failures = 3;
    })
    .await;
    let token = r.succeed("victim", "192.0.2.10", None).await;
    let other = r.succeed("mallory", "192.0.2.66", None).await;
    // An attacker fails on purpose from a thousand networks, ignoring every answer.
    let mut refused = 0;
    for i in 0..1_000u32 {
        let from = format!("2001:db8:{:x}:{:x}::1", i / 256, i % 256);
        let (d, _) = r.login("victim", &from, None, false).await;
        refused += u32::from(!d.proceed());
        r.advance(100);
    }
    assert!(refused > 900, "the attacker was mostly refused: {refused}");
    // From a new device the owner is slowed down or refused, like the attacker …
    let d = r.before("victim", "192.0.2.10", None).await;
    assert!(!d.proceed(), "{d}");
    // … from the trusted device the owner logs in, again and again.
    let mut token = token;
    for _ in 0..5 {
        let d = r.before("victim", "192.0.2.10", Some(&token)).await;
        assert_eq!(
            (d.dimension, d.device),
            (Dimension::TrustedDevice, Device::Trusted),
            "{d}"
        );
        token = r.succeed("victim", "192.0.2.10", Some(&token)).await;
    }
    // The attack tripped the global signal on the way.
    assert_eq!(r.guard.signal().tier, Tier::Strict);
    // A token is the victim's alone: another account's is an unknown device.
    let d = r.before("victim", "192.0.2.66", Some(&other)).await;
    assert_eq!(d.device, Device::Refused, "{d}");
    assert_eq!(r.guard.device("victim", Some(&other)), Device::Refused);
    assert_eq!(r.guard.device("victim", Some(&token)), Device::Trusted);
    assert_eq!(r.guard.device("victim", None), Device::Unknown);
    assert!(!d.proceed());
    // The trusted devices' own budget: 3 failures, then refused until it refills.
    for _ in 0..3 {
        let (d, _) = r.login("victim", "192.0.2.10", Some(&token), false).await;
        assert!(d.proceed(), "{d}");
    }
    let d = r.before("victim", "192.0.2.10", Some(&token)).await;
    assert_eq!(
        (d.verdict, d.dimension),
        (Verdict::Deny, Dimension::TrustedDevice),
        "{d}"
    );
    // A token expires after the device lifetime (30 days).
    r.advance(1_200_000); // the budget refills (3 an hour)
    assert!(r
        .before("victim", "192.0.2.10", Some(&token))
        .await
        .proceed());
    r.advance(30 * 86_400_000);
    let d = r.before("victim", "192.0.2.10", Some(&token)).await;
    assert_eq!(d.device, Device::Refused, "{d}");
}

#[tokio::test]
async fn the_global_signal_trips_challenges_unknown_devices_and_falls_back() {
    let r = rig(|s| {
        s.absolute_threshold = 20; // 20 failures a minute over all accounts
        s.baseline_floor = 5;
    })
    .await;
    let token = r.succeed("owner", "192.0.2.1", None).await;
    for i in 0..19 {
        r.fail(&format!("user{i}"), &format!("2001:db8:{i}::1"))
            .await;
    }
    assert_eq!(r.guard.signal().tier, Tier::Normal);
    r.fail("user19", "2001:db8:19::1").await;
    let signal = r.guard.signal();
    assert_eq!(
        (signal.tier, signal.recent, signal.threshold),
        (Tier::Strict, 20, 20)
    );
    // An unknown device is asked for a challenge, and checked once it solved it.
    let d = r.before("newcomer", "198.51.100.1", None).await;
    assert_eq!(
        (d.verdict, d.dimension, d.challenge),
        (Verdict::Challenge, Dimension::Global, true),
        "{d}"
    );
    assert_eq!(d.status(), Some(StatusCode::UNAUTHORIZED));
    let d = r.before_with("newcomer", "198.51.100.1", None, true).await;
    assert_eq!((d.verdict, d.tier), (Verdict::Proceed, Tier::Strict), "{d}");
    // The strict tier's lower limit per network (5 failures).
    for n in 0..5 {
        let mut d = r
            .before_with(&format!("s{n}"), "203.0.113.9", None, true)
            .await;
        r.guard
            .after(d.take_ticket().unwrap(), Outcome::Failure)
            .await
            .unwrap();
    }
    let d = r.before_with("s9", "203.0.113.10", None, true).await;
    assert_eq!(
        (d.verdict, d.dimension),
        (Verdict::Deny, Dimension::Prefix),
        "{d}"
    );
    // A trusted device is not challenged.
    let d = r.before("owner", "192.0.2.1", Some(&token)).await;
    assert_eq!((d.verdict, d.challenge), (Verdict::Proceed, false), "{d}");
    // Two quiet minutes: the count is gone, the next reading falls back.
    r.advance(120_000);
    let d = r.before("newcomer", "198.51.100.1", None).await;
    assert_eq!((d.verdict, d.tier), (Verdict::Proceed, Tier::Normal), "{d}");
    assert_eq!(r.guard.signal().trips, 1);
}

#[tokio::test]
async fn the_signal_trips_on_a_multiple_of_its_baseline() {
    let r = rig(|s| {
        s.absolute_threshold = 1_000_000;
        s.baseline_floor = 10;
        s.baseline_multiple = 3;
        s.baseline_window = Duration::from_secs(600); // 10 minutes, the signal's 1 minute
    })
    .await;
    // 10 minutes at 20 failures a minute: below 3 × the floor (30) while the baseline fills,
    // then the baseline is about 20 a minute and the threshold about 60.
    for minute in 0..10 {
        for i in 0..20 {
            r.fail(
                &format!("u{minute}-{i}"),
                &format!("2001:db8:{minute}:{i}::1"),
            )
            .await;
        }
        r.advance(60_000);
    }
    let s = r.guard.signal();
    assert_eq!(s.tier, Tier::Normal);
    assert!((45..=66).contains(&s.threshold), "{s:?}");
    // A burst above what the floor alone would allow does not trip it …
    for i in 0..35 {
        r.fail(&format!("burst{i}"), &format!("2001:db9:{i}::1"))
            .await;
    }
    assert_eq!(
        r.guard.signal().tier,
        Tier::Normal,
        "{:?}",
        r.guard.signal()
    );
    // … a burst above 3 × the baseline does.
    let mut more = 0;
    while r.guard.signal().tier == Tier::Normal {
        r.fail(&format!("more{more}"), &format!("2001:dba:{more}::1"))
            .await;
        more += 1;
        assert!(more < 100, "{:?}", r.guard.signal());
    }
}

#[tokio::test]
async fn a_store_that_is_down_leaves_strict_local_limits() {
    let mut r = rig(|s| s.fallback_account_attempts = 3).await;
    let token = r.succeed("dave", "192.0.2.5", None).await;
    r.server.kill();
    // erin, whom the store never saw: the local limit starts full (docs/client.md: a Security
    // fallback starts from the store's last answer for a key).
    for _ in 0..3 {
        let (d, _) = r.login("erin", "203.0.113.5", None, true).await;
        assert_eq!(
            (d.verdict, d.source),
            (Verdict::Proceed, Source::Fallback(Class::Security)),
            "{d}"
        );
    }
    // Successes count too while the store cannot be told of them: 3 attempts per window.
    let d = r.before("erin", "203.0.113.5", None).await;
    assert_eq!(
        (d.verdict, d.dimension),
        (Verdict::Deny, Dimension::Account),
        "{d}"
    );
    assert_eq!(d.source, Source::Fallback(Class::Security));
    // The trusted device keeps its own budget.
    let d = r.before("dave", "192.0.2.5", Some(&token)).await;
    assert_eq!(
        (d.verdict, d.dimension),
        (Verdict::Proceed, Dimension::TrustedDevice),
        "{d}"
    );
}
