//! A YAML document as a tree whose every node knows its line and column.
//!
//! serde-saphyr deserializes straight into typed structs; to report *semantic* errors
//! ("`slo.ttft_p95` must be > 0") at `file:line:col` we also need to know where each
//! field was written. We parse the document once more into this tree (every node wrapped
//! in [`serde_saphyr::Spanned`]) and keep a path → position index.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// Line and column, both 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u64,
    pub col: u64,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

struct Node(Spanned<Kind>);

enum Kind {
    Scalar(serde_json::Value),
    Seq(Vec<Node>),
    Map(Vec<(Spanned<String>, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Spanned::<Kind>::deserialize(d).map(Node)
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind::Scalar(
            serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.into()))
    }
    fn visit_string<E>(self, v: String) -> Result<Kind, E> {
        Ok(Kind::Scalar(v.into()))
    }
    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Scalar(serde_json::Value::Null))
    }
    fn visit_none<E>(self) -> Result<Kind, E> {
        Ok(Kind::Scalar(serde_json::Value::Null))
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        Kind::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(n) = seq.next_element::<Node>()? {
            items.push(n);
        }
        Ok(Kind::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(k) = map.next_key::<Spanned<String>>()? {
            let v = map.next_value::<Node>()?;
            entries.push((k, v));
        }
        Ok(Kind::Map(entries))
    }
}

/// A parsed document: its value (JSON data model) and where each path was written.
#[derive(Debug, Clone, Default)]
pub struct Located {
    pub value: serde_json::Value,
    /// Dotted path (`phases[1].duration`) → position of the value; the key's position
    /// for map entries is stored under `path` + `#key`.
    index: BTreeMap<String, Pos>,
}

/// A syntax error with its position.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    pub pos: Option<Pos>,
    pub message: String,
}

impl Located {
    pub fn parse(text: &str) -> Result<Self, SyntaxError> {
        if text.trim().is_empty() {
            return Err(SyntaxError {
                pos: Some(Pos { line: 1, col: 1 }),
                message: "the file is empty".into(),
            });
        }
        let node: Node = serde_saphyr::from_str(text).map_err(|e| SyntaxError {
            pos: e.location().map(|l| Pos {
                line: l.line(),
                col: l.column(),
            }),
            message: first_line(&e.to_string()),
        })?;
        let mut index = BTreeMap::new();
        let value = walk(node, String::new(), &mut index);
        Ok(Located { value, index })
    }

    /// Position of the value at `path`, or of the closest written ancestor.
    pub fn pos(&self, path: &str) -> Option<Pos> {
        let mut p = path.to_string();
        loop {
            if let Some(pos) = self.index.get(&p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
            if p.is_empty() {
                return self.index.get("").copied();
            }
        }
    }

    /// Position of the key that introduced `path` (for unknown-field errors).
    pub fn key_pos(&self, path: &str) -> Option<Pos> {
        self.index
            .get(&format!("{path}#key"))
            .copied()
            .or_else(|| self.pos(path))
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).trim().to_string()
}

fn walk(node: Node, path: String, index: &mut BTreeMap<String, Pos>) -> serde_json::Value {
    let loc = node.0.referenced;
    index.insert(
        path.clone(),
        Pos {
            line: loc.line(),
            col: loc.column(),
        },
    );
    match node.0.value {
        Kind::Scalar(v) => v,
        Kind::Seq(items) => serde_json::Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, n)| walk(n, format!("{path}[{i}]"), index))
                .collect(),
        ),
        Kind::Map(entries) => {
            let mut m = serde_json::Map::new();
            for (k, v) in entries {
                let child = if path.is_empty() {
                    k.value.clone()
                } else {
                    format!("{path}.{}", k.value)
                };
                index.insert(
                    format!("{child}#key"),
                    Pos {
                        line: k.referenced.line(),
                        col: k.referenced.column(),
                    },
                );
                let val = walk(v, child, index);
                m.insert(k.value, val);
            }
            serde_json::Value::Object(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_nested_paths() {
        let doc = "a: 1\nb:\n  c: [x, y]\n  d:\n    - e: 5\n";
        let l = Located::parse(doc).expect("parses");
        assert_eq!(l.value["b"]["d"][0]["e"], 5);
        assert_eq!(l.pos("a"), Some(Pos { line: 1, col: 4 }));
        assert_eq!(l.pos("b.d[0].e"), Some(Pos { line: 5, col: 10 }));
        assert_eq!(l.key_pos("b.c"), Some(Pos { line: 3, col: 3 }));
        // missing leaf falls back to the parent
        assert_eq!(l.pos("b.d[0].zzz"), l.pos("b.d[0]"));
    }

    #[test]
    fn syntax_error_has_position() {
        let e = Located::parse("a: [1, 2\nb: 3\n").expect_err("error");
        assert!(e.pos.is_some(), "{e:?}");
    }

    #[test]
    fn duplicate_keys_rejected() {
        let e = Located::parse("a: 1\na: 2\n").expect_err("error");
        assert!(e.message.to_lowercase().contains("duplicate"), "{e:?}");
    }
}
