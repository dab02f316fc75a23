//! Exhaustive grid search, the reference the heuristics are checked
//! against (and the paper's choice on the DaVinci NPU).

use super::Evaluator;
use crate::error::SimError;

/// Largest space the grid search visits.
pub const GRID_LIMIT: u64 = 4096;

pub(crate) fn search(eval: &mut Evaluator) -> Result<(), SimError> {
    let sizes = eval.sizes();
    let points = sizes.iter().map(|&n| n as u64).product::<u64>();
    if points > GRID_LIMIT {
        return Err(SimError::SearchSpaceTooLarge {
            points,
            limit: GRID_LIMIT,
        });
    }
    let mut point = vec![0; sizes.len()];
    for _ in 0..points {
        eval.evaluate(&point)?;
        // Odometer increment, last dimension fastest.
        for (digit, &size) in point.iter_mut().zip(&sizes).rev() {
            *digit += 1;
            if *digit < size {
                break;
            }
            *digit = 0;
        }
    }
    Ok(())
}
