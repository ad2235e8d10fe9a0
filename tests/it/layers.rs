//! The stages stack (issue 14, docs/architecture.md): every module of `src/` belongs
//! to a stage (its top folder or file), and a stage imports only the stages listed
//! below it in [`STAGES`]. Inside the crate, no two files import each other, even
//! through others (a file-level loop). `check` stays pure: it names no network and
//! no file-writing API. This test reads the `use` trees and the `crate::`/`super::`
//! paths of every file of `src/` and fails on each break, naming the file and the path.
//!
//! A re-export (`pub use child::Item`) is not an import of the re-exporting file's
//! own: a path through it is followed to the file that defines the item, so a folder's
//! `mod.rs` may list its children's items while the children import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each stage with the stages it may import, bottom first. `cli` and the crate root
/// sit at the top and may import anything.
const STAGES: &[(&str, &[&str])] = &[
    ("wire", &[]),
    ("priority", &[]),
    ("sim", &["wire"]),
    ("scenario", &["wire", "sim"]),
    ("trace", &["wire", "scenario"]),
    ("plan", &["wire", "scenario", "trace"]),
    ("workload", &["wire", "scenario", "plan"]),
    ("metrics", &["wire", "scenario", "trace", "plan"]),
    ("client", &["wire", "scenario", "trace", "priority"]),
    ("proxy", &["wire", "trace"]),
    (
        "target",
        &[
            "wire", "scenario", "trace", "plan", "client", "proxy", "priority",
        ],
    ),
    (
        "faults",
        &[
            "wire", "scenario", "trace", "plan", "workload", "client", "proxy", "target",
            "priority",
        ],
    ),
    (
        "engine",
        &[
            "wire", "scenario", "trace", "plan", "workload", "metrics", "client", "proxy",
            "target", "faults", "priority",
        ],
    ),
    (
        "check",
        &["wire", "scenario", "trace", "plan", "workload", "metrics"],
    ),
    (
        "report",
        &["wire", "scenario", "trace", "plan", "metrics", "check"],
    ),
    (
        "bench",
        &[
            "wire", "scenario", "trace", "plan", "workload", "metrics", "client", "proxy",
            "target", "faults", "engine", "check", "report", "priority",
        ],
    ),
];

/// Stages that may import anything.
const TOP: &[&str] = &["cli", ""];

/// Names `check` may not use in its own code: judging makes no network call and
/// writes no file (`haq check` of a read-only run directory).
const IMPURE: &[&str] = &[
    "reqwest",
    "tokio::net",
    "std::net",
    "TcpStream",
    "UdpSocket",
    "fs::write",
    "File::create",
    "OpenOptions",
    "create_dir",
    "fs::rename",
    "remove_file",
];

/// A module path: `["check", "fate"]` for `src/check/fate/mod.rs`; `[]` for `lib.rs`.
type Mod = Vec<String>;

struct File {
    path: PathBuf,
    /// The text with comments and literals blanked out.
    code: String,
    /// `code` without its `#[cfg(test)]` items.
    code_no_tests: String,
    test_only: bool,
}

struct Crate {
    files: BTreeMap<Mod, File>,
    /// Per file: item name → the path it re-exports (`pub use a::b::Item`).
    reexports: BTreeMap<Mod, BTreeMap<String, Vec<String>>>,
    /// Per file: the modules it glob re-exports (`pub use a::*`).
    globs: BTreeMap<Mod, Vec<Vec<String>>>,
    /// Per file: the public items it defines.
    defined: BTreeMap<Mod, BTreeSet<String>>,
}

#[derive(Debug, Default)]
struct Findings {
    upward: Vec<String>,
    loops: Vec<String>,
    impure: Vec<String>,
}

impl Findings {
    fn is_empty(&self) -> bool {
        self.upward.is_empty() && self.loops.is_empty() && self.impure.is_empty()
    }
}

