//! `make bench-regions`: the budget controller measured the way Doorman's design doc measures
//! its own (average utilization, peak over-issue, time to converge after each shift), plus the
//! controller's CPU per period at 100,000 keys × 3 regions, on three real regions on loopback
//! (20 ms added each way on the controller's links). Writes docs/regions.svg. Not a test: run
//! with `--ignored` (release build of the module and this package for the CPU figures).

mod world;

use std::fmt::Write as _;

use ratelimit_regions::Controller;
use world::*;

const STEPS_PER_PERIOD: usize = (PERIOD_MS / STEP_MS) as usize;
const STEPS_PER_WINDOW: usize = (W_MS / STEP_MS) as usize;
const PERIODS_PER_PHASE: usize = 10;
const PHASES: [(&str, [u64; 3]); 4] = [
    ("all in A", [60, 0, 0]),
    ("all in B", [0, 60, 0]),
    ("even", [20, 20, 20]),
    ("flash crowd in C", [6, 6, 80]),
];

#[test]
#[ignore]
fn bench_regions() {
    dynamics();
    at_scale();
}

fn dynamics() {
    let mut world = World::new(20);
    let mut controller = world.controller();
    let mut seen = Vec::new();
    let mut demand = Vec::new();
    for (_, d) in PHASES {
        for _ in 0..PERIODS_PER_PHASE {
            let now = world.now_ms();
            controller.period(now);
            for _ in 0..STEPS_PER_PERIOD {
                seen.push(world.step(&d));
                demand.push(d);
            }
        }
    }
    // Leave out the first phase's first three periods: the controller starts there (learns).
    let skip = 3 * STEPS_PER_PERIOD;
    let per_step: Vec<u64> = seen.iter().map(|s| s.admitted.iter().sum()).collect();
    let admitted: u64 = per_step[skip..].iter().sum();
    let seconds = (per_step.len() - skip) as f64 * STEP_MS as f64 / 1000.0;
    let utilization = admitted as f64 / (L as f64 * seconds);
    let handed: f64 = seen[skip..]
        .iter()
        .map(|s| s.limit.iter().sum::<u64>() as f64 / L as f64)
        .sum::<f64>()
        / (seen.len() - skip) as f64;
    let windows: Vec<u64> = per_step
        .windows(STEPS_PER_WINDOW)
        .map(|w| w.iter().sum())
        .collect();
    let peak_window = windows.iter().copied().max().unwrap_or(0);
    let peak_shares = seen
        .iter()
        .map(|s| s.limit.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    println!("\n| measure | ours | Doorman's simulation |\n|---|---|---|");
    println!(
        "| average utilization (admitted / L, demand 1.2 L or more) | {:.1} % | 96.6 % (capacity handed out) |",
        utilization * 100.0
    );
    println!(
        "| capacity handed out (Σ shares in force / L, average) | {:.1} % | 96.6 % |",
        handed * 100.0
    );
    println!(
        "| peak Σ shares in force / L | {:.1} % | 106.05 % |",
        peak_shares as f64 * 100.0 / L as f64
    );
    println!(
        "| peak admissions in any window W / L (the algorithm's burst B = 10 % of L included) | {:.1} % | — |",
        peak_window as f64 * 100.0 / L as f64
    );
    for (i, (name, _)) in PHASES.iter().enumerate().skip(1) {
        let shift = i * PERIODS_PER_PHASE * STEPS_PER_PERIOD;
        let first = windows[shift..]
            .iter()
            .position(|&w| w * 100 >= L * 98)
            .map(|w| (w + STEPS_PER_WINDOW) as f64 * STEP_MS as f64 / 1000.0);
        println!(
            "| time to converge after the shift to {name} (first window W at ≥ 98 % of L, from the shift) | {} | under 2 minutes |",
            first.map_or("never".into(), |s| format!("{s:.2} s ({:.1} periods)", s * 1000.0 / PERIOD_MS as f64))
        );
    }
    let svg = chart(&seen, &demand);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/regions.svg");
    std::fs::write(path, svg).expect("docs/regions.svg");
    println!("\nwrote {path}");
}

/// Process CPU time (user + system) in ms, from /proc/self/stat (Linux, 100 ticks a second).
fn cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<u64> = after
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // utime and stime are fields 14 and 15 of the line; 11 and 12 of what follows the name.
    fields.get(10).copied().unwrap_or(0) * 10 + fields.get(11).copied().unwrap_or(0) * 10
}

