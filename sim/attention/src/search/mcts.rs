//! Monte Carlo tree search over tile parameters (§4.2: "builds a search
//! tree where each node represents a potential tiling configuration,
//! balancing exploration of new configurations with exploitation").
//!
//! Level `l` of the tree fixes parameter `l`. Each iteration descends by
//! UCT, expands one untried child, completes the point at random, and
//! backs up a reward of (best cycles so far / cycles)^SHARPNESS: 1 for the
//! best point, 0 for an infeasible one. Tilings of one space often differ
//! by only a few percent; the power spreads those differences over the
//! reward range so that UCT can tell them apart.

use super::Evaluator;
use super::rng::SplitMix64;
use crate::error::SimError;

/// UCT exploration constant for rewards in [0, 1].
const EXPLORATION: f64 = 0.7;
/// Exponent of the reward (a point 10% slower than the best gets 0.83).
const SHARPNESS: i32 = 2;
/// Iterations per unit of budget before giving up on finding unseen points.
const ITERATIONS_PER_BUDGET: usize = 8;

struct Node {
    /// Child per candidate value of the next parameter, once expanded.
    children: Vec<Option<usize>>,
    visits: u32,
    reward: f64,
}

impl Node {
    fn new(fanout: usize) -> Self {
        Self {
            children: vec![None; fanout],
            visits: 0,
            reward: 0.0,
        }
    }
}

pub(crate) fn search(eval: &mut Evaluator, rng: &mut SplitMix64) -> Result<(), SimError> {
    let sizes = eval.sizes();
    let mut tree = vec![Node::new(sizes[0])];
    for _ in 0..ITERATIONS_PER_BUDGET * eval.budget as usize {
        if eval.done() {
            break;
        }
        let mut path = vec![0];
        let mut point = Vec::with_capacity(sizes.len());
        // Selection down fully expanded nodes, then one expansion.
        while point.len() < sizes.len() {
            let node = *path.last().unwrap_or(&0);
            let fanout = sizes.get(point.len() + 1).copied().unwrap_or(0);
            let untried: Vec<usize> = (0..sizes[point.len()])
                .filter(|&i| tree[node].children[i].is_none())
                .collect();
            if !untried.is_empty() {
                let choice = untried[rng.below(untried.len())];
                tree.push(Node::new(fanout));
                let child = tree.len() - 1;
                tree[node].children[choice] = Some(child);
                path.push(child);
                point.push(choice);
                break;
            }
            let (choice, child) = select(&tree, node);
            path.push(child);
            point.push(choice);
        }
        // Roll-out: the remaining parameters at random.
        while point.len() < sizes.len() {
            point.push(rng.below(sizes[point.len()]));
        }
        let reward = match (eval.try_evaluate(&point)?, eval.best_cycles()) {
            (Some(cycles), Some(best)) => (best as f64 / cycles as f64).powi(SHARPNESS),
            _ => 0.0,
        };
        for &n in &path {
            tree[n].visits += 1;
            tree[n].reward += reward;
        }
    }
    Ok(())
}

/// The child of a fully expanded node with the highest UCT score, ties to
/// the lowest candidate.
fn select(tree: &[Node], node: usize) -> (usize, usize) {
    let parent = f64::from(tree[node].visits.max(1)).ln();
    let mut best = (f64::NEG_INFINITY, 0, 0);
    for (choice, child) in tree[node].children.iter().enumerate() {
        let Some(child) = *child else { continue };
        let n = &tree[child];
        let visits = f64::from(n.visits.max(1));
        let score = n.reward / visits + EXPLORATION * (parent / visits).sqrt();
        if score > best.0 {
            best = (score, choice, child);
        }
    }
    (best.1, best.2)
}
