//! docs/shed.svg: goodput and p99 against offered load, one line per system.

use crate::load::LOADS;
use crate::report::Row;

/// A plot's title, its top value and what it shows of a row.
type Panel = (&'static str, f64, Box<dyn Fn(&Row) -> Option<f64>>);

pub fn svg(rows: &[Row], systems: &[String]) -> String {
    let colors = ["#d62728", "#7f7f7f", "#ff7f0e", "#1f77b4", "#2ca02c"];
    let (w, h, pad) = (360.0, 240.0, 45.0);
    let x = |load: f64| pad + (load.log2() + 1.0) / (5f64.log2() + 1.0) * (w - 2.0 * pad);
    let mut s = String::from(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="760" height="300" font-family="sans-serif" font-size="11">"#,
    );
    let panels: [Panel; 2] = [
        (
            "goodput (fraction of C)",
            1.2,
            Box::new(|r: &Row| Some(r.goodput)),
        ),
        (
            "p99 of successes (ms, log)",
            3.0,
            Box::new(|r: &Row| r.p99_ok.map(|d| (d.as_secs_f64() * 1e3).max(1.0).log10())),
        ),
    ];
    for (p, (title, top, value)) in panels.iter().enumerate() {
        let ox = p as f64 * 380.0;
        let y = |v: f64| h - pad + 20.0 - v / top * (h - 2.0 * pad);
        s += &format!(
            r#"<g transform="translate({ox},0)"><text x="{}" y="15">{title}</text>"#,
            pad
        );
        s += &format!(
            r#"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
            y(0.0),
            w - pad,
            y(0.0)
        );
        s += &format!(
            r#"<line x1="{pad}" y1="{}" x2="{pad}" y2="{}" stroke="black"/>"#,
            y(0.0),
            y(*top)
        );
        for load in LOADS {
            s += &format!(
                r#"<text x="{}" y="{}" text-anchor="middle">{load}×C</text>"#,
                x(load),
                y(0.0) + 14.0
            );
        }
        for t in 0..=4 {
            let v = top * f64::from(t) / 4.0;
            let label = if p == 0 {
                format!("{v:.1}")
            } else {
                format!("{:.0}", 10f64.powf(v))
            };
            s += &format!(
                r#"<text x="{}" y="{}" text-anchor="end">{label}</text>"#,
                pad - 4.0,
                y(v) + 4.0
            );
        }
        for (i, sys) in systems.iter().enumerate() {
            let pts: Vec<String> = rows
                .iter()
                .filter(|r| &r.system == sys)
                .filter_map(|r| value(r).map(|v| format!("{:.1},{:.1}", x(r.load), y(v.min(*top)))))
                .collect();
            let c = colors.get(i).copied().unwrap_or("black");
            s += &format!(
                r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            if p == 1 {
                s += &format!(
                    r#"<text x="{}" y="{}" fill="{c}">{sys}</text>"#,
                    pad + 5.0,
                    30.0 + 12.0 * i as f64
                );
            }
        }
        s += "</g>";
    }
    s + "</svg>\n"
}
