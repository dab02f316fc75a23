//! An exact solver of the Partitioned Boolean Quadratic Problem: pick one
//! choice per node minimizing the sum of node costs and edge costs. Nodes
//! of degree 0, 1 and 2 are reduced away exactly (R0, R1, R2, as in
//! Scholz and Eckstein's PBQP register allocator); when every node left
//! has three neighbours or more, it branches on the one with the most and
//! bounds each branch by the cheapest choice of everything left. Its work
//! (the nodes of each branch's copy of the problem) is a budget, so a run
//! is bounded by work, never by time, and says when the budget ran out
//! instead of guessing.

use std::collections::BTreeMap;

type Matrix = Vec<Vec<f64>>;

/// A problem: cost vectors per node, and cost matrices per edge
/// (`[choice of a][choice of b]` for edge `(a, b)`, `a < b`).
#[derive(Clone, Debug, Default)]
pub struct Pbqp {
    pub costs: Vec<Vec<f64>>,
    pub edges: BTreeMap<(usize, usize), Matrix>,
}

impl Pbqp {
    /// Adds `m` to the edge between `a` and `b` (`m[choice of a][choice of b]`).
    pub fn add_edge(&mut self, a: usize, b: usize, m: Matrix) {
        let (key, m) = if a < b {
            ((a, b), m)
        } else {
            ((b, a), transpose(&m))
        };
        match self.edges.get_mut(&key) {
            Some(old) => add_into(old, &m),
            None => {
                self.edges.insert(key, m);
            }
        }
    }

    /// The cost of one choice per node.
    pub fn cost(&self, choice: &[usize]) -> f64 {
        let nodes: f64 = self.costs.iter().zip(choice).map(|(c, &a)| c[a]).sum();
        let edges: f64 = self
            .edges
            .iter()
            .map(|(&(a, b), m)| m[choice[a]][choice[b]])
            .sum();
        nodes + edges
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    pub choice: Vec<usize>,
    pub cost: f64,
    /// Work done: nodes copied into branches.
    pub work: usize,
}

fn transpose(m: &Matrix) -> Matrix {
    let cols = m.first().map_or(0, Vec::len);
    (0..cols)
        .map(|j| m.iter().map(|row| row[j]).collect())
        .collect()
}

fn add_into(a: &mut Matrix, b: &Matrix) {
    for (ra, rb) in a.iter_mut().zip(b) {
        for (x, y) in ra.iter_mut().zip(rb) {
            *x += y;
        }
    }
}

fn argmin(v: impl Iterator<Item = f64>) -> (usize, f64) {
    v.enumerate().fold(
        (0, f64::INFINITY),
        |best, (i, x)| if x < best.1 { (i, x) } else { best },
    )
}

/// The state of a solve: live nodes' costs and their edges, each kept from
/// both ends (`adj[i][j][choice of i][choice of j]`).
#[derive(Clone)]
struct State {
    costs: Vec<Option<Vec<f64>>>,
    adj: Vec<BTreeMap<usize, Matrix>>,
    fixed: f64,
}

/// How to choose a reduced node once its neighbours have chosen.
enum Undo {
    Fixed(usize, usize),
    Follow1(usize, usize, Vec<usize>),
    Follow2(usize, usize, usize, Vec<Vec<usize>>),
}

impl State {
    fn remove(&mut self, i: usize) {
        self.costs[i] = None;
        for j in std::mem::take(&mut self.adj[i]).into_keys() {
            self.adj[j].remove(&i);
        }
    }

    fn link(&mut self, a: usize, b: usize, m: Matrix) {
        let t = transpose(&m);
        match self.adj[a].get_mut(&b) {
            Some(old) => {
                add_into(old, &m);
                add_into(
                    self.adj[b]
                        .get_mut(&a)
                        .expect("edges are kept from both ends"),
                    &t,
                );
            }
            None => {
                self.adj[a].insert(b, m);
                self.adj[b].insert(a, t);
            }
        }
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.costs.len()).filter(|&i| self.costs[i].is_some())
    }

