//! No module circles: within each crate listed below, the modules (one a file) form a
//! layering, where no module reaches, through the paths it names (`use` items, paths in
//! code and in macro bodies), back to a module that reaches it. A circle means neither
//! side can be read, tested or moved without the other.
//!
//! The edges are every path that resolves into the crate: `crate::…`, `super::…`,
//! `self::…`, and paths through a child module the file declares. A `mod` declaration is
//! not an edge (a parent that only declares and re-exports its children sits above them);
//! a parent that both defines what its children use and uses its children is a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The crates held to the rule.
const CRATES: &[&str] = &[
    "operator",
    "csi",
    "simulator",
    "upgrade",
    "controlplane",
    "api",
];

#[test]
fn no_crate_has_a_module_circle() {
    let mut report = Vec::new();
    for name in CRATES {
        let src = workspace().join("crates").join(name).join("src");
        let graph = Graph::read(&src);
        for circle in graph.circles() {
            report.push(format!("crate {name}: {}", graph.describe(&circle)));
        }
    }
    assert!(
        report.is_empty(),
        "module circles (move what both sides share into a module below them both):\n\n{}",
        report.join("\n\n")
    );
}

#[test]
fn the_check_finds_a_circle_and_resolves_every_path_form() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().expect("a file has a folder"))
            .expect("create the folder");
        std::fs::write(path, text).expect("write the file");
    };
    write("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod d;");
    write("a.rs", "use crate::b::Thing; pub fn f() {}");
    write("b.rs", "pub struct Thing; fn g() { crate::a::f() }");
    write("c.rs", "pub mod inner { fn h() { super::super::d::k() } }");
    write(
        "d.rs",
        "pub fn k() {} fn m() { let _ = format!(\"{}\", crate::b::NAME); }",
    );
    let graph = Graph::read(src);
    let circles = graph.circles();
    assert_eq!(circles.len(), 1, "{circles:?}");
    let said = graph.describe(&circles[0]);
    assert!(said.contains("a.rs -> b.rs: Thing"), "{said}");
    assert!(said.contains("b.rs -> a.rs: f"), "{said}");
    assert!(graph.edges["c.rs"].contains_key("d.rs"));
    assert!(graph.edges["d.rs"].contains_key("b.rs"));
}

/// The checkout the test runs in: read when it runs, not when it was built, since one
/// target directory may serve several checkouts.
fn workspace() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    Path::new(&manifest)
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace")
        .to_path_buf()
}

/// Files (relative to `src`) and, per file, the files it names with the names it takes.
struct Graph {
    /// Module path (`["node", "ops"]`) → file (`node/ops/mod.rs`).
    files: BTreeMap<Vec<String>, String>,
    /// Per file, what it defines and what it imports under which name.
    names: BTreeMap<String, Names>,
    /// Per file, the paths it names (while reading).
    found: BTreeMap<String, Vec<(Vec<String>, String)>>,
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

/// A file's own names, and the names it brings in from elsewhere in the crate.
struct Names {
    defined: BTreeSet<String>,
    /// `use a::b::Thing` (or `as Other`): the name → the absolute path.
    bound: BTreeMap<String, Vec<String>>,
    /// `use a::b::*`: the absolute module paths.
    globs: Vec<Vec<String>>,
}

impl Names {
    fn of(items: &[syn::Item], bindings: &[(String, Vec<String>)]) -> Names {
        let defined = items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Const(i) => Some(i.ident.to_string()),
                syn::Item::Enum(i) => Some(i.ident.to_string()),
                syn::Item::Fn(i) => Some(i.sig.ident.to_string()),
                syn::Item::Macro(i) => i.ident.as_ref().map(|i| i.to_string()),
                syn::Item::Static(i) => Some(i.ident.to_string()),
                syn::Item::Struct(i) => Some(i.ident.to_string()),
                syn::Item::Trait(i) => Some(i.ident.to_string()),
                syn::Item::Type(i) => Some(i.ident.to_string()),
                syn::Item::Union(i) => Some(i.ident.to_string()),
                // An inline module (`pub mod reason { … }`) is the file's own.
                syn::Item::Mod(i) if i.content.is_some() => Some(i.ident.to_string()),
                _ => None,
            })
            .collect();
        let mut bound = BTreeMap::new();
        let mut globs = Vec::new();
        for (name, path) in bindings {
            if name == "*" {
                globs.push(path[..path.len() - 1].to_vec());
            } else {
                bound.insert(name.clone(), path.clone());
            }
        }
        Names {
            defined,
            bound,
            globs,
        }
    }
}