/// Blanks comments, string and char literals (keeping lifetimes and newlines).
fn strip(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let c = b[i];
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            continue;
        }
        let prev_ident = i > 0 && ident(b[i - 1]);
        // Raw strings: r"…", r#"…"#, br#"…"#.
        let raw_at = if !prev_ident && c == b'r' {
            Some(i + 1)
        } else if !prev_ident && c == b'b' && b.get(i + 1) == Some(&b'r') {
            Some(i + 2)
        } else {
            None
        };
        if let Some(mut j) = raw_at {
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) == Some(&b'"') {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = (j + close.len()).min(b.len());
                out.push_str("\"\"");
                continue;
            }
        }
        let byte_str = !prev_ident && c == b'b' && b.get(i + 1) == Some(&b'"');
        if c == b'"' || byte_str {
            i += if byte_str { 2 } else { 1 };
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            continue;
        }
        if c == b'\'' {
            // A char literal ('x', '\n', '\u{1F}', '\''), else a lifetime or label.
            let j = if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 3;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                Some(j)
            } else {
                let ch = s[i + 1..].chars().next();
                ch.and_then(|ch| {
                    let j = i + 1 + ch.len_utf8();
                    (b.get(j) == Some(&b'\'')).then_some(j)
                })
            };
            if let Some(j) = j {
                i = j + 1;
                out.push_str("' '");
                continue;
            }
        }
        let ch = s[i..].chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Removes `#[cfg(test)]` items (modules, functions, `use` lines) from stripped code.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        // The item ends at its `;` or at the brace closing its first `{`.
        let mut depth = 0;
        let mut end = item.len();
        for (k, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The text of each inline module (`mod name { … }`) with the names leading to it;
/// the file's own text is `[]`.
fn segments(code: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, i32)> = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut k = 0;
    let names = |st: &[(String, i32)]| st.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    while k < chars.len() {
        let (i, c) = chars[k];
        if c == 'm' && (i == 0 || !code[..i].ends_with(is_ident)) && code[i..].starts_with("mod ") {
            let after = &code[i + 4..];
            let name: String = after
                .trim_start()
                .chars()
                .take_while(|c| is_ident(*c))
                .collect();
            let tail = after.trim_start()[name.len()..].trim_start();
            if !name.is_empty() && tail.starts_with('{') {
                out.push((names(&stack), std::mem::take(&mut cur)));
                let skip = code.len() - tail.len() + 1;
                depth += 1;
                stack.push((name, depth));
                while k < chars.len() && chars[k].0 < skip {
                    k += 1;
                }
                continue;
            }
        }
        match c {
            '{' => depth += 1,
            '}' => {
                if stack.last().is_some_and(|s| s.1 == depth) {
                    out.push((names(&stack), std::mem::take(&mut cur)));
                    stack.pop();
                    depth -= 1;
                    k += 1;
                    continue;
                }
                depth -= 1;
            }
            _ => {}
        }
        cur.push(c);
        k += 1;
    }
    out.push((names(&stack), cur));
    out
}

/// Expands a `use` tree (`a::{b, c::{d, e as f}, g::*}`) into its paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<String> {
        let mut parts = Vec::new();
        let (mut depth, mut cur) = (0, String::new());
        for c in s.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if c == ',' && depth == 0 {
                parts.push(std::mem::take(&mut cur));
            } else {
                cur.push(c);
            }
        }
        parts.push(cur);
        parts
    }
    fn rec(prefix: &[String], t: &str, out: &mut Vec<Vec<String>>) {
        for part in split_top(t) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if let Some(open) = part.find('{') {
                let head: Vec<String> = part[..open]
                    .split("::")
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(String::from)
                    .collect();
                let inner = &part[open + 1..part.rfind('}').unwrap_or(part.len())];
                let p: Vec<String> = prefix.iter().cloned().chain(head).collect();
                rec(&p, inner, out);
            } else {
                let path = part.split(" as ").next().unwrap_or(part);
                let mut p: Vec<String> = prefix.to_vec();
                for seg in path.split("::").map(str::trim).filter(|x| !x.is_empty()) {
                    if seg != "self" || p.is_empty() {
                        p.push(seg.to_string());
                    }
                }
                out.push(p);
            }
        }
    }
    let flat: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = flat.replace(" ::", "::").replace(":: ", "::");
    let mut out = Vec::new();
    rec(&[], &flat, &mut out);
    out
}