    /// Applies R0, R1 and R2 while some node has at most two neighbours.
    /// A worklist holds the nodes that may have; a reduction adds the
    /// neighbours it changed, so the work is linear in the reductions.
    fn reduce(&mut self, undo: &mut Vec<Undo>) {
        let mut work: Vec<usize> = self.live().filter(|&i| self.adj[i].len() <= 2).collect();
        work.reverse();
        while let Some(i) = work.pop() {
            if self.costs[i].is_none() || self.adj[i].len() > 2 {
                continue;
            }
            let c = self.costs[i].clone().expect("live");
            let neighbours: Vec<usize> = self.adj[i].keys().copied().collect();
            match neighbours[..] {
                [] => {
                    let (a, x) = argmin(c.iter().copied());
                    self.fixed += x;
                    undo.push(Undo::Fixed(i, a));
                }
                [j] => {
                    let m = self.adj[i][&j].clone();
                    let nj = m[0].len();
                    let mut best = Vec::with_capacity(nj);
                    let cj = self.costs[j].as_mut().expect("live");
                    for (b, x) in cj.iter_mut().enumerate() {
                        let (a, min) = argmin((0..c.len()).map(|a| c[a] + m[a][b]));
                        best.push(a);
                        *x += min;
                    }
                    undo.push(Undo::Follow1(i, j, best));
                }
                [j, k] => {
                    let (mj, mk) = (&self.adj[i][&j], &self.adj[i][&k]);
                    let (nj, nk) = (mj[0].len(), mk[0].len());
                    let mut best = vec![vec![0; nk]; nj];
                    let mut m = vec![vec![0.0; nk]; nj];
                    for b in 0..nj {
                        for e in 0..nk {
                            let (a, x) = argmin((0..c.len()).map(|a| c[a] + mj[a][b] + mk[a][e]));
                            best[b][e] = a;
                            m[b][e] = x;
                        }
                    }
                    self.link(j, k, m);
                    undo.push(Undo::Follow2(i, j, k, best));
                }
                _ => unreachable!("only nodes of degree two or less are reduced"),
            }
            self.remove(i);
            work.extend(
                neighbours
                    .into_iter()
                    .rev()
                    .filter(|&j| self.adj[j].len() <= 2),
            );
        }
    }

    /// A lower bound on what the live nodes add.
    fn bound(&self) -> f64 {
        let nodes: f64 = self
            .live()
            .map(|i| argmin(self.costs[i].as_ref().expect("live").iter().copied()).1)
            .sum();
        let edges: f64 = self
            .live()
            .flat_map(|i| self.adj[i].range(i + 1..).map(|(_, m)| m))
            .map(|m| argmin(m.iter().flatten().copied()).1)
            .sum();
        self.fixed + nodes + edges
    }
}

fn undo_all(undo: &[Undo], choice: &mut [usize]) {
    for u in undo.iter().rev() {
        match *u {
            Undo::Fixed(i, a) => choice[i] = a,
            Undo::Follow1(i, j, ref best) => choice[i] = best[choice[j]],
            Undo::Follow2(i, j, k, ref best) => choice[i] = best[choice[j]][choice[k]],
        }
    }
}

/// Solves `p` exactly within `budget` work (each branch costs the
/// problem's node count); `None` when the budget runs out first.
pub fn solve(p: &Pbqp, budget: usize) -> Option<Solution> {
    let n = p.costs.len();
    let mut state = State {
        costs: p.costs.iter().cloned().map(Some).collect(),
        adj: vec![BTreeMap::new(); n],
        fixed: 0.0,
    };
    for (&(a, b), m) in &p.edges {
        state.link(a, b, m.clone());
    }
    let mut left = budget;
    let mut best = f64::INFINITY;
    let choice = search(state, &mut left, &mut best)??;
    Some(Solution {
        cost: p.cost(&choice),
        choice,
        work: budget - left,
    })
}

