//! A small plotting module: line/point charts on linear or logarithmic axes and run
//! timelines, each drawn as one standalone `<svg>` element (no scripts, no fonts to fetch:
//! the page opens anywhere). Values that cannot be drawn (NaN, infinities, non-positive
//! values on a log axis) are left out, and a chart without drawable data says so.

use std::fmt::Write;

/// Chart size in CSS pixels.
const WIDTH: f64 = 680.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 52.0;

/// Colours of successive series (colour-blind safe, Okabe–Ito).
const PALETTE: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// The `i`-th colour of the palette (it repeats).
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Grey, for guides.
pub const GREY: &str = "#888888";

/// Height of a legend row.
const LEGEND_ROW: f64 = 16.0;

/// Escapes text for XML/HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    Linear,
    /// Evenly spaced powers (sizes, node counts spanning decades).
    Log,
}

/// How tick labels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Plain numbers.
    Plain,
    /// Seconds (`250 ms`, `1.5 s`).
    Seconds,
    /// Bytes in binary units (`64 KiB`, `1 GiB`).
    Bytes,
}

/// One axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Label under (x) or beside (y) the axis.
    pub label: String,
    /// Mapping.
    pub scale: Scale,
    /// Tick format.
    pub unit: Unit,
    /// Whether a linear axis of non-negative data starts at zero (amounts: bytes, seconds),
    /// or at the data (numbers that name things: epochs).
    pub from_zero: bool,
}

impl Axis {
    /// A linear axis of amounts, from zero.
    pub fn linear(label: &str, unit: Unit) -> Axis {
        Axis {
            label: label.to_string(),
            scale: Scale::Linear,
            unit,
            from_zero: true,
        }
    }

    /// A linear axis of numbers that name things (epochs): it spans the data, so a job
    /// whose epochs are 50 to 70 is not drawn squeezed against the right edge.
    pub fn numbered(label: &str) -> Axis {
        Axis {
            from_zero: false,
            ..Axis::linear(label, Unit::Plain)
        }
    }

    /// A logarithmic axis.
    pub fn log(label: &str, unit: Unit) -> Axis {
        Axis {
            label: label.to_string(),
            scale: Scale::Log,
            unit,
            from_zero: false,
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Points joined by a line.
    Line,
    /// Points only.
    Points,
    /// A dashed line without points (guides such as `y = x`).
    Guide,
}

/// A named set of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend entry (none when empty).
    pub name: String,
    /// `(x, y)` points; a line joins them in this order.
    pub points: Vec<(f64, f64)>,
    /// How it is drawn.
    pub mark: Mark,
    /// Its colour (default: the palette's, by position).
    pub colour: Option<&'static str>,
}

impl Series {
    /// A series.
    pub fn new(name: &str, mark: Mark, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.to_string(),
            points,
            mark,
            colour: None,
        }
    }

    /// The same series in `colour`.
    pub fn coloured(self, colour: &'static str) -> Series {
        Series {
            colour: Some(colour),
            ..self
        }
    }
}

/// A chart of series over two axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Heading inside the picture.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// What is drawn, in legend order.
    pub series: Vec<Series>,
}

/// Formats `v` for a tick or tooltip.
pub fn format(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Plain => {
            if v != 0.0 && (v.abs() >= 1e6 || v.abs() < 1e-3) {
                format!("{v:.1e}")
            } else if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                let s = format!("{v:.3}");
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            }
        }
        Unit::Seconds => match v.abs() {
            0.0 => "0".into(),
            a if a < 1e-3 => format!("{:.0} µs", v * 1e6),
            a if a < 1.0 => format!("{} ms", trim(v * 1e3)),
            a if a < 120.0 => format!("{} s", trim(v)),
            a if a < 7200.0 => format!("{} min", trim(v / 60.0)),
            _ => format!("{} h", trim(v / 3600.0)),
        },
        Unit::Bytes => {
            let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
            let mut x = v;
            let mut i = 0;
            while x.abs() >= 1024.0 && i + 1 < units.len() {
                x /= 1024.0;
                i += 1;
            }
            format!("{} {}", trim(x), units[i])
        }
    }
}

