//! Energy per access and per operation, and the energy of a simulated run.
//!
//! The paper estimates energy with Accelergy's 16 nm tables, which it does
//! not publish. The constants here are therefore assumptions built from two
//! public sources:
//!
//! * M. Horowitz, "Computing's energy problem", ISSCC 2014 (45 nm): an FP16
//!   multiply costs 1.1 pJ and an FP16 add 0.4 pJ.
//! * Y.-H. Chen, J. Emer, V. Sze, "Eyeriss", ISCA 2016: normalised to one
//!   MAC, a register-file access costs 1×, a global-buffer access 6× and a
//!   DRAM access 200×.
//!
//! A MAC is costed at Horowitz's multiply plus add and the memories at
//! Eyeriss's ratios of that. No technology scaling is applied, so the
//! absolute numbers are upper-bound estimates; the comparison between
//! schedules, which only depends on the ratios, is what they are for.

use serde::{Deserialize, Serialize};

use crate::error::SimError;

/// Energy constants, all in picojoules. An access moves one element.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EnergyModel {
    /// One element read from or written to DRAM (Eyeriss: 200× a MAC).
    pub dram_pj: f64,
    /// One element read from or written to L1 (Eyeriss: 6× a MAC).
    pub l1_pj: f64,
    /// One L0 register-file access (Eyeriss: 1× a MAC).
    pub l0_pj: f64,
    /// One FP16 multiply-accumulate (Horowitz: 1.1 + 0.4 pJ).
    pub mac_pj: f64,
    /// One VEC lane operation (Horowitz: an FP16 add, 0.4 pJ).
    pub vec_pj: f64,
}

impl Default for EnergyModel {
    fn default() -> Self {
        Self {
            dram_pj: 300.0,
            l1_pj: 9.0,
            l0_pj: 1.5,
            mac_pj: 1.5,
            vec_pj: 0.4,
        }
    }
}

impl EnergyModel {
    /// Rejects negative or non-finite constants.
    pub fn validate(&self) -> Result<(), SimError> {
        let all = [
            self.dram_pj,
            self.l1_pj,
            self.l0_pj,
            self.mac_pj,
            self.vec_pj,
        ];
        if all.iter().all(|v| v.is_finite() && *v >= 0.0) {
            Ok(())
        } else {
            Err(SimError::InvalidAccelerator(
                "energy constants must be finite and non-negative".into(),
            ))
        }
    }

    /// Energy of a run with the given access counts.
    pub fn breakdown(&self, counts: &Accesses) -> EnergyBreakdown {
        // u64 → f64 is exact below 2^53, far above any count here.
        let pj = |n: u64, per: f64| n as f64 * per;
        let dram_pj = pj(counts.dram_reads + counts.dram_writes, self.dram_pj);
        let l1_pj = pj(counts.l1_reads + counts.l1_writes, self.l1_pj);
        let l0_pj = pj(counts.l0_accesses, self.l0_pj);
        let mac_pj = pj(counts.mac_ops, self.mac_pj);
        let vec_pj = pj(counts.vec_ops, self.vec_pj);
        EnergyBreakdown {
            dram_pj,
            l1_pj,
            l0_pj,
            mac_pj,
            vec_pj,
            total_pj: dram_pj + l1_pj + l0_pj + mac_pj + vec_pj,
        }
    }
}

/// Access and operation counts of a run, in elements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accesses {
    /// Elements read from DRAM.
    pub dram_reads: u64,
    /// Elements written to DRAM.
    pub dram_writes: u64,
    /// Elements read from L1.
    pub l1_reads: u64,
    /// Elements written to L1.
    pub l1_writes: u64,
    /// L0 register-file accesses: three per MAC (two operands and the
    /// accumulator), two per VEC operation (operand and result).
    pub l0_accesses: u64,
    /// Multiply-accumulates.
    pub mac_ops: u64,
    /// VEC lane operations.
    pub vec_ops: u64,
}

/// Energy of a run per component, in picojoules (the paper's Fig. 6 split).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EnergyBreakdown {
    /// Off-chip DRAM.
    pub dram_pj: f64,
    /// On-chip L1.
    pub l1_pj: f64,
    /// L0 register files.
    pub l0_pj: f64,
    /// MAC processing elements.
    pub mac_pj: f64,
    /// VEC processing elements.
    pub vec_pj: f64,
    /// Sum of the above.
    pub total_pj: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breakdown_sums_components() {
        let counts = Accesses {
            dram_reads: 2,
            dram_writes: 1,
            l1_reads: 10,
            l1_writes: 5,
            l0_accesses: 30,
            mac_ops: 10,
            vec_ops: 100,
        };
        let e = EnergyModel::default().breakdown(&counts);
        assert_eq!(e.dram_pj, 900.0);
        assert_eq!(e.l1_pj, 135.0);
        assert_eq!(e.l0_pj, 45.0);
        assert_eq!(e.mac_pj, 15.0);
        assert_eq!(e.vec_pj, 40.0);
        assert_eq!(e.total_pj, 1135.0);
    }

    #[test]
    fn rejects_negative() {
        let m = EnergyModel {
            l1_pj: -1.0,
            ..EnergyModel::default()
        };
        assert!(m.validate().is_err());
    }
}
