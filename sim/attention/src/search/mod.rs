//! Tiling search (§4.2): a genetic algorithm and Monte Carlo tree search, as
//! the paper uses on the simulated device, and an exhaustive grid search as
//! the reference. All randomness comes from a seeded SplitMix64, so a
//! search is reproducible from its options.

mod genetic;
mod grid;
mod mcts;
mod rng;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::SimError;
use rng::SplitMix64;

pub use grid::GRID_LIMIT;

/// Largest simulation budget accepted.
pub const MAX_BUDGET: u32 = 100_000;

/// Search algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Genetic algorithm: tournament selection, uniform crossover,
    /// neighbour/reset mutation, elitism.
    Genetic,
    /// Monte Carlo tree search: one tree level per tile parameter, UCT
    /// selection, random roll-outs.
    Mcts,
    /// Every point of the space (at most [`GRID_LIMIT`]); ignores the
    /// budget.
    Grid,
}

/// How to search for a tiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SearchOptions {
    /// Search algorithm.
    pub strategy: Strategy,
    /// Seed of the search's random numbers.
    pub seed: u64,
    /// Most tilings to simulate (distinct, feasible ones; tilings rejected
    /// before simulation are free). Bounds the search's work together with
    /// the per-simulation task limit.
    pub budget: u32,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            strategy: Strategy::Mcts,
            seed: 0x4D41_535F_4154_544E,
            budget: 32,
        }
    }
}

impl SearchOptions {
    /// Rejects a budget of zero or above [`MAX_BUDGET`].
    pub fn validate(&self) -> Result<(), SimError> {
        if (1..=MAX_BUDGET).contains(&self.budget) {
            Ok(())
        } else {
            Err(SimError::InvalidOptions(format!(
                "search budget must be in 1..={MAX_BUDGET}, got {}",
                self.budget
            )))
        }
    }
}

/// The best point a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// Parameter values.
    pub point: Vec<u32>,
    pub cycles: u64,
    /// Tilings simulated.
    pub simulated: u32,
}

/// Cost of a point: `Ok(None)` if the tiling is infeasible.
pub(crate) type Cost<'a> = dyn FnMut(&[u32]) -> Result<Option<u64>, SimError> + 'a;

/// Searches `dims` (candidate values per parameter) for the point of least
/// cost; `None` if no point is feasible.
pub(crate) fn search(
    dims: &[Vec<u32>],
    opts: &SearchOptions,
    cost: &mut Cost,
) -> Result<Option<Found>, SimError> {
    opts.validate()?;
    let mut eval = Evaluator {
        dims,
        cost,
        cache: BTreeMap::new(),
        budget: opts.budget,
        simulated: 0,
        best: None,
    };
    let mut rng = SplitMix64::new(opts.seed);
    match opts.strategy {
        Strategy::Genetic => genetic::search(&mut eval, &mut rng)?,
        Strategy::Mcts => mcts::search(&mut eval, &mut rng)?,
        Strategy::Grid => grid::search(&mut eval)?,
    }
    Ok(eval.best.map(|(cycles, point)| Found {
        point: point
            .iter()
            .zip(dims)
            .map(|(&i, values)| values[i])
            .collect(),
        cycles,
        simulated: eval.simulated,
    }))
}

/// Evaluates points (as indices into `dims`) with a cache and a budget.
pub(crate) struct Evaluator<'a, 'c> {
    dims: &'a [Vec<u32>],
    cost: &'a mut Cost<'c>,
    cache: BTreeMap<Vec<usize>, Option<u64>>,
    budget: u32,
    simulated: u32,
    /// Least cost so far, ties to the smallest point.
    best: Option<(u64, Vec<usize>)>,
}

impl Evaluator<'_, '_> {
    pub(crate) fn sizes(&self) -> Vec<usize> {
        self.dims.iter().map(Vec::len).collect()
    }

    /// Whether the heuristics should stop: budget spent or every point
    /// seen.
    pub(crate) fn done(&self) -> bool {
        let points = self.sizes().iter().map(|&n| n as u64).product::<u64>();
        self.simulated >= self.budget || self.cache.len() as u64 >= points
    }

