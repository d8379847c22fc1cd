//! A `ChaCha8Rng` in a state file: its seed, stream and word position, so a restarted
//! server goes on drawing the numbers the old one would have drawn next.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
struct RngState {
    seed: String,
    stream: u64,
    /// A decimal string: the word position is a u128, which JSON numbers cannot hold.
    word_pos: String,
}

/// Write `rng` as seed, stream and word position (for `#[serde(with = "rng_state")]`).
pub fn serialize<S: Serializer>(rng: &ChaCha8Rng, s: S) -> Result<S::Ok, S::Error> {
    RngState {
        seed: hex::encode(rng.get_seed()),
        stream: rng.get_stream(),
        word_pos: rng.get_word_pos().to_string(),
    }
    .serialize(s)
}

/// Read back a generator written by `serialize`, at the same position.
///
/// # Errors
/// A seed that is not 32 bytes of hex, or a word position that is not a number.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ChaCha8Rng, D::Error> {
    use serde::de::Error;
    let st = RngState::deserialize(d)?;
    let seed: [u8; 32] = hex::decode(&st.seed)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| D::Error::custom("rng seed is not 32 bytes of hex"))?;
    let pos: u128 = st
        .word_pos
        .parse()
        .map_err(|_| D::Error::custom("rng word_pos is not a number"))?;
    let mut rng = ChaCha8Rng::from_seed(seed);
    rng.set_stream(st.stream);
    rng.set_word_pos(pos);
    Ok(rng)
}