impl Graph {
    fn read(src: &Path) -> Graph {
        let mut files = BTreeMap::new();
        for file in rust_files(src) {
            let rel = file
                .strip_prefix(src)
                .expect("a path below src")
                .to_string_lossy()
                .into_owned();
            // A binary's root is a crate of its own (it names the library by its name).
            if rel == "main.rs" || rel.starts_with("bin/") {
                continue;
            }
            files.insert(module_of(&rel), rel);
        }
        let mut graph = Graph {
            files,
            names: BTreeMap::new(),
            found: BTreeMap::new(),
            edges: BTreeMap::new(),
        };
        let modules: Vec<(Vec<String>, String)> = graph
            .files
            .iter()
            .map(|(m, f)| (m.clone(), f.clone()))
            .collect();
        for (module, file) in modules {
            let text = std::fs::read_to_string(src.join(&file)).expect("read the source file");
            let syntax =
                syn::parse_file(&text).unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
            let mut paths = Paths {
                stack: vec![module.clone()],
                children: vec![declared_children(&syntax.items)],
                found: Vec::new(),
                bindings: Vec::new(),
                binding: false,
                imported: Vec::new(),
            };
            paths.visit_file(&syntax);
            let mut names = Names::of(&syntax.items, &paths.bindings);
            names.defined.extend(paths.imported.iter().cloned());
            graph.names.insert(file.clone(), names);
            graph.found.insert(file, paths.found);
        }
        let found = std::mem::take(&mut graph.found);
        for (file, paths) in found {
            let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (path, name) in paths {
                if let Some(target) = graph.defining_file(&path, 0)
                    && target != file
                {
                    out.entry(target).or_default().insert(name);
                }
            }
            graph.edges.insert(file, out);
        }
        graph
    }

    /// The file that defines what `path` names: a name a module only re-exports (`pub use
    /// child::Thing`, `pub use types::*`) is followed to the module that defines it, so a
    /// facade that re-exports its children stands above them, not beside them.
    fn defining_file(&self, path: &[String], depth: usize) -> Option<String> {
        let (module, file) = (0..=path.len())
            .rev()
            .find_map(|n| self.files.get(&path[..n]).map(|f| (n, f.clone())))?;
        let Some(name) = path.get(module) else {
            return Some(file);
        };
        let names = &self.names[&file];
        if depth > 16 || names.defined.contains(name) || name == "*" {
            return Some(file);
        }
        if let Some(target) = names.bound.get(name) {
            let mut next = target.clone();
            next.extend(path[module + 1..].iter().cloned());
            return self.defining_file(&next, depth + 1).or(Some(file));
        }
        for glob in &names.globs {
            let mut next = glob.clone();
            next.extend(path[module..].iter().cloned());
            if let Some(found) = self.defining_file(&next, depth + 1)
                && self
                    .names
                    .get(&found)
                    .is_some_and(|n| n.defined.contains(name))
            {
                return Some(found);
            }
        }
        Some(file)
    }

    /// The strongly connected components of more than one file (Tarjan's algorithm).
    fn circles(&self) -> Vec<Vec<String>> {
        struct Walk<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            found: Vec<Vec<String>>,
        }
        impl<'g> Walk<'g> {
            fn visit(&mut self, file: &'g str) {
                let n = self.index.len();
                self.index.insert(file, n);
                self.low.insert(file, n);
                self.stack.push(file);
                self.on_stack.insert(file);
                for next in self.graph.edges[file].keys() {
                    let next = next.as_str();
                    if !self.index.contains_key(next) {
                        self.visit(next);
                        let low = self.low[file].min(self.low[next]);
                        self.low.insert(file, low);
                    } else if self.on_stack.contains(next) {
                        let low = self.low[file].min(self.index[next]);
                        self.low.insert(file, low);
                    }
                }
                if self.low[file] == self.index[file] {
                    let mut component = Vec::new();
                    while let Some(top) = self.stack.pop() {
                        self.on_stack.remove(top);
                        component.push(top.to_owned());
                        if top == file {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        component.sort();
                        self.found.push(component);
                    }
                }
            }
        }
        let mut walk = Walk {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for file in self.edges.keys() {
            if !walk.index.contains_key(file.as_str()) {
                walk.visit(file);
            }
        }
        walk.found
    }

