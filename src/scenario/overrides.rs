//! `--set PATH=VALUE`: override any scenario field, as helm does.
//!
//! PATH is dotted with optional indices (`target.replicas`, `phases[1].duration`);
//! VALUE is read as YAML (`5`, `true`, `naive-retry`, `[a, b]`, `{x: 1}`). Missing maps
//! on the way are created; an index past the end of a list is an error.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

pub fn parse_path(path: &str) -> Result<Vec<Seg>, String> {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        if key.is_empty() && (segs.is_empty() || rest.is_empty()) {
            return Err(format!("`{path}` has an empty segment"));
        }
        if !key.is_empty() {
            segs.push(Seg::Key(key.to_string()));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("`{path}`: missing `]`"))?;
            let idx = r[..end]
                .parse::<usize>()
                .map_err(|_| format!("`{path}`: `{}` is not an index", &r[..end]))?;
            segs.push(Seg::Index(idx));
            rest = &r[end + 1..];
        }
        if !rest.is_empty() {
            return Err(format!("`{path}`: unexpected `{rest}`"));
        }
    }
    Ok(segs)
}

/// Canonical dotted form of a path (`a.b[2].c`).
pub fn path_string(segs: &[Seg]) -> String {
    let mut s = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Splits `PATH=VALUE` and parses both halves.
pub fn parse_set(spec: &str) -> Result<(Vec<Seg>, Value), String> {
    let (path, raw) = spec
        .split_once('=')
        .ok_or_else(|| format!("`{spec}` is not PATH=VALUE"))?;
    let segs = parse_path(path.trim())?;
    let value = if raw.trim().is_empty() {
        Value::String(String::new())
    } else {
        serde_saphyr::from_str::<Value>(raw).map_err(|e| {
            format!(
                "`{raw}` is not a YAML value: {}",
                e.to_string().lines().next().unwrap_or("")
            )
        })?
    };
    Ok((segs, value))
}

/// Writes `value` at `segs` inside `root`.
pub fn apply(root: &mut Value, segs: &[Seg], value: Value) -> Result<(), String> {
    let mut cur = root;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let here = path_string(&segs[..i]);
        match seg {
            Seg::Key(k) => {
                if cur.is_null() {
                    *cur = Value::Object(Default::default());
                }
                let map = cur
                    .as_object_mut()
                    .ok_or_else(|| format!("`{here}` is not a map, cannot set `{k}` inside it"))?;
                if last {
                    map.insert(k.clone(), value);
                    return Ok(());
                }
                cur = map.entry(k.clone()).or_insert(Value::Null);
            }
            Seg::Index(idx) => {
                let list = cur
                    .as_array_mut()
                    .ok_or_else(|| format!("`{here}` is not a list"))?;
                let len = list.len();
                let slot = list.get_mut(*idx).ok_or_else(|| {
                    format!(
                        "`{here}` has {}, no index {idx}",
                        super::words::plural(len as u64, "item")
                    )
                })?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                cur = slot;
            }
        }
    }
    Err("empty path".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sets_nested_values() {
        let mut v = json!({"target": {"replicas": 3}, "phases": [{"d": "1s"}, {"d": "2s"}]});
        let (p, x) = parse_set("target.replicas=5").expect("ok");
        apply(&mut v, &p, x).expect("applies");
        let (p, x) = parse_set("phases[1].d=9s").expect("ok");
        apply(&mut v, &p, x).expect("applies");
        let (p, x) = parse_set("target.gateway.policy=naive-retry").expect("ok");
        apply(&mut v, &p, x).expect("applies");
        assert_eq!(v["target"]["replicas"], 5);
        assert_eq!(v["phases"][1]["d"], "9s");
        assert_eq!(v["target"]["gateway"]["policy"], "naive-retry");
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(parse_set("novalue").is_err());
        assert!(parse_set("a..b=1").is_err());
        assert!(parse_set("a[x]=1").is_err());
        let mut v = json!({"phases": [1]});
        let (p, x) = parse_set("phases[3]=2").expect("parses");
        assert!(apply(&mut v, &p, x).is_err());
        let (p, x) = parse_set("phases.x=2").expect("parses");
        assert!(apply(&mut v, &p, x).is_err());
    }
}