/// Up to three significant digits, no trailing zeros.
fn trim(v: f64) -> String {
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A value range mapped onto pixels.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    lo: f64,
    hi: f64,
    scale: Scale,
    from: f64,
    to: f64,
}

impl Mapping {
    fn value(&self, v: f64) -> f64 {
        let (lo, hi, v) = match self.scale {
            Scale::Linear => (self.lo, self.hi, v),
            Scale::Log => (self.lo.log10(), self.hi.log10(), v.log10()),
        };
        let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        self.from + t * (self.to - self.from)
    }
}

/// Larger magnitudes are left out: no result is that large, and ranges stay finite.
const LARGEST: f64 = 1e150;

fn drawable(v: f64, scale: Scale) -> bool {
    v.abs() < LARGEST && (scale == Scale::Linear || v > 1.0 / LARGEST)
}

/// The range shown for `values`: linear axes start at zero for non-negative data when
/// `from_zero`, else at the data; log axes round out to powers of ten (or of two for byte and
/// plain data spanning little).
fn range(values: &[f64], scale: Scale, from_zero: bool) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match scale {
        Scale::Linear => {
            let lo = if lo >= 0.0 && from_zero { 0.0 } else { lo };
            let hi = if hi > lo { hi } else { lo + 1.0 };
            let step = nice_step((hi - lo) / 5.0);
            (
                (lo / step).floor() * step,
                (hi / step).ceil() * step.max(f64::MIN_POSITIVE),
            )
        }
        Scale::Log => {
            let (a, b) = (lo.log2().floor(), hi.log2().ceil());
            let b = if b > a { b } else { a + 1.0 };
            (2f64.powf(a), 2f64.powf(b))
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

/// Tick values within `lo..=hi`.
fn ticks(lo: f64, hi: f64, scale: Scale, unit: Unit) -> Vec<f64> {
    match scale {
        Scale::Linear => {
            let step = nice_step((hi - lo) / 5.0);
            let mut v = (lo / step).ceil() * step;
            let mut out = Vec::new();
            while v <= hi * (1.0 + 1e-9) + 1e-12 && out.len() < 12 {
                out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                v += step;
            }
            out
        }
        Scale::Log => {
            let base = if unit == Unit::Bytes { 2f64 } else { 10f64 };
            let (a, b) = (
                (lo.log(base) - 1e-9).ceil() as i32,
                (hi.log(base) + 1e-9).floor() as i32,
            );
            let mut powers: Vec<f64> = (a..=b).map(|e| base.powi(e)).collect();
            if powers.len() < 2 {
                powers = ((lo.log2() - 1e-9).ceil() as i32..=(hi.log2() + 1e-9).floor() as i32)
                    .map(|e| 2f64.powi(e))
                    .collect();
            }
            let step = powers.len().div_ceil(8).max(1);
            powers.into_iter().step_by(step).collect()
        }
    }
}

fn open_svg(out: &mut String, title: &str, height: f64) {
    let _ = write!(
        out,
        r##"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="{t}"><title>{t}</title><rect class="bg" x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/><text x="{x}" y="22" font-size="15" font-weight="600" text-anchor="middle">{t}</text>"##,
        t = escape(title),
        x = WIDTH / 2.0,
    );
}

impl Chart {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let mut out = String::new();
        open_svg(&mut out, &self.title, HEIGHT);
        let keep = |s: &Series| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| drawable(x, self.x.scale) && drawable(y, self.y.scale))
                .collect()
        };
        let kept: Vec<Vec<(f64, f64)>> = self.series.iter().map(keep).collect();
        let xs: Vec<f64> = kept.iter().flatten().map(|p| p.0).collect();
        let ys: Vec<f64> = kept.iter().flatten().map(|p| p.1).collect();
        if xs.is_empty() {
            let _ = write!(
                out,
                r##"<text class="empty" x="{}" y="{}" text-anchor="middle" fill="#666">no data</text></svg>"##,
                WIDTH / 2.0,
                HEIGHT / 2.0
            );
            return out;
        }
        let (legend, rows) = self.legend();
        out.push_str(&legend);
        let top = TOP + rows as f64 * LEGEND_ROW;
        let (x0, x1) = range(&xs, self.x.scale, self.x.from_zero);
        let (y0, y1) = range(&ys, self.y.scale, self.y.from_zero);
        let mx = Mapping {
            lo: x0,
            hi: x1,
            scale: self.x.scale,
            from: LEFT,
            to: WIDTH - RIGHT,
        };
        let my = Mapping {
            lo: y0,
            hi: y1,
            scale: self.y.scale,
            from: HEIGHT - BOTTOM,
            to: top,
        };
        self.axes(&mut out, &mx, &my);
        let frame = Frame {
            mx,
            my,
            x: &self.x,
            y: &self.y,
        };
        for (i, (s, points)) in self.series.iter().zip(&kept).enumerate() {
            frame.draw(&mut out, s, points, s.colour.unwrap_or(colour(i)));
        }
        out.push_str("</svg>");
        out
    }

    fn axes(&self, out: &mut String, mx: &Mapping, my: &Mapping) {
        let (left, right, top, bottom) = (LEFT, WIDTH - RIGHT, my.to, HEIGHT - BOTTOM);
        out.push_str(r##"<g class="axes" font-size="11" fill="#333">"##);
        for v in ticks(mx.lo, mx.hi, mx.scale, self.x.unit) {
            let x = mx.value(v);
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                bottom + 16.0,
                escape(&format(v, self.x.unit))
            );
        }
        for v in ticks(my.lo, my.hi, my.scale, self.y.unit) {
            let y = my.value(v);
            let _ = write!(
                out,
                r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                left - 6.0,
                y + 4.0,
                escape(&format(v, self.y.unit))
            );
        }
        let _ = write!(
            out,
            r##"<rect x="{left}" y="{top}" width="{:.1}" height="{:.1}" fill="none" stroke="#999"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">{}</text><text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" font-size="12">{}</text></g>"##,
            right - left,
            bottom - top,
            (left + right) / 2.0,
            HEIGHT - 10.0,
            escape(&self.x.label),
            (top + bottom) / 2.0,
            escape(&self.y.label)
        );
    }

    /// The legend above the plot, wrapped into rows; and how many rows it takes.
    fn legend(&self) -> (String, usize) {
        let mut out = String::from(r#"<g class="legend" font-size="11">"#);
        let (mut x, mut row) = (LEFT, 0usize);
        for (i, s) in self.series.iter().enumerate().filter(|(_, s)| !s.name.is_empty()) {
            let width = 28.0 + 6.5 * s.name.chars().count() as f64;
            if x + width > WIDTH - RIGHT && x > LEFT {
                x = LEFT;
                row += 1;
            }
            let y = TOP + 4.0 + row as f64 * LEGEND_ROW;
            let c = s.colour.unwrap_or(colour(i));
            let dash = if s.mark == Mark::Guide {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = write!(
                out,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2"{dash}/><text x="{:.1}" y="{y:.1}">{}</text>"#,
                y - 4.0,
                x + 16.0,
                y - 4.0,
                x + 20.0,
                escape(&s.name)
            );
            x += width;
        }
        out.push_str("</g>");
        let rows = if self.series.iter().any(|s| !s.name.is_empty()) {
            row + 1
        } else {
            0
        };
        (out, rows)
    }
}

/// The plotting area of a chart: how values map to pixels and how they read.
struct Frame<'a> {
    mx: Mapping,
    my: Mapping,
    x: &'a Axis,
    y: &'a Axis,
}