    pub(crate) fn best_cycles(&self) -> Option<u64> {
        self.best.as_ref().map(|(c, _)| *c)
    }

    /// Cost of `point`, `None` if infeasible. Once the budget is spent,
    /// points not seen before are not simulated and read as infeasible
    /// (the grid search alone is exempt: it is bounded by its size).
    pub(crate) fn evaluate(&mut self, point: &[usize]) -> Result<Option<u64>, SimError> {
        if let Some(&known) = self.cache.get(point) {
            return Ok(known);
        }
        let values: Vec<u32> = point.iter().zip(self.dims).map(|(&i, v)| v[i]).collect();
        let cost = (self.cost)(&values)?;
        if cost.is_some() {
            self.simulated += 1;
        }
        self.cache.insert(point.to_vec(), cost);
        if let Some(cycles) = cost {
            let better = self
                .best
                .as_ref()
                .is_none_or(|(c, p)| (cycles, point) < (*c, p.as_slice()));
            if better {
                self.best = Some((cycles, point.to_vec()));
            }
        }
        Ok(cost)
    }

    /// Like [`Evaluator::evaluate`] but respecting the budget.
    pub(crate) fn try_evaluate(&mut self, point: &[usize]) -> Result<Option<u64>, SimError> {
        if self.simulated >= self.budget && !self.cache.contains_key(point) {
            return Ok(None);
        }
        self.evaluate(point)
    }
}

/// A uniformly random point.
fn random_point(sizes: &[usize], rng: &mut SplitMix64) -> Vec<usize> {
    sizes.iter().map(|&n| rng.below(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bowl with its minimum at values (64, 32).
    fn bowl(p: &[u32]) -> Result<Option<u64>, SimError> {
        let d = |v: u32, at: i64| (i64::from(v).ilog2() as i64 - at.ilog2() as i64).unsigned_abs();
        Ok(Some(100 + 10 * d(p[0], 64) + 7 * d(p[1], 32)))
    }

    fn dims() -> Vec<Vec<u32>> {
        let v: Vec<u32> = (3..=9).map(|e| 1 << e).collect();
        vec![v.clone(), v]
    }

    #[test]
    fn grid_finds_the_minimum() {
        let opts = SearchOptions {
            strategy: Strategy::Grid,
            ..SearchOptions::default()
        };
        let found = search(&dims(), &opts, &mut bowl).unwrap().unwrap();
        assert_eq!(
            (found.point, found.cycles, found.simulated),
            (vec![64, 32], 100, 49)
        );
    }

    #[test]
    fn heuristics_respect_the_budget_and_are_reproducible() {
        for strategy in [Strategy::Genetic, Strategy::Mcts] {
            let opts = SearchOptions {
                strategy,
                seed: 3,
                budget: 10,
            };
            let a = search(&dims(), &opts, &mut bowl).unwrap().unwrap();
            let b = search(&dims(), &opts, &mut bowl).unwrap().unwrap();
            assert_eq!(a, b);
            assert!(a.simulated <= 10, "{strategy:?} simulated {}", a.simulated);
        }
    }

    #[test]
    fn heuristics_find_the_minimum_with_enough_budget() {
        for strategy in [Strategy::Genetic, Strategy::Mcts] {
            let opts = SearchOptions {
                strategy,
                seed: 11,
                budget: 30,
            };
            let found = search(&dims(), &opts, &mut bowl).unwrap().unwrap();
            assert_eq!(found.cycles, 100, "{strategy:?}");
        }
    }

    #[test]
    fn infeasible_everywhere_finds_nothing() {
        let opts = SearchOptions::default();
        assert_eq!(search(&dims(), &opts, &mut |_| Ok(None)).unwrap(), None);
    }

    #[test]
    fn zero_budget_is_rejected() {
        let opts = SearchOptions {
            budget: 0,
            ..SearchOptions::default()
        };
        assert!(matches!(
            search(&dims(), &opts, &mut bowl),
            Err(SimError::InvalidOptions(_))
        ));
    }
}
