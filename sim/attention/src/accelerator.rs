//! The simulated edge accelerator of MAS-Attention §5.1 (Fig. 4) and the
//! cycle cost of its units.

use serde::{Deserialize, Serialize};

use crate::energy::EnergyModel;
use crate::error::SimError;

/// Per-element VEC instruction counts of one softmax row (Alg. 3: find the
/// maximum, subtract it, exponentiate, sum, normalise).
///
/// The paper does not describe the VEC unit's instruction set, so these are
/// assumptions. The VEC unit is taken to have no special-function or divide
/// hardware and to compute in FP32 before rounding to FP16 (the paper's
/// golden-data check asks for exact attention): `exp` and the division are
/// sequences of plain lane operations.
///
/// Their total, 51 operations per element, is the one calibrated constant of
/// the model. Table 2's FLAT column is the only one that exposes softmax
/// time (FLAT runs softmax between its two MatMuls) and bounds it from
/// below; MAS must still hide softmax behind the two MatMuls of the smallest
/// head (T5-Mini, E = 32: 64 MAC-array cycles per score row against
/// 2 × 51 + 16 VEC cycles), which bounds it from above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftmaxOps {
    /// Running maximum (one compare-select).
    pub max: u32,
    /// Subtracting the row maximum.
    pub sub: u32,
    /// `exp`: range reduction (scale by log2 e, split integer and
    /// fraction: 4), a degree-8 polynomial in Horner form without fused
    /// multiply-add (16), exponent insertion and FP16 rounding (4).
    pub exp: u32,
    /// Running sum.
    pub sum: u32,
    /// Division by the row sum, per element and correctly rounded: a
    /// reciprocal seed (2), four Newton–Raphson steps without fused
    /// multiply-add (16), the multiply, a residual correction and FP16
    /// rounding (6).
    pub div: u32,
}

impl SoftmaxOps {
    /// Lane operations per element.
    pub fn per_element(&self) -> u64 {
        u64::from(self.max)
            + u64::from(self.sub)
            + u64::from(self.exp)
            + u64::from(self.sum)
            + u64::from(self.div)
    }
}

impl Default for SoftmaxOps {
    fn default() -> Self {
        Self {
            max: 1,
            sub: 1,
            exp: 24,
            sum: 1,
            div: 24,
        }
    }
}

/// Hardware parameters. `Default` is the paper's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accelerator {
    /// Clock frequency in Hz (§5.1: 3.75 GHz).
    pub clock_hz: u64,
    /// Cores, each with one MAC and one VEC unit (§5.1: two).
    pub cores: u32,
    /// MAC array rows (§5.1: 16×16 mesh).
    pub mac_rows: u32,
    /// MAC array columns (§5.1: 16×16 mesh).
    pub mac_cols: u32,
    /// VEC unit lanes (§5.1: 256 mesh).
    pub vec_lanes: u32,
    /// Shared L1 capacity in bytes (§5.1: 5 MB, taken as 5 MiB).
    pub l1_bytes: u64,
    /// L0 register file per unit in bytes. The paper gives no size; 64 KiB
    /// is an assumption. It decides whether a softmax row stays in L0
    /// between its passes (which only changes the access counts).
    pub l0_bytes: u64,
    /// DRAM bandwidth in bytes per second (§5.1: 30 GB/s, i.e. 8 bytes per
    /// cycle at 3.75 GHz).
    pub dram_bytes_per_sec: u64,
    /// Bytes per element (§5.5: half precision).
    pub elem_bytes: u32,
    /// Softmax instruction counts of the VEC unit.
    pub softmax: SoftmaxOps,
    /// Energy per access and per operation.
    pub energy: EnergyModel,
}

impl Default for Accelerator {
    fn default() -> Self {
        Self {
            clock_hz: 3_750_000_000,
            cores: 2,
            mac_rows: 16,
            mac_cols: 16,
            vec_lanes: 256,
            l1_bytes: 5 * 1024 * 1024,
            l0_bytes: 64 * 1024,
            dram_bytes_per_sec: 30_000_000_000,
            elem_bytes: 2,
            softmax: SoftmaxOps::default(),
            energy: EnergyModel::default(),
        }
    }
}

impl Accelerator {
    /// Checks that every parameter is usable; the cost functions below
    /// assume it.
    pub fn validate(&self) -> Result<(), SimError> {
        let positive = [
            ("clock_hz", self.clock_hz),
            ("cores", u64::from(self.cores)),
            ("mac_rows", u64::from(self.mac_rows)),
            ("mac_cols", u64::from(self.mac_cols)),
            ("vec_lanes", u64::from(self.vec_lanes)),
            ("l1_bytes", self.l1_bytes),
            ("l0_bytes", self.l0_bytes),
            ("dram_bytes_per_sec", self.dram_bytes_per_sec),
            ("elem_bytes", u64::from(self.elem_bytes)),
            ("softmax ops", self.softmax.per_element()),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(SimError::InvalidAccelerator(format!(
                "{name} must be positive"
            )));
        }
        // Bounds that keep every cycle and byte count far inside u64.
        let bounded = [
            ("cores", u64::from(self.cores), 64),
            ("mac_rows", u64::from(self.mac_rows), 4096),
            ("mac_cols", u64::from(self.mac_cols), 4096),
            ("vec_lanes", u64::from(self.vec_lanes), 1 << 16),
            ("elem_bytes", u64::from(self.elem_bytes), 16),
            ("softmax ops", self.softmax.per_element(), 1 << 16),
            ("clock_hz", self.clock_hz, 1 << 40),
        ];
        if let Some((name, _, max)) = bounded.iter().find(|(_, v, max)| v > max) {
            return Err(SimError::InvalidAccelerator(format!(
                "{name} exceeds {max}"
            )));
        }
        self.energy.validate()
    }

