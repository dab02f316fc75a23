//! `--emit html`: the compiled graph as one self-contained page (inline SVG
//! and CSS, nothing fetched), for machines without Graphviz. One box per
//! kernel lists the ops fused into it, the layout ops eliminated into index
//! views inside it, its result's type and bytes, and the weights it reads;
//! a layout op eliminated between kernels is a dashed box. Boxes are laid
//! out in layers by longest path, each layer ordered by where its inputs
//! come from; an edge spanning several layers runs down a lane right of
//! the boxes between. The markup is also well-formed XML.

use std::collections::HashMap;
use std::fmt::Write;

use ircc_core::builtin::FuncOp;
use ircc_core::ir::ValueId;
use ircc_core::{Module, OpId};
use ircc_dialects::graph::{GraphOp, ops as graph_ops};
use ircc_dialects::texture::TextureOp;
use ircc_dialects::{index, is_data};

const BOX_WIDTH: f64 = 300.0;
const LINE: f64 = 15.0;
const H_GAP: f64 = 40.0;
const V_GAP: f64 = 44.0;
const MARGIN: f64 = 20.0;
/// Lanes for edges that skip layers, and the room between two.
const LANES: usize = 6;
const LANE_GAP: f64 = 10.0;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Input,
    Kernel,
    View,
    /// The texture level's place and read: a tensor moving between a
    /// buffer and a texture, absorbed by the kernels on either side.
    Texture,
    Output,
}

impl Kind {
    fn class(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Kernel => "kernel",
            Kind::View => "view",
            Kind::Texture => "texture",
            Kind::Output => "output",
        }
    }
}

struct Node {
    kind: Kind,
    title: String,
    lines: Vec<String>,
    /// The nodes it reads, with the type read.
    preds: Vec<(usize, String)>,
}

/// Text safe in XML content and double-quoted attributes: the markup
/// characters as entities, and control characters, which XML forbids, as
/// U+FFFD.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if c.is_control() && !matches!(c, '\t' | '\n') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn bytes_text(bytes: i64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KB", b as f64 / (1 << 10) as f64),
        b => format!("{b} B"),
    }
}

fn value_text(m: &Module, v: ValueId) -> String {
    let ty = m.value_type(v);
    match ty.as_tensor() {
        Some(t) => format!("{ty}, {}", bytes_text(t.byte_size())),
        None => ty.to_string(),
    }
}

/// The nodes of `m`'s first function: inputs, kernels, views between
/// kernels, and the return.
fn nodes(m: &Module) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let Some(func) = m.functions().into_iter().next() else {
        return nodes;
    };
    let Some(body) = m.entry_block(func) else {
        return nodes;
    };
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    let mut data_bytes: HashMap<ValueId, i64> = HashMap::new();
    for (&a, name) in m.blocks[body]
        .args
        .iter()
        .zip(ircc_core::builtin::input_names(m, func))
    {
        producer.insert(a, nodes.len());
        nodes.push(Node {
            kind: Kind::Input,
            title: format!("input {name}"),
            lines: vec![value_text(m, a)],
            preds: Vec::new(),
        });
    }
    let mut kernels = 0;
    for &op in &m.blocks[body].ops {
        let o = m.op(op);
        let view = index::IndexOp::of(m, op).is_some();
        if is_data(m, op) && !view {
            for &r in &o.results {
                let bytes = m.value_type(r).as_tensor().map_or(0, |t| t.byte_size());
                data_bytes.insert(r, bytes);
            }
            continue;
        }
        let mut weights = 0;
        let mut preds = Vec::new();
        for &v in &o.operands {
            if let Some(&p) = producer.get(&v) {
                preds.push((p, value_text(m, v)));
            } else if let Some(b) = data_bytes.get(&v) {
                weights += b;
            }
        }
        let (kind, title, mut lines) = if FuncOp::of(m, op) == Some(FuncOp::Return) {
            let names = ircc_core::builtin::output_names(m, func);
            (
                Kind::Output,
                format!("return {}", names.join(", ")),
                Vec::new(),
            )
        } else if view {
            (Kind::View, o.name.clone(), view_lines(m, op))
        } else if TextureOp::of(m, op).is_some() {
            (Kind::Texture, o.name.clone(), Vec::new())
        } else {
            kernels += 1;
            let title = match graph_ops::Fused::new(m, op) {
                Some(fused) => format!("kernel {}: {}", kernels - 1, fused.anchor()),
                None => format!("kernel {}: {}", kernels - 1, o.name),
            };
            (Kind::Kernel, title, kernel_lines(m, op))
        };
        if kind != Kind::Output {
            lines.extend(
                o.results
                    .iter()
                    .map(|&r| format!("-> {}", value_text(m, r))),
            );
        }
        if weights > 0 {
            lines.push(format!("reads weights: {}", bytes_text(weights)));
        }
        for &r in &o.results {
            producer.insert(r, nodes.len());
        }
        nodes.push(Node {
            kind,
            title,
            lines,
            preds,
        });
    }
    nodes
}

