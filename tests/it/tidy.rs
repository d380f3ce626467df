//! Keeps ARCHITECTURE.md true: reads files only, starts no server.
//!
//! - every path the code map names exists, and every module of every folder
//!   is on the map (a folder as a whole, or module by module);
//! - the map says what the engine's crate exports;
//! - every relative link of the Markdown files leads somewhere;
//! - every invariant names a test that exists;
//! - the boundaries the map states hold over the code's `crate::` and
//!   crate paths;
//! - the map is at most 300 lines, and no production file is over 600;
//! - the top-level modules of `actors/src` import one another without a
//!   cycle.
//!
//! Each failure says which rule, where, and how to put it right.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;
const MAP_LINES: usize = 300;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// Every file under `rel` (repository-relative, `/`-separated), skipping
/// build output and dependencies.
fn files_under(rel: &str) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if matches!(name.as_str(), "target" | ".git" | "node_modules") {
                    continue;
                }
                walk(&path, base, out);
            } else if let Ok(rel) = path.strip_prefix(base) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(rel), &root(), &mut out);
    out.sort();
    out
}

fn rust_files_under(rel: &str) -> Vec<String> {
    files_under(rel)
        .into_iter()
        .filter(|f| f.ends_with(".rs"))
        .collect()
}

/// Tests are exempt from the size rule and are not modules of the map:
/// `tests.rs`, `*_tests.rs`, and anything under a `tests/` directory.
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "tests.rs" || name.ends_with("_tests.rs") || rel.split('/').any(|part| part == "tests")
}

// ---- the code map ----

/// `a/{b,c}.rs` is `a/b.rs` and `a/c.rs` (braces may repeat, not nest).
fn expand(token: &str) -> Vec<String> {
    let Some(open) = token.find('{') else {
        return vec![token.to_string()];
    };
    let Some(close) = token[open..].find('}').map(|i| open + i) else {
        return vec![token.to_string()];
    };
    let (head, tail) = (&token[..open], &token[close + 1..]);
    token[open + 1..close]
        .split(',')
        .flat_map(|alt| expand(&format!("{head}{}{tail}", alt.trim())))
        .collect()
}

/// Whether a backticked token of the code map is a path: no spaces, not a
/// route (`/metrics`), and a folder or a file of a kind the repository has.
fn is_path(token: &str) -> bool {
    const KINDS: [&str; 11] = [
        ".rs", ".md", ".toml", ".sh", ".py", ".json", ".sql", ".lock", ".txt", ".html", ".js",
    ];
    !token.is_empty()
        && !token.contains(' ')
        && !token.starts_with('/')
        && !token.contains("::")
        && (token.contains('/')
            || KINDS.iter().any(|k| token.ends_with(k))
            || token == "Dockerfile")
}

/// The code map: the section of ARCHITECTURE.md under `## Code map`, as
/// (line number, path) for every path it names.
fn map_paths() -> Vec<(usize, String)> {
    let text = read("ARCHITECTURE.md");
    let mut inside = false;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("## ") {
            inside = line.trim() == "## Code map";
            continue;
        }
        if !inside {
            continue;
        }
        for (i, token) in line.split('`').enumerate() {
            if i % 2 == 1 && is_path(token) {
                out.extend(expand(token).into_iter().map(|p| (index + 1, p)));
            }
        }
    }
    assert!(
        !out.is_empty(),
        "tidy: ARCHITECTURE.md has no `## Code map` section naming paths; \
         the map test reads the paths in that section"
    );
    out
}

