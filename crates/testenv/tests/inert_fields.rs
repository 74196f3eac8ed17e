//! No inert field: every field of every kind's `spec` is read by code that acts on it, or
//! its description (its `kubectl explain` text) starts with `Reserved:` and says why the
//! API accepts it while nothing acts on it yet. A field the API takes and nothing reads
//! tells its user a setting took effect when it did not.
//!
//! The fields are those of the generated CRDs, every kind at every served version,
//! walked through nested objects, arrays and maps. Each schema property is matched to its
//! Rust field in the API crate (by its serde name), and the field counts as read when its
//! Rust name is accessed (`x.field`, or bound in a struct pattern) in the production code
//! of a crate that acts on objects: test modules and assignments to the field do not
//! count, and neither do the simulator, the demo or the test environment. The API crate's
//! own functions count only where such a crate calls them (`stripe.ndcs()` reads the
//! stripe's fields), followed through the functions they call in turn. A read field's own
//! fields are checked in turn; a reserved field covers everything below it, and an inert
//! one is reported alone, not with each of its fields.
//!
//! A v1alpha1 field is the conversion webhook's: the same path at the hub, or a conversion
//! rule's hub path, is judged at the hub; a v1alpha1 field with neither is only kept in an
//! annotation for the round trip and must be marked `Reserved:` in the v1alpha1 types.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use serde_json::Value;
use syn::visit::Visit;

/// The crates whose production code reads objects and acts on them.
const READERS: &[&str] = &[
    "operator",
    "csi",
    "upgrade",
    "conversion",
    "discovery",
    "controlplane",
    "statemachine",
    "certs",
];

/// What a description starts with when the field is accepted and deliberately not acted on.
const RESERVED: &str = "Reserved:";

#[test]
fn every_spec_field_is_read_or_reserved() {
    let root = workspace();
    let model = ApiModel::read(&root.join("crates/api/src"));
    let readers: Vec<PathBuf> = READERS
        .iter()
        .map(|c| root.join("crates").join(c).join("src"))
        .collect();
    let reads = Reads::of_crates(&readers).through(&model);
    let crds: Vec<Value> = simplyblock_api::crds()
        .iter()
        .map(|crd| serde_json::to_value(crd).expect("a CRD serializes"))
        .collect();
    let rules: Vec<(String, String, String)> = simplyblock_conversion::kinds()
        .iter()
        .flat_map(|p| {
            p.kind
                .rules
                .iter()
                .map(|r| (p.kind.kind.to_string(), r.v1alpha1.into(), r.hub.into()))
        })
        .collect();
    let report = check(&crds, &model, &reads, &rules);
    assert!(
        report.fields_checked > 100,
        "the walk found only {} fields: it no longer reaches the CRDs' specs",
        report.fields_checked
    );
    assert!(
        report.problems.is_empty(),
        "{} spec field(s) are accepted by the API and read by no code:\n\n{}\n\n\
         Implement each (read it where it takes effect), or start its doc comment (its \
         `kubectl explain` text) with `{RESERVED}` and say why nothing acts on it yet, add a \
         row to docs/DECISIONS.md, and regenerate the CRDs (`cargo run -p simplyblock-api \
         --bin crds`).",
        report.problems.len(),
        report.problems.join("\n")
    );
}