impl Frame<'_> {
    fn draw(&self, out: &mut String, s: &Series, points: &[(f64, f64)], colour: &str) {
        let _ = write!(out, r#"<g class="series" data-name="{}">"#, escape(&s.name));
        let coords: Vec<(f64, f64)> = points
            .iter()
            .map(|&(x, y)| (self.mx.value(x), self.my.value(y)))
            .collect();
        if matches!(s.mark, Mark::Line | Mark::Guide) && coords.len() > 1 {
            let d: Vec<String> = coords
                .iter()
                .enumerate()
                .map(|(i, (x, y))| format!("{}{x:.1} {y:.1}", if i == 0 { 'M' } else { 'L' }))
                .collect();
            let dash = if s.mark == Mark::Guide {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = write!(
                out,
                r#"<path d="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
                d.join(" ")
            );
        }
        if s.mark != Mark::Guide {
            for ((x, y), (vx, vy)) in coords.iter().zip(points) {
                let _ = write!(
                    out,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{colour}"><title>{}: {}, {}</title></circle>"#,
                    escape(&s.name),
                    escape(&format(*vx, self.x.unit)),
                    escape(&format(*vy, self.y.unit))
                );
            }
        }
        out.push_str("</g>");
    }
}

/// What a span or marker on a timeline stands for (its colour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The job running.
    Run,
    /// A recovery.
    Recovery,
    /// A node failure.
    Failure,
    /// A committed epoch.
    Epoch,
    /// An epoch that did not commit.
    Aborted,
    /// A rank moved to another node.
    Relocation,
}