/// A view's index map.
fn view_lines(m: &Module, op: OpId) -> Vec<String> {
    index::ops::View::new(m, op)
        .map(|v| vec![v.map().to_string()])
        .unwrap_or_default()
}

/// The ops a kernel computes: a fused op's body (views marked as
/// eliminated layout ops), or the op itself.
fn kernel_lines(m: &Module, op: OpId) -> Vec<String> {
    let Some(block) = graph_ops::Fused::new(m, op).and_then(|_| m.entry_block(op)) else {
        return vec![m.op(op).name.clone()];
    };
    m.blocks[block]
        .ops
        .iter()
        .filter(|&&inner| GraphOp::of(m, inner) != Some(GraphOp::Yield))
        .map(|&inner| {
            let o = m.op(inner);
            if index::IndexOp::of(m, inner).is_some() {
                let map = view_lines(m, inner).join("");
                format!("~ {} {map} (eliminated)", o.name)
            } else {
                o.name.clone()
            }
        })
        .collect()
}

/// The page for `module`, titled `title`.
pub fn to_html(module: &Module, title: &str) -> String {
    let nodes = nodes(module);
    // Layers by longest path; SSA order is a topological order.
    let mut layer = vec![0usize; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        layer[i] = n
            .preds
            .iter()
            .map(|&(p, _)| layer[p] + 1)
            .max()
            .unwrap_or(0);
    }
    let layers = layer.iter().max().map_or(0, |&l| l + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for (i, &l) in layer.iter().enumerate() {
        rows[l].push(i);
    }
    let height = |n: &Node| LINE * (n.lines.len() as f64 + 1.0) + 10.0;
    let mut x = vec![0.0f64; nodes.len()];
    let mut y = vec![0.0f64; nodes.len()];
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1) as f64;
    let boxes_width = widest * (BOX_WIDTH + H_GAP) - H_GAP + 2.0 * MARGIN;
    // Edges that skip layers run down lanes right of the boxes they pass.
    let page_width = boxes_width + LANES as f64 * LANE_GAP + MARGIN;
    let mut top = MARGIN;
    for row in &mut rows {
        // Each node goes under the mean position of what it reads.
        let centre = |i: &usize| {
            let preds = &nodes[*i].preds;
            if preds.is_empty() {
                *i as f64
            } else {
                preds.iter().map(|&(p, _)| x[p]).sum::<f64>() / preds.len() as f64
            }
        };
        row.sort_by(|a, b| centre(a).total_cmp(&centre(b)).then(a.cmp(b)));
        let width = row.len() as f64 * (BOX_WIDTH + H_GAP) - H_GAP;
        let left = (boxes_width - width) / 2.0;
        for (k, &i) in row.iter().enumerate() {
            x[i] = left + k as f64 * (BOX_WIDTH + H_GAP) + BOX_WIDTH / 2.0;
            y[i] = top;
        }
        top += row.iter().map(|&i| height(&nodes[i])).fold(0.0, f64::max) + V_GAP;
    }
    let page_height = top - V_GAP + MARGIN;

    let kernels = nodes.iter().filter(|n| n.kind == Kind::Kernel).count();
    let views = nodes.iter().filter(|n| n.kind == Kind::View).count()
        + nodes
            .iter()
            .flat_map(|n| &n.lines)
            .filter(|l| l.starts_with("~ "))
            .count();
    let textures = nodes.iter().filter(|n| n.kind == Kind::Texture).count();
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>{title}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n<p>{kernels} kernels; {views} layout ops eliminated into index views (dashed, or marked ~ inside a kernel); {textures} moves between buffers and textures (dashed green). Hover over an edge for the tensor it carries, or over a clipped line for all of it.</p>\n",
        title = escape(title)
    );
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{page_width:.0}\" height=\"{page_height:.0}\" viewBox=\"0 0 {page_width:.0} {page_height:.0}\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>"
    );
    // The right edge of the rightmost box of each layer.
    let right: Vec<f64> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|&i| x[i] + BOX_WIDTH / 2.0)
                .fold(0.0, f64::max)
        })
        .collect();
    let mut long_edges = 0;
    for (i, n) in nodes.iter().enumerate() {
        for (p, ty) in &n.preds {
            let (x1, y1) = (x[*p], y[*p] + height(&nodes[*p]));
            let (x2, y2) = (x[i], y[i]);
            let path = if layer[i] - layer[*p] > 1 {
                // From the source's right side, out to a lane past every
                // box between, down, and into the target's right side.
                let passed = right[layer[*p]..=layer[i]]
                    .iter()
                    .copied()
                    .fold(0.0, f64::max);
                let lane = passed + LANE_GAP * (1 + long_edges % LANES) as f64;
                long_edges += 1;
                let (sx, sy) = (x1 + BOX_WIDTH / 2.0, y[*p] + height(&nodes[*p]) / 2.0);
                let (tx, ty) = (x2 + BOX_WIDTH / 2.0, y2 + height(n) / 2.0);
                format!("M{sx:.1},{sy:.1} H{lane:.1} V{ty:.1} H{tx:.1}")
            } else {
                let mid = (y1 + y2) / 2.0;
                format!("M{x1:.1},{y1:.1} C{x1:.1},{mid:.1} {x2:.1},{mid:.1} {x2:.1},{y2:.1}")
            };
            let _ = writeln!(
                out,
                "<path class=\"edge\" d=\"{path}\" marker-end=\"url(#arrow)\"><title>{}</title></path>",
                escape(ty)
            );
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let left = x[i] - BOX_WIDTH / 2.0;
        let _ = writeln!(
            out,
            "<g class=\"{}\"><rect x=\"{left:.1}\" y=\"{:.1}\" width=\"{BOX_WIDTH}\" height=\"{:.1}\" rx=\"6\"/>",
            n.kind.class(),
            y[i],
            height(n)
        );
        let text = |k: usize, class: &str, s: &str| {
            let clipped: String = s.chars().take(42).collect();
            let more = if s.chars().count() > 42 { "..." } else { "" };
            format!(
                "<text class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\">{}{more}<title>{}</title></text>\n",
                left + 8.0,
                y[i] + 16.0 + k as f64 * LINE,
                escape(&clipped),
                escape(s)
            )
        };
        out.push_str(&text(0, "title", &n.title));
        for (k, line) in n.lines.iter().enumerate() {
            let class = if line.starts_with("~ ") {
                "eliminated"
            } else {
                "line"
            };
            out.push_str(&text(k + 1, class, line));
        }
        out.push_str("</g>\n");
    }
    out.push_str("</svg>\n</body>\n</html>\n");
    out
}

const STYLE: &str = "body { font-family: sans-serif; margin: 1em; }
svg text { font-family: monospace; font-size: 11px; }
svg text.title { font-weight: bold; }
svg text.eliminated { fill: #7a4e00; }
svg rect { fill: #fff; stroke: #333; }
svg g.kernel rect { fill: #eef4ff; stroke: #2957a4; }
svg g.view rect { fill: #fff8e8; stroke: #b07a00; stroke-dasharray: 5 3; }
svg g.texture rect { fill: #eefaf0; stroke: #2a8a3e; stroke-dasharray: 5 3; }
svg g.input rect, svg g.output rect { fill: #f2f2f2; }
svg path.edge { fill: none; stroke: #666; stroke-width: 1.2; }
svg path.edge:hover { stroke: #d33; stroke-width: 2.5; }
svg marker path { fill: #666; }
";