/// The check itself: an unread field, a reserved one, a field read only in a test module
/// or only written, nested fields and a v1alpha1 field that is only stashed.
#[test]
fn the_check_finds_unread_fields_and_honours_reserved_ones() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a file has a folder"))
            .expect("create the folder");
        std::fs::write(path, text).expect("write the file");
    };
    write(
        "api/lib.rs",
        "pub mod widget; pub mod v1alpha1;
         #[serde(rename_all = \"camelCase\")]
         pub struct WidgetSpec { pub read_here: Option<Inner>, pub only_written: bool,
             pub only_tested: bool, #[serde(rename = \"oddName\")] pub odd_name: bool,
             pub reserved_one: Option<Inner>, pub tolerations: Vec<Toleration> }",
    );
    write(
        "api/widget.rs",
        "#[serde(rename_all = \"camelCase\")]
         pub struct Inner { pub deep_read: bool, pub deep_unread: bool, pub by_helper: bool,
             pub by_unused_helper: bool }
         impl Inner { pub fn helper(&self) -> bool { self.inner_helper() }
             fn inner_helper(&self) -> bool { self.by_helper }
             pub fn unused(&self) -> bool { self.by_unused_helper } }",
    );
    write(
        "api/v1alpha1/mod.rs",
        "#[serde(rename_all = \"camelCase\")]
         pub struct WidgetSpec { pub read_here: Option<Inner>, pub old_name: bool,
             pub retired: bool }",
    );
    write(
        "reader/lib.rs",
        "mod step; #[cfg(test)] mod tests;
         fn f(s: &mut WidgetSpec) { s.only_written = true; let _ = s.read_here.as_ref();
             let WidgetSpec { odd_name, .. } = s; let _ = format!(\"{}\", s.tolerations.len()); }",
    );
    write(
        "reader/step.rs",
        "fn g(i: &Inner) -> bool { i.deep_read && i.helper() }
         #[test] fn t(s: WidgetSpec) { s.only_tested; }",
    );
    write(
        "reader/tests.rs",
        "fn h(i: &Inner) -> bool { i.deep_unread }",
    );
    let model = ApiModel::read(&dir.path().join("api"));
    let reads = Reads::of_crates(&[dir.path().join("reader")]).through(&model);
    let inner = serde_json::json!({"type": "object", "properties": {
        "deepRead": {"type": "boolean"}, "deepUnread": {"type": "boolean"},
        "byHelper": {"type": "boolean"}, "byUnusedHelper": {"type": "boolean"}}});
    let hub = serde_json::json!({"type": "object", "properties": {
        "readHere": inner,
        "onlyWritten": {"type": "boolean"},
        "onlyTested": {"type": "boolean"},
        "oddName": {"type": "boolean"},
        "reservedOne": {"description": "Reserved: not yet", "type": "object",
            "properties": {"deepUnread": {"type": "boolean"}}},
        "tolerations": {"type": "array", "items": {"type": "object",
            "properties": {"key": {"type": "string"}}}}}});
    let spoke = serde_json::json!({"type": "object", "properties": {
        "readHere": inner, "oldName": {"type": "boolean"}, "retired": {"type": "boolean"}}});
    let crd = serde_json::json!({"spec": {"names": {"kind": "Widget"}, "versions": [
        {"name": "v1alpha1", "schema": {"openAPIV3Schema": {"properties": {"spec": spoke}}}},
        {"name": "v1alpha2", "schema": {"openAPIV3Schema": {"properties": {"spec": hub}}}}]}});
    let rules = vec![(
        "Widget".to_string(),
        "spec.oldName".to_string(),
        "spec.oddName".to_string(),
    )];
    let report = check(&[crd], &model, &reads, &rules);
    assert_eq!(
        report.problems,
        vec![
            "Widget v1alpha1 spec.retired (only kept in an annotation by the conversion)",
            "Widget v1alpha2 spec.onlyTested (field `only_tested`)",
            "Widget v1alpha2 spec.onlyWritten (field `only_written`)",
            "Widget v1alpha2 spec.readHere.byUnusedHelper (field `by_unused_helper`)",
            "Widget v1alpha2 spec.readHere.deepUnread (field `deep_unread`)",
        ],
    );
}

/// What the walk found.
struct Report {
    fields_checked: usize,
    /// One line per inert field: kind, version, path.
    problems: Vec<String>,
}

/// Walks every version's `spec` of every CRD; `rules` are the conversion's (kind, v1alpha1
/// path, hub path).
fn check(
    crds: &[Value],
    model: &ApiModel,
    reads: &Reads,
    rules: &[(String, String, String)],
) -> Report {
    let mut report = Report {
        fields_checked: 0,
        problems: Vec::new(),
    };
    for crd in crds {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        let versions = crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let hub_paths: BTreeSet<String> = versions
            .iter()
            .filter(|v| v["name"] != "v1alpha1")
            .flat_map(|v| property_paths(spec_schema(v), "spec"))
            .collect();
        for version in &versions {
            let name = version["name"].as_str().unwrap_or_default();
            let schema = spec_schema(version);
            if name == "v1alpha1" {
                let stashed = property_paths(schema, "spec").into_iter().filter(|path| {
                    !hub_paths.contains(path)
                        && !rules.iter().any(|(k, old, _)| {
                            k == kind && (covers(old, path) || covers(path, old))
                        })
                });
                let described = descriptions(schema, "spec");
                for path in stashed {
                    report.fields_checked += 1;
                    if !reserved_here_or_above(&described, &path) {
                        report.problems.push(format!(
                            "{kind} v1alpha1 {path} (only kept in an annotation by the conversion)"
                        ));
                    }
                }
                continue;
            }
            let group = Group::Hub;
            let Some(root) = model.find(&format!("{kind}Spec"), group) else {
                if schema.get("properties").is_some() {
                    report.problems.push(format!(
                        "{kind} {name}: no struct {kind}Spec in the API crate"
                    ));
                }
                continue;
            };
            walk(
                schema,
                root,
                group,
                "spec",
                &format!("{kind} {name}"),
                model,
                reads,
                &mut report,
            );
        }
    }
    report.problems.sort();
    report.problems.dedup();
    report
}

#[allow(clippy::too_many_arguments)]
fn walk(
    schema: &Value,
    rust: &Struct,
    group: Group,
    path: &str,
    at: &str,
    model: &ApiModel,
    reads: &Reads,
    report: &mut Report,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (json, property) in properties {
        let path = format!("{path}.{json}");
        report.fields_checked += 1;
        if description(property).starts_with(RESERVED) {
            continue;
        }
        let Some(field) = rust.fields.iter().find(|f| &f.json == json) else {
            report.problems.push(format!(
                "{at} {path} (no Rust field serialized as `{json}` in {})",
                rust.name
            ));
            continue;
        };
        if !reads.fields.contains(&field.rust) {
            report
                .problems
                .push(format!("{at} {path} (field `{}`)", field.rust));
            continue;
        }
        // Below a read field: its own fields, when it is one of the API's structs (a
        // Kubernetes type, e.g. tolerations, is taken whole).
        let Some(inner) = field.types.iter().find_map(|t| model.find(t, group)) else {
            continue;
        };
        let child = [
            property.get("items"),
            property.get("additionalProperties"),
            Some(property),
        ]
        .into_iter()
        .flatten()
        .find(|s| s.get("properties").is_some());
        if let Some(child) = child {
            walk(child, inner, group, &path, at, model, reads, report);
        }
    }
}

fn spec_schema(version: &Value) -> &Value {
    &version["schema"]["openAPIV3Schema"]["properties"]["spec"]
}

fn description(schema: &Value) -> &str {
    schema["description"].as_str().unwrap_or_default()
}

/// Whether `outer` is `inner` or one of its ancestors.
fn covers(outer: &str, inner: &str) -> bool {
    inner == outer || inner.starts_with(&format!("{outer}."))
}

/// Every property path below `schema`, through objects, arrays and maps.
fn property_paths(schema: &Value, path: &str) -> Vec<String> {
    descriptions(schema, path).into_keys().collect()
}

/// Every property path below `schema` with its description.
fn descriptions(schema: &Value, path: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let nested = [
        schema.get("items"),
        schema.get("additionalProperties"),
        Some(schema),
    ];
    for node in nested.into_iter().flatten() {
        let Some(properties) = node.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (name, property) in properties {
            let here = format!("{path}.{name}");
            out.insert(here.clone(), description(property).to_string());
            out.extend(descriptions(property, &here));
        }
    }
    out
}

fn reserved_here_or_above(described: &BTreeMap<String, String>, path: &str) -> bool {
    described
        .iter()
        .any(|(p, d)| covers(p, path) && d.starts_with(RESERVED))
}

/// Which types a struct is looked up among: the hub's (every file but `v1alpha1/`).
#[derive(Clone, Copy, PartialEq)]
enum Group {
    Hub,
    V1alpha1,
}

/// The API crate's structs, by name, in each group.
struct ApiModel {
    structs: Vec<(Group, Struct)>,
    /// Each function and method outside tests, by name: what it reads and calls.
    functions: BTreeMap<String, Vec<Reads>>,
}

struct Struct {
    name: String,
    fields: Vec<Field>,
}

struct Field {
    rust: String,
    json: String,
    /// Every type name the field's type mentions (`Option<Vec<Foo>>`: Option, Vec, Foo).
    types: Vec<String>,
}

impl ApiModel {
    fn read(src: &Path) -> ApiModel {
        let mut structs = Vec::new();
        let mut functions: BTreeMap<String, Vec<Reads>> = BTreeMap::new();
        for file in rust_files(src) {
            let rel = file.strip_prefix(src).expect("below src");
            let group = if rel.starts_with("v1alpha1") {
                Group::V1alpha1
            } else {
                Group::Hub
            };
            let syntax = parse(&file);
            let mut collect = StructCollector::default();
            collect.visit_file(&syntax);
            structs.extend(collect.structs.into_iter().map(|s| (group, s)));
            let mut bodies = FunctionCollector::default();
            bodies.visit_file(&syntax);
            for (name, reads) in bodies.functions {
                functions.entry(name).or_default().push(reads);
            }
        }
        ApiModel { structs, functions }
    }

    /// The struct named `name`, of `group` first.
    fn find(&self, name: &str, group: Group) -> Option<&Struct> {
        let of = |g: Group| {
            self.structs
                .iter()
                .find(|(sg, s)| *sg == g && s.name == name)
                .map(|(_, s)| s)
        };
        of(group).or_else(|| {
            of(match group {
                Group::Hub => Group::V1alpha1,
                Group::V1alpha1 => Group::Hub,
            })
        })
    }
}

/// The API crate's functions outside tests, each read on its own.
#[derive(Default)]
struct FunctionCollector {
    functions: Vec<(String, Reads)>,
}

impl FunctionCollector {
    fn body(&mut self, name: &syn::Ident, block: &syn::Block) {
        let mut reads = Reads::default();
        let mut visitor = ReadVisitor {
            reads: &mut reads,
            children: Vec::new(),
        };
        visitor.visit_block(block);
        self.functions.push((name.to_string(), reads));
    }
}

impl<'ast> Visit<'ast> for FunctionCollector {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            self.body(&item.sig.ident, &item.block);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            self.body(&item.sig.ident, &item.block);
        }
    }
}

