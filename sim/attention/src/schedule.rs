//! The five attention schedules compared in Table 2.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::SimError;

/// An attention dataflow (§5.1, "baselines", and §4 for MAS-Attention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Schedule {
    /// Unfused: QKᵀ, softmax and PV run one after another, each reading its
    /// input from and writing its output to DRAM.
    LayerWise,
    /// QKᵀ pipelined with softmax, P written to DRAM, then PV.
    SoftPipe,
    /// FLAT: all three operators fused per row block, run sequentially.
    Flat,
    /// TileFlow: fused and pipelined inside each fused tile.
    #[serde(rename = "tileflow")]
    TileFlow,
    /// MAS-Attention: MAC and VEC streams pipelined across rounds.
    Mas,
}

impl Schedule {
    /// All schedules, in Table 2's column order.
    pub const ALL: [Schedule; 5] = [
        Schedule::LayerWise,
        Schedule::SoftPipe,
        Schedule::Flat,
        Schedule::TileFlow,
        Schedule::Mas,
    ];

    /// The four baselines MAS-Attention is compared against.
    pub const BASELINES: [Schedule; 4] = [
        Schedule::LayerWise,
        Schedule::SoftPipe,
        Schedule::Flat,
        Schedule::TileFlow,
    ];

    /// The command-line name, as accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::LayerWise => "layer-wise",
            Schedule::SoftPipe => "soft-pipe",
            Schedule::Flat => "flat",
            Schedule::TileFlow => "tileflow",
            Schedule::Mas => "mas",
        }
    }

    /// The name used in the paper's tables.
    pub fn title(self) -> &'static str {
        match self {
            Schedule::LayerWise => "Layer-Wise",
            Schedule::SoftPipe => "Soft-Pipe",
            Schedule::Flat => "FLAT",
            Schedule::TileFlow => "TileFlow",
            Schedule::Mas => "MAS-Attention",
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Schedule {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Schedule::ALL
            .into_iter()
            .find(|sch| sch.name() == s)
            .ok_or_else(|| SimError::UnknownSchedule(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_uses_the_same_names() {
        use serde::de::value::{Error, StrDeserializer};
        for s in Schedule::ALL {
            let name = StrDeserializer::<Error>::new(s.name());
            assert_eq!(Schedule::deserialize(name), Ok(s));
        }
    }

    #[test]
    fn names_round_trip() {
        for s in Schedule::ALL {
            assert_eq!(s.name().parse::<Schedule>(), Ok(s));
        }
        assert!(matches!(
            "fused".parse::<Schedule>(),
            Err(SimError::UnknownSchedule(_))
        ));
    }
}