#[test]
fn every_path_on_the_code_map_exists() {
    let missing: Vec<String> = map_paths()
        .into_iter()
        .filter(|(_, path)| !root().join(path.trim_end_matches('/')).exists())
        .map(|(line, path)| {
            format!(
                "code map (ARCHITECTURE.md:{line}): ARCHITECTURE.md names `{path}`, which does \
                 not exist: move its line on the map to where the code is now, or drop it"
            )
        })
        .collect();
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

#[test]
fn the_map_is_a_ten_minute_read() {
    let lines = read("ARCHITECTURE.md").lines().count();
    assert!(
        lines <= MAP_LINES,
        "map length: ARCHITECTURE.md has {lines} lines, over {MAP_LINES}: say it shorter, or \
         move the why to docs/decisions/ and the figures to docs/perf.md"
    );
}

/// The `file::test` names of the map's Invariants section, as (line,
/// file, test).
fn invariant_tests() -> Vec<(usize, String, String)> {
    let text = read("ARCHITECTURE.md");
    let mut inside = false;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("## ") {
            inside = line.trim() == "## Invariants";
            continue;
        }
        if !inside {
            continue;
        }
        for (i, token) in line.split('`').enumerate() {
            let Some((file, test)) = token.split_once("::") else {
                continue;
            };
            let is_name = |s: &str| {
                !s.is_empty()
                    && s.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '/'
                    })
            };
            if i % 2 == 1 && is_name(file) && is_name(test) && !test.contains('/') {
                out.push((index + 1, file.to_string(), test.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_invariant_names_a_test_that_is_there() {
    let named = invariant_tests();
    assert!(
        named.len() >= 10,
        "tidy: ARCHITECTURE.md's `## Invariants` names {} tests as `file::test`; each \
         invariant names the test that checks it",
        named.len()
    );
    let sources: Vec<String> = ["src", "actors", "tests"]
        .into_iter()
        .flat_map(rust_files_under)
        .collect();
    let mut missing = Vec::new();
    for (line, file, test) in named {
        let suffix = format!("/{file}.rs");
        let candidates: Vec<&String> = sources
            .iter()
            .filter(|s| s.ends_with(&suffix) || s.ends_with(&format!("/{file}/mod.rs")))
            .collect();
        let found = candidates.iter().any(|path| {
            let text = read(path);
            lines_naming(&text, &test).iter().any(|&n| {
                let l = text.lines().nth(n - 1).unwrap_or("");
                l.contains(&format!("fn {test}("))
                    || l.trim().starts_with(&test)
                    || l.contains(&format!("backend_tests!({test}"))
            })
        });
        if !found {
            missing.push(format!(
                "invariants (ARCHITECTURE.md:{line}): `{file}::{test}` is not a test of any \
                 `{file}.rs` ({} files of that name): name the test that checks the invariant \
                 as it is spelled now, or write it",
                candidates.len()
            ));
        }
    }
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

/// The modules declared in a crate root (`mod x;` or `pub mod x;`).
fn declared_modules(rel: &str) -> Vec<String> {
    code_lines(&read(rel))
        .filter_map(|(_, line)| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("mod "))?;
            rest.strip_suffix(';').map(|name| name.trim().to_string())
        })
        .collect()
}

/// The modules directly inside a folder: its non-test `.rs` files other
/// than `mod.rs` (and, in a crate's own folder, `lib.rs` and `main.rs`),
/// and its subfolders that have a `mod.rs`.
fn folder_modules(rel: &str, crate_folder: bool) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(root().join(rel)) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if path.is_dir() {
            if path.join("mod.rs").exists() {
                out.push(name);
            }
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let root_file = crate_folder && matches!(stem, "lib" | "main");
            if stem != "mod" && !root_file && !is_test_file(&format!("{rel}/{name}")) {
                out.push(stem.to_string());
            }
        }
    }
    out.sort();
    out
}

/// Every folder of the workspace's crates that holds modules, a crate's
/// own `src/` first, with whether it is that crate folder.
fn module_folders() -> Vec<(String, bool)> {
    fn walk(rel: String, crate_folder: bool, out: &mut Vec<(String, bool)>) {
        let Ok(entries) = fs::read_dir(root().join(&rel)) else {
            return;
        };
        let mut folders: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name != "tests")
            .collect();
        folders.sort();
        out.push((rel.clone(), crate_folder));
        for folder in folders {
            walk(format!("{rel}/{folder}"), false, out);
        }
    }
    let mut out = Vec::new();
    for crate_folder in ["src", "actors/src", "bench/src", "process/src"] {
        walk(crate_folder.to_string(), true, &mut out);
    }
    out
}

