//! Attention workloads (Table 1 of the paper).

use serde::{Deserialize, Serialize};

use crate::error::SimError;

/// Largest head count accepted.
pub const MAX_HEADS: u32 = 4096;
/// Largest sequence length accepted. Longer rows do not fit the schedules'
/// L1 buffers anyway (§5.5 puts MAS's limit far above, but only with
/// single-row blocks whose task graphs would be far too large to simulate).
pub const MAX_SEQ: u32 = 1 << 16;
/// Largest per-head embedding accepted.
pub const MAX_HEAD_DIM: u32 = 1 << 14;

/// One attention layer: batch 1, `heads` heads, `seq` tokens, hidden size
/// `embed`. Each head attends with Q, K, V of `seq × embed/heads`: Table 1
/// lists both the hidden size and the per-head "Emb K,V", and the latter is
/// always hidden/heads, so §4's per-head `E` is `embed / heads`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// Display name.
    pub name: String,
    /// Attention heads (H).
    pub heads: u32,
    /// Sequence length (S, the paper's N).
    pub seq: u32,
    /// Hidden size (H × per-head embedding).
    pub embed: u32,
}

impl Workload {
    /// A validated workload.
    pub fn new(
        name: impl Into<String>,
        heads: u32,
        seq: u32,
        embed: u32,
    ) -> Result<Self, SimError> {
        let w = Self {
            name: name.into(),
            heads,
            seq,
            embed,
        };
        w.validate()?;
        Ok(w)
    }

    /// The 12 workloads of Table 1, in the table's order.
    pub fn table1() -> Vec<Workload> {
        const TABLE1: [(&str, u32, u32, u32); 12] = [
            ("BERT-Base & T5-Base", 12, 512, 768),
            ("BERT-Large & T5-Large", 16, 512, 1024),
            ("BERT-Small", 8, 512, 512),
            ("Llama3-8B & T5-3B (T5-XL)", 32, 512, 4096),
            ("T5-Mini & T5-Small", 8, 512, 256),
            ("ViT-B/14", 12, 196, 768),
            ("ViT-L/14", 16, 196, 1024),
            ("ViT-H/14", 16, 196, 1280),
            ("ViT-B/16", 12, 256, 768),
            ("ViT-L/16", 16, 256, 1024),
            ("ViT-H/16", 16, 256, 1280),
            ("XLM", 8, 512, 1024),
        ];
        TABLE1
            .iter()
            .map(|&(name, heads, seq, embed)| Workload {
                name: name.to_string(),
                heads,
                seq,
                embed,
            })
            .collect()
    }

    /// Parses `"H,S,E"` (heads, sequence length, hidden size), e.g.
    /// `"12,512,768"`. Whitespace around the numbers is ignored.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        let [h, s, e] = fields.as_slice() else {
            return Err(SimError::Parse(format!(
                "expected three comma-separated numbers H,S,E, got `{text}`"
            )));
        };
        let number = |what: &str, field: &str| {
            field.parse::<u32>().map_err(|_| {
                SimError::Parse(format!("{what} `{field}` is not a non-negative integer"))
            })
        };
        let (heads, seq, embed) = (number("H", h)?, number("S", s)?, number("E", e)?);
        Self::new(format!("H={heads} S={seq} E={embed}"), heads, seq, embed)
    }

    /// Per-head embedding `E / H`.
    pub fn head_dim(&self) -> u32 {
        self.embed / self.heads.max(1)
    }

    /// Checks the bounds that keep a simulation finite and its arithmetic
    /// exact.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |why: String| Err(SimError::InvalidWorkload(format!("{}: {why}", self.name)));
        if self.heads == 0 || self.seq == 0 || self.embed == 0 {
            return bad("heads, sequence length and hidden size must be positive".into());
        }
        if self.heads > MAX_HEADS {
            return bad(format!(
                "{} heads exceed the limit of {MAX_HEADS}",
                self.heads
            ));
        }
        if self.seq > MAX_SEQ {
            return bad(format!(
                "sequence length {} exceeds the limit of {MAX_SEQ}",
                self.seq
            ));
        }
        if !self.embed.is_multiple_of(self.heads) {
            return bad(format!(
                "hidden size {} is not a multiple of the {} heads",
                self.embed, self.heads
            ));
        }
        if self.head_dim() > MAX_HEAD_DIM {
            return bad(format!(
                "per-head embedding {} exceeds the limit of {MAX_HEAD_DIM}",
                self.head_dim()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table1_head_dims_match_the_table() {
        let dims: Vec<u32> = Workload::table1().iter().map(Workload::head_dim).collect();
        assert_eq!(dims, [64, 64, 64, 128, 32, 64, 64, 80, 64, 64, 80, 128]);
        assert!(Workload::table1().iter().all(|w| w.validate().is_ok()));
    }

    #[test]
    fn parse_accepts_h_s_e() {
        let w = Workload::parse(" 12, 512 ,768").unwrap();
        assert_eq!((w.heads, w.seq, w.embed, w.head_dim()), (12, 512, 768, 64));
    }

    #[test]
    fn parse_rejects_bad_input() {
        for text in [
            "",
            "12,512",
            "12,512,768,1",
            "a,512,768",
            "-1,512,768",
            "12,512,7.5",
        ] {
            assert!(
                matches!(Workload::parse(text), Err(SimError::Parse(_))),
                "{text}"
            );
        }
        for text in [
            "0,512,768",
            "12,0,768",
            "12,512,0",
            "5,512,768",
            "8,99999999,512",
        ] {
            assert!(
                matches!(Workload::parse(text), Err(SimError::InvalidWorkload(_))),
                "{text}"
            );
        }
    }
}