/// Every `use` tree of `code` (with `pub use` trees kept apart when `reexports`).
fn use_trees(code: &str, public: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let word_start = at == 0 || !before.ends_with(is_ident);
        let is_pub = is_pub_before(before);
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if word_start && is_pub == public {
            out.push(after[..end].to_string());
        }
        rest = if word_start {
            &after[end.min(after.len())..]
        } else {
            after
        };
    }
    out
}

/// The text before an item ends in its `pub` / `pub(crate)` / `pub(super)`.
fn is_pub_before(before: &str) -> bool {
    let t = before.trim_end();
    if let Some(head) = t.strip_suffix("pub") {
        return !head.ends_with(is_ident);
    }
    match (t.strip_suffix(')'), t.rfind('(')) {
        (Some(_), Some(open)) => t[..open]
            .trim_end()
            .strip_suffix("pub")
            .is_some_and(|head| !head.ends_with(is_ident)),
        _ => false,
    }
}

/// Paths written inline that start at `crate`, `super`, `self` or a child module.
fn inline_paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut k = 0;
    while k < chars.len() {
        let (i, c) = chars[k];
        let starts =
            is_ident(c) && (i == 0 || !code[..i].ends_with(|p: char| is_ident(p) || p == ':'));
        if !starts {
            k += 1;
            continue;
        }
        let mut j = i;
        let mut segs = Vec::new();
        loop {
            let seg: String = code[j..].chars().take_while(|c| is_ident(*c)).collect();
            if seg.is_empty() {
                break;
            }
            j += seg.len();
            segs.push(seg);
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        let first = segs.first().map(String::as_str).unwrap_or("");
        if segs.len() > 1
            && (["crate", "super", "self"].contains(&first) || children.contains(first))
        {
            out.push(segs);
        }
        while k < chars.len() && chars[k].0 < j.max(i + c.len_utf8()) {
            k += 1;
        }
    }
    out
}