#[test]
fn every_module_is_on_the_code_map() {
    let named: BTreeSet<String> = map_paths()
        .into_iter()
        .map(|(_, p)| {
            p.trim_end_matches('/')
                .trim_end_matches("/mod.rs")
                .to_string()
        })
        .map(|p| p.strip_suffix(".rs").map(str::to_string).unwrap_or(p))
        .collect();
    // A folder is mapped as a whole (its path on the map, none of its
    // modules) or module by module (each of them on the map).
    let mut missing = Vec::new();
    for (folder, crate_folder) in module_folders() {
        let modules = folder_modules(&folder, crate_folder);
        let by_module = modules
            .iter()
            .any(|m| named.contains(&format!("{folder}/{m}")));
        let as_a_whole = named.contains(&folder) && !by_module;
        for module in modules {
            if !as_a_whole && !named.contains(&format!("{folder}/{module}")) {
                missing.push(format!(
                    "code map: module `{folder}/{module}` is not on ARCHITECTURE.md's code map: \
                     add it to the line of `{folder}/` that names its neighbours, saying what it \
                     is (a folder is mapped as a whole, by its path alone, or module by module)"
                ));
            }
        }
    }
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

/// The map's paragraph on `actors/src/lib.rs` names each module the
/// engine's crate makes public and each private one it re-exports from:
/// a module made public, or a name of a private one let out, moves the map.
#[test]
fn the_engine_s_exports_are_the_map_s() {
    let map = read("ARCHITECTURE.md");
    let paragraph: String = map
        .split("\n\n")
        .find(|p| p.contains("`actors/src/lib.rs` exports"))
        .expect("tidy: ARCHITECTURE.md has a paragraph saying what `actors/src/lib.rs` exports")
        .to_string();
    let lib = read("actors/src/lib.rs");
    // What follows `prefix` on each of lib.rs's lines that starts with it,
    // up to `end`.
    let items = |prefix: &str, end: &str| -> Vec<String> {
        code_lines(&lib)
            .filter_map(|(_, l)| Some(l.strip_prefix(prefix)?.split(end).next()?.to_string()))
            .collect()
    };
    let public = items("pub mod ", ";");
    let private: BTreeSet<String> = items("mod ", ";").into_iter().collect();
    let re_exported: BTreeSet<String> = items("pub use ", "::")
        .into_iter()
        .filter(|head| private.contains(head))
        .collect();
    let missing: Vec<String> = public
        .iter()
        .map(|m| (m, "makes public"))
        .chain(re_exported.iter().map(|m| (m, "re-exports names of")))
        .filter(|(m, _)| !paragraph.contains(&format!("`{m}`")))
        .map(|(m, what)| {
            format!(
                "code map: `actors/src/lib.rs` {what} `{m}`, which the map's paragraph on \
                 it does not name: name it there, or keep it private"
            )
        })
        .collect();
    assert!(missing.is_empty(), "\n{}\n", missing.join("\n"));
}

// ---- paths in the code ----

/// A file's lines that are code: comment lines (doc comments included)
/// left out, as (line number, text).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(i, line)| (i + 1, line))
}

/// The first segment of every `crate::` path in a file, as (line, name):
/// `crate::{store::Store, domain}` gives `store` and `domain`.
fn crate_heads(text: &str) -> Vec<(usize, String)> {
    let code: Vec<(usize, &str)> = code_lines(text).collect();
    // One string with a line number per byte offset, so a `use` group
    // spanning lines is read whole.
    let mut joined = String::new();
    let mut line_of = Vec::new();
    for (number, line) in &code {
        joined.push_str(line);
        joined.push('\n');
        line_of.resize(joined.len(), *number);
    }
    let bytes = joined.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = joined[from..].find("crate::") {
        let start = from + found;
        from = start + "crate::".len();
        let preceded =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if preceded {
            continue; // `taskq_actors_crate::`, not ours
        }
        let line = line_of[start];
        if bytes.get(from) == Some(&b'{') {
            let mut depth = 0;
            let mut item_start = from + 1;
            for (i, &b) in bytes.iter().enumerate().skip(from) {
                match b {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        out.push((line, ident_at(&joined, item_start)));
                        item_start = i + 1;
                        if b == b'}' {
                            break;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
            }
        } else {
            out.push((line, ident_at(&joined, from)));
        }
    }
    out.retain(|(_, name)| !name.is_empty());
    out
}

fn ident_at(text: &str, at: usize) -> String {
    text[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Lines of code that name `word` as a whole identifier (or path start).
fn lines_naming(text: &str, word: &str) -> Vec<usize> {
    code_lines(text)
        .filter(|(_, line)| {
            line.match_indices(word).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + word.len()..].chars().next();
                let boundary =
                    |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                boundary(before) && boundary(after)
            })
        })
        .map(|(number, _)| number)
        .collect()
}

/// The top-level module of `actors/src` a file belongs to.
fn actors_module(file: &str) -> Option<String> {
    let rest = file.strip_prefix("actors/src/")?;
    let first = rest.split('/').next()?;
    Some(first.strip_suffix(".rs").unwrap_or(first).to_string())
}

/// One boundary of the map's "Boundaries" section, over `actors/src`:
/// files of `module` may use only `allowed` of the crate (when given) and
/// never `forbidden`.
struct Layer {
    rule: &'static str,
    module: &'static str,
    allowed: Option<&'static [&'static str]>,
    forbidden: &'static [&'static str],
}

