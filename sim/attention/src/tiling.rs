//! Tile parameters of the schedules and the space the search explores.

use serde::{Deserialize, Serialize};

use crate::accelerator::Accelerator;
use crate::error::TilingError;
use crate::schedule::Schedule;

/// A schedule's tile sizes. Every schedule tiles the query rows of a head
/// into blocks of `rows`; `inner` is the schedule's second extent, if it has
/// one (see [`Tiling::inner_name`]). All extents are divisors of the
/// sequence length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tiling {
    /// Query rows per block.
    pub rows: u32,
    /// The schedule's second tile extent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<u32>,
}

impl Tiling {
    /// What `inner` means for `schedule`, or `None` if it has no second
    /// extent.
    pub fn inner_name(schedule: Schedule) -> Option<&'static str> {
        match schedule {
            // Key columns of a QKᵀ output tile.
            Schedule::LayerWise => Some("cols"),
            // Rows of P reloaded per PV step.
            Schedule::SoftPipe => Some("chunk_rows"),
            // FLAT's only parameter is its row granularity.
            Schedule::Flat => None,
            // Rows of a pipelined strip inside a fused tile.
            Schedule::TileFlow => Some("strip_rows"),
            // N_{K,V}: rows of a K or V sub-tile (Alg. 2 and 4).
            Schedule::Mas => Some("kv_rows"),
        }
    }

    /// Checks that the extents divide what they tile and that `inner` is
    /// present exactly when the schedule has one.
    pub(crate) fn check(&self, schedule: Schedule, seq: u32) -> Result<(), TilingError> {
        divides("rows", self.rows, seq)?;
        match (Self::inner_name(schedule), self.inner) {
            (None, None) => Ok(()),
            (Some(name), Some(inner)) => {
                // TileFlow's strips split its fused tile, the others' inner
                // extents split the sequence.
                let of = if schedule == Schedule::TileFlow {
                    self.rows
                } else {
                    seq
                };
                divides(name, inner, of)
            }
            (expected, _) => Err(TilingError::InnerMismatch {
                expected: expected.is_some(),
            }),
        }
    }
}

fn divides(name: &'static str, value: u32, of: u32) -> Result<(), TilingError> {
    if value != 0 && of.is_multiple_of(value) {
        Ok(())
    } else {
        Err(TilingError::NotADivisor { name, value, of })
    }
}

/// Candidate extents for a sequence of `seq`: its divisors that are at
/// least one MAC array side (smaller tiles only waste the array), or `seq`
/// itself when it is shorter than that.
pub(crate) fn candidates(acc: &Accelerator, seq: u32) -> Vec<u32> {
    let floor = seq.min(acc.mac_rows);
    (floor..=seq).filter(|d| seq.is_multiple_of(*d)).collect()
}

/// The search space of `schedule`: one candidate list per tile parameter.
pub(crate) fn space(acc: &Accelerator, schedule: Schedule, seq: u32) -> Vec<Vec<u32>> {
    let values = candidates(acc, seq);
    match Tiling::inner_name(schedule) {
        Some(_) => vec![values.clone(), values],
        None => vec![values],
    }
}

/// The tiling at a point of [`space`].
pub(crate) fn at(point: &[u32]) -> Tiling {
    Tiling {
        rows: point[0],
        inner: point.get(1).copied(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_divisors_from_the_array_side() {
        let acc = Accelerator::default();
        assert_eq!(candidates(&acc, 512), [16, 32, 64, 128, 256, 512]);
        assert_eq!(candidates(&acc, 196), [28, 49, 98, 196]);
        assert_eq!(candidates(&acc, 8), [8]);
    }

    #[test]
    fn check_rejects_non_divisors_and_missing_inner() {
        let t = Tiling {
            rows: 100,
            inner: Some(64),
        };
        assert!(matches!(
            t.check(Schedule::Mas, 512),
            Err(TilingError::NotADivisor { name: "rows", .. })
        ));
        let t = Tiling {
            rows: 128,
            inner: None,
        };
        assert_eq!(
            t.check(Schedule::Mas, 512),
            Err(TilingError::InnerMismatch { expected: true })
        );
        assert!(t.check(Schedule::Flat, 512).is_ok());
        // TileFlow strips must divide the fused tile.
        let t = Tiling {
            rows: 128,
            inner: Some(256),
        };
        assert!(t.check(Schedule::TileFlow, 512).is_err());
        assert!(t.check(Schedule::Mas, 512).is_ok());
    }
}
