//! The compatibility suite: envoyproxy/ratelimit's config cases (its `test/config/` fixtures,
//! its `examples/`, its integration runtime files and the assertions of its `config_test.go`),
//! restated as our own files under `tests/compat/`: `cases.yaml` names each case, the files it
//! loads and what each lookup must give, or the refusal the peer gives. A failure names its case.

use std::path::Path;

use ratelimit_rls::config::{Config, Unit};
use ratelimit_rls::load::{self, ConfigError};
use ratelimit_rls::metadata;
use yaml_rust2::{Yaml, YamlLoader};

fn dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat"))
}

fn field<'a>(y: &'a Yaml, name: &str) -> &'a Yaml {
    &y[name]
}

fn text(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

fn load_case(case: &Yaml) -> Result<Config, ConfigError> {
    let files: Vec<(String, String)> = field(case, "files")
        .as_vec()
        .expect("files")
        .iter()
        .map(|f| {
            let name = f.as_str().expect("a file name");
            let body = std::fs::read_to_string(dir().join("configs").join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name.to_string(), body)
        })
        .collect();
    let merge = field(case, "merge").as_bool().unwrap_or(false);
    load::load(
        &files,
        merge,
        ratelimit_rls::yaml_limits::YamlLimits::default(),
    )
}

/// What one lookup gave against what the case wants; the differences, worded.
fn check_lookup(config: &Config, lookup: &Yaml) -> Vec<String> {
    let domain = text(field(lookup, "domain")).unwrap_or_else(|| "test-domain".into());
    let pairs: Vec<(String, String)> = field(lookup, "entries")
        .as_vec()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                text(&e[0]).expect("entry key"),
                text(&e[1]).unwrap_or_default(),
            )
        })
        .collect();
    let entries: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let at = format!("{domain} {entries:?}");
    let got = config.rule_for(&domain, &entries);
    let want = field(lookup, "want");
    let Some(m) = got else {
        return if want.is_null() {
            vec![]
        } else {
            vec![format!("{at}: no limit, want {want:?}")]
        };
    };
    if want.is_null() {
        return vec![format!("{at}: a limit ({}), want none", m.stats_key)];
    }
    let mut out = Vec::new();
    let mut expect = |what: &str, got: String, want: Option<String>| {
        if let Some(w) = want {
            if got != w {
                out.push(format!("{at}: {what} {got:?}, want {w:?}"));
            }
        }
    };
    let r = &m.rule;
    expect("rpu", r.requests_per_unit.to_string(), text(&want["rpu"]));
    expect(
        "unit",
        format!("{:?}", r.unit).to_lowercase(),
        want["unit"]
            .as_str()
            .map(|u| format!("{:?}", Unit::parse(u).expect("a unit in the case")).to_lowercase()),
    );
    expect("name", r.name.clone(), text(&want["name"]));
    expect("stats key", m.stats_key.clone(), text(&want["stats_key"]));
    let flag = |name: &str| want[name].as_bool().map(|b| b.to_string());
    expect("unlimited", r.unlimited.to_string(), flag("unlimited"));
    expect("shadow_mode", r.shadow_mode.to_string(), flag("shadow"));
    expect("quota_mode", r.quota_mode.to_string(), flag("quota"));
    if let Some(shared) = want["shared"].as_vec() {
        let want: Vec<Option<String>> = shared.iter().map(text).collect();
        expect(
            "shared",
            format!("{:?}", m.shared),
            Some(format!("{want:?}")),
        );
    }
    if !want["metadata"].is_badvalue() {
        let w = metadata::from_yaml(&want["metadata"]).expect("metadata in the case");
        expect(
            "metadata",
            format!("{:?}", r.metadata.as_deref()),
            Some(format!("{:?}", w.as_ref())),
        );
    }
    out
}

#[test]
fn every_peer_case_loads_and_answers_as_the_peer() {
    let cases = std::fs::read_to_string(dir().join("cases.yaml")).unwrap();
    let cases = YamlLoader::load_from_str(&cases).unwrap().remove(0);
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases.as_vec().expect("a list of cases") {
        let name = field(case, "case").as_str().expect("case name");
        ran += 1;
        let loaded = load_case(case);
        if let Some(want) = field(case, "error").as_str() {
            match loaded {
                Ok(_) => failures.push(format!("{name}: loaded, want refused with {want:?}")),
                // The file first, as the peer names it; our entry path may follow.
                Err(e) if e.0.contains(want) && e.0.contains(".yaml: ") => {}
                Err(e) => failures.push(format!("{name}: refused with {:?}, want {want:?}", e.0)),
            }
            continue;
        }
        let config = match loaded {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: refused: {e}"));
                continue;
            }
        };
        for lookup in field(case, "lookups").as_vec().into_iter().flatten() {
            for f in check_lookup(&config, lookup) {
                failures.push(format!("{name}: {f}"));
            }
        }
    }
    assert!(ran >= 25, "only {ran} cases read");
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
