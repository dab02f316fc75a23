//! Passes and the pass manager.
//!
//! A pass is registered under a name with a constructor that takes its
//! options (`name{key=value,...}`). Pipelines are text: comma-separated on
//! the command line, one pass a line in `spec/pipelines/*.pipeline`. The
//! manager verifies after every pass by default, so a broken rewrite is
//! reported with the name of the pass that broke it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use indexmap::IndexMap;

use crate::diag::{Diagnostic, Diagnostics};
use crate::ir::{BlockId, Module};
use crate::print::{Form, print_module};
use crate::registry::Registry;
use crate::verify::{VerifyOptions, verify};

/// What a pass may use besides the module: the registry of ops (their
/// specs and hooks: shape inference, interpretation, verification) and a
/// place for remarks, which `--remarks` prints, and warnings, which are
/// always printed.
pub struct PassContext<'a> {
    /// Every registered dialect's ops.
    pub registry: &'a Registry,
    remarks: std::cell::RefCell<Vec<Diagnostic>>,
}

impl<'a> PassContext<'a> {
    /// A context over `registry`, with no remarks yet.
    pub fn new(registry: &'a Registry) -> Self {
        PassContext {
            registry,
            remarks: Default::default(),
        }
    }

    /// Records a remark: what the pass decided at `loc`, and why.
    pub fn remark(&self, loc: crate::Location, message: impl Into<String>) {
        self.remarks
            .borrow_mut()
            .push(Diagnostic::remark(loc, message));
    }

    /// Records a warning: a problem that does not stop the pass (a rule
    /// that can never fire). The pass manager always prints warnings.
    pub fn warn(&self, warning: Diagnostic) {
        self.remarks.borrow_mut().push(Diagnostic {
            severity: crate::diag::Severity::Warning,
            ..warning
        });
    }

    /// The remarks and warnings recorded since the last call.
    pub fn take_remarks(&self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.remarks.borrow_mut())
    }
}

/// What running a pass gives: nothing, or the diagnostics it stopped with.
pub type PassResult = Result<(), Diagnostics>;

/// A transformation of a whole module, run by the [`PassManager`] under
/// the name it is registered with ([`PassRegistry::register_decl`], whose
/// constructor receives the pass's options as written in the pipeline).
///
/// `run` rewrites `module` in place through its API (`Module::create_op`,
/// `replace_all_uses`, `erase_op`, ...). A problem in the input is an
/// `Err` of diagnostics with locations, never a panic; the manager
/// verifies the module after every pass (unless `--no-verify-each`), so a
/// rewrite that breaks an invariant is reported under the pass's name.
/// A pass that works on one function body at a time implements
/// [`FunctionPass`] instead.
pub trait Pass {
    /// The name pipelines use: the declaration's `name`.
    fn name(&self) -> &str;
    /// Transforms `module`; `ctx` has the op registry and takes remarks.
    fn run(&mut self, module: &mut Module, ctx: &PassContext) -> PassResult;
}

/// A pass that rewrites one function body at a time, as MLIR's passes
/// anchored on `func.func`: it runs on the body of every function.
pub trait FunctionPass {
    /// The name pipelines use: the declaration's `name`.
    fn name(&self) -> &str;
    /// Runs on `body`, the entry block of one function.
    fn run_on_body(&mut self, module: &mut Module, body: BlockId, ctx: &PassContext) -> PassResult;
}

impl<P: FunctionPass> Pass for P {
    fn name(&self) -> &str {
        FunctionPass::name(self)
    }

    fn run(&mut self, module: &mut Module, ctx: &PassContext) -> PassResult {
        for f in module.functions() {
            if let Some(body) = module.entry_block(f) {
                self.run_on_body(module, body, ctx)?;
            }
        }
        Ok(())
    }
}

/// A pass's options, as written: `canonicalize{max-elements=1024}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassOptions {
    pub pass: String,
    pub values: IndexMap<String, String>,
}

impl PassOptions {
    /// Fails if an option other than `known` was given.
    pub fn expect_only(&self, known: &[&str]) -> Result<(), String> {
        for k in self.values.keys() {
            if !known.contains(&k.as_str()) {
                let list = if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                };
                return Err(format!(
                    "pass '{}' has no option '{k}' (options: {list})",
                    self.pass
                ));
            }
        }
        Ok(())
    }

    pub fn i64_or(&self, key: &str, default: i64) -> Result<i64, String> {
        match self.values.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                format!(
                    "option '{key}' of pass '{}' must be an integer, not '{v}'",
                    self.pass
                )
            }),
        }
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.values.get(key).map(String::as_str) {
            None => Ok(default),
            Some("true" | "1" | "") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(v) => Err(format!(
                "option '{key}' of pass '{}' must be true or false, not '{v}'",
                self.pass
            )),
        }
    }

    pub fn str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.values.get(key).map_or(default, String::as_str)
    }
}