const LAYERS: &[Layer] = &[
    Layer {
        rule: "domain is pure: it imports nothing else of the crate",
        module: "domain",
        allowed: Some(&[]),
        forbidden: &[],
    },
    Layer {
        rule: "api (the vocabulary) stands on domain and clock only",
        module: "api",
        allowed: Some(&["domain", "clock"]),
        forbidden: &[],
    },
    Layer {
        rule: "crypto stands on domain only",
        module: "crypto",
        allowed: Some(&["domain"]),
        forbidden: &[],
    },
    Layer {
        rule: "store stands on domain, api and crypto, never on anything above it",
        module: "store",
        allowed: Some(&["domain", "api", "crypto"]),
        forbidden: &[],
    },
    Layer {
        rule: "the org actor never knows the engine, the supervisor, reports or meaning",
        module: "org",
        allowed: None,
        forbidden: &["engine", "supervisor", "reports", "meaning"],
    },
    Layer {
        rule: "reports read the store, never the actors or the writer",
        module: "reports",
        allowed: None,
        forbidden: &["org", "supervisor", "writer", "engine"],
    },
    Layer {
        rule: "meaning reads the store, never the actors or the writer",
        module: "meaning",
        allowed: None,
        forbidden: &["org", "supervisor", "writer", "engine"],
    },
];