#[derive(Default)]
struct StructCollector {
    structs: Vec<Struct>,
}

impl<'ast> Visit<'ast> for StructCollector {
    fn visit_item_struct(&mut self, item: &'ast syn::ItemStruct) {
        let camel = serde_value(&item.attrs, "rename_all").as_deref() == Some("camelCase");
        let fields = item
            .fields
            .iter()
            .filter_map(|f| {
                let rust = f.ident.as_ref()?.to_string();
                let rust = rust.trim_start_matches("r#").to_string();
                let json = serde_value(&f.attrs, "rename").unwrap_or_else(|| {
                    if camel {
                        camel_case(&rust)
                    } else {
                        rust.clone()
                    }
                });
                let mut types = TypeNames::default();
                types.visit_type(&f.ty);
                Some(Field {
                    rust,
                    json,
                    types: types.0,
                })
            })
            .collect();
        self.structs.push(Struct {
            name: item.ident.to_string(),
            fields,
        });
    }
}

#[derive(Default)]
struct TypeNames(Vec<String>);

impl<'ast> Visit<'ast> for TypeNames {
    fn visit_path_segment(&mut self, segment: &'ast syn::PathSegment) {
        self.0.push(segment.ident.to_string());
        syn::visit::visit_path_segment(self, segment);
    }
}

