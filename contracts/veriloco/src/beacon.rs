//! The commit-reveal randomness beacon, byte for byte as `docs/protocol.md` ("Beacon and
//! seeds") and `protocol/rules/beacon.py`.

use crate::hashing::{tag, tagged_hash, u64be};

/// `H("beacon/commit", utf8(address) || 0x00 || u64be(epoch) || secret)`.
pub fn commitment(address: &str, epoch: u64, secret: &[u8; 32]) -> [u8; 32] {
    tagged_hash(
        tag::BEACON_COMMIT,
        &[address.as_bytes(), &[0u8], &u64be(epoch), secret],
    )
}

/// `H("beacon/seed", run_id || u64be(epoch) || utf8(a_1) || 0x00 || s_1 || ...)` over the valid
/// reveals; `reveals` must be in ascending address order (storage order gives exactly that).
pub fn epoch_seed(run_id: &[u8; 32], epoch: u64, reveals: &[(String, [u8; 32])]) -> [u8; 32] {
    let epoch_bytes = u64be(epoch);
    let mut parts: Vec<&[u8]> = vec![run_id, &epoch_bytes];
    for (address, secret) in reveals {
        parts.push(address.as_bytes());
        parts.push(&[0u8]);
        parts.push(secret);
    }
    tagged_hash(tag::BEACON_SEED, &parts)
}

/// The "previous epoch seed" of epoch 0: `H("beacon/genesis", run_id)`.
pub fn genesis_seed(run_id: &[u8; 32]) -> [u8; 32] {
    tagged_hash(tag::BEACON_GENESIS, &[run_id])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::hex;
    use crate::hashing::tests::{unhex, vectors};

    fn b32(text: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(&unhex(text));
        out
    }

    #[test]
    fn commitments_match_vectors() {
        let v = vectors("beacon");
        let commits = v["commits"].as_array().unwrap();
        assert!(!commits.is_empty());
        for c in commits {
            let got = commitment(
                c["address"].as_str().unwrap(),
                c["epoch"].as_u64().unwrap(),
                &b32(c["secret"].as_str().unwrap()),
            );
            assert_eq!(hex(&got), c["commit"].as_str().unwrap());
        }
    }

    #[test]
    fn seeds_match_vectors() {
        let v = vectors("beacon");
        let seeds = v["epoch_seeds"].as_array().unwrap();
        assert!(!seeds.is_empty());
        for case in seeds {
            let mut reveals: Vec<(String, [u8; 32])> = case["reveals"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["address"].as_str().unwrap().to_string(),
                        b32(r["secret"].as_str().unwrap()),
                    )
                })
                .collect();
            reveals.sort_by(|a, b| a.0.cmp(&b.0));
            let got = epoch_seed(
                &b32(case["run_id"].as_str().unwrap()),
                case["epoch"].as_u64().unwrap(),
                &reveals,
            );
            assert_eq!(hex(&got), case["seed"].as_str().unwrap());
        }
        let g = &v["genesis"];
        assert_eq!(
            hex(&genesis_seed(&b32(g["run_id"].as_str().unwrap()))),
            g["seed"].as_str().unwrap()
        );
    }
}