    /// Cycles for one MAC tile: an `rows`×`cols` block of the S×S score or
    /// probability matrix held on the array while the head dimension
    /// (`depth`) streams through it, one slice per cycle.
    ///
    /// QKᵀ keeps its output block stationary; PV keeps the P block
    /// stationary and reduces across the array's columns. Both therefore
    /// place query rows on array rows and key positions on array columns.
    /// As in Timeloop's perfect factorisation (the paper's simulator), the
    /// spatial factor of an extent is its largest divisor that fits the
    /// array side, so a 196-long extent uses 14 of 16 lanes. The MAC time
    /// of attention then equals Table 2's MAS-Attention cycles on all 12
    /// workloads.
    pub fn mac_tile_cycles(&self, rows: u32, cols: u32, depth: u32) -> u64 {
        passes(rows, self.mac_rows) * passes(cols, self.mac_cols) * u64::from(depth)
    }

    /// Cycles of the VEC unit for one softmax row of `len` elements: each
    /// lane operation sweeps the row in `ceil(len / lanes)` vector steps,
    /// and the max and the sum each end with a log2(lanes)-step cross-lane
    /// reduction.
    pub fn softmax_row_cycles(&self, len: u32) -> u64 {
        let sweeps = u64::from(len.div_ceil(self.vec_lanes));
        let reduction = u64::from(self.vec_lanes.next_power_of_two().trailing_zeros());
        sweeps * self.softmax.per_element() + 2 * reduction
    }

    /// Whether a softmax row of `len` elements stays in a VEC unit's L0
    /// across its passes; otherwise each pass re-reads it from L1.
    pub fn softmax_row_fits_l0(&self, len: u32) -> bool {
        u64::from(len) * u64::from(self.elem_bytes) <= self.l0_bytes
    }

    /// Cycles the DRAM channel is busy moving `bytes` (bandwidth-limited,
    /// rounded up to whole cycles).
    pub fn dram_cycles(&self, bytes: u64) -> u64 {
        let scaled = u128::from(bytes) * u128::from(self.clock_hz);
        let cycles = scaled.div_ceil(u128::from(self.dram_bytes_per_sec));
        u64::try_from(cycles).unwrap_or(u64::MAX)
    }
}

/// Passes an extent needs on an array side of `side` lanes, with the
/// spatial factor restricted to divisors of the extent.
fn passes(extent: u32, side: u32) -> u64 {
    let factor = (1..=side.min(extent))
        .rev()
        .find(|f| extent.is_multiple_of(*f))
        .unwrap_or(1);
    u64::from(extent / factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_tile_uses_full_array_on_multiples_of_16() {
        let acc = Accelerator::default();
        // A 32×64 block: 2×4 passes of 16×16, each streaming 64 slices.
        assert_eq!(acc.mac_tile_cycles(32, 64, 64), 2 * 4 * 64);
        assert_eq!(acc.mac_tile_cycles(16, 16, 1), 1);
    }

    #[test]
    fn mac_tile_uses_largest_divisor_that_fits() {
        let acc = Accelerator::default();
        // 196 = 14 × 14: 14 lanes per side, 14 passes.
        assert_eq!(acc.mac_tile_cycles(196, 196, 64), 14 * 14 * 64);
        // A prime extent gets one lane.
        assert_eq!(acc.mac_tile_cycles(17, 16, 8), 17 * 8);
    }

    #[test]
    fn dram_moves_eight_bytes_per_cycle() {
        let acc = Accelerator::default();
        assert_eq!(acc.dram_cycles(8), 1);
        assert_eq!(acc.dram_cycles(9), 2);
        assert_eq!(acc.dram_cycles(64 * 1024), 8192);
    }

    #[test]
    fn softmax_row_cost() {
        let acc = Accelerator::default();
        let ops = acc.softmax.per_element();
        // 512 elements on 256 lanes: two sweeps per op, plus two 8-step
        // reductions.
        assert_eq!(acc.softmax_row_cycles(512), 2 * ops + 16);
        assert_eq!(acc.softmax_row_cycles(196), ops + 16);
    }

    #[test]
    fn validate_rejects_zero_and_huge() {
        let acc = Accelerator {
            cores: 0,
            ..Accelerator::default()
        };
        assert!(matches!(
            acc.validate(),
            Err(SimError::InvalidAccelerator(_))
        ));
        let acc = Accelerator {
            mac_rows: 1 << 20,
            ..Accelerator::default()
        };
        assert!(matches!(
            acc.validate(),
            Err(SimError::InvalidAccelerator(_))
        ));
        assert_eq!(Accelerator::default().validate(), Ok(()));
    }
}
