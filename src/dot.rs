//! `--emit dot`: the compiled graph for Graphviz. Each kernel is a cluster
//! (a fused op shows the ops inside it); an eliminated layout op, now an
//! index view that its reader applies, is drawn dashed; weights and
//! constants are notes; a texture's place and read stand between kernels.

use std::collections::HashMap;
use std::fmt::Write;

use ircc_core::builtin::FuncOp;
use ircc_core::ir::{BlockId, ValueId};
use ircc_core::{Attribute, Module, OpId};
use ircc_dialects::graph::{GraphOp, ops as graph_ops};
use ircc_dialects::{index, is_data};

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

pub fn to_dot(module: &Module) -> String {
    let mut out = String::from(
        "digraph ircc {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n",
    );
    // The node that stands for each value: the op computing it. A fused
    // op's results and region arguments are aliases of values inside and
    // outside it.
    let mut source: HashMap<ValueId, String> = HashMap::new();
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    let mut edges: Vec<(ValueId, String)> = Vec::new();
    let mut kernel = 0;
    for f in module.functions() {
        let Some(body) = module.entry_block(f) else {
            continue;
        };
        for (i, &a) in module.blocks[body].args.iter().enumerate() {
            let id = format!("in{i}");
            let name = module
                .value(a)
                .name
                .clone()
                .unwrap_or_else(|| format!("arg{i}"));
            let _ = writeln!(
                out,
                "  {id} [shape=ellipse, label=\"%{}\\n{}\"];",
                escape(&name),
                module.value_type(a)
            );
            source.insert(a, id);
        }
        for &op in &module.blocks[body].ops {
            let o = module.op(op);
            let fused = graph_ops::Fused::new(module, op);
            if FuncOp::of(module, op) == Some(FuncOp::Return) {
                let _ = writeln!(out, "  out [shape=ellipse, label=\"return\"];");
                edges.extend(o.operands.iter().map(|&v| (v, "out".to_string())));
            } else if let Some(fused) = fused {
                let anchor = fused.anchor();
                let _ = writeln!(
                    out,
                    "  subgraph cluster_{kernel} {{\n    label=\"kernel {kernel}: {anchor}\";\n    style=rounded;"
                );
                let block = module.entry_block(op).expect("a fused op has a body");
                for (&arg, &outer) in module.blocks[block].args.iter().zip(&o.operands) {
                    alias.insert(arg, outer);
                }
                inner_nodes(module, block, &mut out, &mut source, &mut edges);
                out.push_str("  }\n");
                let yielded = module
                    .op(*module.blocks[block].ops.last().expect("a terminator"))
                    .operands
                    .clone();
                for (&r, y) in o.results.iter().zip(yielded) {
                    alias.insert(r, y);
                }
                kernel += 1;
            } else {
                // A texture's place and read are how the kernels around
                // them address it, not kernels of their own.
                let own_cluster = GraphOp::of(module, op).is_some() && !is_data(module, op);
                if own_cluster {
                    let _ = writeln!(
                        out,
                        "  subgraph cluster_{kernel} {{\n    label=\"kernel {kernel}\";\n    style=rounded;"
                    );
                    kernel += 1;
                }
                if own_cluster {
                    out.push_str("  ");
                }
                node(module, op, &mut out, &mut source, &mut edges);
                if own_cluster {
                    out.push_str("  }\n");
                }
            }
        }
    }
    for (v, to) in edges {
        if let Some(from) = resolve(&source, &alias, v) {
            let _ = writeln!(out, "  {from} -> {to};");
        }
    }
    out.push_str("}\n");
    out
}

/// The node of a value, through the aliases of fused ops.
fn resolve<'a>(
    source: &'a HashMap<ValueId, String>,
    alias: &HashMap<ValueId, ValueId>,
    mut v: ValueId,
) -> Option<&'a String> {
    while let Some(&next) = alias.get(&v) {
        v = next;
    }
    source.get(&v)
}

fn inner_nodes(
    module: &Module,
    block: BlockId,
    out: &mut String,
    source: &mut HashMap<ValueId, String>,
    edges: &mut Vec<(ValueId, String)>,
) {
    for &op in &module.blocks[block].ops {
        if GraphOp::of(module, op) != Some(GraphOp::Yield) {
            out.push_str("  ");
            node(module, op, out, source, edges);
        }
    }
}

fn node(
    module: &Module,
    op: OpId,
    out: &mut String,
    source: &mut HashMap<ValueId, String>,
    edges: &mut Vec<(ValueId, String)>,
) {
    let o = module.op(op);
    let id = format!("op{}", op.index());
    let ty = o
        .results
        .first()
        .map(|&r| module.value_type(r).to_string())
        .unwrap_or_default();
    let view = index::ops::View::new(module, op);
    let style = match (view, is_data(module, op)) {
        (Some(_), _) => ", style=dashed",
        (None, true) => ", shape=note",
        (None, false) => "",
    };
    let label = match (view, o.attr("name")) {
        (Some(view), _) => format!("{}\\n{}", o.name, escape(&view.map().to_string())),
        (None, Some(Attribute::String(n))) => format!("{}\\n{}", o.name, escape(n)),
        _ => o.name.clone(),
    };
    let _ = writeln!(out, "  {id} [label=\"{label}\\n{ty}\"{style}];");
    for &r in &o.results {
        source.insert(r, id.clone());
    }
    edges.extend(o.operands.iter().map(|&v| (v, id.clone())));
}
