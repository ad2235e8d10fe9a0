//! HdrHistogram interval logs (`latency.hlog`): one compressed histogram per second and
//! metric (tags in [`super::series::TAGS`]), values in µs. StartTime/BaseTime are the
//! wall-clock start of load, so the logs of several load agents line up on absolute
//! time and merge losslessly by adding the histograms of each (tag, second) —
//! [`merge`] — readable too by HdrHistogram's own log tools.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};

use super::series::IntervalSink;

pub const HLOG_FILE: &str = "latency.hlog";

/// Writes an interval log to `out` while `fold` hands closed seconds to the sink.
pub fn write<W: Write, T>(
    out: &mut W,
    load_start: SystemTime,
    fold: impl FnOnce(IntervalSink) -> T,
) -> std::io::Result<T> {
    let mut ser = V2DeflateSerializer::new();
    let mut w = IntervalLogWriterBuilder::new()
        .add_comment("haq latency interval log: µs per request, 1 s intervals by dispatch second; tags: ttft (from intended time), ttft_dispatch, itl, e2e, ttft_error_adjusted (failed = 1 h)")
        .with_start_time(load_start)
        .with_base_time(load_start)
        .with_max_value_divisor(1000.0)
        .begin_log_with(out, &mut ser)?;
    let mut err: Option<std::io::Error> = None;
    let mut sink = |s: u64, tag: &str, h: &Histogram<u64>| {
        if err.is_some() {
            return;
        }
        if let Err(e) = w.write_histogram(
            h,
            Duration::from_secs(s),
            Duration::from_secs(1),
            Tag::new(tag),
        ) {
            err = Some(std::io::Error::other(format!("{e:?}")));
        }
    };
    let r = fold(&mut sink);
    match err {
        Some(e) => Err(e),
        None => Ok(r),
    }
}

/// One interval of a log: absolute start (seconds since the epoch), tag, histogram.
pub type Interval = (f64, String, Histogram<u64>);

/// Reads every interval of a log.
pub fn read(bytes: &[u8]) -> Result<Vec<Interval>, String> {
    let mut base = 0.0;
    let mut out = Vec::new();
    let mut de = Deserializer::new();
    for e in IntervalLogIterator::new(bytes) {
        match e.map_err(|e| format!("{e:?}"))? {
            LogEntry::BaseTime(t) => base = t.as_secs_f64(),
            LogEntry::StartTime(_) => {}
            LogEntry::Interval(i) => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(i.encoded_histogram())
                    .map_err(|e| e.to_string())?;
                let h: Histogram<u64> = de
                    .deserialize(&mut raw.as_slice())
                    .map_err(|e| format!("{e:?}"))?;
                let tag = i.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
                out.push((base + i.start_timestamp().as_secs_f64(), tag, h));
            }
        }
    }
    Ok(out)
}

/// Merges the logs of several agents: (tag, absolute second) → the sum of histograms.
pub fn merge(logs: &[&[u8]]) -> Result<BTreeMap<(String, i64), Histogram<u64>>, String> {
    let mut out: BTreeMap<(String, i64), Histogram<u64>> = BTreeMap::new();
    for log in logs {
        for (t, tag, h) in read(log)? {
            let key = (tag, t.floor() as i64);
            match out.get_mut(&key) {
                Some(acc) => acc.add(&h).map_err(|e| format!("{e:?}"))?,
                None => {
                    out.insert(key, h);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::hist::{interval_hist, rec};

    fn log(start: SystemTime, seconds: &[(u64, &[u64])]) -> Vec<u8> {
        let mut buf = Vec::new();
        write(&mut buf, start, |sink| {
            for (s, vals) in seconds {
                let mut h = interval_hist();
                for v in *vals {
                    rec(&mut h, *v);
                }
                sink(*s, "ttft", &h);
            }
        })
        .expect("write");
        buf
    }

    #[test]
    fn two_agents_merge_losslessly_on_absolute_time() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let a = log(t0, &[(0, &[1000, 2000]), (1, &[5000])]);
        // agent b started one second later: its second 0 is a's second 1
        let b = log(t0 + Duration::from_secs(1), &[(0, &[7000, 9000])]);
        let m = merge(&[&a, &b]).expect("merge");
        let s1 = &m[&("ttft".to_string(), 1_800_000_001)];
        assert_eq!(s1.len(), 3);
        let mut all = interval_hist();
        for v in [5000, 7000, 9000] {
            rec(&mut all, v);
        }
        assert_eq!(s1.value_at_quantile(0.99), all.value_at_quantile(0.99));
        assert_eq!(m[&("ttft".to_string(), 1_800_000_000)].len(), 2);
        let text = String::from_utf8(a).expect("utf8");
        assert!(text.contains("#[BaseTime: 1800000000.000"), "{text}");
        assert!(text.contains("Tag=ttft,1.000,1.000,"), "{text}");
    }
}