#[test]
fn the_layers_of_the_engine_hold() {
    let mut broken = Vec::new();
    for file in rust_files_under("actors/src") {
        let Some(module) = actors_module(&file) else {
            continue;
        };
        let heads = crate_heads(&read(&file));
        for (line, head) in &heads {
            if head == &module || head == "self" || head == "super" {
                continue;
            }
            if head == "engine" && module != "lib" {
                broken.push(format!(
                    "boundary \"engine is the top: nothing in the crate imports it\": \
                     {file}:{line} uses `crate::engine`: move what it needs below the \
                     engine (into the module that owns it) and let the engine call it"
                ));
                continue;
            }
            for layer in LAYERS.iter().filter(|l| l.module == module) {
                let refused = layer.forbidden.contains(&head.as_str())
                    || layer.allowed.is_some_and(|a| !a.contains(&head.as_str()));
                if refused {
                    broken.push(format!(
                        "boundary \"{}\": {file}:{line} uses `crate::{head}`: move that code \
                         up to a module allowed to use `{head}`, or pass what it needs in \
                         (a value or a trait) from above",
                        layer.rule
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "\n{}\n", broken.join("\n"));
}

#[test]
fn the_crates_and_front_ends_keep_their_side() {
    let mut broken = Vec::new();
    for file in files_under("actors")
        .into_iter()
        .filter(|f| f.ends_with(".rs") || f.ends_with("Cargo.toml"))
    {
        for line in lines_naming(&read(&file), "axum") {
            broken.push(format!(
                "boundary \"the engine knows nothing of HTTP\": {file}:{line} names `axum`: \
                 keep HTTP in `src/http` and give the engine `api` types"
            ));
        }
    }
    for file in rust_files_under("src/http")
        .into_iter()
        .chain(rust_files_under("src/mcp"))
    {
        let text = read(&file);
        for word in ["sqlx", "taskq_actors::store"] {
            for line in lines_naming(&text, word) {
                broken.push(format!(
                    "boundary \"the front ends never touch the store\": {file}:{line} names \
                     `{word}`: ask the `Engine` for it (a method in `actors/src/engine`)"
                ));
            }
        }
        for (line, head) in crate_heads(&text) {
            if head == "cli" {
                broken.push(format!(
                    "boundary \"the front ends never import the command line\": {file}:{line} \
                     uses `crate::cli`: move what both need beside them (as `keyfiles.rs` is)"
                ));
            }
        }
    }
    let bench = read("bench/Cargo.toml");
    for (number, line) in bench.lines().enumerate() {
        let name = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
        if name == "taskq" || name == "taskq-actors" {
            broken.push(format!(
                "boundary \"the load tool links neither server crate\": bench/Cargo.toml:{} \
                 depends on `{name}`: speak HTTP to the server it starts instead",
                number + 1
            ));
        }
    }
    assert!(broken.is_empty(), "\n{}\n", broken.join("\n"));
}

#[test]
fn no_production_file_is_over_600_lines() {
    let mut long = Vec::new();
    for dir in ["src", "actors", "bench", "process"] {
        for file in rust_files_under(dir) {
            if is_test_file(&file) {
                continue;
            }
            let lines = read(&file).lines().count();
            if lines > MAX_LINES {
                long.push(format!(
                    "file size: {file} has {lines} lines, over {MAX_LINES}: split it into a \
                     folder of modules, one concern a file (tests may go to a `tests.rs`)"
                ));
            }
        }
    }
    assert!(long.is_empty(), "\n{}\n", long.join("\n"));
}

#[test]
fn the_engine_s_modules_import_one_another_without_a_cycle() {
    // module -> module it uses -> where it first does
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let modules: BTreeSet<String> = declared_modules("actors/src/lib.rs").into_iter().collect();
    for file in rust_files_under("actors/src") {
        let Some(module) = actors_module(&file) else {
            continue;
        };
        if !modules.contains(&module) {
            continue;
        }
        for (line, head) in crate_heads(&read(&file)) {
            if head != module && modules.contains(&head) {
                graph
                    .entry(module.clone())
                    .or_default()
                    .entry(head)
                    .or_insert_with(|| format!("{file}:{line}"));
            }
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("  {} -> {} ({})", w[0], w[1], graph[&w[0]][&w[1]]))
            .collect();
        panic!(
            "\nimport cycle between the top-level modules of actors/src: {}\n{}\n\
             break it: move what the lower module needs from the upper one down into it \
             (or into `domain`), so imports point one way\n",
            cycle.join(" -> "),
            steps.join("\n")
        );
    }
}

/// A cycle of the graph, first node repeated at its end, if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_map_test_reads_what_it_means_to() {
    assert_eq!(expand("a/{b,c}.rs"), ["a/b.rs", "a/c.rs"]);
    assert_eq!(expand("a/{b,c}/{d,e}.rs").len(), 4);
    assert!(is_path("src/http/") && is_path("Dockerfile") && is_path("docs/perf.md"));
    assert!(!is_path("/metrics") && !is_path("GET /metrics") && !is_path("api::Caller"));
    let heads = crate_heads(
        "use crate::{store::{Store, Row}, domain};\nfn f() { crate::org::x() }\n// crate::engine\n",
    );
    let names: Vec<&str> = heads.iter().map(|(_, h)| h.as_str()).collect();
    assert_eq!(names, ["store", "domain", "org"]);
    assert_eq!(
        lines_naming("use axum::Router;\nlet axum_like = 1;\n", "axum"),
        [1]
    );
    let graph: BTreeMap<String, BTreeMap<String, String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_string(), [(to.to_string(), String::new())].into()))
        .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    assert!(is_test_file("actors/src/store/tests.rs") && is_test_file("tests/it/tidy.rs"));
    assert!(!is_test_file("actors/src/store/mod.rs"));
}

// ---- the Markdown links ----
//
// The README, the map and everything under `docs/` link to one another by
// relative paths and `#anchor`s; a moved file or a renamed heading must
// not leave a link that leads nowhere on GitHub.

/// The Markdown files whose relative links are checked.
fn linking_markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    files.extend(
        files_under("docs")
            .into_iter()
            .filter(|f| f.ends_with(".md")),
    );
    files
}

/// The anchor GitHub gives a heading: its text in lower case, without
/// the characters that are not letters, digits, `-`, `_` or spaces, the
/// spaces as `-`.
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// What a Markdown file links to and what it can be linked to at.
struct MarkdownLinks {
    /// Every link's and image's destination as written, with its line.
    destinations: Vec<(usize, String)>,
    /// Its headings' anchors; a repeated heading's are `-1`, `-2`, ...
    anchors: BTreeSet<String>,
}

fn markdown_links(text: &str) -> MarkdownLinks {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let mut destinations = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut repeats: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                let line = text[..range.start].matches('\n').count() + 1;
                destinations.push((line, dest_url.into_string()));
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(part) | Event::Code(part) => {
                if let Some(heading) = heading.as_mut() {
                    heading.push_str(&part);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let anchor = github_anchor(&heading.take().unwrap_or_default());
                let seen = repeats.entry(anchor.clone()).or_insert(0);
                anchors.insert(match *seen {
                    0 => anchor,
                    n => format!("{anchor}-{n}"),
                });
                *seen += 1;
            }
            _ => {}
        }
    }
    MarkdownLinks {
        destinations,
        anchors,
    }
}