impl Kind {
    fn colour(self) -> &'static str {
        match self {
            Kind::Run => "#0072B2",
            Kind::Recovery => "#E69F00",
            Kind::Failure => "#D55E00",
            Kind::Epoch => "#009E73",
            Kind::Aborted => "#999999",
            Kind::Relocation => "#CC79A7",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Run => "running",
            Kind::Recovery => "recovery",
            Kind::Failure => "failure",
            Kind::Epoch => "committed epoch",
            Kind::Aborted => "aborted epoch",
            Kind::Relocation => "relocation",
        }
    }
}

/// A stretch of time on a lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Start (seconds).
    pub start: f64,
    /// End (seconds).
    pub end: f64,
    /// Text on or beside the span (and its tooltip).
    pub label: String,
    /// Colour.
    pub kind: Kind,
}

/// An instant on a lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// When (seconds).
    pub at: f64,
    /// Tooltip (and text for failures and relocations).
    pub label: String,
    /// Colour and shape.
    pub kind: Kind,
}

/// One row of a timeline.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Lane {
    /// Name at the left.
    pub name: String,
    /// Stretches.
    pub spans: Vec<Span>,
    /// Instants.
    pub markers: Vec<Marker>,
}

/// Lanes over a common time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Heading.
    pub title: String,
    /// Rows, top to bottom.
    pub lanes: Vec<Lane>,
}

const LANE: f64 = 34.0;
const LANE_LEFT: f64 = 110.0;

impl Timeline {
    /// The timeline as an `<svg>` element.
    pub fn render(&self) -> String {
        let height = TOP + BOTTOM + LANE * self.lanes.len().max(1) as f64 + 18.0;
        let mut out = String::new();
        open_svg(&mut out, &self.title, height);
        let times: Vec<f64> = self
            .lanes
            .iter()
            .flat_map(|l| {
                l.spans
                    .iter()
                    .flat_map(|s| [s.start, s.end])
                    .chain(l.markers.iter().map(|m| m.at))
            })
            .filter(|t| drawable(*t, Scale::Linear))
            .collect();
        if times.is_empty() {
            let _ = write!(
                out,
                r##"<text class="empty" x="{}" y="{}" text-anchor="middle" fill="#666">no events</text></svg>"##,
                WIDTH / 2.0,
                height / 2.0
            );
            return out;
        }
        let (t0, t1) = range(&times, Scale::Linear, true);
        let m = Mapping {
            lo: t0,
            hi: t1,
            scale: Scale::Linear,
            from: LANE_LEFT,
            to: WIDTH - RIGHT,
        };
        let bottom = TOP + LANE * self.lanes.len() as f64;
        out.push_str(r##"<g class="axes" font-size="11" fill="#333">"##);
        for v in ticks(t0, t1, Scale::Linear, Unit::Seconds) {
            let x = m.value(v);
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{bottom}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                bottom + 16.0,
                escape(&format(v, Unit::Seconds))
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">seconds since the job started</text></g>"#,
            (LANE_LEFT + WIDTH - RIGHT) / 2.0,
            bottom + 34.0
        );
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = TOP + LANE * i as f64;
            draw_lane(&mut out, lane, y, &m);
        }
        self.legend(&mut out, height);
        out.push_str("</svg>");
        out
    }