fn is_test_module(m: &Mod) -> bool {
    m.iter()
        .any(|x| x == "tests" || x == "testkit" || x.ends_with("_tests"))
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.extension().is_none_or(|x| x != "rs") || p.ends_with("main.rs") {
                    continue;
                }
                let rel = p.strip_prefix(src).expect("under src");
                let mut m: Mod = rel
                    .with_extension("")
                    .iter()
                    .map(|x| x.to_string_lossy().into_owned())
                    .collect();
                if m.last().is_some_and(|x| x == "mod") || m == ["lib"] {
                    m.pop();
                }
                let text = std::fs::read_to_string(&p).expect("read");
                let code = strip(&text);
                let code_no_tests = without_tests(&code);
                let test_only = is_test_module(&m);
                files.insert(
                    m,
                    File {
                        path: p,
                        code,
                        code_no_tests,
                        test_only,
                    },
                );
            }
        }
        let mut c = Crate {
            files,
            reexports: BTreeMap::new(),
            globs: BTreeMap::new(),
            defined: BTreeMap::new(),
        };
        for (m, f) in &c.files {
            let mut rx = BTreeMap::new();
            let mut gl = Vec::new();
            for t in use_trees(&f.code_no_tests, true) {
                for p in expand_use(&t) {
                    match p.last().map(String::as_str) {
                        Some("*") => gl.push(p[..p.len() - 1].to_vec()),
                        Some(name) => {
                            rx.insert(name.to_string(), p.clone());
                        }
                        None => {}
                    }
                }
            }
            // Every item the file defines (a child may use its parent's private ones).
            let mut defined = BTreeSet::new();
            for kw in [
                "struct ", "enum ", "fn ", "const ", "static ", "type ", "trait ",
            ] {
                let mut rest = f.code_no_tests.as_str();
                while let Some(at) = rest.find(kw) {
                    let word_start = at == 0 || !rest[..at].ends_with(is_ident);
                    let after = &rest[at + kw.len()..];
                    if word_start {
                        let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
                        defined.insert(name);
                    }
                    rest = after;
                }
            }
            c.reexports.insert(m.clone(), rx);
            c.globs.insert(m.clone(), gl);
            c.defined.insert(m.clone(), defined);
        }
        c
    }

    fn children(&self, m: &Mod) -> BTreeSet<String> {
        self.files
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k[..m.len()] == m[..])
            .map(|k| k[m.len()].clone())
            .collect()
    }

    /// The file a path leads to, from module `at` (an inline module's path included).
    fn resolve(&self, at: &Mod, path: &[String], depth: u32) -> Option<Mod> {
        self.resolve_as(at, path, depth, true)
    }

    /// As [`Crate::resolve`]; with `follow: false` a path through a re-export ends at
    /// the re-exporting file (the stage a path names is the one it imports).
    fn resolve_as(&self, at: &Mod, path: &[String], depth: u32, follow: bool) -> Option<Mod> {
        if depth > 8 {
            return None;
        }
        let (mut cur, mut rest): (Mod, &[String]) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            Some("super") => {
                let mut cur = at.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    cur.pop();
                    rest = &rest[1..];
                }
                (cur, rest)
            }
            Some("self") => (at.clone(), &path[1..]),
            Some(first) if self.children(at).contains(first) => (at.clone(), path),
            _ => return None,
        };
        // An inline module's path is its file's, for what it can reach.
        while !cur.is_empty() && !self.files.contains_key(&cur) {
            cur.pop();
        }
        while let Some(next) = rest.first() {
            let mut m = cur.clone();
            m.push(next.clone());
            if !self.files.contains_key(&m) {
                break;
            }
            cur = m;
            rest = &rest[1..];
        }
        if let Some(name) = rest.first().filter(|_| follow) {
            if let Some(target) = self.reexports.get(&cur).and_then(|r| r.get(name))
                && let Some(r) = self.resolve(&cur, target, depth + 1)
            {
                return Some(r);
            }
            let own = self.defined.get(&cur).is_some_and(|d| d.contains(name));
            if !own {
                for g in self.globs.get(&cur).into_iter().flatten() {
                    if let Some(r) = self.resolve(&cur, g, depth + 1) {
                        let has = self.defined.get(&r).is_some_and(|d| d.contains(name))
                            || self.reexports.get(&r).is_some_and(|x| x.contains_key(name));
                        if has {
                            return Some(r);
                        }
                    }
                }
            }
        }
        Some(cur)
    }

    /// The paths one file names, each with the (inline) module it is written in.
    fn refs(&self, m: &Mod, code: &str, public: bool) -> Vec<(Mod, Vec<String>)> {
        let mut out = Vec::new();
        for (inline, text) in segments(code) {
            let at: Mod = m.iter().cloned().chain(inline.iter().cloned()).collect();
            let children = if inline.is_empty() {
                self.children(m)
            } else {
                BTreeSet::new()
            };
            for t in use_trees(&text, false) {
                out.extend(expand_use(&t).into_iter().map(|p| (at.clone(), p)));
            }
            if public {
                for t in use_trees(&text, true) {
                    out.extend(expand_use(&t).into_iter().map(|p| (at.clone(), p)));
                }
            }
            let inline_code = remove_use_items(&text);
            out.extend(
                inline_paths(&inline_code, &children)
                    .into_iter()
                    .map(|p| (at.clone(), p)),
            );
        }
        for (_, p) in &mut out {
            if p.last().is_some_and(|x| x == "*") {
                p.pop();
            }
        }
        out
    }

    fn check(&self) -> Findings {
        let mut f = Findings::default();
        let stage_of = |m: &Mod| m.first().cloned().unwrap_or_default();
        let allowed: BTreeMap<&str, &[&str]> = STAGES.iter().copied().collect();
        let mut edges: BTreeMap<Mod, BTreeMap<Mod, String>> = BTreeMap::new();
        for (m, file) in &self.files {
            let stage = stage_of(m);
            let shown = file.path.display().to_string();
            for (at, path) in self.refs(m, &file.code, true) {
                // The stage the path names and the stage of the file it reaches.
                let named = self.resolve_as(&at, &path, 0, false);
                let reached = self.resolve(&at, &path, 0);
                let mut tos: Vec<String> = named.iter().chain(&reached).map(stage_of).collect();
                tos.dedup();
                for to in tos {
                    if to == stage || TOP.contains(&stage.as_str()) {
                        continue;
                    }
                    let ok = allowed
                        .get(stage.as_str())
                        .is_some_and(|a| a.contains(&to.as_str()));
                    if !ok {
                        f.upward.push(format!(
                            "{shown}: stage `{stage}` imports `{to}` (`{}`)",
                            path.join("::")
                        ));
                    }
                }
            }
            if file.test_only {
                continue;
            }
            for (at, path) in self.refs(m, &file.code_no_tests, false) {
                if let Some(r) = self.resolve(&at, &path, 0)
                    && r != *m
                    && self.files.get(&r).is_some_and(|t| !t.test_only)
                {
                    edges
                        .entry(m.clone())
                        .or_default()
                        .entry(r)
                        .or_insert_with(|| path.join("::"));
                }
            }
            if stage == "check" {
                for word in IMPURE {
                    if file.code_no_tests.contains(word) {
                        f.impure.push(format!("{shown}: judging names `{word}`"));
                    }
                }
            }
        }
        for comp in strongly_connected(&edges) {
            let name = |m: &Mod| {
                self.files
                    .get(m)
                    .map_or_else(|| m.join("/"), |x| x.path.display().to_string())
            };
            let set: BTreeSet<&Mod> = comp.iter().collect();
            let mut why = Vec::new();
            for a in &comp {
                for (b, p) in edges.get(a).into_iter().flatten() {
                    if set.contains(b) {
                        why.push(format!("{} → {} (`{p}`)", name(a), name(b)));
                    }
                }
            }
            f.loops.push(format!("import loop: {}", why.join(", ")));
        }
        f
    }
}