/// The repository-relative path a relative link of `from` names, or
/// `None` when it climbs out of the repository. A leading `/` is the
/// repository's root, as on GitHub.
fn link_target(from: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        from.split('/').collect()
    };
    if !path.starts_with('/') {
        parts.pop();
    }
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// Why a link of `from` leads nowhere, if it does; links with a scheme
/// (`https:`, `mailto:`) are not this test's.
fn broken_link(from: &str, destination: &str) -> Option<String> {
    let scheme = destination
        .split_once(':')
        .is_some_and(|(head, _)| !head.is_empty() && head.chars().all(|c| c.is_ascii_alphabetic()));
    if scheme || destination.is_empty() {
        return None;
    }
    let (path, anchor) = destination
        .split_once('#')
        .map_or((destination, None), |(path, anchor)| (path, Some(anchor)));
    let target = if path.is_empty() {
        from.to_string()
    } else {
        match link_target(from, path) {
            Some(target) => target,
            None => return Some("climbs out of the repository".to_string()),
        }
    };
    if !root().join(&target).exists() {
        return Some(format!("names `{target}`, which does not exist"));
    }
    match anchor {
        Some(anchor) if target.ends_with(".md") => {
            let anchors = markdown_links(&read(&target)).anchors;
            (!anchors.contains(anchor)).then(|| format!("names no heading of `{target}`"))
        }
        _ => None,
    }
}

#[test]
fn every_relative_markdown_link_leads_somewhere() {
    let broken: Vec<String> = linking_markdown_files()
        .into_iter()
        .flat_map(|file| {
            markdown_links(&read(&file))
                .destinations
                .into_iter()
                .filter_map(move |(line, destination)| {
                    broken_link(&file, &destination).map(|why| {
                        format!(
                            "link ({file}:{line}): `{destination}` {why}: point it at the file \
                             (and heading, by GitHub's anchor) where the text is now"
                        )
                    })
                })
        })
        .collect();
    assert!(broken.is_empty(), "\n{}\n", broken.join("\n"));
}

#[test]
fn the_link_test_reads_what_it_means_to() {
    assert_eq!(
        github_anchor("Forwarding: what a forwarded request costs; a node's restart"),
        "forwarding-what-a-forwarded-request-costs-a-nodes-restart"
    );
    assert_eq!(github_anchor("`GET /events` and µs"), "get-events-and-µs");
    let text = "# A *b*\n\n## A b\n\n[x](../y.md#a-b) ![i](p.png)\n\n```md\n[not](a link)\n```\n";
    let links = markdown_links(text);
    assert_eq!(links.anchors, ["a-b", "a-b-1"].map(String::from).into());
    assert_eq!(
        links.destinations,
        [(5, "../y.md#a-b".to_string()), (5, "p.png".to_string())]
    );
    assert_eq!(
        link_target("docs/guide/x.md", "../perf.md").as_deref(),
        Some("docs/perf.md")
    );
    assert_eq!(link_target("README.md", "/docs/").as_deref(), Some("docs"));
    assert_eq!(link_target("README.md", "../x.md"), None);
    assert_eq!(broken_link("README.md", "https://example.com/x.md"), None);
    assert_eq!(broken_link("README.md", "#set-up"), None);
    assert!(broken_link("README.md", "#no-such-heading").is_some());
    assert!(broken_link("README.md", "docs/guide/no-such-file.md").is_some());
}
