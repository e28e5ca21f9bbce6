//! The delayed seed (`docs/contract.md`, "The delayed seed"): with `verification.delay_squarings`
//! > 0 the close of `reveal` stops after the seed, phase `delay` waits for a VDF output over it
//! (nothing else closes it), and that output's seed picks every host's challenges for all of its
//! pickers at once.

use num_bigint::BigUint;
use num_traits::One;

use super::*;
use crate::sampling::picks;
use crate::vdf;

const SQUARINGS: u64 = 16;

/// The RSA-2048 modulus (`vdf::decode` bounds elements by half of it).
fn modulus() -> BigUint {
    // N from the shared vectors (decimal).
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/vdf.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    BigUint::parse_bytes(v["modulus"].as_str().unwrap().as_bytes(), 10).unwrap()
}

fn canonical(a: BigUint, n: &BigUint) -> BigUint {
    let b = n - &a;
    a.min(b)
}

fn enc(a: &BigUint) -> String {
    let text = a.to_str_radix(16);
    format!("{}{}", "0".repeat(512 - text.len()), text)
}

/// The VDF output over `seed_hex` and its proof, computed the slow way (`T` squarings).
fn output_and_proof(seed_hex: &str, squarings: u64) -> (BigUint, String, String) {
    let n = modulus();
    let seed: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&seed_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let x = vdf::input_element(&seed);
    let power = BigUint::one() << squarings as usize;
    let y = canonical(x.modpow(&power, &n), &n);
    let ell = vdf::challenge_prime(&x, &y, squarings).unwrap();
    let proof = canonical(x.modpow(&(&power / &ell), &n), &n);
    (y.clone(), enc(&y), enc(&proof))
}

fn delayed_spec() -> String {
    spec_with(json!({"train": {"inner_steps": 16, "segment_steps": 2},
                     "verification": {"challenges_k": 2, "delay_squarings": SQUARINGS}}))
}

/// Everyone joins, every host commits its 8 segments, everyone reveals: the close of `reveal`
/// runs to the seed.
fn play_to_delay(net: &mut Net) {
    for who in net.everyone() {
        net.join(&who);
    }
    for h in net.hosts.clone() {
        let msg = net.commit_msg(&h, 8);
        net.chain.ok(&h, msg);
    }
    for who in net.everyone() {
        net.reveal(&who);
    }
    net.settle();
}

