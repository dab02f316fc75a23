//! Genetic algorithm over tile parameters (§4.2: "evolves a population of
//! tiling configurations through selection, crossover, and mutation").

use super::rng::SplitMix64;
use super::{Evaluator, random_point};
use crate::error::SimError;

const POPULATION: usize = 8;
const ELITES: usize = 2;
/// Generations per unit of budget before giving up on finding unseen
/// points (cache hits cost nothing, so this only bounds the loop).
const GENERATIONS_PER_BUDGET: usize = 4;

pub(crate) fn search(eval: &mut Evaluator, rng: &mut SplitMix64) -> Result<(), SimError> {
    let sizes = eval.sizes();
    let mut population: Vec<Vec<usize>> =
        (0..POPULATION).map(|_| random_point(&sizes, rng)).collect();
    let generations = GENERATIONS_PER_BUDGET * eval.budget as usize;
    for _ in 0..generations {
        if eval.done() {
            break;
        }
        // Lower cycles are fitter; infeasible and unsimulated points last.
        let mut scored = Vec::with_capacity(population.len());
        for genome in population {
            let fitness = eval.try_evaluate(&genome)?.unwrap_or(u64::MAX);
            scored.push((fitness, genome));
        }
        scored.sort();
        let mut next: Vec<Vec<usize>> =
            scored.iter().take(ELITES).map(|(_, g)| g.clone()).collect();
        while next.len() < POPULATION {
            let a = tournament(&scored, rng);
            let b = tournament(&scored, rng);
            let mut child: Vec<usize> = a
                .iter()
                .zip(b)
                .map(|(&x, &y)| if rng.one_in(2) { x } else { y })
                .collect();
            mutate(&mut child, &sizes, rng);
            next.push(child);
        }
        population = next;
    }
    Ok(())
}

/// The fitter of two random individuals (`scored` is sorted, so the lower
/// index wins).
fn tournament<'a>(scored: &'a [(u64, Vec<usize>)], rng: &mut SplitMix64) -> &'a [usize] {
    let i = rng.below(scored.len()).min(rng.below(scored.len()));
    &scored[i].1
}

/// Each gene mutates with probability 1/genes: half the time to a
/// neighbouring candidate (tile sizes are ordered, so neighbours are
/// similar), otherwise to any candidate.
fn mutate(genome: &mut [usize], sizes: &[usize], rng: &mut SplitMix64) {
    let genes = genome.len();
    for (gene, &n) in genome.iter_mut().zip(sizes) {
        if !rng.one_in(genes) {
            continue;
        }
        *gene = if rng.one_in(2) {
            if rng.one_in(2) {
                gene.saturating_sub(1)
            } else {
                (*gene + 1).min(n - 1)
            }
        } else {
            rng.below(n)
        };
    }
}
