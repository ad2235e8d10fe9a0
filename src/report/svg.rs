//! Inline SVG line plots over the time of a run, with phase bands, an SLO line and
//! vertical markers (fault, detection, removal, recovery). No scripts, no external
//! resources: the file is read as it is, anywhere. The y axis is scaled to the data,
//! in round steps (1, 2 or 5 × 10^k); an objective far above the data is noted at the
//! top instead of squashing the lines to the bottom, and a gap in a line (no request
//! that second) is said under the title.

use std::fmt::Write;

/// Points per plotted line at most: longer series are bucketed (max per bucket, so a
/// spike is never averaged away).
pub const MAX_POINTS: usize = 1200;

pub struct Line<'a> {
    pub label: &'a str,
    pub color: &'a str,
    /// (seconds since the start of load, value); `None` leaves a gap.
    pub points: Vec<(f64, Option<f64>)>,
}

pub struct Marker {
    pub at_s: f64,
    pub kind: &'static str,
    pub label: String,
    pub color: &'static str,
}

pub struct Band {
    pub from_s: f64,
    pub to_s: f64,
    pub label: String,
}

pub struct Plot<'a> {
    /// Stable id, e.g. `ttft`.
    pub id: &'a str,
    pub title: &'a str,
    pub unit: &'a str,
    pub lines: Vec<Line<'a>>,
    /// A horizontal objective line (the SLO), in the plot's unit.
    pub limit: Option<(f64, String)>,
    /// What a gap means, after "gaps: no request" (default: ` that second`).
    pub gap_note: &'a str,
}

const W: f64 = 920.0;
const H: f64 = 220.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 34.0;

/// Buckets `points` to at most [`MAX_POINTS`], keeping each bucket's maximum.
pub fn thin(points: Vec<(f64, Option<f64>)>) -> Vec<(f64, Option<f64>)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let k = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(k)
        .map(|c| {
            let y = c
                .iter()
                .filter_map(|p| p.1)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            (c[0].0, y)
        })
        .collect()
}

/// A round tick step (1, 2 or 5 × 10^k) at or above `v`.
fn round_step(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * e)
        .find(|s| *s >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * e)
}

/// The y axis for values up to `max`: a round step giving four or five intervals, and
/// the top (a multiple of the step at or above `max`).
fn y_scale(max: f64) -> (f64, f64) {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let step = round_step(max / 5.0);
    ((max / step - 1e-9).ceil().max(1.0) * step, step)
}

/// An objective more than this many times the data's top is noted, not drawn.
const OFF_SCALE: f64 = 3.0;