#[test]
fn the_delay_phase_waits_for_a_valid_output_whose_seed_picks_for_every_picker() {
    let mut net = Net::new(&delayed_spec(), 2, 6);
    play_to_delay(&mut net);
    let info = net.info();
    assert_eq!(info["phase"], "delay");
    assert!(info["delayed_seed"].is_null());
    let seed = info["seed"].as_str().unwrap().to_string();
    assert!(net.challenges(&net.validators[0]).is_empty());

    // Past its window nothing closes it: only an output does.
    net.chain.wait_past_deadline();
    let refusal = net.chain.refused(&net.hosts[0], json!({"advance": {}}));
    assert!(refusal.contains("nothing is due"), "{refusal}");
    assert_eq!(net.phase(), "delay");

    let (y, output, proof) = output_and_proof(&seed, SQUARINGS);
    let outsider = net.chain.addr("anyone");
    let n = modulus();
    let post = |output: &str, proof: &str, epoch: u64| json!({"delayed_seed": {"epoch": epoch, "output": output, "proof": proof}});
    // Another output, the same output spelled as N − y, the wrong epoch, a truncated proof.
    let other = enc(&canonical(&y + 1u32, &n));
    for (msg, why) in [
        (post(&other, &proof, 0), "the proof does not show"),
        (post(&enc(&(&n - &y)), &proof, 0), "512 lowercase hex"),
        (post(&output, &proof[..510], 0), "512 lowercase hex"),
        (post(&output.to_uppercase(), &proof, 0), "512 lowercase hex"),
        (post(&output, &proof, 1), "epoch 1"),
    ] {
        let refusal = net.chain.refused(&outsider, msg);
        assert!(refusal.contains(why), "{why}: {refusal}");
    }
    // A proof for another delay does not verify at this one.
    let (_, output_17, proof_17) = output_and_proof(&seed, SQUARINGS + 1);
    let refusal = net.chain.refused(&outsider, post(&output_17, &proof_17, 0));
    assert!(refusal.contains("the proof does not show"), "{refusal}");

    // Anyone may post the one valid output: the challenges follow.
    let response = net.chain.ok(&outsider, post(&output, &proof, 0));
    let delayed = hex(&vdf::delayed_seed(&y));
    assert_eq!(top_attr(&response, "delayed_seed"), Some(delayed.as_str()));
    net.settle();
    assert_eq!(net.phase(), "verify");
    assert_eq!(net.info()["delayed_seed"].as_str(), Some(delayed.as_str()));
    let refusal = net.chain.refused(&outsider, post(&output, &proof, 0));
    assert!(refusal.contains("delayed_seed"), "{refusal}");

    // Each host's challenges: the delayed seed's k picks and the last segment, each seated by
    // every picker (the same seats on all k + 1).
    let seed_bytes: [u8; 32] = {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&delayed[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    };
    let mut seats: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for v in net.validators.clone() {
        for c in net.challenges(&v) {
            let key = (
                c["host"].as_str().unwrap().to_string(),
                c["segment"].as_u64().unwrap(),
            );
            seats.entry(key).or_default().insert(v.clone());
        }
    }
    for h in net.hosts.clone() {
        let mut want: Vec<u64> = picks(&seed_bytes, &h, 8, 2)
            .into_iter()
            .map(u64::from)
            .collect();
        want.push(7);
        let mine: Vec<(&u64, &BTreeSet<String>)> = seats
            .iter()
            .filter(|((host, _), _)| *host == h)
            .map(|((_, g), s)| (g, s))
            .collect();
        assert_eq!(
            mine.iter().map(|(g, _)| **g).collect::<Vec<u64>>(),
            want,
            "{h}"
        );
        assert!(
            mine[0].1.len() >= 3,
            "six equal stakes: at least three pickers"
        );
        assert!(mine.iter().all(|(_, s)| *s == mine[0].1), "{h}: {mine:?}");
    }

    // The epoch settles as any other: honest verdicts, a model, funds on the books.
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
    let report = net.chain.report(0);
    for h in net.hosts.clone() {
        assert_eq!(row(&report, "hosts", &h)["outcome"], "accepted");
    }
}

#[test]
fn a_settling_epoch_waits_in_delay_while_the_next_one_trains() {
    let spec = spec_with(json!({"phases": {"pipelined": true, "reveal_blocks": 1000},
                                "train": {"inner_steps": 16, "segment_steps": 2},
                                "verification": {"challenges_k": 2, "delay_squarings": SQUARINGS}}));
    let mut net = Net::new(&spec, 2, 3);
    play_to_delay(&mut net);
    assert_eq!(net.phase(), "delay");
    let seed = net.info()["seed"].as_str().unwrap().to_string();
    // The seed is fixed: the hosts open epoch 1 from the optimistic start, which trains.
    net.propose_start_all(&digest("opt 1"));
    assert_eq!(net.chain.epoch()["settling"].as_u64(), Some(0));
    for who in net.everyone() {
        net.join(&who);
    }
    assert_eq!(net.chain.epoch()["phase"], "train");
    // Epoch 0's output, posted while epoch 1 trains, assigns epoch 0's challenges.
    let (_, output, proof) = output_and_proof(&seed, SQUARINGS);
    let msg = json!({"delayed_seed": {"epoch": 0, "output": output, "proof": proof}});
    net.chain.ok(&net.validators[1].clone(), msg);
    net.focus = Some(0);
    net.settle();
    assert_eq!(net.phase(), "verify");
    assert!(
        !net.challenges(&net.validators[0]).is_empty()
            || !net.challenges(&net.validators[1]).is_empty()
    );
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
}

#[test]
fn past_its_fallback_window_the_challenges_are_each_pickers_own_and_a_late_output_is_refused() {
    let spec = spec_with(json!({"train": {"inner_steps": 16, "segment_steps": 2},
                                "verification": {"challenges_k": 2, "delay_squarings": SQUARINGS,
                                                 "delay_blocks": 20}}));
    let mut net = Net::new(&spec, 2, 6);
    play_to_delay(&mut net);
    let info = net.info();
    assert_eq!(info["phase"], "delay");
    let seed = info["seed"].as_str().unwrap().to_string();
    // Within the window nothing is due; past it, advance closes `delay` without an output.
    let refusal = net.chain.refused(&net.hosts[0], json!({"advance": {}}));
    assert!(refusal.contains("nothing is due"), "{refusal}");
    net.chain.wait_past_deadline();
    let (_, output, proof) = output_and_proof(&seed, SQUARINGS);
    let late = json!({"delayed_seed": {"epoch": 0, "output": output, "proof": proof}});
    let refusal = net.chain.refused(&net.validators[0].clone(), late);
    assert!(refusal.contains("delayed_seed"), "{refusal}");
    net.chain.ok(&net.hosts[0].clone(), json!({"advance": {}}));
    net.settle();
    assert_eq!(net.phase(), "verify");
    assert!(net.info()["delayed_seed"].is_null());
    // Every seat on a segment other than the last is one of that picker's own picks.
    for v in net.validators.clone() {
        for c in net.challenges(&v) {
            let (host, g) = (c["host"].as_str().unwrap(), c["segment"].as_u64().unwrap());
            if g != 7 {
                let own: Vec<u64> = picks(&secret(&v), host, 8, 2)
                    .into_iter()
                    .map(u64::from)
                    .collect();
                assert!(
                    own.contains(&g),
                    "{v} seated on {host}/{g}, not its own pick {own:?}"
                );
            }
        }
    }
    net.play_verdicts(&honest);
    assert_eq!(net.phase(), "propose");
}

#[test]
fn a_delay_past_the_largest_is_refused_with_the_spec() {
    let spec = spec_with(json!({"verification": {"delay_squarings": (1u64 << 40) + 1}}));
    let chain = MockDeps::default();
    let treasury = chain.api.addr("treasury");
    let msg = json!({"spec_json": spec, "initial_model_hash": hex(&[0u8; 32]),
                     "denom": DENOM, "treasury": treasury});
    let mut deps = chain;
    let env: Env = serde_json::from_value(json!({
        "block": {"height": 1, "time": "1000000000", "chain_id": "test-1"},
        "transaction": {"index": 0},
        "contract": {"address": "contract"}}))
    .unwrap();
    let info: MessageInfo =
        serde_json::from_value(json!({"sender": "operator", "funds": []})).unwrap();
    let err = contract::instantiate(deps.as_mut(), env, info, parse(msg)).unwrap_err();
    assert!(err.to_string().contains("delay_squarings"), "{err}");
}