/// The best choice below `state` that costs less than `best` (which it
/// lowers), `Some(None)` when none does, `None` when the budget ran out.
fn search(mut state: State, left: &mut usize, best: &mut f64) -> Option<Option<Vec<usize>>> {
    let mut undo = Vec::new();
    state.reduce(&mut undo);
    let Some(i) = state
        .live()
        .max_by_key(|&i| (state.adj[i].len(), std::cmp::Reverse(i)))
    else {
        if state.fixed >= *best {
            return Some(None);
        }
        *best = state.fixed;
        let mut choice = vec![0; state.costs.len()];
        undo_all(&undo, &mut choice);
        return Some(Some(choice));
    };
    let c = state.costs[i].clone().expect("live");
    let local = |a: usize| {
        c[a] + state.adj[i]
            .values()
            .map(|m| argmin(m[a].iter().copied()).1)
            .sum::<f64>()
    };
    let mut order: Vec<usize> = (0..c.len()).collect();
    order.sort_by(|&a, &b| local(a).total_cmp(&local(b)).then(a.cmp(&b)));
    let mut found = None;
    // A branch copies the state: its work is the problem's size.
    let work = state.costs.len().max(1);
    for a in order {
        if *left < work {
            return None;
        }
        *left -= work;
        let mut next = state.clone();
        next.fixed += c[a];
        for (&j, m) in &state.adj[i] {
            let cj = next.costs[j].as_mut().expect("live");
            for (b, x) in cj.iter_mut().enumerate() {
                *x += m[a][b];
            }
        }
        next.remove(i);
        if next.bound() >= *best {
            continue;
        }
        if let Some(mut choice) = search(next, left, best)? {
            choice[i] = a;
            found = Some(choice);
        }
    }
    Some(found.map(|mut choice| {
        undo_all(&undo, &mut choice);
        choice
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every assignment, for checking the solver on small problems.
    fn brute_force(p: &Pbqp) -> f64 {
        let n = p.costs.len();
        let mut choice = vec![0; n];
        let mut best = f64::INFINITY;
        loop {
            best = best.min(p.cost(&choice));
            let mut k = 0;
            while k < n {
                choice[k] += 1;
                if choice[k] < p.costs[k].len() {
                    break;
                }
                choice[k] = 0;
                k += 1;
            }
            if k == n {
                return best;
            }
        }
    }

    /// A small deterministic generator (no dependency for a test).
    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 33) % 1000) as f64
    }

    #[test]
    fn matches_brute_force_on_dense_and_sparse_graphs() {
        let mut seed = 7;
        for trial in 0..60 {
            let n = 2 + trial % 7;
            let k = 1 + trial % 3;
            let mut p = Pbqp {
                costs: (0..n)
                    .map(|_| (0..k + 1).map(|_| lcg(&mut seed)).collect())
                    .collect(),
                ..Default::default()
            };
            for a in 0..n {
                for b in a + 1..n {
                    if (trial % 2 == 0) || lcg(&mut seed) < 400.0 {
                        let m = (0..k + 1)
                            .map(|_| (0..k + 1).map(|_| lcg(&mut seed)).collect())
                            .collect();
                        p.add_edge(a, b, m);
                    }
                }
            }
            let s = solve(&p, 1_000_000).expect("small problems finish");
            assert_eq!(s.cost, p.cost(&s.choice));
            assert!((s.cost - brute_force(&p)).abs() < 1e-9, "trial {trial}");
        }
    }

    #[test]
    fn a_spent_budget_is_reported() {
        let mut seed = 3;
        let n = 12;
        let mut p = Pbqp {
            costs: (0..n)
                .map(|_| (0..4).map(|_| lcg(&mut seed)).collect())
                .collect(),
            ..Default::default()
        };
        for a in 0..n {
            for b in a + 1..n {
                let m = (0..4)
                    .map(|_| (0..4).map(|_| lcg(&mut seed)).collect())
                    .collect();
                p.add_edge(a, b, m);
            }
        }
        assert_eq!(solve(&p, 1), None);
        assert!(solve(&p, 10_000_000).is_some());
    }
}
