//! HdrHistogram interval logs (`latency.hlog`): one compressed histogram per second and
//! metric (tags in [`super::series::TAGS`]), values in µs. StartTime/BaseTime are the
//! wall-clock start of load, so the logs of several load agents line up on absolute
//! time and merge losslessly by adding the histograms of each (tag, second) —
//! [`merge`] — readable too by HdrHistogram's own log tools.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

use base64::Engine;
use flate2::Compression;
use flate2::write::ZlibEncoder;
use hdrhistogram::Counter;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{
    Deserializer, Serializer, V2DeflateSerializeError, V2SerializeError, V2Serializer,
};

use super::series::IntervalSink;

pub use crate::trace::files::HLOG_FILE;

/// Writes an interval log to `out` while `fold` hands closed seconds to the sink.
pub fn write<W: Write, T>(
    out: &mut W,
    load_start: SystemTime,
    fold: impl FnOnce(IntervalSink) -> T,
) -> std::io::Result<T> {
    let mut ser = DeflateSerializer::new();
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

/// Cookie of a V2 histogram compressed with zlib (HdrHistogram's encoding).
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;

/// hdrhistogram's `V2DeflateSerializer`, byte for byte, with one zlib compressor for
/// every histogram of the log: the crate's makes a fresh one per histogram, and a
/// compressor's tables (~300 KiB, zeroed) cost more than compressing a second's
/// histogram.
struct DeflateSerializer {
    v2: V2Serializer,
    raw: Vec<u8>,
    /// Writes into its own buffer; reset (same level, fresh stream) after each use.
    zlib: ZlibEncoder<Vec<u8>>,
}

impl DeflateSerializer {
    fn new() -> Self {
        DeflateSerializer {
            v2: V2Serializer::new(),
            raw: Vec::new(),
            zlib: ZlibEncoder::new(Vec::new(), Compression::default()),
        }
    }
}

impl Serializer for DeflateSerializer {
    type SerializeError = V2DeflateSerializeError;

    fn serialize<T: Counter, W: Write>(
        &mut self,
        h: &Histogram<T>,
        writer: &mut W,
    ) -> Result<usize, V2DeflateSerializeError> {
        self.raw.clear();
        self.v2
            .serialize(h, &mut self.raw)
            .map_err(V2DeflateSerializeError::InternalSerializationError)?;
        let out = self.zlib.get_mut();
        out.clear();
        out.extend_from_slice(&V2_COMPRESSED_COOKIE.to_be_bytes());
        out.extend_from_slice(&[0; 4]); // the compressed length, below
        self.zlib.write_all(&self.raw)?;
        self.zlib.try_finish()?;
        let out = self.zlib.get_mut();
        let len = out.len();
        let body = u32::try_from(len - 8).map_err(|_| {
            V2DeflateSerializeError::InternalSerializationError(V2SerializeError::UsizeTypeTooSmall)
        })?;
        out[4..8].copy_from_slice(&body.to_be_bytes());
        writer.write_all(out)?;
        // A fresh stream for the next histogram, into the same buffer.
        let buf = std::mem::take(out);
        self.zlib.reset(buf)?;
        Ok(len)
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

    /// The reused compressor writes what hdrhistogram's own serializer writes, for
    /// each histogram of a sequence (empty, one value, many, far apart, after a big
    /// one), so a log reads back and compares byte for byte.
    #[test]
    fn the_reused_compressor_writes_what_the_crate_writes() {
        let mut mine = DeflateSerializer::new();
        let mut theirs = hdrhistogram::serialization::V2DeflateSerializer::new();
        let mut h = interval_hist();
        let sets: [&[u64]; 7] = [
            &[],
            &[1],
            &[1000, 2000, 2000, 3_600_000_000],
            &[7; 100],
            &[],
            &[5, 50, 500, 5000, 50_000, 500_000],
            &[],
        ];
        let mut big = interval_hist();
        for v in 0..20_000u64 {
            rec(&mut big, v * 37 % 1_000_000 + 1);
        }
        for (set, vals) in sets.into_iter().enumerate() {
            h.reset();
            for v in vals {
                rec(&mut h, *v);
            }
            for (i, hist) in [&h, &big].into_iter().enumerate() {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let n = mine.serialize(hist, &mut a).expect("mine");
                let m = theirs.serialize(hist, &mut b).expect("theirs");
                assert_eq!((n, &a), (m, &b), "set {set} hist {i}");
                let back: Histogram<u64> = Deserializer::new()
                    .deserialize(&mut a.as_slice())
                    .expect("reads back");
                assert_eq!(&back, hist);
            }
        }
    }
}