/// The string value of `key` in the item's `#[serde(…)]` attributes.
fn serde_value(attrs: &[syn::Attribute], key: &str) -> Option<String> {
    let mut found = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident(key) {
                let value: syn::LitStr = meta.value()?.parse()?;
                found = Some(value.value());
            } else if meta.input.peek(syn::Token![=]) {
                // Skip the value of any other key (`default = "…"`).
                let _: syn::Expr = meta.value()?.parse()?;
            } else if meta.input.peek(syn::token::Paren) {
                let _ = meta.parse_nested_meta(|inner| {
                    if inner.input.peek(syn::Token![=]) {
                        let _: syn::Expr = inner.value()?.parse()?;
                    }
                    Ok(())
                });
            }
            Ok(())
        });
    }
    found
}

fn camel_case(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The field names production code reads, and the functions it calls.
#[derive(Default)]
struct Reads {
    fields: BTreeSet<String>,
    calls: BTreeSet<String>,
}

impl Reads {
    /// These reads with those of every API function they call, directly or through
    /// other API functions.
    fn through(mut self, model: &ApiModel) -> Reads {
        let mut followed = BTreeSet::new();
        let mut pending: Vec<String> = self.calls.iter().cloned().collect();
        while let Some(name) = pending.pop() {
            if !followed.insert(name.clone()) {
                continue;
            }
            for body in model.functions.get(&name).into_iter().flatten() {
                self.fields.extend(body.fields.iter().cloned());
                pending.extend(body.calls.iter().cloned());
            }
        }
        self
    }

    /// Reads every crate from its roots (`lib.rs`, `main.rs`, `bin/*.rs`) through the
    /// modules it declares, leaving out `#[cfg(test)]` modules and items and `#[test]`s.
    fn of_crates(srcs: &[PathBuf]) -> Reads {
        let mut reads = Reads::default();
        for src in srcs {
            let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
                .iter()
                .map(|f| src.join(f))
                .filter(|p| p.exists())
                .collect();
            roots.extend(rust_files(&src.join("bin")));
            let mut seen = BTreeSet::new();
            while let Some(file) = roots.pop() {
                if !seen.insert(file.clone()) {
                    continue;
                }
                let syntax = parse(&file);
                let mut visitor = ReadVisitor {
                    reads: &mut reads,
                    children: Vec::new(),
                };
                visitor.visit_file(&syntax);
                for (name, path_attr) in visitor.children {
                    roots.extend(child_file(&file, &name, path_attr.as_deref()));
                }
            }
        }
        reads
    }
}

/// The file a `mod name;` in `file` loads.
fn child_file(file: &Path, name: &str, path_attr: Option<&str>) -> Option<PathBuf> {
    let dir = file.parent()?;
    if let Some(path) = path_attr {
        return Some(dir.join(path));
    }
    let stem = file.file_stem()?.to_str()?;
    let base = if matches!(stem, "lib" | "main" | "mod") || file.parent()?.ends_with("bin") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

struct ReadVisitor<'r> {
    reads: &'r mut Reads,
    /// `mod x;` declarations outside tests: the name and its `#[path]`.
    children: Vec<(String, Option<String>)>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.parse_args::<syn::Ident>()
                    .is_ok_and(|ident| ident == "test"))
    })
}