    fn legend(&self, out: &mut String, height: f64) {
        let mut kinds: Vec<Kind> = Vec::new();
        for l in &self.lanes {
            for k in l
                .spans
                .iter()
                .map(|s| s.kind)
                .chain(l.markers.iter().map(|m| m.kind))
            {
                if !kinds.contains(&k) {
                    kinds.push(k);
                }
            }
        }
        out.push_str(r#"<g class="legend" font-size="11">"#);
        let mut x = LANE_LEFT;
        for k in kinds {
            let _ = write!(
                out,
                r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                height - 14.0,
                k.colour(),
                x + 14.0,
                height - 5.0,
                k.name()
            );
            x += 24.0 + 6.5 * k.name().len() as f64;
        }
        out.push_str("</g>");
    }
}

fn draw_lane(out: &mut String, lane: &Lane, y: f64, m: &Mapping) {
    let _ = write!(
        out,
        r#"<g class="lane" data-name="{n}"><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="12">{n}</text>"#,
        LANE_LEFT - 8.0,
        y + LANE / 2.0 + 4.0,
        n = escape(&lane.name)
    );
    let shown = |t: f64| drawable(t, Scale::Linear);
    for s in lane.spans.iter().filter(|s| shown(s.start) && shown(s.end)) {
        let (a, b) = (m.value(s.start.min(s.end)), m.value(s.start.max(s.end)));
        let _ = write!(
            out,
            r#"<rect class="span" x="{a:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" opacity="0.85"><title>{}</title></rect>"#,
            y + 6.0,
            (b - a).max(1.5),
            LANE - 12.0,
            s.kind.colour(),
            escape(&s.label)
        );
        if b - a > 7.0 * s.label.chars().count() as f64 {
            let _ = write!(
                out,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#fff">{}</text>"##,
                a + 4.0,
                y + LANE / 2.0 + 4.0,
                escape(&s.label)
            );
        }
    }
    for mk in lane.markers.iter().filter(|mk| shown(mk.at)) {
        let x = m.value(mk.at);
        let colour = mk.kind.colour();
        match mk.kind {
            Kind::Failure | Kind::Relocation => {
                let (top, bottom) = (y + 3.0, y + LANE - 3.0);
                let _ = write!(
                    out,
                    r#"<g class="marker {k}"><path d="M{:.1} {top:.1} L{:.1} {top:.1} L{x:.1} {:.1} Z" fill="{colour}"/><line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="{colour}" stroke-width="2"/><title>{}</title></g>"#,
                    x - 6.0,
                    x + 6.0,
                    top + 9.0,
                    escape(&mk.label),
                    k = if mk.kind == Kind::Failure {
                        "failure"
                    } else {
                        "relocation"
                    },
                );
            }
            _ => {
                let _ = write!(
                    out,
                    r#"<line class="marker" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"><title>{}</title></line>"#,
                    y + 8.0,
                    y + LANE - 8.0,
                    escape(&mk.label)
                );
            }
        }
    }
    out.push_str("</g>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(svg: &str, what: &str) -> usize {
        svg.matches(what).count()
    }

    #[test]
    fn charts_draw_every_drawable_point_and_skip_the_rest() {
        let chart = Chart {
            title: "t <&>".into(),
            x: Axis::log("nodes", Unit::Plain),
            y: Axis::linear("seconds", Unit::Seconds),
            series: vec![
                Series::new(
                    "a",
                    Mark::Line,
                    vec![(4.0, 1.0), (8.0, 1.1), (0.0, 2.0), (16.0, f64::NAN)],
                ),
                Series::new("b", Mark::Points, vec![(32.0, 1.2)]),
            ],
        };
        let svg = chart.render();
        assert_eq!(
            count(&svg, "<circle"),
            3,
            "x = 0 on a log axis and NaN are left out"
        );
        assert_eq!(count(&svg, "<path"), 1);
        assert!(svg.contains("t &lt;&amp;&gt;"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }

    #[test]
    fn empty_charts_say_so() {
        let chart = Chart {
            title: "nothing".into(),
            x: Axis::linear("x", Unit::Plain),
            y: Axis::log("y", Unit::Bytes),
            series: vec![Series::new("a", Mark::Line, vec![(1.0, 0.0)])],
        };
        assert!(chart.render().contains("no data"));
        let t = Timeline {
            title: "run".into(),
            lanes: vec![Lane::default()],
        };
        assert!(t.render().contains("no events"));
    }

    /// Epochs 50 to 70 of a job on a cluster that ran others before: the epoch axis spans
    /// them, while an axis of amounts still starts at zero.
    #[test]
    fn numbered_axes_span_the_data_and_amounts_start_at_zero() {
        let epochs = [50.0, 61.0, 70.0];
        let numbered = Axis::numbered("epoch");
        assert_eq!(range(&epochs, numbered.scale, numbered.from_zero), (50.0, 70.0));
        let amounts = Axis::linear("bytes", Unit::Bytes);
        assert_eq!(range(&epochs, amounts.scale, amounts.from_zero).0, 0.0);
    }

    #[test]
    fn ticks_are_round_numbers_inside_the_range() {
        assert_eq!(
            ticks(0.0, 10.0, Scale::Linear, Unit::Plain),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        let log = ticks(4096.0, 4.0 * 1048576.0, Scale::Log, Unit::Bytes);
        assert_eq!(log.first(), Some(&4096.0));
        assert!(log.len() <= 8 && log.iter().all(|v| v.log2().fract() == 0.0));
        assert_eq!(
            ticks(1.0, 1000.0, Scale::Log, Unit::Plain),
            vec![1.0, 10.0, 100.0, 1000.0]
        );
    }

    #[test]
    fn numbers_read_like_a_person_would_write_them() {
        assert_eq!(format(65536.0, Unit::Bytes), "64 KiB");
        assert_eq!(format(1.5 * 1048576.0, Unit::Bytes), "1.5 MiB");
        assert_eq!(format(0.25, Unit::Seconds), "250 ms");
        assert_eq!(format(93.2, Unit::Seconds), "93.2 s");
        assert_eq!(format(32.0, Unit::Plain), "32");
        assert_eq!(format(0.125, Unit::Plain), "0.125");
    }

    #[test]
    fn timelines_mark_failures_and_spans() {
        let t = Timeline {
            title: "run".into(),
            lanes: vec![Lane {
                name: "job".into(),
                spans: vec![Span {
                    start: 0.0,
                    end: 30.0,
                    label: "attempt 1".into(),
                    kind: Kind::Run,
                }],
                markers: vec![
                    Marker {
                        at: 30.1,
                        label: "n1 lost".into(),
                        kind: Kind::Failure,
                    },
                    Marker {
                        at: f64::INFINITY,
                        label: "never".into(),
                        kind: Kind::Failure,
                    },
                ],
            }],
        };
        let svg = t.render();
        assert_eq!(count(&svg, r#"class="marker failure""#), 1);
        assert_eq!(count(&svg, r#"class="span""#), 1);
        assert!(svg.contains("n1 lost"));
    }
}