/// Makes a pass from its options; shared, so a registry can be copied
/// (a driver that loads plugins extends a copy of its own).
pub type PassConstructor = std::rc::Rc<dyn Fn(&PassOptions) -> Result<Box<dyn Pass>, String>>;

/// One option of a pass, as its declaration gives it.
#[derive(Clone, Copy, Debug)]
pub struct OptionDecl {
    pub name: &'static str,
    /// `int`, `bool`, `string`, or the values of an enum (`f32|f16`).
    pub kind: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

/// A pass's declaration: generated from `spec/passes.toml` for ircc's own
/// passes, written by hand for a plugin's.
#[derive(Clone, Copy, Debug)]
pub struct PassDecl {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [OptionDecl],
}

/// A registered pass.
#[derive(Clone)]
pub struct PassInfo {
    pub summary: String,
    pub options: Vec<OptionDecl>,
    pub constructor: PassConstructor,
    /// Where it came from (`built in`, a plugin's path), as
    /// `--list-passes` shows it.
    pub origin: String,
}

/// The passes a pipeline can name, by name.
#[derive(Clone, Default)]
pub struct PassRegistry {
    pub passes: IndexMap<String, PassInfo>,
    origin: String,
}

impl PassRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where the passes registered from now on come from.
    pub fn set_origin(&mut self, origin: impl Into<String>) {
        self.origin = origin.into();
    }

    pub fn register(
        &mut self,
        name: &str,
        summary: &str,
        constructor: impl Fn(&PassOptions) -> Result<Box<dyn Pass>, String> + 'static,
    ) {
        self.passes.insert(
            name.to_string(),
            PassInfo {
                summary: summary.to_string(),
                options: Vec::new(),
                constructor: std::rc::Rc::new(constructor),
                origin: self.origin.clone(),
            },
        );
    }

    /// Registers a declared pass, its options listed by `--list-passes`.
    pub fn register_decl(
        &mut self,
        decl: &PassDecl,
        constructor: impl Fn(&PassOptions) -> Result<Box<dyn Pass>, String> + 'static,
    ) {
        self.passes.insert(
            decl.name.to_string(),
            PassInfo {
                summary: decl.summary.to_string(),
                options: decl.options.to_vec(),
                constructor: std::rc::Rc::new(constructor),
                origin: self.origin.clone(),
            },
        );
    }

    pub fn create(&self, options: &PassOptions) -> Result<Box<dyn Pass>, String> {
        let info = self.passes.get(&options.pass).ok_or_else(|| {
            let known: Vec<&str> = self.passes.keys().map(String::as_str).collect();
            format!(
                "unknown pass '{}' (known passes: {})",
                options.pass,
                known.join(", ")
            )
        })?;
        (info.constructor)(options)
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        for (name, info) in &self.passes {
            let _ = write!(out, "{name:<28} {}", info.summary);
            if !info.origin.is_empty() {
                let _ = write!(out, " [{}]", info.origin);
            }
            let _ = writeln!(out);
            for o in &info.options {
                let _ = writeln!(
                    out,
                    "{:<30}{}={} ({}): {}",
                    "", o.name, o.default, o.kind, o.doc
                );
            }
        }
        out
    }
}

/// Parses `a,b{x=1,y=2},c` into pass names with options.
pub fn parse_pipeline(text: &str) -> Result<Vec<PassOptions>, String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("unbalanced '}}' in pipeline '{text}'"))?
            }
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced '{{' in pipeline '{text}'"));
    }
    items.push(&text[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse_pass_spec)
        .collect()
}

fn parse_pass_spec(text: &str) -> Result<PassOptions, String> {
    let (name, rest) = match text.find('{') {
        Some(i) => (&text[..i], Some(&text[i..])),
        None => (text, None),
    };
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!("'{name}' is not a pass name"));
    }
    let mut values = IndexMap::new();
    if let Some(rest) = rest {
        let body = rest
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .ok_or_else(|| format!("options of pass '{name}' must be written {{key=value,...}}"))?;
        for kv in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if values
                .insert(k.trim().to_string(), v.trim().to_string())
                .is_some()
            {
                return Err(format!(
                    "option '{}' of pass '{name}' is given twice",
                    k.trim()
                ));
            }
        }
    }
    Ok(PassOptions {
        pass: name.to_string(),
        values,
    })
}

/// Parses a `.pipeline` file: one pass a line, `#` starts a comment.
pub fn parse_pipeline_file(text: &str) -> Result<Vec<PassOptions>, String> {
    let mut passes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        passes.push(parse_pass_spec(line).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(passes)
}

/// How the manager runs a pipeline and what it shows along the way.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub verify_each: bool,
    pub verify: VerifyOptions,
    pub print_after_all: bool,
    pub print_after: Vec<String>,
    pub dump_dir: Option<std::path::PathBuf>,
    pub form: Form,
    /// Print the passes' remarks (to the output IR dumps go to).
    pub remarks: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            verify_each: true,
            verify: VerifyOptions::default(),
            print_after_all: false,
            print_after: Vec::new(),
            dump_dir: None,
            form: Form::Pretty,
            remarks: false,
        }
    }
}