/// `use …;` items removed, so their paths are not read twice.
fn remove_use_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let word_start = at == 0 || !rest[..at].ends_with(is_ident);
        if !word_start {
            out.push_str(&rest[..at + 4]);
            rest = &rest[at + 4..];
            continue;
        }
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e + 1);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Tarjan's strongly connected components with more than one file.
fn strongly_connected(edges: &BTreeMap<Mod, BTreeMap<Mod, String>>) -> Vec<Vec<Mod>> {
    struct S<'a> {
        edges: &'a BTreeMap<Mod, BTreeMap<Mod, String>>,
        index: BTreeMap<&'a Mod, usize>,
        low: BTreeMap<&'a Mod, usize>,
        stack: Vec<&'a Mod>,
        on: BTreeSet<&'a Mod>,
        next: usize,
        out: Vec<Vec<Mod>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a Mod) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.edges.get(v) {
            for w in ws.keys() {
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let l = s.low[v].min(s.low[w]);
                    s.low.insert(v, l);
                } else if s.on.contains(w) {
                    let l = s.low[v].min(s.index[w]);
                    s.low.insert(v, l);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let nodes: BTreeSet<&Mod> = edges
        .iter()
        .flat_map(|(a, bs)| std::iter::once(a).chain(bs.keys()))
        .collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn stages_import_only_stages_below_them_and_files_never_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let f = Crate::read(&src).check();
    assert!(
        f.is_empty(),
        "layering broken (docs/architecture.md):\n{}",
        f.upward
            .iter()
            .chain(&f.loops)
            .chain(&f.impure)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The checker itself: a planted upward import, a planted loop through a `mod.rs`, an
/// impure check, and what it must not flag (re-exports, inline test modules, literals
/// and comments that look like paths).
#[test]
fn the_layering_check_catches_what_it_is_for() {
    let dir = std::env::temp_dir().join(format!("haq-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let put = |p: &str, text: &str| {
        let p = dir.join(p);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(p, text).expect("write");
    };
    put("lib.rs", "pub mod wire;\npub mod trace;\npub mod check;\n");
    put(
        "wire/mod.rs",
        "pub mod a;\npub use a::Thing;\n// crate::check::Nope in a comment\nconst S: &str = \"crate::check::Nope\";\n",
    );
    put(
        "wire/a.rs",
        "pub struct Thing;\nfn f() { let _ = crate::trace::Up; }\n",
    );
    put(
        "trace/mod.rs",
        "mod b;\nmod c;\npub use b::*;\npub struct Up;\nfn g() { c::h(); }\n#[cfg(test)]\nmod tests { use super::super::check::X; }\n",
    );
    put(
        "trace/b.rs",
        "pub struct FromB;\nuse super::c::H;\nuse crate::check::Thing;\n",
    );
    put(
        "trace/c.rs",
        "pub struct H;\npub fn h() {}\nuse super::Up;\n",
    );
    put(
        "check/mod.rs",
        "pub use crate::wire::Thing;\nuse crate::trace::FromB;\nfn w() { std::fs::write(\"x\", \"\"); let c = 'x'; let l: &'static str = \"\"; }\npub struct X;\n",
    );
    let f = Crate::read(&dir).check();
    let _ = std::fs::remove_dir_all(&dir);
    // wire → trace is upward; the comment and the string are not imports. trace/b.rs
    // reaches wire's Thing, but through check's re-export: it names check.
    assert_eq!(f.upward.len(), 3, "{f:#?}");
    assert!(
        f.upward[0].contains("stage `trace` imports `check`"),
        "{f:#?}"
    );
    assert!(
        f.upward[1].contains("trace/b.rs: stage `trace` imports `check`"),
        "{f:#?}"
    );
    assert!(
        f.upward[2].contains("stage `wire` imports `trace`"),
        "{f:#?}"
    );
    // trace/mod.rs → c.rs (calls h) and c.rs → mod.rs (Up is defined there): a loop;
    // b.rs → c.rs is not part of it, and `FromB` reached through the glob is b.rs's.
    assert_eq!(f.loops.len(), 1, "{f:#?}");
    assert!(f.loops[0].contains("trace/c.rs"), "{f:#?}");
    assert!(!f.loops[0].contains("trace/b.rs"), "{f:#?}");
    assert_eq!(f.impure.len(), 1, "{f:#?}");
    assert!(f.impure[0].contains("fs::write"), "{f:#?}");
}

/// Lines of code (comments and tests aside) past which a file or a function should be
/// split (issue 14: files one can read in one sitting).
const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 100;

/// Every function of `code` with its length in lines (from `fn` to its closing brace).
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut rest = 0;
    while let Some(at) = code[rest..].find("fn ").map(|k| rest + k) {
        rest = at + 3;
        if at > 0 && is_ident(code[..at].chars().next_back().unwrap_or(' ')) {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| is_ident(*c))
            .collect();
        // The body starts at the first `{` before any `;` (a declaration has none).
        let Some(open) = code[at..].find(['{', ';']).map(|k| at + k) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0;
        let mut end = open;
        for (k, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = code[at..=end]
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        out.push((name, lines));
        rest = open + 1;
    }
    out
}

#[test]
fn files_and_functions_stay_small() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let c = Crate::read(&src);
    let mut big = Vec::new();
    for f in c.files.values().filter(|f| !f.test_only) {
        let lines = f
            .code_no_tests
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        if lines > MAX_FILE_LINES {
            big.push(format!("{}: {lines} lines of code", f.path.display()));
        }
        for (name, n) in function_lengths(&f.code_no_tests) {
            if n > MAX_FN_LINES {
                big.push(format!("{}: fn {name} is {n} lines", f.path.display()));
            }
        }
    }
    assert!(big.is_empty(), "split these:\n{}", big.join("\n"));
}

#[test]
fn function_lengths_are_counted_from_fn_to_its_brace() {
    let code = strip(
        "fn a() {\n    let s = \"}\";\n    if x { y() }\n}\nfn b();\nconst F: fn() = c;\npub fn d(x: u8) -> u8 { x }\n",
    );
    assert_eq!(
        function_lengths(&code),
        [("a".to_string(), 4), ("d".to_string(), 1)]
    );
}
