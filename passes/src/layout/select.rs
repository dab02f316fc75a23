//! Choosing layouts: SmartMem's heuristic, and the same choice as a PBQP
//! (node cost: writing a tensor and the reads that want fixed axes, under
//! each layout; edge cost: reads that follow another tensor's layout)
//! solved exactly, so the heuristic's distance from the optimum is known.

use super::cost::{CostModel, Policy};
use super::pbqp::Pbqp;
use super::problem::{Choice, Problem, Want};

/// The problem as a PBQP under `model`.
pub fn to_pbqp(p: &Problem, model: &CostModel) -> Pbqp {
    let mut q = Pbqp {
        costs: p
            .nodes
            .iter()
            .map(|n| n.choices.iter().map(|&c| model.write(n, c)).collect())
            .collect(),
        ..Default::default()
    };
    for r in &p.reads {
        let node = &p.nodes[r.node];
        match &r.want {
            Want::Axes(axes) => {
                for (a, &c) in node.choices.iter().enumerate() {
                    q.costs[r.node][a] += model.best_read(node, c, axes.first().copied()).0;
                }
            }
            Want::Follow { output, axes } if *output != r.node => {
                let out = &p.nodes[*output];
                let m = node
                    .choices
                    .iter()
                    .map(|&c| {
                        out.choices
                            .iter()
                            .map(|&o| {
                                let want = CostModel::fastest(out, o).and_then(|x| axes[x]);
                                model.read(node, c, want)
                            })
                            .collect()
                    })
                    .collect();
                q.add_edge(r.node, *output, m);
            }
            Want::Follow { .. } => {}
        }
    }
    q
}

/// The extra copies a choice implies: `(read, layout of the copy)`.
pub fn copies(p: &Problem, model: &CostModel, choice: &[usize]) -> Vec<(usize, Choice)> {
    p.reads
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let Want::Axes(axes) = &r.want else {
                return None;
            };
            let node = &p.nodes[r.node];
            let c = node.choices[choice[r.node]];
            let (_, copy) = model.best_read(node, c, axes.first().copied());
            copy.map(|c| (i, c))
        })
        .collect()
}

/// The cost of `a` at node `i` with the edges to the nodes already chosen.
fn local_cost(q: &Pbqp, chosen: &[Option<usize>], i: usize, a: usize) -> f64 {
    let mut cost = q.costs[i][a];
    for (&(x, y), m) in q.edges.range((i, 0)..(i + 1, 0)) {
        debug_assert_eq!(x, i);
        if let Some(b) = chosen[y] {
            cost += m[a][b];
        }
    }
    cost
}

/// SmartMem's heuristic. Consumers come before their producers (reverse
/// order), so every read that follows an output knows its layout. Each
/// tensor ranks the axes its reads want by the bytes they read: the first
/// goes in the lanes, the second (policy `contiguous_dims = 2`) along x.
/// Of those layouts (and the same with the second axis in the lanes) and a
/// row-major buffer, the one the cost model finds cheapest with the
/// layouts chosen so far is kept.
pub fn heuristic(p: &Problem, model: &CostModel, policy: &Policy, q: &Pbqp) -> Vec<usize> {
    let n = p.nodes.len();
    let mut reads_of: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, r) in p.reads.iter().enumerate() {
        reads_of[r.node].push(i);
    }
    let mut chosen: Vec<Option<usize>> = vec![None; n];
    for i in (0..n).rev() {
        let node = &p.nodes[i];
        if node.choices.len() == 1 {
            chosen[i] = Some(0);
            continue;
        }
        let bytes = model.bytes(node, Choice::Buffer);
        let mut weight = vec![0.0; node.shape.len()];
        for &r in &reads_of[i] {
            match &p.reads[r].want {
                Want::Axes(axes) => {
                    if let Some(&a) = axes.first() {
                        weight[a] += bytes;
                    }
                    if let (Some(&a), 2) = (axes.get(1), policy.contiguous_dims) {
                        weight[a] += bytes * policy.second_axis_weight;
                    }
                }
                Want::Follow { output, axes } => {
                    let out = &p.nodes[*output];
                    let Some(b) = chosen[*output] else { continue };
                    let fastest = CostModel::fastest(out, out.choices[b]);
                    if let Some(a) = fastest.and_then(|x| axes[x]) {
                        weight[a] += bytes;
                    }
                }
            }
        }
        let mut ranked: Vec<usize> = (0..node.shape.len())
            .filter(|&a| node.shape[a] > 1 && weight[a] > 0.0)
            .collect();
        ranked.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(b.cmp(&a)));
        // With no wants, the last axis that is not 1 (a buffer's order).
        let last = (0..node.shape.len()).rev().find(|&a| node.shape[a] > 1);
        // The layouts that keep the most wanted axes contiguous: the first
        // (or, where it costs less, the second) in the lanes, the next
        // along x; the cheapest of them and a buffer is kept.
        let lanes_options: Vec<usize> = ranked.iter().copied().chain(last).take(2).collect();
        let mut wanted = Vec::new();
        for &l in &lanes_options {
            let x = match policy.contiguous_dims {
                2 => ranked.iter().copied().find(|&a| a != l).unwrap_or(l),
                _ => l,
            };
            wanted.push(Choice::Texture {
                lanes: l,
                contiguous: x,
            });
            wanted.push(Choice::Texture {
                lanes: l,
                contiguous: l,
            });
        }
        let cost = |a: usize| local_cost(q, &chosen, i, a);
        let pick = wanted
            .iter()
            .filter_map(|c| node.choices.iter().position(|x| x == c))
            .chain([0])
            .min_by(|&a, &b| cost(a).total_cmp(&cost(b)).then(a.cmp(&b)))
            .unwrap_or(0);
        chosen[i] = Some(pick);
    }
    chosen.into_iter().map(|c| c.unwrap_or(0)).collect()
}