impl<'ast> Visit<'ast> for ReadVisitor<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            return;
        }
        if let syn::Item::Mod(m) = item
            && m.content.is_none()
        {
            let path = m
                .attrs
                .iter()
                .find(|a| a.path().is_ident("path"))
                .and_then(|a| match &a.meta {
                    syn::Meta::NameValue(nv) => match &nv.value {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => Some(s.value()),
                        _ => None,
                    },
                    _ => None,
                });
            self.children.push((m.ident.to_string(), path));
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_expr_assign(&mut self, assign: &'ast syn::ExprAssign) {
        // `x.field = …` writes the field; what the left side reaches through (`x`) and
        // the right side are still visited.
        match &*assign.left {
            syn::Expr::Field(field) => self.visit_expr(&field.base),
            other => self.visit_expr(other),
        }
        self.visit_expr(&assign.right);
    }

    fn visit_expr_field(&mut self, field: &'ast syn::ExprField) {
        if let syn::Member::Named(name) = &field.member {
            self.reads.fields.insert(name.to_string());
        }
        syn::visit::visit_expr_field(self, field);
    }

    fn visit_field_pat(&mut self, pat: &'ast syn::FieldPat) {
        if let syn::Member::Named(name) = &pat.member {
            self.reads.fields.insert(name.to_string());
        }
        syn::visit::visit_field_pat(self, pat);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        self.reads.calls.insert(call.method.to_string());
        syn::visit::visit_expr_method_call(self, call);
    }

    fn visit_expr_path(&mut self, path: &'ast syn::ExprPath) {
        // A function called (`ndcs(&stripe)`) or passed (`.map(Stripe::ndcs)`).
        if let Some(last) = path.path.segments.last() {
            self.reads.calls.insert(last.ident.to_string());
        }
        syn::visit::visit_expr_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
    }
}

impl ReadVisitor<'_> {
    /// `. name` in a macro's tokens, not followed by `(` (a method call) or `=` (a write).
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Ident(name)
                    if matches!(tokens.get(i + 1), Some(TokenTree::Group(g))
                        if g.delimiter() == proc_macro2::Delimiter::Parenthesis) =>
                {
                    self.reads.calls.insert(name.to_string());
                }
                TokenTree::Punct(p) if p.as_char() == '.' => {
                    let Some(TokenTree::Ident(name)) = tokens.get(i + 1) else {
                        continue;
                    };
                    let after = tokens.get(i + 2);
                    let call = matches!(after, Some(TokenTree::Group(g))
                        if g.delimiter() == proc_macro2::Delimiter::Parenthesis);
                    let write = matches!(after, Some(TokenTree::Punct(p))
                        if p.as_char() == '=' && !matches!(tokens.get(i + 3),
                            Some(TokenTree::Punct(q)) if q.as_char() == '='));
                    if !call && !write {
                        self.reads.fields.insert(name.to_string());
                    }
                }
                _ => {}
            }
        }
    }
}

fn parse(file: &Path) -> syn::File {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("parse {}: {e}", file.display()))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The checkout the test runs in: read when it runs, not when it was built.
fn workspace() -> PathBuf {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    Path::new(&manifest)
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace")
        .to_path_buf()
}
