//! Prints Table 2 of the paper beside this simulator's reproduction.
//!
//! `cargo run --release --example table2`

use ircc_attention_sim::{Accelerator, SearchOptions, table2};

fn main() -> Result<(), ircc_attention_sim::SimError> {
    let table = table2(&Accelerator::default(), &SearchOptions::default())?;
    print!("{table}");
    Ok(())
}