    /// The circle's files and the edges between them, with the names that tie them.
    fn describe(&self, circle: &[String]) -> String {
        let mut lines = vec![format!("{} files: {}", circle.len(), circle.join(", "))];
        for from in circle {
            for (to, names) in &self.edges[from] {
                if circle.contains(to) {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    lines.push(format!("  {from} -> {to}: {}", names.join(", ")));
                }
            }
        }
        lines.join("\n")
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read the directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `node/ops/mod.rs` → `["node", "ops"]`; `lib.rs` → `[]`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The modules a list of items declares (`mod x;` or `mod x { … }`).
fn declared_children(items: &[syn::Item]) -> BTreeSet<String> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// Collects every path that resolves into the crate, as an absolute module path and the
/// name it ends in.
struct Paths {
    /// The module being read, innermost last (inline modules nest).
    stack: Vec<Vec<String>>,
    /// The child modules each level of `stack` declares.
    children: Vec<BTreeSet<String>>,
    found: Vec<(Vec<String>, String)>,
    /// The file's top-level `use` items: the name each binds → the absolute path.
    bindings: Vec<(String, Vec<String>)>,
    /// Reading a `use` item.
    binding: bool,
    /// The file's top-level `use` items that name other crates: the names they bind.
    imported: Vec<String>,
}

impl Paths {
    fn here(&self) -> &Vec<String> {
        self.stack
            .last()
            .expect("the file's own module is always on the stack")
    }

    /// Resolves `segments` (as written) from the current module; `None` when it leaves
    /// the crate.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut base = self.here().clone();
        let mut rest = segments;
        match first.as_str() {
            "crate" => {
                base.clear();
                rest = &segments[1..];
            }
            "self" => rest = &segments[1..],
            "super" => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            name if self
                .children
                .last()
                .expect("a level per module on the stack")
                .contains(name) => {}
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn note(&mut self, segments: Vec<String>) {
        self.note_as(segments, None);
    }

    /// Notes a path; a top-level `use` also binds the name (`bound`, or the path's last).
    fn note_as(&mut self, segments: Vec<String>, bound: Option<String>) {
        let Some(name) = segments.last().cloned() else {
            return;
        };
        let top_level_use = self.stack.len() == 1 && self.binding;
        match self.resolve(&segments) {
            Some(path) => {
                if top_level_use {
                    self.bindings
                        .push((bound.unwrap_or(name.clone()), path.clone()));
                }
                self.found.push((path, name));
            }
            // A name brought in from another crate enters this one here: a re-export of
            // it is followed no further.
            None if top_level_use && name != "*" => self.imported.push(bound.unwrap_or(name)),
            None => {}
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.note(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                path.push(r.ident.to_string());
                self.note_as(path, Some(r.rename.to_string()));
            }
            syn::UseTree::Glob(_) => {
                let mut path = prefix.clone();
                path.push("*".into());
                self.note(path);
            }
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }

    /// Paths inside a macro's tokens: runs of `ident :: ident …`.
    fn tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        for tree in tokens {
            match tree {
                TokenTree::Ident(ident) => {
                    if colons == 2 || run.is_empty() {
                        run.push(ident.to_string());
                    } else {
                        self.end_run(&mut run);
                        run.push(ident.to_string());
                    }
                    colons = 0;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() => colons += 1,
                TokenTree::Group(group) => {
                    self.end_run(&mut run);
                    colons = 0;
                    self.tokens(group.stream());
                }
                _ => {
                    self.end_run(&mut run);
                    colons = 0;
                }
            }
        }
        self.end_run(&mut run);
    }

    fn end_run(&mut self, run: &mut Vec<String>) {
        if run.len() > 1 {
            self.note(std::mem::take(run));
        }
        run.clear();
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.binding = true;
        self.use_tree(&mut Vec::new(), &item.tree);
        self.binding = false;
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 {
            self.note(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }

    // `pub(in crate::x)` names a scope, not something used.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let Some((_, items)) = &item.content else {
            return;
        };
        let mut inner = self.here().clone();
        inner.push(item.ident.to_string());
        self.stack.push(inner);
        self.children.push(declared_children(items));
        for item in items {
            self.visit_item(item);
        }
        self.children.pop();
        self.stack.pop();
    }
}