/// Wall time of one pass (its verification included).
#[derive(Clone, Debug)]
pub struct PassTiming {
    pub pass: String,
    pub run: Duration,
    pub verify: Duration,
}

pub fn timing_table(timings: &[PassTiming]) -> String {
    let total: Duration = timings.iter().map(|t| t.run + t.verify).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "===-------------------------------------------------------------------------==="
    );
    let _ = writeln!(out, "  Execution time report");
    let _ = writeln!(
        out,
        "===-------------------------------------------------------------------------==="
    );
    let _ = writeln!(out, "  Total: {:.3} ms", total.as_secs_f64() * 1e3);
    let _ = writeln!(
        out,
        "  {:>10}  {:>10}  {:>6}  Step",
        "run (ms)", "verify (ms)", "%"
    );
    for t in timings {
        let share = if total.is_zero() {
            0.0
        } else {
            100.0 * (t.run + t.verify).as_secs_f64() / total.as_secs_f64()
        };
        let _ = writeln!(
            out,
            "  {:>10.3}  {:>10.3}  {:>5.1}%  {}",
            t.run.as_secs_f64() * 1e3,
            t.verify.as_secs_f64() * 1e3,
            share,
            t.pass
        );
    }
    out
}

pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
}

impl PassManager {
    pub fn from_specs(
        registry: &PassRegistry,
        specs: &[PassOptions],
    ) -> Result<PassManager, Diagnostic> {
        let passes = specs
            .iter()
            .map(|s| registry.create(s))
            .collect::<Result<_, _>>()
            .map_err(Diagnostic::plain)?;
        Ok(PassManager { passes })
    }

    pub fn len(&self) -> usize {
        self.passes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.passes.is_empty()
    }

    /// Runs every pass in order; IR printed after passes goes to `out`.
    pub fn run(
        &mut self,
        module: &mut Module,
        registry: &Registry,
        options: &RunOptions,
        out: &mut dyn std::io::Write,
    ) -> Result<Vec<PassTiming>, Diagnostics> {
        let ctx = PassContext::new(registry);
        let mut timings = Vec::new();
        if let Some(dir) = &options.dump_dir {
            std::fs::create_dir_all(dir).map_err(|e| {
                Diagnostic::plain(format!(
                    "cannot create dump directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        for (i, pass) in self.passes.iter_mut().enumerate() {
            let name = pass.name().to_string();
            let start = Instant::now();
            pass.run(module, &ctx).map_err(|d| {
                let mut d = d;
                for e in &mut d.0 {
                    e.message = format!("{} (in pass '{name}')", e.message);
                }
                d
            })?;
            let run = start.elapsed();
            for r in ctx.take_remarks() {
                if options.remarks || r.severity == crate::diag::Severity::Warning {
                    let _ = write!(out, "{}", r.render(None));
                }
            }
            let start = Instant::now();
            if options.verify_each {
                verify(module, registry, options.verify).map_err(|d| {
                    let mut all = vec![Diagnostic::plain(format!(
                        "verification failed after pass '{name}'"
                    ))];
                    all.extend(d.0);
                    Diagnostics(all)
                })?;
            }
            timings.push(PassTiming {
                pass: name.clone(),
                run,
                verify: start.elapsed(),
            });
            if options.print_after_all || options.print_after.contains(&name) {
                let _ = writeln!(out, "// -----// IR Dump After {name} //----- //");
                let _ = write!(out, "{}", print_module(module, options.form));
            }
            if let Some(dir) = &options.dump_dir {
                let path = dir.join(format!("{:02}-{name}.ir", i + 1));
                crate::files::write_file(&path, print_module(module, options.form))
                    .map_err(Diagnostic::plain)?;
            }
        }
        Ok(timings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelines_parse_with_options() {
        let p = parse_pipeline("canonicalize, foo{a=1,b=x} ,bar").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].pass, "foo");
        assert_eq!(p[1].values["a"], "1");
        assert_eq!(p[1].values["b"], "x");
        assert!(parse_pipeline("foo{a=1").is_err());
        assert!(parse_pipeline("foo}").is_err());
        assert!(parse_pipeline("f o o").is_err());
        let f = parse_pipeline_file("# comment\ncanonicalize  # trailing\n\nfoo{x=2}\n").unwrap();
        assert_eq!(
            f.iter().map(|p| p.pass.as_str()).collect::<Vec<_>>(),
            ["canonicalize", "foo"]
        );
    }
}