fn at_scale() {
    const KEYS: u64 = 100_000;
    let mut world = World::new(0);
    let config = world.config(&format!("\"bench:{{0..{}}}\"", KEYS - 1));
    let mut controller = Controller::new(config).expect("controller");
    let mut period = |world: &mut World, label: &str| {
        let cpu = cpu_ms();
        let r = controller.period(world.now_ms());
        let cpu = cpu_ms() - cpu;
        println!(
            "| {label} | {} ms | {} ms | {} | {} | {} |",
            r.duration.as_millis(),
            cpu,
            r.keys_moved,
            r.keys_refreshed,
            r.shares_written
        );
        world.t_ms += PERIOD_MS;
        let now = world.now_ms();
        for c in world.looks.iter_mut() {
            let _: redis::Value = redis::cmd("RL.DEBUG")
                .arg("CLOCK")
                .arg("SET")
                .arg(now)
                .query(c)
                .expect("clock");
        }
    };
    println!("\n100,000 keys × 3 regions, one core for the controller's computation:\n");
    println!("| period | wall | controller CPU | keys moved | keys refreshed | shares written |\n|---|---|---|---|---|---|");
    period(
        &mut world,
        "first (every key created at its safe share in each region)",
    );
    period(&mut world, "second (learns: nothing to move)");
    // Demand for every key in A, for half of them in B too.
    for (r, every) in [(0usize, 1u64), (1, 2)] {
        let mut pipe = redis::pipe();
        for k in (0..KEYS).step_by(every as usize) {
            pipe.cmd("RL.GCRA")
                .arg(format!("bench:{k}"))
                .arg(SAFE)
                .arg(W_MS)
                .arg("BURST")
                .arg(SAFE_BURST)
                .ignore();
        }
        let _: () = pipe.query(&mut world.looks[r]).expect("demand");
    }
    period(&mut world, "demand moved for every key");
    period(&mut world, "quiet (no demand moved)");
}

/// The SVG: per region, share in force, demand and admitted (per second, averaged over each
/// period); below, the sum admitted against L.
fn chart(seen: &[Seen], demand: &[[u64; 3]]) -> String {
    let periods = seen.len() / STEPS_PER_PERIOD;
    let per_s = |steps: f64| steps * 1000.0 / STEP_MS as f64 / STEPS_PER_PERIOD as f64;
    let series = |f: &dyn Fn(&Seen, &[u64; 3]) -> f64| -> Vec<f64> {
        (0..periods)
            .map(|p| {
                let range = p * STEPS_PER_PERIOD..(p + 1) * STEPS_PER_PERIOD;
                seen[range.clone()]
                    .iter()
                    .zip(&demand[range])
                    .map(|(s, d)| f(s, d))
                    .sum::<f64>()
            })
            .collect()
    };
    let (w, h, left, top) = (900.0, 170.0, 60.0, 30.0);
    let max = 1700.0;
    let mut svg = String::new();
    let height = top + 4.0 * (h + 40.0) + 20.0;
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        w + left + 20.0
    );
    let x = |p: usize| left + w * p as f64 / periods as f64;
    let y = |base: f64, v: f64| base + h - h * (v / max).min(1.0);
    let line = |svg: &mut String, base: f64, values: &[f64], color: &str, dash: &str| {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .flat_map(|(p, v)| {
                [
                    format!("{:.1},{:.1}", x(p), y(base, *v)),
                    format!("{:.1},{:.1}", x(p + 1), y(base, *v)),
                ]
            })
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\" points=\"{}\"/>",
            points.join(" ")
        );
    };
    let panel = |svg: &mut String, i: usize, title: &str| -> f64 {
        let base = top + i as f64 * (h + 40.0);
        let _ = writeln!(
            svg,
            "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">{title}</text>",
            base - 8.0
        );
        let _ = writeln!(svg, "<rect x=\"{left}\" y=\"{base}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#999\"/>");
        for v in [0.0, 500.0, 1000.0, 1500.0] {
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
                left - 6.0,
                y(base, v) + 4.0
            );
        }
        for (k, (name, _)) in PHASES.iter().enumerate() {
            let px = x(k * PERIODS_PER_PHASE);
            let _ = writeln!(
                svg,
                "<line x1=\"{px:.1}\" y1=\"{base}\" x2=\"{px:.1}\" y2=\"{}\" stroke=\"#ccc\"/>",
                base + h
            );
            if i == 0 {
                let _ = writeln!(
                    svg,
                    "<text x=\"{:.1}\" y=\"{}\" fill=\"#666\">{name}</text>",
                    px + 4.0,
                    base + 14.0
                );
            }
        }
        base
    };
    for (r, name) in ["A", "B", "C"].iter().enumerate() {
        let base = panel(
            &mut svg,
            r,
            &format!(
                "region {name}: share (blue), demand (grey, dashed), admitted (green), per second"
            ),
        );
        let share = series(&|s, _| s.limit[r] as f64 / STEPS_PER_PERIOD as f64);
        let asked = series(&|_, d| per_s(d[r] as f64));
        let admitted = series(&|s, _| per_s(s.admitted[r] as f64));
        line(&mut svg, base, &asked, "#999", "5,4");
        line(&mut svg, base, &share, "#1f5fbf", "");
        line(&mut svg, base, &admitted, "#2a9d3a", "");
    }
    let base = panel(
        &mut svg,
        3,
        "all regions: admitted per second (green) against L = 1000 (red)",
    );
    let total = series(&|s, _| per_s(s.admitted.iter().sum::<u64>() as f64));
    line(&mut svg, base, &vec![L as f64; periods], "#c0392b", "4,3");
    line(&mut svg, base, &total, "#2a9d3a", "");
    let _ = writeln!(svg, "<text x=\"{left}\" y=\"{}\" fill=\"#666\">one point per period of 2 s; 20 ms added each way between the controller and each region</text>", height - 6.0);
    svg.push_str("</svg>\n");
    svg
}
