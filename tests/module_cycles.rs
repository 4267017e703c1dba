//! The top-level modules of `src/` depend on each other one way only: no import cycle, tests
//! excluded (a `use crate::a` or a `crate::a::…` path in module `b`, and a path back from `a`
//! to `b`). A new cycle fails this test with the modules and the files that close it, so the
//! structure cannot drift back into a circle unnoticed.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/a.rs` and `src/a/…` are `a`); `None` for the
/// crate roots and binaries.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?.to_owned();
    match first.as_str() {
        "lib.rs" | "main.rs" | "bin" => None,
        name => Some(name.strip_suffix(".rs").unwrap_or(name).to_owned()),
    }
}

/// The text of a file without its comments and without `#[cfg(test)]` items.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            // Skip the item that follows: up to its matching closing brace, or a `;` item.
            let mut depth = 0i64;
            let mut opened = false;
            for next in lines.by_ref() {
                let code = next.split("//").next().unwrap_or("");
                depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
                opened |= code.contains('{');
                if (opened && depth <= 0) || (!opened && code.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The top-level modules a piece of code names: `crate::name` paths, and the names inside
/// `use crate::{…}` groups.
fn named_modules(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut names = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                names.insert(ident(part.trim()));
            }
        } else {
            names.insert(ident(rest));
        }
    }
    names
}

/// Module -> the modules it names, with the files that name each.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(src, f)).collect();
    let mut g = Graph::new();
    for file in &files {
        let Some(from) = top_module(src, file) else { continue };
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for to in named_modules(&code_of(&text)) {
            if to != from && modules.contains(&to) {
                let rel = file.strip_prefix(src).unwrap_or(file).display().to_string();
                g.entry(from.clone()).or_default().entry(to).or_default().insert(rel);
            }
        }
        g.entry(from).or_default();
    }
    g
}

/// The modules reachable from `start`.
fn reachable(g: &Graph, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![start.to_owned()];
    while let Some(m) = todo.pop() {
        for next in g.get(&m).into_iter().flat_map(|e| e.keys()) {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    assert!(g.len() > 5, "found only {:?}: is {} the crate's src?", g.keys(), src.display());
    let mut cycles = Vec::new();
    for (from, edges) in &g {
        for (to, files) in edges {
            if reachable(&g, to).contains(from) {
                cycles.push(format!("{from} -> {to} ({}), and {to} leads back to {from}", itemize(files)));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles between top-level modules:\n{}", cycles.join("\n"));
}

fn itemize(files: &BTreeSet<String>) -> String {
    files.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// The check itself finds a cycle: two modules naming each other, one through a `use` group.
#[test]
fn the_check_sees_a_cycle() {
    let dir = std::env::temp_dir().join(format!("warden-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).expect("temp dir");
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").expect("write");
    std::fs::write(dir.join("a.rs"), "use crate::b::X;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n")
        .expect("write");
    std::fs::write(dir.join("b").join("mod.rs"), "// crate::c in a comment\nuse crate::{a, b};\n").expect("write");
    std::fs::write(dir.join("c.rs"), "pub struct C;\n").expect("write");
    let g = graph(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(reachable(&g, "a").contains("a"), "a -> b -> a: {g:?}");
    assert!(!g["a"].contains_key("c"), "test modules do not count: {g:?}");
    assert!(!g["b"].contains_key("c"), "comments do not count: {g:?}");
}