fn fmt_tick(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// The plot area of one chart: data coordinates to SVG coordinates.
struct Frame {
    x_max: f64,
    y_max: f64,
    /// The y axis's tick step.
    y_step: f64,
    /// The objective is off the scale (noted at the top, not drawn).
    limit_off: bool,
    /// Plot width and height (inside the margins).
    pw: f64,
    ph: f64,
}

impl Frame {
    /// Scales the x axis to `x_max` seconds (at least 1) and the y axis to the data, in
    /// round steps, with the objective when it is near enough to be drawn.
    fn new(p: &Plot, x_max: f64) -> Frame {
        let x_max = x_max.max(1.0);
        let data_max = p
            .lines
            .iter()
            .flat_map(|l| l.points.iter().filter_map(|q| q.1))
            .fold(0.0f64, f64::max);
        let limit = p.limit.as_ref().map(|l| l.0).filter(|v| *v > 0.0);
        let (data_top, _) = y_scale(data_max);
        let limit_off = limit.is_some_and(|l| data_max > 0.0 && l > OFF_SCALE * data_top);
        let top = match limit {
            Some(l) if !limit_off => data_max.max(l),
            _ => data_max,
        };
        let (y_max, y_step) = y_scale(top * 1.02);
        Frame {
            x_max,
            y_max,
            y_step,
            limit_off,
            pw: W - LEFT - RIGHT,
            ph: H - TOP - BOTTOM,
        }
    }

    fn x(&self, s: f64) -> f64 {
        LEFT + s.clamp(0.0, self.x_max) / self.x_max * self.pw
    }

    fn y(&self, v: f64) -> f64 {
        TOP + self.ph - v.clamp(0.0, self.y_max) / self.y_max * self.ph
    }
}

/// One plot as an `<svg>` element: title, phase bands, axes, the limit line, the
/// series, the markers and the legend, in that order.
pub fn render(p: &Plot, x_max: f64, bands: &[Band], markers: &[Marker]) -> String {
    let fr = Frame::new(p, x_max);
    let mut o = String::new();
    open(&mut o, p);
    phase_bands(&mut o, &fr, bands);
    y_axis(&mut o, &fr);
    x_axis(&mut o, &fr);
    limit_line(&mut o, &fr, p);
    gap_note(&mut o, p);
    for l in &p.lines {
        series(&mut o, &fr, l);
    }
    vertical_markers(&mut o, &fr, markers);
    legend(&mut o, &fr, p);
    o.push_str("</svg>");
    o
}

/// The opening `<svg>` tag and the plot's title.
fn open(o: &mut String, p: &Plot) {
    let _ = write!(
        o,
        r##"<svg class="plot" data-plot="{id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}">"##,
        id = esc(p.id),
        t = esc(p.title)
    );
    let _ = write!(
        o,
        r##"<text x="{LEFT}" y="16" class="title">{} ({})</text>"##,
        esc(p.title),
        esc(p.unit)
    );
}

/// The phases as shaded bands, alternately lighter and darker, each with its name.
fn phase_bands(o: &mut String, fr: &Frame, bands: &[Band]) {
    let ph = fr.ph;
    for (i, b) in bands.iter().enumerate() {
        let (x0, x1) = (fr.x(b.from_s), fr.x(b.to_s));
        let fill = if i % 2 == 0 { "#f4f6f8" } else { "#e9edf1" };
        let _ = write!(
            o,
            r##"<rect class="band" x="{x0:.1}" y="{TOP}" width="{:.1}" height="{ph}" fill="{fill}"/><text class="band-label" x="{:.1}" y="{:.1}">{}</text>"##,
            (x1 - x0).max(0.0),
            x0 + 3.0,
            TOP + 11.0,
            esc(&b.label)
        );
    }
}

/// Horizontal grid lines at each round step, with their values.
fn y_axis(o: &mut String, fr: &Frame) {
    let n = (fr.y_max / fr.y_step).round() as u32;
    for k in 0..=n {
        let v = fr.y_step * f64::from(k);
        let yy = fr.y(v);
        let _ = write!(
            o,
            r##"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + fr.pw,
            LEFT - 6.0,
            yy + 4.0,
            fmt_tick(v)
        );
    }
}

/// Ticks in seconds at a round step (about eight of them) and the axis caption.
fn x_axis(o: &mut String, fr: &Frame) {
    let step = round_step(fr.x_max / 8.0);
    let mut t = 0.0;
    while t <= fr.x_max + 1e-9 {
        let _ = write!(
            o,
            r##"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            fr.x(t),
            TOP + fr.ph + 16.0,
            fmt_tick(t)
        );
        t += step;
    }
    let _ = write!(
        o,
        r##"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">s since start of load</text>"##,
        LEFT + fr.pw,
        H - 2.0
    );
}

/// The objective as a horizontal line with its label, when the plot has one — or, when
/// it is far above the data, a note at the top of the plot saying where it is.
fn limit_line(o: &mut String, fr: &Frame, p: &Plot) {
    let Some((v, label)) = &p.limit else { return };
    if fr.limit_off {
        let _ = write!(
            o,
            r##"<text class="limit-label" data-limit="off-scale" x="{:.1}" y="{:.1}" text-anchor="end">↑ {} — above this scale (top {})</text>"##,
            LEFT + fr.pw - 2.0,
            TOP - 3.0,
            esc(label),
            fmt_tick(fr.y_max)
        );
        return;
    }
    let yy = fr.y(*v);
    let _ = write!(
        o,
        r##"<line class="limit" x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}"/><text class="limit-label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
        LEFT + fr.pw,
        LEFT + fr.pw - 2.0,
        yy - 3.0,
        esc(label)
    );
}

/// A line has a gap: a missing value between two present ones.
fn has_gap(l: &Line) -> bool {
    let first = l.points.iter().position(|p| p.1.is_some());
    let last = l.points.iter().rposition(|p| p.1.is_some());
    match (first, last) {
        (Some(a), Some(b)) => l.points[a..b].iter().any(|p| p.1.is_none()),
        _ => false,
    }
}

/// Under the title: what a gap in the lines means.
fn gap_note(o: &mut String, p: &Plot) {
    if p.lines.iter().any(has_gap) {
        let _ = write!(
            o,
            r##"<text class="tick" data-note="gaps" x="{LEFT}" y="{:.1}">gaps: no request{}</text>"##,
            TOP - 3.0,
            if p.gap_note.is_empty() {
                " that second"
            } else {
                p.gap_note
            }
        );
    }
}

/// One line as a path; a missing value lifts the pen (a gap).
fn series(o: &mut String, fr: &Frame, l: &Line) {
    let mut d = String::new();
    let mut pen_up = true;
    for (s, v) in &l.points {
        match v {
            Some(v) => {
                let _ = write!(
                    d,
                    "{}{:.1},{:.1} ",
                    if pen_up { "M" } else { "L" },
                    fr.x(*s),
                    fr.y(*v)
                );
                pen_up = false;
            }
            None => pen_up = true,
        }
    }
    let _ = write!(
        o,
        r##"<path class="series" data-series="{}" d="{}" fill="none" stroke="{}" stroke-width="1.6"/>"##,
        esc(l.label),
        d.trim_end(),
        l.color
    );
}

/// Dashed vertical markers with labels staggered over four rows, and a tooltip.
fn vertical_markers(o: &mut String, fr: &Frame, markers: &[Marker]) {
    for (i, m) in markers.iter().enumerate() {
        let xx = fr.x(m.at_s);
        let _ = write!(
            o,
            r##"<g class="marker" data-marker="{kind}"><line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{:.1}" stroke="{c}" stroke-width="1.4" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="{c}" class="marker-label">{}</text><title>{}</title></g>"##,
            TOP + fr.ph,
            xx + 3.0,
            TOP + 24.0 + (i % 4) as f64 * 11.0,
            esc(&m.label),
            esc(&format!("{} at +{:.3}s", m.label, m.at_s)),
            kind = m.kind,
            c = m.color
        );
    }
}

/// The legend, right-aligned at the top: a colour swatch and the label of each line.
fn legend(o: &mut String, fr: &Frame, p: &Plot) {
    let mut lx = LEFT + fr.pw;
    for l in p.lines.iter().rev() {
        lx -= 14.0 + 7.0 * l.label.len() as f64;
        let _ = write!(
            o,
            r##"<rect x="{lx:.1}" y="8" width="10" height="3" fill="{}"/><text class="legend" x="{:.1}" y="13">{}</text>"##,
            l.color,
            lx + 13.0,
            esc(l.label)
        );
    }
}

/// Escapes text for HTML (element content and quoted attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_y_axis_has_round_ticks_and_fits_the_data() {
        assert_eq!(y_scale(25.0), (25.0, 5.0));
        assert_eq!(y_scale(54.0), (60.0, 20.0));
        assert_eq!(y_scale(0.7), (0.8, 0.2));
        assert_eq!(y_scale(2000.0), (2000.0, 500.0));
        for max in [3.0, 7.5, 18.75, 54.5, 96.8, 1234.0] {
            let (top, step) = y_scale(max);
            assert!(top >= max && top < max * 2.5, "{max}: {top}");
            let m = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|x| (m - x).abs() < 1e-9),
                "{step}"
            );
        }
    }

    /// A p95 TTFT plot of `points` against an SLO, with `markers`.
    fn ttft_plot(points: Vec<(f64, Option<f64>)>, slo_ms: f64, markers: &[Marker]) -> String {
        let p = Plot {
            id: "ttft",
            title: "TTFT",
            unit: "ms",
            lines: vec![Line {
                label: "p95",
                color: "#c00",
                points,
            }],
            limit: Some((slo_ms, format!("SLO {slo_ms} ms"))),
            gap_note: " completed that second",
        };
        render(&p, 10.0, &[], markers)
    }

    /// Data about 50 ms, one point a second.
    fn about_50ms() -> Vec<(f64, Option<f64>)> {
        (0..10)
            .map(|i| (f64::from(i), Some(40.0 + f64::from(i))))
            .collect()
    }

    #[test]
    fn an_objective_far_above_the_data_is_noted_not_drawn() {
        // Data about 50 ms, the SLO 2000 ms: the axis stays at the data (top 50).
        let s = ttft_plot(about_50ms(), 2000.0, &[]);
        assert!(!s.contains("class=\"limit\""), "{s}");
        assert!(
            s.contains("↑ SLO 2000 ms — above this scale (top 50)"),
            "{s}"
        );
        assert!(!s.contains(">2000<") && s.contains(">50<"), "{s}");
        assert!(!s.contains("gaps:"), "no gap, no note");
        // Near the data it is drawn, the axis taking it in.
        let s = ttft_plot(about_50ms(), 100.0, &[]);
        assert!(s.contains("class=\"limit\""), "{s}");
        assert!(s.contains(">100<"), "{s}");
    }

    #[test]
    fn long_series_are_bucketed_keeping_the_spikes() {
        let mut pts: Vec<(f64, Option<f64>)> = (0..5000).map(|i| (i as f64, Some(1.0))).collect();
        pts[4321].1 = Some(99.0);
        pts[10].1 = None;
        let t = thin(pts);
        assert!(t.len() <= MAX_POINTS);
        assert_eq!(t.iter().filter_map(|p| p.1).fold(0.0, f64::max), 99.0);
    }

    #[test]
    fn a_plot_has_its_lines_gaps_limit_and_markers() {
        let points = vec![
            (0.0, Some(10.0)),
            (1.0, None),
            (2.0, Some(30.0)),
            (3.0, Some(20.0)),
        ];
        let m = [Marker {
            at_s: 1.5,
            kind: "fault",
            label: "kill <w2>".into(),
            color: "#d00",
        }];
        let s = ttft_plot(points, 50.0, &m);
        assert!(s.starts_with("<svg class=\"plot\" data-plot=\"ttft\""));
        // The gap starts a new sub-path.
        let d = s.split("data-series=\"p95\" d=\"").nth(1).expect("path");
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert!(s.contains("class=\"limit\""));
        assert!(s.contains("gaps: no request completed that second"), "{s}");
        assert!(s.contains("data-marker=\"fault\""));
        assert!(s.contains("kill &lt;w2&gt;"));
    }
}
