//! Human units used in scenario files: durations (`500ms`, `30s`, `2m`), rates (`6/s`,
//! `120/m`), fractions (`1%`, `0.01`) and sizes (`64KiB`, `1MiB`). Each deserializes from a string or a number
//! and serializes back to the canonical string, so the recorded effective scenario reads
//! like the input.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// A non-negative duration: `250ms`, `30s`, `1.5m`, `1h`; a bare number is seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    pub const fn secs(s: u64) -> Self {
        Dur(Duration::from_secs(s))
    }
    pub const fn millis(ms: u64) -> Self {
        Dur(Duration::from_millis(ms))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }
}

/// `s` as a non-negative number and the unit after it (trimmed); `what` names the
/// unit in the error (`a duration (use e.g. …)`).
fn number_and_unit<'a>(s: &'a str, what: &str) -> Result<(f64, &'a str), String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("`{s}` is not {what}"))?;
    Ok((n, unit.trim()))
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim().starts_with('-') {
        return Err(format!("`{s}` is negative; durations must be >= 0"));
    }
    let (n, unit) = number_and_unit(s, "a duration (use e.g. 500ms, 30s, 2m, 1h)")?;
    let mult = match unit {
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "us" | "µs" => 1e-6,
        other => {
            return Err(format!("`{s}`: unknown unit `{other}` (use ms, s, m or h)"));
        }
    };
    let secs = n * mult;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us == 0 {
        "0s".into()
    } else if us.is_multiple_of(3_600_000_000) {
        format!("{}h", us / 3_600_000_000)
    } else if us.is_multiple_of(60_000_000) {
        format!("{}m", us / 60_000_000)
    } else if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{}ms", us as f64 / 1000.0)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

/// Accepts a string or a number and hands the text to `parse`.
fn de_str_or_num<'de, D, T>(d: D, parse: fn(&str) -> Result<T, String>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => parse(&s).map_err(de::Error::custom),
        serde_json::Value::Number(n) => parse(&n.to_string()).map_err(de::Error::custom),
        other => Err(de::Error::custom(format!(
            "expected a string or a number, got {other}"
        ))),
    }
}

/// `$t` deserializes from a string or a number (through `$parse`), serializes as its
/// canonical string (`Display`), and its JSON Schema describes both forms.
macro_rules! human_unit {
    ($t:ident, $parse:path, $name:literal, $desc:literal, $pattern:literal, $number:tt) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                de_str_or_num(d, |s| $parse(s).map($t))
            }
        }

        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }

        impl JsonSchema for $t {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "description": $desc,
                    "oneOf": [{"type": "string", "pattern": $pattern}, $number]
                })
            }
        }
    };
}

human_unit!(
    Dur,
    parse_duration,
    "Duration",
    "A duration: 250ms, 30s, 1.5m, 1h (a bare number is seconds).",
    "^[0-9]+(\\.[0-9]+)?\\s*(us|µs|ms|s|m|min|h)?$",
    {"type": "number", "minimum": 0}
);

/// A request rate in requests per second: `6/s`, `360/m`, `2/min`; a bare number is /s.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Rate(pub f64);

pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, per) = match t.split_once('/') {
        Some((n, p)) => (n.trim(), p.trim()),
        None => (t, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a rate (use e.g. 6/s or 120/m)"))?;
    let div = match per {
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "`{s}`: unknown rate unit `/{other}` (use /s, /m or /h)"
            ));
        }
    };
    if !n.is_finite() || n < 0.0 {
        return Err(format!("`{s}` is negative; rates must be >= 0"));
    }
    Ok(n / div)
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", trim_float(self.0))
    }
}

