//! The searches `ircc tune` runs per kernel signature: a seeded genetic
//! search (SmartMem's and DNNFusion's tuner) and a random search as its
//! baseline. A search proposes one point at a time and is told its time;
//! the same seed and the same times give the same proposals.

use std::collections::{BTreeMap, BTreeSet};

use super::space::{MatmulConfig, PARAMETERS, SearchSettings, from_parameters, parameters};

/// SplitMix64: a small seeded generator, so proposals depend on nothing
/// but the seed and the times reported.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / ((1u64 << 53) as f64) < p
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Genetic,
    Random,
}

/// One signature's search over `space` (the points it may propose).
pub struct Search {
    strategy: Strategy,
    settings: SearchSettings,
    rng: Rng,
    space: Vec<MatmulConfig>,
    members: BTreeSet<MatmulConfig>,
    values: [Vec<i64>; PARAMETERS],
    measured: BTreeMap<MatmulConfig, f64>,
    /// The order points were measured in.
    history: Vec<MatmulConfig>,
    first: Option<MatmulConfig>,
}

impl Search {
    /// A search of `space` whose first proposal is `first` (the default,
    /// measured as the baseline even where pruning would exclude it).
    pub fn new(
        strategy: Strategy,
        settings: SearchSettings,
        space: Vec<MatmulConfig>,
        first: MatmulConfig,
        seed: u64,
    ) -> Search {
        let mut values: [Vec<i64>; PARAMETERS] = Default::default();
        for p in &space {
            for (i, v) in parameters(p).into_iter().enumerate() {
                if !values[i].contains(&v) {
                    values[i].push(v);
                }
            }
        }
        for v in &mut values {
            v.sort_unstable();
        }
        Search {
            strategy,
            settings,
            rng: Rng::new(seed),
            members: space.iter().copied().collect(),
            space,
            values,
            measured: BTreeMap::new(),
            history: Vec::new(),
            first: Some(first),
        }
    }

    /// The next point to measure; `None` once every point has been.
    pub fn propose(&mut self) -> Option<MatmulConfig> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        if self.space.iter().all(|p| self.measured.contains_key(p)) {
            return None;
        }
        // Once the first population is measured, children bred from it;
        // a random point where 32 children in a row were measured already.
        if self.strategy == Strategy::Genetic && self.history.len() >= self.settings.population {
            for _ in 0..32 {
                let c = self.child();
                if self.fresh(&c) {
                    return Some(c);
                }
            }
        }
        self.random_fresh()
    }

    /// Records the time of a proposed point.
    pub fn report(&mut self, config: MatmulConfig, us: f64) {
        if self.measured.insert(config, us).is_none() {
            self.history.push(config);
        }
    }

    /// The fastest point measured, with its time.
    pub fn best(&self) -> Option<(MatmulConfig, f64)> {
        self.measured
            .iter()
            .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)))
            .map(|(c, t)| (*c, *t))
    }

    pub fn trials(&self) -> usize {
        self.measured.len()
    }

    /// How many points the search can propose: its space, and the first
    /// point where that lies outside it.
    pub fn points(&self) -> usize {
        let outside = self.first.is_some_and(|f| !self.members.contains(&f));
        self.members.len() + usize::from(outside)
    }

    fn fresh(&self, c: &MatmulConfig) -> bool {
        self.members.contains(c) && !self.measured.contains_key(c)
    }

    fn random_fresh(&mut self) -> Option<MatmulConfig> {
        let left: Vec<MatmulConfig> = self
            .space
            .iter()
            .filter(|p| !self.measured.contains_key(p))
            .copied()
            .collect();
        (!left.is_empty()).then(|| left[self.rng.below(left.len())])
    }

    /// The fastest of `tournament` members of the population (the
    /// `population` fastest points measured so far).
    fn parent(&mut self) -> MatmulConfig {
        let mut ranked: Vec<(MatmulConfig, f64)> =
            self.measured.iter().map(|(c, t)| (*c, *t)).collect();
        ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        ranked.truncate(self.settings.population);
        (0..self.settings.tournament)
            .map(|_| ranked[self.rng.below(ranked.len())])
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(c, _)| c)
            .expect("a tournament of at least one")
    }

    /// A uniform crossover of two parents, each parameter then moved to a
    /// neighbouring value with the mutation probability.
    fn child(&mut self) -> MatmulConfig {
        let (a, b) = (parameters(&self.parent()), parameters(&self.parent()));
        let mut c = [0; PARAMETERS];
        for i in 0..PARAMETERS {
            c[i] = if self.rng.chance(0.5) { a[i] } else { b[i] };
            if self.rng.chance(self.settings.mutation) {
                let values = &self.values[i];
                // A value outside the space (the default's, where
                // pruning excluded it) moves from the nearest above it.
                let at = values
                    .iter()
                    .position(|&v| v >= c[i])
                    .unwrap_or(values.len() - 1);
                let up = self.rng.chance(0.5);
                let to = if up { at + 1 } else { at.wrapping_sub(1) };
                if let Some(&v) = values.get(to) {
                    c[i] = v;
                }
            }
        }
        from_parameters(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::space::TuningSpec;

    /// A made-up cost with one optimum, to search.
    fn cost(c: &MatmulConfig) -> f64 {
        let p = parameters(c);
        let target = [16, 8, 4, 4, 16, 1, 1];
        p.iter()
            .zip(target)
            .map(|(&x, t)| ((x as f64).ln() - (t as f64).max(0.5).ln()).abs())
            .sum()
    }

    fn run(strategy: Strategy, seed: u64, budget: usize) -> (Vec<MatmulConfig>, f64) {
        let spec = TuningSpec::builtin();
        let space = spec.matmul_tiled.points();
        let first = space[0];
        let mut s = Search::new(strategy, spec.search, space, first, seed);
        let mut seen = Vec::new();
        for _ in 0..budget {
            let c = s.propose().unwrap();
            s.report(c, cost(&c));
            seen.push(c);
        }
        (seen, s.best().unwrap().1)
    }

    #[test]
    fn the_same_seed_and_times_give_the_same_proposals() {
        assert_eq!(
            run(Strategy::Genetic, 7, 40).0,
            run(Strategy::Genetic, 7, 40).0
        );
        assert_ne!(
            run(Strategy::Genetic, 7, 40).0,
            run(Strategy::Genetic, 8, 40).0
        );
    }

    #[test]
    fn proposals_are_distinct_points_of_the_space() {
        let (seen, _) = run(Strategy::Genetic, 1, 200);
        let distinct: BTreeSet<_> = seen.iter().collect();
        assert_eq!(distinct.len(), seen.len());
    }

    #[test]
    fn the_genetic_search_beats_random_search_on_a_smooth_cost() {
        // Over ten seeds, at the same budget, the genetic search's best is
        // closer to the optimum than random search's more often than not.
        let wins = (0..10)
            .filter(|&seed| run(Strategy::Genetic, seed, 60).1 < run(Strategy::Random, seed, 60).1)
            .count();
        assert!(wins >= 7, "the genetic search won {wins} of 10");
    }

    #[test]
    fn a_small_space_is_exhausted_and_then_ends() {
        let spec = TuningSpec::builtin();
        let space: Vec<_> = spec.matmul_tiled.points().into_iter().take(5).collect();
        let mut s = Search::new(Strategy::Genetic, spec.search, space.clone(), space[0], 3);
        for _ in 0..5 {
            let c = s.propose().unwrap();
            s.report(c, cost(&c));
        }
        assert_eq!(s.propose(), None);
        assert_eq!(s.trials(), 5);
    }
}