fn trim_float(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

human_unit!(
    Rate,
    parse_rate,
    "Rate",
    "Requests per second: 6/s, 120/m, 2/min (a bare number is per second).",
    "^[0-9]+(\\.[0-9]+)?\\s*(/\\s*(s|m|min|h))?$",
    {"type": "number", "minimum": 0}
);

/// A fraction in [0, 1]: `1%`, `0.5%`, or a number such as `0.01`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Fraction(pub f64);

pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = if let Some(p) = t.strip_suffix('%') {
        p.trim()
            .parse::<f64>()
            .map(|x| x / 100.0)
            .map_err(|_| format!("`{s}` is not a percentage"))?
    } else {
        t.parse::<f64>()
            .map_err(|_| format!("`{s}` is not a fraction (use e.g. 1% or 0.01)"))?
    };
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("`{s}` is outside 0%..100%"));
    }
    Ok(v)
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", trim_float(self.0 * 100.0))
    }
}

human_unit!(
    Fraction,
    parse_fraction,
    "Fraction",
    "A fraction: 1%, 0.5%, or a number in [0, 1].",
    "^[0-9]+(\\.[0-9]+)?\\s*%?$",
    {"type": "number", "minimum": 0, "maximum": 1}
);

/// A size in bytes, at least one: `512`, `64KiB`, `1MiB`, `2GiB` (also `KB`, `MB`, `GB`
/// in powers of ten); a bare number is bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

/// The largest size a scenario may give (1 TiB).
pub const MAX_SIZE: u64 = 1 << 40;

pub fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = number_and_unit(s, "a size (use e.g. 4096, 64KiB, 1MiB)")?;
    let mult = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use B, KiB, MiB, GiB, KB, MB or GB)"
            ));
        }
    };
    let b = (n * mult).round();
    if !b.is_finite() || b > MAX_SIZE as f64 {
        return Err(format!("`{s}` is out of range (at most 1TiB)"));
    }
    if b < 1.0 {
        return Err(format!("`{s}`: a size must be at least one byte"));
    }
    Ok(b as u64)
}

/// A byte count as people read it: the largest binary unit it is a whole number of.
pub fn format_size(b: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= m && b.is_multiple_of(m) {
            return format!("{}{unit}", b / m);
        }
    }
    format!("{b}B")
}

impl Size {
    pub const fn kib(n: u64) -> Self {
        Size(n << 10)
    }
    pub const fn mib(n: u64) -> Self {
        Size(n << 20)
    }
    /// As a `usize` (saturating on 32-bit hosts).
    pub fn bytes(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

human_unit!(
    Size,
    parse_size,
    "Size",
    "A size: 4096, 64KiB, 1MiB, 2GiB, 10MB (a bare number is bytes).",
    "^[0-9]+(\\.[0-9]+)?\\s*(B|KiB|MiB|GiB|KB|kB|MB|GB)?$",
    {"type": "number", "minimum": 1}
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_duration("1.5s").ok(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_duration("2m").ok(), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("3").ok(), Some(Duration::from_secs(3)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
    }

    #[test]
    fn rates_and_fractions() {
        assert_eq!(parse_rate("6/s").ok(), Some(6.0));
        assert_eq!(parse_rate("120/m").ok(), Some(2.0));
        assert_eq!(parse_rate("4").ok(), Some(4.0));
        assert!(parse_rate("-2/s").is_err());
        assert!(parse_rate("2/fortnight").is_err());
        assert_eq!(parse_fraction("1%").ok(), Some(0.01));
        assert_eq!(parse_fraction("0.25").ok(), Some(0.25));
        assert!(parse_fraction("150%").is_err());
        assert_eq!(Rate(2.5).to_string(), "2.5/s");
        assert_eq!(Fraction(0.015).to_string(), "1.5%");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("64KiB").ok(), Some(64 << 10));
        assert_eq!(parse_size("1.5 MiB").ok(), Some(3 << 19));
        assert_eq!(parse_size("10MB").ok(), Some(10_000_000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("2TiB").is_err());
        assert!(parse_size("2PiB").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(Size::mib(64).to_string(), "64MiB");
        assert_eq!(Size(1536).to_string(), "1536B");
        assert_eq!(Size(3 << 19).to_string(), "1536KiB");
    }
}
